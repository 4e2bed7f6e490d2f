"""How a step's batch loss reaches the parameters' gradients, one micro-batch (`train.micro_batch` queries)
at a time: :class:`PlainBackward` (gradient accumulation, each micro-batch's own loss) or
:class:`GradCacheBackward` (`train.grad_cache`: the whole batch's loss). The trainer is built with one of
them (:func:`udr.retriever.training.build_trainer`); both are called as ``backward(trainer, micro, step,
dp, parts)`` with the step's micro-batches of (ScoredQuery, candidate positions), and add this process's
share of the loss's (total, rank, in_batch) to `parts`.
"""

from __future__ import annotations

import numpy as np
import torch

from udr.errors import UdrError
from udr.retriever.recipes import CandidateLayout


def _values(loss) -> np.ndarray:
    return np.array([loss.total.item(), loss.rank.item(), loss.in_batch.item()])


class PlainBackward:
    """Gradient accumulation: each micro-batch's loss (L_ib over its own candidates) back-propagated as it
    is computed, weighted by the micro-batch's share of the batch's queries. Under torchrun process r
    computes micro-batches r, r+P, ... (gradients are summed across processes before the step)."""

    def __call__(self, trainer, micro: list[list], step: int, dp, parts: np.ndarray) -> None:
        total = sum(len(mb) for mb in micro)
        for m, mb in enumerate(micro):
            if m % dp.world != dp.rank:
                continue
            torch.manual_seed(trainer.dropout_seed(step, m))
            with trainer.autocast():
                loss = trainer.micro_batch_loss(mb)
            share = len(mb) / total
            (loss.total * share).backward()
            parts += share * _values(loss)


class GradCacheBackward:
    """GradCache: the loss of the whole batch (every micro-batch's candidates in one L_ib), its gradients
    accumulated into the encoder's parameters one micro-batch at a time:

    1. every micro-batch is embedded without gradient (under its own dropout seed);
    2. the loss of all the embeddings together is differentiated with respect to them;
    3. each micro-batch is embedded again under the same seed, with gradient, and back-propagated with
       its slice of those embedding gradients: the parameters' gradients are the whole batch loss's.

    One process only (`world` 1); E_d must be trained (:class:`udr.retriever.demo_encoders.TrainedDemoEncoder`).
    Reference: Gao et al., "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup" (2021).
    """

    def __init__(self, world: int) -> None:
        if world > 1:
            raise UdrError("train.grad_cache runs in one process: set it false under torchrun")

    def __call__(self, trainer, micro: list[list], step: int, dp, parts: np.ndarray) -> None:
        encoder, device = trainer.encoder, trainer.device
        picks = [p for mb in micro for p in mb]
        layout = CandidateLayout.of(picks, device)

        def embed(m: int):
            torch.manual_seed(trainer.dropout_seed(step, m))
            with trainer.autocast():
                q = encoder.embed([sq.text for sq, _ in micro[m]], "query")
                d = trainer.demos.embed(encoder, [sq.candidate_texts[p] for sq, pos in micro[m] for p in pos])
            return q.float(), d.float()

        with torch.no_grad():
            cached = [embed(m) for m in range(len(micro))]
        q_all = torch.cat([q for q, _ in cached]).requires_grad_()
        d_all = torch.cat([d for _, d in cached]).requires_grad_()
        loss = trainer.recipe(q_all, layout.pad(d_all), layout)
        q_grad, d_grad = torch.autograd.grad(loss.total, [q_all, d_all])
        q_at = d_at = 0
        for m in range(len(micro)):
            q, d = embed(m)
            torch.autograd.backward([q, d], [q_grad[q_at : q_at + len(q)], d_grad[d_at : d_at + len(d)]])
            q_at, d_at = q_at + len(q), d_at + len(d)
        parts += _values(loss)
