"""A project's training inputs, as `udr train` (:mod:`udr.stages.train`) and the benchmarks read them: the
training tasks' scored queries of a round, and the round's trainer built from the project's settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl
import torch

from udr.data.prepare import read_prepared
from udr.feedback.scores_file import load_scores
from udr.retriever.initial import initial_encoder
from udr.retriever.training import ScoredQuery, Trainer, resume_trainer, training_queries
from udr.util.distributed import resolve_lm_precision


def load_scored_queries(settings, tasks: Sequence[str], round_: int, encoder_settings) -> dict[str, list[ScoredQuery]]:
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
    settings, round_: int, init: Path, partial: Path, device_type: str, local_rank: int, steps: int, world: int = 1
) -> Trainer:
    """`udr train`'s step 2: the round's trainer (:func:`udr.retriever.training.resume_trainer`) for the
    bi-encoder of the checkpoint in `partial` if there is one (with its optimiser, schedule and history), else
    of `init` (:func:`udr.retriever.initial.initial_encoder`); the pools of a frozen E_d, the queries of loss
    anchored."""
    cfg, tasks = settings.train, settings.training_tasks()
    data = load_scored_queries(settings, tasks, round_, settings.encoder) if cfg.loss == "anchored" else None
    pools = None
    if cfg.freeze_demo_encoder:
        pools = {t: (settings.task(t), read_prepared(settings.root, t, "train")) for t in tasks}
    _, dtype = resolve_lm_precision(device_type, cfg.dtype, "train")
    base_spec = str(settings.models.encoder)
    return resume_trainer(
        partial,
        lambda: initial_encoder(init, settings.encoder, base_spec=base_spec, shared=cfg.shared_encoder),
        cfg,
        steps=steps,
        device=torch.device(f"cuda:{local_rank}" if device_type == "cuda" else "cpu"),
        seed=settings.seed,
        round_=round_,
        world=world,
        bf16=dtype == "bf16",
        pools=pools,
        pool_batch_size=settings.mine.batch_size,
        queries=data,
    )
