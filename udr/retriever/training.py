"""Multi-task list-wise ranking training of the bi-encoder (one round of the paper's Algorithm 1; the
`udr train` stage that runs it is :mod:`udr.stages.train`).

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

Determinism: everything random in step s (task, queries, candidates, dropout) is drawn from generators
seeded by (seed, round, s), so a run resumed from a checkpoint continues exactly as an uninterrupted one.
Under torchrun, process r computes micro-batches r, r+P, ... and gradients are summed across processes
before the step (data parallel), which equals the one-process step up to float summation order.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from udr.errors import UdrError
from udr.retriever.sampling import TaskSampler, sample_candidates, step_rng


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
    """A round's model, optimiser and schedule, with the steps done so far (built by :func:`build_trainer`)."""

    encoder: object
    params: list
    optimizer: object
    scheduler: object
    loss_fn: object
    device: object
    cfg: object  # the round's TrainSettings
    seed: int  # with round: seeds every step's draws (step_rng) and dropout
    round: int
    history: list[dict] = field(default_factory=list)
    bf16: bool = False  # forwards under bf16 autocast (train.dtype)
    pools: dict[str, TaskPool] = field(default_factory=dict)  # train.freeze_demo_encoder's cached pools

    @property
    def first_step(self) -> int:
        return len(self.history)


def training_queries(task, train, scores, encoder_settings) -> list[ScoredQuery]:
    """A task's scored queries with their candidates as the encoders read them, in LM order: `scores`
    (query_id, candidate_id, score; sorted by query and rank) over the rows of `train`, the task's prepared
    train split. A query with fewer than 2 candidates is left out."""
    from udr.retriever.encoder import demo_texts, query_text

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


def build_trainer(
    encoder,
    cfg,
    *,
    steps: int,
    device,
    seed: int,
    round_: int,
    bf16: bool = False,
    pools: Mapping | None = None,
    pool_batch_size: int = 64,
) -> Trainer:
    """A round's trainer for `encoder` with the training settings `cfg` (a :class:`udr.config.TrainSettings`):
    E_d tied to E_q or not (`shared_encoder`), frozen with `pools` ({task: (Task, its pool frame)})
    embedded once (`freeze_demo_encoder`, `pool_batch_size` texts a batch), the optimiser, the warmup /
    linear-decay schedule over `steps` and the loss; `seed` and `round_` seed every step."""
    from transformers import get_linear_schedule_with_warmup

    from udr.retriever.losses import UDRLoss

    encoder.share(cfg.shared_encoder).to(device).train()
    task_pools = {}
    if cfg.freeze_demo_encoder:
        encoder.demo_model.requires_grad_(False).eval()
        task_pools = embed_pools(encoder, pools, pool_batch_size, device)
    params = [p for p in encoder.parameters() if p.requires_grad]
    optimizer = adamw(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = get_linear_schedule_with_warmup(optimizer, min(cfg.warmup_steps, steps), steps)
    scale = cfg.cosine_scale if encoder.settings.normalize else 1.0
    loss_fn = UDRLoss(cfg.loss_lambda, cfg.loss, scale=scale, distill_temperature=cfg.distill_temperature)
    return Trainer(
        encoder, params, optimizer, scheduler, loss_fn, device, cfg, seed, round_, bf16=bf16, pools=task_pools
    )


def embed_pools(encoder, pools: Mapping, batch_size: int, device) -> dict[str, TaskPool]:
    """Each pool ({task: (Task, its prepared train split)}) embedded once by E_d, without gradients,
    `batch_size` texts a batch as every pool embedding is."""
    import torch

    from udr.retriever.index import embed_pool

    out = {}
    for name, (task, frame) in pools.items():
        emb = embed_pool(encoder, task, frame, batch_size, progress=False)
        row = {int(i): r for r, i in enumerate(frame["id"])}
        out[name] = TaskPool(torch.from_numpy(emb).to(device), row)
    return out


def adamw(params, **options):
    """AdamW with torch's fused kernel (one pass over each parameter, where torch's default on a CPU
    loops over the tensors; 3.83 -> 3.71 s a default bf16 training step,
    notebook/2026-11-benchmarks.md), or the plain one where this torch or device has no fused kernel."""
    import torch

    try:
        return torch.optim.AdamW(params, fused=True, **options)
    except RuntimeError:
        return torch.optim.AdamW(params, **options)


def train_step(trainer: Trainer, data, sampler: TaskSampler, step: int, dp) -> dict:
    """Step 3, once per optimiser step: draw a task, its queries and their candidates, accumulate the
    loss's gradients over micro-batches, step; returns the step's log record (its "rank" is L_KL
    with loss distill)."""
    import torch

    cfg = trainer.cfg
    l = 2 if cfg.sampling == "epr" else cfg.candidates_per_query
    device = trainer.device
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=trainer.bf16)
    rng = step_rng(trainer.seed, trainer.round, step)
    task = sampler.draw(rng)
    pool = data[task]
    chosen = rng.choice(len(pool), size=min(cfg.batch_size, len(pool)), replace=False)
    picks = [(pool[i], sample_candidates(len(pool[i].candidate_ids), l, cfg.sampling, rng)) for i in chosen]
    micro = [picks[i : i + cfg.micro_batch] for i in range(0, len(picks), cfg.micro_batch)]
    trainer.optimizer.zero_grad(set_to_none=True)
    parts = np.zeros(3)

    def dropout_seed(m: int) -> int:
        return trainer.seed * 1_000_003 + trainer.round * 10_007 + step * 101 + m

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
