"""In-context prediction with the LM, given assembled prompts (see :mod:`udr.evaluation.icl`).

- classification / multiple choice: the label (or choice) whose verbalisation has the highest
  summed log-likelihood after the prompt. The prompt runs once and its key/value cache serves
  every label (:class:`udr.lm.scorer.LMScorer`); prompts are batched by length.
- generation: greedy decoding, batched (left padding) with the key/value cache, stopped at the
  end of the line: a row stops at the first token whose text holds a newline (or at the end-of-
  sequence token, or after `max_new_tokens`) and leaves the batch; the answer is the text before
  the newline.

Imports of torch and udr.lm.kv_cache (transformers) are inside the functions that use them, to keep the start of
`udr` and of its commands light.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from udr.lm.precision import lm_forward_context
from udr.lm.ragged import decoder_forward, default_chunk_tokens, supports_ragged
from udr.lm.scorer import length_batches, pad_sequences


def predict_choices(
    scorer, items, batch_tokens: int, on_batch: Callable[[int], None] | None = None
) -> tuple[list[int], list[list[float]]]:
    """For ScoringItems (prompt + label continuations): the argmax label index of each (ties: the
    lower index) and the summed log-likelihood of every label, in the items' order."""
    logps: list[list[float] | None] = [None] * len(items)
    for batch in length_batches(items, batch_tokens):
        values, _ = scorer.score_batch([items[i] for i in batch])
        for i, v in zip(batch, values):
            logps[i] = v
        if on_batch:
            on_batch(len(batch))
    return [int(np.argmax(v)) for v in logps], logps


def newline_token_ids(tokenizer) -> list[int]:
    """Every token id whose text contains a newline (they end a generated line)."""
    ids = range(len(tokenizer))
    texts = tokenizer.batch_decode([[i] for i in ids])
    return [i for i, t in zip(ids, texts) if "\n" in t]


def _generation_batches(lengths: Sequence[int], max_new_tokens: int, batch_tokens: int) -> Iterator[list[int]]:
    """Indices grouped by length (longest first, so a too-large batch fails early) under a budget of
    padded prompt + new tokens."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batch: list[int] = []
    for i in order:
        width = lengths[batch[0]] if batch else lengths[i]
        if batch and (len(batch) + 1) * (width + max_new_tokens) > batch_tokens:
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


class GreedyGenerator:
    """Batched greedy decoding stopped at the end of the line.

    The decode loop is Hugging Face `generate`'s greedy search (the same forward calls: left padding,
    positions from the mask, a key/value cache, the LM head on the last position only, argmax of the
    fp32 logits), made lighter: a row that has ended its line leaves the batch, and its cache rows with
    it, instead of being fed padding until the longest row ends; the cache reserves room for the new
    tokens (:mod:`udr.lm.kv_cache`) instead of being concatenated whole at every step. Rows do not
    interact, so the tokens are the same (tested against `generate`).
    """

    def __init__(self, model, tokenizer, *, bf16: bool = False):
        import torch

        self.model, self.tokenizer, self.bf16 = model, tokenizer, bf16
        self.device = next(model.parameters()).device
        self.stop_ids = newline_token_ids(tokenizer)
        if tokenizer.eos_token_id is not None:
            self.stop_ids.append(int(tokenizer.eos_token_id))
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_id = int(pad if pad is not None else 0)
        self._torch = torch
        # The prompts' forward skips padding where the model allows it; its LM head is then applied
        # here, as the model's forward would (the ragged models have no logit soft-capping).
        self.ragged = supports_ragged(model) and not getattr(model.config, "final_logit_softcapping", None)
        self.decoder = model.get_decoder()
        self.chunk_tokens = default_chunk_tokens(self.device)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        batch_tokens: int,
        on_batch: Callable[[int], None] | None = None,
    ) -> list[str]:
        """The first generated line for each prompt (token ids), in the prompts' order."""
        out: list[str | None] = [None] * len(prompts)
        for batch in _generation_batches([len(p) for p in prompts], max_new_tokens, batch_tokens):
            for i, new in zip(batch, self.generate_ids([prompts[i] for i in batch], max_new_tokens)):
                out[i] = self.decode_line(new)
            if on_batch:
                on_batch(len(batch))
        return out

    def generate_ids(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
        """One batch: each prompt's greedy continuation up to and including its first stop token (or
        `max_new_tokens` tokens)."""
        from udr.lm.kv_cache import cache_keyword, reserved_cache

        torch = self._torch
        ids, mask = pad_sequences(prompts, self.pad_id, self.device, left=True)
        positions = (mask.cumsum(-1) - 1).masked_fill_(mask == 0, 0)
        stop = torch.tensor(sorted(set(self.stop_ids)), device=self.device)
        new: list[list[int]] = [[] for _ in prompts]
        alive = torch.arange(len(prompts), device=self.device)  # batch row -> prompt index
        cache = reserved_cache(self.model.config, room=max_new_tokens)  # no copy of the cache per step
        with lm_forward_context(self.device.type, self.bf16):
            for step in range(max_new_tokens):
                if step == 0 and self.ragged:  # the prompts' forward without their padding
                    hidden = decoder_forward(
                        self.decoder, ids, mask, position_ids=positions, cache=cache, chunk_tokens=self.chunk_tokens
                    )
                    logits = self.model.get_output_embeddings()(hidden[:, -1:])
                else:
                    logits = self.model(
                        input_ids=ids,
                        attention_mask=mask,
                        position_ids=positions,
                        **{cache_keyword(): cache},
                        use_cache=True,
                        logits_to_keep=1,
                    ).logits
                tokens = logits[:, -1].float().argmax(-1)
                for row, token in zip(alive.tolist(), tokens.tolist()):
                    new[row].append(token)
                going = ~torch.isin(tokens, stop)
                if step + 1 == max_new_tokens or not bool(going.any()):
                    break
                if not bool(going.all()):  # rows that ended their line leave the batch
                    keep = going.nonzero().squeeze(1)
                    alive, tokens, mask, positions = alive[keep], tokens[keep], mask[keep], positions[keep]
                    cache.batch_select_indices(keep)
                ids = tokens[:, None]
                mask = torch.cat([mask, mask.new_ones((len(alive), 1))], dim=1)
                positions = positions[:, -1:] + 1
        return new

    def decode_line(self, new_ids: Sequence[int]) -> str:
        """The text of generated ids up to the first newline (stop and padding tokens dropped)."""
        stop = set(self.stop_ids)
        keep = []
        for t in new_ids:
            keep.append(t)
            if t in stop:
                break
        text = self.tokenizer.decode(keep, skip_special_tokens=True)
        return text.split("\n", 1)[0].strip()
