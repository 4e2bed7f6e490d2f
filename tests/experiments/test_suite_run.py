"""metrics/suite: the test run's params are the suite profile's, its job list holds UDR back until a recipe
is chosen, and the results writer's averages and intervals are the files' own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from udr.config import load_settings

SUITE = REPO / "metrics" / "suite"


@pytest.fixture
def suite(monkeypatch):
    monkeypatch.syspath_prepend(str(SUITE))
    for name in ("run", "write_results"):
        sys.modules.pop(name, None)
    import run
    import write_results

    return run, write_results


def test_the_runs_params_validate_and_keep_the_tasks_apart(suite, tmp_path):
    run, _ = suite
    import yaml

    (tmp_path / "params.yaml").write_text(yaml.safe_dump(run.suite_params(tmp_path)))
    s = load_settings(tmp_path / "params.yaml")
    assert set(run.TRAINED) == set(s.prepare.tasks)
    assert set(run.HELD_OUT + run.SIBLING) == set(s.evaluate.unseen_tasks)
    assert all(s.evaluate.unseen_tasks[t].max_test == 300 for t in run.HELD_OUT + run.SIBLING)
    assert Path(s.score.shipped).is_absolute() and Path(s.score.shipped, "SHA256SUMS").is_file()


def test_no_udr_job_runs_before_a_recipe_is_chosen(suite, tmp_path, monkeypatch):
    run, _ = suite
    (tmp_path / "logs").mkdir()
    (tmp_path / "done").mkdir()
    ran = []
    monkeypatch.setattr(run, "RECIPE", None)
    monkeypatch.setattr(run, "job_list", lambda threads: {j: (None, lambda w, j=j: ran.append(j)) for j in JOBS})
    JOBS = ["train-udr", "interpolate-udr", "train-epr", f"eval-{run.UDR}-trained", "eval-bm25-trained"]
    run.run_jobs(tmp_path, workers=1, threads=1)
    assert ran == ["train-epr", "eval-bm25-trained"]
    assert sorted(p.name for p in (tmp_path / "done").iterdir()) == ["eval-bm25-trained", "train-epr"]


def test_the_headline_averages_the_files_and_copies_the_intervals(suite, tmp_path):
    run, write_results = suite
    tasks = [t for ts in run.GROUPS.values() for t in ts]
    for i, m in enumerate(run.METHODS):
        (tmp_path / m).mkdir()
        for j, t in enumerate(tasks):
            result = {"graded": {"score": 10.0 * i + j}, "n": 100, "label_share": 0.5}
            (tmp_path / m / f"{t}.json").write_text(json.dumps(result))
    for b in run.METHODS[1:]:
        for g, ts in run.GROUPS.items():
            d = {t: {"difference": -1.0, "low": -2.0, "high": -0.5, "resolved": True} for t in ts}
            d["average"] = {"difference": -1.25, "low": -2.5, "high": 0.25, "resolved": False}
            (tmp_path / f"compare-{b}-{g}.json").write_text(json.dumps(d))
    write_results.write_all(tmp_path, None, ["train.loss=anchored"], 0.5)
    headline = (tmp_path / "headline.md").read_text().splitlines()
    trained = [j for j, t in enumerate(tasks) if t in run.GROUPS["trained"]]
    row = next(line for line in headline if line.startswith(f"| {write_results.LABELS['epr']} |"))
    assert row.split("|")[2].strip() == f"{10.0 + sum(trained) / len(trained):.1f}"
    assert "| UDR − BM25 | -1.2 [-2.5, +0.2] |" in "\n".join(headline)
    assert "**-1.0 [-2.0, -0.5]**" in (tmp_path / "results.md").read_text()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["recipe"] == {"overrides": ["train.loss=anchored"], "interpolation_alpha": 0.5}


def test_an_evaluation_claimed_by_a_live_run_is_left_to_it(suite, tmp_path):
    """Two runs on one project (different --jobs) never evaluate the same task at once; a stopped run's
    claim is taken over."""
    run, _ = suite
    assert run.claimed(tmp_path, "sbert-sst2") and run.claimed(tmp_path, "sbert-sst2")
    (tmp_path / "claims" / "sbert-mr").write_text(str(os.getppid()))  # a live process
    assert not run.claimed(tmp_path, "sbert-mr")
    (tmp_path / "claims" / "sbert-cr").write_text("999999999")  # no such process
    assert run.claimed(tmp_path, "sbert-cr")
    assert (tmp_path / "claims" / "sbert-cr").read_text() == str(os.getpid())


def _run_py(*args: str) -> subprocess.CompletedProcess:
    """metrics/suite/run.py ARGS as a user runs it."""
    return subprocess.run(
        [sys.executable, str(SUITE / "run.py"), *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def _one_line_error(done: subprocess.CompletedProcess, message: str) -> None:
    assert done.returncode == 1, done
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_bad_rev_or_work_folder_is_a_one_line_error(tmp_path):
    _one_line_error(_run_py("--rev", "nosuch", "--work", str(tmp_path / "w")), "--rev 'nosuch' names no commit")
    _one_line_error(_run_py("--rev=--all", "--work", str(tmp_path / "w")), "names no commit")
    _one_line_error(_run_py("--work", ""), "--work is empty")
    (tmp_path / "file").write_text("x")
    _one_line_error(_run_py("--work", str(tmp_path / "file")), "is a file, not a folder")
    assert not (tmp_path / "w").exists()


def test_only_report_refuses_a_work_folder_that_did_not_make_the_committed_results(tmp_path):
    """--only report rewrites the committed provenance: from a folder that holds no run, or a run of other
    code or params, it is refused, and nothing committed changes."""
    committed = {p.name: p.read_bytes() for p in SUITE.iterdir() if p.is_file()}
    work = tmp_path / "w"
    _one_line_error(_run_py("--only", "report", "--work", str(work)), "holds no suite run")
    assert not work.exists()
    (work / "code").mkdir(parents=True)
    (work / "code" / "REV").write_text("0" * 40 + "\n")
    (work / "params.yaml").write_text("seed: 1\n")
    _one_line_error(_run_py("--only", "report", "--work", str(work)), "ran the udr code of 000000000000")
    (work / "code" / "REV").write_text((SUITE / "CODE_REV").read_text())
    _one_line_error(_run_py("--only", "report", "--work", str(work)), "is not the committed results'")
    assert {p.name: p.read_bytes() for p in SUITE.iterdir() if p.is_file()} == committed
