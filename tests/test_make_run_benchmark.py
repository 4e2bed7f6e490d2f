"""benchmarks/make_run.sh and make_run_times.py: the default run's time stage by stage, per CPU kind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIMES = ROOT / "benchmarks" / "make_run_times.py"
MAKE_RUN = ROOT / "benchmarks" / "make_run.sh"


def _times(log: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TIMES), str(log)], capture_output=True, text=True, timeout=60)


def _rows(stdout: str) -> dict[str, list[str]]:
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in stdout.splitlines() if line.startswith("| ")]
    return {cells[0]: cells[1:] for cells in rows[2:]}  # after the header and its rule


def test_each_stage_runs_until_the_next_one_starts(tmp_path):
    log = tmp_path / "make-run.log"
    log.write_text(
        "1000 .venv/bin/pip install torch\n"
        "1120 Running stage 'prepare@sst2':\n"
        "1126 Running stage 'prepare@trec':\n"
        "1130 Running stage 'train_epr@sst2':\n"
        # a progress bar's carriage returns stay in their line
        "1200 \rtraining 1/63\rtraining 63/63\n"
        "1310 Running stage 'train_epr@trec':\n"
        "1490 Running stage 'evaluate@udr':\n"
        "1790 Running stage 'evaluate@bm25':\n"
        "2090 \tElapsed (wall clock) time (h:mm:ss or m:ss): 18:30\n"
    )
    out = _times(log)
    assert out.returncode == 0, out.stderr
    rows = _rows(out.stdout)
    assert list(rows) == ["install", "prepare", "train_epr", "evaluate@udr", "evaluate@bm25", "total"]
    assert rows["install"] == ["", "2.0"]
    assert rows["prepare"] == ["2", "0.2"]  # 6 + 4 s
    assert rows["train_epr"] == ["2", "6.0"]  # 180 + 180 s
    assert rows["evaluate@udr"] == ["1", "5.0"]
    assert rows["evaluate@bm25"] == ["1", "5.0"]  # until the log's last line
    assert rows["total"] == ["6", "18.5"]  # /usr/bin/time's elapsed, not the stamps' span
    assert "Skipped" not in out.stdout


def test_skipped_stages_are_named(tmp_path):
    log = tmp_path / "make-run.log"
    log.write_text(
        "10 Running stage 'train':\n"
        "70 Stage 'evaluate@random' didn't change, skipping\n"
        "70 Running stage 'evaluate@udr':\n"
        "130 done\n"
    )
    out = _times(log)
    assert out.returncode == 0, out.stderr
    assert _rows(out.stdout)["total"] == ["2", "2.0"]  # no elapsed line: the stamps' span
    assert out.stdout.rstrip().endswith("Skipped as unchanged, their outputs current (1): evaluate@random")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "the log is empty"),
        ("100 pip install\n200 done\n", 'no "Running stage" line'),
        ("Running stage 'train':\n", "line 1 does not start with a stamp in epoch seconds"),
    ],
)
def test_a_log_it_cannot_read_is_one_line_and_a_failure(tmp_path, text, reason):
    log = tmp_path / "make-run.log"
    log.write_text(text)
    out = _times(log)
    assert out.returncode == 1
    assert out.stdout == ""
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"benchmarks/make_run_times.py: error: {log}: {reason}")


def _fake_make(tmp_path: Path, rc: int) -> dict[str, str]:
    """PATH with a `make` that prints two stages and exits with `rc`, instead of the 50-90 minute run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    make = bin_dir / "make"
    make.write_text(f"#!/bin/sh\necho \"Running stage 'train':\"\necho \"Running stage 'evaluate@udr':\"\nexit {rc}\n")
    make.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHON": sys.executable}


@pytest.mark.parametrize("rc", [0, 2])
def test_make_run_times_a_clean_clone(tmp_path, rc):
    clone = tmp_path / "clone"
    out = subprocess.run(
        ["bash", str(MAKE_RUN), str(clone)], env=_fake_make(tmp_path, rc), capture_output=True, text=True, timeout=120
    )
    assert (clone / ".git").is_dir() and (clone / "make-run.log").is_file()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if rc:
        assert out.returncode == 1
        assert (
            out.stderr.strip()
            == f"benchmarks/make_run.sh: error: make run failed (exit {rc}); its log: {clone}/make-run.log"
        )
        return
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("# CPU: ") and f"commit {head.stdout.strip()}" in out.stdout.splitlines()[0]
    assert list(_rows(out.stdout)) == ["install", "train", "evaluate@udr", "total"]
    # a second run into the same directory is refused before anything is written
    again = subprocess.run(["bash", str(MAKE_RUN), str(clone)], capture_output=True, text=True, timeout=60)
    assert again.returncode == 1
    assert (
        again.stderr.strip()
        == f"benchmarks/make_run.sh: error: {clone} exists; give a new directory beside the checkout"
    )


def test_twice_times_the_run_again_with_the_first_runs_results_committed(tmp_path):
    """TWICE=1: the first clone commits what its run wrote, and the second clone is of that commit."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    make = bin_dir / "make"  # writes a result where the clone has none yet, as a first run on a CPU kind does
    make.write_text(
        "#!/bin/sh\nif [ ! -f metrics/kind.txt ]; then echo ran > metrics/kind.txt; fi\n"
        "echo \"Running stage 'train':\"\n"
    )
    make.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHON": sys.executable, "TWICE": "1"}
    clone = tmp_path / "clone"
    (tmp_path / "clone-results").mkdir()
    refused = subprocess.run(["bash", str(MAKE_RUN), str(clone)], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "clone-results exists" in refused.stderr and not clone.exists()
    (tmp_path / "clone-results").rmdir()
    out = subprocess.run(["bash", str(MAKE_RUN), str(clone)], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("# CPU: ") == 2 and out.stdout.count("| total |") == 2
    first, second = (line.split("commit ")[1].split(";")[0] for line in out.stdout.splitlines() if "# CPU" in line)
    kept = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    assert second == kept.stdout.strip() != first
    assert (tmp_path / "clone-results" / "metrics" / "kind.txt").read_text() == "ran\n"


def test_stages_run_at_once_add_their_own_seconds(tmp_path):
    log = tmp_path / "make-run.log"
    log.write_text(
        "1000 .venv/bin/pip install torch\n"
        "1060 Running stage 'precision':\n"
        "1066 Stage 'prepare@sst2' didn't change, skipping\n"
        "1070 7 stage(s) may run, 2 at a time (each stage's output: .dvc/tmp/repro/<stage>.log)\n"
        "1100 [1/7] prepare@sst2: unchanged (1.5s)\n"
        "1190 [2/7] train_epr@sst2: ran (120.0s)\n"
        "1250 [3/7] train_dr_target@sst2: ran (180.0s)\n"
        "1310 [4/7] train_epr@trec: ran (120.0s)\n"
        "1400 \tElapsed (wall clock) time (h:mm:ss or m:ss): 6:40\n"
    )
    out = _times(log)
    assert out.returncode == 0, out.stderr
    rows = _rows(out.stdout)
    assert list(rows) == ["install", "precision", "train_epr", "train_dr_target", "total"]
    assert rows["install"] == ["", "1.0"]
    assert rows["precision"] == ["1", "0.2"]  # until the stages at once began
    assert rows["train_epr"] == ["2", "4.0"]  # each stage's own seconds, added up
    assert rows["train_dr_target"] == ["1", "3.0"]
    assert rows["total"] == ["4", "6.7"]
    assert "prepare@sst2" in out.stdout.splitlines()[-1]
