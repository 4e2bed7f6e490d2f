"""Training recipes: which of its scored candidates a query brings to a step, and the loss over them.

One recipe is chosen from the training settings when the trainer is built (:func:`recipe_for`):

- :class:`RankRecipe`: UDR's, the LM's ranking of l sampled candidates injected list-wise plus the
  in-batch loss (:class:`udr.retriever.losses.UDRLoss`, `train.loss` paper or published);
- :class:`DistillRecipe`: the LM's scores distilled instead of its ranks (LLM-R's KL, `train.loss` distill);
- :class:`AnchoredRecipe`: each query's T best against its T worst candidates, each pair's similarity
  margin measured against the initial encoder's (SeDPO's anchored pairwise loss, `train.loss` anchored);
- the EPR baseline is :class:`RankRecipe` on :func:`epr_train_settings`: one positive of the top 5 and
  one hard negative of the bottom 5 per query, the in-batch (DPR) loss alone.

Where the demonstrations' embeddings come from (E_d trained or frozen) and how a batch's loss is
back-propagated (plainly or by GradCache) are the trainer's own options (:mod:`udr.retriever.training`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from udr.errors import UdrError
from udr.retriever.losses import LossParts, PoolNegatives, UDRLoss, standardize
from udr.retriever.sampling import anchor_positions, sample_candidates


@dataclass(frozen=True)
class CandidateLayout:
    """A batch of (ScoredQuery, candidate positions) as the encoders and the loss see it: the candidates'
    texts in order, and (B, width) tensors of which slots are real and of their LM ranks (1 = best; 0 in
    padded slots), width being the most candidates any query brings."""

    picks: list
    texts: list[str]
    mask: Tensor
    ranks: Tensor

    @classmethod
    def of(cls, picks: list, device) -> CandidateLayout:
        width = max(len(pos) for _, pos in picks)
        texts, mask, ranks = [], [], []
        for sq, pos in picks:
            texts += [sq.candidate_texts[p] for p in pos]
            mask.append([True] * len(pos) + [False] * (width - len(pos)))
            ranks.append(list(range(1, len(pos) + 1)) + [0] * (width - len(pos)))
        return cls(picks, texts, torch.tensor(mask, device=device), torch.tensor(ranks, device=device))

    @property
    def width(self) -> int:
        return self.mask.shape[1]

    def pad(self, emb: Tensor) -> Tensor:
        """The candidates' embeddings (one row per text, in order) laid out as (B, width, d), zeros in the
        padded slots."""
        out = torch.zeros(len(self.picks), self.width, emb.shape[1], dtype=emb.dtype, device=self.mask.device)
        out[self.mask] = emb
        return out


class Recipe:
    """A training recipe: `candidates` per query sampled by `scheme` (:func:`udr.retriever.sampling.
    sample_candidates`: uniform, published or epr), and the loss `loss` over them (query embeddings (B, d),
    candidate embeddings (B, width, d) in the layout's order -> :class:`udr.retriever.losses.LossParts`)."""

    def __init__(self, loss: UDRLoss, scheme: str, candidates: int) -> None:
        self.loss = loss
        self.scheme = scheme
        self.candidates = candidates

    def sample(self, query, rng: np.random.Generator) -> list[int]:
        """Positions (0 = the LM's best) of the candidates `query` (a ScoredQuery) brings to this step."""
        return sample_candidates(len(query.candidate_ids), self.candidates, self.scheme, rng)

    def targets(self, layout: CandidateLayout) -> Tensor | None:
        """What the loss needs beyond the LM's ranks (none here)."""
        return None

    def __call__(
        self, query_emb: Tensor, cand_emb: Tensor, layout: CandidateLayout, negatives: PoolNegatives | None = None
    ) -> LossParts:
        return self.loss(query_emb, cand_emb, layout.ranks, layout.mask, self.targets(layout), negatives)


class RankRecipe(Recipe):
    """UDR's recipe: each query's sampled candidates ranked 1..l by the LM, L = lambda * L_rank +
    (1 - lambda) * L_ib (paper) or 4 * L_rank + L_ib (published); with lambda 0 and the epr scheme,
    the EPR baseline's in-batch loss alone over one positive and one hard negative."""


class DistillRecipe(Recipe):
    """LLM-R's recipe: the LM's scores of each query's sampled candidates distilled into the retriever,
    L = lambda * KL(p_LM || p_ret) + (1 - lambda) * L_ib, the scores standardised over each query's whole
    scored list (:func:`teacher_scores`)."""

    def targets(self, layout: CandidateLayout) -> Tensor:
        return teacher_scores(layout.picks, layout.width, layout.mask.device)


class AnchoredRecipe(Recipe):
    """SeDPO's anchored pairwise recipe: each query brings its `top` best and `top` worst candidates by LM
    score (:func:`udr.retriever.sampling.anchor_positions`; fewer where its list is shorter than 2 * top),
    every (best, worst) pair whose LM scores differ is one term of :class:`udr.retriever.losses.AnchoredLoss`,
    L = lambda * L_anchor + (1 - lambda) * L_ib, L_ib's positive the LM's best candidate. The reference
    similarities are the initial encoder's, computed once before training for every query's whole list
    (:func:`udr.retriever.training.reference_similarities`) and set as `reference`: {(task, query id): the
    dot products of the query and its candidates, in LM order}."""

    def __init__(self, loss: UDRLoss, top: int) -> None:
        super().__init__(loss, "anchored", 2 * top)
        self.top = top
        self.reference: dict[tuple[str, int], np.ndarray] | None = None

    def sample(self, query, rng: np.random.Generator) -> list[int]:
        return anchor_positions(len(query.candidate_ids), self.top)

    def anchors(self, layout: CandidateLayout) -> tuple[Tensor, Tensor]:
        """The sampled candidates' reference similarities (B, width) and their (winner, loser) pairs
        (B, width, width): a query's winner (one of its `top` best) over a loser (one of its `top` worst)
        where the winner's LM score is the higher."""
        if self.reference is None:
            raise UdrError("loss anchored: the reference similarities were not computed before training")
        b, width = layout.mask.shape
        ref = np.zeros((b, width))
        pairs = np.zeros((b, width, width), dtype=bool)
        for row, (sq, pos) in enumerate(layout.picks):
            n = len(sq.candidate_ids)
            values = self.reference.get((sq.task, sq.query_id))
            if values is None or len(values) != n:
                raise UdrError(f"loss anchored: no reference similarities for {sq.task} query {sq.query_id}")
            if len(sq.candidate_scores) != n:
                raise UdrError(f"missing scores: {sq.task} query {sq.query_id} has no LM score per candidate")
            ref[row, : len(pos)] = [values[p] for p in pos]
            t = min(self.top, n // 2)
            for i, pi in enumerate(pos):
                for j, pj in enumerate(pos):
                    if pi < t and pj >= n - t and sq.candidate_scores[pi] > sq.candidate_scores[pj]:
                        pairs[row, i, j] = True
        device = layout.mask.device
        return torch.tensor(ref, dtype=torch.float64, device=device), torch.tensor(pairs, device=device)

    def __call__(
        self, query_emb: Tensor, cand_emb: Tensor, layout: CandidateLayout, negatives: PoolNegatives | None = None
    ) -> LossParts:
        ref, pairs = self.anchors(layout)
        return self.loss(query_emb, cand_emb, layout.ranks, layout.mask, None, negatives, ref_sim=ref, pairs=pairs)


def recipe_for(cfg, scale: float) -> Recipe:
    """The recipe of the training settings `cfg` (a :class:`udr.config.TrainSettings`): its loss
    (`loss`, `loss_lambda`, `distill_temperature`, `anchor_beta`, every similarity times `scale`) and
    candidate sampling (`sampling`, `candidates_per_query`; the epr scheme always 2; loss anchored: the
    `anchor_top` best and worst)."""
    if cfg.loss == "anchored":
        loss = UDRLoss(cfg.loss_lambda, cfg.loss, scale=scale, anchor_beta=cfg.anchor_beta)
        return AnchoredRecipe(loss, cfg.anchor_top)
    loss = UDRLoss(cfg.loss_lambda, cfg.loss, scale=scale, distill_temperature=cfg.distill_temperature)
    candidates = 2 if cfg.sampling == "epr" else cfg.candidates_per_query
    recipe = DistillRecipe if cfg.loss == "distill" else RankRecipe
    return recipe(loss, cfg.sampling, candidates)


def epr_train_settings(cfg, task: str | None = None):
    """The EPR baseline's recipe on UDR's budget, as training settings derived from UDR's `cfg`: one
    positive of the top 5 and one hard negative of the bottom 5 per query, the in-batch (DPR) loss alone
    over the batch's candidates, two encoders both trained, and as many epochs as all of UDR's rounds
    together; the same batch, lr and the rest (Rubin et al., "Learning To Retrieve Prompts for In-Context
    Learning", NAACL 2022). EPR learns the LM's feedback (`feedback` lm whatever UDR's), and the anchored
    loss's settings, which its loss never reads, are reset to their defaults. With `task`: that task's
    EPR, trained on its feedback alone (the paper's baseline; task sampling's alpha, unread, is reset too),
    so that the tasks' EPRs take as many steps together as UDR on all of them."""
    epochs = cfg.epochs_first + cfg.epochs_later * len(cfg.later_rounds)
    update = {"sampling": "epr", "loss": "paper", "loss_lambda": 0.0, "epochs_first": epochs, "feedback": "lm"}
    update |= {name: type(cfg).model_fields[name].default for name in ("anchor_beta", "anchor_top")}
    if task is not None:
        update |= {"tasks": [task], "alpha": type(cfg).model_fields["alpha"].default}
    return cfg.model_copy(update={**update, "freeze_demo_encoder": False, "shared_encoder": False})


def teacher_scores(picks: list, width: int, device) -> Tensor:
    """The sampled candidates' LM scores, each standardised over its query's whole scored list (B, width)."""
    rows = []
    for sq, pos in picks:
        if len(sq.candidate_scores) != len(sq.candidate_ids):
            raise UdrError(f"missing scores: {sq.task} query {sq.query_id} has no LM score per candidate")
        z = standardize(sq.candidate_scores)
        rows.append([float(z[p]) for p in pos] + [0.0] * (width - len(pos)))
    return torch.tensor(rows, dtype=torch.float64, device=device)
