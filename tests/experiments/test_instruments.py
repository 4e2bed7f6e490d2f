"""udr.experiments.instruments: the ceiling and agreement instruments, their parts by hand and end to end on
a tiny project (tiny models, real data)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_udr, write_params
from tests.tiny_models import save_tiny_encoder, save_tiny_lm
from udr.errors import UdrError
from udr.experiments.instruments import (
    FixedRanking,
    agreement_of,
    candidate_order,
    interleave,
    ndcg,
    recorded_model_path,
    write_agreement_table,
)
from udr.paths import Paths

TASKS = ["sst2", "break"]
N = 6  # oracle candidates per validation query


def test_interleave_alternates_and_drops_duplicates():
    assert interleave([[1, 2, 3, 4], [2, 5, 1, 6]], 5) == [1, 2, 5, 3, 4]
    assert interleave([[1, 2], [2, 1]], 10) == [1, 2]
    assert interleave([[7], [8, 9, 10]], 3) == [7, 8, 9]


def test_ndcg_by_hand():
    # gains in the ranking's order 0, 1, 0.5; ideal 1, 0.5, 0
    got = 1 / np.log2(3) + 0.5 / np.log2(4)
    ideal = 1.0 + 0.5 / np.log2(3)
    assert ndcg([0.0, 1.0, 0.5], [1.0, 0.5, 0.0], 3) == pytest.approx(got / ideal)
    assert ndcg([1.0, 0.5, 0.0], [0.0, 1.0, 0.5], 3) == pytest.approx(1.0)
    assert ndcg([0.0, 1.0], [1.0, 0.0], 1) == 0.0
    assert ndcg([0.0, 0.0], [0.0, 0.0], 2) == 1.0


def test_agreement_of_scales_gains_and_finds_the_lm_first():
    lm = {10: -1.0, 11: -3.0, 12: -2.0}  # LM order 10, 12, 11; gains 1, 0, 0.5
    assert agreement_of([10, 12, 11], lm, k=3) == (pytest.approx(1.0), True)
    value, top1 = agreement_of([11, 12, 10], lm, k=3)
    assert not top1
    assert value == pytest.approx((0.5 / np.log2(3) + 1 / np.log2(4)) / (1 + 0.5 / np.log2(3)))
    # a tie at the top goes to the lower id, as the scores' rank does
    assert agreement_of([5, 4], {4: 0.5, 5: 0.5}, k=2)[1] is False


def test_candidate_order_and_fixed_ranking():
    assert candidate_order(np.array([9, 3, 7, 1]), [1, 9, 7]) == [9, 7, 1]
    with pytest.raises(UdrError, match="not in the retriever"):
        candidate_order(np.array([9, 3]), [4])
    fixed = FixedRanking(["a", "b"], np.array([[1, 2, 3], [4, 5, 6]]))
    assert fixed.rank(["a", "b"], 2).ids.tolist() == [[1, 2], [4, 5]]
    with pytest.raises(UdrError, match="other queries"):
        fixed.rank(["b", "a"], 2)
    with pytest.raises(UdrError, match="k out of range"):
        fixed.rank(["a", "b"], 4)


def test_agreement_records_models_without_machine_paths(tmp_path, monkeypatch):
    """A --model folder is written relative to the project where it lies inside it, else as its last two
    path parts: metrics/agreement.md never holds an absolute path."""
    from types import SimpleNamespace

    root, elsewhere = tmp_path / "project", tmp_path / "elsewhere" / "models" / "udr512"
    (root / "models" / "curve" / "q64").mkdir(parents=True)
    (root / "metrics").mkdir()
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(root)
    assert recorded_model_path(root / "models" / "curve" / "q64", root) == "models/curve/q64"
    assert recorded_model_path(Path("models/curve/q64"), root) == "models/curve/q64"  # as given, from the project
    assert recorded_model_path(elsewhere, root) == "models/udr512"
    assert recorded_model_path(Path("/udr512"), root) == "udr512"
    settings = SimpleNamespace(paths=Paths(root), models=SimpleNamespace(lm="tiny"))
    row = {"sst2": {"ndcg": 0.5, "top1": 0.25, "n": 4}}
    models = {"q64": root / "models" / "curve" / "q64", "udr512": elsewhere, "rel": Path("models/curve/q64")}
    text = write_agreement_table(
        settings, {"random": row, **dict.fromkeys(models, row)}, ["sst2"], N, models
    ).read_text()
    assert "\n- q64: `models/curve/q64`\n- udr512: `models/udr512`\n- rel: `models/curve/q64`\n" in text
    assert str(tmp_path) not in text and "`/" not in text


@pytest.fixture(scope="module")
def project(tmp_path_factory, data_dir):
    """A tiny project with validation splits, round 0 and EPR trained, UDR indexed, then both instruments."""
    from udr.lm.models import resolve_model

    root = tmp_path_factory.mktemp("oracle")
    write_params(
        root,
        {t: {"max_train": 20, "max_test": 4, "validation": 5} for t in TASKS},
        data_dir,
        candidates={"k": 4},
        score={"queries_per_task": 5, "batch_tokens": 2048, "dtype": "fp32"},
        encoder={"max_query_length": 48, "max_demo_length": 64},
        train={"batch_size": 3, "micro_batch": 3, "epochs_first": 1, "warmup_steps": 0, "candidates_per_query": 3},
        mine={"k": 3, "batch_size": 8},
        evaluate={
            "context": 700,
            "max_demos": 3,
            "max_new_tokens": 6,
            "candidates": N,
            "batch_tokens": 1024,
            "shots_tasks": [],
            "dtype": "fp32",
            "unseen_tasks": {},
        },
    )
    resolve_model(str(save_tiny_lm(root / "tiny-lm")), root / "models" / "base" / "lm", kind="lm")
    resolve_model(str(save_tiny_encoder(root / "tiny-enc")), root / "models" / "base" / "encoder", kind="encoder")
    os.environ.pop("UDR_DATA_DIR", None)
    for args in (
        *(["prepare", "--task", t] for t in TASKS),
        ["candidates"],
        ["score"],
        ["train"],
        *(["train", "--epr", "--task", t] for t in TASKS),
        ["index"],
        ["exp", "ceiling", "-n", str(N)],
        ["exp", "agreement", "-n", str(N), "--model", "round 0=models/rounds/round0"],
    ):
        run_udr(root, *args)
    return root


def _settings(root):
    from udr.config import load_settings

    return load_settings(root / "params.yaml", [])


def test_oracle_scores_are_the_feedback_score_of_each_pair(project):
    """Each validation query gets N candidates of BM25 ∪ SBERT, and their scores are exactly what the
    feedback scorer gives the pair alone (fp32, one pair at a time)."""
    import polars as pl

    from udr.data.prepare import read_prepared
    from udr.feedback.scoring import score_items
    from udr.lm.loading import load_causal_lm
    from udr.lm.prompt import PromptBuilder
    from udr.lm.scorer import LMScorer

    settings = _settings(project)
    model, tokenizer = load_causal_lm(project / "models" / "base" / "lm")
    scorer = LMScorer(model, bf16=False, pad_id=tokenizer.pad_token_id or 0)
    for task in TASKS:
        scores = pl.read_parquet(settings.paths.oracle(task))
        rows = {r["id"]: r for r in read_prepared(project, task, "validation").iter_rows(named=True)}
        pool = {r["id"]: r for r in read_prepared(project, task, "train").iter_rows(named=True)}
        assert set(scores["query_id"].to_list()) == set(rows)
        assert scores.group_by("query_id").len()["len"].to_list() == [N] * len(rows)
        builder = PromptBuilder(tokenizer, settings.task(task), None, settings.score.max_length)
        for q, c, s in scores.head(8).select("query_id", "candidate_id", "score").iter_rows():
            item = builder.scoring_item(rows[q], pool[c])
            alone, _ = score_items(scorer, [item], settings.task(task).generation, 4096, share_prefixes=False)
            assert s == pytest.approx(alone[0], abs=1e-4)


def test_the_ceiling_prompts_with_the_lm_best_candidates(project):
    import polars as pl

    settings = _settings(project)
    scores = pl.read_parquet(settings.paths.oracle("sst2"))
    predictions = pl.read_parquet(settings.paths.predictions("ceiling", "sst2", "validation"))
    for q, demos in predictions.select("id", "demo_ids").iter_rows():
        best = scores.filter(pl.col("query_id") == q).sort("rank")["candidate_id"].to_list()[:3]
        assert demos == best[::-1]  # ascending: the LM's best right before the query
    table = json.loads((project / "metrics" / "ceiling.json").read_text())
    assert set(table["graded"]) == {"ceiling", "bm25", "sbert", "epr", "udr"}
    assert set(table["intervals"]) == {"ceiling - bm25", "udr - bm25", "ceiling - udr"}
    iv = table["intervals"]["ceiling - bm25"]["tasks"]["sst2"]
    diff = table["graded"]["ceiling"]["sst2"] - table["graded"]["bm25"]["sst2"]
    assert iv["difference"] == pytest.approx(diff, abs=1e-6) and iv["low"] <= diff <= iv["high"]
    text = (project / "metrics" / "ceiling.md").read_text()
    assert "| sst2 | 5 |" in text and "| **average** |" in text


def test_agreement_lists_every_retriever_and_reuses_the_scores(project):
    settings = _settings(project)
    table = json.loads((project / "metrics" / "agreement.json").read_text())["retrievers"]
    assert list(table) == ["random", "bm25", "sbert", "initial encoder", "epr", "udr", "round 0"]
    text = (project / "metrics" / "agreement.md").read_text()
    assert "\n- round 0: `models/rounds/round0`\n" in text and str(project) not in text  # no machine path
    for per_task in table.values():
        for t in TASKS:
            assert 0.0 <= per_task[t]["ndcg"] <= 1.0 and 0.0 <= per_task[t]["top1"] <= 1.0 and per_task[t]["n"] == 5
    # UDR is round 0's model: the same agreement whether read from models/final or models/rounds/round0
    assert table["udr"] == table["round 0"]
    before = settings.paths.oracle("sst2").stat().st_mtime_ns
    run_udr(project, "exp", "agreement", "-n", str(N), "-t", "sst2")
    assert settings.paths.oracle("sst2").stat().st_mtime_ns == before  # up to date: read, not scored again
    # Settings the pairs' scores do not depend on leave them up to date; a prompt setting does not.
    run_udr(project, "exp", "agreement", "-n", str(N), "-t", "sst2", "-S", "score.queries_per_task=3")
    assert settings.paths.oracle("sst2").stat().st_mtime_ns == before
    run_udr(project, "exp", "agreement", "-n", str(N), "-t", "sst2", "-S", "score.max_length=1000")
    assert settings.paths.oracle("sst2").stat().st_mtime_ns != before


def test_agreement_refuses_a_missing_model_and_a_bad_spec(project, run_cli):
    code, _, err = run_cli(["exp", "agreement", "--model", "x=nowhere"], project)
    assert code != 0 and "missing model nowhere" in err
    code, _, err = run_cli(["exp", "agreement", "--model", "nolabel"], project)
    assert code != 0 and "expected LABEL=DIR" in err
