"""Serving follows `udr adapt`'s evidence: the winner it exports, SBERT included, serves the task with its pool
(`--model EXPORT`), and with no --model the task of an adapted workspace is served by that workspace's winner,
with one line saying which encoder serves; an explicit --model wins."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest

from tests.conftest import write_params  # noqa: F401  (the served project's params shape)

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


def adapted(root, method: str, export=None):
    """The workspace of `cards` as a finished `udr adapt` leaves it: `method` recommended and exported."""
    from udr.config import load_settings
    from udr.project.adapt import STEPS_NAME, StepRecord, export_winner

    ws = root / "workspaces" / NAME
    target = export or ws / "export"
    line = export_winner(load_settings(ws / "params.yaml"), NAME, method, target)
    (ws / "metrics").mkdir(exist_ok=True)
    (ws / "metrics" / "adapt.json").write_text(json.dumps({"task": NAME, "choice": {"method": method, "reason": ""}}))
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
