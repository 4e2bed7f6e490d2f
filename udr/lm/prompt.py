"""The prompt layout, defined once for LM scoring, in-context evaluation and `udr retrieve --prompt`.

A prompt is ``[instruction] render(z_1) "\\n" ... render(z_L) "\\n" render_query(x)``: the task's
template (:meth:`udr.data.tasks.Task.render`, by default ``"{input}\\t{answer}"``) for every
demonstration, one per line, then the query up to where its answer goes. Scoring uses one
demonstration (L = 1); evaluation as many as the context allows, in an :data:`Order`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from udr.config import ORDERS, Order
from udr.data.tasks import Task
from udr.errors import UdrError
from udr.lm.scorer import ScoringItem

DEMONSTRATION_END = "\n"


def demonstration_line(task: Task, input: str, answer: str) -> str:
    """One demonstration as it stands in a prompt: the task template, then the line end."""
    return task.render(input, answer) + DEMONSTRATION_END


def order_demonstrations(ranked: Sequence[int], order: Order, rng: np.random.Generator | None = None) -> list[int]:
    """Put demonstrations ranked most similar first into prompt order: ascending similarity (the most
    similar right before the query), descending, or random (`rng` required)."""
    if order == "ascending":
        return list(reversed(ranked))
    if order == "descending":
        return list(ranked)
    if order == "random":
        if rng is None:
            raise UdrError("order 'random' needs a seeded generator")
        return [ranked[i] for i in rng.permutation(len(ranked))]
    raise UdrError(f"bad parameter order: {order!r} (expected one of {', '.join(ORDERS)})")


def prompt_text(
    task: Task,
    instruction: str | None,
    demos: Sequence[tuple[str, str]],
    query_input: str,
    *,
    order: Order = "ascending",
    rng: np.random.Generator | None = None,
) -> str:
    """The prompt as text, without a token budget: every one of `demos` ((input, answer), most similar
    first) in `order`, then the query; ready to send to an LM."""
    chosen = order_demonstrations(list(range(len(demos))), order, rng)
    lines = "".join(demonstration_line(task, *demos[j]) for j in chosen)
    return (instruction or "") + lines + task.render_query(query_input)


def leading_special_tokens(tokenizer) -> tuple[int, ...]:
    """The ids a tokenizer adds before any text (e.g. a BOS token), found by encoding with and without them."""
    bare = list(tokenizer("a", add_special_tokens=False)["input_ids"])
    full = list(tokenizer("a", add_special_tokens=True)["input_ids"])
    for k in range(len(full) - len(bare) + 1):
        if full[k : k + len(bare)] == bare:
            return tuple(full[:k])
    return ()


@dataclass
class PromptBuilder:
    """The prompt layout in token ids: texts are tokenised once and concatenated.

    Every prompt starts with `start`, the tokens the tokenizer itself puts before a text (Gemma's
    <bos>; nothing for SmolLM2); truncation keeps them and cuts the body's beginning.
    """

    tokenizer: object
    task: Task
    instruction: str | None
    max_length: int
    _cache: dict = field(default_factory=dict)
    _start: tuple[int, ...] | None = None

    def encode(self, text: str) -> tuple[int, ...]:
        if text not in self._cache:
            self._cache[text] = tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return self._cache[text]

    @property
    def start(self) -> tuple[int, ...]:
        if self._start is None:
            self._start = leading_special_tokens(self.tokenizer)
        return self._start

    @property
    def head(self) -> tuple[int, ...]:
        """The instruction's tokens (nothing without one)."""
        return self.encode(self.instruction) if self.instruction else ()

    def framed(self, body: Sequence[int], room: int) -> tuple[int, ...]:
        """`start` + the end of `body`, in at most `room` tokens: truncation cuts the body's
        beginning (the query, at its end, survives), never the tokenizer's start tokens."""
        keep = room - len(self.start)
        body = tuple(body)
        return self.start + (body[len(body) - keep :] if len(body) > keep else body)

    def demonstration(self, input: str, answer: str) -> tuple[int, ...]:
        return self.encode(demonstration_line(self.task, input, answer))

    def query(self, input: str) -> tuple[int, ...]:
        return self.encode(self.task.render_query(input))

    def scoring_item(self, query: dict, candidate: dict) -> ScoringItem:
        """The LM-feedback item of a (query, candidate) pair of prepared rows: the prompt with the one
        demonstration and the query, and the continuations to score (the gold answer for generation,
        every label or choice otherwise), cut to `max_length`."""
        demonstration = self.head + self.demonstration(candidate["input"], candidate["target"])
        prompt = demonstration + self.query(query["input"])
        if self.task.generation:
            conts = (self.encode(query["target"]),)
            gold = 0
        else:
            if not query["choices"]:
                raise UdrError(f"query id {query['id']}: empty label set (no choices to score against)")
            conts = tuple(self.encode(c) for c in query["choices"])
            gold = int(query["label"])
        if any(len(c) == 0 for c in conts):
            raise UdrError(f"query id {query['id']}: an answer tokenises to nothing")
        room = self.max_length - max(len(c) for c in conts)
        if room - len(self.start) < 1:
            raise UdrError(f"query id {query['id']}: the answer alone exceeds score.max_length={self.max_length}")
        # A long prompt keeps its end: the query and the demonstration's tail. Uncut, its start and
        # demonstration are the same for every query of this candidate (`shared`).
        framed = self.framed(prompt, room)
        shared = len(self.start) + len(demonstration) if len(framed) == len(self.start) + len(prompt) else 0
        return ScoringItem(int(query["id"]), int(candidate["id"]), framed, conts, gold, shared)
