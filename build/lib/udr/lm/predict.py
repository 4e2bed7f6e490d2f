"""In-context prediction with the LM, given assembled prompts (see :mod:`udr.evaluation.icl`).

- classification / multiple choice: the label (or choice) whose verbalisation has the highest
  summed log-likelihood after the prompt. The prompt runs once and its key/value cache serves
  every label (:class:`udr.lm.scorer.LMScorer`); prompts are batched by length.
- generation: greedy decoding, batched (left padding) with the key/value cache, stopped at the
  end of the line: a row stops at the first token whose text holds a newline (or at the end-of-
  sequence token, or after `max_new_tokens`); the answer is the text before the newline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np


def predict_choices(
    scorer, items, batch_tokens: int, on_batch: Callable[[int], None] | None = None
) -> tuple[list[int], list[list[float]]]:
    """For ScoringItems (prompt + label continuations): the argmax label index of each (ties: the
    lower index) and the summed log-likelihood of every label, in the items' order."""
    from udr.lm.scorer import length_batches

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
    """Batched greedy decoding stopped at the end of the line."""

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

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        batch_tokens: int,
        on_batch: Callable[[int], None] | None = None,
    ) -> list[str]:
        """The first generated line for each prompt (token ids), in the prompts' order."""
        from udr.lm.scorer import pad_sequences

        torch = self._torch
        out: list[str | None] = [None] * len(prompts)
        for batch in _generation_batches([len(p) for p in prompts], max_new_tokens, batch_tokens):
            ids, mask = pad_sequences([prompts[i] for i in batch], self.pad_id, self.device, left=True)
            with torch.inference_mode(), torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                gen = self.model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    do_sample=False,
                    max_new_tokens=max_new_tokens,
                    eos_token_id=self.stop_ids,
                    pad_token_id=self.pad_id,
                    top_p=None,
                    top_k=None,
                    temperature=None,
                )
            for row, i in enumerate(batch):
                new = gen[row, ids.shape[1] :].tolist()
                out[i] = self.decode_line(new)
            if on_batch:
                on_batch(len(batch))
        return out

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
