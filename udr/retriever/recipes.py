"""Training recipes: which of its scored candidates a query brings to a step, and the loss over them.

Every training choice is one recipe class, chosen from the training settings' `train.loss` in one place
(:func:`recipe_class`); each owns its loss (a rank term combined with the in-batch loss,
:mod:`udr.retriever.losses`), what that loss needs beyond the LM's ranks (:meth:`Recipe.targets`), what
it computes once before training (:meth:`Recipe.prepare`), the settings a model's record keeps only where it
trains (:attr:`Recipe.own_settings`) and its words on a model card (:meth:`Recipe.describe`):

- :class:`PaperRecipe`: UDR's, the LM's ranking of l sampled candidates injected list-wise plus the
  in-batch loss, lambda * L_rank + (1 - lambda) * L_ib (:class:`udr.retriever.losses.UDRLoss`, `train.loss`
  paper);
- :class:`PublishedRecipe`: the same terms weighted 4 * L_rank + L_ib as the published code does
  (:class:`udr.retriever.losses.PublishedUDRLoss`, `train.loss` published);
- :class:`DistillRecipe`: the LM's scores distilled instead of its ranks (LLM-R's KL, `train.loss` distill);
- :class:`AnchoredRecipe`: each query's T best against its T worst candidates, each pair's similarity
  margin measured against the initial encoder's (SeDPO's anchored pairwise loss, `train.loss` anchored);
- the EPR baseline is :class:`PaperRecipe` on :func:`epr_train_settings`: one positive of the top 5 and
  one hard negative of the bottom 5 per query, the in-batch (DPR) loss alone.

Where the demonstrations' embeddings come from (E_d trained or frozen) and how a batch's loss is
back-propagated (plainly or by GradCache) are the trainer's own options (:mod:`udr.retriever.training`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from udr.config import TrainSettings
from udr.errors import UdrError
from udr.retriever.demo_encoders import FrozenDemoEncoder
from udr.retriever.losses import (
    AnchoredUDRLoss,
    DistillUDRLoss,
    LossParts,
    PoolNegatives,
    PublishedUDRLoss,
    UDRLoss,
    standardize,
)
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
    sample_candidates`: uniform, published or epr), and its loss over them (query embeddings (B, d),
    candidate embeddings (B, width, d) in the layout's order -> :class:`udr.retriever.losses.LossParts`).
    A subclass chooses its loss (:meth:`from_settings`) and what that loss needs beyond the LM's ranks
    (:meth:`targets`)."""

    #: settings only this recipe reads that a model's record keeps, and the EPR baseline's settings carry,
    #: only where this recipe trains (:func:`settings_of_other_recipes`)
    own_settings: tuple[str, ...] = ()

    def __init__(self, loss: UDRLoss, scheme: str, candidates: int) -> None:
        self.loss = loss
        self.scheme = scheme
        self.candidates = candidates

    @classmethod
    def from_settings(cls, cfg: TrainSettings, scale: float) -> Recipe:
        """The recipe of the training settings `cfg` (`train.loss` naming this class), every similarity times
        `scale`."""
        raise NotImplementedError

    @classmethod
    def describe(cls, train) -> tuple[str, str]:
        """A model card's words for the recipe of `train` (a record's train settings): its loss's weights, and
        the lists a query brings."""
        return f"lambda {train.loss_lambda}", f"{train.candidates_per_query} candidates per query"

    @staticmethod
    def candidates_of(cfg: TrainSettings) -> int:
        """The candidates a query brings: `candidates_per_query` (the epr scheme: always 2)."""
        return 2 if cfg.sampling == "epr" else cfg.candidates_per_query

    def sample(self, query, rng: np.random.Generator) -> list[int]:
        """Positions (0 = the LM's best) of the candidates `query` (a ScoredQuery) brings to this step."""
        return sample_candidates(len(query.candidate_ids), self.candidates, self.scheme, rng)

    def prepare(self, initial: Callable[[], object], queries: Mapping | None, demos, batch_size: int) -> None:
        """What the loss needs computed once before training, from the encoder training starts from
        (`initial()`: called only where needed), the training queries ({task: its ScoredQuery list}), the
        demonstration side (`demos`) and `batch_size` texts a batch (nothing here)."""

    def targets(self, layout: CandidateLayout) -> dict[str, Tensor]:
        """What the loss needs beyond the LM's ranks, as its keyword arguments (none here)."""
        return {}

    def __call__(
        self, query_emb: Tensor, cand_emb: Tensor, layout: CandidateLayout, negatives: PoolNegatives | None = None
    ) -> LossParts:
        return self.loss(query_emb, cand_emb, layout.ranks, layout.mask, negatives, **self.targets(layout))


class PaperRecipe(Recipe):
    """UDR's recipe as the paper writes it: each query's sampled candidates ranked 1..l by the LM, L = lambda *
    L_rank + (1 - lambda) * L_ib (:class:`udr.retriever.losses.UDRLoss`); with lambda 0 and the epr scheme,
    the EPR baseline's in-batch loss alone over one positive and one hard negative."""

    @classmethod
    def from_settings(cls, cfg: TrainSettings, scale: float) -> PaperRecipe:
        return cls(UDRLoss(cfg.loss_lambda, scale=scale), cfg.sampling, cls.candidates_of(cfg))


class PublishedRecipe(Recipe):
    """UDR's recipe as the published code computes it: L = 4 * L_rank + L_ib
    (:class:`udr.retriever.losses.PublishedUDRLoss`; `train.loss_lambda` unread)."""

    @classmethod
    def from_settings(cls, cfg: TrainSettings, scale: float) -> PublishedRecipe:
        return cls(PublishedUDRLoss(scale=scale), cfg.sampling, cls.candidates_of(cfg))


class DistillRecipe(Recipe):
    """LLM-R's recipe: the LM's scores of each query's sampled candidates distilled into the retriever,
    L = lambda * KL(p_LM || p_ret) + (1 - lambda) * L_ib (:class:`udr.retriever.losses.DistillUDRLoss`), the
    scores standardised over each query's whole scored list (:func:`teacher_scores`)."""

    @classmethod
    def from_settings(cls, cfg: TrainSettings, scale: float) -> DistillRecipe:
        loss = DistillUDRLoss(cfg.loss_lambda, cfg.distill_temperature, scale=scale)
        return cls(loss, cfg.sampling, cls.candidates_of(cfg))

    def targets(self, layout: CandidateLayout) -> dict[str, Tensor]:
        return {"scores": teacher_scores(layout.picks, layout.width, layout.mask.device)}


class AnchoredRecipe(Recipe):
    """SeDPO's anchored pairwise recipe: each query brings its `top` best and `top` worst candidates by LM
    score (:func:`udr.retriever.sampling.anchor_positions`; fewer where its list is shorter than 2 * top),
    every (best, worst) pair whose LM scores differ is one term of :class:`udr.retriever.losses.AnchoredLoss`,
    L = lambda * L_anchor + (1 - lambda) * L_ib (:class:`udr.retriever.losses.AnchoredUDRLoss`), L_ib's
    positive the LM's best candidate. The reference similarities are the initial encoder's, computed by
    :meth:`prepare` before training for every query's whole list (:func:`reference_similarities`):
    `reference`, {(task, query id): the dot products of the query and its candidates, in LM order}."""

    own_settings = ("anchor_beta", "anchor_top")

    def __init__(self, loss: AnchoredUDRLoss, top: int) -> None:
        super().__init__(loss, "anchored", 2 * top)
        self.top = top
        self.reference: dict[tuple[str, int], np.ndarray] | None = None

    @classmethod
    def from_settings(cls, cfg: TrainSettings, scale: float) -> AnchoredRecipe:
        return cls(AnchoredUDRLoss(cfg.loss_lambda, cfg.anchor_beta, scale=scale), cfg.anchor_top)

    @classmethod
    def describe(cls, train) -> tuple[str, str]:
        top = train.anchor_top
        lists = f"the {top} best against the {top} worst candidates"
        return f"lambda {train.loss_lambda}, beta {train.anchor_beta}", lists

    def sample(self, query, rng: np.random.Generator) -> list[int]:
        return anchor_positions(len(query.candidate_ids), self.top)

    def prepare(self, initial: Callable[[], object], queries: Mapping | None, demos, batch_size: int) -> None:
        """The reference similarities of every query of `queries` by `initial()`, the encoder training starts
        from."""
        if queries is None:
            raise UdrError("loss anchored: the training queries are needed to compute the reference similarities")
        self.reference = reference_similarities(initial(), queries, demos, batch_size)

    def targets(self, layout: CandidateLayout) -> dict[str, Tensor]:
        ref, pairs = self.anchors(layout)
        return {"ref_sim": ref, "pairs": pairs}

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


RECIPES: dict[str, type[Recipe]] = {
    "paper": PaperRecipe,
    "published": PublishedRecipe,
    "distill": DistillRecipe,
    "anchored": AnchoredRecipe,
}


def recipe_class(cfg: TrainSettings) -> type[Recipe]:
    """The recipe class the training settings `cfg` name (:data:`RECIPES`; the one place that reads `cfg.loss`)."""
    return RECIPES[cfg.loss]


def recipe_for(cfg: TrainSettings, scale: float) -> Recipe:
    """The recipe of the training settings `cfg` (:func:`recipe_class`), built from its settings (`loss_lambda`,
    `distill_temperature`, `anchor_beta`, `anchor_top`, `sampling`, `candidates_per_query`), every similarity
    times `scale`."""
    return recipe_class(cfg).from_settings(cfg, scale)


def settings_of_other_recipes(cfg: TrainSettings) -> list[str]:
    """The settings of the recipes `cfg` does not train with that are theirs alone (:attr:`Recipe.own_settings`):
    unread by this training, so a model's record leaves them out."""
    chosen = recipe_class(cfg)
    return [name for recipe in RECIPES.values() if recipe is not chosen for name in recipe.own_settings]


def recorded_train_settings(cfg: TrainSettings, **dump) -> dict:
    """The train settings (dumped with `dump`) a model's record and its resume fingerprint keep: all but where
    and how often it runs and `final_alpha` (the index's, applied after training), the other recipes' own
    settings (:func:`settings_of_other_recipes`), the feedback only where not lm and the
    training seed only where set (so that a run of the settings that predate them records, and resumes, as it
    did)."""
    out = cfg.model_dump(exclude={"checkpoint_seconds", "device", "final_alpha"}, **dump)
    for name in settings_of_other_recipes(cfg):
        out.pop(name, None)
    if cfg.feedback == "lm":
        out.pop("feedback", None)
    if cfg.seed is None:
        out.pop("seed", None)
    return out


def epr_train_settings(cfg: TrainSettings, task: str | None = None) -> TrainSettings:
    """The EPR baseline's recipe on UDR's budget, as training settings derived from UDR's `cfg`: one
    positive of the top 5 and one hard negative of the bottom 5 per query, the in-batch (DPR) loss alone
    over the batch's candidates, two encoders both trained, and as many epochs as all of UDR's rounds
    together; the same batch, lr and the rest (Rubin et al., "Learning To Retrieve Prompts for In-Context
    Learning", NAACL 2022). EPR learns the LM's feedback (`feedback` lm whatever UDR's), and the other
    recipes' own settings, which its loss never reads, are reset to their defaults. With `task`: that task's
    EPR, trained on its feedback alone (the paper's baseline; task sampling's alpha, unread, is reset too),
    so that the tasks' EPRs take as many steps together as UDR on all of them."""
    epochs = cfg.epochs_first + cfg.epochs_later * len(cfg.later_rounds)
    update = {"sampling": "epr", "loss": "paper", "loss_lambda": 0.0, "epochs_first": epochs, "feedback": "lm"}
    unread = settings_of_other_recipes(cfg.model_copy(update=update))
    update |= {name: type(cfg).model_fields[name].default for name in unread}
    if task is not None:
        update |= {"tasks": [task], "alpha": type(cfg).model_fields["alpha"].default}
    return cfg.model_copy(update={**update, "freeze_demo_encoder": False, "shared_encoder": False})


def reference_similarities(encoder, data: Mapping[str, Sequence], demos, batch_size: int) -> dict:
    """The reference of loss anchored: {(task, query id): the dot products (float64, unscaled) of the query
    and each of its candidates, in LM order} by `encoder` as it is (the one training starts from), without
    dropout or gradient. The candidates' embeddings are a frozen E_d's cache (`demos`, a
    :class:`FrozenDemoEncoder`), else E_d's own of each distinct candidate text; `batch_size` texts a batch."""
    out = {}
    for task, queries in data.items():
        q = encoder.encode([sq.text for sq in queries], "query", batch_size=batch_size).astype(np.float64)
        if isinstance(demos, FrozenDemoEncoder):
            pool = demos.pools[task]
            emb = pool.emb.detach().to("cpu", torch.float64).numpy()
            rows = [[pool.row[c] for c in sq.candidate_ids] for sq in queries]
        else:
            texts = sorted({text for sq in queries for text in sq.candidate_texts})
            at = {text: i for i, text in enumerate(texts)}
            emb = encoder.encode(texts, "demo", batch_size=batch_size).astype(np.float64)
            rows = [[at[text] for text in sq.candidate_texts] for sq in queries]
        for sq, qv, r in zip(queries, q, rows):
            out[(sq.task, sq.query_id)] = emb[r] @ qv
    return out


def teacher_scores(picks: list, width: int, device) -> Tensor:
    """The sampled candidates' LM scores, each standardised over its query's whole scored list (B, width)."""
    rows = []
    for sq, pos in picks:
        if len(sq.candidate_scores) != len(sq.candidate_ids):
            raise UdrError(f"missing scores: {sq.task} query {sq.query_id} has no LM score per candidate")
        z = standardize(sq.candidate_scores)
        rows.append([float(z[p]) for p in pos] + [0.0] * (width - len(pos)))
    return torch.tensor(rows, dtype=torch.float64, device=device)


def dr_target_train_settings(cfg: TrainSettings, task: str | None = None) -> TrainSettings:
    """The DR-Target baseline's settings: EPR's recipe and budget (:func:`epr_train_settings`: one positive
    of the top 5, one negative of the bottom 5, DPR's in-batch loss), its candidates ranked by the BM25
    similarity of their targets to the query's (`feedback` target) instead of by the LM (Li et al. 2023,
    baseline 5)."""
    return epr_train_settings(cfg, task).model_copy(update={"feedback": "target"})


def baseline_train_settings(baseline: str, cfg: TrainSettings, task: str | None = None) -> TrainSettings:
    """The training settings of a trained baseline (:data:`udr.paths.TRAINED_BASELINES`) of `task`, or of
    every training task where `task` is None."""
    derive = {"epr": epr_train_settings, "dr-target": dr_target_train_settings}
    if baseline not in derive:
        raise UdrError(f"unknown baseline {baseline!r}: {', '.join(derive)}")
    return derive[baseline](cfg, task)
