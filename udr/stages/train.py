"""The `udr train` stage: one round of the paper's Algorithm 1 (or the EPR baseline) from the project's
scores into a model directory, with its training log and model record. Steps: load (the training tasks'
scored queries of the round, :func:`udr.project.training.load_scored_queries`), build
(:func:`udr.project.training.build_trainer`: the bi-encoder of a checkpoint, the previous round's model or the
base encoder, in a :class:`udr.retriever.training.Trainer`), run (:func:`udr.retriever.training.train_steps`),
write (the model, its record, the log's summary).

Resume: a checkpoint beside the output (``.<name>.partial``, :mod:`udr.util.resume`), whose manifest
fingerprints the round, steps, seed, tasks, train and encoder settings, scores, init and world size, is
picked up by the next run with the same inputs, which continues exactly as an uninterrupted run would
(:mod:`udr.retriever.training`). Under torchrun every process trains its share of each step; rank 0 writes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from udr.errors import UdrError
from udr.paths import round_label
from udr.project.training import build_trainer, load_scored_queries
from udr.retriever.encoder import SETTINGS_NAME
from udr.retriever.initial import describe_init
from udr.retriever.recipes import epr_train_settings
from udr.retriever.record import check_replace, recorded_train_settings, trained_model_record, write_record
from udr.retriever.train_log import TrainLog
from udr.retriever.training import (
    TrainSummary,
    finish,
    round_schedule,
    train_steps,
)
from udr.util.distributed import Distributed, resolve_device_type
from udr.util.files import file_sha256, remove
from udr.util.resume import open_partial, partial_dir


def run_train_stage(
    settings,
    round_: int,
    *,
    epr: bool = False,
    out: Path | None = None,
    init: Path | None = None,
    replace: bool = False,
    progress: bool = True,
):
    """`udr train`: round N from round N-1's model (round 0 and EPR from the base encoder; `init`: from
    that bi-encoder instead) into the round's model directory (`out`: a named model directory instead,
    its log under metrics/train/runs/<its name>) and training log; returns (summary or None off rank 0,
    output directory). A model recorded from another params file is not replaced unless `replace`."""
    paths = settings.paths
    settings.train.check_round(round_)
    if epr and round_ != 0:
        raise UdrError("the EPR baseline trains on round 0's scores only: drop --round")

    if init is None:
        init = paths.base_model("encoder") if round_ == 0 else paths.round_model(round_ - 1)
    elif not (Path(init) / SETTINGS_NAME).is_file():
        raise UdrError(f"missing model {init}: --init takes a trained udr bi-encoder directory")
    if epr:
        # The EPR baseline: UDR's settings with EPR's recipe for training, on round-0 (BM25) scores only.
        settings = settings.model_copy(update={"train": epr_train_settings(settings.train)})
        default_out, log_dir = paths.epr_model, paths.train_log("epr")
    else:
        default_out, log_dir = paths.round_model(round_), paths.train_log(round_label(round_))
    # The path is resolved before anything is derived from it: `nosuch/..` is the current directory.
    out = check_replace(Path(out) if out is not None else default_out, settings.params_file, settings.root, replace)
    if out != default_out.resolve():
        log_dir = paths.named_train_log(out)
    method = "epr" if epr else "udr"
    summary = run_train(settings, round_, init=Path(init), out=out, log_dir=log_dir, progress=progress, method=method)
    return summary, out


def run_train(
    settings,
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
    losses go to `log_dir` (dvclive's file layout) with `summary.json` and `loss.png`, a checkpoint beside
    `out` (``.<name>.partial``) every `train.checkpoint_steps` steps. Returns None on processes other than
    rank 0 and when `stop_after_steps` stopped the run early (tests use it to simulate a kill)."""
    cfg = settings.train
    tasks = settings.training_tasks()
    start = time.perf_counter()
    data = load_scored_queries(settings, tasks, round_, settings.encoder)
    sampler, steps = round_schedule(cfg, round_, data)

    device_type = resolve_device_type(cfg.device, "train.device")
    dp = Distributed(device_type)
    partial = partial_dir(out)
    fingerprint = {
        "round": round_,
        "steps": steps,
        "seed": settings.seed,
        "tasks": tasks,
        "train": recorded_train_settings(cfg),
        "encoder": settings.encoder.model_dump(),
        "scores": {t: file_sha256(settings.paths.scores(round_, t)) for t in tasks},
        "init": describe_init(Path(init)),
        "world": dp.world,
    }
    if dp.rank == 0:
        open_partial(partial, fingerprint)
    dp.barrier()
    trainer = build_trainer(settings, round_, Path(init), partial, device_type, dp.local_rank, steps, world=dp.world)
    live = TrainLog(log_dir, trainer.history) if dp.rank == 0 else None
    log = live.log if live else None
    if not train_steps(trainer, data, sampler, steps, dp, partial, log, stop_after_steps, progress=progress):
        return None
    dp.barrier()
    if dp.rank != 0:
        dp.close()
        return None
    summary = finish(trainer, out, round_, steps, data, sampler, start, dp.world, device_type)
    write_record(out, training_record(settings, out, method=method, round_=round_, init=Path(init), summary=summary))
    live.finish(summary, "training the EPR baseline" if method == "epr" else f"training round {round_}")
    remove(partial)
    dp.close()
    return summary


def training_record(settings, out: Path, *, method: str, round_: int, init: Path, summary) -> dict:
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
