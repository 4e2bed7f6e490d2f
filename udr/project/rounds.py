"""A per-round account of Algorithm 1 from the files the stages wrote: training loss at the start and
end, how many mined candidates were new, the mean LM score of each query's best candidate, and the
seconds each stage took. `udr rounds` prints it; nothing is recomputed.

Imports of polars and udr.util.schemas (pydantic) are inside the functions that use them, to keep the start
of `udr` and of its commands light.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from udr.paths import Paths, round_label
from udr.retriever.record import read_record
from udr.util.readers import read_parquet_checked

if TYPE_CHECKING:
    from udr.config import Settings

M = TypeVar("M")


def _read(path: Path, model: type[M]) -> M | None:
    """A stage's summary or report as `model`, None where there is none; unreadable, a one-line UdrError."""
    from udr.util.schemas import read_model

    return read_model(path, model, "stage summary", "run that stage again") if path.is_file() else None


def retrieved_quality(paths: Paths, round_: int, task: str) -> tuple[float, float] | None:
    """(mean over queries of the best LM score, mean LM score) among the candidates that this round's
    retriever returned (BM25 in round 0, the previous round's bi-encoder after), not the merged list,
    whose best can only rise as lists grow."""
    import polars as pl

    cands, scores = paths.candidates(round_, task), paths.scores(round_, task)
    if not (cands.is_file() and scores.is_file()):
        return None
    pair = {"query_id": "integer", "candidate_id": "integer"}
    retrieved = read_parquet_checked(cands, "candidates", [*pair, "rank"], kinds={**pair, "rank": "integer"})
    retrieved = retrieved.filter(pl.col("rank").is_not_null()).select("query_id", "candidate_id")
    joined = retrieved.join(
        read_parquet_checked(scores, "scores", [*pair, "score"], kinds={**pair, "score": "number"}),
        on=["query_id", "candidate_id"],
        how="inner",
    )
    if joined.is_empty():
        return None
    best = joined.group_by("query_id").agg(pl.col("score").max())["score"].mean()
    return round(float(best), 6), round(float(joined["score"].mean()), 6)


def _own_round(settings: Settings, round_: int) -> bool:
    """Whether round `round_`'s model (and so its training log) was made from this params file; a run
    named with `udr train --out` leaves the pipeline's round models and logs to the params file that made them."""
    record = read_record(settings.paths.round_model(round_))
    return record is None or record.get("params_file") in (None, settings.params_file)


def rounds_table(settings: Settings) -> list[dict]:
    """One row per (round, task) plus a row per round with task='all' (sums / means)."""
    from udr.util.schemas import MineReport, ScoreReport, TrainReport

    paths = settings.paths
    rows = []
    for it in settings.train.rounds:
        summary = paths.train_log(round_label(it)) / "summary.json"
        train = _read(summary, TrainReport) if _own_round(settings, it) else None
        per_task = []
        for task in settings.task_names():
            score = _read(paths.score_report(it, task), ScoreReport) or ScoreReport()
            mine = (_read(paths.mine_report(it, task), MineReport) if it > 0 else None) or MineReport()
            per_task.append(
                {
                    "round": it,
                    "task": task,
                    "pairs": score.pairs,
                    "scored": score.scored,
                    "top1_score_mean": score.top1_score_mean,
                    "retrieved": retrieved_quality(paths, it, task),
                    "mined_new_fraction": mine.new_fraction,
                    "score_seconds": score.seconds,
                    "mine_seconds": mine.seconds,
                }
            )
        rows += per_task

        def total(key, per_task=per_task):
            vals = [r[key] for r in per_task if r[key] is not None]
            return round(sum(vals), 2) if vals else None

        mined = [r["mined_new_fraction"] for r in per_task if r["mined_new_fraction"] is not None]
        rows.append(
            {
                "round": it,
                "task": "all",
                "pairs": total("pairs"),
                "scored": total("scored"),
                "top1_score_mean": None,
                "retrieved": None,
                "mined_new_fraction": round(sum(mined) / len(mined), 4) if mined else None,
                "score_seconds": total("score_seconds"),
                "mine_seconds": total("mine_seconds"),
                "train_loss_start": train and train.loss_start,
                "train_loss_end": train and train.loss_end,
                "train_steps": train and train.steps,
                "train_seconds": train and train.seconds,
            }
        )
    return rows
