"""Iterative candidate mining (paper: Z* = top-K over the task's whole train set by the retriever).

For round N > 0, the retriever of round N-1 embeds the task's pool with E_d and the scored queries
with E_q; the exact inner-product top-K (self excluded) are merged with round N-1's candidates.

Output `data/candidates/round<N>/<task>.parquet`: query_id, candidate_id, rank and score (the
retriever's rank 1..K and similarity; null for candidates carried over from before and not mined
again), new (not among the previous round's candidates of that query). A JSON summary beside it
reports how many mined candidates were new and how much of the previous list was found again.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from udr.errors import UdrError
from udr.paths import summary_file
from udr.util.files import write_json_atomic, write_parquet_atomic


@dataclass
class MineSummary:
    task: str
    round: int
    queries: int
    k: int
    mined: int
    new: int
    new_fraction: float
    previous: int
    previous_found_again: float
    candidates: int
    seconds: float


def run_mine(settings, task_name: str, round_: int, *, progress: bool = True) -> MineSummary:
    """Mine round `round_`'s candidates of a task with the previous round's retriever; write them and
    their summary, and return it."""
    import polars as pl

    from udr.data.prepare import read_prepared
    from udr.feedback.scores_file import scored_queries
    from udr.retriever.encoder import BiEncoder, query_text
    from udr.retriever.index import embed_pool
    from udr.retriever.search import exact_top_k
    from udr.util.distributed import resolve_device_type

    if round_ < 1:
        raise UdrError("mining starts at round 1 (round 0's candidates come from `udr candidates`)")
    start = time.perf_counter()
    root, paths = settings.root, settings.paths
    task = settings.task(task_name)
    model_dir = paths.round_model(round_ - 1)
    if not model_dir.is_dir():
        raise UdrError(f"missing model {model_dir}: run `udr train --round {round_ - 1}` first")
    previous_file = paths.candidates(round_ - 1, task_name)
    if not previous_file.is_file():
        raise UdrError(f"missing candidates {previous_file}: run round {round_ - 1} first")

    pool = read_prepared(root, task_name, "train")
    ids = np.asarray(pool["id"].to_list(), dtype=np.int64)
    queries = scored_queries(settings, task_name, ids)
    position = {int(i): p for p, i in enumerate(ids)}
    q_pos = np.array([position[int(q)] for q in queries], dtype=np.int64)
    k = min(settings.mine.k, len(ids) - 1)
    if k < 1:
        raise UdrError(f"{task_name}: the pool has {len(ids)} rows, too few to mine from")

    device = resolve_device_type(settings.train.device, "train.device")
    encoder = BiEncoder.load(model_dir).to(device)
    pool_emb = embed_pool(encoder, task, pool, settings.mine.batch_size, progress)
    texts = [query_text(task.instruction, pool["input"][int(p)], encoder.settings) for p in q_pos]
    query_emb = encoder.encode(texts, "query", batch_size=settings.mine.batch_size)
    scores, idx = exact_top_k(query_emb, pool_emb, k, exclude=q_pos, device=device)

    mined = pl.DataFrame(
        {
            "query_id": np.repeat(queries, k),
            "candidate_id": ids[idx.reshape(-1)],
            "rank": np.tile(np.arange(1, k + 1, dtype=np.int32), len(queries)),
            "score": scores.reshape(-1).astype(np.float64),
        }
    )
    previous = (
        pl.read_parquet(previous_file, columns=["query_id", "candidate_id"])
        .filter(pl.col("query_id").is_in(queries.tolist()))
        .unique()
    )
    old = previous.with_columns(pl.lit(False).alias("new"))
    merged = (
        mined.join(old, on=["query_id", "candidate_id"], how="full", coalesce=True)
        .with_columns(pl.col("new").fill_null(True))
        .sort(["query_id", "rank", "candidate_id"], nulls_last=True)
    )
    n_new = int(merged.filter(pl.col("rank").is_not_null())["new"].sum())
    found_again = len(previous.join(mined, on=["query_id", "candidate_id"], how="semi"))
    out = paths.candidates(round_, task_name)
    write_parquet_atomic(merged.select(["query_id", "candidate_id", "rank", "score", "new"]), out)
    summary = MineSummary(
        task_name,
        round_,
        len(queries),
        k,
        len(mined),
        n_new,
        round(n_new / max(len(mined), 1), 4),
        len(previous),
        round(found_again / max(len(previous), 1), 4),
        len(merged),
        round(time.perf_counter() - start, 2),
    )
    write_json_atomic(summary_file(out), asdict(summary))
    return summary
