"""udr.lm.ragged: the padded batch's forward computed on its real tokens only gives the padded forward's
hidden states and key/value cache; the scorer and the generator give the same results with it."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from tests.tiny_models import tiny_llama
from udr.lm.ragged import decoder_forward, supports_ragged
from udr.lm.scorer import LMScorer, ScoringItem, pad_sequences

PROMPTS = [[5, 9, 11, 3, 7, 200, 17], [40, 41], [8, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109], [77]]


@pytest.fixture(scope="module")
def model():
    return tiny_llama(seed=5)


def test_the_tiny_llama_takes_the_ragged_path(model):
    assert supports_ragged(model)


@pytest.mark.parametrize("left", [False, True])
def test_hidden_states_and_cache_equal_the_padded_forward(model, left):
    decoder = model.get_decoder()
    ids, mask = pad_sequences(PROMPTS, 256, "cpu", left=left)
    positions = (mask.cumsum(-1) - 1).masked_fill_(mask == 0, 0) if left else None
    with torch.inference_mode():
        padded_cache, ragged_cache = DynamicCache(config=model.config), DynamicCache(config=model.config)
        padded = decoder_forward(decoder, ids, mask, position_ids=positions, cache=padded_cache, ragged=False)
        ragged = decoder_forward(decoder, ids, mask, position_ids=positions, cache=ragged_cache, ragged=True)
    real = mask.bool()
    assert torch.allclose(ragged[real], padded[real], atol=1e-5, rtol=0)
    assert not ragged[~real].any()  # padding rows are zeros, never read
    for layer in range(model.config.num_hidden_layers):
        got, want = ragged_cache.layers[layer], padded_cache.layers[layer]
        assert got.keys.shape == want.keys.shape and got.values.shape == want.values.shape
        keep = real[:, None, :, None].expand_as(want.values)
        assert torch.allclose(got.keys[keep], want.keys[keep], atol=1e-5)
        assert torch.allclose(got.values[keep], want.values[keep], atol=1e-5)


def test_the_ragged_attention_is_not_left_on(model):
    decoder = model.get_decoder()
    ids, mask = pad_sequences(PROMPTS, 256, "cpu")
    with torch.inference_mode():
        decoder_forward(decoder, ids, mask)
    assert model.config._attn_implementation == "sdpa"


def test_scores_equal_the_padded_scorer(model):
    items = [
        ScoringItem(i, 0, tuple(p), conts, 0)
        for i, (p, conts) in enumerate(
            zip(PROMPTS, [((1, 2),), ((3,), (4, 5, 6)), ((7, 8, 9),), ((10,), (11,), (12, 13))])
        )
    ]
    ragged_scorer = LMScorer(model, pad_id=256)
    padded_scorer = LMScorer(model, pad_id=256)
    padded_scorer._ragged = False
    for subset in (items, [it for it in items if len(it.continuations) == 1]):
        got, _ = ragged_scorer.score_batch(subset)
        want, _ = padded_scorer.score_batch(subset)
        for g, w in zip(got, want):
            assert g == pytest.approx(w, abs=1e-5)


def test_row_groups_are_for_cpus_only():
    from udr.lm.ragged import CPU_CHUNK_TOKENS, default_chunk_tokens

    assert default_chunk_tokens(torch.device("cpu")) == CPU_CHUNK_TOKENS
    assert default_chunk_tokens(torch.device("cuda")) is None  # a GPU runs the whole batch at once
    assert LMScorer(tiny_llama(seed=5), pad_id=256)._chunk_tokens == CPU_CHUNK_TOKENS


def test_row_groups_keep_order_and_budget():
    from udr.lm.ragged import row_groups

    assert row_groups([3, 4, 2, 9, 1], 7) == [slice(0, 2), slice(2, 3), slice(3, 4), slice(4, 5)]
    assert row_groups([3, 4], 100) == [slice(0, 2)]
    assert row_groups([50], 7) == [slice(0, 1)]  # a row over the budget is a group alone


@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("bf16", [False, True])
def test_row_groups_give_the_whole_batch_forward(model, left, bf16):
    """Groups of rows at the batch's width compute what the whole batch does: bitwise under bf16
    autocast (the default run's scores rest on it), to float rounding in fp32."""
    decoder = model.get_decoder()
    ids, mask = pad_sequences(PROMPTS, 256, "cpu", left=left)
    positions = (mask.cumsum(-1) - 1).masked_fill_(mask == 0, 0) if left else None
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        whole_cache, grouped_cache = DynamicCache(config=model.config), DynamicCache(config=model.config)
        whole = decoder_forward(decoder, ids, mask, position_ids=positions, cache=whole_cache)
        grouped = decoder_forward(decoder, ids, mask, position_ids=positions, cache=grouped_cache, chunk_tokens=9)
    pairs = [(grouped, whole)]
    for g, w in zip(grouped_cache.layers, whole_cache.layers):
        pairs += [(g.keys, w.keys), (g.values, w.values)]
    for got, want in pairs:
        assert got.shape == want.shape
        if bf16:
            assert torch.equal(got, want)
        else:
            assert torch.allclose(got, want, atol=1e-5, rtol=0)
