"""udr.util.files: atomic writes keep the old file when a write fails midway; building_dir swaps a
directory in only on success."""

from __future__ import annotations

import json

import pytest

from udr.util import files
from udr.util.files import building_dir, write_json_atomic, write_text_atomic


def _leftovers(parent) -> list[str]:
    return sorted(p.name for p in parent.iterdir())


def test_write_text_atomic_replaces_the_file(tmp_path):
    path = tmp_path / "sub" / "out.txt"
    write_text_atomic(path, "old")
    write_text_atomic(path, "new")
    assert path.read_text() == "new" and _leftovers(path.parent) == ["out.txt"]


def test_write_text_atomic_keeps_the_old_file_when_the_write_fails(tmp_path, monkeypatch):
    path = tmp_path / "out.txt"
    write_text_atomic(path, "old")

    def half_then_fail(tmp, text):
        tmp.write_bytes(text[: len(text) // 2].encode())  # part of the new text is on disk
        raise OSError("disk full")

    monkeypatch.setattr(type(path), "write_text", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        write_text_atomic(path, "new content")
    monkeypatch.undo()
    assert path.read_text() == "old"
    assert _leftovers(tmp_path) == ["out.txt"]  # no temporary file left


def test_write_json_atomic_keeps_the_old_file_when_the_write_fails(tmp_path, monkeypatch):
    path = tmp_path / "out.json"
    write_json_atomic(path, {"a": 1})
    assert path.read_text() == '{\n  "a": 1\n}\n'

    def half_then_fail(tmp, text):
        tmp.write_bytes(text[: len(text) // 2].encode())
        raise OSError("disk full")

    monkeypatch.setattr(type(path), "write_text", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        write_json_atomic(path, {"a": 2, "b": [1, 2]})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"a": 1} and _leftovers(tmp_path) == ["out.json"]

    real_replace = files.os.replace

    def fail_replace(src, dst):
        raise OSError("killed before the rename")

    monkeypatch.setattr(files.os, "replace", fail_replace)
    with pytest.raises(OSError, match="killed"):
        write_json_atomic(path, {"a": 2, "b": [1, 2]})
    monkeypatch.setattr(files.os, "replace", real_replace)
    assert json.loads(path.read_text()) == {"a": 1}
    assert _leftovers(tmp_path) == ["out.json"]
    with pytest.raises(TypeError):  # not JSON-serialisable: fails before anything is written
        write_json_atomic(path, {"a": object()})
    assert json.loads(path.read_text()) == {"a": 1} and _leftovers(tmp_path) == ["out.json"]


def test_building_dir_replaces_the_target_on_success(tmp_path):
    dest = tmp_path / "model"
    dest.mkdir()
    (dest / "old.txt").write_text("old")
    with building_dir(dest) as tmp:
        assert tmp != dest and tmp.parent == dest.parent and not any(tmp.iterdir())
        assert (dest / "old.txt").read_text() == "old"  # untouched while building
        (tmp / "new.txt").write_text("new")
    assert _leftovers(dest) == ["new.txt"] and (dest / "new.txt").read_text() == "new"
    assert _leftovers(tmp_path) == ["model"]


def test_building_dir_creates_a_missing_target(tmp_path):
    dest = tmp_path / "a" / "b"
    with building_dir(dest) as tmp:
        (tmp / "x").write_text("1")
    assert (dest / "x").read_text() == "1" and _leftovers(dest.parent) == ["b"]


def test_building_dir_leaves_the_old_target_untouched_on_an_exception(tmp_path):
    dest = tmp_path / "model"
    dest.mkdir()
    (dest / "old.txt").write_text("old")
    with pytest.raises(RuntimeError, match="boom"), building_dir(dest) as tmp:
        (tmp / "new.txt").write_text("half")
        raise RuntimeError("boom")
    assert _leftovers(dest) == ["old.txt"] and (dest / "old.txt").read_text() == "old"
    assert _leftovers(tmp_path) == ["model"]  # the temporary directory is gone
    with pytest.raises(RuntimeError), building_dir(tmp_path / "new") as tmp:
        raise RuntimeError("boom")
    assert _leftovers(tmp_path) == ["model"]  # a failed first build leaves nothing


def test_a_kill_during_the_swap_never_leaves_the_target_missing(tmp_path):
    """A process killed at the rename that follows the first one (SIGKILL: no cleanup runs) still
    leaves the target directory in place, old or new."""
    import subprocess
    import sys

    dest = tmp_path / "sst2"
    dest.mkdir()
    (dest / "train.parquet").write_text("old")
    script = f"""
import os
from pathlib import Path
from udr.util import files
calls = []
real = os.replace
def replace(a, b):
    calls.append(1)
    if len(calls) == 2:
        os._exit(9)
    real(a, b)
files.os.replace = replace
with files.building_dir(Path({str(dest)!r})) as tmp:
    (tmp / "train.parquet").write_text("new")
"""
    subprocess.run([sys.executable, "-c", script], check=False)
    assert (dest / "train.parquet").read_text() in ("old", "new")


def test_stale_siblings_of_killed_writers_are_removed(tmp_path):
    dest = tmp_path / "sst2"
    dead = 2**22 + 12345  # above the default pid_max: no such process
    for tag in ("tmp", "old", "staging"):
        (tmp_path / f".sst2.{tag}-{dead}").mkdir()
    with building_dir(dest) as tmp:
        (tmp / "x").write_text("1")
    assert _leftovers(tmp_path) == ["sst2"]


def test_a_staging_dir_is_gone_after_its_block_even_on_error(tmp_path):
    from udr.util.files import staging_dir

    dest = tmp_path / "export"
    with pytest.raises(RuntimeError), staging_dir(dest) as scratch:
        (scratch / "big.bin").write_text("x")
        assert scratch.parent == tmp_path and scratch.name.startswith(".export.staging-")
        raise RuntimeError
    assert _leftovers(tmp_path) == []


def test_prepared_tasks_never_lists_temporary_directories(tmp_path):
    from udr.paths import Paths

    for name in ("sst2", ".trec.tmp-123", ".e2e.old-9"):
        (tmp_path / "data" / "prepared" / name).mkdir(parents=True)
        (tmp_path / "data" / "prepared" / name / "train.parquet").write_text("x")
    assert Paths(tmp_path).prepared_tasks() == ["sst2"]


@pytest.mark.parametrize("made_by_us", [False, True])
def test_check_dir_target_refuses_a_folder_it_did_not_make(tmp_path, monkeypatch, made_by_us):
    """The one guard of every folder-writing command: new, empty, or its own folder (a marker file) pass;
    a folder of other files, a file, and the current directory or one above it are one-line errors."""
    from udr.errors import UdrError
    from udr.util.files import check_dir_target

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    if made_by_us:
        (mine / "marker.json").write_text("{}")
        check_dir_target(mine, ("marker.json",), "a thing")
    else:
        with pytest.raises(UdrError, match=r"mine holds other files and is not a thing \(no marker.json\)"):
            check_dir_target(mine, ("marker.json",), "a thing", "--out")
    (tmp_path / "empty").mkdir()
    check_dir_target(tmp_path / "empty", ("marker.json",), "a thing")
    check_dir_target(tmp_path / "new" / "sub", ("marker.json",), "a thing")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UdrError, match="afile is a file"):
        check_dir_target(tmp_path / "afile", ("marker.json",), "a thing")
    with pytest.raises(UdrError, match="afile is a file, not a directory"):
        check_dir_target(tmp_path / "afile" / "sub", ("marker.json",), "a thing")
    monkeypatch.chdir(mine)
    for here in (mine, tmp_path, "."):
        with pytest.raises(UdrError, match="it holds the current directory"):
            check_dir_target(here, ("marker.json",), "a thing")
    assert (mine / "notes.txt").read_text() == "keep me"


def test_building_dir_with_markers_leaves_a_foreign_folder_untouched(tmp_path):
    from udr.errors import UdrError

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(UdrError, match="not a thing"), building_dir(mine, ("marker.json",), "a thing") as tmp:
        (tmp / "marker.json").write_text("{}")
    assert _leftovers(mine) == ["notes.txt"] and _leftovers(tmp_path) == ["mine"]


def test_building_dir_gives_files_the_umasks_permissions(tmp_path):
    """safetensors writes weights 0600; a folder udr builds is readable as the umask allows."""
    import os

    mask = os.umask(0o022)
    try:
        with building_dir(tmp_path / "model") as tmp:
            (tmp / "model.safetensors").write_bytes(b"w")
            os.chmod(tmp / "model.safetensors", 0o600)
    finally:
        os.umask(mask)
    assert oct((tmp_path / "model/model.safetensors").stat().st_mode & 0o777) == oct(0o644)


def test_resolve_target_resolves_dotdot_and_links_before_checking(tmp_path, monkeypatch):
    from pathlib import Path

    from udr.errors import UdrError
    from udr.util.files import check_dir_target, check_output_path, resolve_target

    monkeypatch.chdir(tmp_path)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert resolve_target(Path("nosuch/.."), "--out") == tmp_path
    assert resolve_target(Path("link/new"), "--out") == tmp_path / "real" / "new"
    with pytest.raises(UdrError, match="holds the current directory"):
        check_dir_target(Path("nosuch/.."), ("x",), "a thing", "--out")
    with pytest.raises(UdrError, match="is a directory"):
        check_output_path(Path("nosuch/.."))
    with pytest.raises(UdrError, match="longer than the file system allows"):
        resolve_target(Path("x" * 300), "--out")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UdrError, match="is a file, not a directory"):
        resolve_target(Path("file/sub/out"), "--dir")
    with pytest.raises(UdrError, match="root of the file system"):
        resolve_target(Path("/"), "--out")
    with pytest.raises(UdrError, match="not writable"):
        resolve_target(Path("/proc/self/newexp"), "export target")
    assert not list(tmp_path.glob(".udr-probe-*"))  # the writability probe leaves nothing behind


def test_a_folder_that_cannot_be_emptied_is_refused_before_the_work(tmp_path, monkeypatch):
    """A read-only data/prepared/<task>: the new folder would be swapped in and the old one could not be
    deleted (a read-only temporary folder left behind); refused before anything is written instead."""
    import tempfile

    from udr.errors import UdrError
    from udr.util.files import building_dir

    dest = tmp_path / "sst2"
    dest.mkdir()
    (dest / "meta.json").write_text("{}")
    real = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and str(dir) == str(dest):
            raise PermissionError(13, "Permission denied")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    refused = pytest.raises(UdrError, match=r"cannot replace .*sst2: .*sst2 is not writable")
    with refused, building_dir(dest, ("meta.json",), "a prepared task") as tmp:
        (tmp / "meta.json").write_text("new")
    assert (dest / "meta.json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sst2"]  # no temporary folder left
