"""udr.data.prepare: seeded caps, stable ids, malformed rows, atomic output."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from udr.data.prepare import prepare_task, seeded_cap
from udr.data.tasks import get_task
from udr.errors import UdrError


def test_seeded_cap_is_nested_and_ordered():
    small, big = seeded_cap(500, 50, 3, "sst2", "train"), seeded_cap(500, 100, 3, "sst2", "train")
    assert set(small) <= set(big) and np.all(np.diff(big) > 0)
    assert not np.array_equal(small, seeded_cap(500, 50, 4, "sst2", "train"))
    assert np.array_equal(seeded_cap(30, 50, 3, "sst2", "train"), np.arange(30))


def _prepare(task, data_dir, out, **kw):
    args = dict(seed=42, test_fraction=0.2, max_train=40, max_test=10) | kw
    return prepare_task(get_task(task), data_dir, out, **args)


def test_prepare_real_task_writes_schema_and_meta(tmp_path, data_dir):
    meta = _prepare("break", data_dir, tmp_path / "break")
    train = pl.read_parquet(tmp_path / "break" / "train.parquet")
    test = pl.read_parquet(tmp_path / "break" / "test.parquet")
    assert train.columns == ["id", "input", "target", "label", "choices", "references"]
    assert len(train) == 40 and len(test) == 10
    assert set(train["id"]).isdisjoint(set(test["id"]))
    assert meta["split"] == "seeded" and meta["seed"] == 42 and meta["counts"]["train"]["cap"] == 40
    assert meta["task"] == "break" and meta["kind"] == "generation"
    assert json.loads((tmp_path / "break" / "meta.json").read_text()) == meta
    # ids are line numbers of the source file: the row with id i is line i of validation.jsonl
    lines = (data_dir / "break" / "validation.jsonl").read_text().splitlines()
    row = train.row(0, named=True)
    assert json.loads(lines[row["id"]])["input"].split() == row["input"].split()


def test_prepare_is_deterministic_and_ids_stable_across_caps(tmp_path, data_dir):
    _prepare("sst2", data_dir, tmp_path / "a")
    _prepare("sst2", data_dir, tmp_path / "b")
    _prepare("sst2", data_dir, tmp_path / "c", max_train=80)
    for f in ("train.parquet", "test.parquet"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    small = pl.read_parquet(tmp_path / "a" / "train.parquet")
    big = pl.read_parquet(tmp_path / "c" / "train.parquet")
    joined = small.join(big, on="id", suffix="_big")
    assert len(joined) == len(small) and (joined["input"] == joined["input_big"]).all()


def test_multi_reference_test_rows_are_grouped(tmp_path, data_dir):
    meta = _prepare("e2e", data_dir, tmp_path / "e2e", max_test=1000)
    test = pl.read_parquet(tmp_path / "e2e" / "test.parquet")
    assert test["input"].n_unique() == len(test) == meta["test_grouped_by_input"]["examples"]
    assert test["references"].list.len().min() >= 1 and test["references"].list.len().max() > 1


def test_python_code_task_prepares_with_seeded_split(tmp_path, data_dir):
    meta = _prepare("python_code", data_dir, tmp_path / "pc")
    assert meta["split"] == "seeded" and meta["python_version"] and meta["n_built"] > 1000
    train = pl.read_parquet(tmp_path / "pc" / "train.parquet")
    assert train["input"].str.starts_with("def ").sum() + train["input"].str.starts_with("async def ").sum() == 40


def _fake_mirror(tmp_path, lines):
    folder = tmp_path / "mirror" / "sst2"
    folder.mkdir(parents=True)
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "test.jsonl").write_text('{"text": "ok", "label": "positive"}\n')
    return tmp_path / "mirror"


@pytest.mark.parametrize(
    "bad_line, reason",
    [
        ('{"text": "fine", "label": "meh"}', "unknown label 'meh'"),
        ('{"text": "fine", "label": ', "invalid JSON"),
        ('{"label": "positive"}', "missing field 'text'"),
    ],
)
def test_malformed_row_names_file_line_reason_and_leaves_nothing(tmp_path, bad_line, reason):
    mirror = _fake_mirror(tmp_path, ['{"text": "good", "label": "positive"}', bad_line])
    out = tmp_path / "out" / "sst2"
    with pytest.raises(UdrError) as err:
        prepare_task(get_task("sst2"), mirror, out, seed=1, test_fraction=0.2, max_train=10, max_test=10)
    msg = str(err.value)
    assert "sst2/train.jsonl:2: malformed row" in msg and reason in msg and "\n" not in msg
    assert not out.exists()
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # no temp dir left


def test_failed_prepare_keeps_previous_output(tmp_path, data_dir, monkeypatch):
    out = tmp_path / "sst2"
    _prepare("sst2", data_dir, out)
    before = (out / "train.parquet").read_bytes()
    import udr.data.prepare

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(udr.data.prepare, "json_text", boom)
    with pytest.raises(OSError):
        _prepare("sst2", data_dir, out, max_train=20)
    assert (out / "train.parquet").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["sst2"]  # no temp directory left


def test_hub_task_without_datasets_or_network_fails_clearly(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)  # import fails as if not installed
    with pytest.raises(UdrError, match=r"KaiLv/UDR_MNLI.*pip install datasets"):
        _prepare("mnli", tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_validation_rows_leave_the_train_split_and_none_changes_nothing(tmp_path, data_dir):
    task = "sst2"
    _prepare(task, data_dir, tmp_path / "plain", max_train=50, max_test=10)
    meta = _prepare(task, data_dir, tmp_path / "val", max_train=50, max_test=10, validation=12)
    train = pl.read_parquet(tmp_path / "val" / "train.parquet")
    val = pl.read_parquet(tmp_path / "val" / "validation.parquet")
    test = pl.read_parquet(tmp_path / "val" / "test.parquet")
    assert val.height == 12 and train.height == 50 and meta["counts"]["validation"]["kept"] == 12
    ids = set(val["id"].to_list())
    assert not ids & set(train["id"].to_list())  # never in the pool, never a scored query
    assert val["id"].to_list() == sorted(ids)  # source order
    assert test.equals(pl.read_parquet(tmp_path / "plain" / "test.parquet"))  # test is untouched
    again = _prepare(task, data_dir, tmp_path / "again", max_train=50, max_test=10, validation=12)
    assert again == meta and pl.read_parquet(tmp_path / "again" / "validation.parquet").equals(val)
    # validation 0 (the default) writes exactly what a prepare without it writes
    _prepare(task, data_dir, tmp_path / "zero", max_train=50, max_test=10, validation=0)
    for name in ("train.parquet", "test.parquet", "meta.json"):
        assert (tmp_path / "zero" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes()
    assert not (tmp_path / "zero" / "validation.parquet").exists()


def test_a_validation_set_too_large_for_the_train_split_is_a_clear_error(tmp_path, data_dir):
    with pytest.raises(UdrError, match="leave fewer than 2 after"):
        _prepare("sst2", data_dir, tmp_path / "x", max_train=50, max_test=10, validation=10**7)


def test_a_corrupt_prepared_file_names_the_file_and_the_fix(tmp_path):
    import os

    import polars as pl

    from udr.data.prepare import read_prepared
    from udr.paths import Paths

    path = Paths(tmp_path).prepared("trec", "train")
    path.parent.mkdir(parents=True)
    pl.DataFrame({"id": list(range(3000)), "input": ["a question"] * 3000}).write_parquet(path)
    os.truncate(path, 5000)
    with pytest.raises(
        UdrError, match=r"unreadable prepared data .*train.parquet: .*run `udr prepare --task trec` again"
    ):
        read_prepared(tmp_path, "trec", "train")


def test_the_pool_holds_each_demonstration_once(tmp_path, data_dir):
    """trec's train file repeats some questions with their label (e.g. ids 1835 and 4661): the prepared
    pool keeps the first, and says how many it dropped."""
    meta = _prepare("trec", data_dir, tmp_path / "trec", max_train=100_000)
    train = pl.read_parquet(tmp_path / "trec" / "train.parquet")
    assert train.select("input", "target").is_duplicated().sum() == 0
    dropped = meta["counts"]["train"]["repeats_dropped"]
    assert dropped > 0 and len(train) == meta["counts"]["train"]["available"] - dropped
    assert 1835 in train["id"].to_list() and 4661 not in train["id"].to_list()


def test_a_prepared_file_with_other_columns_names_the_column_and_the_fix(tmp_path):
    import polars as pl

    from udr.data.prepare import read_prepared
    from udr.paths import Paths

    path = Paths(tmp_path).prepared("trec", "train")
    path.parent.mkdir(parents=True)
    pl.DataFrame({"id": [1, 2], "text": ["a", "b"]}).write_parquet(path)
    with pytest.raises(UdrError, match=r"lacks column input, target, .*run `udr prepare --task trec` again"):
        read_prepared(tmp_path, "trec", "train")


def test_a_prepared_row_without_its_input_names_the_file_and_the_row(tmp_path):
    """A null input (which BM25 and the prompts would crash on) is one line naming the file and the row."""
    import polars as pl

    from udr.data.prepare import PREPARED_COLUMNS, read_prepared
    from udr.paths import Paths

    path = Paths(tmp_path).prepared("trec", "train")
    path.parent.mkdir(parents=True)
    rows = {"id": [0, 1], "input": ["a", None], "target": ["x", "y"], "label": [0, 1]}
    rows |= {"choices": [[], []], "references": [["x"], ["y"]]}
    pl.DataFrame({c: rows[c] for c in PREPARED_COLUMNS}).write_parquet(path)
    message = r"^malformed prepared data .*train.parquet: row 2 has no input \(null\); run `udr prepare"
    with pytest.raises(UdrError, match=message) as err:
        read_prepared(tmp_path, "trec", "train")
    assert "\n" not in str(err.value)


def test_prepare_refuses_a_folder_it_did_not_make(tmp_path, data_dir):
    out = tmp_path / "sst2"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(UdrError, match=r"sst2 holds other files and is not a prepared task \(no meta.json\)"):
        _prepare("sst2", data_dir, out)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
