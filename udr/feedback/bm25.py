"""BM25: the sparse index (bm25s) and the round-0 candidates it yields (`udr candidates`,
:mod:`udr.stages.candidates`).

Scores are on the classic Okapi scale: bm25s' `robertson` variant times (k1 + 1), which equals
rank-bm25's `BM25Okapi(epsilon=0)` (the test oracle). Top-k is exact and deterministic: ties are
broken by position in the pool (lower first). `idf="lucene"` takes Lucene's (Elasticsearch's) idf,
log(1 + (N - n + 0.5) / (n + 0.5)), which stays above 0 where Robertson's is 0 (a word in half the texts
or more).

Imports of bm25s and polars are inside the functions that use them, to keep the start of `udr` and of its commands
light; bm25s is in the `pipeline` extra.
"""

from __future__ import annotations

import re
from typing import Literal

import numpy as np

from udr.config import CandidateField
from udr.data.tasks import TaskKind
from udr.errors import UdrError
from udr.util.progress import progress_bar

K1 = 1.5
B = 0.75
_TOKEN = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens (no stemming, no stop words: what the oracle sees too)."""
    return _TOKEN.findall(text.lower())


def stable_top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k largest scores, best first, ties broken by lower position."""
    n = len(scores)
    k = min(k, n)
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    if k == n:
        sel = np.arange(n)
    else:
        kth = np.partition(scores, n - k)[n - k]
        above = np.flatnonzero(scores > kth)
        ties = np.flatnonzero(scores == kth)[: k - len(above)]
        sel = np.concatenate([above, ties])
    return sel[np.lexsort((sel, -scores[sel]))]


class BM25Index:
    """A BM25 index over a list of texts; `idf` robertson (Okapi's, clipped at 0) or lucene."""

    def __init__(
        self, texts: list[str], k1: float = K1, b: float = B, idf: Literal["robertson", "lucene"] = "robertson"
    ):
        import bm25s

        self.k1 = k1
        self.size = len(texts)
        # Both variants share bm25s' term-frequency part; only the idf differs.
        self._bm25 = bm25s.BM25(method=idf, k1=k1, b=b)
        self._bm25.index([tokenize(t) for t in texts], show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        """Okapi BM25 score of every indexed text for `query` (float64, pool order)."""
        tokens = [t for t in tokenize(query) if t in self._bm25.vocab_dict]
        if not tokens:
            return np.zeros(self.size)
        return self._bm25.get_scores(tokens).astype(np.float64) * (self.k1 + 1)

    def top_k(self, query: str, k: int, exclude: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(positions, scores) of the k best texts for `query`, skipping position `exclude`."""
        scores = self.scores(query)
        if exclude is not None:
            scores[exclude] = -np.inf
            k = min(k, self.size - 1)
        top = stable_top_k(scores, k)
        return top, scores[top]


def candidate_field(kind: TaskKind, field: CandidateField) -> str:
    """Which text BM25 compares: the paper uses inputs for classification / multiple choice and
    targets for generation; the published code uses targets for all tasks."""
    if field == "paper":
        return "target" if kind == "generation" else "input"
    return field


def bm25_candidates(train, kind: TaskKind, field: CandidateField, k: int, progress: bool = True):
    """Top-k BM25 candidates from the train split for every train query, self excluded.

    `train` is a prepared polars frame; returns a frame (query_id, candidate_id, rank, score)
    with ranks 1..k per query (k capped at the pool size - 1).
    """
    import polars as pl

    if len(train) < 2:
        raise UdrError(f"BM25 candidates need at least 2 train rows, got {len(train)}")
    column = candidate_field(kind, field)
    texts = train[column].to_list()
    ids = np.asarray(train["id"].to_list(), dtype=np.int64)
    index = BM25Index(texts)
    q_ids, c_ids, ranks, scores = [], [], [], []
    with progress_bar(progress) as bar:
        job = bar.add_task(f"BM25 top-{k} over {column}s", total=len(texts))
        for pos, text in enumerate(texts):
            top, sc = index.top_k(text, k, exclude=pos)
            q_ids.append(np.full(len(top), ids[pos]))
            c_ids.append(ids[top])
            ranks.append(np.arange(1, len(top) + 1))
            scores.append(sc)
            bar.advance(job)
    return pl.DataFrame(
        {
            "query_id": np.concatenate(q_ids),
            "candidate_id": np.concatenate(c_ids),
            "rank": np.concatenate(ranks).astype(np.int32),
            "score": np.concatenate(scores).astype(np.float32),
        }
    )
