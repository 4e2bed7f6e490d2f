"""A key/value cache with room reserved for what comes next.

transformers' `DynamicCache` appends by concatenation, which copies a layer's whole cache each time:
at every decode step of generation, and once for the label continuations that follow a batch of
prompts. Here each layer writes into memory allocated once with `room` more positions than its first
update; the keys and values handed to attention are views of it, with the same values and shapes as
the concatenated ones. Import lazily: it subclasses a transformers class.

Imports of transformers.masking_utils are inside the functions that use them, where a transformers release without
it is told apart.
"""

from __future__ import annotations

import functools
import inspect

from transformers.cache_utils import DynamicCache, DynamicLayer


class ReservedLayer(DynamicLayer):
    """A `DynamicLayer` whose appends write into preallocated room (it grows by doubling when full)."""

    def __init__(self, room: int):
        super().__init__()
        self.room = room
        self._length = 0

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self._keys = self._allocate(key_states, key_states.shape[-2] + self.room)
            self._values = self._allocate(value_states, value_states.shape[-2] + self.room)
        end = self._length + key_states.shape[-2]
        if end > self._keys.shape[-2]:
            self._keys = self._grown(self._keys, end)
            self._values = self._grown(self._values, end)
        self._keys[:, :, self._length : end] = key_states
        self._values[:, :, self._length : end] = value_states
        self._length = end
        self._expose()
        return self.keys, self.values

    def batch_select_indices(self, indices) -> None:
        if self._length > 0:
            self._keys, self._values = self._keys[indices, ...], self._values[indices, ...]
            self._expose()

    def reorder_cache(self, beam_idx) -> None:
        if self._length > 0:
            self._keys = self._keys.index_select(0, beam_idx.to(self._keys.device))
            self._values = self._values.index_select(0, beam_idx.to(self._values.device))
            self._expose()

    def _expose(self) -> None:
        self.keys = self._keys[:, :, : self._length]
        self.values = self._values[:, :, : self._length]

    @staticmethod
    def _allocate(like, length: int):
        batch, heads, _, dim = like.shape
        return like.new_empty((batch, heads, length, dim))

    def _grown(self, buffer, needed: int):
        bigger = self._allocate(buffer, max(needed, 2 * buffer.shape[-2]))
        bigger[:, :, : self._length] = buffer[:, :, : self._length]
        return bigger


def reserved_cache(config, room: int) -> DynamicCache:
    """An empty cache for `config`'s decoder whose layers reserve `room` positions after their first
    update; models with other layer kinds (sliding windows) get a plain `DynamicCache`."""
    cache = DynamicCache(config=config)
    if all(type(layer) is DynamicLayer for layer in cache.layers):
        cache.layers = [ReservedLayer(room) for _ in cache.layers]
    return cache


@functools.cache
def cache_keyword() -> str:
    """The keyword this transformers takes a key/value cache by in decoder forwards and
    `create_causal_mask`: `cache` in recent releases (where `past_key_values` is deprecated), else
    `past_key_values`."""
    try:
        from transformers.masking_utils import create_causal_mask
    except ImportError:
        return "past_key_values"
    return "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"
