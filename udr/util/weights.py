"""Loading saved transformers weights with a one-line error for a damaged or missing file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from udr.errors import UdrError, first_line

T = TypeVar("T")


def load_weights(load: Callable[[], T], path: Path, rebuild: str) -> T:
    """`load()` (a `from_pretrained` call on `path`); a missing or truncated safetensors file, or
    another unreadable file there, becomes a UdrError naming `path` and the command that rebuilds it."""
    from safetensors import SafetensorError

    try:
        return load()
    except (OSError, ValueError, SafetensorError) as exc:
        raise UdrError(f"unreadable model files in {path} ({first_line(exc, 160)}): {rebuild}") from None
