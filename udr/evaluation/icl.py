"""In-context prompt assembly: which retrieved demonstrations go into the prompt, and in what order.

Retrievers return a test input's demonstrations most similar first. The paper keeps, for
classification and multiple choice, the first `max_demos` (8); for generation, as many as fit in
the LM's context C minus the test input minus the longest target the LM may write (the largest L
with |z_1| + ... + |z_L| + |x| + |y_max| <= C). Classification prompts obey the same budget.
They are then ordered: ascending similarity (the paper and EPR: the most similar demonstration
right before the test input), descending, or random (seeded).

A prompt is ``[instruction] render(z_1) "\\n" ... render(z_L) "\\n" x "\\t"``: the scoring
stage's layout, with the task's template (see :mod:`udr.tasks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from udr.errors import UdrError

Order = Literal["ascending", "descending", "random"]
ORDERS = ("ascending", "descending", "random")


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


def order_demonstrations(ranked: Sequence[int], order: Order, rng: np.random.Generator | None = None) -> list[int]:
    """Put selected demonstrations (most similar first) into prompt order."""
    if order == "ascending":
        return list(reversed(ranked))
    if order == "descending":
        return list(ranked)
    if order == "random":
        if rng is None:
            raise UdrError("order 'random' needs a seeded generator")
        return [ranked[i] for i in rng.permutation(len(ranked))]
    raise UdrError(f"bad parameter order: {order!r} (expected one of {', '.join(ORDERS)})")


def assemble(
    builder,
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
    head = builder.encode(builder.instruction) if builder.instruction else ()
    query = builder.query_prefix(query_input)
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


def prompt_text(
    template: str,
    instruction: str | None,
    demos: Sequence[tuple[str, str]],
    query_input: str,
    *,
    order: Order = "ascending",
    rng: np.random.Generator | None = None,
) -> str:
    """The same layout as :func:`assemble`, as text and without a token budget: every one of `demos`
    ((input, answer), most similar first) in `order`, then the test input, ready to send to an LM."""
    from udr.lm.scorer import render_demonstration, render_query

    chosen = order_demonstrations(list(range(len(demos))), order, rng)
    return (
        (instruction or "")
        + "".join(render_demonstration(template, *demos[j]) for j in chosen)
        + render_query(template, query_input)
    )
