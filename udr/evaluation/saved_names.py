"""The names of a project's evaluations: each is a folder of metrics/ (and of metrics/validation/ and the
predictions' folders), a method's (config.METHODS) or one a user gave with `udr evaluate --save-as`, and
some folders of metrics/ are neither (:data:`RESERVED_NAMES`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

from udr.config import METHODS
from udr.errors import UdrError
from udr.paths import check_name_length

# Folders of metrics/ (and metrics/validation/) that are not a method's results.
RESERVED_NAMES = frozenset({"validation", "train", "plots", "feedback", "ceiling"})


def check_saved_name(name: str, outputs: Sequence[Path] = ()) -> None:
    """A one-line error, before any work, unless `name` can name a saved evaluation: a plain folder name
    that is not a method's (the pipeline's results are not overwritten), nor another folder of metrics/,
    nor (with `outputs`, the result and predictions files it would write) a file where their folder would
    go (metrics/summary.json)."""
    check_name_length(name, "name")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise UdrError(f"bad name {name!r}: letters, digits, '_', '.' and '-', starting with a letter or digit")
    if name in METHODS or name in RESERVED_NAMES:
        raise UdrError(f"name {name!r} is taken by the pipeline's own results; choose another")
    for output in outputs:
        if output.parent.exists() and not output.parent.is_dir():
            raise UdrError(f"name {name!r} is taken by the file {output.parent}; choose another")


def encoder_saved_name(spec: str, outputs_of: Callable[[str], Sequence[Path]] = lambda name: ()) -> str:
    """The name an encoder's results (`udr evaluate -m encoder:SPEC`) are saved under without --save-as:
    the last part of its folder, hub id or packaged model, checked as :func:`check_saved_name` checks a
    name (`outputs_of`: the files a name would write); one it cannot be is a one-line error asking for
    --save-as."""
    name = Path(spec.removeprefix("hf:").removeprefix("pypi:").rstrip("/\\")).name
    try:
        check_saved_name(name, outputs_of(name))
    except UdrError as exc:
        raise UdrError(f"{exc} (the name of encoder {spec}): name its results with --save-as NAME") from None
    return name
