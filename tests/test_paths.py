"""udr.paths: round labels and the pipeline's file layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from udr.errors import UdrError
from udr.paths import METHOD_MODEL_COMMANDS, Paths, parse_round, round_label, summary_file


@pytest.mark.parametrize("n", [0, 1, 2, 10])
def test_round_label_and_parse_round_round_trip(n):
    assert round_label(n) == f"round{n}"
    assert parse_round(round_label(n)) == n
    assert parse_round(str(n)) == n


@pytest.mark.parametrize("text", ["it1", "x", "", "round", "round-1", "1.5"])
def test_parse_round_rejects_other_names(text):
    with pytest.raises(UdrError, match="bad round") as err:
        parse_round(text)
    assert "\n" not in str(err.value)


def test_layout():
    paths = Paths(Path("/proj"))
    assert paths.prepared("sst2", "train") == Path("/proj/data/prepared/sst2/train.parquet")
    assert paths.prepared_dir("sst2") == Path("/proj/data/prepared/sst2")
    assert paths.candidates(0, "sst2") == Path("/proj/data/candidates/round0/sst2.parquet")
    assert paths.scores(2, "e2e") == Path("/proj/data/scores/round2/e2e.parquet")
    assert paths.predictions("udr", "e2e") == Path("/proj/data/predictions/udr/e2e.parquet")
    assert paths.base_model("lm") == Path("/proj/models/base/lm")
    assert paths.round_model(1) == Path("/proj/models/rounds/round1")
    assert paths.baseline_folders("epr", "sst2") == (
        Path("/proj/models/epr/sst2"),
        Path("/proj/metrics/train/epr/sst2"),
    )
    assert paths.baseline_folders("epr", None)[0] == Path("/proj/models/epr-multitask")
    assert paths.baseline_folders("dr-target", "trec")[0] == Path("/proj/models/dr-target/trec")
    assert paths.final_model == Path("/proj/models/final")
    assert Paths.index(paths.final_model, "sst2") == Path("/proj/models/final/index/sst2.npy")
    assert paths.train_log("round0") == Path("/proj/metrics/train/round0")
    assert paths.method_metrics("bm25", "sst2") == Path("/proj/metrics/bm25/sst2.json")
    assert paths.summary == Path("/proj/metrics/summary.json")
    assert paths.results == Path("/proj/metrics/results.md")
    assert paths.plots == Path("/proj/metrics/plots")
    assert paths.analysis("ablations") == Path("/proj/metrics/ablations.md")
    assert summary_file(paths.scores(0, "sst2")) == Path("/proj/data/scores/round0/sst2.json")


def test_prepared_tasks_lists_tasks_with_a_train_split(tmp_path):
    paths = Paths(tmp_path)
    assert paths.prepared_tasks() == []
    for task in ("trec", "sst2"):
        paths.prepared_dir(task).mkdir(parents=True)
        paths.prepared(task, "train").write_bytes(b"")
    paths.prepared_dir("e2e").mkdir()  # no train split: not prepared
    assert paths.prepared_tasks() == ["sst2", "trec"]


def test_each_method_reads_its_model_folder_made_by_its_command():
    """sbert, epr and udr read a model of the project's (each made by the command named beside it); random
    and BM25 read none."""
    from udr.config import METHODS

    p = Paths(Path("/p"))
    assert p.method_model("sbert") == p.base_model("encoder")
    assert p.method_model("epr") == p.epr_models  # one bi-encoder per task in it
    assert p.method_model("udr") == p.final_model
    assert {m for m in METHODS if p.method_model(m) is not None} == set(METHOD_MODEL_COMMANDS)
    assert p.method_model("random") is None and p.method_model("bm25") is None
