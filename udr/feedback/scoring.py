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

from udr.lm.scorer import BatchStats, Scorer, ScoringItem, prefix_groups


def pair_score(logps: Sequence[float], gold: int, generation: bool, n_gold_tokens: int) -> float:
    """s_gen (mean token log-likelihood of the gold) or s_cls (softmax of summed log-likelihoods at gold)."""
    if generation:
        return logps[gold] / n_gold_tokens
    m = max(logps)
    return math.exp(logps[gold] - m) / sum(math.exp(lp - m) for lp in logps)


def score_items(
    scorer: Scorer,
    items: Sequence[ScoringItem],
    generation: bool,
    batch_tokens: int,
    on_batch=None,
    share_prefixes: bool = True,
) -> tuple[np.ndarray, BatchStats]:
    """The feedback score of every item (in their order) and the token accounting, by either engine
    (:meth:`udr.lm.scorer.Scorer.score_all`: padded batches of `batch_tokens` tokens, or packed rows).

    With `share_prefixes`, items of the same candidate run its demonstration once
    (:func:`udr.lm.scorer.prefix_groups`); `BatchStats.tokens` then counts the tokens run, fewer than the
    items' own."""
    groups = prefix_groups(items, batch_tokens)[0] if share_prefixes else []
    logps, stats = scorer.score_all(items, groups, batch_tokens, on_batch)
    scores = np.empty(len(items), dtype=np.float64)
    for i, (it, lp) in enumerate(zip(items, logps)):
        scores[i] = pair_score(lp, it.gold, generation, len(it.continuations[it.gold]))
    return scores, stats


def rank_within_query(frame):
    """Add `rank` (1 = highest score; ties by lower candidate id) within each query of a polars frame."""
    import polars as pl

    frame = frame.sort(["query_id", "score", "candidate_id"], descending=[False, True, False])
    return frame.with_columns(pl.int_range(1, pl.len() + 1).over("query_id").cast(pl.Int32).alias("rank"))
