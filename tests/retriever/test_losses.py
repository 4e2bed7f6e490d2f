"""udr.retriever.losses: the rank loss, the in-batch loss and their combination against hand computations."""

from __future__ import annotations

import math

import pytest
import torch

from udr.errors import UdrError
from udr.retriever.losses import InBatchLoss, LossParts, RankLoss, UDRLoss

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


def test_udr_loss_modes_and_lambda():
    q, c, ranks = _example()
    rank, ib = _parts(q, c, ranks)

    out = UDRLoss(lambda_=1.0)(q, c, ranks)
    assert isinstance(out, LossParts)
    assert out.total.item() == pytest.approx(rank.item(), abs=1e-12)
    assert out.rank.item() == pytest.approx(rank.item(), abs=1e-12)
    assert out.in_batch.item() == pytest.approx(ib.item(), abs=1e-12)

    assert UDRLoss(lambda_=0.0)(q, c, ranks).total.item() == pytest.approx(ib.item(), abs=1e-12)
    assert UDRLoss(lambda_=0.8)(q, c, ranks).total.item() == pytest.approx(
        0.8 * rank.item() + 0.2 * ib.item(), abs=1e-12
    )
    assert UDRLoss(mode="published")(q, c, ranks).total.item() == pytest.approx(4 * rank.item() + ib.item(), abs=1e-12)


def test_udr_loss_positive_is_best_real_candidate_first_on_ties():
    q, c, _ = _example(seed=1, b=2, l=3)
    # Query 0: tie for best at places 1 and 2 -> place 1. Query 1: place 0 has rank 1 but is padding -> place 2.
    ranks = torch.tensor([[3, 1, 1], [1, 3, 2]])
    mask = torch.tensor([[True, True, True], [False, True, True]])
    out = UDRLoss(lambda_=0.0)(q, c, ranks, mask)
    ref = InBatchLoss()(q, c.reshape(6, -1), torch.tensor([1, 5]), mask.reshape(6))
    assert out.in_batch.item() == pytest.approx(ref.item(), abs=1e-12)


def test_udr_loss_mask_equals_removal():
    q, c, ranks = _example(seed=2, b=2, l=3)
    ref = UDRLoss(lambda_=0.5)(q, c, ranks)
    # Pad every query to l = 5 with garbage candidates (nan embeddings, rank 0) at scattered places.
    pad_c = torch.full((2, 5, c.shape[2]), float("nan"), dtype=D)
    pad_r = torch.zeros((2, 5), dtype=torch.long)
    mask = torch.tensor([[True, False, True, True, False], [False, True, True, False, True]])
    for b in range(2):
        pad_c[b, mask[b]] = c[b]
        pad_r[b, mask[b]] = ranks[b]
    pad_c.requires_grad_(True)
    out = UDRLoss(lambda_=0.5)(q, pad_c, pad_r, mask)
    for a, r in zip(out, ref):
        assert a.item() == pytest.approx(r.item(), abs=1e-12)
    out.total.backward()
    assert torch.isfinite(pad_c.grad).all()
    assert (pad_c.grad[~mask] == 0).all()


def test_udr_loss_uneven_mask_by_parts():
    q, c, ranks = _example(seed=3, b=2, l=4)
    mask = torch.tensor([[True, True, True, True], [True, False, True, False]])
    out = UDRLoss(lambda_=0.5)(q, c, ranks, mask)
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
    UDRLoss()(q, c, ranks).total.backward()
    assert q.grad is not None and q.grad.abs().sum() > 0
    assert c.grad is not None and c.grad.abs().sum() > 0
    # float32 embeddings give a float32 loss.
    out = UDRLoss()(q.detach().float(), c.detach().float(), ranks)
    assert out.total.dtype == torch.float32


@pytest.mark.parametrize("lam", [1.5, -0.1, float("nan"), "x"])
def test_udr_loss_bad_lambda(lam):
    with pytest.raises(UdrError, match="bad parameter lambda_"):
        UDRLoss(lambda_=lam)


def test_udr_loss_bad_mode_and_empty_query():
    with pytest.raises(UdrError, match="bad parameter mode"):
        UDRLoss(mode="epr")
    q, c, ranks = _example(b=2, l=3)
    with pytest.raises(UdrError, match="at least one real candidate"):
        UDRLoss()(q, c, ranks, torch.tensor([[True, True, False], [False, False, False]]))


def test_udr_loss_scale_multiplies_every_similarity():
    torch.manual_seed(0)
    q, c = torch.randn(3, 4), torch.randn(3, 5, 4)
    ranks = torch.tensor([[1, 2, 3, 4, 5], [2, 1, 3, 3, 5], [5, 4, 3, 2, 1]])
    scaled = UDRLoss(0.5, "paper", scale=20.0)(q, c, ranks)
    by_hand = UDRLoss(0.5, "paper")(q * 20.0, c, ranks)
    for a, b in zip(scaled, by_hand):
        assert math.isclose(a.item(), b.item(), rel_tol=1e-6)
    assert not math.isclose(scaled.total.item(), UDRLoss(0.5, "paper")(q, c, ranks).total.item(), rel_tol=1e-3)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("inf"), float("nan"), "20"])
def test_udr_loss_bad_scale(scale):
    with pytest.raises(UdrError, match="bad parameter scale"):
        UDRLoss(0.8, "paper", scale=scale)
