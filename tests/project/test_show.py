"""`udr show` (udr.project.show): an evaluation's examples with the demonstrations of their prompts, read
from the saved predictions alone."""

from __future__ import annotations

import json
import re
import shutil

import polars as pl
import pytest

from tests.conftest import write_params


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


def test_show_reads_a_label_aware_evaluation(evaluated, run_cli, tmp_path):
    """`-m METHOD+labels` (what `udr evaluate -m bm25+labels` saves) is a method, not a bad saved name."""
    root = tmp_path / "clone"
    shutil.copytree(evaluated, root, ignore=shutil.ignore_patterns("models"))
    for folder in ("metrics", "data/predictions"):  # its files, as the label-aware evaluation writes them
        shutil.copytree(root / folder / "bm25", root / folder / "bm25+labels")
    code, out, err = run_cli(["show", "-m", "bm25+labels", "-t", "sst2", "-n", "1"], root)
    assert code == 0, err
    assert "bm25+labels on sst2" in out


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


ROW = {
    "id": [1, 2],
    "input": ["a fine film", "a dull one"],
    "prediction": ["positive", "negative"],
    "gold": ["positive", "positive"],
    "demo_ids": [[7], [8]],
    "demo_inputs": [["good"], ["bad"]],
    "demo_outputs": [["positive"], ["negative"]],
}


@pytest.mark.parametrize(
    "damage, message",
    [
        ("truncated", r"unreadable predictions .*sst2.parquet: .*; run `udr evaluate -m bm25 -t sst2` again"),
        ("null prediction", r"malformed predictions .*sst2.parquet: row 2 has no prediction \(null\)"),
        ("null gold", r"malformed predictions .*sst2.parquet: row 1 has no gold \(null\)"),
        ("null demonstration", r"malformed predictions .*sst2.parquet: row 2 has no demo_inputs \(null\)"),
        ("numbers", r"malformed predictions .*sst2.parquet: column 'prediction' holds Int64, not text"),
        ("no gold", r"predictions .*sst2.parquet lacks column gold \(has id, input, prediction, demo_ids"),
    ],
)
def test_damaged_predictions_are_a_one_line_error_naming_the_file(tmp_path, data_dir, run_cli, damage, message):
    """A truncated predictions file, a null prediction or gold answer (a damaged row: `udr evaluate` writes
    every one), a column of another kind or none: one line naming the file, never a traceback."""
    write_params(tmp_path, {"sst2": {"max_train": 20, "max_test": 6}}, data_dir)
    path = tmp_path / "data/predictions/bm25/sst2.parquet"
    path.parent.mkdir(parents=True)
    columns = dict(ROW)
    if damage == "null prediction":
        columns["prediction"] = ["positive", None]
    elif damage == "null gold":
        columns["gold"] = [None, "positive"]
    elif damage == "null demonstration":
        columns["demo_inputs"] = [["good"], [None]]
    elif damage == "numbers":
        columns["prediction"] = [1, 0]
    elif damage == "no gold":
        del columns["gold"]
    pl.DataFrame(columns).write_parquet(path)
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    code, _, err = run_cli(["show", "-m", "bm25", "-t", "sst2"], tmp_path)
    assert code == 1 and re.search(message, err) and len(err.strip().splitlines()) == 1, err


def test_a_name_longer_than_a_file_name_is_a_one_line_error(tmp_path, data_dir, run_cli):
    """A method or task name that would make a file name longer than the file system allows is refused
    before any file is read ("File name too long" was a traceback)."""
    write_params(tmp_path, {"sst2": {"max_train": 20, "max_test": 6}}, data_dir)
    for args, message in [
        (["show", "-m", "a" * 300, "-t", "sst2"], "bad name 'aaaa"),
        (["show", "-m", "bm25", "-t", "t" * 300], "bad task 'tttt"),
    ]:
        code, _, err = run_cli(args, tmp_path)
        assert code == 1 and message in err and "longer than 100 characters" in err, err
        assert len(err.strip().splitlines()) == 1, err
