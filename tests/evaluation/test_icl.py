"""udr.evaluation.icl: prompt assembly respects the token budget and the order parameter."""

from __future__ import annotations

import pytest

from udr.data.tasks import get_task
from udr.errors import UdrError
from udr.evaluation.icl import assemble, select_demonstrations
from udr.lm.prompt import PromptBuilder

TASK = get_task("sst2")  # the default template: "{input}\t{answer}"


def encode(text: str) -> tuple[int, ...]:
    return tuple(text.encode())  # one token per byte


def builder(instruction: str | None) -> PromptBuilder:
    return PromptBuilder(
        lambda text, add_special_tokens=False: {"input_ids": list(encode(text))},
        TASK,
        instruction,
        max_length=10_000,
    )


DEMOS = [(10, "most similar", "a"), (11, "second", "bb"), (12, "third one", "ccc"), (13, "fourth", "d")]


def test_select_keeps_the_longest_prefix_that_fits():
    assert select_demonstrations([5, 5, 5], budget=12, max_demos=None) == 2
    assert select_demonstrations([5, 5, 5], budget=15, max_demos=None) == 3
    assert select_demonstrations([5, 5, 5], budget=15, max_demos=1) == 1
    assert select_demonstrations([20, 1, 1], budget=15, max_demos=None) == 0  # a prefix, not a knapsack
    with pytest.raises(UdrError, match="no room"):
        select_demonstrations([1], budget=-1, max_demos=None)


@pytest.mark.parametrize("context", [30, 45, 60, 200])
def test_assemble_respects_the_budget(context):
    reserve = 5
    p = assemble(
        builder("Do it: "), DEMOS, "query text", context=context, reserve=reserve, max_demos=None, order="ascending"
    )
    assert len(p.token_ids) + reserve <= context
    # the kept demonstrations are the most similar ones, and one more would not have fit
    n = len(p.demo_ids)
    assert set(p.demo_ids) == {d[0] for d in DEMOS[:n]}
    if n < len(DEMOS):
        extra = len(encode(TASK.render(DEMOS[n][1], DEMOS[n][2]) + "\n"))
        assert len(p.token_ids) + extra + reserve > context


def test_assemble_text_and_order():
    p = assemble(builder(None), DEMOS, "q", context=1000, reserve=0, max_demos=2, order="ascending")
    assert p.demo_ids == (11, 10)  # the most similar right before the query
    assert bytes(p.token_ids).decode() == "second\tbb\nmost similar\ta\nq\t"
    p = assemble(builder("I: "), DEMOS, "q", context=1000, reserve=0, max_demos=2, order="descending")
    assert p.demo_ids == (10, 11) and bytes(p.token_ids).decode().startswith("I: most similar\ta\n")


def test_assemble_long_query_keeps_its_end():
    p = assemble(builder(None), DEMOS, "x" * 50 + "END", context=20, reserve=4, max_demos=8, order="ascending")
    assert p.demo_ids == () and len(p.token_ids) == 16 and bytes(p.token_ids).decode().endswith("END\t")


def test_assemble_keeps_the_tokenizers_bos_when_truncating():
    b = PromptBuilder(
        lambda text, add_special_tokens=False: {"input_ids": [999] * add_special_tokens + list(encode(text))},
        TASK,
        None,
        max_length=10_000,
    )
    prompt = assemble(b, DEMOS, "q" * 30, context=20, reserve=2, max_demos=None, order="ascending")
    assert prompt.token_ids[0] == 999 and len(prompt.token_ids) == 18 and prompt.demo_ids == ()
    assert prompt.token_ids[1:] == encode("q" * 30 + "\t")[-17:]
