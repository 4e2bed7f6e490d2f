"""Training losses of UDR (paper, section "Loss Function"): a list-wise rank loss that injects the LM's
ranking of each query's sampled candidates into the retriever (:class:`RankLoss`, inspired by
LambdaRank), the in-batch negative loss over every candidate of the batch (:class:`InBatchLoss`, which
with one positive and one hard negative per query is DPR's / EPR's contrastive loss), a KL loss that
distils the LM's scores instead of its ranks (:class:`DistillLoss`, LLM-R's), and a pairwise loss that
learns the LM's preferred (winner, loser) pairs relative to the initial encoder (:class:`AnchoredLoss`,
SeDPO's anchored one). The in-batch loss can run over a task's whole pool of cached demonstration
embeddings instead of the batch (:class:`PoolInBatchLoss` over :class:`PoolNegatives`, for a frozen E_d).

The training losses combine a rank term with the in-batch loss, one class each: :class:`UDRLoss` (the
paper's lambda * L_rank + (1 - lambda) * L_ib, the base of the others), :class:`PublishedUDRLoss` (4 * L_rank
+ L_ib, as the published KaiLv69/UDR code computes it), :class:`DistillUDRLoss` (L_KL as the rank term) and
:class:`AnchoredUDRLoss` (L_anchor). Similarities are dot products of query and candidate embeddings (times
`scale`, for cosine similarities); losses are computed in float32 (or float64 if given) whatever the
embeddings' dtype.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from udr.errors import UdrError


def _compute_dtype(t: Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _list_mask(loss: str, sim: Tensor, other: Tensor, name: str, mask: Tensor | None) -> Tensor:
    """Check a list-wise loss's (B, l) inputs; the mask of real candidates as bool (all True if None)."""
    if sim.dim() != 2 or other.shape != sim.shape:
        raise ValueError(f"{loss}: sim and {name} must both be (B, l), got {tuple(sim.shape)} and {tuple(other.shape)}")
    if mask is None:
        return torch.ones_like(sim, dtype=torch.bool)
    if mask.shape != sim.shape:
        raise ValueError(f"{loss}: mask must be (B, l) like sim, got {tuple(mask.shape)}")
    return mask.to(torch.bool)


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
        mask = _list_mask("RankLoss", sim, ranks, "ranks", mask)
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
            every softmax (their logits are set to -inf). Or (B, N): a mask per query (e.g. a query
            left out of its own softmax when the candidates are its task's whole pool).

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
            n = cand_emb.shape[0]
            if cand_mask.shape not in ((n,), (query_emb.shape[0], n)):
                raise ValueError(f"InBatchLoss: cand_mask must be (N,) or (B, N), got {tuple(cand_mask.shape)}")
            logits = logits.masked_fill(~cand_mask.to(torch.bool).expand_as(logits), float("-inf"))
        return F.cross_entropy(logits, positive.to(torch.long))


def standardize(scores: Sequence[float]) -> np.ndarray:
    """A query's LM scores as z-scores over its whole scored list: (s - mean) / std (population std),
    all zeros where the scores are all equal. :class:`DistillLoss`'s targets in training."""
    s = np.asarray(scores, dtype=np.float64)
    if not np.isfinite(s).all():
        raise UdrError("bad scores: every LM score must be finite")
    std = float(s.std()) if s.size else 0.0
    return (s - s.mean()) / std if std > 1e-12 else np.zeros_like(s)


class DistillLoss(nn.Module):
    """Distils the LM's preferences among each query's candidates into the retriever: KL(p_LM || p_ret).

    Args:
        temperature: tau > 0 of the LM side's softmax (lower: a sharper target).

    Inputs:
        sim: FloatTensor (B, l), ``sim[b, j] = sim(x_b, z_bj)`` for each of query b's l candidates.
        scores: FloatTensor (B, l), the LM's score of each candidate (higher = more helpful); targets,
            no gradient reaches them.
        mask: optional BoolTensor (B, l), True where a candidate is real; padded places leave both
            softmaxes (whatever ``sim`` and ``scores`` hold there).

    Output: a scalar,

        L_KL = mean_b sum_j p_LM(j) * (log p_LM(j) - log p_ret(j)),
        p_LM = softmax_j(scores[b, j] / tau),  p_ret = softmax_j(sim[b, j]),

    over each query's real candidates; 0 exactly where the retriever's softmax equals the LM's.

    The scores: UDR's LM scores are a probability in [0, 1] for classification (s_cls) and a mean
    token log-likelihood (<= 0) for generation (s_gen), with per-query spreads that differ by task
    (standard deviations of ~0.15 to ~0.46 on the default data), so one tau on raw scores would mean
    a sharp target for one task and a near-uniform one for another. Training therefore passes each
    candidate's score standardised over its query's whole scored list (:func:`standardize`, over all
    K candidates rather than the l sampled, which for l = 2 would always give -1 and +1): tau is then
    in standard deviations of that list, the same for every task: candidates one standard deviation
    apart get target probabilities in the ratio e^(1/tau).

    Reference: Wang, Yang and Wei, "Learning to Retrieve In-Context Examples for Large Language Models"
    (LLM-R, 2023, arXiv:2307.07164), whose retriever is distilled with this KL (there from a reward
    model's scores; here from the LM's own).
    """

    def __init__(self, temperature: float) -> None:
        super().__init__()
        if not (isinstance(temperature, int | float) and math.isfinite(temperature) and temperature > 0):
            raise UdrError(f"bad parameter temperature: must be a finite number > 0, got {temperature!r}")
        self.temperature = float(temperature)

    def forward(self, sim: Tensor, scores: Tensor, mask: Tensor | None = None) -> Tensor:
        mask = _list_mask("DistillLoss", sim, scores, "scores", mask)
        if not bool(mask.any(dim=1).all()):
            raise UdrError("bad batch: every query needs at least one real candidate")
        dtype = _compute_dtype(sim)
        target = scores.detach().to(dtype) / self.temperature
        if not bool(torch.isfinite(target[mask]).all()):
            raise UdrError("bad scores: every real candidate needs a finite LM score")
        zero = torch.zeros((), dtype=dtype, device=sim.device)
        log_p_ret = F.log_softmax(sim.to(dtype).masked_fill(~mask, float("-inf")), dim=1)
        log_p_lm = F.log_softmax(target.masked_fill(~mask, float("-inf")), dim=1)
        # Padded places: -inf in both; zero them so that they add 0 (not nan) to the sum and the gradient.
        log_p_ret = torch.where(mask, log_p_ret, zero)
        log_p_lm = torch.where(mask, log_p_lm, zero)
        kl = torch.where(mask, log_p_lm.exp() * (log_p_lm - log_p_ret), zero)
        return kl.sum(dim=1).mean()


class AnchoredLoss(nn.Module):
    """An anchored pairwise preference loss: each (winner, loser) pair of a query's candidates pulls the
    retriever's similarity margin above the reference encoder's (the frozen initial one).

    Args:
        beta: beta > 0, the scale of the margins inside the sigmoid (in the similarities' units: a
            larger beta saturates sooner, keeping the retriever nearer the reference).

    Inputs:
        sim: FloatTensor (B, l), ``sim[b, j] = sim(x_b, z_bj)`` by the trained retriever.
        ref_sim: FloatTensor (B, l), the same similarities by the reference encoder (targets: no gradient
            reaches them); the same units as ``sim``.
        pairs: BoolTensor (B, l, l), ``pairs[b, i, j]`` True where candidate i of query b is preferred to
            its candidate j (a winner over a loser); values of ``sim`` and ``ref_sim`` outside every pair
            are ignored.

    Output: a scalar,

        L_anchor = mean_{(b, w, l) in pairs}  -log sigma( beta * ((s_bw - s_ref,bw) - (s_bl - s_ref,bl)) ),

    the mean over all the batch's pairs (0, with a zero gradient, where there are none). ``-log sigma`` is
    computed as softplus(-.). At the reference itself (sim = ref_sim) every pair gives log 2; raising a
    winner's similarity (or lowering a loser's) relative to the reference lowers it, and only the margin
    gained over the reference counts, so pairs the reference already orders well pull no harder.

    Reference: the anchored pairwise (DPO-style) preference loss of SeDPO (NeurIPS 2025); Rafailov et
    al., "Direct Preference Optimization" (NeurIPS 2023), whose log-probability ratios to a frozen
    reference are here similarity differences to the initial encoder's.
    """

    def __init__(self, beta: float) -> None:
        super().__init__()
        if not (isinstance(beta, int | float) and math.isfinite(beta) and beta > 0):
            raise UdrError(f"bad parameter beta: must be a finite number > 0, got {beta!r}")
        self.beta = float(beta)

    def forward(self, sim: Tensor, ref_sim: Tensor, pairs: Tensor) -> Tensor:
        if sim.dim() != 2 or ref_sim.shape != sim.shape:
            raise ValueError(
                f"AnchoredLoss: sim and ref_sim must both be (B, l), got {tuple(sim.shape)} and {tuple(ref_sim.shape)}"
            )
        b, l = sim.shape
        if pairs.shape != (b, l, l):
            raise ValueError(f"AnchoredLoss: pairs must be (B, l, l) = {(b, l, l)}, got {tuple(pairs.shape)}")
        pairs = pairs.to(torch.bool)
        dtype = _compute_dtype(sim)
        zero = torch.zeros((), dtype=dtype, device=sim.device)
        in_pair = pairs.any(dim=2) | pairs.any(dim=1)
        # Candidates in no pair are zeroed first, so that whatever they hold reaches no loss and no gradient.
        gain = torch.where(in_pair, sim.to(dtype) - ref_sim.detach().to(dtype), zero)
        if bool((~torch.isfinite(gain[in_pair])).any()):
            raise UdrError("bad batch: every paired candidate needs finite similarities")
        margin = gain[:, :, None] - gain[:, None, :]  # margin[b, i, j] = gain_i - gain_j
        per_pair = torch.where(pairs, F.softplus(-self.beta * margin), zero)
        count = pairs.sum()
        if int(count) == 0:
            return per_pair.sum()  # no pair: 0, connected to the graph
        return per_pair.sum() / count


class PoolNegatives(NamedTuple):
    """A task's whole pool as the in-batch loss's candidates (cached embeddings of a frozen E_d).

    emb: FloatTensor (N, d), the pool's demonstration embeddings.
    rows: LongTensor (B, l), the pool row of each query's sampled candidates (any value where padded).
    exclude: LongTensor (B,), the pool row of each query itself, left out of its own softmax (-1: none).
    """

    emb: Tensor
    rows: Tensor
    exclude: Tensor


class PoolInBatchLoss(nn.Module):
    """The in-batch negative loss over a task's whole pool instead of the batch (a frozen E_d's cached
    pool embeddings): each query against every pool item but itself.

    Inputs:
        query_emb: FloatTensor (B, d), the query embeddings x_b.
        pool: :class:`PoolNegatives`: the pool's embeddings P (N, d), the pool row of each query's
            candidates (B, l), and each query's own row (B,; -1: none).
        best: LongTensor (B,), the position among its l candidates of each query's positive z*_b.

    Output: a scalar,

        L_ib = mean_b  -log( exp(sim(x_b, z*_b)) / sum_{z in P, z != x_b} exp(sim(x_b, z)) ),  sim = dot product,

    i.e. :class:`InBatchLoss` of the queries against the N pool rows, the positive of query b being the
    pool row of its candidate ``best[b]``, and query b's own row masked out of its softmax. A query
    whose positive is itself is an error.

    Reference: Li et al., "Unified Demonstration Retriever for In-Context Learning" (ACL 2023),
    section "Loss Function" (L_ib), with the batch's candidates replaced by the task's pool, as a
    frozen demonstration encoder affords.
    """

    def __init__(self) -> None:
        super().__init__()
        self.in_batch_loss = InBatchLoss()

    def forward(self, query_emb: Tensor, pool: PoolNegatives, best: Tensor) -> Tensor:
        b = best.shape[0]
        if pool.emb.dim() != 2 or pool.emb.shape[1] != query_emb.shape[1]:
            raise ValueError(f"PoolInBatchLoss: pool.emb must be (N, d), got {tuple(pool.emb.shape)}")
        if pool.rows.dim() != 2 or pool.rows.shape[0] != b or pool.exclude.shape != (b,):
            raise ValueError(
                f"PoolInBatchLoss: pool.rows must be (B, l) and pool.exclude (B,), "
                f"got {tuple(pool.rows.shape)} and {tuple(pool.exclude.shape)}"
            )
        positive = pool.rows.to(torch.long).gather(1, best[:, None]).squeeze(1)
        exclude = pool.exclude.to(torch.long)
        if bool((positive == exclude).any()):
            raise UdrError("bad batch: a query's best candidate is the query itself")
        keep = torch.ones((b, pool.emb.shape[0]), dtype=torch.bool, device=pool.emb.device)
        has = exclude >= 0
        keep[torch.arange(b, device=keep.device)[has], exclude[has]] = False
        return self.in_batch_loss(query_emb, pool.emb, positive, keep)


class LossParts(NamedTuple):
    """The training loss and its two parts (scalar tensors; ``total`` is the one to backpropagate).
    ``rank`` holds the loss's rank term (L_rank, L_KL or L_anchor; the training log keeps the key ``rank``
    for all)."""

    total: Tensor
    rank: Tensor
    in_batch: Tensor


class UDRLoss(nn.Module):
    """UDR's training loss as the paper writes it: the list-wise rank loss plus the in-batch negative loss.
    The base of the other training losses, which change its rank term (:meth:`rank_term`) or its weighting
    (:meth:`combine`).

    Args (the settings' values are the caller's, `train.loss_lambda`, whose one default is
    :class:`udr.config.TrainSettings`'s):
        lambda_: weight of the rank term, in [0, 1].
        scale: every similarity enters both losses multiplied by it, sim = scale * (q . z) (1 / temperature;
            1 for the paper's dot products, e.g. 20 for cosine similarities of L2-normalised embeddings).

    Inputs:
        query_emb: FloatTensor (B, d), query embeddings.
        cand_emb: FloatTensor (B, l, d), embeddings of each query's l sampled candidates.
        ranks: LongTensor (B, l), the LM rank of each candidate in its query's list (1 = best).
        mask: optional BoolTensor (B, l), True where a candidate is real.
        pool: optional :class:`PoolNegatives`: L_ib's softmax runs over the task's whole pool instead of
            the batch's candidates.

    Output: :class:`LossParts` (total, rank, in_batch),

        L = lambda * L_rank + (1 - lambda) * L_ib,

    with ``sim[b, j] = scale * query_emb[b] . cand_emb[b, j]``, rank = L_rank = :class:`RankLoss` (sim,
    ranks, mask), and in_batch = L_ib = :class:`InBatchLoss` over all B * l candidates of the batch (padded
    ones left out of the softmax), the positive of query b being its best-ranked real candidate (smallest
    rank, the first on ties); with ``pool``, :class:`PoolInBatchLoss` over the N pool rows instead (all but
    the query's own row), the positive being the pool row of that same candidate. Every query needs at least
    one real candidate. With lambda 0 and one positive and one hard negative per query, this is the EPR
    baseline's in-batch (DPR) loss alone.

    Reference: Li et al., "Unified Demonstration Retriever for In-Context Learning" (ACL 2023),
    section "Loss Function".
    """

    def __init__(self, lambda_: float, scale: float = 1.0) -> None:
        super().__init__()
        try:
            lam = float(lambda_)
        except (TypeError, ValueError):
            raise UdrError(f"bad parameter lambda_: must be a number in [0, 1], got {lambda_!r}") from None
        if not 0.0 <= lam <= 1.0:  # also rejects nan
            raise UdrError(f"bad parameter lambda_: must be in [0, 1], got {lambda_!r}")
        if not (isinstance(scale, int | float) and math.isfinite(scale) and scale > 0):
            raise UdrError(f"bad parameter scale: must be a finite number > 0, got {scale!r}")
        self.lambda_ = lam
        self.scale = float(scale)
        self.rank_loss = RankLoss()
        self.in_batch_loss = InBatchLoss()
        self.pool_in_batch_loss = PoolInBatchLoss()

    def forward(
        self,
        query_emb: Tensor,
        cand_emb: Tensor,
        ranks: Tensor,
        mask: Tensor | None = None,
        pool: PoolNegatives | None = None,
    ) -> LossParts:
        return self.parts(query_emb, cand_emb, ranks, mask, pool)

    def rank_term(self, sim: Tensor, ranks: Tensor, mask: Tensor, **targets) -> Tensor:
        """The rank term of the (B, l) scaled similarities (padded places zeroed): L_rank here."""
        return self.rank_loss(sim, ranks, mask)

    def check_targets(self, b: int, l: int, **targets) -> None:
        """Raise where the rank term's own inputs (`targets`) do not fit a batch of `b` queries of `l`
        candidates (none here)."""

    def combine(self, rank: Tensor, in_batch: Tensor) -> Tensor:
        """The total: lambda * rank + (1 - lambda) * in_batch."""
        return self.lambda_ * rank + (1.0 - self.lambda_) * in_batch

    def parts(
        self,
        query_emb: Tensor,
        cand_emb: Tensor,
        ranks: Tensor,
        mask: Tensor | None = None,
        pool: PoolNegatives | None = None,
        **targets,
    ) -> LossParts:
        """The loss's parts, `targets` going to the rank term (:meth:`rank_term`)."""
        if (
            query_emb.dim() != 2
            or cand_emb.dim() != 3
            or cand_emb.shape[0] != query_emb.shape[0]
            or cand_emb.shape[2] != query_emb.shape[1]
        ):
            raise ValueError(
                f"{type(self).__name__}: need query_emb (B, d) and cand_emb (B, l, d), "
                f"got {tuple(query_emb.shape)} and {tuple(cand_emb.shape)}"
            )
        b, l, d = cand_emb.shape
        if ranks.shape != (b, l):
            raise ValueError(f"{type(self).__name__}: ranks must be (B, l) = {(b, l)}, got {tuple(ranks.shape)}")
        if mask is None:
            mask = torch.ones((b, l), dtype=torch.bool, device=cand_emb.device)
        elif mask.shape != (b, l):
            raise ValueError(f"{type(self).__name__}: mask must be (B, l) = {(b, l)}, got {tuple(mask.shape)}")
        mask = mask.to(torch.bool)
        if not bool(mask.any(dim=1).all()):
            raise UdrError("bad batch: every query needs at least one real candidate")
        self.check_targets(b, l, **targets)
        if self.scale != 1.0:
            query_emb = query_emb * self.scale  # scales every similarity q . z below

        # Zero padded embeddings so that whatever they hold (even nan) reaches no loss and no gradient.
        zero = torch.zeros((), dtype=cand_emb.dtype, device=cand_emb.device)
        cand_emb = torch.where(mask[:, :, None], cand_emb, zero)
        sim = (query_emb[:, None, :] * cand_emb).sum(-1)
        rank = self.rank_term(sim, ranks, mask, **targets)

        # Positive: the best-ranked real candidate of each query (argmin returns the first on ties).
        sentinel = torch.full_like(ranks, torch.iinfo(torch.long).max, dtype=torch.long)
        best = torch.where(mask, ranks.to(torch.long), sentinel).argmin(dim=1)
        if pool is None:
            positive = torch.arange(b, device=cand_emb.device) * l + best
            in_batch = self.in_batch_loss(query_emb, cand_emb.reshape(b * l, d), positive, mask.reshape(b * l))
        else:
            in_batch = self.pool_in_batch_loss(query_emb, pool, best)
        return LossParts(total=self.combine(rank, in_batch), rank=rank, in_batch=in_batch)


class PublishedUDRLoss(UDRLoss):
    """UDR's training loss as the published KaiLv69/UDR code computes it: :class:`UDRLoss`'s two terms with
    fixed weights.

    Args:
        scale: as :class:`UDRLoss`'s (no lambda: the weights are fixed).

    Inputs: as :class:`UDRLoss`'s.

    Output: :class:`LossParts` (total, rank, in_batch),

        L = 4 * L_rank + L_ib,

    L_rank and L_ib as in :class:`UDRLoss`.

    Reference: https://github.com/KaiLv69/UDR (the published code of Li et al., ACL 2023).
    """

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__(0.0, scale)

    def combine(self, rank: Tensor, in_batch: Tensor) -> Tensor:
        """The total: 4 * rank + in_batch."""
        return 4.0 * rank + in_batch


class DistillUDRLoss(UDRLoss):
    """The LM's scores distilled into the retriever instead of its ranks, plus the in-batch negative loss.

    Args:
        lambda_, scale: as :class:`UDRLoss`'s.
        temperature: tau of :class:`DistillLoss` (`train.distill_temperature`).

    Inputs: as :class:`UDRLoss`'s, and
        scores: FloatTensor (B, l), the candidates' LM scores (training passes them standardised over each
            query's whole list; see :class:`DistillLoss`).

    Output: :class:`LossParts` (total, rank, in_batch),

        L = lambda * L_KL + (1 - lambda) * L_ib,  L_KL = :class:`DistillLoss` (sim, scores, mask),

    L_ib and sim as in :class:`UDRLoss` (so lambda = 1 is the KL alone).

    Reference: Wang, Yang and Wei, "Learning to Retrieve In-Context Examples for Large Language Models"
    (LLM-R, 2023, arXiv:2307.07164).
    """

    def __init__(self, lambda_: float, temperature: float, scale: float = 1.0) -> None:
        super().__init__(lambda_, scale)
        self.distill_loss = DistillLoss(temperature)

    def forward(
        self,
        query_emb: Tensor,
        cand_emb: Tensor,
        ranks: Tensor,
        mask: Tensor | None = None,
        pool: PoolNegatives | None = None,
        *,
        scores: Tensor | None = None,
    ) -> LossParts:
        return self.parts(query_emb, cand_emb, ranks, mask, pool, scores=scores)

    def check_targets(self, b: int, l: int, scores: Tensor | None = None) -> None:
        if scores is None or scores.shape != (b, l):
            got = None if scores is None else tuple(scores.shape)
            raise UdrError(f"bad batch: loss distill needs the candidates' LM scores, (B, l) = {(b, l)}, got {got}")

    def rank_term(self, sim: Tensor, ranks: Tensor, mask: Tensor, scores: Tensor) -> Tensor:
        """L_KL of the similarities against the LM's scores."""
        return self.distill_loss(sim, scores, mask)


class AnchoredUDRLoss(UDRLoss):
    """The LM's preferred (winner, loser) pairs learnt relative to the initial encoder, plus the in-batch
    negative loss.

    Args:
        lambda_, scale: as :class:`UDRLoss`'s.
        beta: beta of :class:`AnchoredLoss` (`train.anchor_beta`).

    Inputs: as :class:`UDRLoss`'s, and
        ref_sim: FloatTensor (B, l), the reference encoder's dot products of each query and candidate (times
            ``scale`` here, like the retriever's).
        pairs: BoolTensor (B, l, l), the (winner, loser) pairs of :class:`AnchoredLoss` (pairs with a padded
            candidate are dropped).

    Output: :class:`LossParts` (total, rank, in_batch),

        L = lambda * L_anchor + (1 - lambda) * L_ib,  L_anchor = :class:`AnchoredLoss` (sim, scale * ref_sim, pairs),

    L_ib and sim as in :class:`UDRLoss`, L_ib's positive the best-ranked candidate.

    Reference: the anchored pairwise (DPO-style) preference loss of SeDPO (NeurIPS 2025).
    """

    def __init__(self, lambda_: float, beta: float, scale: float = 1.0) -> None:
        super().__init__(lambda_, scale)
        self.anchored_loss = AnchoredLoss(beta)

    def forward(
        self,
        query_emb: Tensor,
        cand_emb: Tensor,
        ranks: Tensor,
        mask: Tensor | None = None,
        pool: PoolNegatives | None = None,
        *,
        ref_sim: Tensor | None = None,
        pairs: Tensor | None = None,
    ) -> LossParts:
        return self.parts(query_emb, cand_emb, ranks, mask, pool, ref_sim=ref_sim, pairs=pairs)

    def check_targets(self, b: int, l: int, ref_sim: Tensor | None = None, pairs: Tensor | None = None) -> None:
        if ref_sim is None or ref_sim.shape != (b, l) or pairs is None or pairs.shape != (b, l, l):
            got = [None if x is None else tuple(x.shape) for x in (ref_sim, pairs)]
            raise UdrError(
                f"bad batch: loss anchored needs reference similarities (B, l) and pairs (B, l, l), B, l = {b, l}, "
                f"got {got[0]} and {got[1]}"
            )

    def rank_term(self, sim: Tensor, ranks: Tensor, mask: Tensor, ref_sim: Tensor, pairs: Tensor) -> Tensor:
        """L_anchor of the similarities against the reference's, over the pairs of real candidates."""
        return self.anchored_loss(sim, ref_sim * self.scale, pairs & mask[:, :, None] & mask[:, None, :])
