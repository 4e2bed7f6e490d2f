"""The `udr score` stage: which pairs to score, reuse of earlier iterations, resumable shards,
torchrun scale-out, and the output file.

Output `data/scores/it<N>/<task>.parquet`: query_id, candidate_id, score, rank (1 = most helpful;
ties broken by lower candidate id), scored_in (the iteration that computed the score).
A summary with counts and throughput goes to `data/scores/it<N>/<task>.json`.

Resume: the pairs still to score are cut, in (query_id, candidate_id) order, into shards of
`score.shard_pairs`; each finished shard is written to `data/scores/it<N>/.<task>.partial/` at once.
A run started again skips finished shards, so its output equals an uninterrupted run's. The partial
directory carries a fingerprint of everything the scores depend on and is discarded on mismatch.
Under torchrun, process r scores shards r, r+P, ...; rank 0 merges once every process is done.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from udr.errors import UdrError
from udr.util.distributed import Distributed, resolve_lm_precision
from udr.util.files import file_sha256, write_parquet_atomic, write_text_atomic
from udr.util.progress import progress_bar

SCORE_COLUMNS = ("query_id", "candidate_id", "score", "rank", "scored_in")


def scores_path(root: Path, iteration: int, task: str) -> Path:
    return root / "data" / "scores" / f"it{iteration}" / f"{task}.parquet"


def candidates_path(root: Path, iteration: int, task: str) -> Path:
    return root / "data" / "candidates" / f"it{iteration}" / f"{task}.parquet"


def select_queries(train_ids: np.ndarray, n: int, seed: int, task: str) -> np.ndarray:
    """The seeded choice of at most n train query ids (depends on the pool's ids only: the same
    queries every iteration)."""
    from udr.data.prepare import task_rng

    ids = np.sort(np.asarray(train_ids, dtype=np.int64))
    return np.sort(task_rng(seed, task, "score-queries").permutation(ids)[:n])


def rank_within_query(frame):
    """Add `rank` (1 = highest score; ties by lower candidate id) within each query."""
    import polars as pl

    frame = frame.sort(["query_id", "score", "candidate_id"], descending=[False, True, False])
    return frame.with_columns(pl.int_range(1, pl.len() + 1).over("query_id").cast(pl.Int32).alias("rank"))


@dataclass
class ScoreSummary:
    task: str
    iteration: int
    queries: int
    pairs: int
    reused: int
    scored: int
    tokens: int
    padding_fraction: float
    seconds: float
    pairs_per_s: float
    tokens_per_s: float
    world_size: int
    device: str
    dtype: str
    top1_score_mean: float  # mean over queries of the best candidate's score (does mining find better ones?)


def run_score(
    settings, task_name: str, iteration: int, *, progress: bool = True, stop_after_shards: int | None = None
) -> ScoreSummary | None:
    """Score a task's pairs for one iteration; returns the summary (None on ranks other than 0,
    or when `stop_after_shards` ended the run early, which tests use to simulate a kill)."""
    import polars as pl
    import torch

    from udr.data.prepare import prepared_file, read_prepared
    from udr.data.tasks import get_task
    from udr.lm.models import load_causal_lm
    from udr.lm.scorer import BatchStats, LMScorer, PromptBuilder, score_items

    task = get_task(task_name)
    cfg = settings.score
    root = settings.root
    generation = task.family == "generation"
    start = time.perf_counter()

    train = read_prepared(root, task_name, "train")
    cand_file = candidates_path(root, iteration, task_name)
    if not cand_file.is_file():
        step = "udr candidates" if iteration == 0 else f"udr mine --iteration {iteration}"
        raise UdrError(f"missing candidates {cand_file}: run `{step}` first")
    cands = pl.read_parquet(cand_file, columns=["query_id", "candidate_id"])
    known = set(train["id"].to_list())
    unknown = sorted((set(cands["query_id"].to_list()) | set(cands["candidate_id"].to_list())) - known)
    if unknown:
        raise UdrError(
            f"{cand_file} names {len(unknown)} id(s) not in the prepared train split of "
            f"{task_name} (first: {unknown[:5]}); re-run `udr candidates` after `udr prepare`"
        )

    queries = select_queries(np.asarray(train["id"].to_list()), cfg.queries_per_task, settings.seed, task_name)
    pairs = cands.filter(pl.col("query_id").is_in(queries.tolist())).unique().sort(["query_id", "candidate_id"])

    reused = pl.DataFrame(
        schema={"query_id": pl.Int64, "candidate_id": pl.Int64, "score": pl.Float64, "scored_in": pl.Int16}
    )
    if iteration > 0:
        previous = scores_path(root, iteration - 1, task_name)
        if not previous.is_file():
            raise UdrError(f"missing scores of iteration {iteration - 1}: {previous}; run it first")
        old = pl.read_parquet(previous, columns=["query_id", "candidate_id", "score", "scored_in"])
        reused = pairs.join(old, on=["query_id", "candidate_id"], how="inner").select(reused.columns)
    todo = pairs.join(reused, on=["query_id", "candidate_id"], how="anti").sort(["query_id", "candidate_id"])

    device_type, dtype = resolve_lm_precision(settings.score.device, settings.score.dtype, "score")
    dist = Distributed(device_type)
    out = scores_path(root, iteration, task_name)
    partial = out.parent / f".{task_name}.partial"
    lm_dir = root / "models" / "base" / "lm"
    fingerprint = {
        "task": task_name,
        "iteration": iteration,
        "todo": len(todo),
        "shard_pairs": cfg.shard_pairs,
        "candidates": file_sha256(cand_file),
        "train": file_sha256(prepared_file(root, task_name, "train")),
        "lm": json.loads((lm_dir / "udr_model.json").read_text()) if (lm_dir / "udr_model.json").is_file() else None,
        "score": cfg.model_dump(exclude={"batch_tokens", "device"}),
        "dtype": dtype,
        "seed": settings.seed,
    }
    if dist.rank == 0:
        _open_partial(partial, fingerprint)
    dist.barrier()

    n_shards = -(-len(todo) // cfg.shard_pairs)
    mine = [
        s for s in range(n_shards) if s % dist.world == dist.rank and not (partial / f"shard-{s:05d}.parquet").is_file()
    ]

    totals = BatchStats()
    if mine:
        if device_type == "cpu" and dist.world > 1:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // dist.world))
        device = torch.device(f"cuda:{dist.local_rank}" if device_type == "cuda" else "cpu")
        model, tokenizer = load_causal_lm(lm_dir)
        model.to(device)
        scorer = LMScorer(model, bf16=dtype == "bf16", pad_id=tokenizer.pad_token_id or 0)
        rows = {r["id"]: r for r in train.iter_rows(named=True)}
        builder = PromptBuilder(
            tokenizer, task.template, task.instruction if cfg.instruction == "prefix" else None, cfg.max_length
        )
        q_col, c_col = todo["query_id"].to_list(), todo["candidate_id"].to_list()
        shard_bounds = {s: (s * cfg.shard_pairs, min((s + 1) * cfg.shard_pairs, len(todo))) for s in mine}
        with progress_bar(
            progress and dist.rank == 0, "{task.fields[pps]:.1f} pairs/s  {task.fields[tps]:.0f} tok/s"
        ) as bar:
            job = bar.add_task(
                f"scoring {task_name} it{iteration}",
                total=sum(hi - lo for lo, hi in shard_bounds.values()),
                pps=0.0,
                tps=0.0,
            )
            t0 = time.perf_counter()

            def tick(stats):
                totals.add(stats)
                dt = max(time.perf_counter() - t0, 1e-9)
                bar.update(job, advance=stats.pairs, pps=totals.pairs / dt, tps=totals.tokens / dt)

            for done, s in enumerate(mine):
                lo, hi = shard_bounds[s]
                items = [builder.item(rows[q], rows[c], generation) for q, c in zip(q_col[lo:hi], c_col[lo:hi])]
                scores, _ = score_items(scorer, items, generation, cfg.batch_tokens, on_batch=tick)
                shard = pl.DataFrame(
                    {
                        "query_id": q_col[lo:hi],
                        "candidate_id": c_col[lo:hi],
                        "score": scores,
                        "tokens": [it.n_tokens for it in items],
                    },
                    schema={"query_id": pl.Int64, "candidate_id": pl.Int64, "score": pl.Float64, "tokens": pl.Int64},
                )
                write_parquet_atomic(shard, partial / f"shard-{s:05d}.parquet")
                _append_stats(partial, dist.rank, s, asdict(totals))
                if stop_after_shards is not None and done + 1 >= stop_after_shards:
                    return None
    dist.barrier()
    if dist.rank != 0:
        dist.close()
        return None

    shard_files = [partial / f"shard-{s:05d}.parquet" for s in range(n_shards)]
    missing = [f.name for f in shard_files if not f.is_file()]
    if missing:
        raise UdrError(f"scoring {task_name}: shards missing after the run: {missing[:3]}")
    new = (
        pl.concat([pl.read_parquet(f) for f in shard_files])
        if shard_files
        else pl.DataFrame(
            schema={"query_id": pl.Int64, "candidate_id": pl.Int64, "score": pl.Float64, "tokens": pl.Int64}
        )
    )
    n_tokens = int(new["tokens"].sum() or 0)
    new = new.drop("tokens").with_columns(pl.lit(iteration, dtype=pl.Int16).alias("scored_in"))
    merged = rank_within_query(pl.concat([reused, new]))
    merged = merged.select(SCORE_COLUMNS)
    write_parquet_atomic(merged, out)
    pad = _padding_from_stats(partial)
    shutil.rmtree(partial, ignore_errors=True)
    seconds = time.perf_counter() - start
    summary = ScoreSummary(
        task_name,
        iteration,
        len(queries),
        len(merged),
        len(reused),
        len(new),
        n_tokens,
        pad,
        round(seconds, 2),
        round(len(new) / seconds, 2),
        round(n_tokens / seconds, 1),
        dist.world,
        device_type,
        dtype,
        round(float(merged.filter(pl.col("rank") == 1)["score"].mean() or float("nan")), 6),
    )
    write_text_atomic(out.with_suffix(".json"), json.dumps(asdict(summary), indent=2) + "\n")
    dist.close()
    return summary


def _open_partial(partial: Path, fingerprint: dict) -> None:
    """Keep finished shards only if they were made for exactly this work; start afresh otherwise."""
    manifest = partial / "manifest.json"
    if manifest.is_file():
        try:
            if json.loads(manifest.read_text()) == json.loads(json.dumps(fingerprint)):
                return
        except json.JSONDecodeError:
            pass
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    write_text_atomic(manifest, json.dumps(fingerprint, indent=2, sort_keys=True))


def _append_stats(partial: Path, rank: int, shard: int, stats: dict) -> None:
    with (partial / f"stats-rank{rank}.jsonl").open("a") as fh:
        fh.write(json.dumps({"shard": shard, **stats}) + "\n")


def _padding_from_stats(partial: Path) -> float:
    """Padding fraction over this run's batches (the last cumulative record of each process)."""
    tokens = padded = 0
    for f in partial.glob("stats-rank*.jsonl"):
        lines = f.read_text().splitlines()
        if lines:
            last = json.loads(lines[-1])
            tokens += last["tokens"]
            padded += last["padded"]
    return round(padded / (tokens + padded), 4) if tokens + padded else 0.0
