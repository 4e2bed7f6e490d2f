"""The reported reproductions of user-named output paths, through the command line: `..` in an output
path, targets that cannot be written, a folder named like Rich markup. Each is one line, exit 1 (or the
correct output), and touches nothing it should not."""

from __future__ import annotations

import json
import shutil

import pytest


@pytest.fixture
def project(served, tmp_path):
    root = tmp_path / "project"
    shutil.copytree(served, root)
    return root


def _tree(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line(code, err):
    assert code == 1 and err.startswith("udr: error: ") and len(err.strip().splitlines()) == 1, err


def test_index_out_through_dotdot_is_refused_before_the_work(project, run_cli):
    before = _tree(project / "models")
    code, _, err = run_cli(["index", "--out", "nosuch/.."], project)
    _one_line(code, err)
    assert "holds the current directory" in err and _tree(project / "models") == before


def test_retrieve_output_through_dotdot_is_refused_before_the_model_loads(project, run_cli):
    queries = project / "queries.jsonl"
    queries.write_text(json.dumps({"query": "a gripping, funny film", "task": "sst2"}) + "\n")
    code, out, err = run_cli(["retrieve", "--input", "queries.jsonl", "--output", "nosuch/.."], project)
    _one_line(code, err)
    assert "is a directory" in err and not out


def test_export_to_an_unwritable_place_is_one_line(project, run_cli):
    code, _, err = run_cli(["export", "/proc/self/newexp"], project)
    _one_line(code, err)
    assert "not writable" in err


def test_init_task_dir_under_a_file_is_one_line(project, run_cli, tmp_path):
    rows = tmp_path / "rows.csv"
    rows.write_text("text,label\n" + "".join(f"row {i},{'ab'[i % 2]}\n" for i in range(20)))
    (project / "afile").write_text("x")
    code, _, err = run_cli(["init-task", "mine", "--from", str(rows), "--dir", "afile/ws"], project)
    _one_line(code, err)
    assert "afile is a file, not a directory" in err and (project / "afile").read_text() == "x"


def test_a_folder_named_like_markup_prints_as_it_is(project, run_cli, tmp_path):
    target = tmp_path / "x[/b]"
    code, _, err = run_cli(["export", str(target)], project)
    assert code == 0, err
    assert "x[/b]" in err and (target / "udr_export.json").is_file()
