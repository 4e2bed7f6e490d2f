"""Ragged prefill: a padded batch's decoder forward that computes only its real tokens.

A batch of prompts of different lengths is padded to its longest. Padding tokens cost as much as real
ones in every projection and MLP, yet only the attention sees the padded layout. Here the real tokens
run packed as one sequence (embedding, norms, rotary positions, projections and MLPs are per token),
and at each attention layer they are scattered into the padded layout, attended there with the mask
and key/value cache the padded forward would use, and gathered back. The attention therefore gets
the same query, key and value rows, mask and shapes as the padded forward; only the values in the
padding rows differ (zeros), and those are masked out (their keys) or thrown away (their queries).

So the result equals the padded forward's wherever per-token kernels do not depend on how many rows
they get (measured: bf16 autocast and oneDNN on CPU give bitwise the same evaluation predictions;
fp32 matrix products may round their last bit differently for a different row count, as any change
of batching does). Used for Llama-style decoders (the `sdpa` attention, a rotary position per token,
no sliding window); other models run the padded forward.

On a CPU the packed tokens also run in groups of rows of about :data:`CPU_CHUNK_TOKENS` real tokens,
each group at the batch's full width and with its rows of the batch's mask: every kernel gives a row
the same result whatever the other rows (projections per token, attention per row for a given
width), so this too is the batch's forward (bitwise under bf16 autocast, tested; fp32 products may
round their last bit differently, as above), while the activations stay a few MB instead of
tens or hundreds of MB, which a CPU spends more time allocating and streaming through memory than
computing on (elementwise products of a 10,000-token comv batch ran 7-14x slower per element).

Imports of torch, transformers and udr.lm.kv_cache are inside the functions that use them, to keep the start of
`udr` and of its commands light.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

RAGGED = "udr_ragged_sdpa"
# Model types whose decoder layers attend through transformers' attention interface with rotary
# positions from `position_ids` and pass layer kwargs through (checked against the padded forward in
# tests/lm/test_ragged.py for Llama).
SUPPORTED_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3", "olmo", "olmo2", "granite"})

CPU_CHUNK_TOKENS = 1024

_layout: ContextVar[_Layout | None] = ContextVar("udr_ragged_layout", default=None)


@dataclass
class _Layout:
    batch: int
    width: int
    index: object  # flat positions (row * width + column) of the real tokens, in packed order
    mask: object  # what the padded forward's layers get as their attention mask
    cache: object  # a DynamicCache to fill with the padded keys / values, or None


def has_sliding_layers(config) -> bool:
    """Whether a model config has sliding-window attention layers (they need their own masks)."""
    return getattr(config, "sliding_window", None) is not None or any(
        t != "full_attention" for t in (getattr(config, "layer_types", None) or [])
    )


def supports_ragged(model) -> bool:
    """Whether `model`'s decoder can run :func:`decoder_forward` raggedly (else it runs padded)."""
    config = model.config
    return (
        getattr(config, "model_type", None) in SUPPORTED_MODEL_TYPES
        and getattr(config, "_attn_implementation", None) == "sdpa"
        and not has_sliding_layers(config)
    )


def default_chunk_tokens(device) -> int | None:
    """The real tokens of a row group in :func:`decoder_forward` on `device`: CPUs only (a GPU wants
    the whole batch at once)."""
    return CPU_CHUNK_TOKENS if device.type == "cpu" else None


def row_groups(tokens_per_row: list[int], budget: int) -> list[slice]:
    """Consecutive rows in groups of at most `budget` tokens (a longer row forms a group alone)."""
    groups, start, total = [], 0, 0
    for row, n in enumerate(tokens_per_row):
        if row > start and total + n > budget:
            groups.append(slice(start, row))
            start, total = row, 0
        total += n
    groups.append(slice(start, len(tokens_per_row)))
    return groups


def decoder_forward(
    decoder,
    ids,
    mask,
    *,
    position_ids=None,
    cache=None,
    past_mask=None,
    ragged: bool = True,
    chunk_tokens: int | None = None,
):
    """`decoder(input_ids=ids, attention_mask=mask, position_ids=position_ids, past_key_values=cache,
    use_cache=cache is not None).last_hidden_state` for a padded batch (ids, mask: (B, W); cache: a
    DynamicCache to fill, or None), computed on the real tokens only when `ragged`, then in groups of
    rows of at most `chunk_tokens` real tokens when given. Returns the (B, W, hidden) states; rows of
    padding are zeros in the ragged path.

    A cache that already holds keys and values (B rows, P positions) is continued: `past_mask`
    (B, P) marks its real positions, and the rows run as one group (the groups would split it)."""
    import torch

    from udr.lm.kv_cache import cache_keyword

    if past_mask is not None:
        full_mask = torch.cat([past_mask, mask], dim=1)
        chunk_tokens = None
    else:
        full_mask = mask
    if not ragged:
        use_cache = cache is not None
        return decoder(
            input_ids=ids,
            attention_mask=full_mask,
            position_ids=position_ids,
            **{cache_keyword(): cache},
            use_cache=use_cache,
        ).last_hidden_state
    from transformers.masking_utils import create_causal_mask

    batch, width = ids.shape
    if position_ids is None:  # the decoder's default: 0..W-1 on every row
        position_ids = torch.arange(width, device=ids.device)[None]
    positions = position_ids.expand(batch, width)
    # The mask the padded forward of the whole batch builds (the decoder makes an empty cache itself
    # when use_cache is on); a group of rows gets its rows of it, so its attention is the batch's.
    embeds = torch.empty((batch, width, 0), dtype=decoder.embed_tokens.weight.dtype, device=ids.device)
    layer_mask = create_causal_mask(
        config=decoder.config,
        inputs_embeds=embeds,
        attention_mask=full_mask,
        **{cache_keyword(): cache},
        position_ids=position_ids,
    )
    groups = row_groups(mask.sum(1).tolist(), chunk_tokens) if chunk_tokens else [slice(0, batch)]
    if len(groups) == 1:
        return _packed_forward(decoder, ids, mask, positions, layer_mask, cache)

    from transformers import DynamicCache

    hidden, caches = [], []
    for rows in groups:
        part = None if cache is None else DynamicCache(config=decoder.config)
        rows_mask = layer_mask if layer_mask is None or layer_mask.shape[0] == 1 else layer_mask[rows]
        hidden.append(_packed_forward(decoder, ids[rows], mask[rows], positions[rows], rows_mask, part))
        caches.append(part)
    if cache is not None:  # the groups' keys / values, joined in row order
        for layer in range(len(caches[0].layers)):
            keys = torch.cat([c.layers[layer].keys for c in caches])
            values = torch.cat([c.layers[layer].values for c in caches])
            cache.update(keys, values, layer)
    return torch.cat(hidden)


def _packed_forward(decoder, ids, mask, positions, layer_mask, cache):
    """The real tokens of (ids, mask) as one packed sequence through the decoder; the ragged attention
    attends them in the padded layout with `layer_mask` and fills `cache`."""
    batch, width = ids.shape
    index = mask.reshape(-1).nonzero().squeeze(1)
    token = _layout.set(_Layout(batch, width, index, layer_mask, cache))
    try:
        with attention_implementation(decoder.config, RAGGED, _ragged_attention):
            packed = decoder(
                input_ids=ids.reshape(-1)[index][None],
                position_ids=positions.reshape(-1)[index][None],
                use_cache=False,
            ).last_hidden_state[0]
    finally:
        _layout.reset(token)
    hidden = packed.new_zeros((batch * width, packed.shape[-1]))
    hidden[index] = packed
    return hidden.view(batch, width, -1)


def _ragged_attention(module, query, key, value, attention_mask, **kwargs):
    """The attention function of the packed forward: scatter to the padded layout, attend as the
    padded forward's `sdpa` would, gather back."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    layout = _layout.get()
    if layout is None:
        raise RuntimeError("the ragged attention runs only inside udr.lm.ragged.decoder_forward")

    def padded(x):  # (1, heads, N, d) -> (B, heads, W, d), the padded forward's layout and strides
        heads, dim = x.shape[1], x.shape[3]
        out = x.new_zeros((layout.batch * layout.width, heads, dim))
        out[layout.index] = x[0].transpose(0, 1)
        return out.view(layout.batch, layout.width, heads, dim).transpose(1, 2)

    query, key, value = padded(query), padded(key), padded(value)
    if layout.cache is not None:
        key, value = layout.cache.update(key, value, module.layer_idx)
    out, _ = sdpa_attention_forward(module, query, key, value, layout.mask, **kwargs)  # (B, W, heads, d)
    return out.reshape(layout.batch * layout.width, *out.shape[2:])[layout.index][None], None


@contextmanager
def attention_implementation(config, name: str, function):
    """Within the block, `config`'s layers attend with `function`, registered in transformers'
    attention interface as `name` (a name without a mask function: the decoder builds no mask)."""
    from transformers import AttentionInterface

    if name not in AttentionInterface._global_mapping:
        AttentionInterface.register(name, function)
    before = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = before
