"""udr.util.readers: one guarded reader per format; whatever a file holds, a failure is one line naming it."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import pytest

from udr.errors import UdrError
from udr.util.readers import dataclass_from, parse_json, read_json, read_jsonl, read_parquet_checked

DEEP = "[" * 100_000 + "]" * 100_000


def _one_line(info) -> str:
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    return message


@pytest.mark.parametrize(
    "text, expect, reason",
    [
        (DEEP, None, "maximum recursion depth"),
        ('{"a": 1', None, "Expecting ',' delimiter"),
        (b'{"a": "\x80"}', None, "codec can.t decode"),
        ("[1]", dict, "expected a JSON object"),
        ("{}", list, "expected a JSON array"),
    ],
)
def test_json_that_does_not_parse_or_is_of_another_type_is_one_line(tmp_path, text, expect, reason):
    path = tmp_path / "x.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(UdrError, match=rf"^unreadable thing {path}: .*{reason}.*; fix it$") as info:
        read_json(path, "thing", "fix it", expect=expect)
    _one_line(info)


def test_json_reads_any_value_and_a_missing_file_is_one_line(tmp_path):
    (tmp_path / "x.json").write_text('[1, {"a": null}]')
    assert read_json(tmp_path / "x.json", "thing") == [1, {"a": None}]
    assert parse_json(b'"s"', "rev:x.json", "thing", expect=str) == "s"
    with pytest.raises(UdrError, match=r"^unreadable thing .*nope.json: .*No such file"):
        read_json(tmp_path / "nope.json", "thing")


def test_json_lines_name_the_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n\n{"b": 2}\n')
    assert read_jsonl(path, "log") == [{"a": 1}, {"b": 2}]
    path.write_text('{"a": 1}\n\n[2]\n')
    with pytest.raises(UdrError, match=rf"^unreadable log {path}:3: expected a JSON object$"):
        read_jsonl(path, "log")


@dataclass
class Record:
    name: str
    ids: list[int]
    extra: dict | None = None


@pytest.mark.parametrize(
    "raw, reason",
    [
        ({"name": "a", "ids": "1,2"}, "field 'ids': Input should be a valid list"),
        ({"name": "a", "ids": [1, "2"]}, "field 'ids.1': Input should be a valid integer"),
        ({"name": 3, "ids": []}, "field 'name': Input should be a valid string"),
        ({"ids": []}, "required field 'name' is missing"),
        ({"name": "a", "ids": [], "other": 1}, "unknown field 'other'"),
    ],
)
def test_a_dataclass_is_built_only_from_fields_of_its_types(tmp_path, raw, reason):
    assert dataclass_from(Record, {"name": "a", "ids": [1]}, tmp_path, "record") == Record("a", [1])
    with pytest.raises(UdrError, match=rf"^unreadable record {tmp_path}: {reason}") as info:
        dataclass_from(Record, raw, tmp_path, "record")
    _one_line(info)


def test_parquet_that_is_truncated_lacks_a_column_or_holds_a_null_is_one_line(tmp_path):
    path = tmp_path / "x.parquet"
    frame = pl.DataFrame({"id": [1, 2], "text": ["a", None], "items": [["x"], ["y", None]]})
    frame.write_parquet(path)
    assert read_parquet_checked(path, "rows", ["id"]).columns == ["id"]
    for kwargs, message in [
        ({"columns": ["id", "gone"]}, r"^rows .*x.parquet lacks column gone \(has id, text, items\)"),
        ({"kinds": {"id": "text"}}, r"^malformed rows .*x.parquet: column 'id' holds Int64, not text"),
        ({"non_null": ["text"]}, r"^malformed rows .*x.parquet: row 2 has no text \(null\)"),
        ({"non_null": ["items"]}, r"^malformed rows .*x.parquet: row 2 has no items \(null\)"),
    ]:
        with pytest.raises(UdrError, match=message) as info:
            read_parquet_checked(path, "rows", **kwargs)
        _one_line(info)
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(UdrError, match=r"^unreadable rows .*x.parquet: .*; again$"):
        read_parquet_checked(path, "rows", fix="again")
    with pytest.raises(UdrError, match=r"^unreadable rows rev:x.parquet: "):
        read_parquet_checked("rev:x.parquet", "rows", data=b"PAR1 not really")
