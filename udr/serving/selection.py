"""Label-aware selection: demonstrations chosen by their labels as well as their similarity, from a
classification pool (`udr retrieve --label-weight / --label-votes / --per-label`, `Retriever.retrieve(...,
label_weight=, label_votes=, per_label=)`, the LangChain selector's and DSPy module's arguments of those names).

For each query the retriever first takes a wider candidate set (`CANDIDATES` x k of the most similar rows, and
at least the voters). The query's label distribution p̂ is predicted from the retriever's own neighbours, no
extra model: the share of each label among the `votes` most similar pool rows (a plain vote). The candidates are
re-ranked by similarity + `weight` · p̂(the candidate's label) (weight 0: the similarity order), then taken from
that order under a per-label quota: at most q of a label, or `balanced` (the k shared as equally as possible
among the labels present among the candidates, a label with a better-ranked candidate first to get one more). A
quota the candidates cannot fill is filled from the whole pool. Weight 0 and no quota leave retrieval as it is.

A row's label is its answer as the LM sees it: a classification pool's label verbalization, or the target of an
own pool read in the generation shape (no task named: its targets are taken as its labels, e.g. an intent per
row). A generation task's pool has no labels, and a multiple-choice pool's answers are each row's own options:
both are refused in one line.
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from udr.errors import UdrError
from udr.retriever.search import check_k

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


def pool_labels(pool, own_shape: bool) -> Sequence[str]:
    """Each row's label, in row order (`pool.outputs`): a classification pool's, or an own pool's read in the
    generation shape (`own_shape`); else a one-line error saying why the pool has none."""
    kind = pool.task.kind
    if kind == "classification" or (kind == "generation" and own_shape):
        return pool.outputs
    if kind == "multiple_choice":
        why = f"{pool.name} is a multiple-choice pool (each row answers with its own options: no labels shared)"
    else:
        why = f"{pool.name} is a generation pool (its rows have no labels)"
    raise UdrError(f"label-aware selection needs a classification pool: {why}")


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


def label_ranking(searcher, pool, labels: Sequence, queries: Sequence[str], k: int, selection: LabelSelection):
    """[(pool ids, similarities)] per query: `searcher`'s candidates over `pool` (whose rows carry `labels`)
    chosen by :func:`select`. A quota the candidates leave short is filled from the whole pool; a quota the
    pool's labels cannot fill at all is a one-line error."""
    size = len(pool)
    check_k(k, size, False)
    if isinstance(selection.per_label, int):
        present = len(set(labels))
        if selection.per_label * present < k:
            raise UdrError(
                f"per-label quota {selection.per_label} over the {present} labels of pool {pool.name} gives at "
                f"most {selection.per_label * present} demonstrations: asked for {k}"
            )
    rows = pool.positions
    fetch = min(size, max(CANDIDATES * k, selection.votes))
    ranking = searcher.rank(queries, fetch)
    out = []
    for query, ids, sims in zip(queries, ranking.ids, ranking.similarities):
        chosen = select(sims, [labels[rows[int(i)]] for i in ids], k, selection)
        if len(chosen) < k and fetch < size:  # a label short among the candidates: take the whole pool
            wide = searcher.rank([query], size)
            ids, sims = wide.ids[0], wide.similarities[0]
            chosen = select(sims, [labels[rows[int(i)]] for i in ids], k, selection)
        out.append((ids[chosen], sims[chosen]))
    return out
