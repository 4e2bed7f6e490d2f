"""Loading saved transformers weights with a one-line error for a damaged, missing or crafted file: the
one guarded path every model load goes through; and saving a tokenizer whatever the environment it was
loaded in.

Imports of torch are inside the functions that use them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from udr.errors import UdrError, first_line

T = TypeVar("T")


# The torch seed of every model load: what the files lack is initialised the same way each time.
LOAD_SEED = 0
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
        except (OSError, ValueError, RecursionError):
            continue  # unreadable: the load itself reports it
        if isinstance(config, dict) and config.get("auto_map"):
            raise UdrError(f"model folder {path} asks to run its own code ({name} has an auto_map): refused")


def _out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` says the machine (or the accelerator: torch's OutOfMemoryError) ran out of memory."""
    return isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError"


def load_weights(load: Callable[[], T], path: Path, rebuild: str) -> T:
    """`load()` (a `from_pretrained` call on `path`, after :func:`refuse_remote_code`). Whatever building
    the model from the folder's files raises (a missing or truncated safetensors file; a config.json
    that does not parse, is nested too deep, or holds a wrong type or a zero dimension: ValueError,
    TypeError, KeyError, RecursionError, ZeroDivisionError, ...) becomes a one-line UdrError naming
    `path` and the command that rebuilds it; running out of memory and Ctrl-C are not the files' fault
    and propagate, as does a missing library (ImportError: the environment's fault, not the files').

    The load runs under a fixed torch seed, on a fork of torch's random state: parameters the files lack
    (e.g. a BERT pooler a sentence-transformers export leaves out), which transformers initialises at
    random, start the same on every load, so the weights a training saves are the same bytes run after run;
    the caller's random state is left as it was."""
    import torch

    refuse_remote_code(path)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(LOAD_SEED)
            return load()
    except (UdrError, ImportError):
        raise
    except Exception as exc:
        if _out_of_memory(exc):
            raise
        raise UdrError(f"unreadable model files in {path} ({_reason(exc)}): {rebuild}") from None


# How a tokenizer was loaded, which transformers keeps among its init kwargs and writes into
# tokenizer_config.json: `local_files_only` follows HF_HUB_OFFLINE, the others the caller's cache and token.
LOAD_OPTIONS = ("local_files_only", "cache_dir", "token")


def save_tokenizer(tokenizer: Any, folder: Path) -> None:
    """`tokenizer.save_pretrained(folder)` without :data:`LOAD_OPTIONS`, so that the folder holds the same
    bytes in every environment (a model folder is a DVC output: its hash decides what runs again)."""
    drop_load_options(tokenizer)
    tokenizer.save_pretrained(folder)


def drop_load_options(tokenizer: Any) -> None:
    """Forget how `tokenizer` was loaded (:data:`LOAD_OPTIONS`, e.g. `local_files_only`, which transformers sets
    from HF_HUB_OFFLINE), which its `save_pretrained` would otherwise write into tokenizer_config.json."""
    for option in LOAD_OPTIONS:
        tokenizer.init_kwargs.pop(option, None)


def _reason(exc: BaseException) -> str:
    """An error's first line, after its class name unless it is a file's (OSError) or a value's
    (ValueError) error: a KeyError's message is the bare key."""
    lines = [t.strip() for t in str(exc).splitlines() if t.strip()]
    line = first_line(exc, 160)
    if len(lines) > 1 and line.endswith(":"):  # "Validation error for field 'x':" says what, the next line why
        line = f"{line} {lines[1]}"[:160]
    return line if isinstance(exc, (OSError, ValueError)) else f"{exc.__class__.__name__}: {line}"
