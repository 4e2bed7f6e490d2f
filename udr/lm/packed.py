"""Padding-free scoring: many pairs' tokens packed into long rows, each token attending only to its
own pair's earlier tokens, the LM head only where a continuation token is predicted.

Layout. A row holds units one after the other: a unit is one item (its prompt and the answer prefix
its label set shares, e.g. "Answer:", then each continuation's rest) or a group of items that share a
candidate's demonstration (the shared prefix once, then each item as above after it). A
continuation's last token is a target only and is left out. The tokens of a unit form a tree laid
out depth first, and a token sees the tokens before it in its own segment and in its segment's
ancestors: for every token s, `ends[s]` is the end of the subtree of s's segment, and token t attends
to s iff s <= t < ends[s]. Each continuation thus sees its prompt (and the shared prefix) and its own
earlier tokens at the positions it would have right after the prompt, as in the padded path
(:class:`udr.lm.scorer.LMScorer`), so the scores are the same up to rounding.

Attention (through transformers' attention interface, as :mod:`udr.lm.ragged` does): on CUDA,
FlexAttention with a block-sparse mask built from `ends` (128 x 128 blocks that no token pair of the
mask touches are skipped, so a row costs about what its pairs' own attention costs); elsewhere, or
where FlexAttention fails to compile, SDPA with a dense boolean mask on rows of at most
:data:`DENSE_ROW_TOKENS` tokens (CPU tests and comparisons). Rows are padded to one of a few lengths
(the row budget, its half, its quarter) so that the compiled attention sees few shapes.

Used for the models :func:`udr.lm.ragged.supports_ragged` accepts (Llama-style decoders, `sdpa`
attention, no sliding window). Imports of torch and transformers are inside the functions that use
them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np

from udr.errors import UdrError, first_line
from udr.lm.precision import lm_forward_context
from udr.lm.ragged import attention_implementation, supports_ragged
from udr.lm.scorer import BatchStats, ModelParts, Scorer, ScoringItem, common_prefix, head_log_probs
from udr.util.notice import notice

PACKED = "udr_packed"
ENGINES = ("auto", "padded", "packed")
BLOCK = 128  # FlexAttention's block size, and the unit of the rows' padded lengths
DENSE_ROW_TOKENS = 4096  # rows of the dense-mask attention: its mask and scores grow with the square
HEAD_CHUNK = 4096  # scored positions per LM-head call (fp32 logits of 4096 x a 50k vocabulary: 0.8 GB)


_mask: ContextVar[object | None] = ContextVar("udr_packed_mask", default=None)
_compiled: dict[str, Callable] = {}
_mask_mods: dict[tuple[str, int], tuple[object, Callable]] = {}


# ---------------------------------------------------------------- layout


@dataclass
class Row:
    """One packed row: token ids, positions, subtree ends (see the module doc), and the scored entries:
    the row index whose hidden state predicts each target token, and the continuation it belongs to
    (its index in the flat list of every item's continuations)."""

    ids: np.ndarray
    positions: np.ndarray
    ends: np.ndarray
    scored: np.ndarray
    targets: np.ndarray
    owners: np.ndarray
    real: int  # tokens before the row's padding
    pairs: int


_ARRAYS = ("ids", "positions", "ends", "scored", "targets", "owners")


@dataclass
class _RowLists:
    ids: list = field(default_factory=list)
    positions: list = field(default_factory=list)
    ends: list = field(default_factory=list)
    scored: list = field(default_factory=list)
    targets: list = field(default_factory=list)
    owners: list = field(default_factory=list)
    pairs: int = 0


def _answer_prefix(item: ScoringItem) -> tuple[int, ...]:
    """Leading tokens every continuation of a label set shares (e.g. "Answer:"): they run once, after the prompt."""
    return common_prefix(item.continuations) if len(item.continuations) > 1 else ()


def _item_tokens(item: ScoringItem, shared: int) -> int:
    """Tokens an item puts in a row after its group's `shared` prefix: its prompt rest, its answer
    prefix, and its continuations' rests less their last tokens (targets only)."""
    sh = len(_answer_prefix(item))
    return len(item.prompt) - shared + sh + sum(len(c) - sh - 1 for c in item.continuations)


def _unit_tokens(items: Sequence[ScoringItem], members: Sequence[int], shared: int) -> int:
    return shared + sum(_item_tokens(items[i], shared) for i in members)


def _lay_out(row: _RowLists, items: Sequence[ScoringItem], members: Sequence[int], shared: int, flat_start) -> None:
    """Append a unit (`members`, sharing their first `shared` prompt tokens; 0: one item) to `row`."""
    base = len(row.ids)
    if shared:
        row.ids += items[members[0]].prompt[:shared]
        row.positions += range(shared)
        row.ends += [0] * shared  # the unit's end, set below
    for i in members:
        it = items[i]
        answer = _answer_prefix(it)
        head = it.prompt[shared:] + answer  # the item's own segment: its prompt rest and answer prefix
        start, after = len(row.ids), len(it.prompt) + len(answer)  # `after`: the position after it
        row.ids += head
        row.positions += range(shared, after)
        row.ends += [start + _item_tokens(it, shared)] * len(head)
        last = len(row.ids) - 1  # its hidden state predicts every continuation's next token
        answer_scored = range(last - len(answer), last)
        for c, cont in enumerate(it.continuations):
            owner = flat_start[i] + c
            row.scored += answer_scored  # the answer prefix's log p counts for every continuation
            row.targets += answer
            # A continuation's last token is only a target: its inputs are the others.
            tail = cont[len(answer) :]
            begin, inputs = len(row.ids), tail[:-1]
            row.ids += inputs
            row.positions += range(after, after + len(inputs))
            row.ends += [begin + len(inputs)] * len(inputs)
            row.scored += [last, *range(begin, begin + len(inputs))]
            row.targets += tail
            row.owners += [owner] * len(cont)
        row.pairs += 1
    if shared:
        row.ends[base : base + shared] = [len(row.ids)] * shared


def padded_length(n: int, capacity: int) -> int:
    """The length a row of `n` tokens is padded to for the compiled attention: the smallest of the
    capacity's quarter, half and whole (multiples of :data:`BLOCK`) that holds it; a longer row (one
    unit over the budget) a multiple of 1024."""
    if n > capacity:
        return -(-n // 1024) * 1024
    for size in (capacity // 4, capacity // 2, capacity):
        size = -(-size // BLOCK) * BLOCK
        if n <= size:
            return size
    return capacity


def pack_rows(
    items: Sequence[ScoringItem],
    groups: Sequence[Sequence[int]],
    capacity: int,
    *,
    pad_id: int,
    pad_to_blocks: bool,
) -> list[Row]:
    """Every item's tokens in rows of at most `capacity` tokens (a unit over it gets a row alone):
    the items of each of `groups` (indices into `items`, sharing their first `shared` prompt tokens)
    as one unit, every other item as its own. Units go largest first, each into the current row
    while it fits. With `pad_to_blocks` rows are padded to :func:`padded_length` (padding tokens see
    only themselves)."""
    flat_start = np.concatenate([[0], np.cumsum([len(it.continuations) for it in items])]).tolist()
    in_group = {i for g in groups for i in g}
    units = [(list(g), items[g[0]].shared) for g in groups] + [([i], 0) for i in range(len(items)) if i not in in_group]
    sizes = [_unit_tokens(items, m, s) for m, s in units]
    order = sorted(range(len(units)), key=lambda u: (-sizes[u], units[u][0][0]))
    rows, current, used = [], _RowLists(), 0
    for u in order:
        if current.ids and used + sizes[u] > capacity:
            rows.append(current)
            current, used = _RowLists(), 0
        _lay_out(current, items, *units[u], flat_start)
        used += sizes[u]
    if current.ids:
        rows.append(current)
    return [_finish(r, capacity, pad_id, pad_to_blocks) for r in rows]


def _finish(row: _RowLists, capacity: int, pad_id: int, pad_to_blocks: bool) -> Row:
    real = len(row.ids)
    width = padded_length(real, capacity) if pad_to_blocks else real
    ids = np.full(width, pad_id, dtype=np.int64)
    ids[:real] = row.ids
    positions = np.zeros(width, dtype=np.int64)
    positions[:real] = row.positions
    ends = np.arange(1, width + 1, dtype=np.int64)  # padding: itself only
    ends[:real] = row.ends
    return Row(
        ids,
        positions,
        ends,
        np.asarray(row.scored, dtype=np.int64),
        np.asarray(row.targets, dtype=np.int64),
        np.asarray(row.owners, dtype=np.int64),
        real,
        row.pairs,
    )


# ---------------------------------------------------------------- masks and attention


def dense_mask(ends):
    """The (1, 1, L, L) boolean mask of a row: token t attends to s iff s <= t < ends[s]."""
    import torch

    ar = torch.arange(ends.shape[0], device=ends.device)
    return ((ar[None, :] <= ar[:, None]) & (ar[:, None] < ends[None, :]))[None, None]


def block_mask(ends, mask_mod):
    """The FlexAttention BlockMask of a row (length a multiple of :data:`BLOCK`) from its `ends`, computed
    per block without the dense mask: a key block j < query block i is full when all its tokens' ends
    pass the query block, skipped when none reaches it; diagonal blocks are partial (causal)."""
    import torch
    from torch.nn.attention.flex_attention import BlockMask

    n = ends.shape[0]
    nb = n // BLOCK
    per_block = ends.view(nb, BLOCK)
    q_start = torch.arange(nb, device=ends.device)[:, None] * BLOCK
    kv = torch.arange(nb, device=ends.device)
    before = kv[None, :] < kv[:, None]
    full = before & (per_block.min(1).values[None, :] >= q_start + BLOCK)
    partial = (before & (per_block.max(1).values[None, :] > q_start) & ~full) | (kv[None, :] == kv[:, None])

    def listed(m):
        count = m.sum(-1, dtype=torch.int32)[None, None]
        index = torch.argsort(m.to(torch.int8), dim=-1, descending=True, stable=True).to(torch.int32)[None, None]
        return count, index

    return BlockMask.from_kv_blocks(
        *listed(partial), *listed(full), BLOCK_SIZE=BLOCK, mask_mod=mask_mod, seq_lengths=(n, n)
    )


def _mask_mod(ends):
    """The mask function of rows of this length on this device. It reads a buffer kept per (device,
    length), refilled for each row, rather than capturing each row's `ends`: the compiled attention then
    meets the same function and tensor every time, in every scorer, and compiles once per row length."""
    key = (str(ends.device), ends.shape[0])
    if key not in _mask_mods:
        buffer = ends.clone()

        def mask_mod(b, h, q, kv):
            return (kv <= q) & (q < buffer[kv])

        _mask_mods[key] = (buffer, mask_mod)
    buffer, mask_mod = _mask_mods[key]
    buffer.copy_(ends)
    return mask_mod


def _flex(device_type: str):
    """flex_attention, compiled on CUDA (uncompiled it materialises every score: CPU tests only)."""
    if device_type not in _compiled:
        import torch
        from torch.nn.attention.flex_attention import flex_attention

        _compiled[device_type] = (
            torch.compile(flex_attention, dynamic=False) if device_type == "cuda" else flex_attention
        )
    return _compiled[device_type]


def _packed_attention(module, query, key, value, attention_mask, **kwargs):
    """The attention of a packed row: its mask (set by :meth:`PackedScorer._forward`) restricts each
    token to its own pair's tree. Returns (1, L, heads, d) as transformers' attention functions do."""
    import torch

    mask = _mask.get()
    if mask is None:
        raise RuntimeError("the packed attention runs only inside udr.lm.packed.PackedScorer")
    if isinstance(mask, torch.Tensor):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, mask, **kwargs)
    # Under bf16 autocast the rotary step leaves queries and keys in fp32 and values in bf16; SDPA
    # casts them under autocast, FlexAttention (not an autocast op) needs one dtype.
    dtype = value.dtype
    out = _flex(query.device.type)(
        query.to(dtype),
        key.to(dtype),
        value,
        block_mask=mask,
        scale=kwargs.get("scaling"),
        enable_gqa=query.shape[1] != key.shape[1],
    )
    return out.transpose(1, 2).contiguous(), None


# ---------------------------------------------------------------- the scorer


class PackedScorer(ModelParts):
    """Summed log-likelihoods of continuations after prompts, from packed rows (see the module doc): the
    packed engine (:class:`udr.lm.scorer.Scorer`).

    `row_tokens`: the tokens of a row (the scoring stage's `score.batch_tokens`); `attention`: flex,
    sdpa (dense mask) or auto (flex on CUDA, sdpa elsewhere)."""

    def __init__(self, model, *, bf16: bool = False, pad_id: int = 0, row_tokens: int = 8192, attention: str = "auto"):
        if not supports_packed(model):
            raise ValueError(f"the packed scorer does not support this model ({describe(model)})")
        if attention not in ("auto", "flex", "sdpa"):
            raise ValueError(f"attention is auto, flex or sdpa, not {attention!r}")
        super().__init__(model, bf16=bf16, pad_id=pad_id)
        self.row_tokens = row_tokens
        self.attention = ("flex" if self.device.type == "cuda" else "sdpa") if attention == "auto" else attention
        self._flex_tried = False

    @property
    def capacity(self) -> int:
        """Tokens per row for the current attention."""
        if self.attention == "flex":
            return max(BLOCK, -(-self.row_tokens // BLOCK) * BLOCK)
        return min(self.row_tokens, DENSE_ROW_TOKENS)

    engine = "packed"

    def score_all(
        self,
        items: Sequence[ScoringItem],
        groups: Sequence[Sequence[int]],
        batch_tokens: int,
        on_batch: Callable[[BatchStats], None] | None = None,
    ) -> tuple[list[list[float]], BatchStats]:
        """:meth:`udr.lm.scorer.Scorer.score_all`: every item in packed rows (:meth:`score`), whose size
        `row_tokens` was set when the scorer was made (from the same budget: `batch_tokens` is not read)."""
        return self.score(items, groups, on_row=on_batch)

    def score_batch(self, items: Sequence[ScoringItem]) -> tuple[list[list[float]], BatchStats]:
        """Summed log p(continuation | prompt) for every continuation of every item (as
        :meth:`udr.lm.scorer.LMScorer.score_batch`)."""
        return self.score(items)

    def score(
        self,
        items: Sequence[ScoringItem],
        groups: Sequence[Sequence[int]] = (),
        on_row: Callable[[BatchStats], None] | None = None,
    ) -> tuple[list[list[float]], BatchStats]:
        """Summed log p(continuation | prompt) for every continuation of every item, in their order.
        The items of each of `groups` (indices) share their first `shared` prompt tokens, which run once.
        `on_row` gets each row's token accounting as it is queued."""
        import torch

        _check_groups(items, groups)
        if not items:
            return [], BatchStats()
        n_flat = sum(len(it.continuations) for it in items)
        totals = torch.zeros(n_flat, dtype=torch.float64, device=self.device)
        stats = BatchStats()
        rows = self._rows(items, groups)
        with lm_forward_context(self.device.type, self.bf16):
            for row, arrays in zip(rows, self._upload(rows)):
                try:
                    lp = self._row_log_probs(row, arrays)
                except Exception as exc:
                    # FlexAttention compiles at its first row (Triton, a C compiler): where that fails,
                    # the rows run again with dense masks rather than the run failing.
                    if self.attention != "flex" or self._flex_tried:
                        raise
                    notice(f"packed scoring: FlexAttention failed ({first_line(exc)}); using SDPA with dense masks")
                    self.attention = "sdpa"
                    return self.score(items, groups, on_row)
                self._flex_tried = True
                totals.index_add_(0, arrays["owners"], lp.double())
                row_stats = BatchStats(row.real, len(row.ids) - row.real, row.pairs)
                stats.add(row_stats)
                if on_row:
                    on_row(row_stats)
        values = totals.cpu().tolist()  # the one wait for the device
        out, start = [], 0
        for it in items:
            out.append(values[start : start + len(it.continuations)])
            start += len(it.continuations)
        return out, stats

    def _rows(self, items, groups) -> list[Row]:
        return pack_rows(items, groups, self.capacity, pad_id=self.pad_id, pad_to_blocks=self.attention == "flex")

    def _upload(self, rows: list[Row]) -> list[dict]:
        """Every row's arrays on the device, in one transfer: a blocking copy per row would wait for the
        rows before it to finish, and the host could no longer queue a row while the device runs one."""
        import torch

        parts = [getattr(row, name) for row in rows for name in _ARRAYS]
        flat = torch.from_numpy(np.concatenate(parts))
        if self.device.type == "cuda":
            flat = flat.pin_memory().to(self.device, non_blocking=True)
        views = flat.split([len(p) for p in parts])
        n = len(_ARRAYS)
        return [dict(zip(_ARRAYS, views[k * n : (k + 1) * n])) for k in range(len(rows))]

    def _row_log_probs(self, row: Row, arrays: dict):
        """log p of each scored target of `row` (a device tensor, in the row's order)."""
        import torch

        hidden = self._forward(arrays)
        scored, targets = arrays["scored"], arrays["targets"]
        parts = [
            head_log_probs(self.head, self.softcap, hidden[scored[s : s + HEAD_CHUNK]], targets[s : s + HEAD_CHUNK])
            for s in range(0, len(row.scored), HEAD_CHUNK)
        ]
        return torch.cat(parts) if parts else torch.zeros(0, device=self.device)

    def _forward(self, arrays: dict):
        """The decoder's (L, hidden) states of a row under its packed mask."""
        ends = arrays["ends"]
        mask = block_mask(ends, _mask_mod(ends)) if self.attention == "flex" else dense_mask(ends)
        token = _mask.set(mask)
        try:
            with attention_implementation(self.decoder.config, PACKED, _packed_attention):
                return self.decoder(
                    input_ids=arrays["ids"][None], position_ids=arrays["positions"][None], use_cache=False
                ).last_hidden_state[0]
        finally:
            _mask.reset(token)


def _check_groups(items, groups) -> None:
    for group in groups:
        n = items[group[0]].shared
        first = items[group[0]].prompt[:n]
        if not 0 < n < min(len(items[i].prompt) for i in group) or any(
            items[i].shared != n or items[i].prompt[:n] != first for i in group
        ):
            raise ValueError("packed scoring: the items of a group must share a proper prompt prefix")


def supports_packed(model) -> bool:
    """Whether `model` can score packed (the models the ragged prefill runs)."""
    return supports_ragged(model)


def describe(model) -> str:
    config = model.config
    return f"model type {getattr(config, 'model_type', '?')}, attention {getattr(config, '_attn_implementation', '?')}"


def resolve_engine(engine: str, model, setting: str = "score.engine") -> str:
    """`padded` or `packed` for `engine` (auto: packed on CUDA where the model supports it, padded
    elsewhere, so CPU scores keep their bits); an explicit `packed` the model cannot run is a one-line error."""
    if engine not in ENGINES:
        raise UdrError(f"{setting}={engine}: expected one of {', '.join(ENGINES)}")
    device = next(model.parameters()).device
    if engine == "auto":
        return "packed" if device.type == "cuda" and supports_packed(model) else "padded"
    if engine == "packed" and not supports_packed(model):
        raise UdrError(
            f"{setting}=packed: the LM has no packed path ({describe(model)}; Llama-style decoders with sdpa "
            f"attention and no sliding window only); use {setting}=auto or padded"
        )
    return engine


def make_scorer(
    engine: str, model, *, bf16: bool, pad_id: int, batch_tokens: int, setting: str = "score.engine"
) -> Scorer:
    """The scorer `engine` resolves to (:func:`resolve_engine`; the one place an engine is chosen): an
    :class:`udr.lm.scorer.LMScorer` or a :class:`PackedScorer` whose rows hold `batch_tokens` tokens."""
    from udr.lm.scorer import LMScorer

    if resolve_engine(engine, model, setting) == "packed":
        return PackedScorer(model, bf16=bf16, pad_id=pad_id, row_tokens=batch_tokens)
    return LMScorer(model, bf16=bf16, pad_id=pad_id)
