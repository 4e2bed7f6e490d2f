"""One guarded reader per format, for every file a user can touch: JSON (any value, or a list of fields
checked against a dataclass), JSON lines, and parquet. Whatever fails to parse or holds the wrong type
is a one-line UdrError "unreadable <what> <path>: <why>[; <fix>]", never a traceback. A JSON object
alone: :func:`udr.util.files.read_json_object`.

Imports of polars and pydantic are inside the functions that use them, to keep the start of `udr` and
of its commands light.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from udr.errors import UdrError, first_line, listed, quoted, shorten

T = TypeVar("T")

_KINDS = {dict: "a JSON object", list: "a JSON array", str: "a JSON string"}


def _tail(fix: str) -> str:
    return f"; {fix}" if fix else ""


def parse_json(text: str | bytes, where: str, what: str, fix: str = "", expect: type | None = None) -> Any:
    """The JSON value of `text` read from `where` (a path, or e.g. `rev:path`); one that does not parse,
    is nested too deep or (with `expect`) is not of that type, a one-line UdrError naming `where`."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise UdrError(f"unreadable {what} {shorten(where, 160)}: {first_line(exc)}{_tail(fix)}") from None
    if expect is not None and not isinstance(data, expect):
        kind = _KINDS.get(expect, expect.__name__)
        raise UdrError(f"unreadable {what} {shorten(where, 160)}: expected {kind}{_tail(fix)}")
    return data


def read_json(path: Path, what: str, fix: str = "", expect: type | None = None) -> Any:
    """The JSON value in `path` (see :func:`parse_json`); an unreadable file, a one-line UdrError."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise UdrError(f"unreadable {what} {shorten(path, 160)}: {first_line(exc)}{_tail(fix)}") from None
    return parse_json(text, str(path), what, fix, expect)


def read_jsonl(path: Path, what: str, fix: str = "") -> list[dict]:
    """The JSON objects of `path`, one a line (blank lines skipped); a line that is not one, a one-line
    UdrError naming the file and the line."""
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise UdrError(f"unreadable {what} {shorten(path, 160)}: {first_line(exc)}{_tail(fix)}") from None
    out = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            out.append(parse_json(line, f"{path}:{number}", what, fix, expect=dict))
    return out


@functools.cache
def _strict_model(cls: type):
    """A pydantic model of the dataclass `cls`'s fields: strict types (no "12" for 12, no string for a
    list), no unknown field."""
    from pydantic import ConfigDict, create_model

    hints = typing.get_type_hints(cls)
    fields = {
        f.name: (hints[f.name], ... if f.default is dataclasses.MISSING else f.default) for f in dataclasses.fields(cls)
    }
    return create_model(f"{cls.__name__}Fields", __config__=ConfigDict(strict=True, extra="forbid"), **fields)


def validation_reason(exc, tags: frozenset[str] = frozenset()) -> str:
    """A pydantic ValidationError's problem in a few words: the field, and what is wrong with it. `tags`:
    the names pydantic puts in a field's place for each member of a union of models; they are left out of
    the field, and of the union's problems the one deepest in the file is told."""
    errors = [{**e, "loc": tuple(p for p in e["loc"] if p not in tags)} for e in exc.errors()]
    told = ("missing", "extra_forbidden")  # of two problems as deep, the value of the wrong type is told
    first = max(errors, key=lambda e: (len(e["loc"]), e["type"] not in told)) if tags else errors[0]
    field = ".".join(str(p) for p in first["loc"]) or "<top level>"
    if first["type"] == "extra_forbidden":
        return f"unknown field {shorten(field, 60)!r}"
    if first["type"] == "missing":
        return f"required field {shorten(field, 60)!r} is missing"
    msg = shorten(first["msg"].removeprefix("Value error, "), 120)
    return f"field {shorten(field, 60)!r}: {msg} (got {quoted(first.get('input'), 40)})"


def dataclass_from(cls: type[T], raw: Any, path: Path, what: str, fix: str = "") -> T:
    """The dataclass `cls` built from the JSON object `raw` read from `path`, each field of its declared
    type (strictly: no coercion), no field missing or unknown; else a one-line UdrError naming the file
    and the field."""
    from pydantic import ValidationError

    try:
        checked = _strict_model(cls).model_validate(raw)
    except ValidationError as exc:
        raise UdrError(f"unreadable {what} {shorten(path, 160)}: {validation_reason(exc)}{_tail(fix)}") from None
    except RecursionError:
        raise UdrError(f"unreadable {what} {shorten(path, 160)}: nested too deeply{_tail(fix)}") from None
    return cls(**{f.name: getattr(checked, f.name) for f in dataclasses.fields(cls)})


# A parquet column's kind, as :func:`read_parquet_checked` checks it.
KINDS = ("text", "integer", "number", "list")


def _is_kind(dtype, kind: str) -> bool:
    import polars as pl

    if kind == "text":
        return dtype == pl.String or dtype == pl.Null
    if kind == "integer":
        return dtype.is_integer() or dtype == pl.Null
    if kind == "number":
        return dtype.is_numeric() or dtype == pl.Null
    if kind == "list":
        return isinstance(dtype, pl.List) or dtype == pl.Null
    raise ValueError(f"unknown kind {kind!r} (expected one of {', '.join(KINDS)})")


def _panic(exc: BaseException) -> bool:
    """Whether `exc` is a panic of polars' Rust code (a BaseException, not an Exception)."""
    return type(exc).__name__ == "PanicException"


def read_parquet_checked(
    path: Path,
    what: str,
    columns: Sequence[str] | None = None,
    *,
    kinds: Mapping[str, str] | None = None,
    non_null: Sequence[str] = (),
    fix: str = "",
    data: bytes | None = None,
):
    """The polars frame of the parquet file `path` (its `columns` only, where given), or a one-line
    UdrError naming the file: it does not parse (truncated, not parquet), lacks one of `columns`, holds
    a column of another kind than `kinds` says ({column: "text" | "integer" | "number" | "list"}), or a
    null in a column of `non_null` (an item of a list column included). `data`: the file's bytes, read
    from elsewhere (e.g. `git show`); `path` then only names it."""
    import polars as pl

    shown, tail = shorten(path, 160), _tail(fix)
    source = io.BytesIO(data) if data is not None else path
    try:
        schema = pl.read_parquet_schema(source)
        missing = [c for c in columns or () if c not in schema]
        if missing:
            raise UdrError(f"{what} {shown} lacks column {listed(missing)} (has {listed(schema)}){tail}")
        if data is not None:
            source.seek(0)
        frame = pl.read_parquet(source, columns=list(columns) if columns is not None else None)
    except UdrError:
        raise
    except MemoryError:
        raise
    except Exception as exc:  # polars' errors, OSError, ValueError: a file that is not what it says
        raise UdrError(f"unreadable {what} {shown}: {first_line(exc)}{tail}") from None
    except BaseException as exc:
        if not _panic(exc):
            raise
        raise UdrError(f"unreadable {what} {shown}: {first_line(exc)}{tail}") from None
    for column, kind in (kinds or {}).items():
        if column in frame.columns and not _is_kind(frame.schema[column], kind):
            raise UdrError(
                f"malformed {what} {shown}: column {shorten(column, 40)!r} holds {frame.schema[column]}, "
                f"not {kind}{tail}"
            )
    for column in non_null:
        if column not in frame.columns:
            continue
        nulls = frame[column].is_null()
        if isinstance(frame.schema[column], pl.List):
            nulls = nulls | frame[column].list.eval(pl.element().is_null()).list.any().fill_null(False)
        if nulls.any():
            row = int(nulls.arg_true()[0])
            raise UdrError(f"malformed {what} {shown}: row {row + 1} has no {shorten(column, 40)} (null){tail}")
    return frame
