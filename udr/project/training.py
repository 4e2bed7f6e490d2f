"""A project's training, as `udr train` (:mod:`udr.stages.train`) and the benchmarks run it: the training tasks'
scored queries of a round (load), the round's trainer built from the project's settings (build), the steps
(run), the model, its record and the log's summary (write).

Resume: a checkpoint beside the output (``.<name>.partial``, :mod:`udr.util.resume`), fingerprinting every
input, is picked up by the next run with the same inputs, which continues exactly as an uninterrupted run
would (:mod:`udr.retriever.training`). Under torchrun every process trains its share of each step; rank 0
writes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl
import torch

from udr.data.prepare import read_prepared
from udr.feedback.scores_file import load_scores
from udr.paths import TRAINED_BASELINES
from udr.retriever.initial import describe_init, initial_encoder
from udr.retriever.recipes import recorded_train_settings
from udr.retriever.record import trained_model_record
from udr.retriever.train_log import TrainLog
from udr.retriever.training import (
    ScoredQuery,
    Trainer,
    TrainSummary,
    finish,
    resume_trainer,
    round_schedule,
    train_steps,
    training_queries,
)
from udr.util.distributed import Distributed, resolve_device_type, resolve_lm_precision, use_threads
from udr.util.files import file_sha256, remove
from udr.util.resume import open_partial, partial_dir

if TYPE_CHECKING:
    from udr.config import Settings


def load_scored_queries(
    settings: Settings, tasks: Sequence[str], round_: int, encoder_settings
) -> dict[str, list[ScoredQuery]]:
    """`udr train`'s step 1: each task's scored queries of `round_` with their candidates as encoder texts, LM order.
    Only `score.queries_per_task` of them, as the scores' manifest lists them (its first n are the choice
    of n, so a file scored for more queries holds them); a file scored for fewer, or with another seed,
    is an error."""
    out: dict[str, list[ScoredQuery]] = {}
    feedback = settings.train.feedback  # lm, or labels / lm+labels: the labels of a task with labels rank them
    for name in tasks:
        path = settings.paths.scores(round_, name)
        manifest, scores = load_scores(path, round_, name)
        train = read_prepared(settings.root, name, "train")
        wanted = manifest.chosen_queries(settings.score.queries_per_task, settings.seed, path, pool=train.height)
        scores = scores.filter(pl.col("query_id").is_in(wanted.tolist())).sort(["query_id", "rank"])
        candidates = settings.paths.candidates(round_, name)
        out[name] = training_queries(settings.task(name), train, scores, encoder_settings, feedback, candidates)
    return out


def build_trainer(
    settings: Settings,
    round_: int,
    init: Path,
    partial: Path,
    device_type: str,
    local_rank: int,
    steps: int,
    data: dict,
    world: int = 1,
    dtype: str | None = None,
) -> Trainer:
    """`udr train`'s step 2: the round's trainer (:func:`udr.retriever.training.resume_trainer`) for the
    bi-encoder of the checkpoint in `partial` if there is one (with its optimiser, schedule and history), else
    of `init` (:func:`udr.retriever.initial.initial_encoder`); the pools of a frozen E_d; `data`: step 1's
    queries, for the recipe's prepare hook (the anchored loss's reference similarities); `dtype`: the precision
    resolved from `train.dtype` (None: resolved here)."""
    cfg, tasks = settings.train, settings.training_tasks()
    pools = None
    if cfg.freeze_demo_encoder:
        pools = {t: (settings.task(t), read_prepared(settings.root, t, "train")) for t in tasks}
    if dtype is None:
        _, dtype = resolve_lm_precision(device_type, cfg.dtype, "train")
    base_spec = str(settings.models.encoder)
    return resume_trainer(
        partial,
        lambda: initial_encoder(init, settings.encoder, base_spec=base_spec, shared=cfg.shared_encoder),
        cfg,
        steps=steps,
        device=torch.device(f"cuda:{local_rank}" if device_type == "cuda" else "cpu"),
        seed=settings.training_seed,
        round_=round_,
        world=world,
        bf16=dtype == "bf16",
        pools=pools,
        pool_batch_size=settings.mine.batch_size,
        queries=data,
    )


def run_train(
    settings: Settings,
    round_: int,
    *,
    init: Path,
    out: Path,
    log_dir: Path,
    progress: bool = True,
    stop_after_steps: int | None = None,
    method: str = "udr",
) -> TrainSummary | None:
    """Train one round from `init` (a base encoder directory, or a saved bi-encoder) into `out`; per-step
    losses go to `log_dir` (dvclive's file layout) with `summary.json` and `loss.png`, written beside it
    (``.<name>.live``) and swapped in when the run ends, a checkpoint beside `out` (``.<name>.partial``)
    every `train.checkpoint_seconds`. Returns None on processes other than
    rank 0 and when `stop_after_steps` stopped the run early (tests use it to simulate a kill)."""
    cfg = settings.train
    tasks = settings.training_tasks()
    start = time.perf_counter()
    data = load_scored_queries(settings, tasks, round_, settings.encoder)
    sampler, steps = round_schedule(cfg, round_, data)

    device_type = resolve_device_type(cfg.device, "train.device")
    _, dtype = resolve_lm_precision(device_type, cfg.dtype, "train")
    dp = Distributed(device_type)
    use_threads(cfg.threads, dp.world)
    partial = partial_dir(out)
    fingerprint = {
        "round": round_,
        "steps": steps,
        "seed": settings.seed,
        "tasks": tasks,
        "train": recorded_train_settings(cfg),
        "precision": dtype,  # the one that runs (auto differs between CPU kinds): a checkpoint resumes in its own
        "encoder": settings.encoder.model_dump(),
        "scores": {t: file_sha256(settings.paths.scores(round_, t)) for t in tasks},
        "init": describe_init(Path(init)),
        "world": dp.world,
    }
    if dp.rank == 0:
        open_partial(partial, fingerprint)
    dp.barrier()
    trainer = build_trainer(
        settings, round_, Path(init), partial, device_type, dp.local_rank, steps, data, world=dp.world, dtype=dtype
    )
    live = TrainLog(log_dir, trainer.history, out) if dp.rank == 0 else None
    log = live.log if live else None
    if not train_steps(trainer, data, sampler, steps, dp, partial, log, stop_after_steps, progress=progress):
        return None
    dp.barrier()
    if dp.rank != 0:
        dp.close()
        return None

    def record(summary: TrainSummary) -> dict:
        return training_record(settings, out, method=method, round_=round_, init=Path(init), summary=summary)

    summary = finish(trainer, out, round_, steps, data, sampler, start, dp.world, device_type, record)
    what = f"training the {method} baseline" if method in TRAINED_BASELINES else f"training round {round_}"
    live.finish(summary, what)
    remove(partial)
    dp.close()
    return summary


def training_record(settings: Settings, out: Path, *, method: str, round_: int, init: Path, summary) -> dict:
    """The record of the model `run_train` just trained from `init` into `out` (its TrainSummary: `summary`)."""
    trained_with = {
        "params_file": settings.params_file,
        # relative to the model folder (a committed or exported record names no machine's path)
        "project": os.path.relpath(Path(settings.root).resolve(), Path(out).resolve()),
        "seed": settings.seed,
        "models": settings.models.model_dump(mode="json"),
        "candidates": settings.candidates.model_dump(mode="json"),
        "score": settings.score.model_dump(mode="json", exclude={"batch_tokens", "shard_pairs", "device"}),
        "encoder": settings.encoder.model_dump(mode="json"),
        "train": recorded_train_settings(settings.train, mode="json"),
    }
    return trained_model_record(method, round_, trained_with, summary, init, str(settings.models.encoder))
