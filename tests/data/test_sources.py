"""udr.data.sources: seeded train/test splits and reading a task's source."""

from __future__ import annotations

import numpy as np
import pytest

from udr.data.sources import load_task, seeded_split
from udr.data.tasks import get_task
from udr.errors import UdrError


def test_seeded_split_same_seed_same_split_different_seed_different():
    a = seeded_split(1000, 0.2, seed=1, task="break")
    b = seeded_split(1000, 0.2, seed=1, task="break")
    c = seeded_split(1000, 0.2, seed=2, task="break")
    d = seeded_split(1000, 0.2, seed=1, task="smcalflow")
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[1], c[1]) and not np.array_equal(a[1], d[1])
    train, test = a
    assert len(test) == 200 and len(train) == 800
    assert set(train).isdisjoint(test) and set(train) | set(test) == set(range(1000))


def test_missing_data_directory(tmp_path):
    with pytest.raises(UdrError, match="data directory not found"):
        load_task(get_task("sst2"), tmp_path / "nowhere", seed=42, test_fraction=0.2)


def test_jsonl_with_invalid_utf8_names_file_and_line(tmp_path):
    """Data files, --pool and --input files all go through read_jsonl."""
    from udr.data.sources import read_jsonl

    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(UdrError, match=r"rows.jsonl:2: malformed row: not valid UTF-8"):
        read_jsonl(path)


def test_a_deeply_nested_jsonl_row_is_one_line(tmp_path):
    """Data files, --pool and --input lines nested 100,000 deep: a one-line error, not a RecursionError."""
    from udr.data.sources import read_jsonl

    path = tmp_path / "rows.jsonl"
    path.write_text('{"text": "ok"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(UdrError, match=r"rows.jsonl:2: malformed row: invalid JSON \(nested too deeply\)"):
        read_jsonl(path)
