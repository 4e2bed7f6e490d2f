"""udr.retriever.recipes and the trainer's options: the recipe the training settings choose, EPR's
settings, a batch's candidate layout, and GradCache's one-process rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from udr.config import LOSS_MODES, TrainSettings
from udr.errors import UdrError
from udr.retriever.backward import GradCacheBackward
from udr.retriever.losses import DistillUDRLoss, PublishedUDRLoss, UDRLoss
from udr.retriever.recipes import (
    RECIPES,
    CandidateLayout,
    DistillRecipe,
    PaperRecipe,
    PublishedRecipe,
    epr_train_settings,
    recipe_for,
    settings_of_other_recipes,
)
from udr.retriever.training import ScoredQuery


def _query(n: int, scores=()) -> ScoredQuery:
    return ScoredQuery("sst2", 1, "q", tuple(range(10, 10 + n)), tuple(f"d{i}" for i in range(n)), tuple(scores))


@pytest.mark.parametrize(
    ("loss", "sampling", "kind", "loss_kind", "candidates"),
    [
        ("paper", "uniform", PaperRecipe, UDRLoss, 5),
        ("published", "published", PublishedRecipe, PublishedUDRLoss, 5),
        ("distill", "uniform", DistillRecipe, DistillUDRLoss, 5),
        ("paper", "epr", PaperRecipe, UDRLoss, 2),
    ],
)
def test_the_settings_choose_the_recipe(loss, sampling, kind, loss_kind, candidates):
    cfg = TrainSettings(loss=loss, sampling=sampling, candidates_per_query=5, loss_lambda=0.3)
    recipe = recipe_for(cfg, scale=20.0)
    assert type(recipe) is kind and recipe.candidates == candidates and recipe.scheme == sampling
    assert type(recipe.loss) is loss_kind and recipe.loss.scale == 20.0
    # the published weights are fixed: 4 * L_rank + L_ib whatever train.loss_lambda
    assert recipe.loss.lambda_ == (0.0 if loss == "published" else cfg.loss_lambda)
    positions = recipe.sample(_query(12), np.random.default_rng(0))
    assert len(positions) == candidates and positions == sorted(positions)


def test_epr_settings_train_both_encoders_on_the_in_batch_loss_alone():
    cfg = TrainSettings(later_rounds={"round1": "round0", "round2": "round1"}, epochs_first=1.0, epochs_later=2.0)
    epr = epr_train_settings(cfg)
    assert (epr.sampling, epr.loss, epr.loss_lambda, epr.epochs_first) == ("epr", "paper", 0.0, 5.0)
    assert not epr.freeze_demo_encoder and not epr.shared_encoder
    assert epr.model_dump(exclude={"sampling", "loss", "loss_lambda", "epochs_first", "freeze_demo_encoder"}) == (
        cfg.model_dump(exclude={"sampling", "loss", "loss_lambda", "epochs_first", "freeze_demo_encoder"})
    )


def test_candidate_layout_pads_and_ranks_in_lm_order():
    layout = CandidateLayout.of([(_query(4), [0, 2, 3]), (_query(3), [1, 2])], "cpu")
    assert layout.texts == ["d0", "d2", "d3", "d1", "d2"] and layout.width == 3
    assert layout.mask.tolist() == [[True, True, True], [True, True, False]]
    assert layout.ranks.tolist() == [[1, 2, 3], [1, 2, 0]]


def test_the_distill_recipe_standardises_each_querys_scores():
    recipe = recipe_for(TrainSettings(loss="distill"), scale=1.0)
    layout = CandidateLayout.of([(_query(3, [0.0, 1.0, 2.0]), [0, 2]), (_query(2, [5.0, 5.0]), [1])], "cpu")
    z = recipe.targets(layout)["scores"]
    assert z.dtype == torch.float64
    np.testing.assert_allclose(z.numpy(), [[-np.sqrt(1.5), np.sqrt(1.5)], [0.0, 0.0]])
    assert recipe_for(TrainSettings(), scale=1.0).targets(layout) == {}
    with pytest.raises(UdrError, match="no LM score per candidate"):
        recipe.targets(CandidateLayout.of([(_query(3), [0, 1])], "cpu"))


def test_every_loss_setting_names_one_recipe_class():
    assert set(RECIPES) == set(LOSS_MODES)
    for loss, kind in RECIPES.items():
        assert type(recipe_for(TrainSettings(loss=loss), 1.0)) is kind


def test_a_record_keeps_a_recipes_own_settings_only_where_it_trains():
    """Each recipe's own settings are training settings; a record drops the other recipes' own, and the EPR
    baseline's settings carry them at their defaults."""
    from udr.retriever.recipes import recorded_train_settings

    owned = {name for kind in RECIPES.values() for name in kind.own_settings}
    assert owned == {"anchor_beta", "anchor_top"} and owned <= set(TrainSettings.model_fields)
    for loss, kind in RECIPES.items():
        cfg = TrainSettings(loss=loss, anchor_beta=0.3, anchor_top=3)
        assert set(settings_of_other_recipes(cfg)) == owned - set(kind.own_settings)
        assert owned - set(recorded_train_settings(cfg)) == owned - set(kind.own_settings)
        epr = epr_train_settings(cfg)
        assert all(getattr(epr, n) == TrainSettings.model_fields[n].default for n in owned)


def test_each_recipe_describes_its_lists_for_the_model_card():
    cfg = TrainSettings(loss="anchored", anchor_top=3, anchor_beta=0.2, loss_lambda=0.5, candidates_per_query=7)
    assert RECIPES["anchored"].describe(cfg) == ("lambda 0.5, beta 0.2", "the 3 best against the 3 worst candidates")
    for loss in ("paper", "published", "distill"):
        assert RECIPES[loss].describe(cfg) == ("lambda 0.5", "7 candidates per query")


def test_only_the_anchored_recipe_prepares_and_it_needs_the_queries():
    calls = []

    def initial():
        calls.append(1)

    for loss in ("paper", "published", "distill"):
        recipe_for(TrainSettings(loss=loss), 1.0).prepare(initial, None, None, 8)
    assert not calls  # nothing loaded for the recipes that need no reference
    with pytest.raises(UdrError, match="the training queries are needed"):
        recipe_for(TrainSettings(loss="anchored"), 1.0).prepare(initial, None, None, 8)


def test_grad_cache_runs_in_one_process():
    GradCacheBackward(1)
    with pytest.raises(UdrError, match="train.grad_cache runs in one process"):
        GradCacheBackward(2)
