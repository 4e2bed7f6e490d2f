"""Seeded random generators that depend only on what they are for, never on call order."""

from __future__ import annotations

import hashlib

import numpy as np


def task_rng(seed: int, task: str, purpose: str) -> np.random.Generator:
    """A generator that depends on the seed, the task and what it is for (split, cap, ...) only."""
    digest = hashlib.sha256(f"{task}/{purpose}".encode()).digest()
    return np.random.default_rng([seed, int.from_bytes(digest[:8], "little")])
