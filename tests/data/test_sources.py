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


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("rows.csv", b"text,label\nok,a\nnot, quoted,b\n", r"rows.csv:3: malformed row: 3 cells, the header has 2"),
        ("rows.csv", b'text,label\n"two\nlines",a\nx,b,c\n', r"rows.csv:4: malformed row: 3 cells, the header has 2"),
        ("rows.tsv", b"text\tlabel\nok\ta\nok\tb\tc\n", r"rows.tsv:3: malformed row: 3 cells, the header has 2"),
        ("rows.csv", b"text,label\nok,a\ncaf\xe9,b\n", r"rows.csv:3: malformed row: not valid UTF-8 \(byte 4\)"),
    ],
    ids=["extra-cell", "after-a-quoted-newline", "tsv", "latin-1"],
)
def test_a_csv_polars_cannot_read_names_file_and_line(tmp_path, name, data, message):
    """polars' own message names no line: the first offending line is found and named (1-based)."""
    from udr.data.sources import read_records

    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(UdrError, match=message) as refused:
        read_records(path, "t")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("name", ["rows.csv", "rows.tsv", "rows.jsonl"])
@pytest.mark.parametrize(
    ("mark", "encoding", "kind"),
    [
        (b"\xff\xfe", "utf-16-le", "UTF-16 (byte-order mark)"),
        (b"\xfe\xff", "utf-16-be", "UTF-16 (byte-order mark)"),
        (b"", "utf-16-le", "UTF-16 (NUL bytes)"),
        (b"\xff\xfe\x00\x00", "utf-32-le", "UTF-32 (byte-order mark)"),
    ],
    ids=["utf-16-le", "utf-16-be", "utf-16-no-mark", "utf-32-le"],
)
def test_a_utf16_file_is_refused_before_it_is_parsed(tmp_path, name, mark, encoding, kind):
    """An Excel / Windows export in UTF-16 or UTF-32: one line saying so, no NUL byte or garbage in it."""
    from udr.data.sources import read_records

    path = tmp_path / name
    sep = "\t" if name.endswith(".tsv") else ","
    text = '{"text": "ok", "label": "a"}\n' if name.endswith(".jsonl") else f"text{sep}label\nok{sep}a\n"
    path.write_bytes(mark + text.encode(encoding))
    with pytest.raises(UdrError) as refused:
        read_records(path, "t")
    assert str(refused.value) == f"{path}: not UTF-8 text: it looks like {kind}; re-save it as UTF-8"


@pytest.mark.parametrize("name", ["rows.csv", "rows.jsonl"])
def test_a_utf8_byte_order_mark_is_read_as_utf8(tmp_path, name):
    from udr.data.sources import read_records

    text = '{"text": "ok", "label": "a"}\n' if name.endswith(".jsonl") else "text,label\nok,a\n"
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert [r for _, r in read_records(path, "t")] == [{"text": "ok", "label": "a"}]
