"""udr.retriever.training: two rounds of Algorithm 1 through the CLI on tiny models (every round's
outputs, resume, single-task training, round errors, torchrun)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import polars as pl
import pytest

from tests.conftest import REPO
from tests.retriever.conftest import LOOP_TASKS as TASKS


def test_loop_writes_every_round(looped):
    root = looped
    for n in (0, 1):
        assert (root / f"models/rounds/round{n}/udr_encoder.json").is_file()
        summary = json.loads((root / f"metrics/train/round{n}/summary.json").read_text())
        assert summary["steps"] >= 1 and np.isfinite(summary["loss_start"]) and np.isfinite(summary["loss_end"])
        assert (root / f"metrics/train/round{n}/loss.png").stat().st_size > 0
        assert (root / f"metrics/train/round{n}/plots/metrics/train/loss.tsv").is_file()
    assert not list((root / "models/rounds").glob(".*partial"))  # checkpoints removed when done
    for task in TASKS:
        mined = pl.read_parquet(root / f"data/candidates/round1/{task}.parquet")
        assert set(mined.columns) == {"query_id", "candidate_id", "rank", "score", "new"}
        report = json.loads((root / f"data/candidates/round1/{task}.json").read_text())
        assert report["mined"] == 8 * 4 and report["new"] == int(mined["new"].sum())
        # every previous candidate of the scored queries is kept
        prev = pl.read_parquet(root / f"data/candidates/round0/{task}.parquet")
        prev = prev.filter(pl.col("query_id").is_in(mined["query_id"].unique().to_list()))
        assert len(prev.join(mined, on=["query_id", "candidate_id"], how="anti")) == 0
        scores1 = json.loads((root / f"data/scores/round1/{task}.json").read_text())
        assert scores1["reused"] == len(prev) and scores1["scored"] == report["new"]
        index = np.load(root / f"models/final/index/{task}.npy")
        assert index.shape == (24, 32)


def test_training_moves_the_model(looped):
    from udr.retriever.encoder import BiEncoder

    texts = ["some query text", "another one"]
    e0 = BiEncoder.load(looped / "models/rounds/round0").encode(texts, "query")
    e1 = BiEncoder.load(looped / "models/rounds/round1").encode(texts, "query")
    assert not np.allclose(e0, e1)


def test_resumed_training_equals_uninterrupted(looped, tmp_path):
    """Kill round 0's training after a few steps (a checkpoint exists), run again: same weights."""
    from udr.config import load_settings
    from udr.retriever.encoder import BiEncoder
    from udr.retriever.training import run_train

    root = tmp_path / "proj"
    shutil.copytree(looped, root, ignore=shutil.ignore_patterns("rounds", "final"))
    settings = load_settings(root / "params.yaml")
    kw = dict(init=root / "models/base/encoder", log_dir=root / "metrics/train/round0", progress=False)
    out = root / "models/rounds/round0"
    assert run_train(settings, 0, out=out, stop_after_steps=4, **kw) is None
    partial = out.parent / ".round0.partial"
    assert (partial / "state.json").is_file() and (partial / "manifest.json").is_file() and not out.exists()
    assert json.loads((partial / "state.json").read_text())["step"] == 3  # checkpoint_steps
    summary = run_train(settings, 0, out=out, **kw)
    texts = ["some query text", "another one"]
    for side in ("query", "demo"):
        assert np.array_equal(
            BiEncoder.load(out).encode(texts, side), BiEncoder.load(looped / "models/rounds/round0").encode(texts, side)
        )
    reference = json.loads((looped / "metrics/train/round0/summary.json").read_text())
    assert summary.loss_start == reference["loss_start"] and summary.loss_end == reference["loss_end"]
    tsv = "plots/metrics/train/loss.tsv"
    assert (root / "metrics/train/round0" / tsv).read_text() == (looped / "metrics/train/round0" / tsv).read_text()


def test_single_task_training_reads_only_that_task(looped, tmp_path):
    from udr.config import load_settings
    from udr.retriever.training import run_train

    root = tmp_path / "proj"
    shutil.copytree(looped, root, ignore=shutil.ignore_patterns("rounds", "final"))
    settings = load_settings(root / "params.yaml", ["train.tasks=[break]"])
    run_train(
        settings,
        0,
        out=root / "models/rounds/round0",
        init=root / "models/base/encoder",
        log_dir=root / "metrics/train/round0",
        progress=False,
    )
    summary = json.loads((root / "metrics/train/round0/summary.json").read_text())
    everything = json.loads((looped / "metrics/train/round0/summary.json").read_text())
    assert list(summary["queries"]) == ["break"] and len(everything["queries"]) == len(TASKS) > 1
    assert summary["steps"] < everything["steps"]


def test_round_errors(looped, run_cli):
    code, _, err = run_cli(["train", "-r", "5"], looped)
    assert code == 1 and "bad round 5" in err
    code, _, err = run_cli(["mine", "-r", "0"], looped)
    assert code == 1 and "bad round 0" not in err and "round 1" in err


@pytest.mark.slow
def test_two_process_training_equals_one_process(looped, tmp_path):
    """`torchrun --nproc_per_node=2 udr train` follows the one-process run (same losses to float order)."""
    from udr.retriever.encoder import BiEncoder

    root = tmp_path / "proj"
    shutil.copytree(looped, root, ignore=shutil.ignore_patterns("rounds", "final"))
    env = {k: v for k, v in os.environ.items() if k != "UDR_DATA_DIR"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "udr.cli",
        "train",
        "-r",
        "0",
    ]
    proc = subprocess.run(
        cmd, cwd=root, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    one = (looped / "metrics/train/round0/plots/metrics/train/loss.tsv").read_text().splitlines()[1:]
    two = (root / "metrics/train/round0/plots/metrics/train/loss.tsv").read_text().splitlines()[1:]
    # Losses agree to float summation order; Adam amplifies such differences in near-zero gradients,
    # so weights are compared loosely.
    np.testing.assert_allclose(
        [float(r.split("\t")[1]) for r in two], [float(r.split("\t")[1]) for r in one], rtol=1e-5
    )
    texts = ["some query text", "another one"]
    for side in ("query", "demo"):
        np.testing.assert_allclose(
            BiEncoder.load(root / "models/rounds/round0").encode(texts, side),
            BiEncoder.load(looped / "models/rounds/round0").encode(texts, side),
            atol=1e-2,
        )
