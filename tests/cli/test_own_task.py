"""A user's own task, declared in a YAML file over a CSV the test writes, through every stage of the CLI
on tiny models (prepare -> candidates -> score -> train -> mine -> score -> train -> index -> evaluate ->
report -> retrieve) and the Python API: adding a task needs no code change."""

from __future__ import annotations

import json

import pytest

from tests.conftest import write_csv_task, write_params
from tests.tiny_models import save_tiny_encoder, save_tiny_lm


@pytest.mark.slow
def test_a_task_declared_over_a_csv_runs_through_every_stage(run_cli, tmp_path, data_dir):
    from udr.lm.models import resolve_model

    root = tmp_path / "project"
    root.mkdir()
    declaration = write_csv_task(root / "data" / "tasks", data_dir, "reviews", rows=40)
    write_params(
        root,
        {"reviews": {"max_train": 24, "max_test": 6}},
        data_dir,
        candidates={"k": 4},
        score={"queries_per_task": 6, "batch_tokens": 2048, "dtype": "fp32"},
        encoder={"max_query_length": 48, "max_demo_length": 64},
        train={
            "later_rounds": {"round1": "round0"},
            "batch_size": 3,
            "micro_batch": 3,
            "epochs_first": 1,
            "epochs_later": 1,
            "warmup_steps": 0,
            "candidates_per_query": 3,
        },
        mine={"k": 3, "batch_size": 8},
        evaluate={"context": 400, "max_demos": 3, "batch_tokens": 1024, "shots_tasks": [], "dtype": "fp32"},
    )
    resolve_model(str(save_tiny_lm(tmp_path / "tiny-lm")), root / "models" / "base" / "lm", kind="lm")
    resolve_model(str(save_tiny_encoder(tmp_path / "tiny-enc")), root / "models" / "base" / "encoder", kind="encoder")

    def udr(*args: str) -> str:
        code, out, err = run_cli(list(args), root)
        assert code == 0, f"udr {' '.join(args)}: {err}"
        return out

    listing = udr("tasks")
    assert "reviews" in listing and "files:reviews.csv" in listing and "trained" in listing

    udr("prepare")
    meta = json.loads((root / "data" / "prepared" / "reviews" / "meta.json").read_text())
    assert meta["instruction"] == "Sentiment of the review: " and meta["files"] == {"all": "reviews.csv"}
    assert (meta["counts"]["train"]["kept"], meta["counts"]["test"]["kept"], meta["split"]) == (24, 6, "seeded")
    rounds = (["candidates"], ["score"], ["train"], ["mine", "--round", "1"], ["score", "--round", "1"])
    for stage in (*rounds, ["train", "--round", "1"], ["train", "--epr", "--task", "reviews"], ["index"]):
        udr(*stage)
    assert (root / "data" / "scores" / "round1" / "reviews.parquet").is_file()
    code, _, err = run_cli(["score"], root)  # all reused; the line still names device, precision, processes
    assert code == 0 and "reviews round 0: " in err and "[cpu/" in err and "1 process(es)]" in err, err
    assert (root / "data" / "candidates" / "round1" / "reviews.parquet").is_file()
    for method in ("random", "bm25", "sbert", "epr", "udr"):
        udr("evaluate", "--method", method)
    result = json.loads((root / "metrics" / "udr" / "reviews.json").read_text())
    assert result["metric"] == "accuracy" and result["n"] == 6 and result["family"] == "sentiment"
    udr("report")
    assert "| reviews | classification | accuracy | 6 |" in (root / "metrics" / "results.md").read_text()

    out = udr("retrieve", "it broke after a week", "--task", "reviews", "-k", "3", "--json")
    demos = [json.loads(line) for line in out.splitlines()]
    assert len(demos) == 3 and all(d["output"] in ("It was terrible .", "It was great .") for d in demos)

    from udr import Retriever

    retriever = Retriever.load(root=root, cache_dir=tmp_path / "cache")
    api = retriever.retrieve("it broke after a week", task="reviews", k=3)
    assert [d.pool_id for d in api] == [d["pool_id"] for d in demos]

    # A broken declaration stops the next command with one line naming the task and the field.
    declaration.write_text(declaration.read_text() + "  metric: f1\n")
    code, _, err = run_cli(["prepare"], root)
    assert code == 1 and "bad task declaration 'reviews'" in err and "metric" in err
    assert len(err.strip().splitlines()) == 1
