"""train.feedback target (the DR-Target baseline): each query's candidates re-scored by the BM25 similarity
(Lucene's idf) of their targets to the query's target, over an index of the pool's targets, ranked by it with
ties in the candidate list's order; the LM's scores are not read, not even through their order."""

from __future__ import annotations

import math

import polars as pl
import pytest

from udr.feedback.bm25 import tokenize
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
# The candidates file (BM25's order over inputs in round 0): another order than the LM's.
ORDER = pl.DataFrame(
    {
        "query_id": [1, 1, 1, 2, 2, 2],
        "candidate_id": [12, 10, 11, 21, 22, 20],
        "rank": pl.Series([1, 2, 3, 1, 2, 3], dtype=pl.Int32),
    }
)


def _lucene_oracle(texts: list[str], query: str, doc: int, k1: float = 1.5, b: float = 0.75) -> float:
    """BM25 with Lucene's idf, log(1 + (N - n + 0.5) / (n + 0.5)), on the Okapi scale (times k1 + 1)."""
    docs = [tokenize(t) for t in texts]
    avg = sum(map(len, docs)) / len(docs)
    total = 0.0
    for word in set(tokenize(query)):  # the queries here repeat no word
        n, tf = sum(word in d for d in docs), docs[doc].count(word)
        if tf:
            idf = math.log(1 + (len(docs) - n + 0.5) / (n + 0.5))
            total += idf * tf / (tf + k1 * (1 - b + b * len(docs[doc]) / avg)) * (k1 + 1)
    return total


def _lists(frame) -> dict[int, list[int]]:
    return {q: g["candidate_id"].to_list() for (q,), g in frame.group_by(["query_id"], maintain_order=True)}


def test_targets_rank_the_most_similar_target_first_with_lucene_scores():
    out = target_feedback(SCORES, TARGETS, ORDER)
    assert out.columns == SCORES.columns and out.schema == SCORES.schema
    assert _lists(out) == {1: [12, 10, 11], 2: [21, 20, 22]}
    assert out["rank"].to_list() == [1, 2, 3, 1, 2, 3]
    texts, ids = TARGETS["target"].to_list(), TARGETS["id"].to_list()
    for row in out.iter_rows(named=True):
        expected = _lucene_oracle(texts, texts[ids.index(row["query_id"])], ids.index(row["candidate_id"]))
        assert row["score"] == pytest.approx(expected, rel=1e-5)


def test_ties_follow_the_candidate_list_not_the_lm():
    tied = SCORES.filter(pl.col("query_id") == 1).with_columns(pl.Series("candidate_id", [11, 22, 10]))
    # 11 and 22 share their target ("book a table", no word in common with the query's: both 0); the LM put
    # 11 first, the candidate list puts 22 first.
    order = pl.DataFrame({"query_id": [1, 1, 1], "candidate_id": [10, 22, 11], "rank": [1, 2, 3]})
    assert target_feedback(tied, TARGETS, order)["candidate_id"].to_list() == [10, 22, 11]


def test_the_lm_scores_and_their_order_are_not_read():
    reversed_lm = SCORES.with_columns(pl.col("score") * -1, (4 - pl.col("rank")).cast(pl.Int32).alias("rank")).sort(
        ["query_id", "rank"]
    )
    assert target_feedback(reversed_lm, TARGETS, ORDER).equals(target_feedback(SCORES, TARGETS, ORDER))


def test_a_label_most_of_the_pool_shares_still_ranks_its_candidates_first():
    # "great" is in 3 of 5 targets: Robertson's idf is 0 there (no signal for the majority label), Lucene's is not.
    targets = pl.DataFrame(
        {
            "id": [1, 2, 3, 4, 5],
            "target": ["It was great .", "It was great .", "It was great .", "It was bad .", "It was bad ."],
        }
    )
    scores = pl.DataFrame(
        {"query_id": [1, 1, 1], "candidate_id": [4, 2, 5], "score": [3.0, 2.0, 1.0], "rank": [1, 2, 3]}
    )
    order = scores.select("query_id", "candidate_id", "rank")
    assert target_feedback(scores, targets, order)["candidate_id"].to_list() == [2, 4, 5]


def test_a_scored_candidate_missing_from_the_list_is_an_error():
    from udr.errors import UdrError

    with pytest.raises(UdrError, match="candidate 11 of query 1 is not in the candidate list"):
        target_feedback(SCORES, TARGETS, ORDER.filter(pl.col("candidate_id") != 11))
