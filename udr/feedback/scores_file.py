"""The scores file, the contract between `udr score` and what reads its output (`udr train`, `udr mine`):
which train queries a params file scores, and a scores file read back verified (its checksum against
its summary, every score finite)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from udr.errors import UdrError, first_line
from udr.paths import summary_file
from udr.util.files import file_sha256
from udr.util.rng import task_rng


def select_queries(train_ids: np.ndarray, n: int, seed: int, task: str) -> np.ndarray:
    """The seeded choice of at most n train query ids (depends on the pool's ids only: the same
    queries every round)."""
    ids = np.sort(np.asarray(train_ids, dtype=np.int64))
    return np.sort(task_rng(seed, task, "score-queries").permutation(ids)[:n])


def scored_queries(settings, task: str, train_ids: np.ndarray) -> np.ndarray:
    """The train queries of `task` that the params score (`udr score`), mine candidates for (`udr
    mine`) and train on (`udr train`): `score.queries_per_task` of them, chosen with `seed`."""
    return select_queries(train_ids, settings.score.queries_per_task, settings.seed, task)


def read_scores(path: Path, round_: int, task: str, columns: list[str] | None = None):
    """The scores file `path` (polars), verified before any reuse or training: it must match the checksum
    its summary records (where the summary has one; older summaries did not), and every score must be
    finite. Anything else is a one-line UdrError saying to score again."""
    import polars as pl

    fix = f"run `udr score --round {round_} --task {task}` again"
    try:
        recorded = json.loads(summary_file(path).read_text()).get("sha256")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if recorded and recorded != file_sha256(path):
        raise UdrError(f"scores {path} changed since `udr score` wrote them (checksum differs from its summary): {fix}")
    try:
        frame = pl.read_parquet(path, columns=columns)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise UdrError(f"unreadable scores {path} ({first_line(exc)}): {fix}") from None
    check_finite(frame, f"scores {path}", fix)
    return frame


def check_finite(frame, what: str, fix: str) -> None:
    """A one-line UdrError where `frame`'s score column holds NaN or an infinity."""
    import polars as pl

    if "score" not in frame.columns:
        return
    bad = frame.filter(~pl.col("score").cast(pl.Float64).is_finite() | pl.col("score").is_null())
    if len(bad):
        raise UdrError(f"{what} hold {len(bad)} NaN or infinite score(s) (first: query {bad['query_id'][0]}): {fix}")
