"""udr.training, udr.encoder, udr.mining, udr.retriever.index: sampler, candidate schemes, save/load, resume,
mining against brute force, and a two-round loop through the CLI on tiny models."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import polars as pl
import pytest

from tests.conftest import REPO, prepare_with_candidates, run_udr, write_params
from tests.tiny_models import save_tiny_encoder, save_tiny_lm
from udr.errors import UdrError
from udr.retriever.training import TaskSampler, sample_candidates

TASKS = {"sst2": "classification", "break": "generation"}


# ---------------------------------------------------------------- sampler and candidate schemes


def test_task_sampler_frequencies_follow_q_to_the_alpha():
    sizes = {"a": 900, "b": 90, "c": 10}
    sampler = TaskSampler(sizes, alpha=0.5)
    q = np.array([0.9, 0.09, 0.01])
    expected = q**0.5 / (q**0.5).sum()
    assert np.allclose(sampler.probabilities, expected)
    rng = np.random.default_rng(0)
    n = 40_000
    draws = [sampler.draw(rng) for _ in range(n)]
    freq = np.array([draws.count(t) / n for t in sampler.tasks])
    # 4 standard errors of a binomial proportion
    assert np.all(np.abs(freq - expected) < 4 * np.sqrt(expected * (1 - expected) / n)), (freq, expected)


def test_task_sampler_alpha_one_is_proportional():
    sampler = TaskSampler({"a": 30, "b": 10}, alpha=1.0)
    assert np.allclose(sampler.probabilities, [0.75, 0.25])
    with pytest.raises(UdrError, match="no training data"):
        TaskSampler({"a": 0}, alpha=0.5)


@pytest.mark.parametrize("scheme", ["uniform", "published", "epr"])
def test_sample_candidates_schemes(scheme):
    rng = np.random.default_rng(1)
    for n in (2, 3, 8, 12, 40):
        for _ in range(50):
            pos = sample_candidates(n, 8, scheme, rng)
            assert pos == sorted(set(pos)) and all(0 <= p < n for p in pos)
            want = 2 if scheme == "epr" else min(8, n)
            assert len(pos) == want
            if scheme in ("published", "epr") and n >= 10:
                assert pos[0] < 5 and pos[-1] >= n - 5  # one of the top 5 and one of the bottom 5
    with pytest.raises(UdrError, match="at least 2"):
        sample_candidates(1, 8, scheme, rng)


# ---------------------------------------------------------------- a tiny project, two rounds through the CLI


@pytest.fixture(scope="module")
def project(tmp_path_factory, data_dir):
    """Two real tasks (tiny caps), BM25 candidates, a tiny LM and a tiny BERT resolved."""
    from udr.lm.models import resolve_model

    root = tmp_path_factory.mktemp("loop")
    write_params(
        root,
        {t: {"max_train": 24, "max_test": 4} for t in TASKS},
        data_dir,
        candidates={"k": 5, "field": "paper"},
        score={"queries_per_task": 8, "shard_pairs": 16, "batch_tokens": 2048},
        encoder={"max_query_length": 64, "max_demo_length": 96},
        train={
            "later_rounds": {"it1": "it0"},
            "batch_size": 4,
            "micro_batch": 2,
            "epochs_first": 2,
            "epochs_later": 1,
            "warmup_steps": 1,
            "lr": 1e-3,
            "checkpoint_steps": 3,
            "candidates_per_query": 4,
        },
        mine={"k": 4, "batch_size": 8},
    )
    prepare_with_candidates(root, TASKS, data_dir, max_train=24, max_test=4, k=5)
    resolve_model(str(save_tiny_lm(root / "tiny-lm")), root / "models" / "base" / "lm", kind="lm")
    resolve_model(str(save_tiny_encoder(root / "tiny-enc")), root / "models" / "base" / "encoder", kind="encoder")
    return root


@pytest.fixture(scope="module")
def looped(project):
    """Round 0 and round 1 run through the CLI entry point (in-process)."""
    os.environ.pop("UDR_DATA_DIR", None)
    for args in (
        ["score", "-i", "0"],
        ["train", "-i", "0"],
        ["mine", "-i", "1"],
        ["score", "-i", "1"],
        ["train", "-i", "1"],
        ["index"],
    ):
        run_udr(project, *args)
    return project


def test_loop_writes_every_round(looped):
    root = looped
    for it in (0, 1):
        assert (root / f"models/rounds/it{it}/udr_encoder.json").is_file()
        summary = json.loads((root / f"metrics/train/it{it}/summary.json").read_text())
        assert summary["steps"] >= 1 and np.isfinite(summary["loss_start"]) and np.isfinite(summary["loss_end"])
        assert (root / f"metrics/train/it{it}/loss.png").stat().st_size > 0
        assert (root / f"metrics/train/it{it}/plots/metrics/train/loss.tsv").is_file()
    assert not list((root / "models/rounds").glob(".*partial"))  # checkpoints removed when done
    for task in TASKS:
        mined = pl.read_parquet(root / f"data/candidates/it1/{task}.parquet")
        assert set(mined.columns) == {"query_id", "candidate_id", "rank", "score", "new"}
        report = json.loads((root / f"data/candidates/it1/{task}.json").read_text())
        assert report["mined"] == 8 * 4 and report["new"] == int(mined["new"].sum())
        # every previous candidate of the scored queries is kept
        prev = pl.read_parquet(root / f"data/candidates/it0/{task}.parquet")
        prev = prev.filter(pl.col("query_id").is_in(mined["query_id"].unique().to_list()))
        assert len(prev.join(mined, on=["query_id", "candidate_id"], how="anti")) == 0
        scores1 = json.loads((root / f"data/scores/it1/{task}.json").read_text())
        assert scores1["reused"] == len(prev) and scores1["scored"] == report["new"]
        index = np.load(root / f"models/final/index/{task}.npy")
        assert index.shape == (24, 32)


def test_mining_is_exact_top_k_without_self(looped):
    """Mined candidates equal a brute-force ranking by round 0's retriever, self excluded."""
    from udr.data.prepare import read_prepared
    from udr.data.tasks import get_task
    from udr.retriever.encoder import BiEncoder, query_text
    from udr.retriever.index import pool_texts

    root = looped
    enc = BiEncoder.load(root / "models/rounds/it0")
    for task in TASKS:
        pool = read_prepared(root, task, "train")
        ids = np.asarray(pool["id"].to_list())
        d = enc.encode(pool_texts(task, pool["input"], pool["target"], enc.settings), "demo")
        mined = pl.read_parquet(root / f"data/candidates/it1/{task}.parquet").filter(pl.col("rank").is_not_null())
        for (qid,), group in mined.group_by(["query_id"]):
            p = int(np.flatnonzero(ids == qid)[0])
            q = enc.encode([query_text(get_task(task).instruction, pool["input"][p], enc.settings)], "query")[0]
            sims = d @ q
            sims[p] = -np.inf
            order = np.lexsort((np.arange(len(ids)), -sims))[:4]
            got = group.sort("rank")["candidate_id"].to_list()
            assert qid not in got
            assert got == ids[order].tolist() or np.allclose(
                np.sort(sims[order]), np.sort(sims[[int(np.flatnonzero(ids == g)[0]) for g in got]]), atol=1e-5
            )


def test_save_load_round_trip_gives_identical_embeddings(looped, tmp_path):
    from udr.retriever.encoder import BiEncoder

    enc = BiEncoder.load(looped / "models/rounds/it1")
    texts = ["a gripping, funny film", "return the count of flights from boston", "x"]
    enc.save(tmp_path / "copy")
    again = BiEncoder.load(tmp_path / "copy")
    for side in ("query", "demo"):
        assert np.array_equal(enc.encode(texts, side), again.encode(texts, side))
    assert again.settings == enc.settings


def test_training_moves_the_model(looped):
    from udr.retriever.encoder import BiEncoder

    texts = ["some query text", "another one"]
    e0 = BiEncoder.load(looped / "models/rounds/it0").encode(texts, "query")
    e1 = BiEncoder.load(looped / "models/rounds/it1").encode(texts, "query")
    assert not np.allclose(e0, e1)


def test_resumed_training_equals_uninterrupted(looped, tmp_path):
    """Kill round 0's training after a few steps (a checkpoint exists), run again: same weights."""
    from udr.config import load_settings
    from udr.retriever.encoder import BiEncoder
    from udr.retriever.training import run_train

    root = tmp_path / "proj"
    shutil.copytree(looped, root, ignore=shutil.ignore_patterns("rounds", "final"))
    settings = load_settings(root / "params.yaml")
    kw = dict(init=root / "models/base/encoder", log_dir=root / "metrics/train/it0", progress=False)
    out = root / "models/rounds/it0"
    assert run_train(settings, 0, out=out, stop_after_steps=4, **kw) is None
    assert (out.parent / ".it0.partial" / "state.json").is_file() and not out.exists()
    summary = run_train(settings, 0, out=out, **kw)
    texts = ["some query text", "another one"]
    for side in ("query", "demo"):
        assert np.array_equal(
            BiEncoder.load(out).encode(texts, side), BiEncoder.load(looped / "models/rounds/it0").encode(texts, side)
        )
    reference = json.loads((looped / "metrics/train/it0/summary.json").read_text())
    assert summary.loss_start == reference["loss_start"] and summary.loss_end == reference["loss_end"]
    tsv = "plots/metrics/train/loss.tsv"
    assert (root / "metrics/train/it0" / tsv).read_text() == (looped / "metrics/train/it0" / tsv).read_text()


def test_single_task_training_reads_only_that_task(looped, tmp_path):
    from udr.config import load_settings
    from udr.retriever.training import run_train

    root = tmp_path / "proj"
    shutil.copytree(looped, root, ignore=shutil.ignore_patterns("rounds", "final"))
    settings = load_settings(root / "params.yaml", ["train.tasks=[break]"])
    run_train(
        settings,
        0,
        out=root / "models/rounds/it0",
        init=root / "models/base/encoder",
        log_dir=root / "metrics/train/it0",
        progress=False,
    )
    summary = json.loads((root / "metrics/train/it0/summary.json").read_text())
    everything = json.loads((looped / "metrics/train/it0/summary.json").read_text())
    assert list(summary["queries"]) == ["break"] and len(everything["queries"]) == len(TASKS) > 1
    assert summary["steps"] < everything["steps"]


def test_round_errors(looped, run_cli):
    code, _, err = run_cli(["train", "-i", "5"], looped)
    assert code == 1 and "bad iteration 5" in err
    code, _, err = run_cli(["mine", "-i", "0"], looped)
    assert code == 1 and "bad iteration 0" not in err and "round 1" in err


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
        "-i",
        "0",
    ]
    proc = subprocess.run(
        cmd, cwd=root, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    one = (looped / "metrics/train/it0/plots/metrics/train/loss.tsv").read_text().splitlines()[1:]
    two = (root / "metrics/train/it0/plots/metrics/train/loss.tsv").read_text().splitlines()[1:]
    # Losses agree to float summation order; Adam amplifies such differences in near-zero gradients,
    # so weights are compared loosely.
    np.testing.assert_allclose(
        [float(r.split("\t")[1]) for r in two], [float(r.split("\t")[1]) for r in one], rtol=1e-5
    )
    texts = ["some query text", "another one"]
    for side in ("query", "demo"):
        np.testing.assert_allclose(
            BiEncoder.load(root / "models/rounds/it0").encode(texts, side),
            BiEncoder.load(looped / "models/rounds/it0").encode(texts, side),
            atol=1e-2,
        )


def test_rounds_report(looped, run_cli):
    from udr.config import load_settings
    from udr.retriever.rounds import rounds_table

    rows = rounds_table(load_settings(looped / "params.yaml"))
    totals = {r["round"]: r for r in rows if r["task"] == "all"}
    assert set(totals) == {0, 1}
    assert totals[0]["pairs"] == 2 * 8 * 5 and totals[1]["scored"] == sum(
        json.loads((looped / f"data/candidates/it1/{t}.json").read_text())["new"] for t in TASKS
    )
    assert totals[1]["train_steps"] >= 1 and totals[1]["mined_new_fraction"] is not None
    per_task = [r for r in rows if r["task"] != "all"]
    assert all(r["retrieved"] is not None and r["retrieved"][0] >= r["retrieved"][1] for r in per_task)
    code, out, _ = run_cli(["rounds"], looped)
    assert code == 0 and "sst2" in out
