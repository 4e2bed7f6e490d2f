"""The package's layers: the stages (udr/stages, one module per DVC stage), what else reads a project
(udr/project: the commands that look around it, its saved evaluations and inference LM), and the layers
that call them (the commands, the `udr exp` experiments, serving a project's retriever), are the only
modules that read a project's whole settings and paths; the library under them (data, feedback, lm,
retriever, evaluation, util) takes explicit arguments or one settings section, and imports none of them.
Only the commands and udr/workflows (where stages are composed) import the stages: a command runs one stage, a
run of several is a workflow's, and only the commands import a workflow. The experiments, serving and
udr/project reach the library directly, and so do the scripts beside the package (benchmarks/, tools/),
which import no stage, workflow or command either."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from udr.config import Settings

PKG = Path(__file__).resolve().parents[1] / "udr"
LIBRARY = ("data", "feedback", "lm", "retriever", "evaluation", "util")
ABOVE_THE_LIBRARY = ("udr.stages", "udr.project", "udr.cli", "udr.experiments", "udr.serving", "udr.workflows")
# The layers above the library that import no stage: a stage module is its `udr <command>`'s alone.
STAGE_FREE = ("experiments", "serving", "project")
STAGE_LINES = 200  # a stage loads, calls the library and writes: no more lines than this
# The scripts beside the package, and the layers they never import: a stage's or a command's code is its
# command's driver; a script reaches the library or udr/project (what reads a project) instead.
SCRIPT_DIRS = ("benchmarks", "tools")
NOT_FOR_SCRIPTS = ("udr.stages", "udr.workflows", "udr.cli")
# The layers that compose stages: the commands (one stage each) and udr/workflows (several, chained).
STAGE_COMPOSERS = ("cli", "workflows")
# Modules of udr/stages that are no DVC stage's, each named with why it is still there, so that none is
# added unnoticed: udr/stages/report.py (edited elsewhere) still imports the saved evaluations from here.
NOT_STAGES: dict[str, str] = {}  # a module of udr/stages that is not a stage, with why (none now)
# What only a whole project's settings have: its paths, registry and params file, and its methods over
# the params' tasks (called: `x.task(name)`; an attribute named `task` is anyone's).
PROJECT_PROPERTIES = {"params_file"} | {n for n, v in vars(Settings).items() if isinstance(v, property)}
PROJECT_METHODS = {n for n, v in vars(Settings).items() if not n.startswith("_") and callable(v)}
# Library modules that still read a whole project, each named here so that none is added unnoticed (what
# reads a project and is no DVC stage belongs in udr/project).
NOT_YET_STAGES: set[str] = set()


def _library_modules() -> list[Path]:
    return sorted(p for package in LIBRARY for p in (PKG / package).rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(PKG.parent).with_suffix("").as_posix()


def _imports(tree: ast.AST) -> list[tuple[str, list[str]]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
    return out


def _project_reads(tree: ast.AST) -> set[str]:
    reads = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in PROJECT_PROPERTIES}
    calls = (n.func for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute))
    return reads | {f.attr for f in calls if f.attr in PROJECT_METHODS}


def test_the_check_knows_the_settings_own_attributes():
    """What the check looks for: Settings' paths and its methods over the params' tasks, not its sections
    nor pydantic's methods; and it finds them in code that reads a project."""
    assert {"paths", "registry", "params_file"} <= PROJECT_PROPERTIES
    assert {"task", "task_caps", "evaluation_tasks", "data_dir", "prepared_task_names"} <= PROJECT_METHODS
    assert not {"model_copy", "model_dump", "train", "score", "seed"} & (PROJECT_PROPERTIES | PROJECT_METHODS)
    code = "def f(settings, work):\n    return settings.paths.scores(0, 't'), settings.task('t'), work.task"
    assert _project_reads(ast.parse(code)) == {"paths", "task"}
    assert _project_reads(ast.parse("def f(work):\n    return work.task.name")) == set()


@pytest.mark.parametrize("module", _library_modules(), ids=_name)
def test_a_library_module_reads_no_project_and_imports_no_stage(module):
    tree = ast.parse(module.read_text())
    for source, names in _imports(tree):
        assert not source.startswith(ABOVE_THE_LIBRARY), f"{_name(module)} imports {source}, a layer above it"
        if source == "udr.config":
            assert not {"Settings", "load_settings", "settings_from_mapping"} & set(names), (
                f"{_name(module)} imports the whole settings ({names}): take explicit arguments or one section"
            )
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            for arg in args:
                if arg.arg == "settings":
                    annotation = ast.unparse(arg.annotation) if arg.annotation else ""
                    assert annotation.endswith("Settings") and annotation != "Settings", (
                        f"{_name(module)}:{node.lineno} {node.name}(settings: {annotation or '?'}): a library function "
                        "takes one settings section, annotated (e.g. EncoderSettings), not the whole settings"
                    )
    reads = sorted(_project_reads(tree))
    if _name(module) in NOT_YET_STAGES:
        assert reads, f"{_name(module)} no longer reads a project: drop it from NOT_YET_STAGES"
        return
    assert not reads, (
        f"{_name(module)} reads a project's settings ({', '.join(reads)}): that belongs in udr/stages (a DVC "
        "stage) or udr/project"
    )


def _stage_commands() -> set[str]:
    """The `udr <command>` of every stage in dvc.yaml (a foreach stage's under `do`)."""
    stages = yaml.safe_load((PKG.parent / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    cmds = [stage.get("cmd") or stage.get("do", {}).get("cmd", "") for stage in stages.values()]
    return {m.group(1) for cmd in cmds if (m := re.match(r"udr (\S+)", cmd or ""))}


def _stage_modules() -> list[Path]:
    return sorted(p for p in (PKG / "stages").glob("*.py") if p.name != "__init__.py")


def test_the_stage_commands_are_read_from_dvc_yaml():
    assert {"prepare", "score", "train", "evaluate", "report"} <= _stage_commands()
    assert not {"show", "rounds", "init-task"} & _stage_commands()


@pytest.mark.parametrize("module", _stage_modules(), ids=_name)
def test_every_stage_module_is_a_dvc_stages_and_short(module):
    """udr/stages holds one module per DVC stage, named as its `udr <command>` in dvc.yaml, each at most
    STAGE_LINES lines (load, call the library, write); what reads a project otherwise is udr/project's."""
    if module.stem in NOT_STAGES:
        name = f"udr.stages.{module.stem}"
        importers = [p for p in _stage_modules() if any(s == name for s, _ in _imports(ast.parse(p.read_text())))]
        assert importers, f"{_name(module)} is imported by no stage any more: remove it and drop it from NOT_STAGES"
        return
    assert module.stem in _stage_commands(), (
        f"{_name(module)} is no DVC stage's (dvc.yaml runs no `udr {module.stem}`): move it to udr/project or "
        "the library"
    )
    lines = len(module.read_text().splitlines())
    assert lines <= STAGE_LINES, (
        f"{_name(module)} has {lines} lines (at most {STAGE_LINES}): move what is no loading, calling or writing "
        "into the library"
    )


def _stage_free_modules() -> list[Path]:
    return sorted(p for layer in STAGE_FREE for p in (PKG / layer).rglob("*.py"))


@pytest.mark.parametrize("module", _stage_free_modules(), ids=_name)
def test_the_experiments_serving_and_project_import_no_stage(module):
    """The experiments, serving and udr/project run the library (or udr/project), never a stage's module: a
    stage is its command's driver, not a library; their docstrings name no stage module either."""
    text = module.read_text()
    for source, _ in _imports(ast.parse(text)):
        assert not source.startswith("udr.stages"), f"{_name(module)} imports {source}: import the library instead"
    if not module.is_relative_to(PKG / "project"):  # udr/project names the stages that use it
        assert "udr.stages" not in text, f"{_name(module)} names a stage module (udr.stages): name the library's"


def _modules() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


def _layer(module: Path) -> str:
    return module.relative_to(PKG).parts[0]


def test_only_the_commands_and_workflows_import_a_stage():
    """Outside udr/stages itself, a stage's module is imported by the commands and udr/workflows alone."""
    importers = {
        _name(p)
        for p in _modules()
        if _layer(p) != "stages" and any(s.startswith("udr.stages") for s, _ in _imports(ast.parse(p.read_text())))
    }
    assert {"udr/cli/pipeline", "udr/workflows/adapt"} <= importers
    assert all(_layer(PKG.parent / f"{n}.py") in STAGE_COMPOSERS for n in importers), sorted(importers)


@pytest.mark.parametrize("module", sorted((PKG / "cli").glob("*.py")), ids=_name)
def test_a_command_runs_one_stage_and_a_chain_of_stages_is_a_workflow(module):
    """Each function of udr/cli imports at most one stage module: a run that chains stages goes in
    udr/workflows, and its command parses options into a request and shows the outcome."""
    for fn in ast.walk(ast.parse(module.read_text())):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stages = {s for s, _ in _imports(fn) if s.startswith("udr.stages")}
            where = f"{_name(module)}:{fn.lineno} {fn.name}"
            assert len(stages) <= 1, f"{where} runs {sorted(stages)}: chaining stages belongs in udr/workflows"


@pytest.mark.parametrize("module", [p for p in _modules() if _layer(p) not in ("cli", "workflows")], ids=_name)
def test_only_the_commands_import_a_workflow(module):
    """A workflow composes stages for a command: nothing under it (stages, udr/project, serving, the
    experiments, the library) imports one."""
    for source, _ in _imports(ast.parse(module.read_text())):
        assert not source.startswith("udr.workflows"), f"{_name(module)} imports {source}, a layer above it"


@pytest.mark.parametrize("module", sorted((PKG / "workflows").glob("*.py")), ids=_name)
def test_a_workflow_imports_no_command(module):
    for source, _ in _imports(ast.parse(module.read_text())):
        assert not source.startswith("udr.cli"), f"{_name(module)} imports {source}: a command is above it"


def _scripts() -> list[Path]:
    return sorted(p for folder in SCRIPT_DIRS for p in (PKG.parent / folder).rglob("*.py"))


def test_the_scripts_are_found():
    names = {p.relative_to(PKG.parent).as_posix() for p in _scripts()}
    assert {"benchmarks/training.py", "benchmarks/evaluate.py", "tools/migrate_score_manifests.py"} <= names


@pytest.mark.parametrize("script", _scripts(), ids=lambda p: p.relative_to(PKG.parent).as_posix())
def test_benchmarks_and_tools_import_no_stage_and_no_command(script):
    """benchmarks/ and tools/ run the library, udr/project, serving or the experiments, never a stage's, a
    workflow's or a command's module (a command is run as `udr ...` in a process of its own)."""
    for source, _ in _imports(ast.parse(script.read_text())):
        assert not source.startswith(NOT_FOR_SCRIPTS), (
            f"{script.relative_to(PKG.parent)} imports {source}: import the library (or udr/project) instead"
        )
