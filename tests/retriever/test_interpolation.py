"""udr.retriever.interpolation: WiSE-FT weight interpolation of a trained bi-encoder with its initial one."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from tests.tiny_models import save_tiny_encoder
from udr.errors import UdrError


@pytest.fixture
def pair(tmp_path):
    from udr.lm.models import resolve_model
    from udr.retriever.encoder import BiEncoder, BiEncoderSettings

    base = resolve_model(str(save_tiny_encoder(tmp_path / "tiny")), tmp_path / "base", kind="encoder")
    initial = BiEncoder.from_base(base, BiEncoderSettings(pooling="mean"))
    trained = copy.deepcopy(initial)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(torch.randn_like(p))
    return trained, initial


def test_alpha_moves_every_weight_on_the_line_between_the_two_models(pair):
    from udr.retriever.interpolation import interpolate

    trained, initial = pair
    before = {k: v.clone() for k, v in trained.query_model.state_dict().items()}
    start = initial.query_model.state_dict()
    interpolate(trained, initial, 0.25)
    for key, value in trained.query_model.state_dict().items():
        if value.is_floating_point():
            assert torch.allclose(value, 0.25 * before[key] + 0.75 * start[key], atol=1e-6), key
    texts = ["a gripping, funny film", "who wrote dracula ?"]
    at_zero = interpolate(copy.deepcopy(trained), initial, 0.0)
    assert np.allclose(at_zero.encode(texts, "query"), initial.encode(texts, "query"), atol=1e-5)


def test_a_bad_alpha_or_another_architecture_is_one_line(pair):
    from transformers import BertConfig, BertModel

    from udr.retriever.interpolation import interpolate

    trained, initial = pair
    with pytest.raises(UdrError, match="bad interpolation alpha 1.5"):
        interpolate(trained, initial, 1.5)
    other = copy.deepcopy(initial)
    config = BertConfig(**{**initial.query_model.config.to_dict(), "num_hidden_layers": 1})
    other.query_model = BertModel(config)
    with pytest.raises(UdrError, match="different architectures"):
        interpolate(trained, other, 0.5)
