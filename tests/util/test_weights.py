"""udr.util.weights: damaged or missing weights are one-line errors naming the directory and the fix."""

from __future__ import annotations

import json
import os

import pytest

from tests.tiny_models import save_tiny_encoder, save_tiny_lm
from udr.errors import UdrError


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_damaged_bi_encoder_is_a_one_line_error(tmp_path, damage):
    from udr.lm.models import resolve_model
    from udr.retriever.encoder import BiEncoder, BiEncoderSettings

    base = resolve_model(str(save_tiny_encoder(tmp_path / "tiny")), tmp_path / "base", kind="encoder")
    BiEncoder.from_base(base, BiEncoderSettings(max_query_length=16, max_demo_length=16)).save(tmp_path / "model")
    weights = tmp_path / "model" / "query" / "model.safetensors"
    if damage == "truncated":
        os.truncate(weights, 100)
    else:
        weights.unlink()
    with pytest.raises(UdrError, match=r"unreadable model files in .*model/query .*: train it again") as info:
        BiEncoder.load(tmp_path / "model")
    assert "\n" not in str(info.value)


def test_a_truncated_lm_is_a_one_line_error(tmp_path):
    from udr.lm.loading import load_causal_lm
    from udr.lm.models import resolve_model

    lm = resolve_model(str(save_tiny_lm(tmp_path / "tiny")), tmp_path / "lm", kind="lm")
    os.truncate(lm / "model.safetensors", 100)
    with pytest.raises(UdrError, match=r"unreadable model files in .*lm .*udr models --force"):
        load_causal_lm(lm)


def test_a_model_folder_asking_to_run_its_code_is_refused_everywhere(tmp_path):
    """An auto_map in config.json (beside a configuration_*.py) would make transformers run the folder's
    code: refused when resolving (`udr models`) and when loading, with nothing run or written."""
    import json

    from udr.lm.loading import load_encoder
    from udr.lm.models import resolve_model

    src = save_tiny_encoder(tmp_path / "tiny")
    base = resolve_model(str(src), tmp_path / "base", kind="encoder")
    for folder in (src, base):
        config = json.loads((folder / "config.json").read_text())
        config["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig"}
        (folder / "config.json").write_text(json.dumps(config))
        (folder / "configuration_evil.py").write_text("open('PWNED', 'w').write('x')\n")
    with pytest.raises(UdrError, match=r"asks to run its own code \(config.json has an auto_map\): refused"):
        resolve_model(str(src), tmp_path / "other", kind="encoder")
    assert not (tmp_path / "other").exists()
    with pytest.raises(UdrError, match="asks to run its own code"):
        load_encoder(base)
    assert not (tmp_path / "PWNED").exists() and not os.path.exists("PWNED")


CRAFTED_CONFIGS = {
    "a non-integer head count": lambda c: json.dumps({**c, "num_attention_heads": "four"}),
    "a zero dimension": lambda c: json.dumps({**c, "hidden_size": 0}),
    "a zero head count": lambda c: json.dumps({**c, "num_attention_heads": 0}),
    "nesting 100,000 deep": lambda c: '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "no JSON": lambda c: "{not json",
}


@pytest.fixture(scope="module")
def tiny_bi_encoder(tmp_path_factory):
    from udr.lm.models import resolve_model
    from udr.retriever.encoder import BiEncoder, BiEncoderSettings

    tmp = tmp_path_factory.mktemp("crafted")
    base = resolve_model(str(save_tiny_encoder(tmp / "tiny")), tmp / "base", kind="encoder")
    BiEncoder.from_base(base, BiEncoderSettings(max_query_length=16, max_demo_length=16)).save(tmp / "model")
    return tmp


@pytest.mark.parametrize("craft", CRAFTED_CONFIGS, ids=list(CRAFTED_CONFIGS))
def test_a_crafted_config_is_a_one_line_error_naming_the_folder(tiny_bi_encoder, tmp_path, craft):
    """Whatever a config.json makes transformers raise (TypeError, RecursionError, ZeroDivisionError, ...)
    is a one-line UdrError naming the folder, for a bi-encoder and a resolved base model alike."""
    import shutil

    from udr.lm.loading import load_encoder
    from udr.retriever.encoder import BiEncoder

    model, base = tmp_path / "model", tmp_path / "base"
    shutil.copytree(tiny_bi_encoder / "model", model)
    shutil.copytree(tiny_bi_encoder / "base", base)
    for config in (model / "query" / "config.json", base / "config.json"):
        config.write_text(CRAFTED_CONFIGS[craft](json.loads(config.read_text())))
    for load, folder, named, fix in (
        (BiEncoder.load, model, model / "query", "train it again"),
        (load_encoder, base, base, "udr models"),
    ):
        with pytest.raises(UdrError, match=rf"unreadable model files in {named} \(.*\): .*{fix}") as info:
            load(folder)
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("error", ["MemoryError", "torch.OutOfMemoryError", "KeyboardInterrupt", "ImportError"])
def test_running_out_of_memory_ctrl_c_or_a_missing_library_propagate(tmp_path, error):
    """Not the files' fault: the guarded load lets them through."""
    import builtins

    import torch

    from udr.util.weights import load_weights

    error = torch.OutOfMemoryError if error.startswith("torch.") else getattr(builtins, error)

    def load():
        raise error("boom")

    with pytest.raises(error):
        load_weights(load, tmp_path, "rebuild it")


def test_a_saved_tokenizer_is_the_same_bytes_whatever_the_environment_it_was_loaded_in(tmp_path):
    """transformers keeps `local_files_only` (which follows HF_HUB_OFFLINE) among a tokenizer's init kwargs:
    saved as it is, the folder's bytes, and so DVC's hash of a model folder, would follow the environment."""
    from transformers import AutoTokenizer

    from udr.util.weights import LOAD_OPTIONS, save_tokenizer

    source = save_tiny_lm(tmp_path / "lm")
    configs = []
    for offline in (True, False):
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
        assert "local_files_only" in tokenizer.init_kwargs  # what the helper is there for
        tokenizer.init_kwargs["local_files_only"] = offline  # as HF_HUB_OFFLINE set or not leaves it
        save_tokenizer(tokenizer, tmp_path / f"saved-{offline}")
        configs.append((tmp_path / f"saved-{offline}" / "tokenizer_config.json").read_bytes())
    assert configs[0] == configs[1]
    assert not set(LOAD_OPTIONS) & set(json.loads(configs[0]))
    reloaded = AutoTokenizer.from_pretrained(tmp_path / "saved-True", trust_remote_code=False)
    assert reloaded("a b c")["input_ids"] == AutoTokenizer.from_pretrained(source)("a b c")["input_ids"]


def test_what_the_files_lack_starts_the_same_on_every_load_and_leaves_the_callers_random_state(tmp_path):
    """The tiny encoder is saved without a pooler, which BertModel builds: transformers initialises it at
    random, and a training saves it, so an unseeded load made the trained files differ run after run."""
    import torch

    from udr.lm.loading import load_encoder
    from udr.lm.models import resolve_model

    folder = resolve_model(str(save_tiny_encoder(tmp_path / "src")), tmp_path / "enc", kind="encoder")
    torch.manual_seed(123)
    state = torch.get_rng_state()
    first, second = load_encoder(folder)[0], load_encoder(folder)[0]
    assert first.pooler is not None  # built, with no weights in the files
    for (name, a), b in zip(first.state_dict().items(), second.state_dict().values()):
        assert torch.equal(a, b), name
    assert torch.equal(torch.get_rng_state(), state)  # the loads drew nothing from the caller's stream
