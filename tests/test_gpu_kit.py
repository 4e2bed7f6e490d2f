"""The GPU kit (benchmarks/gpu/kit.py) and its run script (benchmarks/gpu/run.sh): parts that fit one call
to the GPU machine, joined and checked there, and a run that works in a clean environment holding only
the GPU machine's packages plus the kit (slow: it builds that environment and runs the pipeline on CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from benchmarks.gpu import kit
from tests.conftest import REPO
from udr.util.files import file_sha256


def _fake_kit(tmp_path: Path, payload: bytes, part_mib: float) -> Path:
    """A kit folder whose tar holds `payload`, split into parts of `part_mib` MiB."""
    import tarfile

    content = tmp_path / "content" / "kit"
    content.mkdir(parents=True)
    (content / "payload.bin").write_bytes(payload)
    tar = tmp_path / "kit.tar"
    with tarfile.open(tar, "w") as tf:
        tf.add(content, arcname="kit")
    return _kit_of(tmp_path, tar, part_mib)


def _kit_of(tmp_path: Path, tar: Path, part_mib: float = 1) -> Path:
    """A kit folder of the tar file `tar`: its parts and index."""
    out = tmp_path / "gpukit"
    parts = kit.split(tar, out / "parts", part_mib)
    index = {"created": "now", "small": True, "tar_sha256": file_sha256(tar), "parts": parts}
    (out / "index.json").write_text(json.dumps(index))
    return out


def test_parts_join_back_into_the_kit_from_the_calls_and_the_stash(tmp_path, monkeypatch):
    payload = os.urandom(3 * 2**20 + 123)
    out = _fake_kit(tmp_path, payload, 1)
    parts = sorted((out / "parts").iterdir())
    assert len(parts) == 4 and all(p.stat().st_size <= 2**20 for p in parts)
    # Earlier calls stashed parts 1-3; the last call carries part 4 only.
    stash = tmp_path / "stash"
    monkeypatch.setattr(kit, "STASH", stash)
    stash.mkdir()
    for p in parts[:3]:
        (stash / p.name).write_bytes(p.read_bytes())
        p.unlink()
    assert kit.main(["unpack", "--kit", str(out), str(tmp_path / "there")]) == 0
    assert (tmp_path / "there" / "kit" / "payload.bin").read_bytes() == payload


def test_a_missing_or_altered_part_stops_the_unpack(tmp_path, monkeypatch):
    out = _fake_kit(tmp_path, os.urandom(2**20 + 5), 1)
    monkeypatch.setattr(kit, "STASH", tmp_path / "stash")
    (out / "parts" / "part-02").write_bytes(b"x")  # altered: its size and sha256 no longer match
    with pytest.raises(SystemExit, match="parts missing.*part-02"):
        kit.main(["unpack", "--kit", str(out), str(tmp_path / "there")])


@pytest.mark.parametrize("index", ["{not json", "[1, 2]", '{"parts": "part-01", "tar_sha256": "x"}'])
def test_an_index_that_is_not_a_kits_is_a_one_line_error(tmp_path, monkeypatch, index):
    out = _fake_kit(tmp_path, b"payload", 1)
    monkeypatch.setattr(kit, "STASH", tmp_path / "stash")
    (out / "index.json").write_text(index)
    for args in (["unpack", "--kit", str(out), str(tmp_path / "there")], ["stash", "--kit", str(out)]):
        with pytest.raises(SystemExit, match=r"^kit: (unreadable|malformed) kit index .*index.json: ") as info:
            kit.main(args)
        assert "\n" not in str(info.value.code)
    assert not (tmp_path / "there").exists()


@pytest.mark.parametrize("member", ["dotdot", "absolute link"])
def test_a_crafted_kit_is_refused_with_nothing_extracted_and_no_tar_left(tmp_path, monkeypatch, member):
    """A kit whose tar holds a member leading out of the destination (`../`) or an absolute symbolic link
    is a one-line error before anything is extracted, and the joined tar is removed."""
    import io
    import tarfile

    tar = tmp_path / "crafted.tar"
    with tarfile.open(tar, "w") as tf:
        ok = tarfile.TarInfo("kit/fine.txt")
        ok.size = 2
        tf.addfile(ok, io.BytesIO(b"ok"))
        if member == "dotdot":
            bad = tarfile.TarInfo("../escaped.txt")
            bad.size = 4
            tf.addfile(bad, io.BytesIO(b"evil"))
        else:
            bad = tarfile.TarInfo("kit/passwd")
            bad.type, bad.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tf.addfile(bad)
    out = _kit_of(tmp_path, tar)
    monkeypatch.setattr(kit, "STASH", tmp_path / "stash")
    dest = tmp_path / "deep" / "there"
    with pytest.raises(SystemExit, match=r"^kit: refused kit.tar: .*; pack the kit again$"):
        kit.main(["unpack", "--kit", str(out), str(dest)])
    assert sorted(p.name for p in dest.iterdir()) == []  # no joined tar, nothing extracted
    assert not (tmp_path / "deep" / "escaped.txt").exists()


def test_a_truncated_kit_tar_leaves_no_joined_tar(tmp_path, monkeypatch):
    tar = tmp_path / "short.tar"
    tar.write_bytes(b"not a tar at all" * 64)
    out = _kit_of(tmp_path, tar)
    monkeypatch.setattr(kit, "STASH", tmp_path / "stash")
    with pytest.raises(SystemExit, match=r"^kit: unreadable kit.tar: "):
        kit.main(["unpack", "--kit", str(out), str(tmp_path / "there")])
    assert list((tmp_path / "there").iterdir()) == []


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"step": "score", "status": "ok"', r"unreadable steps file .*steps.jsonl:2: "),
        ("[1, 2]", r"unreadable steps file .*steps.jsonl:2: expected a JSON object"),
        ('{"status": "ok"}', r"malformed steps file .*steps.jsonl: record 2 needs a step name"),
        ('{"step": "score", "seconds": "slow"}', r"malformed steps file .*steps.jsonl: record 2"),
        ('{"step": "facts", "facts": [1]}', r"malformed steps file .*steps.jsonl: record 2"),
    ],
)
def test_a_malformed_steps_file_is_a_one_line_error(tmp_path, line, message):
    steps = tmp_path / "steps.jsonl"
    steps.write_text('{"step": "facts", "status": "ok", "facts": {"gpu": "H100"}}\n' + line + "\n")
    with pytest.raises(SystemExit, match=rf"^kit: {message}") as info:
        kit.main(["table", str(steps), str(tmp_path / "gpu-run.md")])
    assert "\n" not in str(info.value.code)


def test_the_table_lists_every_step_and_the_benchmarks_tables(tmp_path):
    steps = tmp_path / "steps.jsonl"
    records = [
        {"step": "facts", "status": "ok", "facts": {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0"}},
        {"step": "score-torchrun", "status": "ok", "seconds": 12.5, "note": "scored 7680 pairs"},
        {"step": "train-torchrun", "status": "failed", "seconds": 3.0, "note": "RuntimeError: NCCL | boom"},
        {"step": "bench-scoring", "status": "ok", "seconds": 40.0, "note": "", "table": "| a |\n| --- |\n| 1 |"},
    ]
    steps.write_text("".join(json.dumps(r) + "\n" for r in records))
    kit.main(["table", str(steps), str(tmp_path / "gpu-run.md")])
    text = (tmp_path / "gpu-run.md").read_text()
    assert text.startswith("# udr's CUDA path on NVIDIA H100 80GB HBM3")
    assert "| score-torchrun | ok | 12.5 | scored 7680 pairs |" in text
    assert "| train-torchrun | failed | 3.0 | RuntimeError: NCCL \\| boom |" in text
    assert "## bench-scoring\n\n| a |" in text


def test_the_table_into_a_directory_is_a_one_line_error_before_the_steps_are_read(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(SystemExit, match=r"^kit: OUT .*out is a directory: give a file path$") as info:
        kit.main(["table", str(tmp_path / "no-steps.jsonl"), str(tmp_path / "out")])
    assert "\n" not in str(info.value.code)


def test_unpack_never_writes_through_a_kit_tar_link_already_in_dest(tmp_path, monkeypatch):
    out = _fake_kit(tmp_path, b"payload", 1)
    monkeypatch.setattr(kit, "STASH", tmp_path / "stash")
    dest = tmp_path / "there"
    dest.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (dest / "kit.tar").symlink_to(victim)
    with pytest.raises(SystemExit, match=r"^kit: cannot write .*kit.tar: .*; remove it first$") as info:
        kit.main(["unpack", "--kit", str(out), str(dest)])
    assert "\n" not in str(info.value.code)
    assert victim.read_text() == "keep me" and (dest / "kit.tar").is_symlink()
    assert not (dest / "kit").exists()


def _gpu_like_venv(path: Path) -> Path:
    """A clean virtual environment with only the GPU machine's packages (CPU torch for its CUDA build)."""
    venv.create(path, with_pip=True)
    python = path / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, os.environ.get("UDR_KIT_TORCH", "torch==2.13.0")], check=True)
    subprocess.run([*pip, "-r", str(REPO / "benchmarks" / "gpu" / "machine-packages.txt")], check=True)
    return python


@pytest.mark.slow
def test_the_run_script_runs_the_pipeline_in_a_clean_gpu_like_environment(tmp_path):
    python = _gpu_like_venv(tmp_path / "venv")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    packed = subprocess.run(
        [sys.executable, "benchmarks/gpu/kit.py", "pack", "--small", "--python", version, "--out", str(tmp_path / "k")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    index = json.loads((tmp_path / "k" / "index.json").read_text())
    limit = kit.CALL_LIMIT_MIB * 2**20
    assert all(p["bytes"] + kit.tree_mib() * 2**20 + 2**20 <= limit for p in index["parts"]), packed.stdout
    assert "benchmarks/gpu/run.sh --kit" in packed.stdout  # the list of calls

    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env["PYTHON"] = str(python)
    run = subprocess.run(
        ["bash", "benchmarks/gpu/run.sh", "--kit", str(tmp_path / "k"), "--device", "cpu", "--budget", "1500"]
        + ["--out", str(out), "--work", str(tmp_path / "work"), "--no-bench"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
    )
    steps = {r["step"]: r for r in map(json.loads, (out / "steps.jsonl").read_text().splitlines())}
    want = ["unpack", "install", "imports", "models", "candidates", "score-torchrun", "train-torchrun", "index"]
    want += ["evaluate-bm25", "evaluate-udr", "udr-vs-bm25"]
    assert {s: steps.get(s, {}).get("status") for s in want} == dict.fromkeys(want, "ok"), run.stdout[-3000:]
    assert run.returncode == 0
    assert "| udr-vs-bm25 | ok |" in (out / "gpu-run.md").read_text()
