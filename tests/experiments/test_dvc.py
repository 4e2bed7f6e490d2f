"""udr.experiments.dvc: the DVC command lines `udr exp` runs, and reading saved experiments back from git."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from udr.errors import UdrError
from udr.experiments.dvc import exp_run_args, saved_experiments


def test_exp_run_args_pass_overrides_and_targets_to_dvc():
    assert exp_run_args("x", ["train.lr=1e-4", "~train.later_rounds.round2"], ["evaluate@udr"]) == [
        "exp",
        "run",
        "-n",
        "x",
        "-S",
        "train.lr=1e-4",
        "-S",
        "~train.later_rounds.round2",
        "evaluate@udr",
    ]
    assert exp_run_args(None, ["a=1,2"], [], queue=True) == ["exp", "run", "-S", "a=1,2", "--queue"]
    with pytest.raises(UdrError, match="bad parameter override 'train.lr'"):
        exp_run_args("x", ["train.lr"])


def test_saved_experiments_reads_dvc_refs(tmp_path):
    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "base")
    head = git("rev-parse", "HEAD")
    git("update-ref", "refs/exps/ab/cdef/abl-no-instruction", head)
    git("update-ref", "refs/heads/not-an-exp", head)
    assert saved_experiments(tmp_path) == {"abl-no-instruction": head}
    (tmp_path / "sub").mkdir()
    git("update-ref", "-d", "refs/exps/ab/cdef/abl-no-instruction")
    assert saved_experiments(tmp_path / "sub") == {}


@pytest.mark.parametrize(
    ("source", "link", "target"),
    [
        ("../shared/data", ".dvc/tmp/exps/shared", "../shared"),
        ("../data", ".dvc/tmp/exps/data", "../data"),
        ("../../a/b/data", ".dvc/tmp/a", "../../a"),
    ],
)
def test_data_outside_the_project_is_linked_where_queued_runs_look(tmp_path, source, link, target):
    """A queued experiment runs in .dvc/tmp/exps/<run>/: a relative data.source_dir resolves from there."""
    import os
    from types import SimpleNamespace

    from udr.experiments.dvc import link_data_for_temp_runs

    root = tmp_path / "x" / "y" / "proj"
    root.mkdir(parents=True)
    settings = SimpleNamespace(data=SimpleNamespace(source_dir=source))
    made = link_data_for_temp_runs(root, settings)
    assert made == root / link and made.is_symlink()
    assert made.resolve() == Path(os.path.normpath(root / target))
    # From any run folder the relative path now reaches the data (through the link)
    run = root / ".dvc" / "tmp" / "exps" / "tmpab12cd"
    run.mkdir(parents=True)
    (root / target).mkdir(parents=True, exist_ok=True)
    assert (run / source).resolve() == (root / source).resolve()
    assert link_data_for_temp_runs(root, SimpleNamespace(data=SimpleNamespace(source_dir="/abs/data"))) is None


def test_failed_experiments_are_read_from_the_queue_status():
    from udr.experiments.dvc import failed_experiments

    status = (
        "Task     Name       Created    Status\n"
        "3f2a1b0  sweep-79   10:01 AM   Failed\n"
        "9c8d7e6  sweep-78   10:01 AM   Success\n"
        "1a2b3c4             10:02 AM   Failed\n"
    )
    assert failed_experiments(status) == ["sweep-79", "1a2b3c4"]
