"""Summed log-likelihoods of continuations after prompts, batched, exact and fast: the LM side of
feedback scoring (:mod:`udr.feedback.scoring`) and of label prediction (:mod:`udr.lm.predict`).

Speed (all exact, see tests): prompts are pre-tokenised per row and concatenated; batches are built
from length-sorted sequences under a token budget (small padding); the LM head is applied only at
positions whose next token is scored; for label / choice sets, the shared prompt is run once and its
key/value cache, with room reserved for the continuations (:mod:`udr.lm.kv_cache`), is reused for
every continuation; prompt forwards skip their padding tokens and, on a CPU, run in groups of rows
(:mod:`udr.lm.ragged`).

Imports of torch and udr.lm.kv_cache (transformers) are inside the functions that use them, to keep the start of
`udr` and of its commands light.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from udr.lm.precision import lm_forward_context
from udr.lm.ragged import decoder_forward, default_chunk_tokens, has_sliding_layers, supports_ragged


@dataclass(frozen=True)
class ScoringItem:
    """One (query, candidate) pair, tokenised: a prompt and the continuations to score after it."""

    query_id: int
    candidate_id: int
    prompt: tuple[int, ...]
    continuations: tuple[tuple[int, ...], ...]  # one for generation; the label / choice set otherwise
    gold: int  # index of the gold continuation
    # Leading prompt tokens that depend on the candidate only (start, instruction, demonstration), which
    # every query of the candidate shares; 0 when none are known to be shared (e.g. truncated prompts).
    shared: int = 0

    @property
    def n_tokens(self) -> int:
        return len(self.prompt) + sum(len(c) for c in self.continuations)


@dataclass
class BatchStats:
    """Token accounting: real tokens run through the model, and padding added by batching."""

    tokens: int = 0
    padded: int = 0
    pairs: int = 0

    def add(self, other: BatchStats) -> None:
        self.tokens += other.tokens
        self.padded += other.padded
        self.pairs += other.pairs

    @property
    def padding_fraction(self) -> float:
        total = self.tokens + self.padded
        return self.padded / total if total else 0.0


# ---------------------------------------------------------------- batching


def length_batches(items: Sequence[ScoringItem], batch_tokens: int) -> Iterator[list[int]]:
    """Indices of `items` grouped into batches of similar length whose padded size fits the budget.

    Items are sorted by (length, position), so the batching depends only on the items themselves.
    An item longer than the budget gets a batch of its own.
    """
    order = sorted(range(len(items)), key=lambda i: (items[i].n_tokens, i))
    batch: list[int] = []
    longest = 0
    for i in order:
        n = items[i].n_tokens
        if batch and max(longest, n) * (len(batch) + 1) > batch_tokens:
            yield batch
            batch, longest = [], 0
        batch.append(i)
        longest = max(longest, n)
    if batch:
        yield batch


def prefix_groups(items: Sequence[ScoringItem], batch_tokens: int) -> tuple[list[list[int]], list[int]]:
    """(groups, rest): indices of `items` that share a candidate's prompt prefix (`shared` tokens, the
    same candidate), in groups of at least two whose prompt rests and continuations fit `batch_tokens`
    padded; and the indices of every other item, for the plain batches of :func:`length_batches`."""
    by_prefix: dict[tuple[int, ...], list[int]] = {}
    rest = []
    for i, it in enumerate(items):
        if 0 < it.shared < len(it.prompt):
            by_prefix.setdefault((it.candidate_id, *it.prompt[: it.shared]), []).append(i)
        else:
            rest.append(i)
    groups = []
    for members in by_prefix.values():
        members.sort(key=lambda i: (items[i].n_tokens - items[i].shared, i))
        part: list[int] = []
        for i in members:  # sub-groups of similar rest length under the budget
            n = items[i].n_tokens - items[i].shared
            if part and n * (len(part) + 1) > batch_tokens:
                (groups.append(part) if len(part) > 1 else rest.extend(part))
                part = []
            part.append(i)
        (groups.append(part) if len(part) > 1 else rest.extend(part))
    groups.sort(key=lambda g: (items[g[0]].shared, g[0]))
    return groups, sorted(rest)


def group_batches(items: Sequence[ScoringItem], groups: list[list[int]], batch_tokens: int) -> Iterator[list[int]]:
    """Positions in `groups` batched so that the padded prefixes and the padded rests each fit the
    budget (a group over it forms a batch alone)."""
    batch: list[int] = []
    prefix = rest = members = 0
    for g in range(len(groups)):
        p = items[groups[g][0]].shared
        r = max(items[i].n_tokens - items[i].shared for i in groups[g])
        n = len(groups[g])
        if batch and (max(prefix, p) * (len(batch) + 1) > batch_tokens or max(rest, r) * (members + n) > batch_tokens):
            yield batch
            batch, prefix, rest, members = [], 0, 0, 0
        batch.append(g)
        prefix, rest, members = max(prefix, p), max(rest, r), members + n
    if batch:
        yield batch


# ---------------------------------------------------------------- the model side


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int, device, left: bool = False):
    """(ids, attention mask) long tensors on `device`, padded on the right (or the left, for generation)."""
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, s in enumerate(seqs):
        cols = slice(width - len(s), width) if left else slice(0, len(s))
        ids[row, cols] = torch.tensor(list(s), dtype=torch.long)
        mask[row, cols] = 1
    return ids.to(device), mask.to(device)


def head_log_probs(head, softcap, hidden, targets):
    """log p(target) from hidden states (N, d) at the positions that predict the targets (N,): the LM
    head (`head`, with the model's final logit `softcap` or None) on those positions only."""
    import torch

    # The head runs in fp32 even under bf16 autocast: it is applied only at scored positions, so
    # this is cheap, and bf16 logits cost up to ~0.04 in log-likelihood (measured on CPU).
    with torch.autocast(hidden.device.type, enabled=False):
        logits = torch.nn.functional.linear(
            hidden.float(), head.weight.float(), None if head.bias is None else head.bias.float()
        )
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return logits.log_softmax(-1).gather(1, targets[:, None]).squeeze(1)


class ModelParts:
    """What every scorer reads of a causal LM (transformers): its device, decoder, LM head and logit
    softcap, with the run's autocast choice and pad id."""

    def __init__(self, model, *, bf16: bool = False, pad_id: int = 0):
        self.model = model
        self.device = next(model.parameters()).device
        self.decoder = model.get_decoder()
        self.head = model.get_output_embeddings()
        self.softcap = getattr(model.config, "final_logit_softcapping", None)
        self.bf16 = bf16
        self.pad_id = pad_id


class Scorer(Protocol):
    """A scoring engine: the summed log-likelihoods of every item's continuations, whichever way it runs
    them. :func:`udr.lm.packed.make_scorer` chooses one by name: :class:`LMScorer` (padded) or
    :class:`udr.lm.packed.PackedScorer` (packed)."""

    engine: str  # its name, as `score.engine` names it (padded or packed), recorded in the score report

    def score_all(
        self,
        items: Sequence[ScoringItem],
        groups: Sequence[Sequence[int]],
        batch_tokens: int,
        on_batch: Callable[[BatchStats], None] | None = None,
    ) -> tuple[list[list[float]], BatchStats]:
        """Summed log p(continuation | prompt) of every continuation of every item, in the items' order,
        and the token accounting. The items of each of `groups` (indices, :func:`prefix_groups`) share
        their first `shared` prompt tokens, which run once; `batch_tokens` bounds a batch (or a row);
        `on_batch` gets each batch's (row's) accounting as it runs."""
        ...


class LMScorer(ModelParts):
    """Summed log-likelihoods of continuations after prompts, with a causal LM (transformers): the padded
    engine (:class:`Scorer`), items in length-bucketed padded batches."""

    engine = "padded"

    def __init__(self, model, *, bf16: bool = False, pad_id: int = 0):
        import torch

        super().__init__(model, bf16=bf16, pad_id=pad_id)
        self._torch = torch
        # Label continuations share their prompt's cache through a custom 4D attention mask, which
        # transformers passes through as-is to sdpa (boolean) and eager (additive) attention. Models
        # with sliding-window layers need one mask per layer type: they copy the cache instead.
        impl = getattr(model.config, "_attn_implementation", None)
        self._packable = impl in ("sdpa", "eager") and not has_sliding_layers(model.config)
        self._bool_mask = impl == "sdpa"
        self._ragged = supports_ragged(model)  # prompt forwards skip their padding (udr.lm.ragged)
        self._chunk_tokens = default_chunk_tokens(self.device)  # ... and run in row groups on a CPU

    def _logprobs(self, hidden, targets):
        """log p(target) from hidden states at the positions that predict them (LM head on those only)."""
        return head_log_probs(self.head, self.softcap, hidden, targets)

    def score_batch(self, items: Sequence[ScoringItem]) -> tuple[list[list[float]], BatchStats]:
        """Summed log p(continuation | prompt) for every continuation of every item."""
        with lm_forward_context(self.device.type, self.bf16):
            if all(len(it.continuations) == 1 for it in items):
                return self._score_single(items)
            return self._score_shared_prefix(items)

    def score_all(
        self,
        items: Sequence[ScoringItem],
        groups: Sequence[Sequence[int]],
        batch_tokens: int,
        on_batch: Callable[[BatchStats], None] | None = None,
    ) -> tuple[list[list[float]], BatchStats]:
        """:meth:`Scorer.score_all`: the groups in batches of groups (:func:`group_batches`, :meth:`score_groups`),
        then every other item in length-bucketed batches (:func:`length_batches`, :meth:`score_batch`)."""
        logps: list[list[float]] = [[] for _ in items]
        total = BatchStats()

        def record(batch: list[int], values, stats: BatchStats) -> None:
            for i, v in zip(batch, values):
                logps[i] = v
            total.add(stats)
            if on_batch:
                on_batch(stats)

        grouped = {i for g in groups for i in g}
        plain = [i for i in range(len(items)) if i not in grouped]
        for batch in group_batches(items, list(groups), batch_tokens):
            values, stats = self.score_groups([[items[i] for i in groups[g]] for g in batch])
            record([i for g in batch for i in groups[g]], [v for vs in values for v in vs], stats)
        for batch in length_batches([items[i] for i in plain], batch_tokens):
            values, stats = self.score_batch([items[plain[j]] for j in batch])
            record([plain[j] for j in batch], values, stats)
        return logps, total

    def score_groups(self, groups: Sequence[Sequence[ScoringItem]]) -> tuple[list[list[list[float]]], BatchStats]:
        """:meth:`score_batch` for groups of items whose prompts start with the same `shared` tokens
        (one candidate's demonstration, scored for several queries): each group's shared tokens run
        once, and its items continue from their key/value cache. Returns each group's scores."""
        for group in groups:
            n = group[0].shared
            if not 0 < n < min(len(it.prompt) for it in group) or any(
                it.shared != n or it.prompt[:n] != group[0].prompt[:n] for it in group
            ):
                raise ValueError("score_groups: the items of a group must share a proper prompt prefix")
        items = [it for g in groups for it in g]
        with lm_forward_context(self.device.type, self.bf16):
            values, stats = self._score_after_prefixes(groups, items)
        out, start = [], 0
        for g in groups:
            out.append(values[start : start + len(g)])
            start += len(g)
        return out, stats

    def _pad(self, seqs: Sequence[Sequence[int]]):
        ids, mask = pad_sequences(seqs, self.pad_id, self.device)
        real = sum(len(s) for s in seqs)
        return ids, mask, BatchStats(real, ids.numel() - real)

    def _score_single(self, items):
        """One continuation per prompt: one forward over prompt + continuation."""
        seqs = [it.prompt + it.continuations[0] for it in items]
        ids, mask, stats = self._pad(seqs)
        hidden = decoder_forward(self.decoder, ids, mask, ragged=self._ragged, chunk_tokens=self._chunk_tokens)
        stats.pairs = len(items)
        return self._single_sums(items, hidden, [len(it.prompt) for it in items]), stats

    def _single_sums(self, items, hidden, ends):
        """Summed log p of each item's one continuation, whose tokens follow its prompt's end (column
        ends[r] of row r of `hidden`) in the same row."""
        torch = self._torch
        rows, cols, targets = [], [], []
        for r, (it, p) in enumerate(zip(items, ends)):
            c = it.continuations[0]
            rows += [r] * len(c)
            cols += range(p - 1, p - 1 + len(c))
            targets += c
        rows_t = torch.tensor(rows, device=self.device)
        lp = (
            self._logprobs(
                hidden[rows_t, torch.tensor(cols, device=self.device)], torch.tensor(targets, device=self.device)
            )
            .double()
            .cpu()
        )
        sums = torch.zeros(len(items), dtype=torch.float64).index_add_(0, rows_t.cpu(), lp)
        return [[float(s)] for s in sums]

    def _continuations_packed(self, flat, rest, conts, cache, mask, lengths, stats):
        """Tokens 1..m-1 of every continuation, all of a prompt's in one row after its cached prompt:
        each token sees the prompt and its own continuation's earlier tokens (a custom 4D mask) at the
        positions it would have right after the prompt. The cache is extended once, never copied per
        continuation. Returns each continuation's summed log-probability of those tokens."""
        from udr.lm.kv_cache import cache_keyword

        torch = self._torch
        n_items, width = mask.shape
        per_row: list[list[tuple[int, int]]] = [[] for _ in range(n_items)]  # (flat index, token offset)
        for f, (r, _) in enumerate(flat):
            per_row[r] += [(f, j) for j in range(len(rest[f]))]
        q = max(len(p) for p in per_row)
        ids = torch.full((n_items, q), self.pad_id, dtype=torch.long)
        positions = torch.zeros((n_items, q), dtype=torch.long)
        allowed = torch.zeros((n_items, 1, q, width + q), dtype=torch.bool)
        allowed[:, 0, :, :width] = mask.bool().cpu()[:, None, :]
        rows, cols, targets, owners = [], [], [], []
        for r, packed in enumerate(per_row):
            for a, (f, j) in enumerate(packed):
                ids[r, a] = rest[f][j]
                positions[r, a] = lengths[r] + j
                allowed[r, 0, a, width + a - j : width + a + 1] = True  # its continuation's tokens 0..j
                rows.append(r)
                cols.append(a)
                targets.append(conts[f][j + 1])
                owners.append(f)
            for a in range(len(packed), q):  # padding queries see themselves only (no empty rows)
                allowed[r, 0, a, width + a] = True
        stats.add(BatchStats(len(rows), n_items * q - len(rows)))
        attention = allowed if self._bool_mask else torch.zeros(allowed.shape).masked_fill_(~allowed, float("-inf"))
        h = self.decoder(
            input_ids=ids.to(self.device),
            attention_mask=attention.to(self.device),
            position_ids=positions.to(self.device),
            **{cache_keyword(): cache},
            use_cache=True,
        ).last_hidden_state
        lp = self._logprobs(
            h[torch.tensor(rows, device=self.device), torch.tensor(cols, device=self.device)],
            torch.tensor(targets, device=self.device),
        )
        return torch.zeros(len(flat), dtype=torch.float64).index_add_(0, torch.tensor(owners), lp.double().cpu())

    def _continuations_expanded(self, flat, rest, conts, cache, mask, lengths, stats):
        """The same as :meth:`_continuations_packed`, for any model: the prompt's cache is copied once
        per continuation and each continuation runs in its own row."""
        from udr.lm.kv_cache import cache_keyword

        torch = self._torch
        owner = torch.tensor([r for r, _ in flat], device=self.device)
        keep = [i for i, r in enumerate(rest) if r]
        c_ids, c_mask, c_stats = self._pad([rest[i] for i in keep])
        stats.add(c_stats)
        sel = owner[torch.tensor(keep, device=self.device)]
        cache.reorder_cache(sel)
        full_mask = torch.cat([mask[sel], c_mask], dim=1)
        start = torch.tensor([lengths[r] for r in sel.tolist()], device=self.device)
        positions = start[:, None] + torch.arange(c_ids.shape[1], device=self.device)[None, :]
        h = self.decoder(
            input_ids=c_ids,
            attention_mask=full_mask,
            position_ids=positions,
            **{cache_keyword(): cache},
            use_cache=True,
        ).last_hidden_state
        rows, cols, targets = _continuation_targets(conts, keep)
        lp = self._logprobs(
            h[torch.tensor(rows, device=self.device), torch.tensor(cols, device=self.device)],
            torch.tensor(targets, device=self.device),
        )
        per_keep = torch.zeros(len(keep), dtype=torch.float64).index_add_(0, torch.tensor(rows), lp.double().cpu())
        return torch.zeros(len(flat), dtype=torch.float64).index_copy_(0, torch.tensor(keep), per_keep)

    def _score_shared_prefix(self, items):
        """Several continuations per prompt: the prompt runs once; its key/value cache serves them all.

        Tokens that every continuation of an item starts with (e.g. "Answer:") are moved into the
        shared prompt; their log-probability is the same for each continuation and is added to each.
        """
        from udr.lm.kv_cache import reserved_cache

        shared = [common_prefix(it.continuations) for it in items]
        prompts = [it.prompt + sh for it, sh in zip(items, shared)]
        ids, mask, stats = self._pad(prompts)
        cache = reserved_cache(self.decoder.config, room=_continuation_room(items, shared))
        hidden = decoder_forward(
            self.decoder, ids, mask, cache=cache, ragged=self._ragged, chunk_tokens=self._chunk_tokens
        )
        lengths = [len(p) for p in prompts]
        starts = [len(it.prompt) for it in items]
        return self._score_continuations(items, shared, hidden, cache, mask, lengths, starts, lengths, stats)

    def _score_after_prefixes(self, groups, items):
        """Each group's shared prompt prefix runs once into a key/value cache; the cache is copied to
        the group's items, whose prompt rest (and, with one continuation, the continuation; else the
        continuations' common prefix) runs on top of it; label sets then continue as in
        :meth:`_score_shared_prefix`."""
        from udr.lm.kv_cache import reserved_cache

        torch = self._torch
        prefixes = [g[0].prompt[: g[0].shared] for g in groups]
        p_ids, p_mask, stats = self._pad(prefixes)
        single = all(len(it.continuations) == 1 for it in items)
        shared = [() if single else common_prefix(it.continuations) for it in items]
        rests = [it.prompt[it.shared :] + (it.continuations[0] if single else sh) for it, sh in zip(items, shared)]
        room = max(len(r) for r in rests) + (0 if single else _continuation_room(items, shared))
        cache = reserved_cache(self.decoder.config, room=room)
        decoder_forward(self.decoder, p_ids, p_mask, cache=cache, ragged=self._ragged, chunk_tokens=self._chunk_tokens)
        owner = torch.tensor([g for g, group in enumerate(groups) for _ in group], device=self.device)
        cache.reorder_cache(owner)
        past_mask = p_mask[owner]
        ids, mask, rest_stats = self._pad(rests)
        stats.add(rest_stats)
        offsets = [it.shared for it in items]
        positions = torch.tensor(offsets, device=self.device)[:, None] + torch.arange(ids.shape[1], device=self.device)
        hidden = decoder_forward(
            self.decoder, ids, mask, position_ids=positions, cache=cache, past_mask=past_mask, ragged=self._ragged
        )
        full_mask = torch.cat([past_mask, mask], dim=1)
        if single:  # the continuation ran with the rest: its tokens are predicted from there
            stats.pairs = len(items)
            return self._single_sums(items, hidden, [len(it.prompt) - it.shared for it in items]), stats
        lengths = [len(it.prompt) + len(sh) for it, sh in zip(items, shared)]  # positions after the prompt
        columns = [len(r) for r in rests]  # the rest's columns, in the hidden states of this pass
        starts = [len(it.prompt) - it.shared for it in items]
        return self._score_continuations(items, shared, hidden, cache, full_mask, lengths, starts, columns, stats)

    def _score_continuations(self, items, shared, hidden, cache, mask, lengths, starts, columns, stats):
        """The label / choice sets after prompts whose forward filled `hidden` and `cache`.

        mask: (n, cache width) real positions of the cache; lengths: each prompt's length with its
        continuations' common prefix (the position of the next token); starts / columns: the column in
        `hidden` of each prompt's end / of its common prefix's end."""
        torch = self._torch
        flat = [(r, c) for r, it in enumerate(items) for c in range(len(it.continuations))]
        conts = [items[r].continuations[c][len(shared[r]) :] for r, c in flat]
        rest = [c[:-1] for c in conts]  # inputs whose hidden states predict tokens 1..m-1
        last = hidden[torch.arange(len(items), device=self.device), torch.tensor(columns, device=self.device) - 1]

        shared_lp = torch.zeros(len(items), dtype=torch.float64)
        rows = [r for r, sh in enumerate(shared) for _ in sh]
        if rows:
            cols = [starts[r] - 1 + j for r, sh in enumerate(shared) for j in range(len(sh))]
            lp = self._logprobs(
                hidden[torch.tensor(rows, device=self.device), torch.tensor(cols, device=self.device)],
                torch.tensor([t for sh in shared for t in sh], device=self.device),
            )
            shared_lp.index_add_(0, torch.tensor(rows), lp.double().cpu())

        owner = torch.tensor([r for r, _ in flat], device=self.device)
        # First remaining continuation token: predicted by the (extended) prompt's last hidden state.
        first_lp = self._logprobs(last[owner], torch.tensor([c[0] for c in conts], device=self.device))
        totals = first_lp.double().cpu() + shared_lp[owner.cpu()]

        if any(rest):
            run = self._continuations_packed if self._packable else self._continuations_expanded
            totals += run(flat, rest, conts, cache, mask, lengths, stats)

        result: list[list[float]] = [[] for _ in items]
        for (r, _), v in zip(flat, totals.tolist()):
            result[r].append(v)
        stats.pairs = len(items)
        return result, stats


def _continuation_room(items, shared) -> int:
    """Cache positions the packed continuation pass appends per row (the most over the items)."""
    return max(sum(len(c) - len(sh) - 1 for c in it.continuations) for it, sh in zip(items, shared))


def _continuation_targets(conts, keep):
    """(rows, columns, targets) of the tokens 1..m-1 of each kept continuation, for the row layout of
    :meth:`LMScorer._continuations_expanded` (one row per continuation)."""
    rows, cols, targets = [], [], []
    for j, i in enumerate(keep):
        c = conts[i]
        rows += [j] * (len(c) - 1)
        cols += range(len(c) - 1)
        targets += c[1:]
    return rows, cols, targets


def common_prefix(continuations: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """The longest token prefix shared by all continuations, leaving each at least one token."""
    shortest = min(len(c) for c in continuations)
    n = 0
    while n < shortest - 1 and all(c[n] == continuations[0][n] for c in continuations):
        n += 1
    return tuple(continuations[0][:n])


def continuation_log_likelihood(model, prompt: Sequence[int], continuation: Sequence[int]) -> float:
    """Summed log p(continuation | prompt) by the plain route (one sequence, full logits in float64,
    no cache): the oracle the batched scorer is tested against, and the check of model conversion."""
    import torch

    with torch.inference_mode():
        ids = torch.tensor([list(prompt) + list(continuation)], device=next(model.parameters()).device)
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].double().log_softmax(-1)
        return float(logits.gather(1, ids[0, len(prompt) :, None]).sum())
