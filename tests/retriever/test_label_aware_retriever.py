"""udr.retriever.label_selection.LabelAwareRetriever: label-aware selection over any pool retriever, as
`udr evaluate -m METHOD+labels` uses it."""

from __future__ import annotations

import numpy as np
import pytest

from udr.errors import UdrError
from udr.retriever.label_selection import LabelAwareRetriever, LabelSelection
from udr.retriever.search import Ranking


class FixedOrder:
    """A retriever that ranks the pool by id, the same for every query, skipping an excluded id."""

    def __init__(self, ids):
        self.pool_ids = np.asarray(ids, dtype=np.int64)
        self.asked = []

    def rank(self, queries, k, exclude=None):
        self.asked.append(k)
        rows = []
        for i, _ in enumerate(queries):
            ids = [int(x) for x in self.pool_ids if exclude is None or x != exclude[i]][:k]
            rows.append(ids)
        ids = np.asarray(rows, dtype=np.int64)
        return Ranking(ids, -ids.astype(np.float32) / 100)


def test_weight_zero_and_no_quota_is_the_base_ranking():
    base = FixedOrder(range(20))
    labels = {i: i % 2 for i in range(20)}
    got = LabelAwareRetriever(base, labels, LabelSelection(0.0)).rank(["a", "b"], 3)
    assert got.ids.tolist() == [[0, 1, 2], [0, 1, 2]]


def test_a_quota_short_among_the_candidates_is_filled_from_the_whole_pool():
    """Ids 0-15 carry label "a" and 16-19 "b": with k 4 the 16 candidates hold no "b", so a quota of 2 a label
    searches the whole pool and takes two of each."""
    base = FixedOrder(range(20))
    labels = {i: "a" if i < 16 else "b" for i in range(20)}
    got = LabelAwareRetriever(base, labels, LabelSelection(0.0, per_label=2)).rank(["q"], 4)
    assert got.ids.tolist() == [[0, 1, 16, 17]]
    assert base.asked == [16, 20]


def test_the_excluded_id_stays_out_and_the_weight_reorders_by_the_vote():
    base = FixedOrder(range(10))
    labels = {i: "a" if i in (0, 1, 2, 3) else "b" for i in range(10)}
    # the 3 voters (1, 2, 3 once 0 is excluded) are all "a": with a large weight the "a" rows come first
    got = LabelAwareRetriever(base, labels, LabelSelection(10.0, votes=3)).rank(["q"], 4, exclude=[0])
    assert got.ids.tolist() == [[1, 2, 3, 4]]
    assert 0 not in got.ids


def test_a_quota_the_labels_cannot_fill_is_a_one_line_error():
    base = FixedOrder(range(10))
    retriever = LabelAwareRetriever(base, {i: i % 2 for i in range(10)}, LabelSelection(per_label=1))
    with pytest.raises(UdrError, match="per-label quota 1 over the 2 labels"):
        retriever.rank(["q"], 3)
