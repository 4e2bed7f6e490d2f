"""udr.experiments.analyses: every analysis is a valid change of the default parameters."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import REPO
from udr.experiments.analyses import TRANSFER_LM, ablation_experiments, order_experiments, transfer_experiment
from udr.experiments.dvc import set_params

DEFAULT_TASKS = list(yaml.safe_load((REPO / "params.yaml").read_text())["prepare"]["tasks"])


@pytest.mark.parametrize(
    "exp", [*ablation_experiments(DEFAULT_TASKS), *order_experiments(), transfer_experiment()], ids=lambda e: e.name
)
def test_every_analysis_is_a_valid_change_of_the_default_params(exp, tmp_path):
    from udr.config import load_settings

    params = tmp_path / "params.yaml"
    params.write_text((REPO / "params.yaml").read_text())
    set_params(params, list(exp.overrides))  # as DVC applies them: a key it cannot set, add or delete fails
    settings = load_settings(params)
    if exp.name != "order-ascending":
        assert yaml.safe_load(params.read_text()) != yaml.safe_load((REPO / "params.yaml").read_text())
    if exp.name == "abl-three-rounds":
        assert settings.train.rounds == [0, 1, 2]
    if exp.name.startswith("order-"):
        assert settings.evaluation_tasks() == ["sst2", "e2e"]
    if exp.name.startswith("abl-single-task-"):
        task = exp.name.removeprefix("abl-single-task-")
        assert settings.training_tasks() == [task] == settings.evaluation_tasks() and settings.train.rounds == [0]
    if exp.name.startswith("transfer-"):
        assert settings.evaluate.lm == TRANSFER_LM and exp.targets == ("evaluate@bm25", "evaluate@epr", "evaluate@udr")


def test_transfer_experiment_name():
    assert transfer_experiment("org/Some_LM-1B").name == "transfer-some-lm-1b"
