"""Loading task sources, normalising rows, seeded splits and caps, and prepared-data I/O (polars).

Prepared layout: `data/prepared/<task>/{train,test}.parquet` and `meta.json`. Every row has a
stable integer `id`: its 0-based line number in the source file it came from (for merged
multi-reference test rows, the line of the first member), so ids do not change when caps change.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from udr.data.tasks import BuiltinSource, Example, HubSource, MirrorSource, RowError, Task
from udr.errors import UdrError

SPLITS = ("train", "test")
COLUMNS = ("id", "input", "target", "label", "choices", "references")


@dataclass
class Rows:
    """Normalised examples of one split with their stable ids (parallel lists)."""

    ids: list[int]
    examples: list[Example]

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, positions) -> Rows:
        return Rows([self.ids[i] for i in positions], [self.examples[i] for i in positions])


# ---------------------------------------------------------------- seeding


def task_rng(seed: int, task: str, purpose: str) -> np.random.Generator:
    """A generator that depends on the seed, the task and what it is for (split, cap, ...) only."""
    digest = hashlib.sha256(f"{task}/{purpose}".encode()).digest()
    return np.random.default_rng([seed, int.from_bytes(digest[:8], "little")])


def seeded_split(n: int, test_fraction: float, seed: int, task: str) -> tuple[np.ndarray, np.ndarray]:
    """Positions of (train, test) for a seeded random split of n rows; both sorted ascending."""
    if n < 2:
        raise UdrError(f"task {task}: cannot split {n} row(s) into train and test")
    n_test = min(n - 1, max(1, round(n * test_fraction)))
    perm = task_rng(seed, task, "split").permutation(n)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def seeded_cap(n: int, cap: int, seed: int, task: str, split: str) -> np.ndarray:
    """Positions of a seeded sample of at most `cap` of n rows, in their original order.

    The sample is a prefix of one seeded permutation, so a larger cap keeps every row of a smaller one.
    """
    if n <= cap:
        return np.arange(n)
    return np.sort(task_rng(seed, task, f"cap/{split}").permutation(n)[:cap])


# ---------------------------------------------------------------- reading sources


def read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """(0-based line number, record) for each non-blank line; a bad line fails with file:line."""
    out = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh):
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
        if task.family != "generation":
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


# ---------------------------------------------------------------- writing / reading prepared data


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


def prepare_task(
    task: Task, data_dir: Path, out_dir: Path, *, seed: int, test_fraction: float, max_train: int, max_test: int
) -> dict:
    """Write `out_dir/{train,test}.parquet` + `meta.json` atomically; return the metadata."""
    loaded = load_task(task, data_dir, seed, test_fraction)
    caps = {"train": max_train, "test": max_test}
    frames, counts = {}, {}
    for split, rows in (("train", loaded.train), ("test", loaded.test)):
        if len(rows) == 0:
            raise UdrError(f"task {task.name}: the {split} split is empty")
        kept = rows.take(seeded_cap(len(rows), caps[split], seed, task.name, split))
        frames[split] = rows_to_frame(kept)
        counts[split] = {"available": len(rows), "kept": len(kept), "cap": caps[split]}
    meta = {
        "task": task.name,
        "family": task.family,
        "seed": seed,
        "counts": counts,
        "cap_method": "first `cap` of numpy default_rng([seed, sha256(task/'cap/<split>')]).permutation, "
        "kept in source order",
        **loaded.provenance,
    }
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        for split, frame in frames.items():
            frame.write_parquet(tmp / f"{split}.parquet")
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return meta


def prepared_dir(root: Path, task: str) -> Path:
    return root / "data" / "prepared" / task


def prepared_file(root: Path, task: str, split: str) -> Path:
    return prepared_dir(root, task) / f"{split}.parquet"


def read_prepared(root: Path, task: str, split: str):
    """The prepared split as a polars DataFrame, or a UdrError saying to run `udr prepare`."""
    import polars as pl

    path = prepared_file(root, task, split)
    if not path.is_file():
        raise UdrError(f"missing prepared data {path}: run `udr prepare --task {task}` first")
    return pl.read_parquet(path)
