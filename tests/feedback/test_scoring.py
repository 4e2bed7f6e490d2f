"""udr.feedback.scoring: s_cls is a distribution over the label set."""

from __future__ import annotations

import pytest

from tests.tiny_models import byte_tokenizer, tiny_llama
from udr.data.tasks import get_task
from udr.feedback.scoring import pair_score
from udr.lm.prompt import PromptBuilder
from udr.lm.scorer import LMScorer


def test_s_cls_sums_to_at_most_one_over_labels():
    model = tiny_llama()
    tok = byte_tokenizer()
    builder = PromptBuilder(tok, get_task("sst2"), None, 512)
    query = {
        "id": 1,
        "input": "a fine film",
        "target": "It was great .",
        "label": 1,
        "choices": ["It was terrible .", "It was great .", "It was okay ."],
    }
    item = builder.scoring_item(query, {"id": 2, "input": "dull", "target": "It was terrible ."})
    (logps,), _ = LMScorer(model, pad_id=256).score_batch([item])
    total = sum(pair_score(logps, g, False, 1) for g in range(3))
    assert total <= 1.0 + 1e-9 and total == pytest.approx(1.0, abs=1e-9)
