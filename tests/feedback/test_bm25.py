"""udr.feedback.bm25 against the rank-bm25 oracle (BM25Okapi, epsilon=0) on real data."""

from __future__ import annotations

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from udr.data.sources import load_task
from udr.data.tasks import get_task
from udr.feedback.bm25 import BM25Index, bm25_candidates, candidate_field, stable_top_k, tokenize


@pytest.fixture(scope="module", params=["sst2", "break"])
def pool(request, data_dir):
    task = get_task(request.param)
    loaded = load_task(task, data_dir, seed=42, test_fraction=0.2)
    field = candidate_field(task.kind, "paper")
    texts = [getattr(e, field) for e in loaded.train.examples[:800]]
    return task, texts


def test_scores_equal_rank_bm25_okapi(pool):
    _, texts = pool
    ours = BM25Index(texts)
    oracle = BM25Okapi([tokenize(t) for t in texts], k1=1.5, b=0.75, epsilon=0)
    for query in texts[:50] + ["an unseen query with zzzunknown words", ""]:
        expected = oracle.get_scores(tokenize(query))
        np.testing.assert_allclose(ours.scores(query), expected, rtol=1e-5, atol=1e-4)


def test_top_k_matches_oracle_ranking(pool):
    _, texts = pool
    ours = BM25Index(texts)
    oracle = BM25Okapi([tokenize(t) for t in texts], k1=1.5, b=0.75, epsilon=0)
    for pos in range(0, 800, 40):
        top, scores = ours.top_k(texts[pos], 10, exclude=pos)
        assert pos not in top and len(top) == 10
        ref = oracle.get_scores(tokenize(texts[pos]))
        ref[pos] = -np.inf
        # same scores at each rank (ties may order differently only within equal scores)
        np.testing.assert_allclose(scores, np.sort(ref)[::-1][:10], rtol=1e-5, atol=1e-4)


def test_stable_top_k_breaks_ties_by_position():
    scores = np.array([1.0, 3.0, 3.0, 2.0, 3.0, 0.0])
    assert stable_top_k(scores, 3).tolist() == [1, 2, 4]
    assert stable_top_k(scores, 4).tolist() == [1, 2, 4, 3]
    assert stable_top_k(scores, 10).tolist() == [1, 2, 4, 3, 0, 5]


def test_candidates_frame_excludes_self_and_has_k_ranked_rows(pool):
    import polars as pl

    task, texts = pool
    train = pl.DataFrame({"id": np.arange(100, 100 + 60) * 3, "input": texts[:60], "target": texts[:60]})
    frame = bm25_candidates(train, task.kind, "paper", 7, progress=False)
    assert frame.columns == ["query_id", "candidate_id", "rank", "score"]
    assert len(frame) == 60 * 7
    assert (frame["query_id"] != frame["candidate_id"]).all()
    assert set(frame["candidate_id"]) <= set(train["id"])
    per_query = frame.group_by("query_id").agg(pl.col("rank"), pl.col("score"))
    for ranks, scores in zip(per_query["rank"], per_query["score"]):
        assert list(ranks) == list(range(1, 8)) and all(np.diff(list(scores)) <= 1e-6)


def test_candidate_field_choice():
    assert candidate_field("classification", "paper") == "input"
    assert candidate_field("multiple_choice", "paper") == "input"
    assert candidate_field("generation", "paper") == "target"
    assert candidate_field("classification", "target") == "target"
