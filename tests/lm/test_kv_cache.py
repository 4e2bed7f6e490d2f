"""udr.lm.kv_cache: appending into reserved room gives DynamicCache's keys and values, row selection
and reordering included, and the attention on top of it the same results bitwise."""

from __future__ import annotations

import torch
from transformers import DynamicCache, MistralConfig
from transformers.cache_utils import DynamicLayer

from tests.tiny_models import tiny_llama
from udr.lm.kv_cache import ReservedLayer, cache_keyword, reserved_cache
from udr.lm.scorer import pad_sequences


def _states(batch, length, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 2, length, 8, generator=g), torch.randn(batch, 2, length, 8, generator=g)


def test_appends_past_the_room_and_row_selection_match_dynamic_layer():
    reserved, plain = ReservedLayer(room=3), DynamicLayer()
    steps = [_states(4, 5, 0)] + [_states(4, 1, s) for s in range(1, 6)]  # 5 steps: past the room of 3
    for i, (k, v) in enumerate(steps):
        got, want = reserved.update(k, v), plain.update(k, v)
        assert all(torch.equal(g, w) for g, w in zip(got, want))
        if i == 2:
            keep = torch.tensor([0, 2, 3])
            reserved.batch_select_indices(keep)
            plain.batch_select_indices(keep)
            steps[3:] = [(k[:3], v[:3]) for k, v in steps[3:]]
    order = torch.tensor([2, 0, 1])
    reserved.reorder_cache(order)
    plain.reorder_cache(order)
    assert torch.equal(reserved.keys, plain.keys) and torch.equal(reserved.values, plain.values)
    assert reserved.get_seq_length() == plain.get_seq_length() == 10


def test_decoding_on_the_reserved_cache_is_bitwise_the_dynamic_caches():
    model = tiny_llama(seed=3)
    ids, mask = pad_sequences([[5, 9, 11, 3, 7], [40, 41]], 256, "cpu", left=True)
    positions = (mask.cumsum(-1) - 1).masked_fill_(mask == 0, 0)
    out = {}
    caches = {"reserved": reserved_cache(model.config, room=2), "plain": DynamicCache(config=model.config)}
    for name, cache in caches.items():
        x, m, p, logits = ids, mask, positions, []
        with torch.inference_mode():
            for _ in range(4):  # the prompt, then 3 single-token steps (one past the room)
                step = model(input_ids=x, attention_mask=m, position_ids=p, **{cache_keyword(): cache}, use_cache=True)
                logits.append(step.logits[:, -1])
                x = step.logits[:, -1].argmax(-1, keepdim=True)
                m = torch.cat([m, m.new_ones((2, 1))], dim=1)
                p = p[:, -1:] + 1
        out[name] = torch.stack(logits)
    assert torch.equal(out["reserved"], out["plain"])


def test_models_with_sliding_window_layers_get_a_plain_cache():
    config = MistralConfig(
        vocab_size=10, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=16, sliding_window=4,
    )  # fmt: skip
    assert not any(isinstance(layer, ReservedLayer) for layer in reserved_cache(config, room=2).layers)
    assert all(isinstance(layer, ReservedLayer) for layer in reserved_cache(tiny_llama().config, room=2).layers)
