"""File helpers shared by the stages: content hashes and atomic writes (temp file, then rename)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_atomic(path: Path, write) -> None:
    """Call `write(tmp)` on a temp sibling of `path`, then rename it over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` via a temp file and rename: readers never see half a file."""
    _write_atomic(path, lambda tmp: tmp.write_text(text))


def write_parquet_atomic(frame, path: Path) -> None:
    """Write a polars frame to `path` via a temp file and rename (no half-written file on failure)."""
    _write_atomic(path, frame.write_parquet)
