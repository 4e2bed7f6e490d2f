"""Label-aware selection: demonstrations chosen by their labels as well as their similarity, from a pool whose
rows carry labels (a classification task's answers), over any retriever's ranking.

For each query a wider candidate set is taken first (`CANDIDATES` x k of the most similar rows, and at least the
voters). The query's label distribution p̂ is predicted from the retriever's own neighbours, no extra model: the
share of each label among the `votes` most similar pool rows (a plain vote). The candidates are re-ranked by
similarity + `weight` · p̂(the candidate's label) (weight 0: the similarity order), then taken from that order
under a per-label quota: at most q of a label, or `balanced` (the k shared as equally as possible among the labels
present among the candidates, a label with a better-ranked candidate first to get one more). A quota the
candidates cannot fill is filled from the whole pool. Weight 0 and no quota leave retrieval as it is.

In the spirit of L2D (arXiv 2511.10675: a predicted label distribution re-ranks TopK candidates) and of
class-balanced selection; serving (`udr retrieve --label-weight / --label-votes / --per-label`) and evaluation
(`udr evaluate -m METHOD+labels`, settings `evaluate.labels`) both use it.
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from udr.errors import UdrError
from udr.retriever.search import Ranking, check_k

BALANCED = "balanced"
DEFAULT_VOTES = 16
# Label-aware selection re-ranks this many times k of the most similar demonstrations.
CANDIDATES = 4


def check_per_label(per_label) -> int | str | None:
    """`per_label` as a quota: None (none), a whole number q >= 1 (a digit string too, as the CLI gives it) or
    "balanced"; else a one-line UdrError."""
    if per_label is None or per_label == BALANCED:
        return per_label
    if isinstance(per_label, str) and per_label.strip().isdigit():
        per_label = int(per_label)
    if isinstance(per_label, bool) or not isinstance(per_label, numbers.Integral) or per_label < 1:
        raise UdrError(f"bad per-label quota {per_label!r}: expected a whole number of at least 1, or '{BALANCED}'")
    return int(per_label)


@dataclass(frozen=True)
class LabelSelection:
    """How labels weigh in a retrieval: `weight` (γ, >= 0) on the predicted share of a candidate's label, the
    `votes` (m) nearest rows that predict it, and the `per_label` quota (None, q, or "balanced"). Made, it is
    checked (one-line UdrErrors)."""

    weight: float = 0.0
    votes: int = DEFAULT_VOTES
    per_label: int | str | None = None

    def __post_init__(self) -> None:
        weight = self.weight
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not math.isfinite(weight) or weight < 0:
            raise UdrError(f"bad label weight {weight!r}: expected a number of at least 0 (0: labels do not re-rank)")
        votes = self.votes
        if isinstance(votes, bool) or not isinstance(votes, numbers.Integral) or votes < 1:
            raise UdrError(f"bad label votes {votes!r}: expected a whole number of nearest rows, at least 1")
        object.__setattr__(self, "weight", float(weight))
        object.__setattr__(self, "votes", int(votes))
        object.__setattr__(self, "per_label", check_per_label(self.per_label))

    @property
    def active(self) -> bool:
        """Whether labels change the retrieval at all (a weight above 0, or a quota)."""
        return self.weight > 0 or self.per_label is not None

    @property
    def options(self) -> dict:
        """These settings as `Retriever.retrieve` takes them (label_weight, label_votes, per_label)."""
        return {"label_weight": self.weight, "label_votes": self.votes, "per_label": self.per_label}

    def check_with(self, diversity: float) -> None:
        """A one-line error where labels and maximal marginal relevance are asked together."""
        if self.active and diversity:
            raise UdrError("label-aware selection and diversity (maximal marginal relevance) go separately: give one")


def predicted_labels(neighbour_labels: Sequence) -> dict:
    """p̂: each label's share among `neighbour_labels` (the most similar pool rows' labels), a plain vote."""
    counts = Counter(neighbour_labels)
    return {label: n / len(neighbour_labels) for label, n in counts.items()}


def rerank(similarities: np.ndarray, labels: Sequence, weight: float, predicted: dict) -> np.ndarray:
    """Candidate positions ordered by similarity + weight · predicted[label] (descending), ties by position."""
    boost = np.array([predicted.get(label, 0.0) for label in labels], dtype=np.float64)
    score = np.asarray(similarities, dtype=np.float64) + weight * boost
    return np.lexsort((np.arange(len(score)), -score))


def quota_pick(ranked_labels: Sequence, k: int, per_label: int | str | None) -> list[int]:
    """The positions (at most k, in order) taken from `ranked_labels` (the candidates' labels, best first)
    under the quota: none, at most q of a label, or "balanced" (see the module docstring)."""
    if per_label is None:
        return list(range(min(k, len(ranked_labels))))
    if per_label == BALANCED:
        available = Counter(ranked_labels)
        order = list(dict.fromkeys(ranked_labels))  # by first (best) candidate
        quota = dict.fromkeys(order, 0)
        left = min(k, len(ranked_labels))
        while left:
            for label in order:
                if left and quota[label] < available[label]:
                    quota[label] += 1
                    left -= 1
    else:
        quota = dict.fromkeys(ranked_labels, per_label)
    taken: Counter = Counter()
    picked = []
    for position, label in enumerate(ranked_labels):
        if len(picked) == k:
            break
        if taken[label] < quota[label]:
            taken[label] += 1
            picked.append(position)
    return picked


def select(similarities: np.ndarray, labels: Sequence, k: int, selection: LabelSelection) -> list[int]:
    """The candidate positions chosen for one query (at most k, in their label-aware order): `similarities`
    and `labels` are the candidates', most similar first; p̂ is voted by the first `selection.votes`."""
    order = np.arange(len(labels))
    if selection.weight > 0:
        predicted = predicted_labels(labels[: selection.votes])
        order = rerank(similarities, labels, selection.weight, predicted)
    picked = quota_pick([labels[i] for i in order], k, selection.per_label)
    return [int(order[i]) for i in picked]


def check_quota_fits(selection: LabelSelection, labels: Sequence, k: int, pool_name: str) -> None:
    """A one-line error where a whole-number quota over the labels present cannot give k demonstrations."""
    if isinstance(selection.per_label, int):
        present = len(set(labels))
        if selection.per_label * present < k:
            raise UdrError(
                f"per-label quota {selection.per_label} over the {present} labels of pool {pool_name} gives at "
                f"most {selection.per_label * present} demonstrations: asked for {k}"
            )


def label_aware_ranking(
    rank: Callable[[Sequence[int], int], Ranking],
    size: int,
    label_of: Callable[[int], object],
    n_queries: int,
    k: int,
    selection: LabelSelection,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """[(pool ids, similarities)] per query, chosen by :func:`select` from `rank(query positions, n)` (a retriever's
    n best pool ids per query, most similar first) over a pool of `size` rows whose ids carry `label_of(id)`. A
    quota the candidates leave short is filled from the whole pool."""
    fetch = min(size, max(CANDIDATES * k, selection.votes))
    ranking = rank(range(n_queries), fetch)
    out = []
    for position, ids, sims in zip(range(n_queries), ranking.ids, ranking.similarities):
        chosen = select(sims, [label_of(int(i)) for i in ids], k, selection)
        if len(chosen) < k and fetch < size:  # a label short among the candidates: take the whole pool
            wide = rank([position], size)
            ids, sims = wide.ids[0], wide.similarities[0]
            chosen = select(sims, [label_of(int(i)) for i in ids], k, selection)
        out.append((ids[chosen], sims[chosen]))
    return out


class LabelAwareRetriever:
    """Any pool retriever (:class:`udr.retriever.search.PoolRetriever`) with label-aware selection on top: its
    `rank` takes `selection`'s candidates from `base` and chooses among them by :func:`select`. `labels`: each
    pool id's label."""

    def __init__(self, base, labels: Mapping[int, object], selection: LabelSelection, pool_name: str = "pool"):
        self.base, self.labels, self.selection, self.pool_name = base, dict(labels), selection, pool_name
        self.pool_ids = base.pool_ids

    def rank(self, queries: Sequence[str], k: int, exclude: Sequence[int | None] | None = None) -> Ranking:
        """The k pool ids per query chosen by labels and similarity (`exclude[i]`: a pool id query i must not get)."""
        size = len(self.pool_ids) - (1 if exclude is not None and any(e is not None for e in exclude) else 0)
        check_k(k, len(self.pool_ids), exclude is not None)
        check_quota_fits(self.selection, list(self.labels.values()), k, self.pool_name)

        def rank(positions, n):
            positions = list(positions)
            picked_exclude = None if exclude is None else [exclude[p] for p in positions]
            return self.base.rank([queries[p] for p in positions], n, picked_exclude)

        chosen = label_aware_ranking(rank, size, self.labels.__getitem__, len(queries), k, self.selection)
        ids = np.stack([c[0] for c in chosen]) if chosen else np.empty((0, k), dtype=np.int64)
        sims = np.stack([c[1] for c in chosen]) if chosen else np.empty((0, k), dtype=np.float32)
        return Ranking(ids.astype(np.int64), sims.astype(np.float32))
