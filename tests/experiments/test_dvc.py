"""udr.experiments.dvc: the DVC command lines `udr exp` runs, and reading saved experiments back from git."""

from __future__ import annotations

import subprocess

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
