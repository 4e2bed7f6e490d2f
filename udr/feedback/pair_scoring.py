"""Scoring candidate pairs with the LM, resumably: the library under `udr score` (:mod:`udr.stages.score`)
and the instruments' oracle scoring (:mod:`udr.experiments.instruments`).

A :class:`ScoreWork` is what one run has to do for a task and round: the pairs reused from an earlier
round and those to score now. :func:`score_work` scores the latter in shards of `score.shard_pairs`,
each written at once to the partial directory beside the output (:mod:`udr.util.resume`), whose manifest
fingerprints everything the scores depend on; a run started again skips finished shards, so its output
equals an uninterrupted run's. Under torchrun, process r scores shards r, r+P, ...; rank 0 merges them
once every process is done, ranks each query's candidates and writes the scores with their manifest
(:mod:`udr.feedback.scores_file`).

Imports of polars and torch are inside the functions that use them, to keep the start of `udr` and of its
commands light.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from udr.config import ScoreSettings
from udr.data.tasks import Task
from udr.errors import UdrError
from udr.feedback.scores_file import ScoresManifest, check_finite, inputs_hash
from udr.feedback.scoring import rank_within_query, score_items
from udr.lm.loading import load_causal_lm, read_provenance
from udr.lm.packed import make_scorer
from udr.lm.prompt import PromptBuilder
from udr.lm.scorer import BatchStats
from udr.paths import round_label, summary_file
from udr.util.distributed import Distributed, resolve_lm_precision, use_threads
from udr.util.files import check_output_path, file_sha256, write_json_atomic, write_parquet_atomic
from udr.util.machine import machine_kind
from udr.util.progress import progress_bar
from udr.util.resume import finish_publishing, open_partial, partial_dir, publish

SCORE_COLUMNS = ("query_id", "candidate_id", "score", "rank", "scored_in")


@dataclass
class ScoreSummary:
    task: str
    round: int
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
    machine: str = ""  # the device kind that scored (:func:`udr.util.machine.machine_kind`)
    shipped: dict | None = None  # what was taken from shipped feedback and how its sample agreed (udr.feedback.shipped)
    # the scoring engine that ran (padded or packed; both, "+"-joined, where a resumed run changed it; None
    # where no pair was scored here); optional when read, as reports written before it lack it
    engine: str | None = None


@dataclass
class ScoreWork:
    """What one run of the stage has to do for a task and round."""

    task: Task
    round: int
    train: object  # the rows the pairs name (polars): the prepared train split (an instrument adds its queries)
    train_file: Path  # the prepared train split's file, whose hash the scores depend on
    candidates_file: Path
    queries: np.ndarray  # the scored query ids, in the order of their seeded choice (the manifest's)
    reused: object  # pairs scored in an earlier round: query_id, candidate_id, score, scored_in
    todo: object  # pairs to score now: query_id, candidate_id, in candidate order
    seed: int | None = None  # the seed of the queries' choice (None: an instrument's own queries)
    taken_from: str | None = None  # the shipped feedback whose pairs were taken (`score.shipped`)


@dataclass(frozen=True)
class ScoringSetup:
    """What scoring reads besides the pairs: the `score` settings, the resolved LM and the project's seed."""

    score: ScoreSettings
    lm_dir: Path
    seed: int


def score_work(
    setup: ScoringSetup,
    work: ScoreWork,
    out: Path,
    *,
    report: Path | None = None,
    depends_on: dict | None = None,
    start: float | None = None,
    progress: bool = True,
    stop_after_shards: int | None = None,
    sample=None,
    companions: dict[Path, dict] | None = None,
) -> ScoreSummary | None:
    """Score `work` (the stage's, or an instrument's pairs) in resumable shards and write `out` with its
    manifest, and the run's summary to `report` (where given). `depends_on` adds to what the shards'
    fingerprint records; `sample` (a :class:`udr.feedback.shipped.ShippedSample`) checks this run's scores
    of the shipped sample before anything is written; `companions` ({path: JSON object}) are files published
    with the output, all or none (:func:`udr.util.resume.publish`). Returns the summary (None on ranks other
    than 0, or when `stop_after_shards` ended the run early, which tests use to simulate a kill)."""
    start = time.perf_counter() if start is None else start
    for target in (out, report) if report is not None else (out,):
        check_output_path(target, "scores file")  # before the LM loads: a read-only folder is one line
    device_type, dtype = resolve_lm_precision(setup.score.device, setup.score.dtype, "score")
    dist = Distributed(device_type)
    partial = partial_dir(out)
    if dist.rank == 0:
        finish_publishing(partial)
        open_partial(partial, {**_fingerprint(setup, work, dtype), **(depends_on or {})})
    dist.barrier()
    n_shards = -(-len(work.todo) // setup.score.shard_pairs)
    mine = [s for s in range(n_shards) if s % dist.world == dist.rank and not _shard_file(partial, s).is_file()]
    finished = score_shards(setup, work, mine, partial, dist, device_type, dtype, progress, stop_after_shards)
    if not finished:
        return None
    dist.barrier()
    if dist.rank != 0:
        dist.close()
        return None
    inputs = pair_inputs(work, setup.score, setup.lm_dir, dtype)
    summary = finish(
        work, n_shards, partial, out, report, start, dist.world, device_type, dtype, inputs, sample, companions or {}
    )
    dist.close()
    return summary


def pair_inputs(work: ScoreWork, cfg: ScoreSettings, lm_dir: Path, dtype: str) -> dict:
    """What a pair's score depends on: the task, round, data, LM, prompt settings and precision; not
    which queries are scored, nor the candidate lists the pair came from (`candidates.k`), nor speed.
    The LM is its record less the conversion check's numbers (`verification`): those are one forward
    pass's last bits, which differ between CPUs (AVX2, AVX-512) for the same weights."""
    record = read_provenance(lm_dir)
    return {
        "task": work.task.name,
        "round": work.round,
        "train": file_sha256(work.train_file),
        "lm": {k: v for k, v in record.items() if k != "verification"} if record is not None else None,
        "score": cfg.model_dump(include={"max_length", "instruction"}),
        "dtype": dtype,
    }


def score_inputs(work: ScoreWork, cfg: ScoreSettings, lm_dir: Path, dtype: str) -> str:
    """The hash of :func:`pair_inputs`, kept in the manifest: a later run with the same reuses the scores."""
    return inputs_hash(pair_inputs(work, cfg, lm_dir, dtype))


def _fingerprint(setup: ScoringSetup, work: ScoreWork, dtype: str) -> dict:
    """Everything finished shards depend on (a partial run with another fingerprint is discarded): the
    pairs' inputs, which pairs and how they are cut into shards, and every score setting but speed."""
    return {
        **pair_inputs(work, setup.score, setup.lm_dir, dtype),
        "candidates": file_sha256(work.candidates_file),
        "todo": len(work.todo),
        "shard_pairs": setup.score.shard_pairs,
        "shard_order": ["candidate_id", "query_id"],
        "score": setup.score.model_dump(exclude={"batch_tokens", "device", "engine"}),
        "seed": setup.seed,
    }


def _shard_file(partial: Path, shard: int) -> Path:
    return partial / f"shard-{shard:05d}.parquet"


def score_shards(
    setup: ScoringSetup, work: ScoreWork, shards, partial: Path, dist, device_type, dtype, progress, stop_after_shards
) -> bool:
    """Step 2: score this process's unfinished `shards`, writing each as it finishes. False when
    `stop_after_shards` stopped the run early."""
    if not shards:
        return True
    import polars as pl
    import torch

    cfg = setup.score
    if device_type == "cpu":
        use_threads(cfg.threads, dist.world)
    device = torch.device(f"cuda:{dist.local_rank}" if device_type == "cuda" else "cpu")
    model, tokenizer = load_causal_lm(setup.lm_dir)
    model.to(device)
    scorer = make_scorer(
        cfg.engine, model, bf16=dtype == "bf16", pad_id=tokenizer.pad_token_id or 0, batch_tokens=cfg.batch_tokens
    )
    rows = {r["id"]: r for r in work.train.iter_rows(named=True)}
    instruction = work.task.instruction if cfg.instruction == "prefix" else None
    builder = PromptBuilder(tokenizer, work.task, instruction, cfg.max_length)
    q_col, c_col = work.todo["query_id"].to_list(), work.todo["candidate_id"].to_list()
    bounds = {s: (s * cfg.shard_pairs, min((s + 1) * cfg.shard_pairs, len(work.todo))) for s in shards}
    totals = BatchStats()
    columns = "{task.fields[pps]:.1f} pairs/s  {task.fields[tps]:.0f} tok/s"
    with progress_bar(progress and dist.rank == 0, columns) as bar:
        description = f"scoring {work.task.name} {round_label(work.round)}"
        job = bar.add_task(description, total=sum(hi - lo for lo, hi in bounds.values()), pps=0.0, tps=0.0)
        t0 = time.perf_counter()

        def tick(stats):
            totals.add(stats)
            dt = max(time.perf_counter() - t0, 1e-9)
            bar.update(job, advance=stats.pairs, pps=totals.pairs / dt, tps=totals.tokens / dt)

        for done, s in enumerate(shards):
            lo, hi = bounds[s]
            items = [builder.scoring_item(rows[q], rows[c]) for q, c in zip(q_col[lo:hi], c_col[lo:hi])]
            scores, _ = score_items(
                scorer, items, work.task.generation, cfg.batch_tokens, on_batch=tick, share_prefixes=cfg.share_prefixes
            )
            shard = pl.DataFrame(
                {
                    "query_id": q_col[lo:hi],
                    "candidate_id": c_col[lo:hi],
                    "score": scores,
                    "tokens": [it.n_tokens for it in items],
                },
                schema={"query_id": pl.Int64, "candidate_id": pl.Int64, "score": pl.Float64, "tokens": pl.Int64},
            )
            write_parquet_atomic(shard, _shard_file(partial, s))
            _append_stats(partial, dist.rank, s, {**asdict(totals), "engine": scorer.engine})
            if stop_after_shards is not None and done + 1 >= stop_after_shards:
                return False
    return True


def finish(
    work: ScoreWork,
    n_shards: int,
    partial: Path,
    out: Path,
    report: Path | None,
    start: float,
    world,
    device_type,
    dtype,
    inputs: dict,
    sample,
    companions: dict[Path, dict],
):
    """Step 3 (rank 0): merge the shards with the reused pairs (the shipped sample's checked and replaced
    by the shipped scores, where there is one), rank, stage the output with its manifest and `companions` in
    `partial` and publish them together, then write the run's summary to `report` (where given)."""
    import polars as pl

    shard_files = [_shard_file(partial, s) for s in range(n_shards)]
    missing = [f.name for f in shard_files if not f.is_file()]
    if missing:
        raise UdrError(f"scoring {work.task.name}: shards missing after the run: {missing[:3]}")
    schema = {"query_id": pl.Int64, "candidate_id": pl.Int64, "score": pl.Float64, "tokens": pl.Int64}
    new = pl.concat([pl.read_parquet(f) for f in shard_files]) if shard_files else pl.DataFrame(schema=schema)
    n_tokens = int(new["tokens"].sum() or 0)
    new = new.drop("tokens").with_columns(pl.lit(work.round, dtype=pl.Int16).alias("scored_in"))
    check_finite(new, f"the LM's scores of {work.task.name} {round_label(work.round)}", "try score.dtype=fp32")
    n_new, shipped = len(new), None
    if sample is not None:
        new, shipped = sample.verify(new)
    merged = rank_within_query(pl.concat([work.reused, new])).select(SCORE_COLUMNS)
    staged = partial / "output.parquet"
    write_parquet_atomic(merged, staged)
    pad = _padding_from_stats(partial)
    engine = _engine_from_stats(partial)
    seconds = time.perf_counter() - start
    summary = ScoreSummary(
        work.task.name,
        work.round,
        len(work.queries),
        len(merged),
        len(work.reused),
        n_new,
        n_tokens,
        pad,
        round(seconds, 2),
        round(n_new / seconds, 2),
        round(n_tokens / seconds, 1),
        world,
        device_type,
        dtype,
        round(float(merged.filter(pl.col("rank") == 1)["score"].mean() or float("nan")), 6),
        machine_kind(device_type),
        shipped,
        engine,
    )
    ScoresManifest(
        work.task.name,
        work.round,
        work.seed,
        [int(q) for q in work.queries],
        len(merged),
        inputs,
        inputs_hash(inputs),
        file_sha256(staged),
        machine_kind(device_type),
        shipped["source"] if shipped else work.taken_from,
    ).write(staged)
    files = {staged.name: out, summary_file(staged).name: summary_file(out)}
    for i, (path, content) in enumerate(companions.items()):
        write_json_atomic(partial / f"companion-{i}.json", content)
        files[f"companion-{i}.json"] = path
    publish(partial, files)
    if report is not None:
        write_json_atomic(report, asdict(summary))
    return summary


def _append_stats(partial: Path, rank: int, shard: int, stats: dict) -> None:
    with (partial / f"stats-rank{rank}.jsonl").open("a") as fh:
        fh.write(json.dumps({"shard": shard, **stats}) + "\n")


def _stats_records(partial: Path) -> dict[str, list[dict]]:
    """Each process's stats records ({file name: records in order}); a line a crash tore (the last one a
    process appended) is skipped: the stats are a report's, and the shards are whole without them."""
    out = {}
    for f in sorted(partial.glob("stats-rank*.jsonl")):
        records = []
        for line in f.read_text(errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
        out[f.name] = [r for r in records if isinstance(r, dict)]
    return out


def _engine_from_stats(partial: Path) -> str | None:
    """The engine(s) that scored this run's shards, "+"-joined; None where no shard was scored."""
    engines = {r.get("engine") for records in _stats_records(partial).values() for r in records}
    return "+".join(sorted(e for e in engines if isinstance(e, str) and e)) or None


def _padding_from_stats(partial: Path) -> float:
    """Padding fraction over this run's batches (the last cumulative record of each process)."""
    tokens = padded = 0
    for records in _stats_records(partial).values():
        if records:
            tokens += records[-1].get("tokens", 0)
            padded += records[-1].get("padded", 0)
    return round(padded / (tokens + padded), 4) if tokens + padded else 0.0
