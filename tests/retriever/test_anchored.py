"""The anchored pairwise loss (train.loss anchored, SeDPO): its formula on hand-made tensors, the direction
of its gradient, its place in AnchoredUDRLoss, the recipe's candidates and pairs, and the reference similarities
of the initial encoder, computed once before training."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from udr.config import TrainSettings
from udr.errors import UdrError
from udr.retriever.losses import AnchoredLoss, AnchoredUDRLoss, InBatchLoss
from udr.retriever.recipes import AnchoredRecipe, CandidateLayout, epr_train_settings, recipe_for
from udr.retriever.sampling import anchor_positions
from udr.retriever.training import ScoredQuery


def _softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def _pairs(b: int, l: int, *pairs) -> torch.Tensor:
    out = torch.zeros(b, l, l, dtype=torch.bool)
    for q, i, j in pairs:
        out[q, i, j] = True
    return out


def test_the_loss_is_the_mean_over_pairs_of_minus_log_sigmoid_of_the_anchored_margin():
    sim = torch.tensor([[3.0, 1.0, 2.0, 9.0], [0.5, 4.0, -1.0, 0.0]], dtype=torch.float64)
    ref = torch.tensor([[1.0, 1.5, 1.0, 0.0], [1.0, 2.0, 0.0, 7.0]], dtype=torch.float64)
    # query 0: 0 over 1, 0 over 2; query 1: 1 over 2 (candidate 3 of each is in no pair: ignored)
    pairs = _pairs(2, 4, (0, 0, 1), (0, 0, 2), (1, 1, 2))
    beta = 0.7
    gain = (sim - ref).tolist()
    want = [
        _softplus(-beta * (gain[0][0] - gain[0][1])),
        _softplus(-beta * (gain[0][0] - gain[0][2])),
        _softplus(-beta * (gain[1][1] - gain[1][2])),
    ]
    got = AnchoredLoss(beta)(sim, ref, pairs)
    assert got.dtype == torch.float64
    assert got.item() == pytest.approx(sum(want) / 3, rel=1e-12)
    # values outside every pair (even nan) reach neither the loss nor the gradient
    sim2 = sim.clone().requires_grad_()
    with torch.no_grad():
        sim2[0, 3] = float("nan")
    loss = AnchoredLoss(beta)(sim2, ref, pairs)
    loss.backward()
    assert loss.item() == pytest.approx(sum(want) / 3, rel=1e-12) and torch.isfinite(sim2.grad).all()
    assert sim2.grad[0, 3] == 0 and sim2.grad[1, 3] == 0


def test_at_the_reference_every_pair_gives_log_2_and_no_pairs_give_zero():
    sim = torch.randn(3, 5)
    pairs = _pairs(3, 5, (0, 0, 4), (1, 1, 3), (2, 0, 1))
    assert AnchoredLoss(2.0)(sim, sim.clone(), pairs).item() == pytest.approx(math.log(2))
    s = sim.clone().requires_grad_()
    none = AnchoredLoss(2.0)(s, sim, torch.zeros(3, 5, 5, dtype=torch.bool))
    none.backward()
    assert none.item() == 0.0 and (s.grad == 0).all()


def test_raising_a_winner_or_lowering_a_loser_lowers_the_loss():
    ref = torch.tensor([[2.0, 5.0, 1.0]])
    pairs = _pairs(1, 3, (0, 0, 1), (0, 0, 2))
    sim = torch.tensor([[2.5, 4.0, 1.5]], requires_grad=True)
    loss = AnchoredLoss(1.0)
    value = loss(sim, ref, pairs)
    (grad,) = torch.autograd.grad(value, sim)
    assert grad[0, 0] < 0 and grad[0, 1] > 0 and grad[0, 2] > 0  # descent raises s_w, lowers s_l
    assert grad.sum().abs() < 1e-6  # a shift of every similarity changes no margin
    with torch.no_grad():
        for k, step in ((0, 0.5), (1, -0.5), (2, -0.5)):
            moved = sim.detach().clone()
            moved[0, k] += step
            assert loss(moved, ref, pairs) < value
    # the reference anchors: a margin the reference already has earns nothing
    assert loss(ref + 3.0, ref, pairs).item() == pytest.approx(math.log(2))
    # the gradient tends to 0 as the margin gained over the reference grows (saturation)
    far = torch.tensor([[20.0, 5.0, 1.0]], requires_grad=True)
    (g_far,) = torch.autograd.grad(loss(far, ref, pairs), far)
    assert g_far.abs().max() < 1e-6


def test_a_bad_beta_and_bad_shapes_are_errors():
    for beta in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(UdrError, match="bad parameter beta"):
            AnchoredLoss(beta)
    with pytest.raises(ValueError, match="pairs must be"):
        AnchoredLoss(1.0)(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bool))
    with pytest.raises(UdrError, match="bad parameter beta"):
        AnchoredUDRLoss(0.5, None)


def test_anchored_udr_loss_combines_with_the_in_batch_loss_and_scales_the_reference():
    torch.manual_seed(0)
    q, c = torch.randn(2, 4, dtype=torch.float64), torch.randn(2, 3, 4, dtype=torch.float64)
    ranks = torch.tensor([[1, 2, 3], [1, 2, 0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    ref = torch.randn(2, 3, dtype=torch.float64)
    pairs = _pairs(2, 3, (0, 0, 2), (1, 0, 1), (1, 0, 2))  # (1, 0, 2) has a padded loser: dropped
    lam, scale, beta = 0.3, 20.0, 0.5
    parts = AnchoredUDRLoss(lam, beta, scale=scale)(q, c, ranks, mask, ref_sim=ref, pairs=pairs)
    sim = scale * (q[:, None, :] * c).sum(-1)
    anchor = AnchoredLoss(beta)(sim, scale * ref, _pairs(2, 3, (0, 0, 2), (1, 0, 1)))
    in_batch = InBatchLoss()(scale * q, c.reshape(6, 4), torch.tensor([0, 3]), mask.reshape(6))
    assert parts.rank.item() == pytest.approx(anchor.item(), rel=1e-12)
    assert parts.in_batch.item() == pytest.approx(in_batch.item(), rel=1e-12)
    assert parts.total.item() == pytest.approx(lam * anchor.item() + (1 - lam) * in_batch.item(), rel=1e-12)
    with pytest.raises(UdrError, match="loss anchored needs reference similarities"):
        AnchoredUDRLoss(lam, beta)(q, c, ranks, mask)


def _query(scores, qid=1, task="sst2") -> ScoredQuery:
    n = len(scores)
    return ScoredQuery(task, qid, "q", tuple(range(10, 10 + n)), tuple(f"d{i}" for i in range(n)), tuple(scores))


def test_anchor_positions_are_the_best_and_worst_t():
    assert anchor_positions(10, 3) == [0, 1, 2, 7, 8, 9]
    assert anchor_positions(5, 3) == [0, 1, 3, 4]
    assert anchor_positions(2, 3) == [0, 1]
    with pytest.raises(UdrError, match="at least 2"):
        anchor_positions(1, 3)


def test_the_settings_choose_the_anchored_recipe_and_its_pairs():
    cfg = TrainSettings(loss="anchored", anchor_beta=0.25, anchor_top=2, loss_lambda=0.4)
    recipe = recipe_for(cfg, scale=1.0)
    assert isinstance(recipe, AnchoredRecipe) and recipe.top == 2 and recipe.candidates == 4
    assert type(recipe.loss) is AnchoredUDRLoss
    assert recipe.loss.anchored_loss.beta == 0.25 and recipe.loss.lambda_ == 0.4
    a = _query([0.9, 0.8, 0.5, 0.4, 0.1, 0.1], qid=1)  # top 2 vs bottom 2
    b = _query([0.7, 0.3, 0.3], qid=2)  # n // 2 = 1: the best vs the worst
    c = _query([0.6, 0.6, 0.2, 0.6], qid=3)  # a winner tied with a loser (0.6, 0.6): no pair
    picks = [(q, recipe.sample(q, np.random.default_rng(0))) for q in (a, b, c)]
    assert [p for _, p in picks] == [[0, 1, 4, 5], [0, 2], [0, 1, 2, 3]]
    layout = CandidateLayout.of(picks, "cpu")
    with pytest.raises(UdrError, match="reference similarities were not computed"):
        recipe.anchors(layout)
    recipe.reference = {
        ("sst2", 1): np.arange(6.0),
        ("sst2", 2): np.array([5.0, 6.0, 7.0]),
        ("sst2", 3): -np.arange(4.0),
    }
    ref, pairs = recipe.anchors(layout)
    assert ref.tolist() == [[0, 1, 4, 5], [5, 7, 0, 0], [0, -1, -2, -3]]
    want = np.zeros((3, 4, 4), dtype=bool)
    want[0, [0, 0, 1, 1], [2, 3, 2, 3]] = True
    want[1, 0, 1] = True
    want[2, [0, 1], [2, 2]] = True  # (0.6 vs 0.6) at position 3 is a tie: no pair
    assert (pairs.numpy() == want).all()
    recipe.reference[("sst2", 3)] = np.zeros(3)
    with pytest.raises(UdrError, match="no reference similarities for sst2 query 3"):
        recipe.anchors(layout)


def test_epr_reads_neither_the_anchored_settings_nor_the_feedback():
    base = TrainSettings()
    other = base.model_copy(update={"loss": "anchored", "anchor_beta": 3.0, "anchor_top": 1, "feedback": "labels"})
    assert epr_train_settings(other) == epr_train_settings(base)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("train.loss=anchor", "train.loss"),
        ("train.anchor_beta=0", "train.anchor_beta"),
        ("train.anchor_beta=.nan", "train.anchor_beta"),
        ("train.anchor_top=0", "train.anchor_top"),
        ("train.feedback=label", "train.feedback"),
    ],
)
def test_bad_anchored_and_feedback_settings_are_one_line_errors(override, key):
    from tests.conftest import REPO
    from udr.config import load_settings

    with pytest.raises(UdrError) as err:
        load_settings(REPO / "params.yaml", [override])
    assert str(err.value).startswith(f"bad parameter {key}:") and "\n" not in str(err.value)
