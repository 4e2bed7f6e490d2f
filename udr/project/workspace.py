"""`udr init-task`: a user's own task as a workspace of its own.

A workspace is a folder with its own params file (a copy of the project's, naming only the new task) and
the task's declaration and data under its `data/tasks/`. Every path of a run derives from the params
file's folder (:class:`udr.paths.Paths`), so its prepared data, scores, models, predictions and metrics
live in the workspace, and the project's pipeline (`dvc status`, `dvc repro`, `metrics/<method>/`) is
untouched. Its `models/base`, `models/final` and `models/epr` are links to the project's, so the
workspace starts from the project's models without a copy, and `udr evaluate -m udr` there evaluates
the project's trained UDR (embedding the new pool on the fly).

Imports of yaml, udr.config and the udr.data modules (pydantic) are inside the functions that use them, to keep the
start of `udr` and of its commands light.
"""

from __future__ import annotations

import copy
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from udr.errors import UdrError, listed
from udr.util.files import building_dir, resolve_target, write_text_atomic

# The project's model folders a workspace links to (its own runs write beside them, e.g. models/<name>).
LINKED_MODELS = ("base", "final", "epr")
# Scored queries and round-0 epochs of a workspace's task (notebook/2026-11-selection.md: the curve's 256 point).
WORKSPACE_QUERIES = 256
WORKSPACE_EPOCHS = 3
# Columns taken as the input / the label when the command does not name them.
INPUT_COLUMNS = ("input", "text", "sentence", "question", "tweet", "review", "content")
LABEL_COLUMNS = ("label", "target", "answer", "output", "class", "category")


@dataclass(frozen=True)
class Workspace:
    """What `udr init-task` wrote: the folder, its params file, the declaration, and the columns read."""

    folder: Path
    params: Path
    declaration: Path
    input: str
    label: str
    rows: int
    labels: int


def _pick(columns: list[str], wanted: str | None, candidates: tuple[str, ...], option: str, source: Path) -> str:
    if wanted is not None:
        if wanted not in columns:
            raise UdrError(f"{option}: no column '{wanted}' in {source} (its columns: {listed(columns)})")
        return wanted
    for name in candidates:
        if name in columns:
            return name
    raise UdrError(f"give {option} COLUMN: none of {source}'s columns ({listed(columns)}) is one udr guesses")


def workspace_params(project_raw: dict, project_root: Path, folder: Path, name: str, caps: dict) -> dict:
    """The project's params with only `name` as task (prepared with `caps`), no unseen tasks, shots curve
    nor experiments beside, its own scoring budget, and the data mirror's path rebased onto `folder`."""
    raw = copy.deepcopy(project_raw)
    data = raw.setdefault("data", {})
    source = Path(data.get("source_dir", "../shared/data"))
    if not source.is_absolute():
        source = Path(os.path.relpath((project_root / source).resolve(), folder.resolve()))
    data["source_dir"] = source.as_posix()
    data["tasks_dir"] = "data/tasks"
    raw.setdefault("prepare", {})["tasks"] = {name: caps}
    evaluate = raw.setdefault("evaluate", {})
    evaluate.update({"tasks": [], "unseen_tasks": {}, "shots_tasks": [], "beside": []})
    # A new task has no shipped feedback: every pair is scored here, so the workspace scores the feedback
    # curve's 256 queries (a few minutes for one task on 2 CPU cores) and trains 3 epochs on them.
    raw.setdefault("score", {}).update({"queries_per_task": WORKSPACE_QUERIES, "reuse_shipped": False})
    raw.setdefault("train", {}).update({"tasks": [], "epochs_first": WORKSPACE_EPOCHS})
    return raw


def init_workspace(
    settings,
    name: str,
    source: Path,
    folder: Path,
    *,
    input_column: str | None = None,
    label_column: str | None = None,
    instruction: str | None = None,
    metric: str | None = None,
    max_train: int = 1000,
    max_test: int = 200,
) -> Workspace:
    """Write `folder` (it must not exist) for the classification task `name` over the data file `source`:
    `data/tasks/<name>.yaml` and a copy of the file beside it, `params.yaml` (:func:`workspace_params`),
    and links to the project's models; written beside, then renamed into place."""
    import yaml

    from udr.config import settings_from_mapping
    from udr.data.declarations import TASK_NAME, parse_declarations
    from udr.data.sources import check_columns, read_records
    from udr.util.safe_yaml import load_yaml

    if not TASK_NAME.fullmatch(name):
        raise UdrError(
            f"bad task name {name!r}: 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
        )
    if name in settings.registry:
        raise UdrError(
            f"task '{name}' already exists in this project ({settings.task(name).declared_in}); choose another name"
        )
    shown = folder
    folder = resolve_target(folder, "--dir")  # `..` and links resolved, a file above it refused, before any work
    if folder.exists():
        raise UdrError(f"{shown} already exists: give another --dir, or remove it first")
    records = read_records(Path(source), name)
    if not records:
        raise UdrError(f"task {name}: data file {source} has no rows")
    columns = [str(c) for c in records[0][1]]
    input_column = _pick(columns, input_column, INPUT_COLUMNS, "--input", source)
    label_column = _pick(columns, label_column, LABEL_COLUMNS, "--label", source)
    labels = {str(r.get(label_column)).strip() for _, r in records}
    if len(labels) < 2:
        raise UdrError(
            f"--label: column '{label_column}' of {source} holds {len(labels)} value: a task needs 2 or more"
        )
    data_file = f"{name}{Path(source).suffix.lower()}"
    declaration = {
        "kind": "classification",
        "instruction": instruction or f"{label_column.replace('_', ' ').capitalize()} of the text: ",
        "data": {"train": data_file},
        "input": input_column,
        "label": label_column,
        **({"metric": metric} if metric else {}),
    }
    project_raw = load_yaml((settings.root / settings.params_file).read_text(encoding="utf-8"), "params file") or {}
    caps = {"max_train": max_train, "max_test": max_test}
    folder.parent.mkdir(parents=True, exist_ok=True)
    with building_dir(folder) as tmp:
        tasks_dir = tmp / "data" / "tasks"
        tasks_dir.mkdir(parents=True)
        shutil.copyfile(source, tasks_dir / data_file)
        text = f"# Declared by `udr init-task {name}` over {Path(source).name}; see docs/tasks.md.\n"
        write_text_atomic(tasks_dir / f"{name}.yaml", text + yaml.safe_dump({name: declaration}, sort_keys=False))
        task = parse_declarations({name: declaration}, tasks_dir, f"{name}.yaml")[name]
        check_columns(task, records, str(source))
        raw = workspace_params(project_raw, settings.root, folder, name, caps)
        settings_from_mapping(raw, root=tmp)  # a params file that loads, before anything is in place
        header = f"# The workspace of task {name} (`udr init-task`), from {settings.params_file}.\n"
        write_text_atomic(tmp / "params.yaml", header + yaml.safe_dump(raw, sort_keys=False))
        (tmp / "models").mkdir()
        for model in LINKED_MODELS:
            target = settings.root / "models" / model
            (tmp / "models" / model).symlink_to(os.path.relpath(target.resolve(), (folder / "models").resolve()))
    return Workspace(
        folder,
        folder / "params.yaml",
        folder / "data" / "tasks" / f"{name}.yaml",
        input_column,
        label_column,
        len(records),
        len(labels),
    )
