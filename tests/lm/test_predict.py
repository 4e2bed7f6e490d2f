"""udr.lm.predict: label prediction equals a one-label-at-a-time argmax; greedy generation stops at the newline."""

from __future__ import annotations

import pytest
import torch

from benchmarks.evaluate import reference_greedy
from tests.tiny_models import byte_tokenizer, tiny_llama
from udr.lm.predict import GreedyGenerator, predict_choices
from udr.lm.scorer import LMScorer, ScoringItem, continuation_log_likelihood, pad_sequences


@pytest.fixture(scope="module")
def lm():
    return tiny_llama(seed=3), byte_tokenizer()


def _enc(tok, text):
    return tuple(tok(text, add_special_tokens=False)["input_ids"])


def test_choice_prediction_equals_argmax_one_label_at_a_time(lm):
    model, tok = lm
    labels = ["It was great .", "It was terrible .", "Answer: fine", "no"]
    items = []
    for i, text in enumerate(["a film\t", "some longer review text that goes on\t", "x\t", "meh, fine?\t"]):
        conts = tuple(_enc(tok, c) for c in labels[: 2 + i % 3])
        items.append(ScoringItem(i, 0, _enc(tok, "demo\tIt was great .\n" + text), conts, 0))
    preds, logps = predict_choices(LMScorer(model, pad_id=256), items, batch_tokens=96)
    for it, pred, lp in zip(items, preds, logps):
        one_by_one = [continuation_log_likelihood(model, it.prompt, c) for c in it.continuations]
        assert lp == pytest.approx(one_by_one, abs=1e-4)
        assert pred == max(range(len(one_by_one)), key=lambda j: one_by_one[j])


def _manual_greedy(model, prompt, steps):
    ids = list(prompt)
    out = []
    with torch.inference_mode():
        for _ in range(steps):
            nxt = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
            out.append(nxt)
            ids.append(nxt)
    return out


def test_greedy_generation_stops_at_the_newline(lm):
    model, tok = lm
    model = tiny_llama(seed=3)
    prompts = [_enc(tok, t) for t in ("first prompt\t", "a second, longer prompt here\t", "3\t")]
    newline = _enc(tok, "\n")[0]
    free = _manual_greedy(model, prompts[0], 6)
    # Make the newline win wherever the third generated token of prompt 0 would: its output row
    # becomes a scaled copy of that token's row, so prompt 0 must stop after two tokens.
    target = free[2]
    assume = target not in free[:2] and newline not in free[:3]
    if not assume:
        pytest.skip("the seeded model's first tokens do not allow this construction")
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head[newline] = head[target] * 2.0
    gen = GreedyGenerator(model, tok)
    texts = gen.generate(prompts, max_new_tokens=12, batch_tokens=64)  # several batches
    assert texts[0] == tok.decode(free[:2]).strip()
    for prompt, text in zip(prompts, texts):
        ref = _manual_greedy(model, prompt, 12)
        cut = ref.index(newline) if newline in ref else len(ref)
        assert "\n" not in text
        assert text == tok.decode(ref[:cut], skip_special_tokens=True).strip()
    # batched (one batch, left padding) equals one prompt at a time
    assert gen.generate(prompts, 12, batch_tokens=10_000) == texts


def test_greedy_decode_loop_equals_generate_as_rows_finish_at_different_steps(lm):
    """Rows that end their line leave the batch; the others continue exactly as in HF `generate`."""
    model, tok = lm
    prompts = [_enc(tok, t) for t in ("first prompt\t", "a second, longer prompt here\t", "3\t", "four four\t")]
    free = [_manual_greedy(model, p, 10) for p in prompts]
    gen = GreedyGenerator(model, tok)
    # stop tokens that end rows at different steps (and some rows not at all)
    gen.stop_ids = sorted({free[0][1], free[2][4]})
    steps = 10
    ids, mask = pad_sequences(prompts, gen.pad_id, "cpu", left=True)
    ref = reference_greedy(model, ids, mask, steps, gen.stop_ids, gen.pad_id)
    ours = gen.generate_ids(prompts, steps)
    lengths = set()
    for want, got in zip(ref, ours):
        cut = next((j + 1 for j, t in enumerate(want) if t in gen.stop_ids), len(want))
        assert got == want[:cut]
        lengths.add(len(got))
    assert len(lengths) > 1  # the construction did end rows at different steps
    gen.ragged = False  # the padded prompt forward gives the same tokens
    assert gen.generate_ids(prompts, steps) == ours
