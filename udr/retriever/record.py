"""A trained model's record: what it was trained on and how, kept in the model folder beside its weights.

``udr_record.json`` holds the method (udr or epr), the round, the params file and project it came from,
the models, candidate, scoring, encoder and training settings, the scored queries per training task, the
steps and losses, and where training started (the base encoder, or the record of the model it
continued). `udr index` adds the pools it indexed. The model card of `udr export` is written from it,
and a run from another params file refuses to replace a recorded model unless told to (:func:`check_replace`).

Imports of udr.util.schemas (pydantic) are inside the functions that use them, to keep the start of `udr` light.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from udr.errors import UdrError, quoted
from udr.retriever.encoder import MADE, SETTINGS_NAME
from udr.util.files import check_dir_target, resolve_target, shown_path, write_json_atomic
from udr.util.locks import holding

RECORD_FILE = "udr_record.json"


def record_path(model_dir: Path) -> Path:
    return Path(model_dir) / RECORD_FILE


def read_record(model_dir: Path) -> dict | None:
    """The record of the model at `model_dir` (its fields of the types :class:`udr.util.schemas.ModelRecord`
    says, else a one-line UdrError naming the file and field), or None where it has none (a base encoder,
    an older model)."""
    from udr.util.schemas import ModelRecord, read_model

    path = record_path(model_dir)
    if not path.is_file():
        return None
    return read_model(path, ModelRecord, "model record").model_dump(exclude_unset=True)


def write_record(model_dir: Path, record: dict) -> None:
    write_json_atomic(record_path(model_dir), record)


def trained_model_record(method: str, round_: int, trained_with: dict, summary, init: Path, base_spec: str) -> dict:
    """The record of a model just trained from `init` (`summary`: its TrainSummary): the method and round,
    `trained_with` (the params file, project and seed, and the models, candidates, score, encoder and train
    settings, as the record keeps them), the scored queries per task, the steps and losses, and where
    training started: the record of the model at `init`, or the base encoder `base_spec`."""
    previous = read_record(init)
    return {
        "method": method,
        "round": round_,
        **trained_with,
        "tasks": dict(summary.queries),
        "steps": summary.steps,
        "loss": {"start": summary.loss_start, "end": summary.loss_end},
        "init": previous if previous is not None else {"base": base_spec},
    }


def check_replace(out: Path, params_file: str, root: Path, replace: bool, option: str = "--out") -> Path:
    """The resolved folder to write (:func:`udr.util.files.check_dir_target`); a one-line error, before
    any work, where `out` is no folder a bi-encoder may replace, or holds a model recorded from another
    params file than `params_file` of the project at `root` (another name, or the same name in another
    project), unless `replace`."""

    out = check_dir_target(Path(out), (SETTINGS_NAME,), MADE, option)
    if replace or not out.is_dir():
        return out
    record = read_record(out)
    if record is None:
        return out
    made, reads = str(record.get("params_file", params_file)), params_file
    project = root
    root = Path(root).resolve()
    # The same project: the one recorded, or the one the model lies in (a project moved since keeps its models).
    # The record names it relative to the model folder (older records: an absolute path).
    recorded = record.get("project")
    recorded = root if recorded is None else (Path(out) / str(recorded)).resolve()
    if recorded != root and not Path(out).resolve().is_relative_to(root):
        made, reads = f"{shown_path(recorded, Path.cwd())}/{made}", f"{shown_path(root, Path.cwd())}/{reads}"
    if made == reads:
        return out
    raise UdrError(
        f"{shown_path(out, project)} holds a model made from {made}, and this run reads {reads}: "
        f"give {option} DIR for a model of its own, or --replace to overwrite it"
    )


@contextlib.contextmanager
def writing_model(
    out: Path, params_file: str, root: Path, replace: bool, option: str = "--out", lock: bool = True
) -> Iterator[Path]:
    """Hold the lock of the model folder `out` (:mod:`udr.util.locks`; not where `lock` is False: the
    torchrun processes that do not write), then check it (:func:`check_replace`); yields the resolved folder."""
    target = resolve_target(Path(out), option)
    with holding(target, "model folder") if lock else contextlib.nullcontext():
        yield check_replace(target, params_file, root, replace, option)


def rebase_project(record: dict, from_dir: Path, to_dir: Path) -> dict:
    """`record` of a model folder copied from `from_dir` to `to_dir`, its project (relative to the model
    folder) named relative to the copy."""
    project = record.get("project")
    if project is None or Path(str(project)).is_absolute():
        return record
    where = (Path(from_dir) / str(project)).resolve()
    return {**record, "project": os.path.relpath(where, Path(to_dir).resolve())}


def trained_tasks(record: dict) -> dict[str, int]:
    """{task: scored queries} of every training round the record holds, the latest round's counts first."""
    out: dict[str, int] = {}
    while isinstance(record, dict) and "tasks" in record:
        tasks = record["tasks"] if record["tasks"] is not None else {}  # null: a record that names none
        if not isinstance(tasks, dict):
            raise UdrError(f"malformed model record: its tasks are {quoted(tasks)}, not {{task: queries}}")
        for task, n in tasks.items():
            out.setdefault(task, n)
        record = record.get("init")
    return out


def rounds(record: dict) -> list[dict]:
    """The training runs behind a model, first to last (each a record without its `init`)."""
    out = []
    while isinstance(record, dict) and "method" in record:
        out.append({k: v for k, v in record.items() if k != "init"})
        record = record.get("init")
    return out[::-1]
