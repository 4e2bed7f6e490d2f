"""Label-aware selection over a served pool (`udr retrieve --label-weight / --label-votes / --per-label`,
`Retriever.retrieve(..., label_weight=, label_votes=, per_label=)`, the LangChain selector's and DSPy module's
arguments of those names): which label each served row carries, and the served search's ranking chosen by
:mod:`udr.retriever.label_selection`.

A row's label is its answer as the LM sees it: a classification pool's label verbalization, or the target of an
own pool read in the generation shape (no task named: its targets are taken as its labels, e.g. an intent per
row). A generation task's pool has no labels, and a multiple-choice pool's answers are each row's own options:
both are refused in one line.
"""

from __future__ import annotations

from collections.abc import Sequence

from udr.errors import UdrError
from udr.retriever.label_selection import LabelSelection, check_quota_fits, label_aware_ranking
from udr.retriever.search import check_k


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


def check_label_k(searcher, pool, labels: Sequence[str], k: int, selection: LabelSelection) -> int:
    """The number of rows `searcher` searches (the pool's, or those a metadata filter passes), after a one-line
    error where k is outside 1..that number or a quota their labels cannot fill."""
    rows = pool.positions
    searched = [int(pid) for pid in searcher.pool_ids]
    check_k(k, len(searched), False)
    check_quota_fits(selection, [labels[rows[pid]] for pid in searched], k, pool.name)
    return len(searched)


def label_ranking(searcher, pool, labels: Sequence[str], queries: Sequence[str], k: int, selection: LabelSelection):
    """[(pool ids, similarities)] per query: `searcher`'s candidates over `pool` (whose rows carry `labels`; the
    searcher holds the pool's rows, or those a metadata filter passes) chosen by
    :func:`udr.retriever.label_selection.select`. A quota the candidates leave short is filled from all the rows
    searched; a quota their labels cannot fill at all is a one-line error."""
    rows = pool.positions
    size = check_label_k(searcher, pool, labels, k, selection)

    def rank(positions, n):
        return searcher.rank([queries[p] for p in positions], n)

    return label_aware_ranking(rank, size, lambda pid: labels[rows[pid]], len(queries), k, selection)
