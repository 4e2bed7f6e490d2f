"""udr.experiments.analyses: every analysis is a valid change of the default parameters."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.conftest import REPO
from udr.experiments.analyses import TRANSFER_LM, ablation_experiments, order_experiments, transfer_experiment

DEFAULT_TASKS = list(yaml.safe_load((REPO / "params.yaml").read_text())["prepare"]["tasks"])


def _apply(raw: dict, overrides) -> dict:
    """Hydra-style overrides as DVC applies them: `~a.b` deletes, `+a.b=v` adds a missing key, `a.b=v`
    sets an existing one (YAML value); anything else fails, as DVC's `--set-param` would."""
    out = copy.deepcopy(raw)
    for o in overrides:
        key, _, value = o.lstrip("~+").partition("=")
        *parents, last = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        if o.startswith("~"):
            del node[last]
        else:
            assert (last in node) != o.startswith("+"), f"{o}: DVC would refuse this override"
            node[last] = yaml.safe_load(value)
    return out


@pytest.mark.parametrize(
    "exp", [*ablation_experiments(DEFAULT_TASKS), *order_experiments(), transfer_experiment()], ids=lambda e: e.name
)
def test_every_analysis_is_a_valid_change_of_the_default_params(exp, tmp_path):
    from udr.config import load_settings

    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    changed = _apply(raw, exp.overrides)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(changed))
    settings = load_settings(tmp_path / "params.yaml", [])
    if exp.name != "order-ascending":
        assert changed != raw
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
