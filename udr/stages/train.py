"""The `udr train` stage: one round of the paper's Algorithm 1 (or the EPR baseline) from the project's
scores into a model directory, with its training log and model record.

Steps: load (each training task's scored queries of the round, :func:`load_scored_queries`), build (the
bi-encoder from a checkpoint, the previous round's model or the base encoder, into a
:class:`udr.retriever.training.Trainer`), run (:func:`udr.retriever.training.train_step` per optimiser
step, a checkpoint every `train.checkpoint_steps`), write (the model, its record, the log's summary).

Resume: a checkpoint beside the output (``.<name>.partial``, :mod:`udr.util.resume`), whose manifest
fingerprints the round, steps, seed, tasks, train and encoder settings, scores, init and world size, is
picked up by the next run with the same inputs; everything random in step s is seeded by (seed, round, s),
so a resumed run continues exactly as an uninterrupted one. Under torchrun every process trains its
share of each step (:func:`udr.retriever.training.train_step`); rank 0 writes.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path

import polars as pl
import torch

from udr.data.prepare import read_prepared
from udr.errors import UdrError
from udr.feedback.scores_file import load_scores
from udr.lm.loading import PROVENANCE_FILE
from udr.paths import round_label
from udr.retriever.encoder import SETTINGS_NAME, BiEncoder, BiEncoderSettings, resolve_pooling, resolve_similarity
from udr.retriever.recipes import epr_train_settings
from udr.retriever.record import check_replace, read_record, write_record
from udr.retriever.sampling import TaskSampler
from udr.retriever.train_log import TrainLog
from udr.retriever.training import (
    ScoredQuery,
    Trainer,
    TrainSummary,
    build_trainer,
    finish,
    train_step,
    training_queries,
)
from udr.util.distributed import Distributed, resolve_device_type, resolve_lm_precision
from udr.util.files import file_sha256, remove, write_atomic, write_text_atomic
from udr.util.progress import progress_bar
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
        settings = epr_settings(settings)
        default_out, log_dir = paths.epr_model, paths.train_log("epr")
    else:
        default_out, log_dir = paths.round_model(round_), paths.train_log(round_label(round_))
    # The path is resolved before anything is derived from it: `nosuch/..` is the current directory.
    out = check_replace(Path(out) if out is not None else default_out, settings.params_file, settings.root, replace)
    if out != default_out.resolve():
        log_dir = paths.named_train_log(out)
    summary = run_train(
        settings,
        round_,
        init=Path(init),
        out=out,
        log_dir=log_dir,
        progress=progress,
        method="epr" if epr else "udr",
    )
    return summary, out


def epr_settings(settings):
    """The settings of the EPR baseline: UDR's, with the training settings of EPR's recipe
    (:func:`udr.retriever.recipes.epr_train_settings`), on round-0 (BM25) scores only; the same encoder
    init and inputs."""

    return settings.model_copy(update={"train": epr_train_settings(settings.train)})


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
    """Train one round from `init` (a base encoder directory, or a saved bi-encoder) into `out`.

    Per-step losses go to `log_dir` (dvclive's file layout) with `summary.json` and `loss.png`; a checkpoint
    beside `out` (``.<name>.partial``) is written every `train.checkpoint_steps` steps and picked
    up by the next run with the same inputs. Returns None on processes other than rank 0 and when
    `stop_after_steps` stopped the run early (tests use it to simulate a kill).
    """

    cfg = settings.train
    tasks = settings.training_tasks()
    start = time.perf_counter()
    data = load_scored_queries(settings, tasks, round_, settings.encoder)
    sampler = TaskSampler({t: len(q) for t, q in data.items()}, cfg.alpha)
    total_queries = sum(len(q) for q in data.values())
    epochs = cfg.epochs_first if round_ == 0 else cfg.epochs_later
    steps = max(1, math.ceil(epochs * total_queries / cfg.batch_size))

    device_type = resolve_device_type(cfg.device, "train.device")
    dp = Distributed(device_type)
    partial = partial_dir(out)
    fingerprint = {
        "round": round_,
        "steps": steps,
        "seed": settings.seed,
        "tasks": tasks,
        "train": cfg.model_dump(exclude={"checkpoint_steps", "device"}),
        "encoder": settings.encoder.model_dump(),
        "scores": {t: file_sha256(settings.paths.scores(round_, t)) for t in tasks},
        "init": _describe_init(Path(init)),
        "world": dp.world,
    }
    if dp.rank == 0:
        open_partial(partial, fingerprint)
    dp.barrier()
    trainer = build(settings, round_, Path(init), partial, device_type, dp.local_rank, steps, world=dp.world)
    live = TrainLog(log_dir, trainer.history) if dp.rank == 0 else None

    with progress_bar(progress and dp.rank == 0, "loss {task.fields[loss]:.4f}") as bar:
        last = trainer.history[-1]["loss"] if trainer.history else float("nan")
        job = bar.add_task(f"training round {round_}", total=steps, completed=trainer.first_step, loss=last)
        first = trainer.first_step
        for step in range(first, steps):
            record = train_step(trainer, data, sampler, step, dp)
            trainer.history.append(record)
            if live:
                live.log(record)
            bar.update(job, advance=1, loss=record["loss"])
            done = step + 1
            if dp.rank == 0 and (done % cfg.checkpoint_steps == 0 and done < steps):
                _write_checkpoint(partial, trainer, done)
            if stop_after_steps is not None and done - first >= stop_after_steps and done < steps:
                dp.barrier()
                return None

    dp.barrier()
    if dp.rank != 0:
        dp.close()
        return None
    summary = finish(trainer, out, round_, steps, data, sampler, start, dp.world, device_type)
    write_record(out, training_record(settings, method=method, round_=round_, init=Path(init), summary=summary))
    live.finish(summary, "training the EPR baseline" if method == "epr" else f"training round {round_}")
    remove(partial)
    dp.close()
    return summary


def load_scored_queries(settings, tasks: Sequence[str], round_: int, encoder_settings) -> dict[str, list[ScoredQuery]]:
    """Step 1: each task's scored queries of `round_` with their candidates as encoder texts, LM order.
    Only `score.queries_per_task` of them, as the scores' manifest lists them (its first n are the choice
    of n, so a file scored for more queries holds them); a file scored for fewer, or with another seed,
    is an error."""

    out: dict[str, list[ScoredQuery]] = {}
    for name in tasks:
        path = settings.paths.scores(round_, name)
        manifest, scores = load_scores(path, round_, name)
        train = read_prepared(settings.root, name, "train")
        wanted = manifest.chosen_queries(settings.score.queries_per_task, settings.seed, path)
        scores = scores.filter(pl.col("query_id").is_in(wanted.tolist())).sort(["query_id", "rank"])
        out[name] = training_queries(settings.task(name), train, scores, encoder_settings)
    return out


def bi_encoder_settings(settings, pooling: str, similarity: str):
    """The bi-encoder settings of this project's training (encoder.*, train.shared_encoder) with the given
    pooling and similarity."""

    return BiEncoderSettings(
        **settings.encoder.model_dump(exclude={"pooling", "similarity"}),
        pooling=pooling,
        similarity=similarity,
        base=str(settings.models.encoder),
        shared=settings.train.shared_encoder,
    )


def initial_bi_encoder(settings, base_dir: Path):
    """UDR before any training: the base encoder at `base_dir` on both sides, read with the project's
    encoder settings (auto pooling and similarity: the base model's own)."""

    enc = settings.encoder
    pooling, similarity = resolve_pooling(enc.pooling, base_dir), resolve_similarity(enc.similarity, base_dir)
    return BiEncoder.from_base(base_dir, bi_encoder_settings(settings, pooling, similarity))


def initial_encoder(settings, init: Path):
    """The bi-encoder a round starts from: a later round continues the previous round's model (auto pooling
    and similarity: its own), round 0 the base encoder."""

    if not (init / SETTINGS_NAME).is_file():
        return initial_bi_encoder(settings, init)
    enc = settings.encoder
    encoder = BiEncoder.load(init)
    old = encoder.settings
    encoder.settings = bi_encoder_settings(
        settings,
        old.pooling if enc.pooling == "auto" else enc.pooling,
        old.similarity if enc.similarity == "auto" else enc.similarity,
    )
    return encoder


def build(
    settings, round_: int, init: Path, partial: Path, device_type: str, local_rank: int, steps: int, world: int = 1
) -> Trainer:
    """Step 2: the round's trainer (:func:`udr.retriever.training.build_trainer`) for the bi-encoder of the
    checkpoint in `partial` if there is one (with its optimiser, schedule and history), else of `init`."""

    cfg = settings.train
    device = torch.device(f"cuda:{local_rank}" if device_type == "cuda" else "cpu")
    state_file = partial / "state.json"
    state = json.loads(state_file.read_text()) if state_file.is_file() else None
    encoder = BiEncoder.load(partial / "encoder") if state is not None else initial_encoder(settings, init)
    pools = _training_pools(settings) if cfg.freeze_demo_encoder else None
    _, dtype = resolve_lm_precision(device_type, cfg.dtype, "train")
    trainer = build_trainer(
        encoder,
        cfg,
        steps=steps,
        device=device,
        seed=settings.seed,
        round_=round_,
        world=world,
        bf16=dtype == "bf16",
        pools=pools,
        pool_batch_size=settings.mine.batch_size,
    )
    if state is not None:
        opt_state = torch.load(partial / "optimizer.pt", map_location=device, weights_only=True)
        trainer.optimizer.load_state_dict(opt_state["optimizer"])
        trainer.scheduler.load_state_dict(opt_state["scheduler"])
        trainer.history = state["history"]
    return trainer


def _training_pools(settings) -> dict:
    """Every training task's pool: {task: (Task, its prepared train split)}."""

    return {
        name: (settings.task(name), read_prepared(settings.root, name, "train")) for name in settings.training_tasks()
    }


def training_record(settings, *, method: str, round_: int, init: Path, summary) -> dict:
    """The record of a model `run_train` just trained from `init` (its TrainSummary: `summary`)."""
    previous = read_record(init)
    return {
        "method": method,
        "round": round_,
        "params_file": settings.params_file,
        "project": str(Path(settings.root).resolve()),
        "seed": settings.seed,
        "models": settings.models.model_dump(mode="json"),
        "candidates": settings.candidates.model_dump(mode="json"),
        "score": settings.score.model_dump(mode="json", exclude={"batch_tokens", "shard_pairs", "device"}),
        "encoder": settings.encoder.model_dump(mode="json"),
        "train": settings.train.model_dump(mode="json", exclude={"checkpoint_steps", "device"}),
        "tasks": dict(summary.queries),
        "steps": summary.steps,
        "loss": {"start": summary.loss_start, "end": summary.loss_end},
        "init": previous if previous is not None else {"base": str(settings.models.encoder)},
    }


def _describe_init(init: Path) -> dict:

    for name in (SETTINGS_NAME, PROVENANCE_FILE):
        if (init / name).is_file():
            weights = sorted(file_sha256(p) for p in init.rglob("*.safetensors"))
            return {"path": str(init), name: file_sha256(init / name), "weights": weights}
    raise UdrError(f"missing model: {init} is neither a resolved base encoder nor a trained bi-encoder")


def _write_checkpoint(partial: Path, trainer: Trainer, step: int) -> None:
    """Weights, optimiser and scheduler state, and the loss history; state.json is written last, so a
    checkpoint without it (killed while saving) is not resumed from."""

    (partial / "state.json").unlink(missing_ok=True)
    trainer.encoder.save(partial / "encoder")
    state = {"optimizer": trainer.optimizer.state_dict(), "scheduler": trainer.scheduler.state_dict()}
    write_atomic(partial / "optimizer.pt", lambda tmp: torch.save(state, tmp))
    write_text_atomic(partial / "state.json", json.dumps({"step": step, "history": trainer.history}))
