"""The one channel for notices (something the user should know that is no error): a :class:`UdrNotice`
warning in Python, which filters as any warning; the `udr` command shows each as one line on stderr,
``udr: note: ...`` (:func:`notices_on_stderr`, installed by its entry point), stdout carrying the results.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from pathlib import Path

# The package's folder: a notice is attributed to the first frame outside it (the user's line).
_PACKAGE = str(Path(__file__).resolve().parents[1]) + os.sep


class UdrNotice(UserWarning):
    """A notice from udr: no error, something to know (a slow precision, a file left out, an untrained task).
    Silence them with ``warnings.filterwarnings("ignore", category=UdrNotice)``."""


def notice(message: str, category: type[UdrNotice] = UdrNotice) -> None:
    """Warn `message` (one line) as `category`, from the caller's first frame outside udr, shown each time it
    is called, subject to the warning filters (the caller decides how often it says it)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame = frame.f_back
    # registry=None: no registry of shown warnings, so that a notice is not silenced for its whole process.
    warnings.warn_explicit(
        " ".join(str(message).split()),
        category,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=frame.f_globals.get("__name__"),
        registry=None,
    )


@contextlib.contextmanager
def notices_on_stderr():
    """Show each UdrNotice as one line, ``udr: note: ...``, on stderr; other warnings as Python shows them.
    The warning filters still apply."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, UdrNotice):
            print(f"udr: note: {message}", file=sys.stderr, flush=True)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown
