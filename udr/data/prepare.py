"""Prepared data: seeded caps on a task's splits, and the prepared-data files (written by the
`udr prepare` stage, :mod:`udr.stages.prepare`).

Layout (:class:`udr.paths.Paths`): `data/prepared/<task>/{train,test}.parquet` and `meta.json`, with
the columns id (stable, see :mod:`udr.data.sources`), input, target, label (index into choices, -1
for generation), choices and references.

Imports of polars are inside the functions that use them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from udr.data.sources import Rows, distinct_rows, load_task
from udr.data.tasks import Task
from udr.errors import UdrError
from udr.paths import Paths
from udr.util.files import building_dir, json_text
from udr.util.readers import read_parquet_checked
from udr.util.rng import task_rng


def seeded_cap(n: int, cap: int, seed: int, task: str, split: str) -> np.ndarray:
    """Positions of a seeded sample of at most `cap` of n rows, in their original order.

    The sample is a prefix of one seeded permutation, so a larger cap keeps every row of a smaller one.
    """
    if n <= cap:
        return np.arange(n)
    return np.sort(task_rng(seed, task, f"cap/{split}").permutation(n)[:cap])


PREPARED_COLUMNS = ("id", "input", "target", "label", "choices", "references")
# The columns every prepared row fills, and the kind of each column as it is read back.
PREPARED_TEXT = ("id", "input", "target")
PREPARED_KINDS = {"id": "integer", "input": "text", "target": "text", "label": "integer"}
PREPARED_KINDS |= {"choices": "list", "references": "list"}


def rows_to_frame(rows: Rows):
    import polars as pl

    ex = rows.examples
    return pl.DataFrame(
        {
            "id": rows.ids,
            "input": [e.input for e in ex],
            "target": [e.target for e in ex],
            "label": [e.label for e in ex],
            "choices": [list(e.choices) for e in ex],
            "references": [list(e.references) for e in ex],
        },
        schema={
            "id": pl.Int64,
            "input": pl.String,
            "target": pl.String,
            "label": pl.Int32,
            "choices": pl.List(pl.String),
            "references": pl.List(pl.String),
        },
    )


def carve_validation(rows: Rows, n: int, seed: int, task: str) -> tuple[Rows, Rows]:
    """(rest, validation): a seeded sample of n rows set aside for choosing settings, in source order.
    Validation rows leave the train split entirely: never scored, never in the demonstration pool, so a
    validation query cannot retrieve itself."""
    if len(rows) - n < 2:
        raise UdrError(f"task {task}: {len(rows)} train rows leave fewer than 2 after {n} for validation")
    chosen = np.sort(task_rng(seed, task, "validation").permutation(len(rows))[:n])
    rest = np.setdiff1d(np.arange(len(rows)), chosen)
    return rows.take(rest), rows.take(chosen)


def prepare_task(
    task: Task,
    data_dir: Path,
    out_dir: Path,
    *,
    seed: int,
    test_fraction: float,
    max_train: int,
    max_test: int,
    validation: int = 0,
) -> dict:
    """Write `out_dir/{train,test}.parquet` (+ `validation.parquet` when `validation` > 0, carved from
    train before its cap) and `meta.json` atomically; return the metadata."""
    loaded = load_task(task, data_dir, seed, test_fraction)
    caps = {"train": max_train, "test": max_test}
    splits = [("train", loaded.train), ("test", loaded.test)]
    frames, counts = {}, {}
    if validation:
        train, held_out = carve_validation(loaded.train, validation, seed, task.name)
        splits[0] = ("train", train)
        frames["validation"] = rows_to_frame(held_out)
        counts["validation"] = {"available": len(loaded.train), "kept": len(held_out), "cap": validation}
    for split, rows in splits:
        if len(rows) == 0:
            raise UdrError(f"task {task.name}: the {split} split is empty")
        available = len(rows)
        if split == "train":  # the demonstration pool: identical demonstrations once
            rows = distinct_rows(rows)
        kept = rows.take(seeded_cap(len(rows), caps[split], seed, task.name, split))
        frames[split] = rows_to_frame(kept)
        counts[split] = {"available": available, "kept": len(kept), "cap": caps[split]}
        if split == "train":
            counts[split]["repeats_dropped"] = available - len(rows)
    meta = {
        "task": task.name,
        # Everything later stages use of the task's declaration, so that a changed declaration
        # changes this file and DVC re-runs what depends on it.
        "kind": task.kind,
        "family": task.family,
        "metric": task.metric,
        "instruction": task.instruction,
        "template": task.template,
        "seed": seed,
        "counts": counts,
        "cap_method": "first `cap` of numpy default_rng([seed, sha256(task/'cap/<split>')]).permutation, "
        "kept in source order",
        **loaded.provenance,
    }
    with building_dir(out_dir, ("meta.json",), "a prepared task") as tmp:
        for split, frame in frames.items():
            frame.write_parquet(tmp / f"{split}.parquet")
        (tmp / "meta.json").write_text(json_text(meta))
    return meta


def pool_cut_note(meta: dict, cap_option: str) -> str | None:
    """One line where `prepare_task` (its `meta`) cut the pool to its cap, naming `cap_option` (how the user
    raises it); None where the pool kept every distinct train row."""
    train = meta["counts"]["train"]
    distinct = train["available"] - train.get("repeats_dropped", 0)
    if train["kept"] >= distinct:
        return None
    return (
        f"{meta['task']}: the pool keeps a seeded {train['kept']} of its {distinct} train rows ({cap_option} "
        f"{train['cap']}); raise {cap_option} to keep them all"
    )


def read_prepared(root: Path, task: str, split: str):
    """The prepared split as a polars DataFrame, or a one-line UdrError naming the file (missing, truncated,
    a column missing or of another kind, a null id, input or target) and saying to run `udr prepare`."""
    path = Paths(Path(root)).prepared(task, split)
    if not path.is_file():
        raise UdrError(f"missing prepared data {path}: run `udr prepare --task {task}` first")
    again = f"run `udr prepare --task {task}` again"
    return read_parquet_checked(
        path, "prepared data", PREPARED_COLUMNS, kinds=PREPARED_KINDS, non_null=PREPARED_TEXT, fix=again
    )
