"""Metadata filters: retrieval restricted to the pool rows whose metadata match, before the ranking.

An own pool keeps each row's columns beyond those its task reads (the input, the target or label, and the
columns `--input-column` / `--target-column` name) as the row's metadata (:attr:`udr.serving.pools.Pool.metadata`).
A filter is an AND of equalities over them: ``{"lang": "en", "year": 2020}`` in Python (`Retriever.retrieve`,
`retrieve_batch`, the LangChain selector's `filter=`), ``--where lang=en --where year=2020`` in `udr retrieve`.
Values compare as text, a JSON value written as JSON (a CSV cell "2020" matches 2020, "true" matches True; a
row without the column matches nothing). The search runs over the rows that pass only (a searcher over their
embeddings: never a filter of the top k), so a filtered retrieval is the retrieval over the filtered pool.
A filter that leaves fewer than k rows returns those rows and says so in a notice; a column no row has is a
one-line error.

Imports of udr.retriever.search are inside the functions that use them (torch, only once a filtered search
is built).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np

from udr.errors import UdrError, is_collection, quoted
from udr.util.notice import notice

# Filtered searchers kept per served pool (the most recent filters): a repeated filter is not rebuilt.
KEPT_SEARCHERS = 16


def parse_where(clauses: Sequence[str]) -> dict[str, str]:
    """The filter of `udr retrieve --where COLUMN=VALUE` clauses (an AND); a clause without "=" or with an empty
    column, or two values for one column, is a one-line error."""
    out: dict[str, str] = {}
    if clauses is None:
        return out
    listed = list(clauses) if is_collection(clauses) else None
    if listed is None or not all(isinstance(clause, str) for clause in listed):
        raise UdrError(f"--where: expected COLUMN=VALUE clauses (a list of strings), got {quoted(clauses)}")
    for clause in listed:
        column, sep, value = clause.partition("=")
        column = column.strip()
        if not sep or not column:
            raise UdrError(f"--where {clause!r}: expected COLUMN=VALUE (e.g. --where lang=en)")
        if column in out and out[column] != value:
            raise UdrError(f"--where: two values for column '{column}' ({out[column]!r} and {value!r}) match no row")
        out[column] = value
    return out


def check_filter(where) -> dict:
    """`where` as a filter ({column: value}, values strings, numbers, booleans or None), or a one-line error."""
    if where is None:
        return {}
    if not isinstance(where, Mapping):
        raise UdrError(f"filter: expected a mapping of column to value, got {type(where).__name__}")
    for column, value in where.items():
        if not isinstance(column, str) or not column:
            raise UdrError(f"filter: a column name must be a non-empty string, got {column!r}")
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise UdrError(
                f"filter: the value of '{column}' must be a string, number, boolean or None, got {type(value).__name__}"
            )
    return dict(where)


def _text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


_ABSENT = object()


def passing_rows(pool, where: Mapping) -> np.ndarray:
    """The positions of `pool`'s rows whose metadata match every column of `where`, in pool order; a column
    no row has is a one-line error naming the columns there are."""
    columns = pool.metadata_columns
    for column in where:
        if column not in columns:
            known = ", ".join(columns) if columns else "none: filters read an own pool's extra columns"
            raise UdrError(f"filter: unknown column '{column}' in pool '{pool.name}' (its metadata columns: {known})")
    wanted = {column: _text(value) for column, value in where.items()}
    try:
        return np.asarray(
            [
                row
                for row, meta in enumerate(pool.metadata)
                if all(
                    (got := meta.get(column, _ABSENT)) is not _ABSENT and _text(got) == value
                    for column, value in wanted.items()
                )
            ],
            dtype=np.int64,
        )
    except (TypeError, ValueError):  # a value no JSON writes (a set, an object): say whose
        _check_json_values(pool, list(wanted))
        raise


def _check_json_values(pool, columns: list[str]) -> None:
    """A one-line error naming the first row whose value in one of `columns` is no JSON value (which filters
    compare as JSON text)."""
    for pid, meta in zip(pool.ids, pool.metadata):
        for column in columns:
            try:
                _text(meta.get(column))
            except (TypeError, ValueError):
                raise UdrError(
                    f"filter: pool '{pool.name}' row {int(pid)}'s value in column '{column}' is of type "
                    f"{type(meta[column]).__name__}: filters compare text, numbers, booleans, null and JSON values"
                ) from None


def _shown(where: Mapping) -> str:
    return " AND ".join(f"{column}={_text(value)}" for column, value in where.items())


def filtered_search(served, where: Mapping, k: int):
    """(the searcher over the rows of `served`'s pool that pass `where`, the k to ask it for): k, or the number
    of rows that pass where it is fewer (said in a notice); (None, 0) where no row passes. `served`: a
    :class:`udr.serving.served_pool.ServedPool`, whose `filtered` keeps the searchers of its recent filters."""
    from udr.retriever.search import ApproximateIndex, DenseRetriever

    pool, searcher = served.pool, served.searcher
    key = tuple(sorted((column, _text(value)) for column, value in where.items()))
    subset = served.filtered.get(key)
    if subset is None:
        rows = passing_rows(pool, where)
        subset = _NONE
        if len(rows):  # the searcher's rows are the pool's, in order
            subset = DenseRetriever(
                searcher.encoder,
                searcher.pool_ids[rows],
                searcher.pool_embeddings[rows],
                searcher.query_text,
                batch_size=searcher.batch_size,
                approximate=isinstance(searcher.index, ApproximateIndex),
            )
        if len(served.filtered) >= KEPT_SEARCHERS:
            served.filtered.clear()
        served.filtered[key] = subset
    passing = 0 if subset is _NONE else len(subset.pool_ids)
    if passing < k:
        notice(
            f"filter {_shown(where)} leaves {passing} of {len(pool)} rows of pool '{pool.name}': "
            f"returning {passing} demonstration{'' if passing == 1 else 's'}, not {k}"
        )
    return (None, 0) if subset is _NONE else (subset, min(k, passing))


_NONE = object()  # a filter no row passes (kept, so that it is not computed again)
