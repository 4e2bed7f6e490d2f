"""udr.serving.query_encoder: the transformers-free query encoder gives the bi-encoder's embeddings
bitwise, and a served query never imports transformers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO
from udr.retriever.encoder import BiEncoder
from udr.serving.query_encoder import LightQueryEncoder

TEXTS = [
    "a gripping, funny film",
    "x",
    "What is the capital of France? " * 12,  # truncated at max_query_length
    "Überraschend gut; 100% empfehlenswert!",
    "",
]


def _light(model_dir):
    query_dir, _, tokenizer_dir = BiEncoder.part_dirs(model_dir)
    return LightQueryEncoder.load(query_dir, tokenizer_dir, BiEncoder.load_settings(model_dir))


@pytest.mark.parametrize("which", ["tiny", "real"])
def test_light_embeddings_equal_the_bi_encoders(served, real_model, which):
    model_dir = served / "models" / "final" if which == "tiny" else real_model
    full, light = BiEncoder.load(model_dir), _light(model_dir)
    assert light is not None
    for batch_size in (1, 2, 64):  # single queries, and padded batches cut as BiEncoder.encode cuts them
        np.testing.assert_array_equal(light.encode(TEXTS, batch_size), full.encode(TEXTS, "query", batch_size))


def test_other_architectures_take_the_full_encoder(served, tmp_path):
    model_dir = tmp_path / "model"
    shutil.copytree(served / "models" / "final", model_dir)
    config_file = model_dir / "query" / "config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "position_embedding_type": "relative_key"}))
    assert _light(model_dir) is None


def test_a_served_query_does_not_import_transformers(served):
    script = (
        "import sys, json\n"
        "from udr import Retriever\n"
        f"r = Retriever.load(root={str(served)!r})\n"
        "demos = r.retrieve('a gripping, funny film', task='sst2', k=3)\n"
        "print(json.dumps([len(demos), 'transformers' in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [3, False]


def test_a_config_that_lies_or_does_not_parse_is_a_one_line_error(served, tmp_path):
    from udr.errors import UdrError

    model_dir = tmp_path / "model"
    shutil.copytree(served / "models" / "final", model_dir)
    config_file = model_dir / "query" / "config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "num_hidden_layers": config["num_hidden_layers"] + 6}))
    with pytest.raises(UdrError, match=r"does not match its config: config.json says \d+ layers, the weights hold"):
        _light(model_dir)
    config_file.write_text("{not json")
    with pytest.raises(UdrError, match=r"unreadable model config .*config.json: Expecting property name"):
        _light(model_dir)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"num_attention_heads": "four"}, r"bad model config .*config.json: num_attention_heads must be a positive"),
        ({"num_attention_heads": 2.5}, r"bad model config .*config.json: num_attention_heads must be a positive"),
        ({"num_attention_heads": 0}, r"bad model config .*config.json: num_attention_heads must be a positive"),
        ({"num_attention_heads": 5}, r"hidden_size 32 is not a multiple of num_attention_heads 5"),
        ({"hidden_size": 0}, r"bad model config .*config.json: hidden_size must be a positive integer, not 0"),
        ({"hidden_size": 64, "num_attention_heads": 4}, r"does not match its config: config.json says hidden_size 64"),
        ({"layer_norm_eps": "x"}, r"layer_norm_eps must be a small positive number, not 'x'"),
        ({"pad_token_id": [1]}, r"pad_token_id must be a token id, not \[1\]"),
        (None, r"unreadable model config .*config.json: maximum recursion depth"),
    ],
)
def test_a_crafted_config_is_a_one_line_error_before_any_query(served, tmp_path, change, message):
    """A config.json that says what no BERT can be (a non-integer or zero size, nesting 100,000 deep) or
    what its weights are not, is a one-line error when the light encoder loads, never an exception
    (ZeroDivisionError, ValueError, RecursionError) at the first query."""
    from udr.errors import UdrError

    model_dir = tmp_path / "model"
    shutil.copytree(served / "models" / "final", model_dir)
    config_file = model_dir / "query" / "config.json"
    config = json.loads(config_file.read_text())
    deep = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    config_file.write_text(deep if change is None else json.dumps({**config, **change}))
    with pytest.raises(UdrError, match=message) as info:
        _light(model_dir).encode(["a query"])
    assert "\n" not in str(info.value)
