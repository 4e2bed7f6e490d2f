"""The `udr candidates` stage: round 0's candidates of a task, every train query's top-K BM25 neighbours
in its own train split (:func:`udr.feedback.bm25.bm25_candidates`), written to
data/candidates/round0/<task>.parquet.

Imports of udr.data.prepare and udr.feedback.bm25 (numpy, pydantic, bm25s) are inside the functions that use them,
to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from udr.util.files import write_parquet_atomic

if TYPE_CHECKING:
    from udr.config import Settings


def run_candidates(settings: Settings, task_name: str, *, progress: bool = True) -> tuple[Path, str]:
    """Write a task's round-0 candidates; returns (the output file, the field BM25 compared)."""
    from udr.data.prepare import read_prepared
    from udr.feedback.bm25 import bm25_candidates, candidate_field

    cfg = settings.candidates
    kind = settings.task(task_name).kind
    frame = bm25_candidates(read_prepared(settings.root, task_name, "train"), kind, cfg.field, cfg.k, progress)
    out = settings.paths.candidates(0, task_name)
    write_parquet_atomic(frame, out)
    return out, candidate_field(kind, cfg.field)
