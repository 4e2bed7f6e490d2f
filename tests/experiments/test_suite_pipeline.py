"""`udr exp suite`: a profile reproduced by the project's pipeline in a git worktree of its own, saved as a
DVC experiment, resumed where it stopped, and tabulated from the experiment's commit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.tiny_pipeline import tiny_pipeline_project
from udr.errors import UdrError

PROJECT = Path(__file__).resolve().parents[2]


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


def _dvc(root: Path, *args: str) -> str:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    dvc = str(Path(sys.executable).with_name("dvc"))
    return subprocess.run([dvc, *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout


def _stale(work: Path) -> dict:
    """`dvc status` in `work`, but for the precision stage, which runs every time (`always_changed`)."""
    status = json.loads(_dvc(work, "status", "--json"))
    assert status.pop("precision") == ["always changed"]
    return status


@pytest.fixture
def repo(tmp_path, data_dir, monkeypatch):
    """A git repository of the tiny pipeline whose profile (profiles/tiny.yaml) is the tiny params, with
    the data mirror given as a relative path (as params.yaml gives it)."""
    root, params = tiny_pipeline_project(tmp_path, data_dir)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))  # the workspace's own
    profile = dict(params, data=dict(params["data"], source_dir=os.path.relpath(data_dir, root)))
    profile["train"] = dict(params["train"], later_rounds={})  # one round, as the suite profile trains
    # validation rows for the signal rule the suite measures
    tasks = {t: dict(caps, validation=6 if t == "sst2" else 3) for t, caps in params["prepare"]["tasks"].items()}
    profile["prepare"] = dict(params["prepare"], tasks=tasks)
    (root / "profiles").mkdir()
    (root / "profiles" / "tiny.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    (root / ".gitignore").write_text((PROJECT / ".gitignore").read_text())  # models, caches and build/
    for folder in ("data/tasks", "data/feedback/round0"):  # empty folders dvc.yaml names, kept by git
        (root / folder / "README.md").write_text("kept\n")
    # a signal table the commit carries (the default run's): the suite's worktree measures its own
    stale = {"stale": True, "tasks": {t: {"signal": True} for t in ("sst2", "e2e")}}
    (root / "metrics").mkdir(exist_ok=True)
    (root / "metrics" / "signal.json").write_text(json.dumps(stale))
    _git(root, "init", "-q")
    _dvc(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "tiny")
    monkeypatch.delenv("UDR_DATA_DIR", raising=False)
    monkeypatch.setenv("GIT_AUTHOR_NAME", "t")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "t@t")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "t")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "t@t")
    return root


@pytest.mark.slow
def test_the_suite_runs_by_dvc_in_its_worktree_and_is_saved_as_an_experiment(repo, data_dir, run_cli):
    work = repo / "build" / "suite"
    code, out, err = run_cli(["exp", "suite", "--profile", "profiles/tiny.yaml", "--seed", "1"], repo)
    assert code == 0, out[-2000:] + err[-2000:]
    # the workspace's pipeline did not run; the worktree's did, with the mirror's path relative to it
    assert not (repo / "metrics" / "udr").exists() and (work / "metrics" / "udr" / "sst2.json").is_file()
    params = yaml.safe_load((work / "params.yaml").read_text())
    assert (work / params["data"]["source_dir"]).resolve() == Path(data_dir).resolve()
    assert not Path(params["data"]["source_dir"]).is_absolute()  # the lock names no path of this machine
    assert "suite" in _dvc(repo, "exp", "list", "--all-commits", "--name-only").split()
    assert _stale(work) == {}

    table = json.loads((repo / "metrics" / "suite" / "pipeline.json").read_text())
    groups = table["groups"]  # cr: sentiment, as sst2; the paper's Tables 1-2 split the trained tasks
    signal = json.loads((work / "metrics" / "signal.json").read_text())  # measured on validation
    assert "stale" not in signal
    signal = signal["tasks"]
    assert set(signal) == {"sst2", "e2e"}
    expected = {
        "all trained tasks": ["sst2", "e2e"],
        "trained: classification and multiple choice": ["sst2"],
        "trained: generation": ["e2e"],
        "unseen tasks of a trained family": ["cr"],
    }
    for group, wanted in (("tasks with signal", True), ("tasks without signal (no claim)", False)):
        if members := [t for t in ("sst2", "e2e") if signal[t]["signal"] == wanted]:
            expected[group] = members
    assert groups == expected
    claims = {(c["a"], c["b"], c["group"]) for c in table["claims"]}
    assert {("udr", b, "all trained tasks") for b in ("random", "bm25", "sbert", "dr-target", "epr")} <= claims
    assert ("udr", "sbert", "unseen tasks of a trained family") in claims
    assert ("udr", "epr-multitask", "all trained tasks") in claims  # the ablation, trained outside the pipeline
    assert ("udr", "epr", "unseen tasks of a trained family") not in claims  # EPR is trained per task
    udr = json.loads((work / "metrics" / "udr" / "sst2.json").read_text())["graded"]["score"]
    assert table["tasks"]["sst2"]["udr"][0] == pytest.approx(udr) and table["paper"]["sst2"]["udr"] == 92.4
    # training seed 1: an experiment per trained retriever, evaluated on the tasks with signal and the unseen cr
    assert "suite-udr-seed-1" in _dvc(repo, "exp", "list", "--all-commits", "--name-only").split()
    assert table["seeds"][1] == "seed 1" and None not in table["tasks"]["cr"]["udr"]
    for t in ("sst2", "e2e"):
        for m in ("udr", "epr", "dr-target"):
            assert (table["tasks"][t][m][1] is None) != signal[t]["signal"], (t, m)
    shown = (repo / "metrics" / "suite" / "pipeline.md").read_text()
    assert "| **average: all trained tasks** |" in shown and "| all trained tasks | UDR − BM25 |" in shown
    headline = (repo / "metrics" / "suite" / "headline.md").read_text()  # the README's view of it
    assert "| UDR − BM25 |" in headline and "| test examples |" in headline
    # one family held out at a time, where it has a task with signal: a fold experiment kept in the worktree
    families = {"sst2": "sentiment", "e2e": "data-to-text"}
    held = {t: f for t, f in families.items() if signal[t]["signal"]}
    experiments = _dvc(repo, "exp", "list", "--all-commits", "--name-only").split()
    for t, family in families.items():
        assert (f"suite-lofo-{family}" in experiments) == (t in held), family
        assert (work / "metrics" / f"udr-lofo-{family}" / f"{t}.json").is_file() == (t in held), family
    if held:
        folds = json.loads((repo / "metrics" / "suite" / "lofo.json").read_text())
        assert [g["tasks"] for f, g in folds["groups"].items() if not f.startswith("pooled")] == [[t] for t in held]

    # run again: every stage is in the worktree's lock, so nothing re-runs, and the experiment is saved again
    before = (work / "models" / "final" / "udr_record.json").stat().st_mtime_ns
    code, out, err = run_cli(["exp", "suite", "--profile", "profiles/tiny.yaml", "--seed", "1"], repo)
    assert code == 0, err[-2000:]
    assert (work / "models" / "final" / "udr_record.json").stat().st_mtime_ns == before

    # the state holds what another machine needs: the lock, the commit, results; no model
    state = repo / "metrics" / "suite" / "state"
    assert (state / "dvc.lock").read_bytes() == (work / "dvc.lock").read_bytes()
    assert (state / "COMMIT").read_text().strip() == _git(work, "rev-parse", "HEAD")
    assert (state / "metrics" / "udr" / "sst2.json").is_file() and not (state / "models").exists()
    assert (state / "metrics" / "signal.json").is_file()
    assert (state / "data" / "predictions-validation" / "bm25").is_dir()
    assert (state / "metrics" / "epr-multitask" / "e2e.json").is_file()
    assert (state / "metrics" / "udr-seed-1" / "cr.json").is_file()
    assert all((state / "metrics" / f"udr-lofo-{family}" / f"{t}.json").is_file() for t, family in held.items())
    # another machine: a worktree made anew from the state re-trains (models are git-ignored) and, training
    # being deterministic here, skips every evaluation (its results keep the state's copies' times)
    _git(repo, "worktree", "remove", "--force", str(work))
    code, out, err = run_cli(["exp", "suite", "--profile", "profiles/tiny.yaml", "--seed", "1"], repo)
    assert code == 0, err[-2000:]
    for method in ("random", "udr", "epr", "validation/sbert", "epr-multitask", "udr-seed-1"):  # nor outside DVC
        task = "cr" if method == "udr-seed-1" else "sst2"
        kept = state / "metrics" / method / f"{task}.json"
        assert (work / "metrics" / method / f"{task}.json").stat().st_mtime_ns == kept.stat().st_mtime_ns, method
    assert _stale(work) == {}

    # a family with a task with signal is held out (the tiny tasks carry none: the rule is overridden here)
    from udr.config import load_settings
    from udr.experiments.dvc import saved_experiments
    from udr.experiments.suite import run_fold, suite_steps

    (work / "metrics" / "signal.json").write_text(
        json.dumps({"tasks": {"sst2": {"signal": True}, "e2e": {"signal": False}}})
    )
    (fold,) = [s for s in suite_steps((), ("sentiment",)) if s.tool == "fold"]
    run_fold(work, load_settings(work / "params.yaml"), fold, "suite", {"PYTHONPATH": str(work)})
    rev = saved_experiments(work)["suite-lofo-sentiment"]
    params = yaml.safe_load(_git(work, "show", f"{rev}:params.yaml"))
    assert params["train"]["tasks"] == ["e2e"] and params["evaluate"]["tasks"] == ["sst2"]  # trained without it
    kept = (work / "metrics" / "udr-lofo-sentiment" / "sst2.json").read_text()
    assert kept.strip() == _git(work, "show", f"{rev}:metrics/udr/sst2.json")
    # saved with the run, the fold is in the suite's fold table, against BM25 and SBERT on sst2's rows
    _dvc(work, "exp", "save", "-n", "suite", "-f", "-I", "metrics", "-I", "data/predictions")
    assert run_cli(["exp", "suite", "--table"], repo)[0] == 0
    folds = json.loads((repo / "metrics" / "suite" / "lofo.json").read_text())
    assert list(folds["groups"]) == ["sentiment"] and folds["groups"]["sentiment"]["tasks"] == ["sst2"]
    assert "| sentiment | sst2 |" in (repo / "metrics" / "suite" / "lofo.md").read_text()


def test_the_state_is_committed_alone_where_it_changed(tmp_path, monkeypatch):
    """`udr exp suite --commit-state`: after each step the state folder, and nothing else staged, is committed."""
    from udr.experiments.suite import commit_state
    from udr.util.notice import UdrNotice

    for key in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(key, "t@t" if "EMAIL" in key else "t")
    _git(tmp_path, "init", "-q")
    (tmp_path / "notes.md").write_text("mine\n")
    _git(tmp_path, "add", "notes.md")  # the user's staged work, not the run's
    state = tmp_path / "metrics" / "suite" / "state"
    (state / "metrics" / "udr").mkdir(parents=True)
    (state / "metrics" / "udr" / "sst2.json").write_text("{}")
    assert commit_state(tmp_path, state, "suite state: `dvc repro evaluate@udr` done")
    assert _git(tmp_path, "log", "--format=%s") == "suite state: `dvc repro evaluate@udr` done"
    assert _git(tmp_path, "show", "--name-only", "--format=", "HEAD") == "metrics/suite/state/metrics/udr/sst2.json"
    assert _git(tmp_path, "diff", "--cached", "--name-only") == "notes.md"  # still staged, not committed
    assert not commit_state(tmp_path, state, "again")  # nothing changed: no commit
    (state / "metrics" / "udr" / "sst2.json").unlink()
    (tmp_path / ".git" / "index.lock").write_text("")  # another git command at work: a notice, the run goes on
    with pytest.warns(UdrNotice, match="saved but not committed"):
        assert not commit_state(tmp_path, state, "removed")
    (tmp_path / ".git" / "index.lock").unlink()
    assert commit_state(tmp_path, state, "removed") and _git(tmp_path, "ls-files", "metrics") == ""


def test_the_state_keeps_the_lock_and_what_git_keeps_and_is_swapped_in_whole(tmp_path):
    from udr.experiments.suite import kept_outputs, restore_state, save_state

    work = tmp_path / "work"
    (work / "metrics" / "udr").mkdir(parents=True)
    (work / "models" / "final").mkdir(parents=True)
    (work / "metrics" / "udr" / "sst2.json").write_text("{}")
    (work / "models" / "final" / "w.safetensors").write_text("weights")
    (work / ".gitignore").write_text("/models/final\n")
    (work / "metrics" / "bm25").mkdir()
    lock = {"schema": "2.0", "stages": {"evaluate@udr": {"outs": [{"path": "metrics/udr"}]}}}
    lock["stages"]["train"] = {"outs": [{"path": "models/final"}, {"path": "metrics/gone"}]}
    lock["stages"]["report"] = {"outs": [{"path": "metrics/udr/sst2.json"}]}  # within a folder kept whole
    lock["stages"]["evaluate@bm25"] = {"outs": [{"path": "metrics/bm25"}]}  # not current: not run here yet
    (work / "dvc.lock").write_text(yaml.safe_dump(lock))
    _git(work, "init", "-q")
    _git(work, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "x")
    current = {"evaluate@udr", "train", "report"}
    # models are git-ignored; an output not there is skipped; a stage not current keeps nothing
    assert kept_outputs(work, current) == ["metrics/udr"]

    state = tmp_path / "main" / "metrics" / "suite" / "state"
    (state / "stale").mkdir(parents=True)  # an older state is replaced whole
    save_state(work, state, current)
    assert sorted(p.name for p in state.iterdir()) == ["COMMIT", "dvc.lock", "metrics"]
    assert sorted(p.name for p in (state / "metrics").iterdir()) == ["udr"]
    assert not state.with_name("state.new").exists() and not state.with_name("state.old").exists()
    assert [p.name for p in state.parent.iterdir()] == ["state"]  # nothing left beside it
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert restore_state(state, fresh)
    assert (fresh / "metrics" / "udr" / "sst2.json").read_text() == "{}" and not (fresh / "COMMIT").exists()
    assert not restore_state(tmp_path / "none", fresh)


def test_a_worktree_a_kill_left_while_its_state_was_copied_in_is_restored_again(tmp_path, monkeypatch):
    """The saved state is copied into a new worktree before any step: killed half-way, the next run restores it
    again (it used to take the half-restored worktree as ready, and its next save dropped what was missing)."""
    from udr.experiments import suite

    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "x")
    state = root / "metrics" / "suite" / "state"
    for name in ("dvc.lock", "metrics/udr/sst2.json", "metrics/udr-seed-1/sst2.json"):
        (state / name).parent.mkdir(parents=True, exist_ok=True)
        (state / name).write_text(name)
    (state / "COMMIT").write_text(_git(root, "rev-parse", "HEAD") + "\n")
    copied, real = [], suite._copy

    def killed_after_one(source, target):
        if copied:
            raise KeyboardInterrupt
        copied.append(source.name)
        real(source, target)

    monkeypatch.setattr(suite, "_copy", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        suite.restored_worktree(root, Path("build/suite"), state, [])
    work = root / "build" / "suite"
    assert work.is_dir() and not (work / suite.RESTORED).exists()
    monkeypatch.undo()
    assert suite.restored_worktree(root, Path("build/suite"), state, []) == work.resolve()
    for name in ("dvc.lock", "metrics/udr/sst2.json", "metrics/udr-seed-1/sst2.json"):
        assert (work / name).read_text() == name
    (work / "metrics" / "udr" / "sst2.json").write_text("a step's new result")
    suite.restored_worktree(root, Path("build/suite"), state, [])  # ready: not restored over a run's own work
    assert (work / "metrics" / "udr" / "sst2.json").read_text() == "a step's new result"


def test_a_folder_that_is_no_worktree_or_a_missing_profile_is_a_one_line_error(tmp_path, run_cli):
    from udr.experiments.suite import suite_params, suite_worktree

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "build" / "suite").mkdir(parents=True)
    with pytest.raises(UdrError, match="is not a git worktree of this repository"):
        suite_worktree(tmp_path, Path("build/suite"))
    with pytest.raises(UdrError, match="missing profile"):
        suite_params(tmp_path, tmp_path / "profiles" / "none.yaml")
    twice = tmp_path / "twice.yaml"
    twice.write_text("data:\n  source_dir: ../shared/data\ntrain:\n  lr: 1.0e-4\ntrain:\n  seed: 1\n")
    with pytest.raises(UdrError, match=r"twice.yaml:5: duplicate key 'train'"):  # read as params files are
        suite_params(tmp_path, twice)
    code, _, err = run_cli(["exp", "suite", "--profile", "profiles/none.yaml"], tmp_path)
    assert code == 1 and "missing profile" in err and len(err.strip().splitlines()) == 1


def test_a_step_outside_the_pipeline_is_skipped_once_its_results_or_its_part_are_there(tmp_path):
    from types import SimpleNamespace

    from udr.experiments.suite import outputs_in, step_done, suite_steps

    def method_tasks(method):  # EPR is trained per task: not evaluated on the unseen cr
        return ["sst2", "e2e"] + (["cr"] if method == "udr" else [])

    def task(name):
        return SimpleNamespace(kind="generation" if name == "e2e" else "classification")

    unseen = SimpleNamespace(unseen_tasks={"cr": {}})
    settings = SimpleNamespace(method_tasks=method_tasks, task=task, evaluate=unseen, root=tmp_path)
    steps = {" ".join(s.args): s for s in suite_steps() if s.tool == "udr"}
    random, signal = steps["evaluate --split validation -m random"], steps["exp signal"]
    multitask = steps["evaluate -m epr --model models/epr-multitask --save-as epr-multitask"]
    assert not any(step_done(s, tmp_path, settings) for s in steps.values())
    (tmp_path / "metrics" / "validation" / "random").mkdir(parents=True)
    (tmp_path / "metrics" / "validation" / "random" / "sst2.json").write_text("{}")
    assert not step_done(random, tmp_path, settings)  # one trained task of two
    (tmp_path / "metrics" / "validation" / "random" / "e2e.json").write_text("{}")
    assert step_done(random, tmp_path, settings) and not step_done(signal, tmp_path, settings)
    measured = {"tasks": {t: {"signal": t == "sst2"} for t in ("sst2", "e2e")}}
    (tmp_path / "metrics" / "signal.json").write_text(json.dumps(measured))
    assert all(step_done(s, tmp_path, settings) for s in steps.values() if s.part == "signal")
    assert not step_done(multitask, tmp_path, settings)

    # label-aware selection on the classification tasks with signal, its sweep's points matched by name
    (labels,) = [s for s in suite_steps() if s.part == "labels"]
    assert not step_done(labels, tmp_path, settings)
    for folder in ("udr-labels-w0.1-noquota", "sbert-labels-w3-balanced", "udr"):
        (tmp_path / "metrics" / "validation" / folder).mkdir()
    assert outputs_in(tmp_path, labels.outputs) == [
        "metrics/validation/udr",
        "metrics/validation/sbert-labels-w3-balanced",
        "metrics/validation/udr-labels-w0.1-noquota",
    ]  # not the signal rule's validation evaluations (random)
    (tmp_path / "metrics" / "labels.json").write_text("{}")
    assert step_done(labels, tmp_path, settings)
    (tmp_path / "metrics" / "labels.json").unlink()
    without = {"tasks": {t: {"signal": t == "e2e"} for t in ("sst2", "e2e")}}  # no classification task
    (tmp_path / "metrics" / "signal.json").write_text(json.dumps(without))
    assert step_done(labels, tmp_path, settings)  # nothing to choose labels on
    (tmp_path / "metrics" / "signal.json").write_text(json.dumps(measured))

    # an extra seed is evaluated on the tasks that bear on a claim: those with signal, and the unseen ones
    seeds = {s.args: s for s in suite_steps((3,)) if s.tool == "seed"}
    assert set(seeds) == {(m, "3") for m in ("udr", "dr-target", "epr")}
    # the seeds the claims compare (UDR's, per-task EPR's) come first, every seed of them, then the folds (one
    # family held out at a time), then DR-Target's seeds
    order = [s.args for s in suite_steps((3, 4), ("sentiment", "data to text")) if s.tool in ("seed", "fold")]
    assert order[:4] == [("udr", "3"), ("epr", "3"), ("udr", "4"), ("epr", "4")]
    assert order[4:] == [("sentiment",), ("data to text",), ("dr-target", "3"), ("dr-target", "4")]
    assert seeds["udr", "3"].outputs == ("metrics/udr-seed-3", "data/predictions/udr-seed-3")
    kept = tmp_path / "metrics" / "udr-seed-3"
    kept.mkdir()
    (kept / "sst2.json").write_text("{}")
    assert not step_done(seeds["udr", "3"], tmp_path, settings)  # the unseen cr is still to come
    (kept / "cr.json").write_text("{}")
    assert step_done(seeds["udr", "3"], tmp_path, settings)  # e2e carries no signal: not evaluated
    (tmp_path / "metrics" / "epr-seed-3").mkdir()
    (tmp_path / "metrics" / "epr-seed-3" / "sst2.json").write_text("{}")
    assert step_done(seeds["epr", "3"], tmp_path, settings) and not step_done(
        seeds["dr-target", "3"], tmp_path, settings
    )

    # a fold: the family's tasks with signal, kept as udr-lofo-<family>; a family without signal is not held out
    settings.training_tasks = lambda: ["sst2", "e2e"]
    settings.task = lambda name: SimpleNamespace(family="data to text" if name == "e2e" else "sentiment")
    folds = {s.args[0]: s for s in suite_steps((), ("sentiment", "data to text")) if s.tool == "fold"}
    assert folds["sentiment"].outputs == ("metrics/udr-lofo-sentiment", "data/predictions/udr-lofo-sentiment")
    assert not step_done(folds["sentiment"], tmp_path, settings) and step_done(
        folds["data to text"], tmp_path, settings
    )
    (tmp_path / "metrics" / "udr-lofo-sentiment").mkdir()
    (tmp_path / "metrics" / "udr-lofo-sentiment" / "sst2.json").write_text("{}")
    assert step_done(folds["sentiment"], tmp_path, settings)
    (tmp_path / "metrics" / "signal.json").unlink()
    assert not step_done(folds["data to text"], tmp_path, settings)  # the rule not run yet: not known


def test_progress_shows_the_states_scores_and_the_steps_to_come(tmp_path, run_cli):
    state = tmp_path / "metrics" / "suite" / "state"
    code, _, err = run_cli(["exp", "suite", "--progress"], tmp_path)
    assert code == 1 and "no saved state" in err and len(err.strip().splitlines()) == 1
    (state / "metrics" / "random").mkdir(parents=True)
    (state / "metrics" / "random" / "sst2.json").write_text(json.dumps({"graded": {"score": 51.25}}))
    (state / "dvc.lock").write_text("schema: '2.0'\n")
    (state / "COMMIT").write_text("0123456789abcdef\n")
    code, _, err = run_cli(["exp", "suite", "--progress"], tmp_path)
    assert code == 1 and "profiles/suite.yaml" in err  # the folds come from the profile's families
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "suite.yaml").write_bytes((PROJECT / "profiles" / "suite.yaml").read_bytes())
    code, out, err = run_cli(["exp", "suite", "--progress"], tmp_path)
    assert code == 0, err
    assert "(commit 0123456789ab)" in out and "| sst2 | 51.2 |" in out
    assert "`dvc repro evaluate@random`" not in out and "`dvc repro evaluate@bm25`" in out
    assert "`udr exp signal`" in out and "`dvc repro`" in out
    assert "- training seed 2 of epr\n" in out and "`udr exp labels`" in out
    assert "- sentiment held out\n" in out and "- nli held out\n" in out  # the signal rule has not run
    trained = yaml.safe_load((tmp_path / "profiles" / "suite.yaml").read_text())["prepare"]["tasks"]
    signal = {"tasks": {t: {"signal": t not in ("rte", "snli")} for t in trained}}
    (state / "metrics" / "signal.json").write_text(json.dumps(signal))
    out = run_cli(["exp", "suite", "--progress"], tmp_path)[1]
    assert "- sentiment held out\n" in out and "nli held out" not in out  # no nli task with signal
    # label-aware selection beside the retrievers; the extra seeds and the folds in a table of their own
    for kept in ("sbert+labels", "udr-seed-1", "udr-lofo-sentiment"):
        (state / "metrics" / kept).mkdir()
        (state / "metrics" / kept / "sst2.json").write_text(json.dumps({"graded": {"score": 60.0}}))
    out = run_cli(["exp", "suite", "--progress"], tmp_path)[1]
    assert "| task | random | sbert+labels |\n" in out and "| task | udr-seed-1 | udr-lofo-sentiment |\n" in out
    assert "training seed 1 of udr" not in out and "- sentiment held out\n" not in out


def test_a_step_a_session_cut_off_goes_on_where_it_was(tmp_path):
    """The multi-task EPR's training is done once its finished model, of this run's settings, is there (its
    evaluation may not be); its evaluation takes the tasks whose results are missing."""
    from udr.config import load_settings
    from udr.experiments.seeds import MULTITASK
    from udr.experiments.suite import multitask_trained, step_args, step_done, suite_steps
    from udr.retriever.recipes import baseline_train_settings, recorded_train_settings
    from udr.retriever.record import write_record

    settings = load_settings(REPO / "params.yaml")
    steps = {s.args[:1]: s for s in suite_steps() if s.part == "multitask"}
    train, evaluation = steps["train",], steps["evaluate",]
    model = tmp_path / "models" / MULTITASK
    model.mkdir(parents=True)
    assert not step_done(train, tmp_path, settings)  # no record: a partial or no model
    epr = recorded_train_settings(baseline_train_settings("epr", settings.train, None), mode="json")
    write_record(model, {"method": "epr", "seed": settings.seed + 1, "train": epr})
    assert not multitask_trained(tmp_path, settings)  # another seed's
    write_record(model, {"method": "epr", "seed": settings.seed, "train": {**epr, "lr": 1.0}})
    assert not multitask_trained(tmp_path, settings)  # other training settings
    write_record(model, {"method": "epr", "seed": settings.seed, "train": epr})
    assert step_done(train, tmp_path, settings) and not step_done(evaluation, tmp_path, settings)

    tasks = settings.method_tasks("epr")
    assert step_args(evaluation, tmp_path, settings) == list(evaluation.args)  # none yet: every task
    saved = tmp_path / "metrics" / MULTITASK
    saved.mkdir(parents=True)
    for t in tasks[:-2]:
        (saved / f"{t}.json").write_text("{}")
    assert step_args(evaluation, tmp_path, settings) == [*evaluation.args, "-t", tasks[-2], "-t", tasks[-1]]
    assert step_args(train, tmp_path, settings) == list(train.args)


def test_the_headline_gives_each_groups_averages_and_udrs_intervals():
    """Per group: its rows, a seeded retriever's mean ± sd over the seeds evaluated on all of it (one seed said
    so), a fixed one's single run, and UDR − each other retriever's seed-averaged interval, bold where resolved."""
    from udr.experiments.suite import suite_headline

    interval = {"difference": 2.0, "low": 0.6, "high": 3.5}
    table = {
        "tasks": {
            "sst2": {"n": 80, "udr": [60.0, 64.0], "epr": [58.0, 56.0], "bm25": [50.0]},
            "e2e": {"n": 30, "udr": [30.0, None], "epr": [28.0, None], "bm25": [20.0]},
            "cr": {"n": 60, "udr": [70.0, 72.0], "bm25": [65.0]},
        },
        "groups": {"tasks with signal": ["sst2"], "all trained tasks": ["sst2", "e2e"], "unseen families": ["cr"]},
        "claims": [
            {"a": "udr", "b": "epr", "group": "tasks with signal", "interval": interval},
            {"a": "udr", "b": "bm25", "group": "unseen families", "interval": dict(interval, low=0.4)},
            {"a": "epr", "b": "bm25", "group": "tasks with signal", "interval": interval},
        ],
    }
    lines = suite_headline(table).splitlines()
    assert lines[0] == "|  | tasks with signal (sst2) | all trained tasks (sst2, e2e) | unseen families (cr) |"
    assert "| test examples | 80 | 110 | 60 |" in lines
    assert "| UDR | 62.0 ± 2.8 | 45.0 (one seed) | 71.0 ± 1.4 |" in lines
    assert "| EPR (per task) | 57.0 ± 1.4 | 43.0 (one seed) |  |" in lines and "| BM25 | 50.0 | 35.0 | 65.0 |" in lines
    assert "| UDR − EPR (per task) | **+2.0 [+0.6, +3.5]** |  |  |" in lines
    assert "| UDR − BM25 |  |  | +2.0 [+0.4, +3.5] |" in lines  # 0.4 does not clear the 0.5-point margin
    assert not any(line.startswith("| EPR (per task) − ") for line in lines)
