"""Every recipe's loss of one fixed tiny batch, pinned to the values the code computed when the recipes were
one class each (`PINNED`, printed by running this file as a script on that code): a change to a loss, its
weighting, the recipes' targets or the in-batch softmax cannot drift silently. float64 embeddings, so the
pins hold on every CPU kind; benchmarks/recipe_fingerprints.py checks whole training runs the same way."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from udr.config import TrainSettings
from udr.retriever.losses import PoolNegatives
from udr.retriever.recipes import CandidateLayout, epr_train_settings, recipe_for
from udr.retriever.training import ScoredQuery

# name: (train settings overrides, encoder scale, whole-pool negatives)
CASES = {
    "paper": ({"loss": "paper", "loss_lambda": 0.2}, 1.0, False),
    "paper-cosine": ({"loss": "paper", "loss_lambda": 0.8}, 20.0, False),
    "paper-pool": ({"loss": "paper", "loss_lambda": 0.2}, 1.0, True),
    "published": ({"loss": "published", "sampling": "published"}, 1.0, False),
    "distill": ({"loss": "distill", "loss_lambda": 0.3, "distill_temperature": 0.7}, 1.0, False),
    "anchored": ({"loss": "anchored", "loss_lambda": 0.4, "anchor_beta": 0.5, "anchor_top": 2}, 20.0, False),
    "epr": (None, 1.0, False),
}

PINNED = {
    "anchored": (11.605344243595221, 2.550835624008204, 17.6416833233199),
    "distill": (6.240273414154762, 2.738261863107825, 7.741135507460593),
    "epr": (8.80147971427666, 2.291519035042756, 8.80147971427666),
    "paper": (7.91962600095263, 8.633587974920774, 7.741135507460593),
    "paper-cosine": (23.346476934061315, 24.49277668198773, 18.761277942355658),
    "paper-pool": (7.467052022467962, 8.633587974920774, 7.175418034354759),
    "published": (42.275487407143686, 8.633587974920774, 7.741135507460593),
}


def _queries() -> list[ScoredQuery]:
    rng = np.random.default_rng(7)
    out = []
    for qid, n in ((3, 6), (5, 4), (8, 5)):
        scores = tuple(sorted(rng.normal(size=n).round(3).tolist(), reverse=True))
        texts = tuple(f"demo {qid}-{i}" for i in range(n))
        out.append(ScoredQuery("sst2", qid, f"query {qid}", tuple(range(100 * qid, 100 * qid + n)), texts, scores))
    return out


def recipe_losses(name: str) -> tuple[float, float, float]:
    """(total, rank, in_batch) of recipe `name`'s loss on the fixed batch."""
    update, scale, pool = CASES[name]
    cfg = epr_train_settings(TrainSettings()) if update is None else TrainSettings(**update)
    recipe = recipe_for(cfg, scale)
    queries = _queries()
    picks = [(sq, recipe.sample(sq, np.random.default_rng(sq.query_id))) for sq in queries]
    layout = CandidateLayout.of(picks, "cpu")
    gen = torch.Generator().manual_seed(11)
    d = 6
    query_emb = torch.randn(len(queries), d, generator=gen, dtype=torch.float64)
    cand_emb = layout.pad(torch.randn(len(layout.texts), d, generator=gen, dtype=torch.float64))
    if scale != 1.0:  # cosine: unit vectors
        query_emb = torch.nn.functional.normalize(query_emb, dim=1)
        cand_emb = torch.nn.functional.normalize(cand_emb, dim=2)
    if hasattr(recipe, "reference"):  # the anchored recipe's reference similarities, fixed here
        recipe.reference = {
            (sq.task, sq.query_id): np.linspace(-0.5, 0.5, len(sq.candidate_ids)) * (sq.query_id % 3 - 1)
            for sq in queries
        }
    negatives = None
    if pool:
        pool_emb = torch.randn(20, d, generator=gen, dtype=torch.float64)
        rows = torch.tensor([[2 * b + j for j in range(layout.width)] for b in range(len(queries))])
        pool_emb[rows[layout.mask]] = cand_emb[layout.mask]
        negatives = PoolNegatives(pool_emb, rows, torch.tensor([19, -1, 18]))
    parts = recipe(query_emb, cand_emb, layout, negatives)
    return parts.total.item(), parts.rank.item(), parts.in_batch.item()


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_recipes_loss_of_the_fixed_batch_is_pinned(name):
    assert recipe_losses(name) == pytest.approx(PINNED[name], rel=1e-12, abs=1e-15)


if __name__ == "__main__":
    print({name: recipe_losses(name) for name in sorted(CASES)})
