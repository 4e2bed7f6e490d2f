"""Multi-task list-wise ranking training of the bi-encoder (one round of the paper's Algorithm 1).

Every optimiser step takes `train.batch_size` scored queries from ONE task, the task drawn with
p(T) ~ q_T^alpha (q_T = T's share of the scored queries); each query brings l candidates sampled
from its LM-ranked list and ranked 1..l by the LM's scores (:mod:`udr.retriever.sampling`). The loss
is :class:`udr.retriever.losses.UDRLoss` (`train.loss`; distill: the KL to the LM's scores). The batch
is processed in micro-batches of `train.micro_batch` queries with gradient accumulation (in-batch
negatives are the micro-batch's candidates; with `train.grad_cache`, the whole batch's: Gao et al.
2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup").

Recipes: `train.shared_encoder` trains one encoder for both sides (E_q is E_d);
`train.freeze_demo_encoder` keeps E_d as it was initialised: each training task's pool is embedded once
(no gradient, dropout off) when training starts, only E_q learns, the candidates' embeddings are read
from that cache and the in-batch loss runs over the query's whole task pool (the query's own row left
out), independent of the micro-batch.

Determinism and resume: everything random in step s (task, queries, candidates, dropout) is drawn
from generators seeded by (seed, round, s), so a run resumed from a checkpoint continues exactly as
an uninterrupted one. Under torchrun, process r computes micro-batches r, r+P, ... and gradients are
summed across processes before the step (data parallel), which equals the one-process step up to
float summation order.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from udr.errors import UdrError
from udr.paths import round_label
from udr.retriever.record import check_replace, training_record, write_record
from udr.retriever.sampling import TaskSampler, sample_candidates, step_rng
from udr.util.distributed import Distributed, resolve_device_type
from udr.util.files import file_sha256, remove, write_atomic, write_text_atomic
from udr.util.resume import open_partial, partial_dir


@dataclass(frozen=True)
class ScoredQuery:
    """A training query with its candidates in LM order (best first), as the encoders read them."""

    task: str
    query_id: int
    text: str
    candidate_ids: tuple[int, ...]
    candidate_texts: tuple[str, ...]
    candidate_scores: tuple[float, ...] = ()  # the LM's scores, same order (loss distill reads them)


@dataclass(frozen=True)
class TaskPool:
    """A task's pool embedded once by a frozen E_d: embeddings (N, d) on the training device, and each
    pool item's row by its id."""

    emb: object
    row: dict[int, int]


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
    """A round's model, optimiser and schedule, with the steps done so far (built by :func:`build`)."""

    encoder: object
    params: list
    optimizer: object
    scheduler: object
    loss_fn: object
    device: object
    history: list[dict] = field(default_factory=list)
    bf16: bool = False  # forwards under bf16 autocast (train.dtype)
    pools: dict[str, TaskPool] = field(default_factory=dict)  # train.freeze_demo_encoder's cached pools

    @property
    def first_step(self) -> int:
        return len(self.history)


def load_scored_queries(settings, tasks: Sequence[str], round_: int, encoder_settings) -> dict[str, list[ScoredQuery]]:
    """Step 1: each task's scored queries of `round_` with their candidates as encoder texts, LM order.
    Only `score.queries_per_task` of them (the same seeded choice `udr score` makes, so a file scored
    for more queries holds them); a file scored for fewer is an error."""
    import polars as pl

    from udr.data.prepare import read_prepared
    from udr.feedback.scores_file import read_scores, scored_queries
    from udr.retriever.encoder import demo_texts, query_text

    out: dict[str, list[ScoredQuery]] = {}
    for name in tasks:
        task = settings.task(name)
        path = settings.paths.scores(round_, name)
        if not path.is_file():
            raise UdrError(f"missing scores {path}: run `udr score --round {round_}` first")
        train = read_prepared(settings.root, name, "train")
        wanted = scored_queries(settings, name, np.asarray(train["id"].to_list()))
        scores = read_scores(path, round_, name)
        _check_scored_queries(path, scores, wanted, round_)
        scores = scores.filter(pl.col("query_id").is_in(wanted.tolist())).sort(["query_id", "rank"])
        rows = {r["id"]: r for r in train.iter_rows(named=True)}
        queries = []
        for (qid,), group in scores.group_by(["query_id"], maintain_order=True):
            cids = tuple(int(c) for c in group["candidate_id"])
            if len(cids) < 2:
                continue
            q = rows[int(qid)]
            texts = demo_texts(
                task, [rows[c]["input"] for c in cids], [rows[c]["target"] for c in cids], encoder_settings
            )
            queries.append(
                ScoredQuery(
                    name,
                    int(qid),
                    query_text(task.instruction, q["input"], encoder_settings),
                    cids,
                    tuple(texts),
                    tuple(float(s) for s in group["score"]),
                )
            )
        out[name] = queries
    return out


def _check_scored_queries(path: Path, scores, wanted: np.ndarray, round_: int) -> None:
    """Every query the params choose (`score.queries_per_task` with `seed`) must be in the scores
    file; one scored for fewer queries, or with another seed, is a one-line error."""
    missing = np.setdiff1d(wanted, scores["query_id"].unique().to_numpy())
    if len(missing):
        raise UdrError(
            f"{path} lacks {len(missing)} of the {len(wanted)} queries that score.queries_per_task and seed "
            f"choose (scored for fewer queries or with another seed): run `udr score --round {round_}` "
            f"with the same parameters first"
        )


def epr_settings(settings):
    """The EPR baseline's recipe on UDR's budget: round-0 (BM25) scores only, one positive of the
    top 5 and one hard negative of the bottom 5 per query, the in-batch (DPR) loss alone over the
    batch's candidates, two encoders both trained, and as many epochs as all of UDR's rounds together;
    same encoder init, batch, lr and inputs."""
    cfg = settings.train
    epochs = cfg.epochs_first + cfg.epochs_later * len(cfg.later_rounds)
    update = {"sampling": "epr", "loss": "paper", "loss_lambda": 0.0, "epochs_first": epochs}
    train = cfg.model_copy(update={**update, "freeze_demo_encoder": False, "shared_encoder": False})
    return settings.model_copy(update={"train": train})


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
    its log under metrics/train/<its name>) and training log; returns (summary or None off rank 0,
    output directory). A model recorded from another params file is not replaced unless `replace`."""
    paths = settings.paths
    settings.train.check_round(round_)
    if epr and round_ != 0:
        raise UdrError("the EPR baseline trains on round 0's scores only: drop --round")
    from udr.retriever.encoder import SETTINGS_NAME

    if init is None:
        init = paths.base_model("encoder") if round_ == 0 else paths.round_model(round_ - 1)
    elif not (Path(init) / SETTINGS_NAME).is_file():
        raise UdrError(f"missing model {init}: --init takes a trained udr bi-encoder directory")
    if epr:
        settings = epr_settings(settings)
        default_out, log_name = paths.epr_model, "epr"
    else:
        default_out, log_name = paths.round_model(round_), round_label(round_)
    if out is not None:
        log_name = Path(out).name
    out = Path(out) if out is not None else default_out
    check_replace(out, settings, replace)
    summary = run_train(
        settings,
        round_,
        init=Path(init),
        out=out,
        log_dir=paths.train_log(log_name),
        progress=progress,
        method="epr" if epr else "udr",
    )
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
    """Train one round from `init` (a base encoder directory, or a saved bi-encoder) into `out`.

    Per-step losses go to `log_dir` (dvclive's file layout) with `summary.json` and `loss.png`; a checkpoint
    beside `out` (``.<name>.partial``) is written every `train.checkpoint_steps` steps and picked
    up by the next run with the same inputs. Returns None on processes other than rank 0 and when
    `stop_after_steps` stopped the run early (tests use it to simulate a kill).
    """
    from udr.retriever.train_log import TrainLog
    from udr.util.progress import progress_bar

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
    trainer = build(settings, Path(init), partial, device_type, dp.local_rank, steps)
    live = TrainLog(log_dir, trainer.history) if dp.rank == 0 else None

    with progress_bar(progress and dp.rank == 0, "loss {task.fields[loss]:.4f}") as bar:
        last = trainer.history[-1]["loss"] if trainer.history else float("nan")
        job = bar.add_task(f"training round {round_}", total=steps, completed=trainer.first_step, loss=last)
        first = trainer.first_step
        for step in range(first, steps):
            record = train_step(settings, trainer, data, sampler, round_, step, dp)
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


def bi_encoder_settings(settings, pooling: str, similarity: str):
    """The bi-encoder settings of this project's training (encoder.*, train.shared_encoder) with the given
    pooling and similarity."""
    from udr.retriever.encoder import BiEncoderSettings

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
    from udr.retriever.encoder import BiEncoder, resolve_pooling, resolve_similarity

    enc = settings.encoder
    pooling, similarity = resolve_pooling(enc.pooling, base_dir), resolve_similarity(enc.similarity, base_dir)
    return BiEncoder.from_base(base_dir, bi_encoder_settings(settings, pooling, similarity))


def build(settings, init: Path, partial: Path, device_type: str, local_rank: int, steps: int) -> Trainer:
    """Step 2: the bi-encoder (from the checkpoint in `partial` if there is one, else from `init`), the
    optimiser, the warmup / linear-decay schedule and the loss."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    from udr.retriever.encoder import SETTINGS_NAME, BiEncoder
    from udr.retriever.losses import UDRLoss
    from udr.util.distributed import resolve_lm_precision

    cfg = settings.train
    device = torch.device(f"cuda:{local_rank}" if device_type == "cuda" else "cpu")
    state_file = partial / "state.json"
    state = json.loads(state_file.read_text()) if state_file.is_file() else None
    enc = settings.encoder
    if state is not None:
        encoder = BiEncoder.load(partial / "encoder")
    elif (init / SETTINGS_NAME).is_file():  # a later round continues the previous round's model (auto: its own)
        encoder = BiEncoder.load(init)
        old = encoder.settings
        encoder.settings = bi_encoder_settings(
            settings,
            old.pooling if enc.pooling == "auto" else enc.pooling,
            old.similarity if enc.similarity == "auto" else enc.similarity,
        )
    else:
        encoder = initial_bi_encoder(settings, init)
    encoder.share(cfg.shared_encoder).to(device).train()
    pools = {}
    if cfg.freeze_demo_encoder:
        encoder.demo_model.requires_grad_(False).eval()
        pools = embed_pools(settings, encoder, device)
    params = [p for p in encoder.parameters() if p.requires_grad]
    optimizer = adamw(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = get_linear_schedule_with_warmup(optimizer, min(cfg.warmup_steps, steps), steps)
    history: list[dict] = []
    if state is not None:
        opt_state = torch.load(partial / "optimizer.pt", map_location=device, weights_only=True)
        optimizer.load_state_dict(opt_state["optimizer"])
        scheduler.load_state_dict(opt_state["scheduler"])
        history = state["history"]
    scale = cfg.cosine_scale if encoder.settings.normalize else 1.0
    loss_fn = UDRLoss(cfg.loss_lambda, cfg.loss, scale=scale, distill_temperature=cfg.distill_temperature)
    _, dtype = resolve_lm_precision(device_type, cfg.dtype, "train")
    return Trainer(encoder, params, optimizer, scheduler, loss_fn, device, history, dtype == "bf16", pools)


def embed_pools(settings, encoder, device) -> dict[str, TaskPool]:
    """Every training task's pool (its prepared train split) embedded once by E_d, without gradients,
    `mine.batch_size` texts a batch as every pool embedding is."""
    import torch

    from udr.data.prepare import read_prepared
    from udr.retriever.index import embed_pool

    pools = {}
    for name in settings.training_tasks():
        frame = read_prepared(settings.root, name, "train")
        emb = embed_pool(encoder, settings.task(name), frame, settings.mine.batch_size, progress=False)
        row = {int(i): r for r, i in enumerate(frame["id"])}
        pools[name] = TaskPool(torch.from_numpy(emb).to(device), row)
    return pools


def adamw(params, **options):
    """AdamW with torch's fused kernel (one pass over each parameter, where torch's default on a CPU
    loops over the tensors; 3.83 -> 3.71 s a default bf16 training step, benchmarks/README.md), or
    the plain one where this torch or device has no fused kernel."""
    import torch

    try:
        return torch.optim.AdamW(params, fused=True, **options)
    except RuntimeError:
        return torch.optim.AdamW(params, **options)


def train_step(settings, trainer: Trainer, data, sampler: TaskSampler, round_: int, step: int, dp) -> dict:
    """Step 3, once per optimiser step: draw a task, its queries and their candidates, accumulate the
    loss's gradients over micro-batches, step; returns the step's log record (its "rank" is L_KL
    with loss distill)."""
    import torch

    cfg = settings.train
    l = 2 if cfg.sampling == "epr" else cfg.candidates_per_query
    device = trainer.device
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=trainer.bf16)
    rng = step_rng(settings.seed, round_, step)
    task = sampler.draw(rng)
    pool = data[task]
    chosen = rng.choice(len(pool), size=min(cfg.batch_size, len(pool)), replace=False)
    picks = [(pool[i], sample_candidates(len(pool[i].candidate_ids), l, cfg.sampling, rng)) for i in chosen]
    micro = [picks[i : i + cfg.micro_batch] for i in range(0, len(picks), cfg.micro_batch)]
    trainer.optimizer.zero_grad(set_to_none=True)
    parts = np.zeros(3)

    def dropout_seed(m: int) -> int:
        return settings.seed * 1_000_003 + round_ * 10_007 + step * 101 + m

    if cfg.grad_cache:
        if dp.world > 1:
            raise UdrError("train.grad_cache runs in one process: set it false under torchrun")
        loss = _grad_cache_backward(trainer, micro, dropout_seed, autocast, cfg.length_chunk)
        parts += np.array([loss.total.item(), loss.rank.item(), loss.in_batch.item()])
    else:
        for m, mb in enumerate(micro):
            if m % dp.world != dp.rank:
                continue
            torch.manual_seed(dropout_seed(m))
            with autocast:
                loss = _micro_batch_loss(trainer, mb, cfg.length_chunk)
            share = len(mb) / len(picks)
            (loss.total * share).backward()
            parts += share * np.array([loss.total.item(), loss.rank.item(), loss.in_batch.item()])
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


def _micro_batch_loss(trainer: Trainer, micro_batch, length_chunk: int):
    """UDRLoss of one micro-batch of (ScoredQuery, candidate positions), candidates ranked 1..l in LM order
    (with a frozen E_d: their cached embeddings, and the task's whole pool as in-batch negatives)."""
    import torch

    from udr.retriever.losses import PoolNegatives

    encoder, device = trainer.encoder, trainer.device
    q = encoder.embed([sq.text for sq, _ in micro_batch], "query")
    width = max(len(pos) for _, pos in micro_batch)
    texts, flat_mask, ranks = _candidate_layout(micro_batch, width, device)
    scores = _teacher_scores(micro_batch, width, device) if trainer.loss_fn.mode == "distill" else None
    if trainer.pools:
        pool = trainer.pools[micro_batch[0][0].task]
        rows = torch.tensor([_pool_rows(pool, sq, pos, width) for sq, pos in micro_batch], device=device)
        exclude = torch.tensor([pool.row.get(sq.query_id, -1) for sq, _ in micro_batch], device=device)
        negatives = PoolNegatives(pool.emb, rows, exclude)
        return trainer.loss_fn(q.float(), pool.emb[rows], ranks, flat_mask, scores, negatives)
    d = encoder.embed(texts, "demo", chunk=length_chunk)
    cand = torch.zeros(len(micro_batch), width, d.shape[1], dtype=d.dtype, device=device)
    cand[flat_mask] = d
    return trainer.loss_fn(q.float(), cand.float(), ranks, flat_mask, scores)


def _candidate_layout(micro_batch, width: int, device):
    """A micro-batch's candidate texts in order, and (B, width) tensors of which slots are real and of
    their LM ranks (1 = best; 0 in padded slots)."""
    import torch

    texts, mask, ranks = [], [], []
    for sq, pos in micro_batch:
        texts += [sq.candidate_texts[p] for p in pos]
        mask.append([True] * len(pos) + [False] * (width - len(pos)))
        ranks.append(list(range(1, len(pos) + 1)) + [0] * (width - len(pos)))
    return texts, torch.tensor(mask, device=device), torch.tensor(ranks, device=device)


def _grad_cache_backward(trainer: Trainer, micro, dropout_seed, autocast, length_chunk: int):
    """GradCache: the loss of the whole batch (every micro-batch's candidates in one L_ib), its gradients
    accumulated into the encoder's parameters one micro-batch at a time; returns the loss.

    1. every micro-batch is embedded without gradient (under its own dropout seed);
    2. the loss of all the embeddings together is differentiated with respect to them;
    3. each micro-batch is embedded again under the same seed, with gradient, and back-propagated with
       its slice of those embedding gradients: the parameters' gradients are the whole batch loss's."""
    import torch

    encoder, device = trainer.encoder, trainer.device
    picks = [p for mb in micro for p in mb]
    width = max(len(pos) for _, pos in picks)
    texts, mask, ranks = _candidate_layout(picks, width, device)
    scores = _teacher_scores(picks, width, device) if trainer.loss_fn.mode == "distill" else None

    def embed(m: int):
        torch.manual_seed(dropout_seed(m))
        with autocast:
            q = encoder.embed([sq.text for sq, _ in micro[m]], "query")
            d = encoder.embed([sq.candidate_texts[p] for sq, pos in micro[m] for p in pos], "demo", chunk=length_chunk)
        return q.float(), d.float()

    with torch.no_grad():
        cached = [embed(m) for m in range(len(micro))]
    q_all = torch.cat([q for q, _ in cached]).requires_grad_()
    d_all = torch.cat([d for _, d in cached]).requires_grad_()
    cand = torch.zeros(len(picks), width, d_all.shape[1], dtype=d_all.dtype, device=device)
    cand = cand.masked_scatter(mask.unsqueeze(-1), d_all)
    loss = trainer.loss_fn(q_all, cand, ranks, mask, scores)
    q_grad, d_grad = torch.autograd.grad(loss.total, [q_all, d_all])
    q_at = d_at = 0
    for m in range(len(micro)):
        q, d = embed(m)
        torch.autograd.backward([q, d], [q_grad[q_at : q_at + len(q)], d_grad[d_at : d_at + len(d)]])
        q_at, d_at = q_at + len(q), d_at + len(d)
    return loss


def _teacher_scores(micro_batch, width: int, device):
    """The sampled candidates' LM scores, each standardised over its query's whole scored list (B, l)."""
    import torch

    from udr.retriever.losses import standardize

    rows = []
    for sq, pos in micro_batch:
        if len(sq.candidate_scores) != len(sq.candidate_ids):
            raise UdrError(f"missing scores: {sq.task} query {sq.query_id} has no LM score per candidate")
        z = standardize(sq.candidate_scores)
        rows.append([float(z[p]) for p in pos] + [0.0] * (width - len(pos)))
    return torch.tensor(rows, dtype=torch.float64, device=device)


def _pool_rows(pool: TaskPool, sq: ScoredQuery, positions, width: int) -> list[int]:
    """The pool rows of a query's sampled candidates, padded with row 0 to `width`."""
    try:
        rows = [pool.row[sq.candidate_ids[p]] for p in positions]
    except KeyError as exc:
        raise UdrError(f"{sq.task}: candidate {exc.args[0]} of query {sq.query_id} is not in the task's pool") from None
    return rows + [0] * (width - len(rows))


def finish(trainer: Trainer, out: Path, round_, steps, data, sampler, start, world, device_type) -> TrainSummary:
    """Step 4 (rank 0): save the model and summarise the round."""
    trainer.encoder.to("cpu").train(False)
    trainer.encoder.save(out)
    losses = [h["loss"] for h in trainer.history]
    window = max(1, min(10, len(losses) // 5))
    return TrainSummary(
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


def _mean(xs: Sequence[float]) -> float:
    return round(float(np.mean(xs)), 6) if len(xs) else float("nan")


def _describe_init(init: Path) -> dict:
    from udr.lm.loading import RECORD_NAME
    from udr.retriever.encoder import SETTINGS_NAME

    for name in (SETTINGS_NAME, RECORD_NAME):
        if (init / name).is_file():
            weights = sorted(file_sha256(p) for p in init.rglob("*.safetensors"))
            return {"path": str(init), name: file_sha256(init / name), "weights": weights}
    raise UdrError(f"missing model: {init} is neither a resolved base encoder nor a trained bi-encoder")


def _write_checkpoint(partial: Path, trainer: Trainer, step: int) -> None:
    """Weights, optimiser and scheduler state, and the loss history; state.json is written last, so a
    checkpoint without it (killed while saving) is not resumed from."""
    import torch

    (partial / "state.json").unlink(missing_ok=True)
    trainer.encoder.save(partial / "encoder")
    state = {"optimizer": trainer.optimizer.state_dict(), "scheduler": trainer.scheduler.state_dict()}
    write_atomic(partial / "optimizer.pt", lambda tmp: torch.save(state, tmp))
    write_text_atomic(partial / "state.json", json.dumps({"step": step, "history": trainer.history}))
