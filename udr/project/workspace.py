"""`udr init-task`: a user's own task as a workspace of its own.

A workspace is a folder with its own params file (a copy of the project's, naming only the new task) and
the task's declaration and data under its `data/tasks/`. Every path of a run derives from the params
file's folder (:class:`udr.paths.Paths`), so its prepared data, scores, models, predictions and metrics
live in the workspace, and the project's pipeline (`dvc status`, `dvc repro`, `metrics/<method>/`) is
untouched. Its `models/base` and `models/final` are links to the project's, so the
workspace starts from the project's models without a copy, and `udr evaluate -m udr` there evaluates
the project's trained UDR (embedding the new pool on the fly). A separate test file (`--test`) becomes the
declaration's `data.test`, so `udr prepare` takes it as the test split instead of carving one.

Paths the workspace writes (its data mirror, its model links) are relative to the workspace where they
lie inside the project, else absolute; either way as the project names them, symbolic links not
resolved (:func:`workspace_path`), so a path never climbs out of the project and back through a link's
target.

Imports of yaml, udr.config and the udr.data modules (pydantic) are inside the functions that use them, to keep the
start of `udr` and of its commands light.
"""

from __future__ import annotations

import copy
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from udr.errors import UdrError, listed
from udr.util.files import building_dir, resolve_target, write_text_atomic
from udr.util.locks import holding

if TYPE_CHECKING:
    from udr.config import Settings

# The project's model folders a workspace links to (its own runs write beside them, e.g. models/<name>).
LINKED_MODELS = ("base", "final")
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
    test_rows: int | None = None


def _pick(columns: list[str], wanted: str | None, candidates: tuple[str, ...], option: str, source: Path) -> str:
    if wanted is not None:
        if wanted not in columns:
            raise UdrError(f"{option}: no column '{wanted}' in {source} (its columns: {listed(columns)})")
        return wanted
    for name in candidates:
        if name in columns:
            return name
    raise UdrError(f"give {option} COLUMN: none of {source}'s columns ({listed(columns)}) is one udr guesses")


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def workspace_path(target: Path, project_root: Path, folder: Path) -> str:
    """How the workspace `folder` names `target` (a path of the project, `project_root`-relative or
    absolute): relative to `folder` where both lie inside the project, else absolute. Computed on the
    paths as named (`..` folded, symbolic links not resolved), so a linked data folder keeps its name."""
    root = os.path.abspath(project_root)
    where = os.path.abspath(os.path.join(root, target))
    here = os.path.abspath(folder)
    if _inside(where, root) and _inside(here, root):
        return Path(os.path.relpath(where, here)).as_posix()
    return Path(where).as_posix()


def workspace_params(project_raw: dict, project_root: Path, folder: Path, name: str, caps: dict) -> dict:
    """The project's params with only `name` as task (prepared with `caps`), no unseen tasks, shots curve
    nor experiments beside, its own scoring budget, and the data mirror's path as `folder` names it
    (:func:`workspace_path`)."""
    raw = copy.deepcopy(project_raw)
    data = raw.setdefault("data", {})
    source = Path(data.get("source_dir", "../shared/data"))
    data["source_dir"] = workspace_path(source, project_root, folder) if not source.is_absolute() else source.as_posix()
    data["tasks_dir"] = "data/tasks"
    raw.setdefault("prepare", {})["tasks"] = {name: caps}
    evaluate = raw.setdefault("evaluate", {})
    evaluate.update({"tasks": [], "unseen_tasks": {}, "shots_tasks": [], "beside": []})
    # A new task has no shipped feedback: every pair is scored here, so the workspace scores the feedback
    # curve's 256 queries (a few minutes for one task on 2 CPU cores) and trains 3 epochs on them.
    raw.setdefault("score", {}).update({"queries_per_task": WORKSPACE_QUERIES, "reuse_shipped": False})
    raw.setdefault("train", {}).update({"tasks": [], "epochs_first": WORKSPACE_EPOCHS})
    return raw


@dataclass(frozen=True)
class WorkspaceRequest:
    """What the user asked `udr init-task` for (the command's options): the classification task `name` over
    the data file `source` (and `test`, its test rows, read with the same columns) in the workspace
    `folder`, its pool and test rows capped (`validation`: rows carved from the train rows to choose settings
    on). Made, it is checked: a bad task name, cap or instruction is a one-line UdrError."""

    name: str
    source: Path
    folder: Path
    test: Path | None = None
    input_column: str | None = None
    label_column: str | None = None
    instruction: str | None = None
    metric: str | None = None
    max_train: int = 1000
    max_test: int = 200
    validation: int | None = None

    def __post_init__(self) -> None:
        from udr.data.declarations import TASK_NAME, check_instruction

        if not TASK_NAME.fullmatch(self.name):
            raise UdrError(
                f"bad task name {self.name!r}: 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
            )
        if self.max_train < 2:
            raise UdrError(f"--max-train {self.max_train}: the demonstration pool needs 2 rows or more")
        if self.max_test < 1:
            raise UdrError(f"--max-test {self.max_test}: keep 1 test row or more")
        if self.validation is not None and self.validation < 1:
            raise UdrError(f"--validation {self.validation}: carve 1 row or more, or leave it out")
        check_instruction(self.instruction, "--instruction")
        for name in ("source", "folder", "test"):
            value = getattr(self, name)
            object.__setattr__(self, name, Path(value) if value is not None else None)

    @property
    def caps(self) -> dict:
        """The task's caps in the workspace's params (`prepare.tasks.<name>`)."""
        return {
            "max_train": self.max_train,
            "max_test": self.max_test,
            **({"validation": self.validation} if self.validation else {}),
        }


def init_workspace(
    settings: Settings, request: WorkspaceRequest, *, extra_files: dict[str, str] | None = None
) -> Workspace:
    """Write the workspace `request.folder` (it must not exist; locked, :mod:`udr.util.locks`, before it is
    checked): `data/tasks/<name>.yaml` and a copy of the file(s) beside it, `params.yaml`
    (:func:`workspace_params`), links to the project's models, and `extra_files` ({name: text}, e.g. `udr
    adapt`'s step record); written beside, then renamed. What the files alone decide (:func:`check_rows`) is
    checked before anything is written."""
    name = request.name
    if name in settings.registry:
        raise UdrError(
            f"task '{name}' already exists in this project ({settings.task(name).declared_in}); choose another name"
        )
    folder = resolve_target(request.folder, "--dir")  # `..` and links resolved, a file above it refused, first
    with holding(folder, "workspace"):
        if folder.exists():
            raise UdrError(f"{request.folder} already exists: give another --dir, or remove it first")
        return _write_workspace(settings, request, folder, extra_files or {})


def _write_workspace(
    settings: Settings, request: WorkspaceRequest, folder: Path, extra_files: dict[str, str]
) -> Workspace:
    """:func:`init_workspace`'s work, under its lock: the files read and checked, then the folder written."""
    import yaml

    from udr.config import settings_from_mapping
    from udr.util.safe_yaml import load_yaml

    name, source, test_source = request.name, request.source, request.test
    declaration, counts = _declared(settings, request, folder)
    params_file = settings.root / settings.params_file
    project_raw = load_yaml(params_file.read_text(encoding="utf-8"), f"params file {params_file}") or {}
    folder.parent.mkdir(parents=True, exist_ok=True)
    with building_dir(folder) as tmp:
        tasks_dir = tmp / "data" / "tasks"
        tasks_dir.mkdir(parents=True)
        shutil.copyfile(source, tasks_dir / declaration["data"]["train"])
        over = source.name + (f" (test: {test_source.name})" if test_source is not None else "")
        if test_source is not None:
            shutil.copyfile(test_source, tasks_dir / declaration["data"]["test"])
        text = f"# Declared by `udr init-task {name}` over {over}; see docs/tasks.md.\n"
        write_text_atomic(tasks_dir / f"{name}.yaml", text + yaml.safe_dump({name: declaration}, sort_keys=False))
        raw = workspace_params(project_raw, settings.root, folder, name, request.caps)
        settings_from_mapping(raw, root=tmp)  # a params file that loads, before anything is in place
        header = f"# The workspace of task {name} (`udr init-task`), from {settings.params_file}.\n"
        write_text_atomic(tmp / "params.yaml", header + yaml.safe_dump(raw, sort_keys=False))
        (tmp / "models").mkdir()
        for model in LINKED_MODELS:
            (tmp / "models" / model).symlink_to(
                workspace_path(Path("models") / model, settings.root, folder / "models")
            )
        for file_name, text in extra_files.items():
            write_text_atomic(tmp / file_name, text)
    params, declared = folder / "params.yaml", folder / "data" / "tasks" / f"{name}.yaml"
    return Workspace(folder, params, declared, declaration["input"], declaration["label"], *counts)


def _declared(settings: Settings, request: WorkspaceRequest, folder: Path) -> tuple[dict, tuple]:
    """The task's declaration and (rows, labels, test rows or None) of its file(s), every row read as `udr
    prepare` reads it (:func:`udr.data.sources.normalize_rows`): a bad row is a one-line error naming its
    file and line, before anything is written."""
    from udr.data.declarations import parse_declarations
    from udr.data.sources import normalize_rows, read_records

    name, source, test_source = request.name, request.source, request.test
    records = read_records(source, name)
    if not records:
        raise UdrError(f"task {name}: data file {source} has no rows")
    columns = [str(c) for c in records[0][1]]
    input_column = _pick(columns, request.input_column, INPUT_COLUMNS, "--input", source)
    label_column = _pick(columns, request.label_column, LABEL_COLUMNS, "--label", source)
    if input_column == label_column:
        raise UdrError(f"--input and --label are both column '{input_column}': the label must be another column")
    if test_source is not None and _same_file(source, test_source):
        raise UdrError(
            f"--test {test_source} holds the rows of --from {source}: a test file must be rows apart "
            "(leave --test out to carve test rows from --from)"
        )
    declaration = _declaration(request, input_column, label_column)
    task = parse_declarations({name: declaration}, folder / "data" / "tasks", f"{name}.yaml")[name]
    rows = normalize_rows(task, records, str(source))
    labels = {e.target for e in rows.examples}
    if len(labels) < 2:
        raise UdrError(
            f"--label: column '{label_column}' of {source} holds {len(labels)} value: a task needs 2 or more"
        )
    test_rows = _test_rows(task, test_source, labels) if test_source is not None else None
    check_rows(rows, input_column, request.caps, test_rows is not None, settings.prepare.test_fraction, source)
    return declaration, (len(rows), len(labels), len(test_rows) if test_rows is not None else None)


def _declaration(request: WorkspaceRequest, input_column: str, label_column: str) -> dict:
    """The declaration of the classification task `request` asks for, over the columns chosen."""
    files = {"train": f"{request.name}{request.source.suffix.lower()}"}
    if request.test is not None:
        files["test"] = f"{request.name}-test{request.test.suffix.lower()}"
    return {
        "kind": "classification",
        "instruction": request.instruction or f"{label_column.replace('_', ' ').capitalize()} of the text: ",
        "data": files,
        "input": input_column,
        "label": label_column,
        **({"metric": request.metric} if request.metric else {}),
    }


def check_rows(rows, input_column: str, caps: dict, test_given: bool, test_fraction: float, source) -> None:
    """A one-line UdrError, before anything is written, where the rows (normalised) of `source` cannot make a
    task with the caps `caps` (validation): one distinct input, or validation rows that leave fewer than 2
    train rows (as `udr prepare` would find after the workspace is written)."""
    from udr.data.sources import carved_test_rows

    inputs = {e.input for e in rows.examples}
    if len(inputs) < 2:
        raise UdrError(
            f"--input: column '{input_column}' of {source} holds {len(inputs)} distinct value: need 2 or more"
        )
    n = len(rows)
    train = n if test_given else n - carved_test_rows(n, test_fraction)
    validation = caps.get("validation") or 0
    if train - validation < 2:
        raise UdrError(
            f"--validation {validation}: {source} has {train} train rows, which leaves fewer than 2 for the "
            f"pool; give --validation {max(train - 2, 0)} or less, or more rows"
        )


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file, or two files of the same bytes."""
    from udr.util.files import file_sha256

    a, b = Path(a), Path(b)
    if a.resolve() == b.resolve():
        return True
    try:
        return a.stat().st_size == b.stat().st_size and file_sha256(a) == file_sha256(b)
    except OSError:
        return False


def _test_rows(task, path: Path, labels: set[str]):
    """The rows of the test file `path`, read as the task reads the main file's (its input and label
    columns, every row checked), with no label the main file lacks (the task answers with its labels)."""
    from udr.data.sources import normalize_rows, read_records

    records = read_records(path, task.name)
    if not records:
        raise UdrError(f"--test: data file {path} has no rows")
    columns = [str(c) for c in records[0][1]]
    for field, column in task.normalize.columns:
        if column not in columns:
            raise UdrError(f"--test: no column '{column}' (--{field}) in {path} (its columns: {listed(columns)})")
    rows = normalize_rows(task, records, str(path))
    unseen = sorted({e.target for e in rows.examples} - labels)
    if unseen:
        raise UdrError(
            f"--test: label(s) {listed(map(repr, unseen))} of {path} never occur in "
            f"{task.normalize.label_field!r} of the --from file"
        )
    return rows
