"""`udr show` (udr.stages.show): an evaluation's examples with the demonstrations of their prompts, read
from the saved predictions alone."""

from __future__ import annotations

import json
import shutil

import polars as pl


def test_show_prints_each_examples_demonstrations_gold_and_prediction(evaluated, run_cli):
    code, out, err = run_cli(["show", "-m", "bm25", "-t", "sst2", "-n", "2", "--json"], evaluated)
    assert code == 0, err
    shown = [json.loads(line) for line in out.splitlines()]
    preds = pl.read_parquet(evaluated / "data/predictions/bm25/sst2.parquet")
    pool = pl.read_parquet(evaluated / "data/prepared/sst2/train.parquet")
    texts = {r["id"]: (r["input"], r["target"]) for r in pool.to_dicts()}
    test = {r["id"]: r["input"] for r in pl.read_parquet(evaluated / "data/prepared/sst2/test.parquet").to_dicts()}
    assert len(shown) == 2
    for example, row in zip(shown, preds.head(2).to_dicts()):
        assert example["id"] == row["id"] and example["input"] == test[row["id"]]
        assert [d["pool_id"] for d in example["demonstrations"]] == row["demo_ids"]
        assert [(d["input"], d["output"]) for d in example["demonstrations"]] == [texts[i] for i in row["demo_ids"]]
        assert example["prediction"] == row["prediction"] and example["gold"] == row["gold"]
        assert example["correct"] == (row["prediction"].strip() == row["gold"].strip())


def test_show_reads_the_predictions_without_the_prepared_data(evaluated, run_cli, tmp_path):
    root = tmp_path / "clone"
    shutil.copytree(evaluated, root, ignore=shutil.ignore_patterns("prepared", "models"))
    code, out, err = run_cli(["show", "-m", "udr", "-t", "break", "-n", "1"], root)
    assert code == 0, err
    assert "udr on break" in out and "gold" in out and "prediction" in out and "pool " in out


def test_show_wrong_keeps_only_the_misses(evaluated, run_cli):
    code, out, err = run_cli(["show", "-m", "random", "-t", "sst2", "-n", "50", "--wrong", "--json"], evaluated)
    assert code == 0, err
    preds = pl.read_parquet(evaluated / "data/predictions/random/sst2.parquet").to_dicts()
    misses = [r["id"] for r in preds if r["prediction"].strip() != r["gold"].strip()]
    assert [json.loads(line)["id"] for line in out.splitlines()] == misses


def test_show_errors_are_one_line(evaluated, run_cli):
    for args, message in [
        (["show", "-m", "nope", "-t", "sst2"], "no evaluation named 'nope' of sst2 (test)"),
        (["show", "-m", "../x", "-t", "sst2"], "bad name '../x'"),
        (["show", "-m", "bm25", "-t", "sst2", "--split", "dev"], "bad split"),
        (
            ["show", "-m", "bm25", "-t", "sst2", "--split", "validation"],
            "run `udr evaluate -m bm25 -t sst2 --split validation`",
        ),
        (["show", "-m", "bm25", "-t", "sst2", "-n", "0"], "show at least 1 example"),
    ]:
        code, _, err = run_cli(args, evaluated)
        assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err
