"""The transformers internals the LM engine (udr/lm/ragged.py, udr/lm/kv_cache.py) plugs into, checked by
name and signature: a transformers release that moves or changes one fails here, naming it, before any
score could silently change. The scores themselves are checked against plain forwards in test_ragged.py
and test_kv_cache.py; pyproject.toml bounds transformers to the tested releases."""

from __future__ import annotations

import inspect

import pytest


def _params(function) -> set[str]:
    return set(inspect.signature(function).parameters)


def test_the_attention_interface_takes_a_registered_attention():
    """ragged.py registers its attention under a name and checks the registry before registering."""
    from transformers import AttentionInterface

    assert callable(getattr(AttentionInterface, "register", None)), "AttentionInterface.register is gone"
    mapping = getattr(AttentionInterface, "_global_mapping", None)
    assert mapping is not None and hasattr(mapping, "__contains__"), "AttentionInterface._global_mapping is gone"
    assert "sdpa" in mapping, "the sdpa attention is no longer registered under 'sdpa'"


def test_sdpa_attention_forward_takes_what_the_ragged_attention_passes():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    params = _params(sdpa_attention_forward)
    missing = {"module", "query", "key", "value", "attention_mask"} - params
    assert not missing, f"sdpa_attention_forward lost {sorted(missing)}"
    assert any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(sdpa_attention_forward).parameters.values()
    )


def test_create_causal_mask_takes_what_the_decoder_forward_passes():
    from transformers.masking_utils import create_causal_mask

    from udr.lm.kv_cache import cache_keyword

    missing = {"config", "inputs_embeds", "attention_mask", "position_ids", cache_keyword()} - _params(
        create_causal_mask
    )
    assert not missing, f"create_causal_mask lost {sorted(missing)}"


@pytest.mark.parametrize("name", ["is_initialized", "keys", "values"])
def test_a_dynamic_layer_has_what_the_reserved_layer_uses(name):
    """kv_cache.ReservedLayer subclasses DynamicLayer: it overrides update, batch_select_indices and
    reorder_cache, calls lazy_initialization, and exposes keys / values."""
    import torch
    from transformers.cache_utils import DynamicLayer

    for method in ("update", "lazy_initialization", "batch_select_indices", "reorder_cache"):
        assert callable(getattr(DynamicLayer, method, None)), f"DynamicLayer.{method} is gone"
    layer = DynamicLayer()
    states = torch.zeros(1, 2, 3, 4)
    layer.update(states, states)
    assert hasattr(layer, name), f"DynamicLayer has no {name} after an update"


def test_a_dynamic_cache_is_made_from_a_config_with_one_layer_per_decoder_layer():
    """reserved_cache replaces the cache's `layers` list; ragged.py joins groups' caches layer by layer."""
    from transformers import DynamicCache, LlamaConfig

    config = LlamaConfig(num_hidden_layers=3, hidden_size=16, num_attention_heads=2, intermediate_size=32)
    cache = DynamicCache(config=config)
    assert isinstance(getattr(cache, "layers", None), list) and len(cache.layers) == 3, "DynamicCache.layers changed"
    assert "layer_idx" in _params(cache.update), "DynamicCache.update lost layer_idx"


def test_an_attention_without_a_mask_function_gets_no_mask():
    """ragged.py and packed.py register attentions with no mask function: the decoder must then build
    no mask (packed.py's rows would otherwise get a dense causal mask of their whole length)."""
    import torch
    from transformers import LlamaConfig
    from transformers.masking_utils import create_causal_mask

    from udr.lm.kv_cache import cache_keyword
    from udr.lm.packed import PACKED, _packed_attention
    from udr.lm.ragged import attention_implementation

    config = LlamaConfig(num_hidden_layers=1, hidden_size=16, num_attention_heads=2, intermediate_size=32)
    config._attn_implementation = "sdpa"
    with attention_implementation(config, PACKED, _packed_attention):
        embeds = torch.zeros(1, 5, 16)
        kwargs = {"attention_mask": None, "position_ids": None, cache_keyword(): None}
        assert create_causal_mask(config=config, inputs_embeds=embeds, **kwargs) is None
    assert config._attn_implementation == "sdpa"
