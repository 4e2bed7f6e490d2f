"""The profiles: each validates like params.yaml and has its sections and keys; profiles/paper.yaml, the paper's
own configuration, holds the paper's values (Appendix B) and DVC plans every stage from it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from udr.config import load_settings
from udr.data.tasks import HubSource

PROFILE = REPO / "profiles" / "paper.yaml"


def test_the_paper_profile_validates_with_the_papers_values():
    s = load_settings(PROFILE)
    assert (s.models.lm, s.models.encoder) == ("EleutherAI/gpt-neo-2.7B", "bert-base-uncased")
    assert (s.encoder.pooling, s.encoder.similarity) == ("cls", "dot")
    assert (s.candidates.k, s.mine.k, s.train.candidates_per_query) == (50, 50, 8)  # K, l
    assert (s.train.batch_size, s.train.lr, s.train.warmup_steps, s.train.loss_lambda) == (128, 1e-4, 500, 0.8)
    assert s.train.rounds == [0, 1, 2] and (s.train.epochs_first, s.train.epochs_later) == (30, 10)
    assert s.evaluate.context == 2048 and s.score.max_length == 2048
    assert len(s.task_names()) == 35 and "mtop" in s.task_names() and "python_code" not in s.task_names()
    assert isinstance(s.task("mtop").source, HubSource)


@pytest.mark.parametrize("profile", sorted((REPO / "profiles").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_profile_has_exactly_params_yamls_keys(profile):
    """A new parameter must reach every profile too (or the profile would silently take the CPU default)."""

    def keys(node, prefix=""):
        if not isinstance(node, dict) or prefix.endswith(("tasks", "later_rounds", "unseen_tasks")):
            return {prefix}
        return {k for name, v in node.items() for k in keys(v, f"{prefix}.{name}" if prefix else name)}

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    assert keys(yaml.safe_load(profile.read_text())) == keys(params)
    load_settings(profile)


def test_the_full_feedback_profile_is_the_default_with_larger_test_sets_and_three_epochs():
    """profiles/test-q1000.yaml (the experiment beside the default in the README's table) differs from
    params.yaml in its test caps, UDR's epochs and what a beside experiment leaves out, nothing else."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    profile = yaml.safe_load((REPO / "profiles" / "test-q1000.yaml").read_text())
    for t, caps in profile["prepare"]["tasks"].items():
        assert caps == params["prepare"]["tasks"][t] | {"max_test": caps["max_test"]} and caps["max_test"] >= 100
    assert {c["max_test"] for c in profile["evaluate"]["unseen_tasks"].values()} == {300}
    assert profile["train"] == params["train"] | {"epochs_first": 3}
    rest = {"tasks", "unseen_tasks", "shots_tasks", "beside"}
    assert {k: v for k, v in profile["evaluate"].items() if k not in rest} == {
        k: v for k, v in params["evaluate"].items() if k not in rest
    }
    assert {k: v for k, v in profile.items() if k not in ("prepare", "train", "evaluate")} == {
        k: v for k, v in params.items() if k not in ("prepare", "train", "evaluate")
    }


def test_dvc_plans_every_stage_of_the_paper_profile(tmp_path):
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    shutil.copy(PROFILE, tmp_path / "params.yaml")
    dvc = str(Path(sys.executable).with_name("dvc"))
    subprocess.run([dvc, "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    listed = subprocess.run([dvc, "stage", "list"], cwd=tmp_path, capture_output=True, text=True, check=True)
    stages = {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}
    tasks = load_settings(PROFILE).task_names()
    want = {
        f"{stage}@{t}" for stage in ("prepare", "candidates", "score", "train_dr_target", "train_epr") for t in tasks
    }
    want |= {f"{stage}@round{r}" for stage in ("mine", "rescore", "retrain") for r in (1, 2)}
    want |= {f"evaluate@{m}" for m in ("random", "bm25", "sbert", "dr-target", "epr", "udr")}
    want |= {"models", "precision", "train", "index", "report"}
    assert stages == want
