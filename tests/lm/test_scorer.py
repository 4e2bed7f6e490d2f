"""udr.lm.scorer: the batched scorer (length buckets, LM head at scored positions, shared-prefix KV
cache) equals a direct one-pair-at-a-time computation (full logits, no cache) to 1e-4 in fp32."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tiny_models import tiny_llama
from udr.lm.scorer import LMScorer, ScoringItem, continuation_log_likelihood, length_batches


@pytest.mark.parametrize("attention", ["sdpa", "eager", "copied cache"])
def test_batched_paths_equal_reference_with_mixed_lengths(attention):
    """Label continuations through the packed 4D mask (sdpa: boolean, eager: additive) and through the
    copied cache (models with sliding-window layers) give the reference log-likelihoods."""
    rng = np.random.default_rng(0)
    model = tiny_llama(1)
    model.config._attn_implementation = "eager" if attention == "eager" else "sdpa"
    scorer = LMScorer(model, pad_id=256)
    assert scorer._packable
    if attention == "copied cache":
        model.config.sliding_window = 4096
        scorer = LMScorer(model, pad_id=256)
        assert not scorer._packable

    def ids(n):
        return tuple(int(x) for x in rng.integers(0, 256, n))

    multi = [
        ScoringItem(
            i, i, ids(rng.integers(2, 40)), tuple(ids(rng.integers(1, 5)) for _ in range(rng.integers(2, 5))), 0
        )
        for i in range(20)
    ]
    single = [ScoringItem(i, i, ids(rng.integers(2, 40)), (ids(rng.integers(1, 8)),), 0) for i in range(20)]
    for items in (multi, single):
        for batch in length_batches(items, 128):
            logps, stats = scorer.score_batch([items[i] for i in batch])
            assert stats.padded >= 0 and stats.pairs == len(batch)
            for i, lp in zip(batch, logps):
                for c, cont in enumerate(items[i].continuations):
                    expected = continuation_log_likelihood(model, items[i].prompt, cont)
                    assert lp[c] == pytest.approx(expected, abs=1e-4)


def test_length_batches_respect_budget_and_cover_all():
    items = [ScoringItem(i, i, (1,) * n, ((2,),), 0) for i, n in enumerate([5, 50, 3, 20, 20, 200, 7])]
    batches = list(length_batches(items, 64))
    assert sorted(i for b in batches for i in b) == list(range(len(items)))
    for b in batches:
        longest = max(items[i].n_tokens for i in b)
        assert len(b) == 1 or longest * len(b) <= 64


@pytest.mark.parametrize("attention", ["sdpa", "eager", "copied cache"])
@pytest.mark.parametrize("multi", [False, True], ids=["single", "label sets"])
@pytest.mark.parametrize("ragged_lengths", [True, False], ids=["mixed lengths", "equal lengths"])
def test_prefix_groups_equal_reference(attention, multi, ragged_lengths):
    """score_groups: a group's shared prompt prefix runs once and its items continue from the cache;
    every continuation's log-likelihood is the one-pair reference's (fp32, 1e-4)."""
    rng = np.random.default_rng(3)
    model = tiny_llama(1)
    model.config._attn_implementation = "eager" if attention == "eager" else "sdpa"
    if attention == "copied cache":
        model.config.sliding_window = 4096
    scorer = LMScorer(model, pad_id=256)

    def ids(lo, hi):
        n = int(rng.integers(lo, hi)) if ragged_lengths else hi - 1
        return tuple(int(x) for x in rng.integers(0, 256, n))

    groups = []
    for g in range(5):
        prefix = ids(1, 30)
        group = []
        for i in range(int(rng.integers(1, 5)) if ragged_lengths else 3):
            if multi:
                conts = tuple(ids(1, 5) for _ in range(3))
                if g % 2:  # continuations with a common prefix (e.g. "Answer:")
                    conts = tuple((7, 8) + c for c in conts)
            else:
                conts = (ids(1, 8),)
            group.append(ScoringItem(i, g, prefix + ids(1, 20), conts, 0, shared=len(prefix)))
        groups.append(group)
    values, stats = scorer.score_groups(groups)
    assert stats.pairs == sum(len(g) for g in groups)
    for group, group_values in zip(groups, values):
        for item, lp in zip(group, group_values):
            for c, cont in enumerate(item.continuations):
                assert lp[c] == pytest.approx(continuation_log_likelihood(model, item.prompt, cont), abs=1e-4)


def test_prefix_groups_reject_items_without_the_shared_prefix():
    model = tiny_llama(1)
    scorer = LMScorer(model, pad_id=256)
    a = ScoringItem(0, 0, (1, 2, 3, 4), ((5,),), 0, shared=2)
    with pytest.raises(ValueError, match="share a proper prompt prefix"):
        scorer.score_groups([[a, ScoringItem(1, 0, (1, 9, 3, 4), ((5,),), 0, shared=2)]])
    with pytest.raises(ValueError, match="share a proper prompt prefix"):
        scorer.score_groups([[ScoringItem(0, 0, (1, 2), ((5,),), 0, shared=2)]])
