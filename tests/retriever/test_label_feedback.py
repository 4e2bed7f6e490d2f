"""train.feedback: the candidates of classification and multiple-choice queries ranked by their labels
(labels: the gold label's candidates first, ties in the candidate list's order; lm+labels: the gold
label's first, each group in the LM's order), generation tasks keeping the LM's; lm (the default) exactly
as before."""

from __future__ import annotations

import shutil

import polars as pl
import pytest

from tests.conftest import LOOP_TASKS as TASKS
from udr.retriever.training import label_feedback

# Query 1 (gold label 0) with 4 candidates in LM order, query 2 (gold label 1) with 3.
SCORES = pl.DataFrame(
    {
        "query_id": [1, 1, 1, 1, 2, 2, 2],
        "candidate_id": [10, 11, 12, 13, 20, 21, 22],
        "score": [0.9, 0.7, 0.7, 0.1, 0.8, 0.5, 0.2],
        "rank": pl.Series([1, 2, 3, 4, 1, 2, 3], dtype=pl.Int32),
        "scored_in": pl.Series([0] * 7, dtype=pl.Int16),
    }
)
LABELS = pl.DataFrame({"id": [1, 2, 10, 11, 12, 13, 20, 21, 22], "label": [0, 1, 1, 0, 1, 0, 0, 1, 1]})
# The candidate list's order (BM25's): 13, 12, 11, 10 for query 1; 21, 20, 22 for query 2.
ORDER = pl.DataFrame(
    {"query_id": [1, 1, 1, 1, 2, 2, 2], "candidate_id": [13, 12, 11, 10, 21, 20, 22], "rank": [1, 2, 3, 4, 1, 2, 3]}
)


def _lists(frame: pl.DataFrame) -> dict[int, list[int]]:
    return {q: g["candidate_id"].to_list() for (q,), g in frame.group_by(["query_id"], maintain_order=True)}


def test_labels_rank_the_gold_label_first_ties_in_the_candidate_list_order():
    out = label_feedback(SCORES, LABELS, ORDER, "labels")
    assert out.columns == SCORES.columns and out.schema == SCORES.schema
    # query 1: gold 0 -> 13 (list place 0), 11 (place 2) match; then 12 (place 1), 10 (place 3)
    # query 2: gold 1 -> 21 (place 0), 22 (place 2) match; then 20 (place 1)
    assert _lists(out) == {1: [13, 11, 12, 10], 2: [21, 22, 20]}
    assert out["rank"].to_list() == [1, 2, 3, 4, 1, 2, 3]
    want = [1 + 0.01 * (1 - 0 / 4), 1 + 0.01 * (1 - 2 / 4), 0.01 * (1 - 1 / 4), 0.01 * (1 - 3 / 4)]
    want += [1 + 0.01 * (1 - 0 / 3), 1 + 0.01 * (1 - 2 / 3), 0.01 * (1 - 1 / 3)]
    assert out["score"].to_list() == pytest.approx(want, abs=1e-12)
    scores = out["score"].to_list()
    for one in (scores[:4], scores[4:]):  # a full order within each query
        assert one == sorted(one, reverse=True) and len(set(one)) == len(one)


def test_lm_plus_labels_puts_the_gold_label_first_then_the_lm_order():
    out = label_feedback(SCORES, LABELS, ORDER, "lm+labels")
    # query 1: matching 11 (0.7), 13 (0.1); then 10 (0.9), 12 (0.7). query 2: 21 (0.5), 22 (0.2); then 20 (0.8)
    assert _lists(out) == {1: [11, 13, 10, 12], 2: [21, 22, 20]}
    assert out["rank"].to_list() == [1, 2, 3, 4, 1, 2, 3]
    assert out["score"].to_list() == pytest.approx([0.7 + 1.8, 0.1 + 1.8, 0.9, 0.7, 0.5 + 1.6, 0.2 + 1.6, 0.8])
    # equal LM scores and labels keep the LM's rank
    tied = SCORES.with_columns(pl.lit(0.5).alias("score"))
    assert _lists(label_feedback(tied, LABELS, ORDER, "lm+labels"))[1] == [11, 13, 10, 12]


def test_a_later_rounds_carried_over_candidates_come_last_in_the_list_order():
    # Round N's candidates: the mined ones ranked 1..k, those carried over from before without a rank.
    mined = pl.DataFrame(
        {
            "query_id": [1, 1, 1, 1, 2, 2, 2],
            "candidate_id": [12, 10, 13, 11, 22, 20, 21],
            "rank": pl.Series([2, 1, None, None, None, 1, None], dtype=pl.Int32),
        }
    )
    out = label_feedback(SCORES, LABELS, mined, "labels")
    # query 1 list order: 10, 12, then 11, 13 (no rank: by id); gold 0 -> 11, 13 first
    # query 2 list order: 20, then 21, 22; gold 1 -> 21, 22 first
    assert _lists(out) == {1: [11, 13, 10, 12], 2: [21, 22, 20]}


def test_a_candidate_missing_from_the_candidate_list_is_an_error():
    from udr.errors import UdrError

    with pytest.raises(UdrError, match="candidate 10 of query 1 is not in the candidate list"):
        label_feedback(SCORES, LABELS, ORDER.filter(pl.col("candidate_id") != 10), "labels")
    with pytest.raises(ValueError, match="labels or lm\\+labels"):
        label_feedback(SCORES, LABELS, ORDER, "lm")


def test_the_kinds_with_labels():
    from udr.data.tasks import get_task

    assert not get_task("comv").generation and not get_task("sst2").generation and get_task("break").generation


def _old_load_scored_queries(settings, tasks, round_):
    """load_scored_queries as it was before train.feedback existed."""
    from udr.data.prepare import read_prepared
    from udr.feedback.scores_file import load_scores
    from udr.retriever.training import training_queries

    out = {}
    for name in tasks:
        path = settings.paths.scores(round_, name)
        manifest, scores = load_scores(path, round_, name)
        train = read_prepared(settings.root, name, "train")
        wanted = manifest.chosen_queries(settings.score.queries_per_task, settings.seed, path)
        scores = scores.filter(pl.col("query_id").is_in(wanted.tolist())).sort(["query_id", "rank"])
        out[name] = training_queries(settings.task(name), train, scores, settings.encoder)
    return out


def test_the_scored_queries_under_each_feedback(looped):
    from udr.config import load_settings
    from udr.data.prepare import read_prepared
    from udr.project.training import load_scored_queries

    def load(feedback):
        settings = load_settings(looped / "params.yaml", [f"train.feedback={feedback}"])
        return settings, load_scored_queries(settings, list(TASKS), 0, settings.encoder)

    settings, lm = load("lm")
    assert lm == _old_load_scored_queries(settings, list(TASKS), 0)  # the default: exactly as before
    _, labels = load("labels")
    _, both = load("lm+labels")
    assert labels["break"] == lm["break"] == both["break"]  # generation: the LM's feedback under every value

    label = dict(zip(*read_prepared(looped, "sst2", "train").select("id", "label").to_dict(as_series=False).values()))
    bm25 = pl.read_parquet(looped / "data/candidates/round0/sst2.parquet")
    assert [q.query_id for q in labels["sst2"]] == [q.query_id for q in lm["sst2"]]
    for old, lab, mix in zip(lm["sst2"], labels["sst2"], both["sst2"]):
        assert set(lab.candidate_ids) == set(old.candidate_ids) == set(mix.candidate_ids)
        match = {c: label[c] == label[old.query_id] for c in old.candidate_ids}
        order = bm25.filter(pl.col("query_id") == old.query_id).sort("rank")["candidate_id"].to_list()
        place = {c: order.index(c) for c in old.candidate_ids}
        # labels: the gold label's candidates first, each group in the BM25 list's order
        assert list(lab.candidate_ids) == sorted(old.candidate_ids, key=lambda c: (not match[c], place[c]))
        n = len(old.candidate_ids)
        ranked_places = sorted(place[c] for c in old.candidate_ids)
        for c, s in zip(lab.candidate_ids, lab.candidate_scores):
            assert s == pytest.approx(match[c] + 0.01 * (1 - ranked_places.index(place[c]) / n))
        assert lab.candidate_texts == tuple(old.candidate_texts[old.candidate_ids.index(c)] for c in lab.candidate_ids)
        # lm+labels: the gold label's candidates first, each group in the LM's order
        lm_place = {c: i for i, c in enumerate(old.candidate_ids)}
        assert list(mix.candidate_ids) == sorted(old.candidate_ids, key=lambda c: (not match[c], lm_place[c]))
        assert list(mix.candidate_scores) == sorted(mix.candidate_scores, reverse=True)


def test_training_on_label_feedback_runs_end_to_end(looped, tmp_path):
    from udr.config import load_settings
    from udr.project.training import run_train
    from udr.retriever.record import read_record

    root = tmp_path / "proj"
    shutil.copytree(looped, root, ignore=shutil.ignore_patterns("rounds", "final"))
    settings = load_settings(root / "params.yaml", ["train.feedback=labels", "train.epochs_first=1"])
    out = root / "models/rounds/round0"
    summary = run_train(settings, 0, init=root / "models/base/encoder", out=out, log_dir=root / "log", progress=False)
    assert summary.steps >= 1
    assert read_record(out)["train"]["feedback"] == "labels"
