"""Loading saved transformers weights with a one-line error for a damaged or missing file.

Imports of safetensors are inside the functions that use them, to keep the start of `udr` and of its commands
light.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from udr.errors import UdrError, first_line

T = TypeVar("T")


REMOTE_CODE_FILES = ("config.json", "tokenizer_config.json", "processor_config.json")


def refuse_remote_code(path: Path) -> None:
    """A one-line error for a model folder that asks transformers to run its own Python code (an
    `auto_map` in its configuration): udr never runs code from model folders."""
    path = Path(path)
    if not path.is_dir():
        return
    for name in REMOTE_CODE_FILES:
        file = path / name
        try:
            config = json.loads(file.read_text()) if file.is_file() else {}
        except (OSError, ValueError):
            continue  # unreadable: the load itself reports it
        if isinstance(config, dict) and config.get("auto_map"):
            raise UdrError(f"model folder {path} asks to run its own code ({name} has an auto_map): refused")


def load_weights(load: Callable[[], T], path: Path, rebuild: str) -> T:
    """`load()` (a `from_pretrained` call on `path`, after :func:`refuse_remote_code`); a missing or
    truncated safetensors file, or another unreadable file there, becomes a UdrError naming `path` and
    the command that rebuilds it."""
    from safetensors import SafetensorError

    refuse_remote_code(path)
    try:
        return load()
    except (OSError, ValueError, SafetensorError) as exc:
        raise UdrError(f"unreadable model files in {path} ({first_line(exc, 160)}): {rebuild}") from None
