"""The package's layers: the stages (udr/stages), and the layers that call them (the commands, the `udr
exp` experiments, serving a project's retriever), are the only modules that read a project's whole
settings and paths; the library under them (data, feedback, lm, retriever, evaluation, util) takes
explicit arguments or one settings section, and imports none of them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from udr.config import Settings

PKG = Path(__file__).resolve().parents[1] / "udr"
LIBRARY = ("data", "feedback", "lm", "retriever", "evaluation", "util")
ABOVE_THE_LIBRARY = ("udr.stages", "udr.cli", "udr.experiments", "udr.serving")
# What only a whole project's settings have: its paths, registry and params file, and its methods over
# the params' tasks (called: `x.task(name)`; an attribute named `task` is anyone's).
PROJECT_PROPERTIES = {"params_file"} | {n for n, v in vars(Settings).items() if isinstance(v, property)}
PROJECT_METHODS = {n for n, v in vars(Settings).items() if not n.startswith("_") and callable(v)}
# Library modules that still read a whole project: the commands they serve are not DVC stages, and each
# is named here so that none is added unnoticed.
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
    assert not reads, f"{_name(module)} reads a project's settings ({', '.join(reads)}): that belongs in udr/stages"
