"""udr.retriever.index: embedding files round-trip, and missing or stale files are caught."""

from __future__ import annotations

import numpy as np
import pytest

from udr.errors import UdrError
from udr.retriever.index import load_embeddings, save_embeddings


def test_save_load_round_trip(tmp_path):
    emb = np.random.default_rng(11).standard_normal((37, 24)).astype(np.float32)
    meta = {"model": "tiny", "task": "sst2", "rows": 37, "normalised": False, "ids": [1, 2, 3]}
    path = tmp_path / "sub" / "train.npy"
    save_embeddings(path, emb, meta)
    assert path.is_file() and (tmp_path / "sub" / "train.npy.json").is_file()
    assert sorted(x.name for x in path.parent.iterdir()) == ["train.npy", "train.npy.json"]
    got, got_meta = load_embeddings(path)
    assert got.dtype == emb.dtype and got.tobytes() == emb.tobytes() and got.shape == emb.shape
    assert got_meta == meta
    # a name without the .npy suffix is kept as given
    save_embeddings(tmp_path / "plain", emb, {})
    assert (tmp_path / "plain").is_file()
    assert load_embeddings(tmp_path / "plain")[1] == {}


def test_load_missing_files(tmp_path):
    path = tmp_path / "train.npy"
    with pytest.raises(UdrError, match=r"missing index: .*train\.npy \(run `udr index` first\)"):
        load_embeddings(path)
    save_embeddings(path, np.zeros((2, 3), np.float32), {"a": 1})
    (tmp_path / "train.npy.json").unlink()
    with pytest.raises(UdrError, match=r"missing index metadata: .*train\.npy\.json"):
        load_embeddings(path)


def test_stale_metadata_is_detected(tmp_path):
    path = tmp_path / "train.npy"
    save_embeddings(path, np.zeros((2, 3), np.float32), {})
    meta_text = (tmp_path / "train.npy.json").read_text()
    save_embeddings(path, np.zeros((4, 3), np.float32), {})
    (tmp_path / "train.npy.json").write_text(meta_text)
    with pytest.raises(UdrError, match=r"does not match its metadata"):
        load_embeddings(path)


def test_altered_rows_fail_the_checksum(tmp_path):
    """Half the rows overwritten with other rows, same shape and dtype: refused, not served."""
    path = tmp_path / "sst2.npy"
    emb = np.arange(24, dtype=np.float32).reshape(6, 4)
    save_embeddings(path, emb, {"ids": list(range(6))})
    altered = emb.copy()
    altered[:3] = emb[3:]
    with path.open("wb") as fh:
        np.save(fh, altered, allow_pickle=False)
    with pytest.raises(UdrError, match="fails its checksum"):
        load_embeddings(path)


def test_a_nan_index_names_its_file(tmp_path):
    path = tmp_path / "trec.npy"
    emb = np.ones((3, 4), dtype=np.float32)
    emb[1, 2] = np.nan
    save_embeddings(path, emb, {})
    with pytest.raises(UdrError, match=r"index .*trec\.npy holds NaN or infinite values; rerun `udr index`"):
        load_embeddings(path)


def test_a_model_without_its_demonstration_weights_is_named_incomplete(looped, tmp_path):
    import shutil

    from udr.retriever.index import model_fingerprint

    model = tmp_path / "model"
    shutil.copytree(looped / "models" / "final", model)
    (model / "demo" / "model.safetensors").unlink()
    with pytest.raises(UdrError, match=r"incomplete model .*: no .*demo/model\.safetensors; train it again"):
        model_fingerprint(model)


@pytest.mark.parametrize(
    ("part", "file", "key", "value"),
    [("query", "config.json", "hidden_act", "relu"), ("tokenizer", "tokenizer_config.json", "do_lower_case", False)],
)
def test_the_fingerprint_covers_encoder_configs_and_the_tokenizer(looped, tmp_path, part, file, key, value):
    """Another activation in E_q's config or another tokenizer setting is another model: the index made
    before no longer counts as matching."""
    import json
    import shutil

    from udr.retriever.index import load_index, model_fingerprint

    model = tmp_path / "model"
    shutil.copytree(looped / "models" / "final", model)
    before = model_fingerprint(model)
    _, meta = load_embeddings(model / "index" / "sst2.npy")
    from udr.data.tasks import get_task

    load_index(model, get_task("sst2"), meta["ids"], meta["pool_sha256"])
    config = model / part / file
    config.write_text(json.dumps({**json.loads(config.read_text()), key: value}))
    assert model_fingerprint(model) != before
    with pytest.raises(UdrError, match="mismatched index .*sst2.npy: made with another model"):
        load_index(model, get_task("sst2"), meta["ids"], meta["pool_sha256"])


def test_a_model_folder_with_a_link_out_of_it_is_refused(looped, tmp_path, run_cli):
    """`pools/` linked elsewhere: `udr index -t` writes nothing there; a linked file: `udr index --out`
    copies nothing from outside; `udr retrieve` reads nothing through it. Each a one-line error."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(looped / "models/final", model)
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.move(model / "pools", outside / "pools")
    (model / "pools").symlink_to(outside / "pools")
    before = sorted(p.name for p in (outside / "pools").iterdir())
    for args in (
        ["index", "-t", "sst2", "--model", str(model), "--replace"],
        ["index", "--model", str(model), "--out", str(tmp_path / "copy"), "--replace"],
        ["retrieve", "a film", "-t", "sst2", "--model", str(model)],
    ):
        code, _, err = run_cli(args, looped)
        assert code == 1 and "is a link out of the model folder" in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in (outside / "pools").iterdir()) == before and not (tmp_path / "copy").exists()
    (model / "pools").unlink()
    shutil.move(outside / "pools", model / "pools")
    (outside / "secret.txt").write_text("not the model's")
    (model / "query" / "notes.txt").symlink_to(outside / "secret.txt")
    code, _, err = run_cli(["index", "--model", str(model), "--out", str(tmp_path / "copy")], looped)
    assert code == 1 and "query/notes.txt is a link out of the model folder" in err, err
    (model / "query" / "notes.txt").unlink()
    (model / "query" / "inner.json").symlink_to(model / "query" / "config.json")  # a link inside is fine
    from udr.retriever.index import model_fingerprint

    assert model_fingerprint(model)


def test_deeply_nested_index_metadata_and_declarations_are_one_line(tmp_path):
    from udr.paths import Paths
    from udr.retriever.index import read_model_declarations

    path = tmp_path / "trec.npy"
    save_embeddings(path, np.ones((2, 3), dtype=np.float32), {})
    nested = "[" * 100_000 + "]" * 100_000
    path.with_name(path.name + ".json").write_text(nested)
    with pytest.raises(UdrError, match="unreadable index metadata"):
        load_embeddings(path)
    tasks = Paths.model_tasks(tmp_path)
    tasks.parent.mkdir(parents=True)
    for text in (nested, "[1]"):
        tasks.write_text(text)
        with pytest.raises(UdrError, match="unreadable task declarations"):
            read_model_declarations(tmp_path)
