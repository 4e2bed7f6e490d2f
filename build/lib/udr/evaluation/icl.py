"""In-context prompt assembly: which retrieved demonstrations go into the prompt, and in what order.

Retrievers return a test input's demonstrations most similar first. The paper keeps, for
classification and multiple choice, the first `max_demos` (8); for generation, as many as fit in
the LM's context C minus the test input minus the longest target the LM may write (the largest L
with |z_1| + ... + |z_L| + |x| + |y_max| <= C). Classification prompts obey the same budget.
They are then ordered: ascending similarity (the paper and EPR: the most similar demonstration
right before the test input), descending, or random (seeded).

The layout of the prompt, and the orders, are :mod:`udr.lm.prompt`'s, shared with LM scoring.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from udr.config import Order
from udr.errors import UdrError
from udr.lm.prompt import PromptBuilder, order_demonstrations


@dataclass(frozen=True)
class Prompt:
    """An assembled prompt: its token ids and the pool ids of the demonstrations in prompt order."""

    token_ids: tuple[int, ...]
    demo_ids: tuple[int, ...]


def select_demonstrations(lengths: Sequence[int], budget: int, max_demos: int | None) -> int:
    """How many of the ranked demonstrations (most similar first) to keep: the longest prefix whose
    total length fits `budget`, capped at `max_demos` (None: no cap)."""
    if budget < 0:
        raise UdrError(f"the test input alone leaves no room in the context (budget {budget} tokens)")
    used = n = 0
    for length in lengths:
        if (max_demos is not None and n >= max_demos) or used + length > budget:
            break
        used += length
        n += 1
    return n


def assemble(
    builder: PromptBuilder,
    demos: Sequence[tuple[int, str, str]],
    query_input: str,
    *,
    context: int,
    reserve: int,
    max_demos: int | None,
    order: Order,
    rng: np.random.Generator | None = None,
) -> Prompt:
    """The prompt for one test input.

    builder: the scoring stage's :class:`udr.lm.scorer.PromptBuilder` (tokeniser, template and
    instruction: the same layout as LM scoring); demos: (pool id, input, answer), most similar
    first; context: C; reserve: tokens kept free for the answer (the longest target, or the longest
    label continuation).
    """
    head = builder.head
    query = builder.query(query_input)
    rendered = [builder.demonstration(i, a) for _, i, a in demos]
    budget = context - reserve - len(builder.start) - len(head) - len(query)
    n = select_demonstrations([len(r) for r in rendered], max(budget, 0), max_demos)
    chosen = order_demonstrations(list(range(n)), order, rng)
    ids = list(head)
    for j in chosen:
        ids += rendered[j]
    ids += query
    # The tokenizer's BOS (if any) first; a query too long alone keeps its end (as scoring does).
    return Prompt(builder.framed(ids, context - reserve), tuple(demos[j][0] for j in chosen))
