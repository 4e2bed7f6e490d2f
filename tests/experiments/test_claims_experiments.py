"""The signal rule (`udr exp signal`), the seed table (`udr exp seeds --table`), the claims table and the
leave-one-family-out folds (`udr exp lofo`) on a tiny evaluated project whose committed runs are crafted: a
retriever that answers every validation row, a seed experiment or a fold whose UDR answers every test row."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import polars as pl
import pytest

from tests.conftest import EVAL_TASKS as TASKS
from tests.conftest import UNSEEN_TASK


def _git(project, *args, env=None):
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, cwd=project, check=True, capture_output=True, text=True, env=env).stdout.strip()


def _answer(path, prediction):
    """Rewrite the predictions in `path`: each the gold answer (`prediction` None) or `prediction`."""
    frame = pl.read_parquet(path)
    new = pl.col("gold") if prediction is None else pl.lit(prediction)
    frame.with_columns(prediction=new).write_parquet(path)


def _graded(path, score: float) -> None:
    """Give the result in `path` the graded score its rewritten predictions give (a comparison checks the two)."""
    result = json.loads(path.read_text())
    path.write_text(json.dumps(result | {"graded": result["graded"] | {"score": score}}))


@pytest.fixture
def with_signal(evaluated, tmp_path):
    """The evaluated project with random, BM25 and SBERT on a validation split (the test rows), where on
    sst2 BM25 answers every row and random none: sst2 carries signal, break (every method alike) does not."""
    from udr.config import load_settings
    from udr.stages.evaluate import run_evaluate

    project = tmp_path / "p"
    shutil.copytree(evaluated, project)
    for t in TASKS:
        prepared = project / "data" / "prepared" / t
        pl.read_parquet(prepared / "test.parquet").write_parquet(prepared / "validation.parquet")
    settings = load_settings(project / "params.yaml")
    for m in ("random", "bm25", "sbert"):
        run_evaluate(settings, m, tasks=TASKS, split="validation", progress=False)
    _answer(project / "data" / "predictions-validation" / "bm25" / "sst2.parquet", None)
    _graded(project / "metrics" / "validation" / "bm25" / "sst2.json", 100.0)
    _answer(project / "data" / "predictions-validation" / "random" / "sst2.parquet", "")
    _graded(project / "metrics" / "validation" / "random" / "sst2.json", 0.0)
    return project


def test_the_signal_rule_keeps_tasks_where_a_baseline_beats_random(with_signal, run_cli):
    from udr.experiments.signal import tasks_with_signal

    assert tasks_with_signal(with_signal, TASKS) is None  # not run yet
    code, out, err = run_cli(["exp", "signal"], with_signal)
    assert code == 0, err
    assert "tasks with signal: sst2 " in out + err
    signal = json.loads((with_signal / "metrics" / "signal.json").read_text())
    assert signal["tasks"]["sst2"]["signal"] and not signal["tasks"]["break"]["signal"]
    assert signal["tasks"]["break"]["bm25 − random"]["difference"] == 0.0
    assert tasks_with_signal(with_signal, TASKS) == ["sst2"]
    assert "| sst2 | 6 |" in (with_signal / "metrics" / "signal.md").read_text()


def test_the_signal_rule_names_the_missing_validation_runs(evaluated, run_cli, tmp_path):
    project = tmp_path / "p"
    shutil.copytree(evaluated, project)
    code, _, err = run_cli(["exp", "signal"], project)
    assert code == 1 and "udr evaluate --split validation -m random" in err
    assert len(err.strip().splitlines()) == 1


def test_the_seed_table_averages_each_seeds_retrievers(with_signal, run_cli):
    from udr.experiments.seeds import seed_table

    project = with_signal
    assert run_cli(["exp", "signal"], project)[0] == 0
    for folder in ("metrics", "data/predictions"):  # a multi-task EPR saved beside (here: EPR's predictions)
        shutil.copytree(project / folder / "epr", project / folder / "epr-multitask")
    _git(project, "init", "-q")
    _git(project, "add", "metrics", "data/predictions")
    _git(project, "commit", "-q", "-m", "the global seed's run")
    head = {t: json.loads((project / "metrics" / "udr" / f"{t}.json").read_text()) for t in TASKS}
    # seed 1: UDR answers every test row (its score, 100), EPR as the global seed's
    _git(project, "checkout", "-q", "-b", "seed1")
    for t in TASKS:
        _answer(project / "data" / "predictions" / "udr" / f"{t}.parquet", None)
        result = head[t] | {"graded": head[t]["graded"] | {"score": 100.0}, "score": 100.0}
        (project / "metrics" / "udr" / f"{t}.json").write_text(json.dumps(result))
    _git(project, "commit", "-q", "-am", "seed 1")
    _git(project, "update-ref", "refs/exps/ab/cdef/seed-1", "seed1")
    _git(project, "checkout", "-q", "-")
    # DR-Target's seed runs are experiments of their own: until one is there, seed 1 has none of DR-Target
    early = seed_table(project, (1,))
    assert early["seeds"] == ["seed 42 (HEAD)", "seed 1"] and early["tasks"]["sst2"]["dr-target"][1] is None
    (early_claim,) = [
        c for c in early["claims"] if (c["a"], c["b"], c["group"]) == ("udr", "dr-target", "all trained tasks")
    ]
    assert len(early_claim["per_seed"]) == 1  # the seeds both sides have: the global seed's
    _git(project, "update-ref", "refs/exps/ab/cdef/dr-target-seed-1", "seed1")  # as the global seed's

    code, out, err = run_cli(["exp", "seeds", "--table", "--seed", "1"], project)
    assert code == 0, err
    written = (project / "metrics" / "seeds.md").read_text()
    code, out, err = run_cli(["exp", "seeds", "--table", "--seed", "1", "--seed", "99"], project)
    assert code == 1 and len(err.strip().splitlines()) == 1 and "no saved run of training seed 99" in err, err
    assert (project / "metrics" / "seeds.md").read_text() == written
    table = seed_table(project, (1,))
    assert table["seeds"] == ["seed 42 (HEAD)", "seed 1"] and table["read_from"][1]["udr"].startswith("udr at ")
    for t in TASKS:
        assert table["tasks"][t]["udr"] == [head[t]["graded"]["score"], 100.0]
        for m in ("epr", "dr-target"):
            assert len(table["tasks"][t][m]) == 2 and len(set(table["tasks"][t][m])) == 1
        assert len(table["tasks"][t]["bm25"]) == 1
    assert table["groups"] == {
        "all trained tasks": TASKS,
        "tasks with signal": ["sst2"],
        "tasks without signal (no claim)": ["break"],
        "unseen tasks": [UNSEEN_TASK],
    }
    assert "epr" not in table["tasks"][UNSEEN_TASK] and len(table["tasks"][UNSEEN_TASK]["udr"]) == 2
    unseen = {(c["a"], c["b"]) for c in table["claims"] if c["group"] == "unseen tasks"}
    assert ("udr", "sbert") in unseen and not any("epr" in pair for pair in unseen)
    claims = [c for c in table["claims"] if c["group"] == "all trained tasks"]
    (claim,) = [c for c in claims if (c["a"], c["b"]) == ("udr", "random")]
    random = sum(table["tasks"][t]["random"][0] for t in TASKS) / len(TASKS)
    assert claim["per_seed"][1] == pytest.approx(100.0 - random)
    assert claim["interval"]["difference"] == pytest.approx(sum(claim["per_seed"]) / 2)
    assert claim["n"] == 12
    pairs = [(c["a"], c["b"]) for c in claims]
    assert ("udr", "epr-multitask") in pairs and ("epr-multitask", "epr") in pairs and ("udr", "dr-target") in pairs
    (same,) = [c for c in claims if (c["a"], c["b"]) == ("epr-multitask", "epr")]
    assert same["interval"]["difference"] == 0.0 and same["per_seed"] == [0.0, 0.0]
    text = (project / "metrics" / "seeds.md").read_text()
    assert " / 100.0 |" in text and "## Claims on seed-averaged retrievers" in text

    # kept at HEAD as saved evaluations, the seed needs no experiment ref (a clone has none)
    from udr.experiments.seeds import keep_seed_evaluations

    assert keep_seed_evaluations(project, (1, 2)) == ["epr-seed-1", "udr-seed-1", "dr-target-seed-1"]
    _git(project, "add", "metrics", "data/predictions")
    _git(project, "commit", "-q", "-m", "seed 1 kept")
    _git(project, "update-ref", "-d", "refs/exps/ab/cdef/seed-1")
    _git(project, "update-ref", "-d", "refs/exps/ab/cdef/dr-target-seed-1")
    kept = seed_table(project, (1,))
    assert kept["read_from"][1]["udr"].startswith("udr-seed-1 at HEAD")
    assert {k: v for k, v in kept.items() if k != "read_from"} == {k: v for k, v in table.items() if k != "read_from"}

    # seed 1 run again after its keep (here: UDR as the global seed's): the newer experiment, not the kept run
    root_commit = _git(project, "rev-list", "--max-parents=0", "HEAD")
    _git(project, "checkout", "-q", "-b", "seed1-again", root_commit)
    env = {**os.environ, "GIT_COMMITTER_DATE": "2099-01-01T00:00:00+00:00"}
    _git(project, "commit", "-q", "--allow-empty", "-m", "again", env=env)
    _git(project, "checkout", "-q", "-")
    _git(project, "update-ref", "refs/exps/ab/cdef/seed-1", "seed1-again")
    again = seed_table(project, (1,))
    assert again["read_from"][1]["udr"].startswith("udr at ")
    assert again["read_from"][1]["dr-target"].startswith("dr-target-seed-1 at HEAD")  # no newer experiment
    for t in TASKS:
        assert again["tasks"][t]["udr"] == [head[t]["graded"]["score"]] * 2
    _git(project, "update-ref", "-d", "refs/exps/ab/cdef/seed-1")

    # a seed evaluated on some tasks only (the suite's: those that bear on a claim) counts where it was
    _git(project, "rm", "-q", "metrics/udr-seed-1/break.json", "data/predictions/udr-seed-1/break.parquet")
    _git(project, "commit", "-q", "-m", "seed 1 of UDR on sst2 only")
    partial = seed_table(project, (1,), experiments=False)
    assert partial["tasks"]["sst2"]["udr"] == [head["sst2"]["graded"]["score"], 100.0]
    assert partial["tasks"]["break"]["udr"] == [head["break"]["graded"]["score"], None]
    by_group = {(c["a"], c["b"], c["group"]): c for c in partial["claims"]}
    assert len(by_group["udr", "random", "all trained tasks"]["per_seed"]) == 1  # break: the global seed only
    assert by_group["udr", "random", "tasks with signal"] == next(
        c for c in table["claims"] if (c["a"], c["b"], c["group"]) == ("udr", "random", "tasks with signal")
    )
    from udr.experiments.seeds import seeds_markdown

    shown = seeds_markdown(partial)
    assert f"| {head['break']['graded']['score']:.1f} / – |" in shown and "as many as its per-seed column" in shown


def test_the_claims_table_gathers_the_seed_table_and_the_suite(tmp_path, run_cli):
    """metrics/claims.md takes each claim's interval and seeds from metrics/seeds.json, the suite's table and the
    folds' tables, leaves out what is missing, and says whether each is resolved."""
    from udr.experiments.paper_claims import claims_rows

    metrics = tmp_path / "metrics"
    (metrics / "suite").mkdir(parents=True)
    assert claims_rows(tmp_path) == []
    interval = {"difference": 2.0, "low": 0.6, "high": 3.4, "resolved": True}
    claim = {"a": "udr", "b": "epr", "group": "tasks with signal", "n": 160, "interval": interval}
    seeds = {"claims": [claim | {"per_seed": [1.0, 2.5, 2.5]}], "groups": {"tasks with signal": ["sst2", "trec"]}}
    (metrics / "seeds.json").write_text(json.dumps(seeds))
    code, _, err = run_cli(["exp", "claims"], tmp_path)
    assert code == 0, err
    text = (metrics / "claims.md").read_text()
    assert "| default run, tasks with signal (sst2, trec): UDR − per-task EPR | 160 | **+2.0 [+0.6, +3.4]** |" in text
    assert "+1.0 / +2.5 / +2.5 | resolved above |" in text
    assert "multi-task EPR" not in text and "suite" not in text  # no source for them
    # the suite by DVC: its table's claims, in the groups that answer the seed table's
    below = {"difference": -1.0, "low": -2.0, "high": 0.1, "resolved": False}
    unseen = {"a": "udr", "b": "sbert", "group": "unseen families", "n": 900, "interval": below, "per_seed": [-1.0]}
    by_dvc = {"claims": [claim | {"per_seed": [2.0]}, unseen], "groups": {"tasks with signal": ["sst2", "trec"]}}
    by_dvc["groups"]["unseen families"] = ["subj", "cola", "commongen"]
    (metrics / "suite" / "pipeline.json").write_text(json.dumps(by_dvc))
    assert run_cli(["exp", "claims"], tmp_path)[0] == 0
    text = (metrics / "claims.md").read_text()
    assert (
        "| suite by DVC, tasks with signal (sst2, trec): UDR − per-task EPR | 160 | **+2.0 [+0.6, +3.4]** | one seed |"
        in text
    )
    assert "| suite by DVC, unseen families (subj, cola, commongen): UDR − SBERT | 900 |" in text
    versus = {"sbert": {"difference": 1.0, "low": -3.0, "high": 5.0, "resolved": False}}
    fold = {"tasks": ["sst2", "trec"], "n": 160, "versus": versus}
    lofo = {"groups": {"sentiment": fold, "pooled: every held-out row": fold}}
    (metrics / "lofo.json").write_text(json.dumps(lofo))
    assert run_cli(["exp", "claims"], tmp_path)[0] == 0
    text = (metrics / "claims.md").read_text()
    assert "default run, one family held out at a time (sst2, trec): UDR − SBERT | 160 | +1.0 [-3.0, +5.0] |" in text
    assert "suite by DVC, one family held out" not in text
    (metrics / "suite" / "lofo.json").write_text(json.dumps({"groups": {"pooled: every held-out row": fold}}))
    assert run_cli(["exp", "claims"], tmp_path)[0] == 0
    text = (metrics / "claims.md").read_text()
    assert "suite by DVC, one family held out at a time (sst2, trec): UDR − SBERT | 160 | +1.0 [-3.0, +5.0] |" in text
    assert (metrics / "claims.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the same rows as a picture
    for source in (metrics / "seeds.json", metrics / "lofo.json", *(metrics / "suite").glob("*.json")):
        source.unlink()
    assert run_cli(["exp", "claims"], tmp_path)[0] == 0
    assert not (metrics / "claims.png").exists()  # no rows: no picture, and not the last one's


def test_the_claims_plot_has_one_row_per_measurement_in_table_order(tmp_path):
    """metrics/claims.png: one labelled row per table row, top down in the table's order, each naming its n."""
    from udr.evaluation.bootstrap import Interval
    from udr.experiments.paper_claims import ClaimRow, plot_claims

    rows = [
        ClaimRow("claim one", "default run: UDR − EPR", 220, Interval(-1.9, -4.1, 0.4), (0.8, -2.3, -4.2)),
        ClaimRow("claim one", "suite: UDR − EPR", 3577, Interval(0.0, -1.2, 1.1)),
        ClaimRow("claim two", "default run: UDR − SBERT", 120, Interval(-4.3, -7.6, -0.8)),
    ]
    labels = plot_claims(rows, tmp_path / "claims.png")
    assert labels == [
        "default run: UDR − EPR (n = 220)",
        "suite: UDR − EPR (n = 3577)",
        "default run: UDR − SBERT (n = 120)",
    ]
    assert (tmp_path / "claims.png").stat().st_size > 10_000
    assert [r.cells()[4:] for r in rows] == [
        ["+0.8 / -2.3 / -4.2", "not resolved"],
        ["one seed", "not resolved"],
        ["one seed", "resolved below"],
    ]


def test_one_family_at_a_time_holds_out_the_families_with_signal(with_signal, run_cli):
    """`udr exp lofo` plans one fold per family with signal (sst2's sentiment: trained on break alone), and
    its table compares the fold's UDR with BM25 and SBERT on the held-out rows."""
    from udr.experiments.lofo import lofo_table

    project = with_signal
    code, _, err = run_cli(["exp", "lofo", "--dry"], project)
    assert code == 1 and "run `udr exp signal` first" in err
    assert run_cli(["exp", "signal"], project)[0] == 0
    code, out, err = run_cli(["exp", "lofo", "--dry"], project)
    assert code == 0, err
    assert "-n lofo-sentiment -S 'train.tasks=[break]' -S 'evaluate.tasks=[sst2]'" in out and "evaluate@udr" in out
    _git(project, "init", "-q")
    _git(project, "add", "metrics", "data/predictions")
    _git(project, "commit", "-q", "-m", "in-domain run")
    _git(project, "checkout", "-q", "-b", "fold")
    _answer(project / "data" / "predictions" / "udr" / "sst2.parquet", None)
    result = json.loads((project / "metrics" / "udr" / "sst2.json").read_text())
    result["graded"]["score"] = 100.0
    (project / "metrics" / "udr" / "sst2.json").write_text(json.dumps(result))
    _git(project, "commit", "-q", "-am", "fold")
    _git(project, "update-ref", "refs/exps/ab/cdef/lofo-sentiment", "fold")
    _git(project, "checkout", "-q", "-")
    assert run_cli(["exp", "lofo", "--table"], project)[0] == 0
    table = lofo_table(project)
    (row,) = table["groups"].values()
    assert row["tasks"] == ["sst2"] and row["n"] == 6 and row["scores"]["UDR, family held out"] == 100.0
    sbert = row["scores"]["sbert"]
    assert row["versus"]["sbert"]["difference"] == pytest.approx(100.0 - sbert)
    assert "| sentiment | sst2 | 6 | 100.0 |" in (project / "metrics" / "lofo.md").read_text()

    from udr.experiments.lofo import keep_fold_evaluations

    assert keep_fold_evaluations(project) == ["udr-lofo-sentiment"]
    _git(project, "add", "metrics", "data/predictions")
    _git(project, "commit", "-q", "-m", "fold kept")
    _git(project, "update-ref", "-d", "refs/exps/ab/cdef/lofo-sentiment")
    kept = lofo_table(project)
    assert kept["groups"] == table["groups"] and kept["folds"]["sentiment"].startswith("udr-lofo-sentiment at HEAD")
    # read at another revision (the suite's experiment): the folds kept there, and no experiment of the workspace
    at = _git(project, "rev-parse", "HEAD")
    _git(project, "rm", "-rq", "metrics/udr-lofo-sentiment")
    _git(project, "commit", "-q", "-m", "fold gone")
    assert lofo_table(project, experiments=False)["groups"] == {}
    assert lofo_table(project, at, experiments=False)["groups"] == table["groups"]


def test_label_aware_selection_is_chosen_on_validation_and_tested_once(with_signal, run_cli):
    """`udr exp labels` on the classification tasks with signal (sst2 here): every point of the grid evaluated on
    validation for UDR and SBERT, the best mean chosen (the plain retriever among them), tested once where it is
    not the plain retriever, and the table written; run again, it evaluates nothing on validation anew."""
    from udr.config import LabelSettings
    from udr.workflows.label_sweep import grid, point_name

    code, _, err = run_cli(["exp", "labels"], with_signal)
    assert code == 1 and "run `udr exp signal` first" in err and err.count("\n") == 1, err
    assert run_cli(["exp", "signal"], with_signal)[0] == 0
    code, out, err = run_cli(["exp", "labels"], with_signal)
    assert code == 0, err
    data = json.loads((with_signal / "metrics" / "labels.json").read_text())
    assert data["tasks"] == ["sst2"]
    for m in ("udr", "sbert"):
        swept = data["swept"][m]
        assert list(swept["validation"]) == [point_name(m, p) for p in grid()]
        name = point_name(m, LabelSettings(**swept["chosen"]))
        assert swept["validation"][name] == max(swept["validation"].values())
        assert (with_signal / "metrics" / f"{m}+labels" / "sst2.json").is_file() == (name != m)
    assert "Validation sweep" in (with_signal / "metrics" / "labels.md").read_text()
    saved = {p: p.stat().st_mtime_ns for p in (with_signal / "metrics" / "validation").rglob("*.json")}
    code, _, err = run_cli(["exp", "labels"], with_signal)
    assert code == 0, err
    assert {p: p.stat().st_mtime_ns for p in saved} == saved

    signal = with_signal / "metrics" / "signal.json"
    measured = json.loads(signal.read_text())
    measured["tasks"]["sst2"]["signal"] = False
    signal.write_text(json.dumps(measured))
    code, _, err = run_cli(["exp", "labels"], with_signal)
    assert code == 1 and "no trained classification task carries signal" in err and err.count("\n") == 1, err
