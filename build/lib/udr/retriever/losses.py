"""Training losses of UDR (paper, section "Loss Function"): a list-wise rank loss that injects the LM's
ranking of each query's sampled candidates into the retriever (:class:`RankLoss`, inspired by
LambdaRank), the in-batch negative loss over every candidate of the batch (:class:`InBatchLoss`, which
with one positive and one hard negative per query is DPR's / EPR's contrastive loss), and their
combination (:class:`UDRLoss`), either as the paper writes it, lambda * L_rank + (1 - lambda) * L_ib,
or as the published KaiLv69/UDR code computes it, 4 * L_rank + L_ib. Similarities are dot products
of query and candidate embeddings (times `scale`, for cosine similarities); losses are computed in
float32 (or float64 if given) whatever the embeddings' dtype.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from udr.config import LOSS_MODES
from udr.errors import UdrError


def _compute_dtype(t: Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


class RankLoss(nn.Module):
    """UDR's list-wise rank loss (LambdaRank-inspired).

    Inputs:
        sim: FloatTensor (B, l), ``sim[b, j] = sim(x_b, z_bj)`` for each of query b's l candidates.
        ranks: LongTensor (B, l), the LM rank of each candidate within its query's list
            (1 = most helpful; ties allowed). Real candidates must have rank >= 1.
        mask: optional BoolTensor (B, l), True where a candidate is real (a query may have fewer
            than l candidates); values of ``sim`` and ``ranks`` at padded places are ignored.

    Output: a scalar,

        L_rank(x) = sum_{(i, j)} w_ij * log(1 + exp(sim(x, z_j) - sim(x, z_i))),
        w_ij = max(0, 1 / r(z_i) - 1 / r(z_j)),

    summed over all ordered pairs of x's candidates (so only pairs with r(z_i) < r(z_j) count, and
    tied ranks give w = 0; pairs with a padded candidate get w = 0), then averaged over the B
    queries of the batch. ``log(1 + exp(.))`` is computed as softplus. Minimising it pulls
    sim(x, z_i) above sim(x, z_j), harder the larger the rank gap (e.g. r = 1 vs r = 10).

    Reference: Li et al., "Unified Demonstration Retriever for In-Context Learning" (ACL 2023),
    section "Loss Function"; Burges et al., "Learning to Rank with Nonsmooth Cost Functions"
    (LambdaRank, NeurIPS 2006).
    """

    def forward(self, sim: Tensor, ranks: Tensor, mask: Tensor | None = None) -> Tensor:
        if sim.dim() != 2 or ranks.shape != sim.shape:
            raise ValueError(
                f"RankLoss: sim and ranks must both be (B, l), got {tuple(sim.shape)} and {tuple(ranks.shape)}"
            )
        if mask is None:
            mask = torch.ones_like(sim, dtype=torch.bool)
        elif mask.shape != sim.shape:
            raise ValueError(f"RankLoss: mask must be (B, l) like sim, got {tuple(mask.shape)}")
        mask = mask.to(torch.bool)
        if bool((ranks[mask] < 1).any()):
            raise UdrError("bad ranks: every real candidate needs a rank >= 1 (1 = most helpful)")
        dtype = _compute_dtype(sim)
        # Zero padded places first so that nan / inf there can reach neither the loss nor the gradient.
        s = torch.where(mask, sim.to(dtype), torch.zeros((), dtype=dtype, device=sim.device))
        inv_r = torch.where(mask, 1.0 / ranks.clamp(min=1).to(dtype), torch.zeros((), dtype=dtype, device=sim.device))
        # w[b, i, j] = max(0, 1/r_i - 1/r_j); diff[b, i, j] = sim_j - sim_i.
        w = (inv_r[:, :, None] - inv_r[:, None, :]).clamp(min=0)
        w = w * (mask[:, :, None] & mask[:, None, :])
        diff = s[:, None, :] - s[:, :, None]
        per_query = (w * F.softplus(diff)).sum(dim=(1, 2))
        return per_query.mean()


class InBatchLoss(nn.Module):
    """In-batch negative loss: each query against every candidate in the batch.

    Inputs:
        query_emb: FloatTensor (B, d), the query embeddings x_b.
        cand_emb: FloatTensor (N, d), every candidate of the batch, Z (the query's own candidates
            and the other queries').
        positive: LongTensor (B,), index into ``cand_emb`` of each query's rank-1 candidate z*.
        cand_mask: optional BoolTensor (N,), True for real candidates; padded ones are left out of
            every softmax (their logits are set to -inf).

    Output: a scalar,

        L_ib = mean_b  -log( exp(sim(x_b, z*_b)) / sum_{z in Z} exp(sim(x_b, z)) ),  sim = dot product,

    i.e. cross-entropy of the (B, N) logits ``query_emb @ cand_emb.T`` against ``positive``. With
    one positive and one hard negative per query this is exactly the contrastive loss of DPR and of
    EPR (the EPR baseline trains with it that way).

    Reference: Li et al., "Unified Demonstration Retriever for In-Context Learning" (ACL 2023),
    section "Loss Function"; Karpukhin et al., "Dense Passage Retrieval" (EMNLP 2020); Rubin et al.,
    "Learning To Retrieve Prompts for In-Context Learning" (NAACL 2022).
    """

    def forward(self, query_emb: Tensor, cand_emb: Tensor, positive: Tensor, cand_mask: Tensor | None = None) -> Tensor:
        if query_emb.dim() != 2 or cand_emb.dim() != 2 or query_emb.shape[1] != cand_emb.shape[1]:
            raise ValueError(
                f"InBatchLoss: need query_emb (B, d) and cand_emb (N, d), "
                f"got {tuple(query_emb.shape)} and {tuple(cand_emb.shape)}"
            )
        if positive.shape != (query_emb.shape[0],):
            raise ValueError(f"InBatchLoss: positive must be (B,), got {tuple(positive.shape)}")
        dtype = _compute_dtype(query_emb)
        logits = query_emb.to(dtype) @ cand_emb.to(dtype).T
        if cand_mask is not None:
            if cand_mask.shape != (cand_emb.shape[0],):
                raise ValueError(f"InBatchLoss: cand_mask must be (N,), got {tuple(cand_mask.shape)}")
            logits = logits.masked_fill(~cand_mask.to(torch.bool)[None, :], float("-inf"))
        return F.cross_entropy(logits, positive.to(torch.long))


class LossParts(NamedTuple):
    """The training loss and its two parts (scalar tensors; ``total`` is the one to backpropagate)."""

    total: Tensor
    rank: Tensor
    in_batch: Tensor


class UDRLoss(nn.Module):
    """UDR's training loss: the rank loss plus the in-batch negative loss.

    Args:
        lambda_: weight of L_rank in "paper" mode, in [0, 1] (ignored in "published" mode).
        mode: "paper": L = lambda * L_rank + (1 - lambda) * L_ib (the paper's formula);
            "published": L = 4 * L_rank + L_ib (what the published KaiLv69/UDR code computes).
        scale: every similarity enters both losses multiplied by it, sim = scale * (q . z) (1 / temperature;
            1 for the paper's dot products, e.g. 20 for cosine similarities of L2-normalised embeddings).

    Inputs (forward):
        query_emb: FloatTensor (B, d), query embeddings.
        cand_emb: FloatTensor (B, l, d), embeddings of each query's l sampled candidates.
        ranks: LongTensor (B, l), the LM rank of each candidate in its query's list (1 = best).
        mask: optional BoolTensor (B, l), True where a candidate is real.

    Output: :class:`LossParts` (total, rank, in_batch). With ``sim[b, j] = scale * query_emb[b] . cand_emb[b, j]``,
    rank = :class:`RankLoss` (sim, ranks, mask); in_batch = :class:`InBatchLoss` over all B * l
    candidates of the batch (padded ones left out of the softmax), the positive of query b being its
    best-ranked real candidate (smallest rank, the first on ties). Every query needs at least one
    real candidate.

    Reference: Li et al., "Unified Demonstration Retriever for In-Context Learning" (ACL 2023),
    section "Loss Function"; https://github.com/KaiLv69/UDR for the "published" weighting.
    """

    def __init__(self, lambda_: float = 0.8, mode: str = "paper", scale: float = 1.0) -> None:
        super().__init__()
        try:
            lam = float(lambda_)
        except (TypeError, ValueError):
            raise UdrError(f"bad parameter lambda_: must be a number in [0, 1], got {lambda_!r}") from None
        if not 0.0 <= lam <= 1.0:  # also rejects nan
            raise UdrError(f"bad parameter lambda_: must be in [0, 1], got {lambda_!r}")
        if mode not in LOSS_MODES:
            raise UdrError(f"bad parameter mode: must be 'paper' or 'published', got {mode!r}")
        if not (isinstance(scale, int | float) and math.isfinite(scale) and scale > 0):
            raise UdrError(f"bad parameter scale: must be a finite number > 0, got {scale!r}")
        self.lambda_ = lam
        self.mode = mode
        self.scale = float(scale)
        self.rank_loss = RankLoss()
        self.in_batch_loss = InBatchLoss()

    def forward(self, query_emb: Tensor, cand_emb: Tensor, ranks: Tensor, mask: Tensor | None = None) -> LossParts:
        if (
            query_emb.dim() != 2
            or cand_emb.dim() != 3
            or cand_emb.shape[0] != query_emb.shape[0]
            or cand_emb.shape[2] != query_emb.shape[1]
        ):
            raise ValueError(
                f"UDRLoss: need query_emb (B, d) and cand_emb (B, l, d), "
                f"got {tuple(query_emb.shape)} and {tuple(cand_emb.shape)}"
            )
        b, l, d = cand_emb.shape
        if ranks.shape != (b, l):
            raise ValueError(f"UDRLoss: ranks must be (B, l) = {(b, l)}, got {tuple(ranks.shape)}")
        if mask is None:
            mask = torch.ones((b, l), dtype=torch.bool, device=cand_emb.device)
        elif mask.shape != (b, l):
            raise ValueError(f"UDRLoss: mask must be (B, l) = {(b, l)}, got {tuple(mask.shape)}")
        mask = mask.to(torch.bool)
        if not bool(mask.any(dim=1).all()):
            raise UdrError("bad batch: every query needs at least one real candidate")
        if self.scale != 1.0:
            query_emb = query_emb * self.scale  # scales every similarity q . z below

        # Zero padded embeddings so that whatever they hold (even nan) reaches no loss and no gradient.
        zero = torch.zeros((), dtype=cand_emb.dtype, device=cand_emb.device)
        cand_emb = torch.where(mask[:, :, None], cand_emb, zero)
        sim = (query_emb[:, None, :] * cand_emb).sum(-1)
        rank = self.rank_loss(sim, ranks, mask)

        # Positive: the best-ranked real candidate of each query (argmin returns the first on ties).
        sentinel = torch.full_like(ranks, torch.iinfo(torch.long).max, dtype=torch.long)
        best = torch.where(mask, ranks.to(torch.long), sentinel).argmin(dim=1)
        positive = torch.arange(b, device=cand_emb.device) * l + best
        in_batch = self.in_batch_loss(query_emb, cand_emb.reshape(b * l, d), positive, mask.reshape(b * l))

        if self.mode == "paper":
            total = self.lambda_ * rank + (1.0 - self.lambda_) * in_batch
        else:
            total = 4.0 * rank + in_batch
        return LossParts(total=total, rank=rank, in_batch=in_batch)
