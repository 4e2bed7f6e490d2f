"""What one training step sees: a task drawn with p ~ q^alpha, then per query the candidates to rank.

Everything random in step s is drawn from a generator seeded by (seed, round, s) (:func:`step_rng`),
so a run resumed from a checkpoint continues exactly as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from udr.errors import UdrError
from udr.util.rng import task_rng

TOP_BOTTOM = 5  # the published scheme's and EPR's "top 5" / "bottom 5"


class TaskSampler:
    """Draws a task with p(T_i) = q_i^alpha / sum_j q_j^alpha, q_i = n_i / sum_j n_j (paper, eq. for p(T_i))."""

    def __init__(self, sizes: Mapping[str, int], alpha: float):
        if not sizes or any(n <= 0 for n in sizes.values()):
            raise UdrError(f"no training data: every task needs scored queries, got {dict(sizes)}")
        self.tasks = sorted(sizes)
        q = np.array([sizes[t] for t in self.tasks], dtype=np.float64)
        q /= q.sum()
        p = q**alpha
        self.probabilities = p / p.sum()

    def draw(self, rng: np.random.Generator) -> str:
        return self.tasks[int(rng.choice(len(self.tasks), p=self.probabilities))]


def sample_candidates(n: int, l: int, scheme: str, rng: np.random.Generator) -> list[int]:
    """Positions (0 = the LM's best) of the candidates used for one query in one step, in LM order.

    uniform: min(l, n) at random; published: one of the top 5, one of the bottom 5, the rest from
    the middle (topped up from anywhere unused when the middle is short); epr: one of the top 5 and
    one of the bottom 5 (EPR's positive and hard negative).
    """
    if n < 2:
        raise UdrError("a query needs at least 2 scored candidates")
    if scheme == "uniform":
        return sorted(rng.choice(n, size=min(l, n), replace=False).tolist())
    top = int(rng.integers(min(TOP_BOTTOM, n)))
    bottom_pool = [i for i in range(max(0, n - TOP_BOTTOM), n) if i != top]
    bottom = int(rng.choice(bottom_pool))
    if scheme == "epr":
        return sorted([top, bottom])
    if scheme != "published":
        raise UdrError(f"bad parameter train.sampling: unknown scheme {scheme!r}")
    chosen = {top, bottom}
    middle = [i for i in range(TOP_BOTTOM, n - TOP_BOTTOM) if i not in chosen]
    want = min(l, n) - 2
    take = rng.choice(len(middle), size=min(want, len(middle)), replace=False).tolist() if middle else []
    chosen |= {middle[i] for i in take}
    rest = [i for i in range(n) if i not in chosen]
    if len(chosen) < min(l, n):
        chosen |= {rest[i] for i in rng.choice(len(rest), size=min(l, n) - len(chosen), replace=False).tolist()}
    return sorted(chosen)


def anchor_positions(n: int, top: int) -> list[int]:
    """Positions (0 = the LM's best) of the `top` best and `top` worst of n candidates in LM order, fewer of
    each where n < 2 * top (n // 2: best and worst never overlap); loss anchored's candidates (no draw)."""
    if n < 2:
        raise UdrError("a query needs at least 2 scored candidates")
    t = min(top, n // 2)
    return [*range(t), *range(n - t, n)]


def step_rng(seed: int, round_: int, step: int, purpose: str = "batch") -> np.random.Generator:
    # "train-it<N>": the label rounds had when the default run was recorded; kept so that the same seed
    # keeps giving the same training run.
    return task_rng(seed, f"train-it{round_}", f"{purpose}-{step}")
