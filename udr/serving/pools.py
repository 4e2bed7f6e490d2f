"""Demonstration pools: the rows a retriever can return for a task, and the texts E_d reads for them.

A pool is either a pipeline task's prepared train split (``data/prepared/<task>/train.parquet``, or
the copy of it that `udr index` puts in the model folder, ``pools/<task>.parquet``) or a user's own
records, for tasks UDR never saw in training. Own records follow the row shapes
of the task registry (:mod:`udr.data.tasks`): with a registered task named, that task's shape (sst2:
``{"text", "label"}``); without one, the generation shape ``{"input": ..., "target": ...}``.
Pool ids are one convention whatever the route: a record's 0-based position in its source, the list index or
the n-th data row of a file (a CSV or TSV header, or a blank JSON line, is no row). An own pool
(`udr retrieve --pool`, `add_pool`, `from_pool`) numbers its records so, and a pipeline pool (served by task
name, from a model folder or an export) carries the prepared ids, which `udr prepare` numbers the same way
(:mod:`udr.data.sources`): the same file's row has one id by every route.

Imports of polars, udr.config and udr.data.declarations (pydantic) are inside the functions that use them, to keep
`from udr import Retriever` and `udr retrieve` light.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from udr.data.prepare import read_prepared
from udr.data.sources import FILE_FORMATS, distinct_rows, normalize_rows, read_records
from udr.data.tasks import BuiltinSource, Generation, Task, get_task
from udr.errors import UdrError
from udr.paths import Paths
from udr.retriever.index import read_model_declarations
from udr.util.readers import read_parquet_checked

if TYPE_CHECKING:
    from udr.config import Settings

OWN_POOL = "own"


@dataclass(frozen=True)
class Pool:
    """A task's demonstrations: `task` gives the instruction and template, row i is
    (ids[i], inputs[i], outputs[i]); `source` says where it came from (the prepared train file
    when `prepared`). An own pool keeps row i's columns beyond those its task reads in metadata[i]
    (:mod:`udr.serving.filters`); a pipeline pool has none."""

    task: Task
    ids: np.ndarray
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    source: str
    prepared: bool = False
    metadata: tuple[dict, ...] = ()

    @property
    def name(self) -> str:
        return self.task.name

    def __len__(self) -> int:
        return len(self.ids)

    @cached_property
    def positions(self) -> dict[int, int]:
        """Pool id -> row."""
        return {int(pid): row for row, pid in enumerate(self.ids)}

    @cached_property
    def metadata_columns(self) -> list[str]:
        """The metadata columns of any row, in the order they first appear."""
        return list(dict.fromkeys(column for meta in self.metadata for column in meta))


def project_settings(root: Path, params: Path | None = None) -> Settings | None:
    """The settings of the project at `root` (its params file: `params`, default root/params.yaml), or
    None where it has none."""
    from udr.config import load_settings

    params = Path(params) if params is not None else Path(root) / "params.yaml"
    return load_settings(params) if params.is_file() else None


def model_tasks(model_dir: Path) -> dict[str, Task]:
    """The tasks whose pools a model folder carries, as declared when `udr index` wrote them ({} if none)."""
    from udr.data.declarations import parse_declarations

    raw = read_model_declarations(model_dir)
    path = Paths.model_tasks(model_dir)
    return parse_declarations(raw, Path(model_dir), str(path))


def model_pool_tasks(model_dir: Path) -> list[str]:
    """The tasks whose pools a model folder carries."""
    folder = Paths.model_pools(model_dir)
    return sorted(p.stem for p in folder.glob("*.parquet")) if folder.is_dir() else []


# A carried pool's columns and their kinds, none null (what `udr index` writes), as they are read back.
POOL_KINDS = {"id": "integer", "input": "text", "target": "text"}
POOL_CHECKS = {"kinds": POOL_KINDS, "non_null": list(POOL_KINDS), "fix": "run `udr index` again"}


def model_pool(model_dir: Path, task: Task) -> Pool:
    """The pool of `task` that a model folder carries (`udr index` wrote it beside the index)."""
    path = Paths.model_pool(model_dir, task.name)
    return _frame_pool(task, read_parquet_checked(path, "pool", list(POOL_KINDS), **POOL_CHECKS), path)


def _frame_pool(task: Task, frame, path: Path) -> Pool:
    """A pipeline pool from a prepared train frame (id, input, target) read from `path`."""
    return Pool(
        task,
        np.asarray(frame["id"].to_list(), dtype=np.int64),
        tuple(frame["input"].to_list()),
        tuple(frame["target"].to_list()),
        str(path),
        prepared=True,
    )


_READ = object()  # prepared_pool's settings not given: read them


def prepared_pool(root: Path, task_name: str, settings=_READ) -> Pool:
    """The pipeline's pool of a task of the project at `root`: its prepared train split. `settings`: the
    project's (:func:`project_settings`: None without params.yaml), read here when not given."""
    if settings is _READ:
        settings = project_settings(Path(root))
    task = get_task(task_name, None if settings is None else settings.registry)
    path = Paths(Path(root)).prepared(task_name, "train")
    if not path.is_file():
        if settings is None:
            raise UdrError(
                f"task '{task_name}' has no pool here: the model has none for it and {Path(root).resolve()} is "
                "not a udr project (no params.yaml); run from the project, pass -p its params.yaml, "
                "or give your own demonstrations with --pool"
            )
        step = f"run `udr prepare -t {task_name}`"
        if task_name not in settings.prepared_task_names():  # prepare reads params' tasks
            step = f"add `{task_name}: {{}}` under prepare.tasks in params.yaml, then {step}"
        raise UdrError(
            f"task '{task_name}' has no prepared pool at {path}: {step} in the project, "
            "or give your own demonstrations with --pool"
        )
    return _frame_pool(task, read_prepared(Path(root), task_name, "train"), path)


def own_task(
    instruction: str | None,
    like: str | None = None,
    name: str | None = None,
    registry: dict[str, Task] | None = None,
) -> Task:
    """The task an own pool is read as: task `like` of `registry` (default: the built-in tasks; its row
    shape, template and, unless `instruction` is given, its instruction), or the generation shape with
    `instruction`."""
    from udr.serving.api import check_instruction

    check_instruction(instruction)
    if like is not None:
        task = get_task(like, registry)
        return replace(task, name=name or task.name, instruction=instruction or task.instruction)
    if instruction is None:
        raise UdrError(
            "your own pool needs an instruction (the task instruction UDR reads with every "
            'demonstration; e.g. "Summarize the text: ") unless a registered task is named'
        )
    return Task(
        name or OWN_POOL, "generation", "own data", instruction, "bleu", Generation(), BuiltinSource("<own records>")
    )


@dataclass(frozen=True)
class Columns:
    """Which columns of own records hold the input and the target (the label, or the answer): None keeps
    the task's own (the generation shape's `input` and `target`; a registered task's, e.g. sst2's `text`
    and `label`). `udr retrieve --input-column / --target-column`, `add_pool(input_column=, target_column=)`."""

    input: str | None = None
    target: str | None = None

    def __bool__(self) -> bool:
        return self.input is not None or self.target is not None


OPTIONS = {"input": "--input-column", "target": "--target-column"}


def _task_fields(task: Task) -> dict[str, str | None]:
    """The record fields `task` reads its input and its target from ({"input": ..., "target": ...}); None
    where it reads several (an input format over several columns)."""
    norm = task.normalize
    inputs = [column for field, column in getattr(norm, "columns", ()) if field == "input"]
    target = getattr(norm, "target_field", None) or getattr(norm, "label_field", None)
    return {"input": inputs[0] if len(inputs) == 1 else None, "target": target}


def _with_columns(pairs: list[tuple[int, dict]], task: Task, columns: Columns, where: str) -> list[tuple[int, dict]]:
    """`pairs` with the columns `columns` names copied into the fields `task` reads; a column the first
    record lacks is a one-line error naming the columns there are. Without `columns`, the first record
    lacking a field the task reads is that error, with the options that name other columns."""
    fields = _task_fields(task)
    first = pairs[0][1] if pairs else {}
    shown = ", ".join(map(str, first)) or "none"
    if not columns:
        wanted = [c for _, c in getattr(task.normalize, "columns", ())]
        missing = [c for c in wanted if c not in first]
        if pairs and missing:
            raise UdrError(
                f"{where}:{pairs[0][0] + 1}: malformed row for task {task.name}: missing field '{missing[0]}' "
                f"(its columns: {shown}); name your input and target columns with {OPTIONS['input']} and "
                f"{OPTIONS['target']} (Python: input_column=, target_column=)"
            )
        return pairs
    renames = {}
    for side, column in (("input", columns.input), ("target", columns.target)):
        if column is None:
            continue
        if fields[side] is None:
            raise UdrError(
                f"{OPTIONS[side]}: task {task.name} reads its {side} from several columns; rename your file's "
                "columns to its own instead"
            )
        if column not in first:
            raise UdrError(f"{OPTIONS[side]}: no column '{column}' in {where} (its columns: {shown})")
        renames[fields[side]] = column
    out = []
    for line, record in pairs:
        record = dict(record)
        for field, column in renames.items():
            if column in record:
                record[field] = record[column]
            else:  # missing here: the row is malformed, not read from another column of that name
                record.pop(field, None)
        out.append((line, record))
    return out


def records_pool(
    records: Iterable[dict],
    task: Task,
    *,
    where: str = "records",
    numbered: bool = False,
    columns: Columns | None = None,
) -> Pool:
    """A pool of own records read with `task`'s row shape (its input and target read from `columns` where
    given), each distinct (input, output) once. `numbered`: `records` are (line number, record) pairs from
    a file, the line number naming a malformed row; otherwise list items. Either way a row's pool id is its
    0-based position among the records."""
    pairs = list(records) if numbered else list(enumerate(records))
    for lineno, record in pairs:
        if not isinstance(record, dict):
            raise UdrError(
                f"{where}:{lineno + 1}: malformed row: expected an object (dict), got {type(record).__name__}"
            )
    columns = columns or Columns()
    pairs = _with_columns(pairs, task, columns, where)
    rows = distinct_rows(normalize_rows(task, pairs, where))  # ids: positions among the records; a repeat once
    if not rows.examples:
        raise UdrError(f"{where}: no demonstrations (the pool is empty)")
    _check_unicode(rows, pairs, task, where)
    read = _read_columns(task, columns)
    return Pool(
        task,
        np.asarray(rows.ids, dtype=np.int64),
        tuple(e.input for e in rows.examples),
        tuple(e.target for e in rows.examples),
        where,
        metadata=tuple({c: v for c, v in pairs[i][1].items() if c not in read} for i in rows.ids),
    )


def _check_unicode(rows, pairs: list[tuple[int, dict]], task: Task, where: str) -> None:
    """A one-line error naming the first row whose input or output is no valid Unicode (a lone surrogate, e.g. a JSON
    "\\ud800" escape), which no encoder reads; one pass over the whole pool where every row is valid."""
    from udr.serving.api import check_text

    texts = [text for e in rows.examples for text in (e.input, e.target)]
    try:
        "".join(texts).encode("utf-8")
    except UnicodeEncodeError:
        for i, e in zip(rows.ids, rows.examples):
            line = f"{where}:{pairs[i][0] + 1}: malformed row for task {task.name}"
            check_text(e.input, f"{line}: its input")
            check_text(e.target, f"{line}: its output")


def _read_columns(task: Task, columns: Columns) -> set[str]:
    """The record columns `task` reads (with `columns`' renames): the others are a row's metadata."""
    norm = task.normalize
    read = {column for _, column in getattr(norm, "columns", ())} | set(_task_fields(task).values())
    read |= {getattr(norm, "references_field", None), columns.input, columns.target}
    return read - {None}


def checked_pool_file(path: Path | str) -> Path:
    """`path` as a pool file: a one-line error where it is missing, a folder or of a format pools are not read from
    (checked before anything else about the pool, so a mistyped path is the error a user sees first)."""
    path = Path(path)
    if path.is_dir():
        raise UdrError(f"pool {path} is a folder, not a data file (use {', '.join(FILE_FORMATS)})")
    if not path.is_file():
        raise UdrError(f"pool file not found: {path}")
    if path.suffix.lower() not in FILE_FORMATS:
        raise UdrError(f"pool file {path}: unsupported format '{path.suffix}' (use {', '.join(FILE_FORMATS)})")
    return path


def file_pool(path: Path, task: Task, columns: Columns | None = None) -> Pool:
    """A pool from a file of own records in any format task declarations read (.jsonl, .csv, .tsv,
    .parquet; the reader `udr init-task` and declared tasks use); a malformed row fails with file:line."""
    path = checked_pool_file(path)
    return records_pool(read_records(path, task.name), task, where=str(path), numbered=True, columns=columns)
