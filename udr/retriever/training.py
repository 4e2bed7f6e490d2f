"""Multi-task list-wise ranking training of the bi-encoder (one round of the paper's Algorithm 1; the
`udr train` stage that runs it is :mod:`udr.stages.train`): the trainer, its steps (:func:`train_step`,
:func:`train_steps`) and its checkpoints (:func:`write_checkpoint`, :func:`resume_trainer`).

Every optimiser step takes `train.batch_size` scored queries from ONE task, the task drawn with
p(T) ~ q_T^alpha (q_T = T's share of the scored queries); each query brings l candidates sampled
from its LM-ranked list and ranked 1..l by the LM's scores. The batch is processed in micro-batches of
`train.micro_batch` queries. What varies is chosen once, when the trainer is built (:func:`build_trainer`):

- the recipe (:mod:`udr.retriever.recipes`, one class per `train.loss`): the candidates' sampling, the
  loss (:mod:`udr.retriever.losses`) and what it computes before the first step;
- the demonstration side (:mod:`udr.retriever.demo_encoders`): E_d trained with E_q, or frozen
  (`train.freeze_demo_encoder`: each training task's pool embedded once, the in-batch loss over the
  query's whole task pool); `train.shared_encoder` ties E_d to E_q (one encoder for both sides);
- the backward (:mod:`udr.retriever.backward`): gradient accumulation, in-batch negatives being each
  micro-batch's candidates, or GradCache (`train.grad_cache`), the whole batch's.

Determinism: everything random in step s (task, queries, candidates, dropout) is drawn from generators
seeded by (seed, round, s), so a run resumed from a checkpoint continues exactly as an uninterrupted one.
Under torchrun, process r computes micro-batches r, r+P, ... and gradients are summed across processes
before the step (data parallel), which equals the one-process step up to float summation order.

Imports of transformers are inside the functions that use them, to keep `udr`'s start (the CLI)
light.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import torch

from udr.config import TrainSettings
from udr.errors import UdrError
from udr.retriever.backward import GradCacheBackward, PlainBackward
from udr.retriever.demo_encoders import FrozenDemoEncoder, TrainedDemoEncoder
from udr.retriever.encoder import MADE, SETTINGS_NAME, BiEncoder, demo_texts, query_text
from udr.retriever.losses import LossParts
from udr.retriever.recipes import CandidateLayout, Recipe, recipe_for
from udr.retriever.record import write_record
from udr.retriever.sampling import TaskSampler, step_rng
from udr.util.files import building_dir
from udr.util.progress import progress_bar

CHECKPOINT = "checkpoint"  # the folder, in a run's partial directory, that resume reads


@dataclass(frozen=True)
class ScoredQuery:
    """A training query with its candidates in LM order (best first), as the encoders read them."""

    task: str
    query_id: int
    text: str
    candidate_ids: tuple[int, ...]
    candidate_texts: tuple[str, ...]
    candidate_scores: tuple[float, ...] = ()  # the LM's scores, same order (loss distill reads them)


@dataclass
class TrainSummary:
    round: int
    steps: int
    queries: dict
    task_probabilities: dict
    loss_start: float
    loss_end: float
    seconds: float
    world_size: int
    device: str


@dataclass
class Trainer:
    """A round's model, optimiser and schedule, with the steps done so far (built by :func:`build_trainer`),
    and its options chosen once: the recipe (which candidates and loss, :mod:`udr.retriever.recipes`),
    where the candidates' embeddings come from (E_d trained or frozen, :mod:`udr.retriever.demo_encoders`)
    and how the batch loss is back-propagated (plainly or by GradCache, :mod:`udr.retriever.backward`)."""

    encoder: object
    params: list
    optimizer: object
    scheduler: object
    recipe: Recipe
    demos: TrainedDemoEncoder | FrozenDemoEncoder
    backward: PlainBackward | GradCacheBackward
    device: object
    cfg: TrainSettings  # the round's
    seed: int  # with round: seeds every step's draws (step_rng) and dropout
    round: int
    history: list[dict] = field(default_factory=list)
    bf16: bool = False  # forwards under bf16 autocast (train.dtype)

    @property
    def first_step(self) -> int:
        return len(self.history)

    def autocast(self):

        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def dropout_seed(self, step: int, m: int) -> int:
        """The torch seed of micro-batch `m`'s forwards in step `step`."""
        return self.seed * 1_000_003 + self.round * 10_007 + step * 101 + m

    def micro_batch_loss(self, micro_batch: list) -> LossParts:
        """The recipe's loss of one micro-batch of (ScoredQuery, candidate positions), candidates ranked 1..l
        in LM order, their embeddings from E_d or from its frozen cache (then with the task's whole pool
        as in-batch negatives)."""
        q = self.encoder.embed([sq.text for sq, _ in micro_batch], "query")
        layout = CandidateLayout.of(micro_batch, self.device)
        cand, negatives = self.demos.candidates(self.encoder, layout)
        return self.recipe(q.float(), cand, layout, negatives)


def training_queries(
    task, train, scores, encoder_settings, feedback: str = "lm", candidates: Path | None = None
) -> list[ScoredQuery]:
    """A task's scored queries with their candidates as the encoders read them, in LM order: `scores`
    (query_id, candidate_id, score; sorted by query and rank) over the rows of `train`, the task's prepared
    train split. A query with fewer than 2 candidates is left out. `feedback` (`train.feedback`) labels or
    lm+labels: a classification or multiple-choice task's scores and order are its candidates' labels'
    (:func:`label_feedback`, the list's order read from `candidates`, the round's candidates file); a
    generation task, which has no labels, keeps the LM's; target: every task's are the BM25 similarities of its
    candidates' targets to the query's, ties in the candidates file's order (:func:`target_feedback`)."""
    if feedback == "target":
        scores = target_feedback(scores, train.select("id", "target"), pl.read_parquet(candidates))
    elif feedback != "lm" and not task.generation:
        scores = label_feedback(scores, train.select("id", "label"), pl.read_parquet(candidates), feedback)
    rows = {r["id"]: r for r in train.iter_rows(named=True)}
    queries = []
    for (qid,), group in scores.group_by(["query_id"], maintain_order=True):
        cids = tuple(int(c) for c in group["candidate_id"])
        if len(cids) < 2:
            continue
        q = rows[int(qid)]
        texts = demo_texts(task, [rows[c]["input"] for c in cids], [rows[c]["target"] for c in cids], encoder_settings)
        queries.append(
            ScoredQuery(
                task.name,
                int(qid),
                query_text(task.instruction, q["input"], encoder_settings),
                cids,
                tuple(texts),
                tuple(float(s) for s in group["score"]),
            )
        )
    return queries


def target_feedback(scores, targets, order):
    """A task's scores (query_id, candidate_id, score, rank; sorted by query and rank) replaced by DR-Target's
    signal: the BM25 similarity of each candidate's target to its query's target, over an index of the task's
    pool targets (`targets`: the prepared train split's id and target columns) with Lucene's idf (the published
    code's Elasticsearch), under which a label shared by most of the pool still counts. Ranked by it, ties in
    the candidate list's own order (`order`, as :func:`label_feedback` reads it: BM25's rank in round 0), so no
    LM score is read, not even through the scores' order; the paper's fifth baseline, whose positives are the
    candidates with the most similar targets (Li et al. 2023, section 4.1). Returns the frame with its score
    and rank replaced, sorted by query and the new rank."""
    from udr.feedback.bm25 import BM25Index

    ids, texts = targets["id"].to_list(), [str(t) for t in targets["target"].to_list()]
    position = {int(i): p for p, i in enumerate(ids)}
    index = BM25Index(texts, idf="lucene")
    frame = _with_list_order(scores, order, "target").sort(["query_id", "_order"])
    values = []
    for qid, cids in zip(*frame.group_by("query_id", maintain_order=True).agg("candidate_id")):
        similarity = index.scores(texts[position[int(qid)]])
        values += [float(similarity[position[int(c)]]) for c in cids]
    frame = frame.with_columns(pl.Series("score", values, dtype=pl.Float64))
    frame = frame.sort(["query_id", "score", "_order"], descending=[False, True, False])
    frame = frame.with_columns((pl.int_range(pl.len()).over("query_id") + 1).cast(scores.schema["rank"]).alias("rank"))
    return frame.select(scores.columns)


def _with_list_order(scores, order, feedback: str):
    """`scores` with `_order`: each candidate's place in its query's candidate list (`order`: the round's
    candidates file, query_id, candidate_id, rank), by its rank, candidates without one (carried over from an
    earlier round) last, by id. A scored candidate missing from the list is an error naming `feedback`."""
    place = (
        order.sort(["query_id", "rank", "candidate_id"], nulls_last=True)
        .select("query_id", "candidate_id", pl.int_range(pl.len()).over("query_id").alias("_order"))
        .unique(["query_id", "candidate_id"], keep="first", maintain_order=True)
    )
    frame = scores.join(place, on=["query_id", "candidate_id"], how="left")
    missing = frame.filter(pl.col("_order").is_null())
    if len(missing):
        q, c = missing.row(0, named=True)["query_id"], missing.row(0, named=True)["candidate_id"]
        raise UdrError(f"train.feedback {feedback}: candidate {c} of query {q} is not in the candidate list")
    return frame


def label_feedback(scores, labels, order, feedback: str):
    """A task's LM scores (query_id, candidate_id, score, rank; sorted by query and rank) re-scored and
    re-ranked by the candidates' labels (`train.feedback`, for classification and multiple choice):

    - labels: score = match + 0.01 * (1 - i / n), match 1 where the candidate's label equals the query's
      gold label (else 0) and i the candidate's place (0 first) among the query's n scored candidates in
      the candidate list's own order (`order`: the round's candidates file, query_id, candidate_id, rank:
      BM25's rank in round 0, the mining retriever's in later rounds, where the candidates carried over
      without a rank come last, by id): the label first, ties broken by that list (earlier: better), so
      that the rank loss sees a full order; no LM score is read (the scores file only says which queries
      and candidates);
    - lm+labels: same-label candidates first, each group in the LM's order (ties in the LM's rank): score
      = LM score + match * (the query's LM score range + 1).

    `labels`: the task's prepared train split's id and label columns. Returns the frame with its score and
    rank replaced, sorted by query and the new rank; other columns are kept."""
    if feedback not in ("labels", "lm+labels"):
        raise ValueError(f"label_feedback: feedback must be labels or lm+labels, got {feedback!r}")
    label = dict(zip(labels["id"].to_list(), labels["label"].to_list()))
    frame = scores.with_columns(
        pl.col("query_id").replace_strict(label, return_dtype=pl.Int64).alias("_gold"),
        pl.col("candidate_id").replace_strict(label, return_dtype=pl.Int64).alias("_label"),
    ).with_columns((pl.col("_gold") == pl.col("_label")).cast(pl.Float64).alias("_match"))
    if feedback == "labels":
        frame = (
            _with_list_order(frame, order, feedback)
            .with_columns(
                (pl.col("_order").rank("ordinal").over("query_id").cast(pl.Float64) - 1).alias("_i"),
                pl.len().over("query_id").cast(pl.Float64).alias("_n"),
            )
            .with_columns((pl.col("_match") + 0.01 * (1 - pl.col("_i") / pl.col("_n"))).alias("_score"))
        )
        key = ["query_id", "_score"]
    else:
        spread = pl.col("score").max().over("query_id") - pl.col("score").min().over("query_id") + 1
        frame = frame.with_columns((pl.col("score") + pl.col("_match") * spread).alias("_score"))
        key = ["query_id", "_score", "rank"]
    frame = frame.sort(key, descending=[False, True, False][: len(key)])
    frame = frame.with_columns(
        pl.col("_score").alias("score"),
        (pl.int_range(pl.len()).over("query_id") + 1).cast(scores.schema["rank"]).alias("rank"),
    )
    return frame.select(scores.columns)


def round_schedule(cfg: TrainSettings, round_: int, data: Mapping[str, Sequence]) -> tuple[TaskSampler, int]:
    """A round's task sampler over `data` ({task: its scored queries}; p(T) ~ q_T^alpha) and its number of
    optimiser steps: `train.epochs_first` (round 0) or `train.epochs_later` passes over the queries, in
    batches of `train.batch_size` (`cfg`: the round's TrainSettings)."""
    sampler = TaskSampler({t: len(q) for t, q in data.items()}, cfg.alpha)
    total_queries = sum(len(q) for q in data.values())
    epochs = cfg.epochs_first if round_ == 0 else cfg.epochs_later
    return sampler, max(1, math.ceil(epochs * total_queries / cfg.batch_size))


def build_trainer(
    encoder,
    cfg: TrainSettings,
    *,
    steps: int,
    device,
    seed: int,
    round_: int,
    world: int = 1,
    bf16: bool = False,
    pools: Mapping | None = None,
    pool_batch_size: int = 64,
) -> Trainer:
    """A round's trainer for `encoder` with the training settings `cfg` (a :class:`udr.config.TrainSettings`):
    E_d tied to E_q or not (`shared_encoder`), frozen with `pools` ({task: (Task, its pool frame)})
    embedded once (`freeze_demo_encoder`, `pool_batch_size` texts a batch), the optimiser, the warmup /
    linear-decay schedule over `steps`, the recipe and the backward (`grad_cache`: one process of `world`);
    `seed` and `round_` seed every step."""
    from transformers import get_linear_schedule_with_warmup

    encoder.share(cfg.shared_encoder).to(device).train()
    if cfg.freeze_demo_encoder:
        demos = FrozenDemoEncoder.freeze(encoder, pools, pool_batch_size, device)
    else:
        demos = TrainedDemoEncoder(cfg.length_chunk)
    params = [p for p in encoder.parameters() if p.requires_grad]
    optimizer = adamw(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = get_linear_schedule_with_warmup(optimizer, min(cfg.warmup_steps, steps), steps)
    recipe = recipe_for(cfg, scale=cfg.cosine_scale if encoder.settings.normalize else 1.0)
    backward = GradCacheBackward(world) if cfg.grad_cache else PlainBackward()
    return Trainer(encoder, params, optimizer, scheduler, recipe, demos, backward, device, cfg, seed, round_, bf16=bf16)


def adamw(params, **options):
    """AdamW with torch's fused kernel (one pass over each parameter, where torch's default on a CPU
    loops over the tensors; 3.83 -> 3.71 s a default bf16 training step,
    notebook/2026-11-benchmarks.md), or the plain one where this torch or device has no fused kernel."""

    try:
        return torch.optim.AdamW(params, fused=True, **options)
    except RuntimeError:
        return torch.optim.AdamW(params, **options)


def train_step(trainer: Trainer, data, sampler: TaskSampler, step: int, dp) -> dict:
    """Step 3, once per optimiser step: draw a task, its queries and their candidates (the recipe's
    sampling), accumulate the loss's gradients over micro-batches (the trainer's backward), step; returns
    the step's log record (its "rank" is L_KL with loss distill)."""
    cfg = trainer.cfg
    rng = step_rng(trainer.seed, trainer.round, step)
    task = sampler.draw(rng)
    pool = data[task]
    chosen = rng.choice(len(pool), size=min(cfg.batch_size, len(pool)), replace=False)
    picks = [(pool[i], trainer.recipe.sample(pool[i], rng)) for i in chosen]
    micro = [picks[i : i + cfg.micro_batch] for i in range(0, len(picks), cfg.micro_batch)]
    trainer.optimizer.zero_grad(set_to_none=True)
    parts = np.zeros(3)
    trainer.backward(trainer, micro, step, dp, parts)
    dp.sum_gradients(trainer.params)
    trainer.optimizer.step()
    trainer.scheduler.step()
    return {
        "step": step,
        "task": task,
        "loss": dp.sum_scalar(parts[0]),
        "rank": dp.sum_scalar(parts[1]),
        "in_batch": dp.sum_scalar(parts[2]),
        "lr": trainer.scheduler.get_last_lr()[0],
    }


def train_steps(
    trainer: Trainer,
    data,
    sampler: TaskSampler,
    steps: int,
    dp,
    partial: Path,
    log: Callable[[dict], None] | None = None,
    stop_after_steps: int | None = None,
    *,
    progress: bool = True,
) -> bool:
    """Step 3 for every step from the trainer's first to `steps`: each step's record appended to the trainer's
    history and given to `log`, a checkpoint in `partial` (rank 0) after the first step that ends
    `train.checkpoint_seconds` or more after the last checkpoint (or this call's start), the last step's
    excepted. Where checkpoints fall changes no weight: every step is seeded by its number. False where
    `stop_after_steps` steps stopped the run before its end (tests use it to simulate a kill), else True."""
    with progress_bar(progress and dp.rank == 0, "loss {task.fields[loss]:.4f}") as bar:
        last = trainer.history[-1]["loss"] if trainer.history else float("nan")
        job = bar.add_task(f"training round {trainer.round}", total=steps, completed=trainer.first_step, loss=last)
        first = trainer.first_step
        saved = time.monotonic()
        for step in range(first, steps):
            record = train_step(trainer, data, sampler, step, dp)
            trainer.history.append(record)
            if log is not None:
                log(record)
            bar.update(job, advance=1, loss=record["loss"])
            done = step + 1
            if dp.rank == 0 and done < steps and time.monotonic() - saved >= trainer.cfg.checkpoint_seconds:
                write_checkpoint(partial, trainer, done)
                saved = time.monotonic()
            if stop_after_steps is not None and done - first >= stop_after_steps and done < steps:
                dp.barrier()
                return False
    return True


def resume_trainer(
    partial: Path, initial: Callable[[], BiEncoder], cfg: TrainSettings, *, queries: Mapping | None = None, **options
) -> Trainer:
    """Step 2: :func:`build_trainer` (`cfg` and `options`: its arguments) for the bi-encoder of the
    checkpoint in `partial` where there is one, with its optimiser, schedule and loss history (a resumed
    run), else for `initial()` (:mod:`udr.retriever.initial`). Before any step, the recipe prepares what its
    loss needs from the encoder training starts from and `queries` ({task: its ScoredQuery list};
    :meth:`udr.retriever.recipes.Recipe.prepare`: loss anchored's reference similarities)."""
    checkpoint = partial / CHECKPOINT
    state_file = checkpoint / "state.json"
    state = json.loads(state_file.read_text()) if state_file.is_file() else None
    encoder = BiEncoder.load(checkpoint / "encoder") if state is not None else initial()
    trainer = build_trainer(encoder, cfg, **options)

    def initial_encoder():  # fresh: the encoder has taken no step yet; resumed: the initial one again
        return encoder if state is None else initial().share(cfg.shared_encoder).to(trainer.device)

    with trainer.autocast():
        trainer.recipe.prepare(initial_encoder, queries, trainer.demos, options.get("pool_batch_size", 64))
    if state is not None:
        opt_state = torch.load(checkpoint / "optimizer.pt", map_location=trainer.device, weights_only=True)
        trainer.optimizer.load_state_dict(opt_state["optimizer"])
        trainer.scheduler.load_state_dict(opt_state["scheduler"])
        trainer.history = state["history"]
    return trainer


def write_checkpoint(partial: Path, trainer: Trainer, step: int) -> None:
    """Weights, optimiser and scheduler state, and the loss history, in one folder (`partial/checkpoint`)
    built beside the last one and swapped in for it: a kill at any instant leaves a whole checkpoint."""
    state = {"optimizer": trainer.optimizer.state_dict(), "scheduler": trainer.scheduler.state_dict()}
    with building_dir(partial / CHECKPOINT) as tmp:
        trainer.encoder.save(tmp / "encoder")
        torch.save(state, tmp / "optimizer.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, "history": trainer.history}))


def finish(
    trainer: Trainer,
    out: Path,
    round_,
    steps,
    data,
    sampler,
    start,
    world,
    device_type,
    record: Callable[[TrainSummary], dict],
) -> TrainSummary:
    """Step 4 (rank 0): summarise the round and save the model with its record (`record(summary)`) in one
    folder swapped in for `out`: a kill at any instant leaves the old model with its record, or the new one
    with its own."""
    losses = [h["loss"] for h in trainer.history]
    window = max(1, min(10, len(losses) // 5))
    summary = TrainSummary(
        round_,
        steps,
        {t: len(q) for t, q in data.items()},
        {t: round(float(p), 4) for t, p in zip(sampler.tasks, sampler.probabilities)},
        _mean(losses[:window]),
        _mean(losses[-window:]),
        round(time.perf_counter() - start, 2),
        world,
        device_type,
    )
    trainer.encoder.to("cpu").train(False)
    with building_dir(out, (SETTINGS_NAME,), MADE) as folder:
        trainer.encoder.save(folder)
        write_record(folder, record(summary))
    return summary


def _mean(xs: Sequence[float]) -> float:
    return round(float(np.mean(xs)), 6) if len(xs) else float("nan")
