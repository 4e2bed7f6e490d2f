"""udr.retriever.sampling: the task sampler (p ~ q^alpha) and the candidate schemes."""

from __future__ import annotations

import numpy as np
import pytest

from udr.errors import UdrError
from udr.retriever.sampling import TaskSampler, sample_candidates


def test_task_sampler_frequencies_follow_q_to_the_alpha():
    sizes = {"a": 900, "b": 90, "c": 10}
    sampler = TaskSampler(sizes, alpha=0.5)
    q = np.array([0.9, 0.09, 0.01])
    expected = q**0.5 / (q**0.5).sum()
    assert np.allclose(sampler.probabilities, expected)
    rng = np.random.default_rng(0)
    n = 40_000
    draws = [sampler.draw(rng) for _ in range(n)]
    freq = np.array([draws.count(t) / n for t in sampler.tasks])
    # 4 standard errors of a binomial proportion
    assert np.all(np.abs(freq - expected) < 4 * np.sqrt(expected * (1 - expected) / n)), (freq, expected)


def test_task_sampler_alpha_one_is_proportional():
    sampler = TaskSampler({"a": 30, "b": 10}, alpha=1.0)
    assert np.allclose(sampler.probabilities, [0.75, 0.25])
    with pytest.raises(UdrError, match="no training data"):
        TaskSampler({"a": 0}, alpha=0.5)


@pytest.mark.parametrize("scheme", ["uniform", "published", "epr"])
def test_sample_candidates_schemes(scheme):
    rng = np.random.default_rng(1)
    for n in (2, 3, 8, 12, 40):
        for _ in range(50):
            pos = sample_candidates(n, 8, scheme, rng)
            assert pos == sorted(set(pos)) and all(0 <= p < n for p in pos)
            want = 2 if scheme == "epr" else min(8, n)
            assert len(pos) == want
            if scheme in ("published", "epr") and n >= 10:
                assert pos[0] < 5 and pos[-1] >= n - 5  # one of the top 5 and one of the bottom 5
    with pytest.raises(UdrError, match="at least 2"):
        sample_candidates(1, 8, scheme, rng)
