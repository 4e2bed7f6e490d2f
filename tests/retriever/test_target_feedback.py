"""train.feedback target (the DR-Target baseline): each query's candidates re-scored by the Okapi BM25
similarity of their targets to the query's target, over an index of the pool's targets (rank-bm25 the
oracle), ranked by it with ties in the list's order; the LM's scores are not read."""

from __future__ import annotations

import polars as pl
import pytest

from udr.retriever.training import target_feedback

TARGETS = pl.DataFrame(
    {
        "id": [1, 2, 10, 11, 12, 20, 21, 22],
        "target": [
            "show flights from boston to denver",
            "list hotels in paris",
            "show all flights to denver",
            "book a table",
            "show flights from boston to denver tomorrow",
            "hotels in rome",
            "list hotels in paris near the louvre",
            "book a table",
        ],
    }
)
# Query 1 with 3 candidates, query 2 with 3, in the LM's order (scores the feedback must not read).
SCORES = pl.DataFrame(
    {
        "query_id": [1, 1, 1, 2, 2, 2],
        "candidate_id": [11, 10, 12, 22, 20, 21],
        "score": [9.0, 8.0, 7.0, 9.0, 8.0, 7.0],
        "rank": pl.Series([1, 2, 3, 1, 2, 3], dtype=pl.Int32),
    }
)


def _oracle(query_id: int, candidate_id: int) -> float:
    from rank_bm25 import BM25Okapi

    from udr.feedback.bm25 import tokenize

    texts = TARGETS["target"].to_list()
    ids = TARGETS["id"].to_list()
    bm25 = BM25Okapi([tokenize(t) for t in texts], k1=1.5, b=0.75, epsilon=0)
    scores = bm25.get_scores(tokenize(texts[ids.index(query_id)]))
    return float(scores[ids.index(candidate_id)])


def test_targets_rank_the_most_similar_target_first_with_okapi_scores():
    out = target_feedback(SCORES, TARGETS)
    assert out.columns == SCORES.columns
    lists = {q: g["candidate_id"].to_list() for (q,), g in out.group_by(["query_id"], maintain_order=True)}
    assert lists == {1: [12, 10, 11], 2: [21, 20, 22]}
    assert out["rank"].to_list() == [1, 2, 3, 1, 2, 3]
    for row in out.iter_rows(named=True):
        assert row["score"] == pytest.approx(_oracle(row["query_id"], row["candidate_id"]), rel=1e-5)


def test_ties_keep_the_list_order():
    tied = SCORES.filter(pl.col("query_id") == 1).with_columns(pl.Series("candidate_id", [11, 22, 10]))
    out = target_feedback(tied, TARGETS)
    # 11 and 22 share their target ("book a table", no word in common with the query's: both 0): list order
    assert out["candidate_id"].to_list() == [10, 11, 22]
