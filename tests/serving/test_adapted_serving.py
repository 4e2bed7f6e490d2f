"""Serving follows `udr adapt`'s evidence: the winner it exports, SBERT included, serves the task with its pool
(`--model EXPORT`), and with no --model the task of an adapted workspace is served by that workspace's winner,
with one line saying which encoder serves; an explicit --model wins."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest

NAME = "cards"
QUERY = "my card was charged twice for one purchase"


@pytest.fixture
def project(served, tmp_path, run_cli):
    """A copy of the served project with a workspace of an own task `cards` (`udr init-task`, prepared), as
    `udr adapt` leaves one before its export."""
    root = tmp_path / "project"
    shutil.copytree(served, root)
    rows = [
        (f"card question {i} about {'fees' if i % 2 else 'limits'} and more", "fee" if i % 2 else "limit")
        for i in range(30)
    ]
    source = tmp_path / "cards.csv"
    with source.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    for args, cwd in ((["init-task", NAME, "--from", str(source)], root), (["prepare"], root / "workspaces" / NAME)):
        code, _, err = run_cli(args, cwd)
        assert code == 0, err
    return root


def adapted(root, method: str, export=None, labels=None):
    """The workspace of `cards` as a finished `udr adapt` leaves it: `method` recommended and exported (`labels`:
    a label-aware winner's selection)."""
    from udr.config import load_settings
    from udr.project.adapt import STEPS_NAME, StepRecord, export_winner

    ws = root / "workspaces" / NAME
    target = export or ws / "export"
    line = export_winner(load_settings(ws / "params.yaml"), NAME, method, target)
    (ws / "metrics").mkdir(exist_ok=True)
    report = {"task": NAME, "choice": {"method": method, "reason": ""}, "labels": labels}
    (ws / "metrics" / "adapt.json").write_text(json.dumps(report))
    request = {"export": None if export is None else str(export.resolve())}
    (ws / STEPS_NAME).write_text(StepRecord(ws, request, {"export": {"seconds": 1.0, "value": line}}).text())
    return ws, target


def _sbert_ranking(root, k):
    """What `udr evaluate -m sbert` ranks for QUERY over the workspace's pool."""
    import polars as pl

    from udr.evaluation.baselines import sbert_retriever

    pool = pl.read_parquet(root / "workspaces" / NAME / "data" / "prepared" / NAME / "train.parquet")
    ranking = sbert_retriever(root / "models" / "base" / "encoder", NAME, pool, "cpu", 8).rank([QUERY], k)
    return ranking.ids[0].tolist(), ranking.similarities[0]


def test_the_sbert_export_serves_its_task_with_its_pool(project, run_cli, tmp_path):
    _, export = adapted(project, "sbert")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, out, err = run_cli(["retrieve", QUERY, "-t", NAME, "--model", str(export), "--json", "-k", "4"], elsewhere)
    assert code == 0, err
    demos = [json.loads(line) for line in out.splitlines()]
    ids, sims = _sbert_ranking(project, 4)
    assert [d["pool_id"] for d in demos] == ids
    np.testing.assert_allclose([d["similarity"] for d in demos], sims, rtol=1e-5, atol=1e-6)
    # It holds no UDR: asked for one, a single line says so.
    code, _, err = run_cli(["retrieve", QUERY, "-t", NAME, "--model", str(export), "--encoder", "udr"], elsewhere)
    assert code == 1 and err.count("\n") == 1 and "is an export of the base encoder (sbert)" in err, err


def _retrieved(out: str) -> list[int]:
    return [json.loads(line)["pool_id"] for line in out.splitlines()]


def _notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("udr: note:")]


def test_the_task_is_served_by_the_sbert_winner_by_name_and_an_explicit_model_wins(project, run_cli):
    adapted(project, "sbert")
    code, out, err = run_cli(["retrieve", QUERY, "-t", NAME, "--json", "-k", "4"], project)
    assert code == 0, err
    assert _retrieved(out) == _sbert_ranking(project, 4)[0]
    (note,) = _notes(err)
    assert note.startswith(f"udr: note: serving {NAME} with the base encoder (sbert) from workspaces/{NAME}/export")
    assert "`udr adapt` recommended it" in note and "--model DIR serves another model" in note
    # An explicit --model serves as asked: the project's UDR carries no pool of the task.
    code, _, err = run_cli(["retrieve", QUERY, "-t", NAME, "--model", "models/final", "--json"], project)
    assert code == 1 and "serving" not in err


def test_python_follows_a_trained_winner_and_says_so_once(project):
    from udr import Retriever
    from udr.util.notice import UdrNotice

    _, export = adapted(project, "udr")
    with pytest.warns(UdrNotice) as said:
        retriever = Retriever.load(root=project, cache_dir=project / "cache")
        demos = retriever.retrieve(QUERY, task=NAME, k=4)
        retriever.retrieve("a second question", task=NAME, k=2)
    notes = [str(w.message) for w in said]
    assert len(notes) == 1 and notes[0].startswith(f"serving {NAME} with the project's UDR from "), notes
    direct = Retriever.load(export, root=project, encoder="udr", cache_dir=project / "cache").retrieve(QUERY, NAME, 4)
    assert [d.pool_id for d in demos] == [d.pool_id for d in direct]
    assert retriever.prompt(QUERY, demos, task=NAME).splitlines()[-1].startswith(QUERY)


def test_a_bm25_winner_is_served_with_the_base_encoder_over_the_workspace_pool(project, run_cli):
    adapted(project, "bm25")
    code, out, err = run_cli(["retrieve", QUERY, "-t", NAME, "--json", "-k", "4"], project)
    assert code == 0, err
    assert _retrieved(out) == _sbert_ranking(project, 4)[0]
    (note,) = _notes(err)
    assert "with the base encoder (sbert) over the workspace's pool" in note
    assert "recommended bm25 for it" in note and "no dense retriever" in note


def test_a_workspace_elsewhere_is_followed_where_its_run_recorded_it(project, run_cli, tmp_path):
    from udr.project.adapt import record_workspace

    ws, _ = adapted(project, "sbert")
    ids = _sbert_ranking(project, 3)[0]
    moved = tmp_path / "mine" / NAME
    moved.parent.mkdir()
    shutil.move(ws, moved)
    code, _, err = run_cli(["retrieve", QUERY, "-t", NAME, "--json"], project)
    assert code == 1 and "serving" not in err  # nothing at the default workspace, nothing recorded
    record_workspace(project, NAME, moved)
    code, out, err = run_cli(["retrieve", QUERY, "-t", NAME, "--json", "-k", "3"], project)
    assert code == 0, err
    assert _retrieved(out) == ids and f"{moved}/export" in _notes(err)[0]


def test_a_label_aware_winner_serves_with_its_selection_by_default(project, run_cli):
    """`udr adapt` recommending SBERT with label-aware selection: the task served by name takes SBERT's candidates
    with that selection (a balanced quota here: 2 of each label in 4), one note saying so; asked for another
    selection, that one."""
    labels = {"weight": 0.0, "votes": 16, "per_label": "balanced"}
    adapted(project, "sbert-labels", labels=labels)
    code, out, err = run_cli(["retrieve", QUERY, "-t", NAME, "--json", "-k", "4"], project)
    assert code == 0, err
    outputs = [json.loads(line)["output"] for line in out.splitlines()]
    assert sorted(outputs) == ["fee", "fee", "limit", "limit"], outputs
    notes = _notes(err)
    assert any("label-aware selection by default (γ 0, 16 votes, per-label quota balanced)" in n for n in notes)
    assert any(f"serving {NAME} with the base encoder (sbert)" in n for n in notes)
    code, out, err = run_cli(["retrieve", QUERY, "-t", NAME, "--json", "-k", "4", "--per-label", "4"], project)
    assert code == 0, err
    assert _retrieved(out) == _sbert_ranking(project, 4)[0]  # a quota of 4 a label cuts nothing of 4


def test_a_label_aware_report_without_its_selection_is_a_one_line_error(project):
    from udr.errors import UdrError
    from udr.project.adapt import adapted_task

    adapted(project, "sbert-labels", labels={"weight": "x"})
    with pytest.raises(UdrError, match="no label selection of sbert-labels"):
        adapted_task(project, NAME)
