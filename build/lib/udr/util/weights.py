"""Loading saved transformers weights with a one-line error for a damaged or missing file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from udr.errors import UdrError

T = TypeVar("T")


def load_weights(load: Callable[[], T], path: Path, rebuild: str) -> T:
    """`load()` (a `from_pretrained` call on `path`); a missing or truncated safetensors file, or
    another unreadable file there, becomes a UdrError naming `path` and the command that rebuilds it."""
    from safetensors import SafetensorError

    try:
        return load()
    except (OSError, ValueError, SafetensorError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise UdrError(f"unreadable model files in {path} ({reason[:160]}): {rebuild}") from None
