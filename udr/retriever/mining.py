"""Iterative candidate mining (paper: Z* = top-K over the task's whole train set by the retriever).

For round N > 0, the retriever of round N-1 embeds the task's pool with E_d and the scored queries
with E_q; the exact inner-product top-K (self excluded) are merged with round N-1's candidates
(:func:`mine_candidates`; the `udr mine` stage is :mod:`udr.stages.mine`).

The merged frame: query_id, candidate_id, rank and score (the retriever's rank 1..K and similarity;
null for candidates carried over from before and not mined again), new (not among the previous
round's candidates of that query).

Imports of polars and udr.retriever.encoder are inside the functions that use them, to keep the start of `udr` and
of its commands light.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from udr.data.tasks import Task
from udr.retriever.index import embed_pool
from udr.retriever.search import exact_top_k

MINED_COLUMNS = ["query_id", "candidate_id", "rank", "score", "new"]


@dataclass
class Mined:
    """A round's merged candidates and how they relate to the previous round's."""

    frame: object  # polars: MINED_COLUMNS
    mined: int  # pairs the retriever found (queries x k)
    new: int  # of them, not among the previous candidates
    previous: int  # the previous round's pairs of the scored queries
    found_again: int  # of them, mined again


def mine_candidates(
    encoder,
    task: Task,
    pool,
    queries: np.ndarray,
    previous,
    k: int,
    batch_size: int,
    device: str,
    progress: bool = True,
) -> Mined:
    """The top-`k` pool rows of each of `queries` (pool ids) by `encoder` (E_q against E_d, self excluded),
    merged with `previous` (polars: query_id, candidate_id; the previous round's candidates)."""
    import polars as pl

    from udr.retriever.encoder import query_text

    ids = np.asarray(pool["id"].to_list(), dtype=np.int64)
    position = {int(i): p for p, i in enumerate(ids)}
    q_pos = np.array([position[int(q)] for q in queries], dtype=np.int64)
    pool_emb = embed_pool(encoder, task, pool, batch_size, progress)
    texts = [query_text(task.instruction, pool["input"][int(p)], encoder.settings) for p in q_pos]
    query_emb = encoder.encode(texts, "query", batch_size=batch_size)
    scores, idx = exact_top_k(query_emb, pool_emb, k, exclude=q_pos, device=device)

    mined = pl.DataFrame(
        {
            "query_id": np.repeat(queries, k),
            "candidate_id": ids[idx.reshape(-1)],
            "rank": np.tile(np.arange(1, k + 1, dtype=np.int32), len(queries)),
            "score": scores.reshape(-1).astype(np.float64),
        }
    )
    previous = previous.select("query_id", "candidate_id").filter(pl.col("query_id").is_in(queries.tolist())).unique()
    old = previous.with_columns(pl.lit(False).alias("new"))
    merged = (
        mined.join(old, on=["query_id", "candidate_id"], how="full", coalesce=True)
        .with_columns(pl.col("new").fill_null(True))
        .sort(["query_id", "rank", "candidate_id"], nulls_last=True)
    )
    return Mined(
        merged.select(MINED_COLUMNS),
        len(mined),
        int(merged.filter(pl.col("rank").is_not_null())["new"].sum()),
        len(previous),
        len(previous.join(mined, on=["query_id", "candidate_id"], how="semi")),
    )
