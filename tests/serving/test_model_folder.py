"""A model folder that serves alone: `udr index` puts each pool and its task declaration beside the index
(udr.retriever.index, udr.serving.pools), `udr retrieve` finds them from any directory, `-p` names a
project from elsewhere, and `udr index -t` re-embeds one task's pool."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import polars as pl
import pytest

QUERY = "a gripping, funny film"


@pytest.fixture
def project(served, tmp_path):
    """A private copy of the served project (tests here write into it)."""
    root = tmp_path / "project"
    shutil.copytree(served, root)
    return root


def _ids(out: str) -> list[int]:
    return [json.loads(line)["pool_id"] for line in out.splitlines() if line.startswith("{")]


def test_index_puts_each_pool_and_its_declaration_in_the_model(served):
    from udr.data.tasks import get_task
    from udr.serving.pools import model_tasks

    final = served / "models/final"
    for task in ("sst2", "break"):
        prepared = served / f"data/prepared/{task}/train.parquet"
        assert (final / f"pools/{task}.parquet").read_bytes() == prepared.read_bytes()
    carried = model_tasks(final)
    assert set(carried) == {"sst2", "break"}
    for name, task in carried.items():
        assert replace(task, declared_in="built-in") == get_task(name) and "tasks.json" in task.declared_in
    assert json.loads((final / "pools/tasks.json").read_text())["sst2"]["kind"] == "classification"


def test_the_model_folder_retrieves_from_another_directory(served, run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("UDR_CACHE_DIR", str(tmp_path / "cache"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, here, err = run_cli(["retrieve", QUERY, "-t", "sst2", "-k", "4", "--json"], served)
    assert code == 0, err
    model = str(served / "models/final")
    code, there, err = run_cli(["retrieve", QUERY, "-t", "sst2", "-k", "4", "--json", "--model", model], elsewhere)
    assert code == 0, err
    assert _ids(there) == _ids(here) and len(_ids(here)) == 4
    assert not (tmp_path / "cache").exists()  # served from the folder's own index, nothing re-embedded


def test_params_option_names_a_project_from_elsewhere(served, run_cli, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, here, err = run_cli(["retrieve", QUERY, "-t", "break", "-k", "3", "--json"], served)
    assert code == 0, err
    code, there, err = run_cli(
        ["retrieve", QUERY, "-t", "break", "-k", "3", "--json", "-p", str(served / "params.yaml")], elsewhere
    )
    assert code == 0, err
    assert _ids(there) == _ids(here)
    code, _, err = run_cli(["retrieve", QUERY, "-t", "sst2", "-p", str(tmp_path / "none.yaml")], elsewhere)
    assert code == 1 and "params file not found" in err


def test_a_task_the_folder_lacks_outside_a_project_says_so(served, run_cli, tmp_path):
    code, _, err = run_cli(["retrieve", QUERY, "-t", "trec", "--model", str(served / "models/final")], tmp_path)
    assert code == 1 and "not a udr project" in err and "prepare.tasks" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_broken_declaration_file_does_not_stop_retrieval_of_an_indexed_task(project, run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("UDR_CACHE_DIR", str(tmp_path / "cache"))
    tasks_dir = project / "data/tasks"
    tasks_dir.mkdir(parents=True, exist_ok=True)
    (tasks_dir / "broken.yaml").write_text("news: {kind: classification, instruction: [unclosed\n")
    code, out, err = run_cli(["retrieve", QUERY, "-t", "sst2", "-k", "2", "--json"], project)
    assert code == 0, err
    assert len(_ids(out)) == 2
    code, _, err = run_cli(["prepare", "-t", "sst2"], project)  # commands that read the declarations still say it
    assert code == 1 and "broken.yaml" in err and "not valid YAML" in err


def test_index_one_task_keeps_the_others(project, run_cli):
    final = project / "models/final"
    before = {t: (final / f"index/{t}.npy").read_bytes() for t in ("sst2", "break")}
    (final / "index/break.npy").write_bytes(b"")  # only an -t break run rewrites it
    code, _, err = run_cli(["index", "-t", "break"], project)
    assert code == 0, err
    assert (final / "index/break.npy").read_bytes() == before["break"]
    assert (final / "index/sst2.npy").read_bytes() == before["sst2"]
    report = json.loads((final / "index/report.json").read_text())
    assert set(report["tasks"]) == {"sst2", "break"}
    assert set(json.loads((final / "pools/tasks.json").read_text())) == {"sst2", "break"}


def test_index_one_task_needs_the_rounds_model_in_place(project, run_cli):
    shutil.rmtree(project / "models/final")
    code, _, err = run_cli(["index", "-t", "sst2"], project)
    assert code == 1 and "run `udr index` (every task) first" in err
    assert not (project / "models/final").exists()


def test_a_damaged_pool_copy_is_one_line(project, run_cli):
    pool = project / "models/final/pools/sst2.parquet"
    pl.DataFrame({"id": [1]}).write_parquet(pool)
    code, _, err = run_cli(["retrieve", QUERY, "-t", "sst2"], project)
    assert code == 1 and "pools/sst2.parquet lacks column input, target" in err and "udr index" in err
    assert len(err.strip().splitlines()) == 1


def test_a_pool_prepared_again_since_index_is_not_served_stale(project, run_cli):
    """After the project prepares sst2 again, the model folder's old copy is refused in one line (as
    `udr evaluate` refuses the stale index) until `udr index -t sst2` copies the new one."""
    prepared = project / "data/prepared/sst2/train.parquet"
    pl.read_parquet(prepared).head(10).write_parquet(prepared)
    code, _, err = run_cli(["retrieve", QUERY, "-t", "sst2"], project)
    assert code == 1 and "pool of sst2 differs from the project's prepared sst2" in err, err
    assert "udr index -t sst2" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(["index", "-t", "sst2"], project)
    assert code == 0, err
    code, out, err = run_cli(["retrieve", QUERY, "-t", "sst2", "--json", "-k", "10"], project)
    assert code == 0 and len(_ids(out)) == 10, err


@pytest.mark.parametrize("field, value", [("instruction", "Mood of the line: "), ("template", "{input} => {answer}")])
def test_a_declaration_changed_since_index_is_refused_not_mixed(project, run_cli, tmp_path, field, value):
    """pools/tasks.json giving a task another instruction or template, index and weights untouched: the
    queries would be embedded with the new text against demonstrations embedded with the old; refused."""
    declarations = project / "models/final/pools/tasks.json"
    tasks = json.loads(declarations.read_text())
    tasks["sst2"][field] = value
    declarations.write_text(json.dumps(tasks))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    model = str(project / "models/final")
    code, out, err = run_cli(["retrieve", QUERY, "-t", "sst2", "--json", "--model", model], elsewhere)
    assert code == 1 and not out and len(err.strip().splitlines()) == 1, err
    assert "embedded with another instruction or template" in err and "udr index -t sst2" in err
