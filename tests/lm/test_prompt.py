"""udr.lm.prompt: the scoring item's layout, truncation that keeps the query and the tokenizer's start
tokens, and the demonstration orders."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tiny_models import byte_tokenizer
from udr.data.tasks import get_task
from udr.errors import UdrError
from udr.lm.prompt import PromptBuilder, leading_special_tokens, order_demonstrations


def test_empty_label_set_fails_clearly():
    builder = PromptBuilder(byte_tokenizer(), get_task("sst2"), None, 512)
    query = {"id": 7, "input": "x", "target": "y", "label": 0, "choices": []}
    with pytest.raises(UdrError, match="query id 7: empty label set"):
        builder.scoring_item(query, {"id": 8, "input": "z", "target": "w"})


def test_prompt_keeps_its_end_when_too_long():
    builder = PromptBuilder(byte_tokenizer(), get_task("break"), None, 40)
    item = builder.scoring_item(
        {"id": 1, "input": "q" * 10, "target": "abc", "label": -1, "choices": []},
        {"id": 2, "input": "d" * 100, "target": "t"},
    )
    assert len(item.prompt) + 3 == 40 and bytes(item.prompt[-11:-1]) != b""  # the query survives at the end
    assert builder.encode("q" * 10 + "\t") == item.prompt[-11:]


def bos_tokenizer(text, add_special_tokens=False):
    """One token per byte, with a BOS (999) when special tokens are asked for, as Gemma's tokenizer does."""
    return {"input_ids": ([999] if add_special_tokens else []) + list(text.encode())}


def test_leading_special_tokens():
    assert leading_special_tokens(bos_tokenizer) == (999,)
    assert leading_special_tokens(byte_tokenizer()) == ()


def test_prompt_starts_with_bos_even_when_truncated():
    builder = PromptBuilder(bos_tokenizer, get_task("break"), None, 40)
    item = builder.scoring_item(
        {"id": 1, "input": "q" * 10, "target": "abc", "label": -1, "choices": []},
        {"id": 2, "input": "d" * 100, "target": "t"},
    )
    assert item.prompt[0] == 999 and len(item.prompt) + 3 == 40
    assert item.prompt[-11:] == builder.encode("q" * 10 + "\t")


def test_order_parameter():
    assert order_demonstrations([1, 2, 3], "ascending") == [3, 2, 1]
    assert order_demonstrations([1, 2, 3], "descending") == [1, 2, 3]
    a = order_demonstrations(list(range(10)), "random", np.random.default_rng(0))
    b = order_demonstrations(list(range(10)), "random", np.random.default_rng(0))
    assert a == b and sorted(a) == list(range(10))
    with pytest.raises(UdrError, match="bad parameter order"):
        order_demonstrations([1], "sideways")
