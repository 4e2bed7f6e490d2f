"""Reading a task's source (mirror files, a user's files, a builder of this package, or the hub) into
normalised rows, with a seeded train/test split where the source has only one file.

Every row keeps a stable integer id: its 0-based position among the records of the source it came from (a
CSV / TSV header and a blank line of JSON lines are no record: the first data row is 0; for merged
multi-reference test rows, the id of the first member), so ids do not change when caps change, and a file's
row has the id its own pool gives it (`udr retrieve --pool`, :mod:`udr.serving.pools`).

Imports of polars and datasets are inside the functions that use them, to keep the start of `udr` and of its
commands light; datasets (the `hub` extra) is needed only for a task read from the Hugging Face Hub.
"""

from __future__ import annotations

import csv
import importlib
import json
import platform
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from udr.data.tasks import (
    BuiltinSource,
    Classification,
    Example,
    FileSource,
    HubSource,
    MirrorSource,
    RowError,
    Task,
    check_builder,
)
from udr.errors import UdrError, first_line, listed
from udr.util.rng import task_rng


@dataclass
class Rows:
    """Normalised examples of one split with their stable ids (parallel lists)."""

    ids: list[int]
    examples: list[Example]

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, positions) -> Rows:
        return Rows([self.ids[i] for i in positions], [self.examples[i] for i in positions])


def distinct_rows(rows: Rows) -> Rows:
    """`rows` without repeats: a row whose (input, target) an earlier row already has is dropped, so a
    demonstration pool never spends two prompt slots on the same text."""
    seen: set[tuple[str, str]] = set()
    keep = []
    for i, e in enumerate(rows.examples):
        if (e.input, e.target) not in seen:
            seen.add((e.input, e.target))
            keep.append(i)
    return rows if len(keep) == len(rows) else rows.take(keep)


def carved_test_rows(n: int, test_fraction: float) -> int:
    """How many of n rows (2 or more) a seeded split sets aside as test rows."""
    return min(n - 1, max(1, round(n * test_fraction)))


def seeded_split(n: int, test_fraction: float, seed: int, task: str) -> tuple[np.ndarray, np.ndarray]:
    """Positions of (train, test) for a seeded random split of n rows; both sorted ascending."""
    if n < 2:
        raise UdrError(f"task {task}: cannot split {n} row(s) into train and test")
    n_test = carved_test_rows(n, test_fraction)
    perm = task_rng(seed, task, "split").permutation(n)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


# Byte-order marks of text that is not UTF-8 (UTF-32's first: UTF-32 LE starts with UTF-16 LE's mark).
NOT_UTF8_MARKS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


def check_utf8_text(path: Path) -> None:
    """A one-line error where the text file `path` is UTF-16 / UTF-32 (:func:`check_utf8_head`)."""
    with path.open("rb") as fh:
        check_utf8_head(fh.read(4096), str(path))


def check_utf8_head(head: bytes, shown: str) -> None:
    """A one-line error naming `shown` where text starting with the bytes `head` is UTF-16 / UTF-32 (a
    byte-order mark, or NUL bytes in its first 4 KB), as Excel and Windows tools save it, rather than UTF-8."""
    kind = next((f"{name} (byte-order mark)" for mark, name in NOT_UTF8_MARKS if head.startswith(mark)), None)
    if kind is None and b"\x00" in head[:4096]:
        kind = "UTF-16 (NUL bytes)"
    if kind is not None:
        raise UdrError(f"{shown}: not UTF-8 text: it looks like {kind}; re-save it as UTF-8")


def _text_lines(lines: Iterable[bytes], shown: str):
    """(0-based line number, text) of each of `lines` (a UTF-8 byte-order mark dropped); a line that is not
    UTF-8 fails with `shown`:line."""
    for lineno, raw in enumerate(lines):
        try:
            yield lineno, raw.decode("utf-8-sig" if lineno == 0 else "utf-8")
        except UnicodeDecodeError as exc:
            raise UdrError(f"{shown}:{lineno + 1}: malformed row: not valid UTF-8 (byte {exc.start + 1})") from None


def read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """(0-based line number, record) for each non-blank line; a bad line fails with file:line."""
    check_utf8_text(path)
    with path.open("rb") as fh:
        return parse_jsonl(fh, str(path))


def parse_jsonl(lines: Iterable[bytes], shown: str) -> list[tuple[int, dict]]:
    """:func:`read_jsonl` of JSON lines read elsewhere (e.g. stdin), named `shown` in its errors."""
    out = []
    for lineno, line in _text_lines(lines, shown):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise UdrError(f"{shown}:{lineno + 1}: malformed row: invalid JSON ({why})") from None
        if not isinstance(record, dict):
            raise UdrError(f"{shown}:{lineno + 1}: malformed row: expected a JSON object")
        out.append((lineno, record))
    return out


FILE_FORMATS = (".jsonl", ".csv", ".tsv", ".parquet")


def read_records(path: Path, task: str) -> list[tuple[int, dict]]:
    """(id, record) of a user's data file by its suffix (see FILE_FORMATS); CSV / TSV cells are text."""
    import polars as pl

    suffix = path.suffix.lower()
    if path.is_dir():
        raise UdrError(f"task {task}: {path} is a folder, not a data file (use {', '.join(FILE_FORMATS)})")
    if suffix not in FILE_FORMATS:
        raise UdrError(f"task {task}: data file {path}: unsupported format '{suffix}' (use {', '.join(FILE_FORMATS)})")
    if not path.is_file():
        raise UdrError(f"task {task}: data file not found: {path}")
    if suffix == ".jsonl":
        return read_jsonl(path)
    separator = "\t" if suffix == ".tsv" else ","
    if suffix != ".parquet":
        check_utf8_text(path)
    try:
        if suffix == ".parquet":
            return list(enumerate(pl.read_parquet(path).to_dicts()))
        frame = pl.read_csv(path, separator=separator, infer_schema=False)
    except (OSError, pl.exceptions.PolarsError) as exc:
        where = None if suffix == ".parquet" else _csv_problem(path, separator)
        raise UdrError(where or f"task {task}: unreadable data file {path} ({first_line(exc)})") from None
    return [(i + 1, row) for i, row in enumerate(frame.to_dicts())]  # line 0 is the header


def _csv_problem(path: Path, separator: str) -> str | None:
    """Where a CSV / TSV file polars cannot read goes wrong, as `file:line: reason` (1-based line): its first
    line that is not UTF-8 (raised), or its first row with more cells than its header; None if neither."""
    with path.open("rb") as fh:
        reader = csv.reader((line for _, line in _text_lines(fh, str(path))), delimiter=separator)
        try:
            width = len(next(reader, []))
            for row in reader:
                if len(row) > width:
                    return (
                        f"{path}:{reader.line_num}: malformed row: {len(row)} cells, the header has {width} "
                        f"(quote a cell that holds {separator!r})"
                    )
        except csv.Error as exc:
            return f"{path}:{reader.line_num}: malformed row: {first_line(exc)}"
    return None


def check_columns(task: Task, records: list[tuple[int, dict]], where: str) -> None:
    """A column the declaration names that the data's first row lacks is a one-line error naming the task,
    the declaration field and the columns there are."""
    columns = getattr(task.normalize, "columns", ())
    if not records or not columns:
        return
    first = records[0][1]
    for field, column in columns:
        if column not in first:
            raise UdrError(
                f"task {task.name}: {field}: unknown column '{column}' in {where} "
                f"(its columns: {', '.join(map(str, first)) or 'none'})"
            )


def _normalize_file(task: Task, path: Path, field: str) -> Rows:
    """A user's data file (declaration field `field`) read and normalised, its columns checked first."""
    records = read_records(path, task.name)
    if not records:
        raise UdrError(f"task {task.name}: {field}: the split is empty (no rows in {path})")
    check_columns(task, records, str(path))
    return normalize_rows(task, records, str(path))


def normalize_rows(task: Task, records: list[tuple[int, dict]], where: str) -> Rows:
    """Apply the task's normaliser to (0-based line, record) pairs; a row's id is its position among
    `records`, and a malformed row fails with `where:line` and the reason."""
    ids, examples = [], []
    for position, (lineno, record) in enumerate(records):
        try:
            examples.append(task.normalize(record))
        except RowError as exc:
            raise UdrError(f"{where}:{lineno + 1}: malformed row for task {task.name}: {exc}") from None
        ids.append(position)
    return Rows(ids, examples)


def group_references(rows: Rows) -> Rows:
    """Merge rows with identical input into one multi-reference example (first id kept)."""
    first: dict[str, int] = {}
    refs: dict[str, list[str]] = {}
    for rid, ex in zip(rows.ids, rows.examples):
        if ex.input not in first:
            first[ex.input] = rid
            refs[ex.input] = []
        refs[ex.input].extend(r for r in ex.references if r not in refs[ex.input])
    ids, examples = [], []
    for text, rid in first.items():
        r = tuple(refs[text])
        ids.append(rid)
        examples.append(Example(input=text, target=r[0], label=-1, choices=(), references=r))
    return Rows(ids, examples)


def _mirror_file(data_dir: Path, source: MirrorSource, split_file: str) -> Path:
    if not data_dir.is_dir():
        raise UdrError(f"data directory not found: {data_dir} (set data.source_dir in params.yaml or $UDR_DATA_DIR)")
    path = data_dir / source.folder / f"{split_file}.jsonl"
    if not path.is_file():
        raise UdrError(f"missing data file {path} for task source {source.describe()}")
    return path


def mirror_available(data_dir: Path, source: MirrorSource) -> bool:
    return all((data_dir / source.folder / f"{f}.jsonl").is_file() for f in (source.train, source.test) if f)


def _load_hub(task: Task, source: HubSource) -> dict[str, list[tuple[int, dict]]]:
    """Rows of the upstream hub dataset (online users only)."""
    try:
        import datasets  # optional: not a dependency of the default install
    except ImportError:
        raise UdrError(f"task {task.name} reads {source.hub_id} from the hub: `pip install datasets` first") from None
    try:
        ds = datasets.load_dataset(source.hub_id)
    except Exception as exc:  # network, auth, missing dataset: all one message
        raise UdrError(
            f"task {task.name}: cannot load {source.hub_id} from the Hugging Face hub "
            f"({exc.__class__.__name__}); are you offline? use a task with local data instead"
        ) from None
    return {split: list(enumerate(ds[name])) for split, name in (("train", source.train), ("test", source.test))}


@dataclass
class LoadedTask:
    train: Rows
    test: Rows
    provenance: dict


def load_task(task: Task, data_dir: Path, seed: int, test_fraction: float) -> LoadedTask:
    """Both splits of a task, normalised, before caps; `provenance` says how splits were made."""
    source = task.source
    if isinstance(source, MirrorSource):
        if source.train and source.test:
            splits = {}
            for split, name in (("train", source.train), ("test", source.test)):
                path = _mirror_file(data_dir, source, name)
                splits[split] = normalize_rows(task, read_jsonl(path), str(path))
            prov = {
                "source": source.describe(),
                "split": "given",
                "files": {
                    "train": f"{source.folder}/{source.train}.jsonl",
                    "test": f"{source.folder}/{source.test}.jsonl",
                },
            }
            train, test = splits["train"], splits["test"]
        else:
            name = source.train or source.test
            path = _mirror_file(data_dir, source, name)
            rows = normalize_rows(task, read_jsonl(path), str(path))
            train, test, prov = _carve(rows, task, seed, test_fraction)
            prov.update(source=source.describe(), files={"all": f"{source.folder}/{name}.jsonl"})
    elif isinstance(source, BuiltinSource):
        module, func = check_builder(source.builder).split(":")
        records = getattr(importlib.import_module(module), func)()
        rows = normalize_rows(task, list(enumerate(records)), f"<{source.builder}>")
        train, test, prov = _carve(rows, task, seed, test_fraction)
        prov.update(source=source.describe(), python_version=platform.python_version(), n_built=len(rows))
    elif isinstance(source, FileSource):
        path = source.path(source.train)
        rows = _normalize_file(task, path, "data.train")
        if source.test:
            train, test = rows, _normalize_file(task, source.path(source.test), "data.test")
            prov = {"split": "given", "files": {"train": source.train, "test": source.test}}
        else:
            train, test, prov = _carve(rows, task, seed, test_fraction)
            prov["files"] = {"all": source.train}
        prov["source"] = source.describe()
    else:
        raw = _load_hub(task, source)
        train = normalize_rows(task, raw["train"], f"{source.hub_id}/train")
        test = normalize_rows(task, raw["test"], f"{source.hub_id}/test")
        prov = {"source": source.describe(), "split": "given"}
    if isinstance(task.normalize, Classification) and not task.normalize.labels:
        train, test = _index_labels(task, train, test)
    if task.group_test_references:
        n_before = len(test)
        test = group_references(test)
        prov["test_grouped_by_input"] = {"rows": n_before, "examples": len(test)}
    return LoadedTask(train, test, prov)


def _carve(rows: Rows, task: Task, seed: int, test_fraction: float) -> tuple[Rows, Rows, dict]:
    tr, te = seeded_split(len(rows), test_fraction, seed, task.name)
    prov = {
        "split": "seeded",
        "method": "numpy default_rng([seed, sha256(task/'split')]) permutation",
        "seed": seed,
        "test_fraction": test_fraction,
    }
    return rows.take(tr), rows.take(te), prov


def _index_labels(task: Task, train: Rows, test: Rows) -> tuple[Rows, Rows]:
    """Classification rows declared without verbalizers carry their raw label (answering as itself):
    index them against the sorted label set of the train split."""
    labels = tuple(sorted({e.target for e in train.examples}))
    if len(labels) < 2:
        raise UdrError(f"task {task.name}: label: the train split has {len(labels)} label(s); need at least 2")
    unseen = sorted({e.target for e in test.examples} - set(labels))
    if unseen:
        raise UdrError(f"task {task.name}: label: test label(s) {listed(map(repr, unseen))} never occur in train")

    def index(rows: Rows) -> Rows:
        examples = [Example(e.input, e.target, labels.index(e.target), labels, e.references) for e in rows.examples]
        return Rows(rows.ids, examples)

    return index(train), index(test)
