"""Figures: matplotlib's pyplot on its file-only backend (Agg: no display needed), and a figure written as a
PNG beside its path, then renamed over it, and closed.

Imports of matplotlib are inside the functions that use them, to keep the start of `udr` and of its commands
light; matplotlib is in the `pipeline` extra.
"""

from __future__ import annotations

from pathlib import Path

from udr.util.files import write_atomic


def pyplot():
    """matplotlib.pyplot, its backend set to Agg."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path: Path, dpi: int) -> None:
    """Write `fig` to `path` as a PNG of `dpi` (atomically), and close it, written or not."""
    try:
        write_atomic(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))
    finally:
        pyplot().close(fig)
