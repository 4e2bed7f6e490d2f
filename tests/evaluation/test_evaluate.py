"""`udr evaluate` and `udr report` end to end on tiny models through the CLI."""

from __future__ import annotations

import json

import polars as pl
import pytest

from tests.conftest import prepare_with_candidates, run_udr, write_params
from tests.tiny_models import save_tiny_encoder, save_tiny_lm

TASKS = ["sst2", "break"]
METHODS = ["random", "bm25", "sbert", "epr", "udr"]


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, data_dir):
    """Round 0 and the EPR baseline trained on tiny models, every method evaluated, the report written."""
    import os

    from udr.lm.models import resolve_model

    root = tmp_path_factory.mktemp("eval")
    write_params(
        root,
        {t: {"max_train": 20, "max_test": 6} for t in TASKS},
        data_dir,
        candidates={"k": 4},
        score={"queries_per_task": 6, "batch_tokens": 2048},
        encoder={"max_query_length": 48, "max_demo_length": 64},
        train={
            "later_rounds": {},
            "batch_size": 3,
            "micro_batch": 3,
            "epochs_first": 1,
            "epochs_later": 1,
            "warmup_steps": 0,
            "lr": 1e-3,
            "candidates_per_query": 3,
        },
        mine={"k": 3, "batch_size": 8},
        evaluate={
            "context": 700,
            "max_demos": 3,
            "max_new_tokens": 6,
            "candidates": 8,
            "batch_tokens": 1024,
            "shots": [1, 2, 3],
            "shots_tasks": ["sst2"],
            "shots_methods": ["bm25", "udr"],
            "dtype": "fp32",
        },
    )
    prepare_with_candidates(root, TASKS, data_dir, max_train=20, max_test=6, k=4)
    resolve_model(str(save_tiny_lm(root / "tiny-lm")), root / "models" / "base" / "lm", kind="lm")
    resolve_model(str(save_tiny_encoder(root / "tiny-enc")), root / "models" / "base" / "encoder", kind="encoder")
    os.environ.pop("UDR_DATA_DIR", None)
    for args in (
        ["score"],
        ["train"],
        ["train", "--epr"],
        ["index"],
        *(["evaluate", "--method", m] for m in METHODS),
        ["report"],
    ):
        run_udr(root, *args)
    return root


def test_every_method_writes_metrics_and_inspectable_predictions(evaluated):
    for method in METHODS:
        for task in TASKS:
            result = json.loads((evaluated / "metrics" / method / f"{task}.json").read_text())
            assert result["n"] == 6 and result["method"] == method and result["task"] == task
            assert 0.0 <= result["score"] <= 100.0 and result["seconds"] >= 0
            preds = pl.read_parquet(evaluated / "data" / "predictions" / method / f"{task}.parquet")
            assert preds.height == 6
            pool = set(pl.read_parquet(evaluated / "data" / "prepared" / task / "train.parquet")["id"].to_list())
            for demos, tokens in zip(preds["demo_ids"].to_list(), preds["prompt_tokens"].to_list()):
                assert demos and set(demos) <= pool and len(set(demos)) == len(demos)
                assert tokens <= 700
            if task == "sst2":
                assert result["demos_mean"] <= 3 and result["metric"] == "accuracy"
                choices = {"It was great .", "It was terrible ."}
                assert set(preds["prediction"].to_list()) <= choices
            else:
                assert result["graded"]["name"] == "token_f1"
                assert not any("\n" in p for p in preds["prediction"].to_list())


def test_shots_only_for_the_chosen_tasks_and_methods(evaluated):
    udr = json.loads((evaluated / "metrics" / "udr" / "sst2.json").read_text())
    assert set(udr["shots"]) == {"1", "2", "3"}
    assert udr["shots"]["1"]["demos_mean"] == 1.0
    assert udr["shots"]["3"]["score"] == udr["score"]  # 3 = max_demos: the main run
    assert "shots" not in json.loads((evaluated / "metrics" / "random" / "sst2.json").read_text())
    assert "shots" not in json.loads((evaluated / "metrics" / "udr" / "break.json").read_text())


def test_report_table_summary_and_plot(evaluated):
    summary = json.loads((evaluated / "metrics" / "summary.json").read_text())
    assert set(summary["tasks"]) == set(METHODS)
    for method in METHODS:
        scores = [summary["tasks"][method][t]["graded"] for t in TASKS]
        assert summary["averages"][method]["all"] == pytest.approx(sum(scores) / 2)
    table = (evaluated / "metrics" / "results.md").read_text()
    assert "| task | family | metric | n | random | bm25 | sbert | epr | udr |" in table
    assert "exact_match / token_f1" in table and "average, all tasks" in table
    assert (evaluated / "metrics" / "plots" / "shots.png").stat().st_size > 1000
    csv = (evaluated / "metrics" / "plots" / "shots" / "sst2.csv").read_text().splitlines()
    assert csv[0] == "demos,bm25,udr" and len(csv) == 4


def test_epr_baseline_is_trained_with_its_recipe(evaluated):
    summary = json.loads((evaluated / "metrics" / "train" / "epr" / "summary.json").read_text())
    round0 = json.loads((evaluated / "metrics" / "train" / "it0" / "summary.json").read_text())
    assert summary["steps"] == round0["steps"]  # one UDR round here: the same budget
    assert (evaluated / "models" / "epr" / "udr_encoder.json").is_file()


def test_evaluate_errors(evaluated, run_cli):
    code, _, err = run_cli(["evaluate", "--method", "knn"], evaluated)
    assert code == 1 and "unknown method 'knn'" in err
    code, _, err = run_cli(["evaluate", "--method", "bm25", "--set", "evaluate.order=sideways"], evaluated)
    assert code == 1 and "bad parameter evaluate.order" in err
