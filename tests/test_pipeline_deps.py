"""dvc.yaml's code dependencies cannot drift from the code: each stage must depend on exactly the udr
subpackages (directories) and top-level modules that its command imports, directly or through other
udr modules (function-level imports included), as `make deps` (tools/dvc_deps.py) writes them. Each
stage's params are the settings it reads (EPR's: not those its recipe overrides). And what DVC re-runs
after a change, on a real tiny pipeline (slow)."""

from __future__ import annotations

import ast
import copy
import difflib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.tiny_pipeline import tiny_pipeline_project
from tools.dvc_deps import (
    closure,
    command_imports,
    generate,
    is_code_dep,
    module_file,
    required_code_deps,
    stage_command,
)


def _stages() -> dict[str, dict]:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def test_dvc_yaml_code_deps_are_the_generated_ones():
    """A hand edit of a stage's udr/ deps (or a code change that imports other modules) fails here."""
    text = (REPO / "dvc.yaml").read_text(encoding="utf-8")
    generated = generate(text)
    diff = "".join(difflib.unified_diff(text.splitlines(True), generated.splitlines(True), "dvc.yaml", "generated"))
    assert generated == text, f"dvc.yaml's udr/ deps are not the code's imports: run `make deps`\n{diff}"


def test_the_generator_rewrites_only_the_udr_entries_in_place():
    """A stage's udr/ deps dropped, added or out of order come back as one sorted block where they were;
    every other line (comments, anchors, other deps) is kept as it is."""
    text = (REPO / "dvc.yaml").read_text(encoding="utf-8")
    want = generate(text)
    edited = want.replace("      - udr/retriever/losses.py\n", "", 1).replace(
        "    deps:\n      - udr/config.py\n", "    deps:\n      - udr/paths.py\n      - udr/config.py\n", 1
    )
    assert edited != want and generate(edited) == want

    def others(t: str) -> list[str]:
        return [line for line in t.splitlines() if not line.lstrip().startswith("- udr/")]

    assert others(want) == others(text)


@pytest.mark.parametrize("stage", sorted(_stages()))
def test_each_stage_depends_on_exactly_the_code_it_runs(stage):
    spec = _stages()[stage]
    body = spec.get("do", spec)
    command = stage_command(body["cmd"])
    assert command is not None, f"dvc.yaml stage {stage!r} runs no udr command"
    declared = {d for d in body["deps"] if is_code_dep(d)}
    assert declared == required_code_deps(command), f"dvc.yaml stage {stage!r}: its udr/ deps differ: run `make deps`"


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


def _code_nodes(command: str, skip: frozenset[str] = frozenset()):
    """Every AST node of the udr modules a command's code imports (`skip`: modules left out)."""
    for name in closure(command_imports(command)) - skip:
        path = module_file(name)
        yield from ast.walk(ast.parse(path.read_text())) if path else ()


def _precision_sections(command: str) -> set[str]:
    """The settings sections whose precision or device a command's code resolves (`resolve_lm_precision(device,
    dtype, "<section>")` or `resolve_device_type(device, "<section>.device")` in a module it imports)."""
    found = set()
    for node in _code_nodes(command):
        callee = getattr(node, "func", None)
        called = getattr(callee, "id", getattr(callee, "attr", None))
        args = getattr(node, "args", [])
        if called == "resolve_lm_precision" and len(args) == 3:
            section = args[2]
        elif called == "resolve_device_type" and len(args) == 2:
            section = args[1]
        else:
            continue
        if isinstance(section, ast.Constant) and isinstance(section.value, str):
            found.add(section.value.removesuffix(".device"))
    return found


@pytest.mark.parametrize("stage", sorted(_stages()))
def test_a_stage_computing_in_a_resolved_precision_depends_on_its_file(stage):
    """`dtype: auto` resolves per CPU kind, `device: auto` per machine: a stage computing in a section's
    precision or on its device must depend on the file `udr precision` writes for it, else a machine resolving
    otherwise reuses outputs made in another one."""
    from udr.stages.precision import SECTIONS

    body = _stages()[stage].get("do", _stages()[stage])
    sections = _precision_sections(stage_command(body["cmd"]))
    assert sections <= set(SECTIONS), f"{stage}: `udr precision` writes no file for {sections - set(SECTIONS)}"
    declared = {d for d in body["deps"] if isinstance(d, str) and d.startswith("data/precision/")}
    assert declared == {f"data/precision/{s}.json" for s in sections}, stage


def test_the_precision_stage_runs_every_time_and_writes_a_file_per_section():
    from udr.stages.precision import SECTIONS

    stage = _stages()["precision"]
    assert stage["always_changed"] is True
    assert [next(iter(o)) for o in stage["outs"]] == [f"data/precision/{s}.json" for s in SECTIONS]
    assert set(stage["params"]) == {f"{s}.{key}" for s in SECTIONS for key in ("device", "dtype", "threads")}
    assert {_precision_sections(c) != set() for c in ("score", "train", "evaluate")} == {True}


@pytest.mark.parametrize(
    ("stage", "key", "scores"), [("score", "sst2", "round0/sst2"), ("rescore", "round1", "round1/sst2")]
)
def test_a_scoring_stage_keeps_a_killed_runs_shards_from_dvc(stage, key, scores):
    """DVC deletes a stage's outputs before it runs, persistent ones excepted; a scoring run's finished shards
    wait in the partial folder beside its scores file (udr.util.resume): an output holding it must persist."""
    from udr.util.resume import partial_dir

    partial = partial_dir(Path(f"data/scores/{scores}.parquet"))
    for out in _stages()[stage]["do"]["outs"]:
        path, options = next(iter(out.items())) if isinstance(out, dict) else (out, {})
        if partial.is_relative_to(path.replace("${key}", key)):
            assert options.get("persist"), f"{stage}'s output {path} holds {partial} but is not persist"


def test_dvc_yaml_evaluates_every_method_of_the_config():
    from udr.config import METHODS

    retrievers = yaml.safe_load((REPO / "dvc.yaml").read_text())["vars"][0]["retrievers"]
    assert tuple(retrievers) == METHODS


# Train settings that change where or how often training runs (threads: through data/precision/train.json), never
# the trained model's recipe; and final_alpha, which
# `udr index` reads (a param of the index stage, tested below), not training.
TRAIN_NOT_RECIPE = {"checkpoint_seconds", "device", "threads", "final_alpha"}


# Settings a stage's code reads (`settings.<section>.<key>`) that are no input of what it writes, and why.
READ_NOT_AN_INPUT = {
    "models.encoder": "the base encoder's name: its folder models/base/encoder is the dep",
    "train.check_round": "a method: the round's own check",
    "train.device": "resolved into data/precision/train.json, the dep",
    "train.threads": "resolved into data/precision/train.json, the dep",
    "score.threads": "resolved into data/precision/score.json, the dep",
    "evaluate.threads": "resolved into data/precision/evaluate.json, the dep",
    "train.rounds": "train.later_rounds's rounds",
    "score.shipped": "read for round 0 only, which `score` (not `rescore`) runs",
}
# Per stage: settings its code reads only in another case than the stage's.
READ_NOT_AN_INPUT_OF = {
    # the recipe sets feedback, and E_d learns (not frozen): no pool is embedded in training
    "train_epr": {"train.feedback", "mine.batch_size"},
    "train_dr_target": {"train.feedback", "mine.batch_size"},
}


def _settings_reads(command: str) -> set[str]:
    """Every `settings.<section>.<key>` a command's code reads (udr.config's own validation aside); a
    `model_dump()` of a section records the settings beside a model, as provenance."""
    sections = set(yaml.safe_load((REPO / "params.yaml").read_text()))
    found = set()
    for node in _code_nodes(command, skip=frozenset({"udr.config"})):
        inner = node.value if isinstance(node, ast.Attribute) else None
        if (
            isinstance(inner, ast.Attribute)
            and inner.attr in sections
            and isinstance(inner.value, ast.Name)
            and inner.value.id == "settings"
            and node.attr != "model_dump"
        ):
            found.add(f"{inner.attr}.{node.attr}")
    return found


@pytest.mark.parametrize("stage", sorted(_stages()))
def test_each_setting_a_stage_reads_is_one_of_its_params(stage):
    """A setting a stage reads but does not list is one `dvc exp run -S` changes without re-running it."""
    body = _stages()[stage].get("do", _stages()[stage])
    params = set(body.get("params", []))
    reads = _settings_reads(stage_command(body["cmd"]))
    unlisted = {r for r in reads if r not in params and r.split(".")[0] not in params}
    unlisted -= set(READ_NOT_AN_INPUT) | READ_NOT_AN_INPUT_OF.get(stage, set())
    assert not unlisted, f"dvc.yaml stage {stage!r} reads settings it does not list in its params: {sorted(unlisted)}"


def test_the_settings_reads_are_found():
    """The scan sees what the stages read (else the test above passes on nothing)."""
    assert "mine.batch_size" in _settings_reads("train") and "train.device" in _settings_reads("mine")
    assert "train.tasks" in _settings_reads("report")


def test_the_index_stage_depends_on_the_interpolation_it_applies():
    assert "train.final_alpha" in _stages()["index"]["params"]


@pytest.mark.parametrize("stage", ["train", "retrain"])
def test_every_training_recipe_setting_is_a_param_of_the_training_stages(stage):
    """A setting missing from a stage's params is one `dvc exp run -S` changes without re-running it."""
    from udr.config import TrainSettings

    spec = _stages()[stage]
    params = set(spec.get("do", spec)["params"])
    recipe = {f"train.{f}" for f in TrainSettings.model_fields} - {f"train.{f}" for f in TRAIN_NOT_RECIPE}
    recipe -= {"train.later_rounds"}  # the stages' foreach, not a param of any one of them
    assert recipe | {"seed", "encoder", "score.queries_per_task"} <= params


def _another(value):
    """A value other than `value`, of its kind (not validated: only to see what a function reads)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "-other"
    if isinstance(value, dict):
        return {**value, "other": "value"}
    if isinstance(value, list):
        return [*value, "other"]
    if value is None:  # an optional setting unset (train.seed): set
        return 1
    raise TypeError(f"no other value of {value!r}")


def _epr_overridden() -> set[str]:
    """The train settings EPR's recipe sets whatever they are: changing one changes none of EPR's settings."""
    from udr.config import TrainSettings
    from udr.retriever.recipes import epr_train_settings

    base = TrainSettings()
    epr = epr_train_settings(base, "sst2")  # the pipeline trains one EPR per task
    return {
        name
        for name in TrainSettings.model_fields
        if epr_train_settings(base.model_copy(update={name: _another(getattr(base, name))}), "sst2") == epr
    }


# Train settings EPR's settings carry but its recipe never reads: the epr scheme samples 2 candidates, and
# the temperature is loss distill's (EPR's loss is paper with lambda 0: the in-batch loss alone).
EPR_UNREAD = {"candidates_per_query", "distill_temperature"}


def test_epr_does_not_depend_on_the_train_settings_it_overrides():
    """`dvc exp run -S train.loss_lambda=0.5` must not re-run train_epr, which trains with lambda 0."""
    spec = _stages()["train_epr"]["do"]  # foreach task
    params = set(spec["params"])
    overridden = _epr_overridden()
    assert {"loss_lambda", "sampling", "loss", "tasks"} <= overridden  # what EPR is: the derivation finds it
    assert "epochs_first" not in overridden  # set, but from its value: EPR's epochs count it
    assert "train" not in params, "train_epr depends on the whole train section: list the settings EPR reads"
    listed = {f"train.{name}" for name in overridden} & params
    assert not listed, f"train_epr lists train settings EPR overrides: {sorted(listed)}"


def test_epr_depends_on_every_train_setting_it_reads():
    from udr.config import TrainSettings
    from udr.retriever.losses import UDRLoss
    from udr.retriever.recipes import epr_train_settings, recipe_for

    def recipe(cfg) -> tuple:
        r = recipe_for(epr_train_settings(cfg), 20.0)
        return type(r), r.scheme, r.candidates, type(r.loss), r.loss.lambda_, r.loss.scale

    base = TrainSettings()
    assert recipe(base)[3] is UDRLoss  # the paper's: so the distillation temperature goes unused
    for name in EPR_UNREAD:
        assert recipe(base.model_copy(update={name: _another(getattr(base, name))})) == recipe(base), name
    reads = set(TrainSettings.model_fields) - _epr_overridden() - EPR_UNREAD - TRAIN_NOT_RECIPE
    assert "later_rounds" in reads  # EPR trains as many epochs as all of UDR's rounds together
    want = {f"train.{name}" for name in reads} | {"seed", "encoder", "score.queries_per_task"}
    assert set(_stages()["train_epr"]["do"]["params"]) == want


def test_dr_target_reads_the_settings_epr_reads():
    """DR-Target is EPR's recipe and budget with another ranking of the candidates: the same settings in, the
    same stage params (a change that re-runs one re-runs the other)."""
    from udr.config import TrainSettings
    from udr.retriever.recipes import dr_target_train_settings, epr_train_settings

    base = TrainSettings()
    assert dr_target_train_settings(base, "sst2") == epr_train_settings(base, "sst2").model_copy(
        update={"feedback": "target"}
    )
    for name in TrainSettings.model_fields:
        other = base.model_copy(update={name: _another(getattr(base, name))})
        epr_moved = epr_train_settings(other, "sst2") != epr_train_settings(base, "sst2")
        assert (dr_target_train_settings(other, "sst2") != dr_target_train_settings(base, "sst2")) == epr_moved, name
    stages = _stages()
    assert stages["train_dr_target"]["do"]["params"] == stages["train_epr"]["do"]["params"]


# ---------------------------------------------------------------- what DVC re-runs (slow)


def _changed_stages(root: Path, env: dict) -> set[str]:
    dvc = str(Path(sys.executable).with_name("dvc"))
    out = subprocess.run(
        [dvc, "status", "--json"], cwd=root, env=env, capture_output=True, text=True, check=True
    ).stdout
    status = json.loads(out)
    assert "always changed" in status.get("precision", []), status.get("precision")  # run every time
    return {stage for stage, changes in status.items() if changes != ["always changed"]}


def test_dvc_ignores_the_bytecode_beside_the_code_deps():
    """Python writes `__pycache__/` into udr/'s subpackages, every stage's code deps, wherever
    PYTHONDONTWRITEBYTECODE is unset; DVC must hash the sources alone, or a stage's first run would make
    every later stage stale, and every clean clone differ from the lock (a .pyc holds its source's mtime)."""
    from dvc.repo import Repo

    with Repo(str(REPO)) as repo:
        assert repo.dvcignore.is_ignored_file(str(REPO / "udr" / "data" / "__pycache__" / "tasks.cpython-311.pyc"))
        assert not repo.dvcignore.is_ignored_file(str(REPO / "udr" / "data" / "tasks.py"))


@pytest.mark.slow
def test_what_a_change_re_runs(tmp_path, data_dir):
    """On a tiny real pipeline (with an unseen task), its stages writing bytecode beside their code: a second
    look finds nothing stale; an evaluation parameter re-runs only the evaluations; a training parameter only
    training; a task's template or instruction the task's data, its LM scoring, training and every
    evaluation; a new task declaration in data/tasks the data preparation (whose unchanged outputs stop it
    there)."""
    root, params = tiny_pipeline_project(tmp_path, data_dir)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("UDR_DATA_DIR", None)
    # The stages run the project's copy of udr/, and write bytecode beside it, as on most machines.
    env["PYTHONPATH"] = str(root)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
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

    methods = ("random", "bm25", "sbert", "dr-target", "epr", "udr")
    evaluations = {f"evaluate@{m}" for m in methods}
    # An evaluation parameter: only the evaluations.
    assert with_change("evaluate", "context", 500) == evaluations
    # A training parameter: training stages only; no data prep, BM25 candidates or round-0 scoring.
    baselines = {f"{stage}@{t}" for stage in ("train_epr", "train_dr_target") for t in ("sst2", "e2e")}
    assert with_change("train", "lr", 1e-3) == {"train", "retrain@round1", *baselines}
    # The embedding batch: every stage embedding with a trained bi-encoder (E_d frozen in UDR's training).
    assert with_change("mine", "batch_size", 32) == {"train", "retrain@round1", "mine@round1", "index", *evaluations}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert _changed_stages(root, env) == set()

    # A machine whose `dtype: auto` resolves to another precision (its file as `udr precision` writes it
    # there): the stages computing in it, and only those; `dvc repro` here writes this machine's back.
    computing = {
        "score": {"score@sst2", "score@e2e", "rescore@round1"},
        "train": {"train", "retrain@round1", *baselines, "mine@round1", "index"},  # these two: on its device
        "evaluate": evaluations,
    }
    for section, stages in computing.items():
        path = root / "data" / "precision" / f"{section}.json"
        here = json.loads(path.read_text())
        path.write_text(json.dumps({**here, "dtype": "bf16" if here["dtype"] == "fp32" else "fp32"}, indent=2) + "\n")
        assert _changed_stages(root, env) == {"precision", *stages}, section  # its output, and who reads it
        done = subprocess.run([dvc, "repro"], cwd=root, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert re.findall(r"Running stage '([^']+)'", done.stdout) == ["precision"]
        assert json.loads(path.read_text()) == here and _changed_stages(root, env) == set()

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
