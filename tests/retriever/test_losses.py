"""udr.retriever.losses: the rank loss, the in-batch loss, the distillation loss, the whole-pool in-batch
loss and their combination against hand computations."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from udr.errors import UdrError
from udr.retriever.losses import (
    DistillLoss,
    DistillUDRLoss,
    InBatchLoss,
    LossParts,
    PoolNegatives,
    PublishedUDRLoss,
    RankLoss,
    UDRLoss,
    standardize,
)

D = torch.float64


def sp(x: float) -> float:
    return math.log(1.0 + math.exp(x))


# --- RankLoss -------------------------------------------------------------------------------------


def test_rank_loss_by_hand():
    s1, s2, s3 = 0.5, 1.0, -0.2
    # ranks [1, 2, 3]: w(1,2) = 1/1 - 1/2 = 0.5, w(1,3) = 1 - 1/3 = 2/3, w(2,3) = 1/2 - 1/3 = 1/6;
    # the reversed pairs (2,1), (3,1), (3,2) and the diagonal have w = 0.
    pairs = [(0.5, s1, s2), (2 / 3, s1, s3), (1 / 6, s2, s3)]
    expected = sum(w * math.log(1 + math.exp(sj - si)) for w, si, sj in pairs)
    got = RankLoss()(torch.tensor([[s1, s2, s3]], dtype=D), torch.tensor([[1, 2, 3]]))
    assert got.item() == pytest.approx(expected, abs=1e-6)

    # Ranks given in another order: the candidate order must not matter.
    got = RankLoss()(torch.tensor([[s3, s1, s2]], dtype=D), torch.tensor([[3, 1, 2]]))
    assert got.item() == pytest.approx(expected, abs=1e-6)


def test_rank_loss_ties_and_batch_mean():
    s = [0.5, 1.0, -0.2]
    # ranks [1, 2, 2]: w(1,2) = w(1,3) = 0.5; the tied pair (2,3) and (3,2) have w = 1/2 - 1/2 = 0.
    tied = 0.5 * sp(s[1] - s[0]) + 0.5 * sp(s[2] - s[0])
    got = RankLoss()(torch.tensor([s], dtype=D), torch.tensor([[1, 2, 2]]))
    assert got.item() == pytest.approx(tied, abs=1e-6)

    # All tied: no pair counts.
    assert RankLoss()(torch.tensor([s], dtype=D), torch.tensor([[2, 2, 2]])).item() == 0.0

    # Batch: sum over pairs per query, then mean over queries.
    full = 0.5 * sp(s[1] - s[0]) + (2 / 3) * sp(s[2] - s[0]) + (1 / 6) * sp(s[2] - s[1])
    got = RankLoss()(torch.tensor([s, s], dtype=D), torch.tensor([[1, 2, 3], [1, 2, 2]]))
    assert got.item() == pytest.approx((full + tied) / 2, abs=1e-6)


def test_rank_loss_gradient_sign():
    sim = torch.tensor([[0.5, 1.0, -0.2]], dtype=D, requires_grad=True)
    RankLoss()(sim, torch.tensor([[1, 2, 3]])).backward()
    g = sim.grad[0]
    assert g[0] < 0  # descent raises the rank-1 candidate's similarity
    assert g[2] > 0  # and lowers the rank-3 one's


def test_rank_loss_mask_and_bad_ranks():
    s = [0.5, 1.0, -0.2]
    ref = RankLoss()(torch.tensor([s], dtype=D), torch.tensor([[1, 2, 3]]))
    # Padded places hold garbage (nan sim, rank 0): ignored, and no nan gradient.
    sim = torch.tensor([[0.5, float("nan"), 1.0, -0.2]], dtype=D, requires_grad=True)
    got = RankLoss()(sim, torch.tensor([[1, 0, 2, 3]]), torch.tensor([[True, False, True, True]]))
    assert got.item() == pytest.approx(ref.item(), abs=1e-12)
    got.backward()
    assert torch.isfinite(sim.grad).all() and sim.grad[0, 1] == 0

    with pytest.raises(UdrError, match="rank >= 1"):
        RankLoss()(torch.tensor([s], dtype=D), torch.tensor([[0, 1, 2]]))


# --- InBatchLoss ----------------------------------------------------------------------------------


def test_in_batch_loss_by_hand():
    q = [[1.0, 0.0], [0.5, -1.0]]
    c = [[1.0, 2.0], [0.0, 1.0], [-1.0, 0.5], [2.0, 0.0]]
    positive = [0, 3]

    def dot(a, b):
        return sum(x * y for x, y in zip(a, b))

    expected = 0.0
    for qi, p in zip(q, positive):
        logits = [dot(qi, cj) for cj in c]
        expected += -(logits[p] - math.log(sum(math.exp(v) for v in logits)))
    expected /= len(q)

    got = InBatchLoss()(torch.tensor(q, dtype=D), torch.tensor(c, dtype=D), torch.tensor(positive))
    assert got.item() == pytest.approx(expected, abs=1e-6)

    # A masked candidate leaves the softmax: same as removing it (and re-indexing the positives).
    got = InBatchLoss()(
        torch.tensor(q, dtype=D),
        torch.tensor(c, dtype=D),
        torch.tensor([0, 3]),
        torch.tensor([True, False, True, True]),
    )
    kept = [c[0], c[2], c[3]]
    ref = InBatchLoss()(torch.tensor(q, dtype=D), torch.tensor(kept, dtype=D), torch.tensor([0, 2]))
    assert got.item() == pytest.approx(ref.item(), abs=1e-12)


# --- UDRLoss --------------------------------------------------------------------------------------


def _example(seed: int = 0, b: int = 3, l: int = 4, d: int = 5):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, d, generator=g, dtype=D)
    c = torch.randn(b, l, d, generator=g, dtype=D)
    ranks = torch.stack([torch.randperm(l, generator=g) + 1 for _ in range(b)])
    return q, c, ranks


def _parts(q, c, ranks):
    sim = (q[:, None, :] * c).sum(-1)
    rank = RankLoss()(sim, ranks)
    b, l, d = c.shape
    positive = torch.arange(b) * l + ranks.argmin(dim=1)
    ib = InBatchLoss()(q, c.reshape(b * l, d), positive)
    return rank, ib


def test_udr_loss_lambda_and_the_published_weights():
    q, c, ranks = _example()
    rank, ib = _parts(q, c, ranks)

    out = UDRLoss(1.0)(q, c, ranks)
    assert isinstance(out, LossParts)
    assert out.total.item() == pytest.approx(rank.item(), abs=1e-12)
    assert out.rank.item() == pytest.approx(rank.item(), abs=1e-12)
    assert out.in_batch.item() == pytest.approx(ib.item(), abs=1e-12)

    assert UDRLoss(0.0)(q, c, ranks).total.item() == pytest.approx(ib.item(), abs=1e-12)
    assert UDRLoss(0.8)(q, c, ranks).total.item() == pytest.approx(0.8 * rank.item() + 0.2 * ib.item(), abs=1e-12)
    assert PublishedUDRLoss()(q, c, ranks).total.item() == pytest.approx(4 * rank.item() + ib.item(), abs=1e-12)


def test_udr_loss_positive_is_best_real_candidate_first_on_ties():
    q, c, _ = _example(seed=1, b=2, l=3)
    # Query 0: tie for best at places 1 and 2 -> place 1. Query 1: place 0 has rank 1 but is padding -> place 2.
    ranks = torch.tensor([[3, 1, 1], [1, 3, 2]])
    mask = torch.tensor([[True, True, True], [False, True, True]])
    out = UDRLoss(0.0)(q, c, ranks, mask)
    ref = InBatchLoss()(q, c.reshape(6, -1), torch.tensor([1, 5]), mask.reshape(6))
    assert out.in_batch.item() == pytest.approx(ref.item(), abs=1e-12)


def test_udr_loss_mask_equals_removal():
    q, c, ranks = _example(seed=2, b=2, l=3)
    ref = UDRLoss(0.5)(q, c, ranks)
    # Pad every query to l = 5 with garbage candidates (nan embeddings, rank 0) at scattered places.
    pad_c = torch.full((2, 5, c.shape[2]), float("nan"), dtype=D)
    pad_r = torch.zeros((2, 5), dtype=torch.long)
    mask = torch.tensor([[True, False, True, True, False], [False, True, True, False, True]])
    for b in range(2):
        pad_c[b, mask[b]] = c[b]
        pad_r[b, mask[b]] = ranks[b]
    pad_c.requires_grad_(True)
    out = UDRLoss(0.5)(q, pad_c, pad_r, mask)
    for a, r in zip(out, ref):
        assert a.item() == pytest.approx(r.item(), abs=1e-12)
    out.total.backward()
    assert torch.isfinite(pad_c.grad).all()
    assert (pad_c.grad[~mask] == 0).all()


def test_udr_loss_uneven_mask_by_parts():
    q, c, ranks = _example(seed=3, b=2, l=4)
    mask = torch.tensor([[True, True, True, True], [True, False, True, False]])
    out = UDRLoss(0.5)(q, c, ranks, mask)
    # Rank part: each query on its real candidates alone, then the mean.
    per_query = []
    for b in range(2):
        sim = (q[b] * c[b, mask[b]]).sum(-1)
        per_query.append(RankLoss()(sim[None], ranks[b, mask[b]][None]))
    assert out.rank.item() == pytest.approx(((per_query[0] + per_query[1]) / 2).item(), abs=1e-12)
    # In-batch part: the 6 real candidates concatenated.
    real = c[mask]
    offsets = [0, 4]
    positive = torch.tensor([offsets[b] + int(ranks[b, mask[b]].argmin()) for b in range(2)])
    ref = InBatchLoss()(q, real, positive)
    assert out.in_batch.item() == pytest.approx(ref.item(), abs=1e-12)


def test_udr_loss_gradients_reach_both_encoders():
    q, c, ranks = _example(seed=4)
    q.requires_grad_(True)
    c.requires_grad_(True)
    UDRLoss(0.2)(q, c, ranks).total.backward()
    assert q.grad is not None and q.grad.abs().sum() > 0
    assert c.grad is not None and c.grad.abs().sum() > 0
    # float32 embeddings give a float32 loss.
    out = UDRLoss(0.2)(q.detach().float(), c.detach().float(), ranks)
    assert out.total.dtype == torch.float32


@pytest.mark.parametrize("lam", [1.5, -0.1, float("nan"), "x"])
def test_udr_loss_bad_lambda(lam):
    with pytest.raises(UdrError, match="bad parameter lambda_"):
        UDRLoss(lam)


def test_udr_loss_empty_query():
    q, c, ranks = _example(b=2, l=3)
    with pytest.raises(UdrError, match="at least one real candidate"):
        UDRLoss(0.2)(q, c, ranks, torch.tensor([[True, True, False], [False, False, False]]))


def test_udr_loss_scale_multiplies_every_similarity():
    torch.manual_seed(0)
    q, c = torch.randn(3, 4), torch.randn(3, 5, 4)
    ranks = torch.tensor([[1, 2, 3, 4, 5], [2, 1, 3, 3, 5], [5, 4, 3, 2, 1]])
    scaled = UDRLoss(0.5, scale=20.0)(q, c, ranks)
    by_hand = UDRLoss(0.5)(q * 20.0, c, ranks)
    for a, b in zip(scaled, by_hand):
        assert math.isclose(a.item(), b.item(), rel_tol=1e-6)
    assert not math.isclose(scaled.total.item(), UDRLoss(0.5)(q, c, ranks).total.item(), rel_tol=1e-3)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("inf"), float("nan"), "20"])
def test_udr_loss_bad_scale(scale):
    with pytest.raises(UdrError, match="bad parameter scale"):
        UDRLoss(0.8, scale=scale)


def test_in_batch_loss_mask_per_query_equals_removal_per_query():
    q = torch.tensor([[1.0, 0.0], [0.5, -1.0]], dtype=D)
    c = torch.tensor([[1.0, 2.0], [0.0, 1.0], [-1.0, 0.5], [2.0, 0.0]], dtype=D)
    keep = torch.tensor([[True, False, True, True], [True, True, True, False]])
    got = InBatchLoss()(q, c, torch.tensor([0, 1]), keep)
    ref0 = InBatchLoss()(q[:1], c[[0, 2, 3]], torch.tensor([0]))
    ref1 = InBatchLoss()(q[1:], c[[0, 1, 2]], torch.tensor([1]))
    assert got.item() == pytest.approx((ref0.item() + ref1.item()) / 2, abs=1e-12)
    with pytest.raises(ValueError, match=r"cand_mask must be \(N,\) or \(B, N\)"):
        InBatchLoss()(q, c, torch.tensor([0, 1]), torch.ones(3, 4, dtype=torch.bool))


# --- DistillLoss ----------------------------------------------------------------------------------


def _softmax(xs):
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    return [v / sum(e) for v in e]


def _kl(p, q):
    return sum(pi * (math.log(pi) - math.log(qi)) for pi, qi in zip(p, q))


def test_distill_loss_by_hand():
    sim = [[0.5, 1.0, -0.2], [0.3, -0.4, 0.9]]
    scores = [[2.0, 0.0, -1.0], [-0.5, 1.5, 0.25]]
    tau = 0.5
    expected = [_kl(_softmax([s / tau for s in t]), _softmax(x)) for x, t in zip(sim, scores)]
    got = DistillLoss(tau)(torch.tensor(sim, dtype=D), torch.tensor(scores, dtype=D))
    assert got.item() == pytest.approx(sum(expected) / 2, abs=1e-12)
    # The temperature matters: tau = 1 is another target.
    assert DistillLoss(1.0)(torch.tensor(sim, dtype=D), torch.tensor(scores, dtype=D)).item() != pytest.approx(
        got.item(), abs=1e-3
    )


def test_distill_loss_is_zero_at_the_target_and_pulls_towards_it():
    scores = torch.tensor([[2.0, 0.0, -1.0]], dtype=D)
    # softmax is shift-invariant: sim = scores / tau + c matches p_LM exactly.
    assert DistillLoss(0.5)(scores / 0.5 + 3.0, scores).item() == pytest.approx(0.0, abs=1e-12)
    sim = torch.tensor([[-1.0, 0.0, 2.0]], dtype=D, requires_grad=True)  # the LM's order reversed
    DistillLoss(1.0)(sim, scores).backward()
    assert sim.grad[0, 0] < 0 and sim.grad[0, 2] > 0  # descent raises the LM's best, lowers its worst
    assert sim.grad.sum().item() == pytest.approx(0.0, abs=1e-12)  # d KL / d sim = p_ret - p_LM


def test_distill_loss_mask_equals_removal():
    sim = torch.tensor([[0.5, float("nan"), 1.0, -0.2]], dtype=D, requires_grad=True)
    scores = torch.tensor([[1.0, float("nan"), 0.0, -2.0]], dtype=D)
    mask = torch.tensor([[True, False, True, True]])
    got = DistillLoss(1.0)(sim, scores, mask)
    ref = DistillLoss(1.0)(torch.tensor([[0.5, 1.0, -0.2]], dtype=D), torch.tensor([[1.0, 0.0, -2.0]], dtype=D))
    assert got.item() == pytest.approx(ref.item(), abs=1e-12)
    got.backward()
    assert torch.isfinite(sim.grad).all() and sim.grad[0, 1] == 0


@pytest.mark.parametrize("tau", [0.0, -1.0, float("inf"), float("nan"), "1"])
def test_distill_loss_bad_temperature(tau):
    with pytest.raises(UdrError, match="bad parameter temperature"):
        DistillLoss(tau)


def test_distill_loss_bad_scores():
    with pytest.raises(UdrError, match="finite LM score"):
        DistillLoss(1.0)(torch.zeros(1, 2, dtype=D), torch.tensor([[0.0, float("-inf")]], dtype=D))


def test_standardize_makes_tau_the_same_for_probabilities_and_log_likelihoods():
    probs = [0.9, 0.2, 0.5, 0.4]
    mean = sum(probs) / 4
    std = math.sqrt(sum((p - mean) ** 2 for p in probs) / 4)
    np.testing.assert_allclose(standardize(probs), [(p - mean) / std for p in probs], rtol=1e-12)
    # Any positive affine map of the scores (another task's scale) gives the same targets.
    np.testing.assert_allclose(standardize([3.0 * p - 7.0 for p in probs]), standardize(probs), rtol=1e-12)
    assert standardize([-1.5, -1.5, -1.5]).tolist() == [0.0, 0.0, 0.0]  # no preference: a uniform target
    with pytest.raises(UdrError, match="finite"):
        standardize([0.1, float("nan")])


# --- DistillUDRLoss, whole-pool in-batch negatives, the defaults --------------------------------


def test_distill_udr_loss_is_lambda_kl_plus_in_batch():
    q, c, ranks = _example(seed=5)
    g = torch.Generator().manual_seed(5)
    scores = torch.randn(ranks.shape, generator=g, dtype=D)
    sim = (q[:, None, :] * c).sum(-1)
    kl = DistillLoss(0.7)(sim, scores)
    _, ib = _parts(q, c, ranks)
    out = DistillUDRLoss(0.3, 0.7)(q, c, ranks, scores=scores)
    assert out.rank.item() == pytest.approx(kl.item(), abs=1e-12)
    assert out.in_batch.item() == pytest.approx(ib.item(), abs=1e-12)
    assert out.total.item() == pytest.approx(0.3 * kl.item() + 0.7 * ib.item(), abs=1e-12)
    alone = DistillUDRLoss(1.0, 0.7)(q, c, ranks, scores=scores)
    assert alone.total.item() == pytest.approx(kl.item(), abs=1e-12)
    with pytest.raises(UdrError, match="loss distill needs the candidates' LM scores"):
        DistillUDRLoss(0.3, 0.7)(q, c, ranks)
    with pytest.raises(UdrError, match="bad parameter temperature"):
        DistillUDRLoss(0.3, None)


def test_udr_loss_takes_its_settings_from_the_caller():
    """One default per setting: train.loss_lambda's and train.distill_temperature's are udr.config's; the
    losses have none of their own, and the recipe passes the settings' values."""
    from udr.config import TrainSettings
    from udr.retriever.recipes import recipe_for

    assert inspect.signature(UDRLoss).parameters["lambda_"].default is inspect.Parameter.empty
    params = inspect.signature(DistillUDRLoss).parameters
    assert params["lambda_"].default is params["temperature"].default is inspect.Parameter.empty
    assert inspect.signature(DistillLoss).parameters["temperature"].default is inspect.Parameter.empty
    assert type(recipe_for(TrainSettings(), 1.0).loss) is UDRLoss
    assert recipe_for(TrainSettings(), 1.0).loss.lambda_ == TrainSettings().loss_lambda
    cfg = TrainSettings(loss="distill", loss_lambda=0.7, distill_temperature=0.5)
    loss = recipe_for(cfg, 1.0).loss
    assert type(loss) is DistillUDRLoss
    assert (loss.lambda_, loss.distill_loss.temperature) == (cfg.loss_lambda, cfg.distill_temperature)


def _pool_example():
    """A pool of 5 rows in 2-d; query 0 is pool row 4 and its sampled candidates rows 0 and 2 (rank 1:
    row 2); query 1 is no pool row, its candidates rows 3 and 1 (rank 1: row 3)."""
    pool = torch.tensor([[1.0, 0.5], [0.0, 1.0], [-1.0, 0.5], [2.0, -0.5], [0.5, 0.5]], dtype=D)
    q = torch.tensor([[0.8, -0.3], [0.2, 1.1]], dtype=D)
    rows = torch.tensor([[0, 2], [3, 1]])
    ranks = torch.tensor([[2, 1], [1, 2]])
    exclude = torch.tensor([4, -1])
    return q, pool, rows, ranks, exclude


def test_whole_pool_in_batch_loss_by_hand():
    q, pool, rows, ranks, exclude = _pool_example()

    def dot(a, b):
        return float((a * b).sum())

    expected = 0.0
    for b, (positive, skip) in enumerate([(2, 4), (3, None)]):
        logits = [dot(q[b], pool[r]) for r in range(5) if r != skip]
        expected += -(dot(q[b], pool[positive]) - math.log(sum(math.exp(v) for v in logits)))
    expected /= 2
    out = UDRLoss(0.0)(q, pool[rows], ranks, pool=PoolNegatives(pool, rows, exclude))
    assert out.in_batch.item() == pytest.approx(expected, abs=1e-12)
    assert out.total.item() == pytest.approx(expected, abs=1e-12)
    # Not excluding the query's own row gives another value: the exclusion is real.
    kept = UDRLoss(0.0)(q, pool[rows], ranks, pool=PoolNegatives(pool, rows, torch.tensor([-1, -1])))
    assert kept.in_batch.item() != pytest.approx(expected, abs=1e-6)
    # The rank part reads the sampled candidates only, as without the pool.
    assert out.rank.item() == pytest.approx(UDRLoss(0.0)(q, pool[rows], ranks).rank.item(), abs=1e-12)


def test_whole_pool_in_batch_loss_equals_in_batch_loss():
    """A pool that is the batch's candidates (row b*l + j = query b's candidate j), no query in it: the
    whole-pool softmax is InBatchLoss over the batch, and UDRLoss gives the same parts either way."""
    q, c, ranks = _example(seed=6)
    b, l, d = c.shape
    pool = c.reshape(b * l, d)
    rows = torch.arange(b * l).reshape(b, l)
    out = UDRLoss(0.5)(q, c, ranks, pool=PoolNegatives(pool, rows, torch.full((b,), -1)))
    ref = InBatchLoss()(q, pool, torch.arange(b) * l + ranks.argmin(dim=1))
    assert out.in_batch.item() == pytest.approx(ref.item(), abs=1e-12)
    for a, r in zip(out, UDRLoss(0.5)(q, c, ranks)):
        assert a.item() == pytest.approx(r.item(), abs=1e-12)


def test_whole_pool_gradients_reach_the_queries_only_and_the_positive_cannot_be_the_query():
    q, pool, rows, ranks, exclude = _pool_example()
    q = q.clone().requires_grad_(True)
    UDRLoss(0.5)(q, pool[rows], ranks, pool=PoolNegatives(pool, rows, exclude)).total.backward()
    assert q.grad.abs().sum() > 0 and not pool.requires_grad
    with pytest.raises(UdrError, match="best candidate is the query itself"):
        UDRLoss(0.5)(q, pool[rows], ranks, pool=PoolNegatives(pool, rows, torch.tensor([2, -1])))


def _old_udr_loss(lam, mode, scale, q, c, ranks, mask):
    """UDRLoss.forward as it was before the distill mode and the pool (commit 7d104de), inlined."""
    b, l, d = c.shape
    if scale != 1.0:
        q = q * scale
    c = torch.where(mask[:, :, None], c, torch.zeros((), dtype=c.dtype))
    sim = (q[:, None, :] * c).sum(-1)
    rank = RankLoss()(sim, ranks, mask)
    sentinel = torch.full_like(ranks, torch.iinfo(torch.long).max, dtype=torch.long)
    best = torch.where(mask, ranks.to(torch.long), sentinel).argmin(dim=1)
    logits = q.float() @ c.reshape(b * l, d).float().T
    logits = logits.masked_fill(~mask.reshape(b * l)[None, :], float("-inf"))
    in_batch = F.cross_entropy(logits, torch.arange(b) * l + best)
    total = lam * rank + (1.0 - lam) * in_batch if mode == "paper" else 4.0 * rank + in_batch
    return total, rank, in_batch


@pytest.mark.parametrize("mode, scale", [("paper", 1.0), ("paper", 20.0), ("published", 1.0)])
def test_udr_loss_defaults_reproduce_the_old_loss_bit_for_bit(mode, scale):
    torch.manual_seed(7)
    q = torch.randn(3, 6, requires_grad=True)
    c = torch.randn(3, 4, 6, requires_grad=True)
    ranks = torch.tensor([[1, 2, 3, 4], [2, 1, 4, 3], [3, 3, 1, 0]])
    mask = torch.tensor([[True] * 4, [True] * 4, [True, True, True, False]])
    old = _old_udr_loss(0.2, mode, scale, q, c, ranks, mask)
    old_grads = torch.autograd.grad(old[0], (q, c))
    new = (UDRLoss(0.2, scale=scale) if mode == "paper" else PublishedUDRLoss(scale=scale))(q, c, ranks, mask)
    new_grads = torch.autograd.grad(new.total, (q, c))
    for a, b in zip(new, old):
        assert torch.equal(a, b)
    for a, b in zip(new_grads, old_grads):
        assert torch.equal(a, b)
