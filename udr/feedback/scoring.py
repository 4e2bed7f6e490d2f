"""LM feedback: how much each candidate demonstration z helps the LM produce a query's gold answer.

For a query (x, y) and candidate z the prompt is ``[instruction] render(z) "\\n" render_query(x)``
(:mod:`udr.lm.prompt`) and the continuation is y:

- generation: s_gen(z) = mean log p_G(y_t | z, x, y_<t) over y's tokens (compared as a mean, as the
  published code does);
- classification / multiple choice: s_cls(z) = p_G(y | z, x) / sum_{y' in choices} p_G(y' | z, x),
  with p_G(y' | z, x) the product over y' tokens, i.e. a softmax of summed log-likelihoods.

Within each query the candidates are then ranked, 1 = most helpful.

Imports of polars are inside the functions that use them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from udr.lm.packed import PackedScorer
from udr.lm.scorer import BatchStats, LMScorer, ScoringItem, group_batches, length_batches, prefix_groups


def pair_score(logps: Sequence[float], gold: int, generation: bool, n_gold_tokens: int) -> float:
    """s_gen (mean token log-likelihood of the gold) or s_cls (softmax of summed log-likelihoods at gold)."""
    if generation:
        return logps[gold] / n_gold_tokens
    m = max(logps)
    return math.exp(logps[gold] - m) / sum(math.exp(lp - m) for lp in logps)


def score_items(
    scorer: LMScorer | PackedScorer,
    items: Sequence[ScoringItem],
    generation: bool,
    batch_tokens: int,
    on_batch=None,
    share_prefixes: bool = True,
) -> tuple[np.ndarray, BatchStats]:
    """The feedback score of every item (in their order) and the token accounting.

    With `share_prefixes`, items of the same candidate run its demonstration once
    (:meth:`LMScorer.score_groups`); `BatchStats.tokens` then counts the tokens run, fewer than the
    items' own. The other items run in length-bucketed batches; with a :class:`PackedScorer`, every
    item runs in its packed rows (`batch_tokens` tokens each) instead."""
    scores = np.empty(len(items), dtype=np.float64)
    total = BatchStats()

    def record(batch, logps, stats):
        for i, lp in zip(batch, logps):
            it = items[i]
            scores[i] = pair_score(lp, it.gold, generation, len(it.continuations[it.gold]))
        total.add(stats)
        if on_batch:
            on_batch(stats)

    groups, plain = prefix_groups(items, batch_tokens) if share_prefixes else ([], list(range(len(items))))
    if isinstance(scorer, PackedScorer):
        logps, stats = scorer.score(items, groups, on_row=on_batch)
        for i, (it, lp) in enumerate(zip(items, logps)):
            scores[i] = pair_score(lp, it.gold, generation, len(it.continuations[it.gold]))
        return scores, stats
    for batch in group_batches(items, groups, batch_tokens):
        values, stats = scorer.score_groups([[items[i] for i in groups[g]] for g in batch])
        record([i for g in batch for i in groups[g]], [v for vs in values for v in vs], stats)
    for batch in length_batches([items[i] for i in plain], batch_tokens):
        logps, stats = scorer.score_batch([items[plain[j]] for j in batch])
        record([plain[j] for j in batch], logps, stats)
    return scores, total


def rank_within_query(frame):
    """Add `rank` (1 = highest score; ties by lower candidate id) within each query of a polars frame."""
    import polars as pl

    frame = frame.sort(["query_id", "score", "candidate_id"], descending=[False, True, False])
    return frame.with_columns(pl.int_range(1, pl.len() + 1).over("query_id").cast(pl.Int32).alias("rank"))
