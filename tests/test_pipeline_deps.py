"""dvc.yaml's code dependencies cannot drift from the code: each stage must depend on exactly the udr
subpackages (directories) and top-level modules that its command imports, directly or through other
udr modules (function-level imports included). And what DVC re-runs after a change, on a real tiny
pipeline (slow)."""

from __future__ import annotations

import ast
import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.tiny_models import save_tiny_encoder, save_tiny_lm

PKG = REPO / "udr"
# The thin command layer and the package's lazy re-export are not stage code (see dvc.yaml's header).
NOT_STAGE_CODE = {"udr", "udr.cli"}
REFERENCE = re.compile(r"udr(\.\w+)+:\w+")


def _module_file(name: str) -> Path | None:
    path = REPO / Path(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _udr_imports(node: ast.AST) -> set[str]:
    """Every udr module an AST imports (and the packages above them, which run first)."""
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Import):
            found |= {a.name for a in n.names if a.name.split(".")[0] == "udr"}
        elif isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == "udr":
            found.add(n.module)
            found |= {f"{n.module}.{a.name}" for a in n.names if _module_file(f"{n.module}.{a.name}")}
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and REFERENCE.fullmatch(n.value):
            found.add(n.value.split(":")[0])  # a "udr.module:function" loaded by name (task builders)
    parts = {tuple(m.split(".")) for m in found}
    return {".".join(p[:i]) for p in parts for i in range(1, len(p) + 1)}


def _closure(start: set[str]) -> set[str]:
    seen, todo = set(), list(start)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = None if name in NOT_STAGE_CODE else _module_file(name)
        if path is not None:
            todo += _udr_imports(ast.parse(path.read_text()))
    return seen


def _command_imports(command: str) -> set[str]:
    """The udr modules imported by the CLI function registered as `command`, plus the CLI's shared
    helpers (settings loading), which every command runs."""
    app = ast.parse((PKG / "cli" / "app.py").read_text())
    for path in sorted((PKG / "cli").glob("*.py")):
        for fn in ast.parse(path.read_text()).body:
            if isinstance(fn, ast.FunctionDef) and any(
                isinstance(d, ast.Call) and d.args and getattr(d.args[0], "value", None) == command
                for d in fn.decorator_list
            ):
                return _udr_imports(fn) | _udr_imports(app)
    raise AssertionError(f"no CLI command {command!r}")


def required_code_deps(command: str) -> set[str]:
    """The code a command's stage runs: `udr/<module>.py` for a top-level module, `udr/<subpackage>` where it
    runs every module of the subpackage, else the subpackage's modules it runs (`udr/<subpackage>/<module>.py`,
    `__init__.py` included) and its data files, so that a change elsewhere in the subpackage (an LM kernel,
    for the training stages) does not re-run it."""
    deps, used = set(), {}
    for name in _closure(_command_imports(command)):
        parts = name.split(".")
        if len(parts) < 2 or parts[1] == "cli":
            continue
        if (PKG / parts[1]).is_dir():
            used.setdefault(parts[1], set()).add(_module_file(name))
        else:
            deps.add(f"udr/{parts[1]}.py")
    for package, files in used.items():
        folder = PKG / package
        if files >= set(folder.glob("*.py")):
            deps.add(f"udr/{package}")
            continue
        data = {f for f in folder.iterdir() if f.is_file() and f.suffix != ".py"}
        deps |= {str(f.relative_to(REPO)) for f in files | data if f is not None}
    return deps


def _stages() -> dict[str, dict]:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


@pytest.mark.parametrize("stage", sorted(_stages()))
def test_each_stage_depends_on_exactly_the_code_it_runs(stage):
    spec = _stages()[stage]
    body = spec.get("do", spec)
    command = body["cmd"].split()[1]
    declared = {d for d in body["deps"] if isinstance(d, str) and d.startswith("udr/")}
    assert declared == required_code_deps(command), f"dvc.yaml stage {stage!r}: fix its udr/ deps"


def test_a_code_change_anywhere_in_a_used_subpackage_is_seen():
    # The case the flat file lists missed: templates and instructions live in udr/data, which every
    # stage from LM scoring to evaluation renders its texts with (the built-in declarations are data).
    def covered(path: str, deps: set[str]) -> bool:  # listed, or inside a listed folder
        return any(path == d or path.startswith(d + "/") for d in deps)

    for command in ("score", "train", "mine", "index", "evaluate"):
        deps = required_code_deps(command)
        assert covered("udr/data/tasks.py", deps) and covered("udr/data/builtin_tasks.yaml", deps)
    assert covered("udr/data/python_code.py", required_code_deps("prepare"))  # a builder named by a string


def test_training_does_not_depend_on_the_lm_engine():
    """Training reads scores and loads an encoder: an LM kernel change must not re-run it."""
    for command in ("train", "mine", "index"):
        deps = required_code_deps(command)
        assert not {"udr/lm", "udr/lm/scorer.py", "udr/lm/ragged.py", "udr/feedback/scoring.py"} & deps
        assert "udr/lm/loading.py" in deps


def test_dvc_yaml_evaluates_every_method_of_the_config():
    from udr.config import METHODS

    retrievers = yaml.safe_load((REPO / "dvc.yaml").read_text())["vars"][0]["retrievers"]
    assert tuple(retrievers) == METHODS


# Train settings that change where or how often training runs, never the trained model.
TRAIN_NOT_RECIPE = {"checkpoint_steps", "device"}


@pytest.mark.parametrize("stage", ["train", "retrain", "train_epr"])
def test_every_training_recipe_setting_is_a_param_of_the_training_stages(stage):
    """A setting missing from a stage's params is one `dvc exp run -S` changes without re-running it."""
    from udr.config import TrainSettings

    spec = _stages()[stage]
    params = set(spec.get("do", spec)["params"])
    recipe = {f"train.{f}" for f in TrainSettings.model_fields} - {f"train.{f}" for f in TRAIN_NOT_RECIPE}
    recipe -= {"train.later_rounds"}  # the stages' foreach, not a param of any one of them
    assert recipe | {"seed", "encoder", "score.queries_per_task"} <= params


# ---------------------------------------------------------------- what DVC re-runs (slow)


def _changed_stages(root: Path, env: dict) -> set[str]:
    dvc = str(Path(sys.executable).with_name("dvc"))
    out = subprocess.run(
        [dvc, "status", "--json"], cwd=root, env=env, capture_output=True, text=True, check=True
    ).stdout
    return set(json.loads(out))


@pytest.mark.slow
def test_what_a_change_re_runs(tmp_path, data_dir):
    """On a tiny real pipeline (with an unseen task): a second look finds nothing stale; an evaluation
    parameter re-runs only the evaluations; a training parameter only training; a task's template or
    instruction the task's data, its LM scoring, training and every evaluation; a new task declaration
    in data/tasks the data preparation (whose unchanged outputs stop it there)."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "data" / "tasks").mkdir(parents=True)
    shutil.copytree(REPO / "udr", root / "udr", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", root / "dvc.yaml")
    shutil.copy(REPO / ".dvcignore", root / ".dvcignore")
    # Committed inputs dvc.yaml names: the shipped feedback's folder (none of this tiny project's pairs)
    # and the experiment shown beside the results.
    (root / "data" / "feedback" / "round0").mkdir(parents=True)
    beside = root / "metrics" / "feedback" / "test-q1000"
    beside.mkdir(parents=True)
    shutil.copy(REPO / "metrics" / "feedback" / "test-q1000" / "summary.json", beside / "summary.json")
    lm, enc = save_tiny_lm(tmp_path / "tiny-lm"), save_tiny_encoder(tmp_path / "tiny-enc")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["source_dir"] = str(data_dir)
    params["prepare"]["tasks"] = {"sst2": {"max_train": 16, "max_test": 4}, "e2e": {"max_train": 16, "max_test": 3}}
    params["models"] = {"lm": str(lm), "encoder": str(enc)}
    params["candidates"]["k"] = 4
    params["score"].update(queries_per_task=4, batch_tokens=2048, dtype="fp32")
    params["encoder"].update(max_query_length=48, max_demo_length=64)
    params["train"].update(
        later_rounds={"round1": "round0"},
        batch_size=2,
        micro_batch=2,
        epochs_first=1,
        epochs_later=1,
        warmup_steps=0,
        candidates_per_query=3,
    )
    params["mine"].update(k=3, batch_size=8)
    params["evaluate"].update(
        context=600,
        max_demos=2,
        max_new_tokens=4,
        candidates=4,
        batch_tokens=2048,
        shots=[1, 2],
        dtype="fp32",
        unseen_tasks={"cr": {"max_train": 16, "max_test": 4}},
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
    evaluations = {f"evaluate@{m}" for m in methods}
    # An evaluation parameter: only the evaluations.
    assert with_change("evaluate", "context", 500) == evaluations
    # A training parameter: training stages only; no data prep, BM25 candidates or round-0 scoring.
    assert with_change("train", "lr", 1e-3) == {"train", "retrain@round1", "train_epr"}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert _changed_stages(root, env) == set()

    # A task's template, then its instruction: the code and the prepared data's meta.json carry the
    # change to scoring, training and evaluation.
    tasks_py, declared = root / "udr" / "data" / "tasks.py", root / "udr" / "data" / "builtin_tasks.yaml"
    originals = {tasks_py: tasks_py.read_text(), declared: declared.read_text()}
    for path, old, new in (
        (tasks_py, 'DEFAULT_TEMPLATE = "{input}\\t{answer}"', 'DEFAULT_TEMPLATE = "{input} => {answer}"'),
        (declared, '"Sentiment of the sentence: "', '"How does the writer feel? "'),
    ):
        assert old in originals[path], old
        path.write_text(originals[path].replace(old, new))
        stale = _changed_stages(root, env)
        assert {"prepare@sst2", "score@sst2", "train", "rescore@round1", "retrain@round1", "index"} <= stale
        assert {"prepare_unseen@cr"} <= stale and evaluations <= stale
        path.write_text(originals[path])
    assert _changed_stages(root, env) == set()

    # A new declaration in data/tasks: every data preparation looks again (its unchanged outputs then
    # leave the later stages alone: `dvc repro` re-runs nothing else).
    (root / "data" / "tasks" / "mine.yaml").write_text(
        "mine:\n  kind: generation\n  instruction: 'Say: '\n  data: {train: mine.jsonl}\n"
    )
    assert _changed_stages(root, env) == {"prepare@sst2", "prepare@e2e", "prepare_unseen@cr"}
    done = subprocess.run([dvc, "repro"], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Running stage 'train'" not in done.stdout and _changed_stages(root, env) == set()
