"""Reading a task's source (mirror files, a builder of this package, or the hub) into normalised rows,
with a seeded train/test split where the source has only one file.

Every row keeps a stable integer id: its 0-based line number in the source file it came from (for
merged multi-reference test rows, the line of the first member), so ids do not change when caps change.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from udr.data.tasks import BuiltinSource, Example, HubSource, MirrorSource, RowError, Task
from udr.errors import UdrError
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


def seeded_split(n: int, test_fraction: float, seed: int, task: str) -> tuple[np.ndarray, np.ndarray]:
    """Positions of (train, test) for a seeded random split of n rows; both sorted ascending."""
    if n < 2:
        raise UdrError(f"task {task}: cannot split {n} row(s) into train and test")
    n_test = min(n - 1, max(1, round(n * test_fraction)))
    perm = task_rng(seed, task, "split").permutation(n)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """(0-based line number, record) for each non-blank line; a bad line fails with file:line."""
    out = []
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise UdrError(f"{path}:{lineno + 1}: malformed row: not valid UTF-8 (byte {exc.start + 1})") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UdrError(f"{path}:{lineno + 1}: malformed row: invalid JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise UdrError(f"{path}:{lineno + 1}: malformed row: expected a JSON object")
            out.append((lineno, record))
    return out


def normalize_rows(task: Task, records: list[tuple[int, dict]], where: str) -> Rows:
    """Apply the task's normaliser; a malformed row fails with `where:line` and the reason."""
    ids, examples = [], []
    for lineno, record in records:
        try:
            examples.append(task.normalize(record))
        except RowError as exc:
            raise UdrError(f"{where}:{lineno + 1}: malformed row for task {task.name}: {exc}") from None
        ids.append(lineno)
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
        module, func = source.builder.split(":")
        records = getattr(importlib.import_module(module), func)()
        rows = normalize_rows(task, list(enumerate(records)), f"<{source.builder}>")
        train, test, prov = _carve(rows, task, seed, test_fraction)
        import platform

        prov.update(source=source.describe(), python_version=platform.python_version(), n_built=len(rows))
    else:
        raw = _load_hub(task, source)
        train = normalize_rows(task, raw["train"], f"{source.hub_id}/train")
        test = normalize_rows(task, raw["test"], f"{source.hub_id}/test")
        if not task.generation:
            train, test = _index_labels(train, test)
        prov = {"source": source.describe(), "split": "given"}
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


def _index_labels(train: Rows, test: Rows) -> tuple[Rows, Rows]:
    """Hub classification rows carry a raw label: index them against the sorted train label set."""
    labels = tuple(sorted({e.target for e in train.examples}))

    def fix(rows: Rows) -> Rows:
        return Rows(
            rows.ids,
            [
                Example(e.input, e.target, labels.index(e.target) if e.target in labels else -1, labels, e.references)
                for e in rows.examples
            ],
        )

    return fix(train), fix(test)
