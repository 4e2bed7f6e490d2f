"""`udr evaluate -m encoder:FOLDER`: any sentence-transformers or Hugging Face encoder folder as a dense
retriever, saved under a name that `udr exp compare` reads beside the built-in methods; the one-line
errors of a folder that is no encoder; and `label_share` on a tiny real project."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import prepare_with_candidates, write_params
from tests.tiny_models import save_tiny_encoder, save_tiny_lm

TASKS = ["sst2", "break"]


def st_folder(
    path: Path, src: Path, *, pooling: str = "mean", normalize: bool = True, new_format: bool = False
) -> Path:
    """A sentence-transformers folder of the encoder in `src`: its files, modules.json, the Pooling
    module's config (legacy flags, or sentence-transformers 6's `pooling_mode`), Normalize where asked,
    and max_seq_length 128 (the sbert baseline's)."""
    shutil.copytree(src, path)
    prefix = "sentence_transformers.base.modules." if new_format else "sentence_transformers.models."
    modules = [{"idx": 0, "name": "0", "path": "", "type": prefix + ("transformer." * new_format) + "Transformer"}]
    modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": prefix + ("pooling." * new_format) + "Pooling"})
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": prefix + "Normalize"})
        (path / "2_Normalize").mkdir()
    (path / "modules.json").write_text(json.dumps(modules))
    (path / "1_Pooling").mkdir()
    if new_format:
        config = {"embedding_dimension": 32, "pooling_mode": pooling}
    else:
        config = {f"pooling_mode_{m}": m.startswith(pooling) for m in ("cls_token", "mean_tokens", "max_tokens")}
    (path / "1_Pooling" / "config.json").write_text(json.dumps(config))
    (path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": False}))
    return path


@pytest.fixture(scope="module")
def project(tmp_path_factory, data_dir):
    """sst2 and break prepared (20 train rows, 6 test rows), a tiny LM and a tiny encoder resolved (the
    sbert baseline's), and that encoder as a sentence-transformers folder and as a plain one outside it."""
    from udr.lm.models import resolve_model

    root = tmp_path_factory.mktemp("encoder-method")
    write_params(
        root,
        {t: {"max_train": 20, "max_test": 6} for t in TASKS},
        data_dir,
        mine={"batch_size": 8},
        evaluate={"context": 700, "max_demos": 3, "max_new_tokens": 6, "candidates": 8, "dtype": "fp32"},
    )
    prepare_with_candidates(root, TASKS, data_dir, max_train=20, max_test=6, k=4)
    resolve_model(str(save_tiny_lm(root / "tiny-lm")), root / "models" / "base" / "lm", kind="lm")
    src = save_tiny_encoder(root / "encoders" / "plain")
    resolve_model(str(src), root / "models" / "base" / "encoder", kind="encoder")
    st_folder(root / "encoders" / "st-mini", src)
    os.environ.pop("UDR_DATA_DIR", None)
    return root


def _result(root: Path, name: str, task: str) -> dict:
    return json.loads((root / "metrics" / name / f"{task}.json").read_text())


def _predictions(root: Path, name: str, task: str) -> pl.DataFrame:
    return pl.read_parquet(root / "data" / "predictions" / name / f"{task}.parquet")


def test_an_encoder_folder_is_a_method_saved_for_exp_compare(project, run_cli):
    """A sentence-transformers folder of the sbert baseline's encoder (mean pooling, Normalize, 128
    tokens) retrieves what sbert does: the same predictions and scores, saved under --save-as, and `udr
    exp compare` (and the function behind it) reads it beside the built-in methods."""
    from udr.config import load_settings
    from udr.project.saved_evaluations import saved_comparison

    for args in (["-m", "sbert"], ["-m", "bm25"], ["-m", "encoder:encoders/st-mini", "--save-as", "st-check"]):
        code, out, err = run_cli(["evaluate", *args], project)
        assert code == 0, err
    assert "(saved as st-check)" in out + err
    for task in TASKS:
        saved, sbert = _result(project, "st-check", task), _result(project, "sbert", task)
        assert saved["method"] == "encoder" and saved["saved_as"] == "st-check"
        record = saved["encoder"]
        assert (record["spec"], record["pooling"], record["similarity"]) == ("encoders/st-mini", "mean", "cosine")
        assert record["max_length"] == 128 and record["instruction"] is False and len(record["weights_sha256"]) == 64
        for key in ("score", "graded", "interval", "demos_mean", "prompt_tokens_mean"):
            assert saved[key] == sbert[key], (task, key)
        assert saved.get("label_share") == sbert.get("label_share")
        assert _predictions(project, "st-check", task).equals(_predictions(project, "sbert", task))

    code, out, err = run_cli(["exp", "compare", "st-check", "sbert", "--json"], project)
    assert code == 0, err
    table = json.loads(out)
    assert set(table) == {*TASKS, "average"} and all(table[t]["difference"] == 0 for t in table)
    settings = load_settings(project / "params.yaml")
    per_task, average = saved_comparison(settings, "st-check", "bm25", TASKS)
    for task, interval in zip(TASKS, per_task):
        want = _result(project, "st-check", task)["graded"]["score"] - _result(project, "bm25", task)["graded"]["score"]
        assert abs(interval.difference - want) < 1e-9
    code, out, err = run_cli(["exp", "compare", "st-check", "bm25", "-t", "sst2"], project)
    assert code == 0 and "| sst2 | 6 |" in out


def test_a_plain_folder_is_read_as_a_transformers_base_and_named_after_itself(project, run_cli):
    """A folder without sentence-transformers config (no modules.json): CLS and the dot product, its
    model's positions as the length; without --save-as its results go under the folder's name."""
    code, out, err = run_cli(["evaluate", "-m", f"encoder:{project / 'encoders' / 'plain'}", "-t", "sst2"], project)
    assert code == 0, err
    assert "(saved as plain)" in out + err
    record = _result(project, "plain", "sst2")["encoder"]
    assert (record["pooling"], record["similarity"], record["max_length"]) == ("cls", "dot", 512)
    assert _predictions(project, "plain", "sst2").height == 6
    code, out, err = run_cli(["evaluate", "-m", "encoder:encoders/plain", "-t", "sst2", "--limit", "2"], project)
    assert code == 0 and "not saved" in out + err


def test_label_share_is_the_share_of_demonstrations_with_the_querys_label(project, run_cli):
    """Classification: the mean over test rows of the share of the prompt's demonstrations whose gold
    label is the row's, from the saved predictions; generation tasks have none."""
    code, _, err = run_cli(["evaluate", "-m", "random"], project)
    assert code == 0, err
    prepared = project / "data" / "prepared" / "sst2"
    pool = dict(pl.read_parquet(prepared / "train.parquet").select("id", "label").iter_rows())
    gold = dict(pl.read_parquet(prepared / "test.parquet").select("id", "label").iter_rows())
    for method in ("random", "bm25", "sbert"):
        preds = _predictions(project, method, "sst2")
        shares = [
            sum(pool[d] == gold[i] for d in demos) / len(demos)
            for i, demos in zip(preds["id"].to_list(), preds["demo_ids"].to_list())
        ]
        result = _result(project, method, "sst2")
        assert result["label_share"] == pytest.approx(sum(shares) / len(shares), abs=1e-12)
        assert 0.0 <= result["label_share"] <= 1.0
        assert "label_share" not in _result(project, method, "break")


def test_what_is_no_encoder_is_a_one_line_error(project, run_cli, tmp_path, monkeypatch):
    """A missing folder, one without weights or with pickled ones only, a sentence-transformers module
    udr does not apply, a hub id while the hub cannot be reached, a folder name that cannot name results:
    each a one-line error before the LM loads, and nothing written."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "no-weights").mkdir()
    (tmp_path / "no-weights" / "config.json").write_text(json.dumps({"model_type": "bert"}))
    shutil.copytree(tmp_path / "no-weights", tmp_path / "pickled")
    (tmp_path / "pickled" / "pytorch_model.bin").write_bytes(b"not loaded")
    dense = st_folder(tmp_path / "dense", project / "encoders" / "plain")
    modules = json.loads((dense / "modules.json").read_text())
    (dense / "modules.json").write_text(
        json.dumps([*modules, {"path": "3_Dense", "type": "sentence_transformers.models.Dense"}])
    )
    st_folder(tmp_path / "maxpool", project / "encoders" / "plain", pooling="max")
    shutil.copytree(project / "encoders" / "plain", tmp_path / "udr")
    before = sorted(project.rglob("*"))
    for method, message in (
        ("encoder:", "encoder: needs a folder or hub id"),
        (f"encoder:{tmp_path / 'missing'}", f"missing encoder folder {tmp_path / 'missing'}"),
        ("encoder:./missing", "missing encoder folder ./missing"),
        (f"encoder:{tmp_path / 'no-weights'}", "has no *.safetensors weights"),
        (f"encoder:{tmp_path / 'pickled'}", "pickled weights are never loaded"),
        (f"encoder:{dense}", "module Dense is not one udr applies"),
        (f"encoder:{tmp_path / 'maxpool'}", "pooling max is not one udr embeds with"),
        (
            "encoder:some-org/some-encoder",
            "no encoder folder some-org/some-encoder here, and the hub cannot be reached",
        ),
        (f"encoder:{tmp_path / 'udr'}", "name 'udr' is taken by the pipeline's own results"),
    ):
        code, _, err = run_cli(["evaluate", "-m", method, "-t", "sst2"], project)
        assert code == 1 and message in err, (method, err)
        assert len(err.strip().splitlines()) == 1, err
    assert sorted(project.rglob("*")) == before
    for args, message in (
        (["-m", "bm25", "--instruction"], "--instruction goes with -m encoder:FOLDER"),
        (
            ["-m", "encoder:encoders/plain", "--model", "models/base/encoder"],
            "--model goes with a trained bi-encoder's method (-m dr-target, -m epr, -m udr)",
        ),
    ):
        code, _, err = run_cli(["evaluate", *args, "-t", "sst2"], project)
        assert code == 1 and message in err, (args, err)
