"""Paired comparisons of evaluations from their predictions: a method's graded score as a function of
resampled test rows, checked to cover them, the check that two evaluations used the same metric, and
the metrics a task's predictions can be compared with (its own; accuracy and macro-F1 where they are
labels, accuracy shown beside any other). A project's saved evaluations are read and compared by
:mod:`udr.project.saved_evaluations`."""

from __future__ import annotations

import math
from collections.abc import Sequence

from udr.errors import UdrError, listed
from udr.evaluation.metrics import GradedStatistics
from udr.util.readers import read_parquet_checked
from udr.util.schemas import EvaluationResult, model_from

# UDR is compared with every other method of config.METHODS.
COMPARED = "udr"
# Kinds of task whose predictions are labels: accuracy and macro-F1 score them whatever the task's metric.
LABEL_KINDS = ("classification", "multiple_choice")
BESIDE = "accuracy"


def read_predictions(path, again: str, data: bytes | None = None):
    """The (id, prediction) frame of a saved evaluation's predictions file (`data`: its bytes, read from
    elsewhere, e.g. a git revision), or a one-line UdrError naming it: truncated, not parquet, a column
    missing or of another kind, a null id or prediction (evaluate writes every one: a damaged row)."""
    kinds = {"id": "integer", "prediction": "text"}
    return read_parquet_checked(
        path, "predictions", list(kinds), kinds=kinds, non_null=list(kinds), fix=again, data=data
    )


def checked_result(result, where: str, again: str) -> dict:
    """`result` (a saved evaluation's metrics file, read from `where`) where it holds what `udr evaluate`
    writes (:class:`udr.util.schemas.EvaluationResult`: kind, metric, n, score, graded score, each of its
    type), else a one-line UdrError naming it and the field."""
    checked = model_from(EvaluationResult, result, where, "result", again, problem="malformed")
    return checked.model_dump(exclude_none=True)  # a field left out is its default (a newer udr's, say)


def check_predictions_give_result(score: float, result: dict, source: str, again: str) -> None:
    """A saved evaluation's predictions (from `source`; `score`: their graded score on every row, in the
    result's metric) must give its result's graded score, else a one-line UdrError: an evaluation killed
    between its two writes leaves new predictions beside the old result, and a comparison would pair
    rows with a score they did not give."""
    reported = result["graded"]["score"]
    if not math.isclose(score, reported, rel_tol=0.0, abs_tol=1e-6):
        raise UdrError(f"{source} give a graded score of {score:.4f}, its result {reported:.4f}: {again}")


def frame_predictions(frame, examples: list[dict], source: str, rows: str) -> list:
    """The predictions in `frame` (columns id, prediction) in the order of `examples`; `source` and `rows`
    name the two in the error when they differ."""
    by_id = dict(zip(frame["id"].to_list(), frame["prediction"].to_list()))
    if set(by_id) != {int(r["id"]) for r in examples}:
        raise UdrError(f"{source} does not cover {rows}: re-run `udr evaluate`")
    return [by_id[int(r["id"])] for r in examples]


def frame_metric(frame, examples: list[dict], metric: str, source: str, rows: str):
    """The graded score of the predictions in `frame` (columns id, prediction) as a function of
    indices into `examples`; `source` and `rows` name the two in the error when they differ."""
    return GradedStatistics(metric, frame_predictions(frame, examples, source, rows), examples).score


def comparable_metrics(kind: str, metric: str) -> tuple[str, ...]:
    """The metrics a task's saved predictions can be compared with: the task's own `metric`, and accuracy
    and macro-F1 where the task's answers are labels (:data:`LABEL_KINDS`)."""
    return tuple(dict.fromkeys((metric, "accuracy", "macro_f1"))) if kind in LABEL_KINDS else (metric,)


def accuracy_beside(kind: str, metric: str) -> bool:
    """Whether accuracy's paired interval is shown beside `metric`, the compared one: a task whose answers
    are labels, compared by another metric (macro-F1)."""
    return kind in LABEL_KINDS and metric != BESIDE


def chosen_metrics(kinds: dict[str, str], own: dict[str, str], metric: str | None) -> dict[str, str]:
    """{task: the metric to compare}: each task's `own` where `metric` is None, else `metric`, which every
    task (`kinds`: {task: kind}) must be able to use; a one-line UdrError names the ones it can use."""
    if metric is None:
        return dict(own)
    first = next(iter(kinds))
    usable = {t: comparable_metrics(kinds[t], own[t]) for t in kinds}
    available = [m for m in usable[first] if all(m in usable[t] for t in kinds)]
    if metric not in available:
        cannot = [t for t in kinds if metric not in usable[t]]
        raise UdrError(
            f"unknown --metric {metric!r} for {listed(cannot)} (available: {listed(available) or 'none'}; "
            "without --metric: each task's own)"
        )
    return {t: metric for t in kinds}


def check_same_metrics(results: dict[str, dict[str, dict]], tasks: Sequence[str]) -> None:
    """A one-line error where two saved evaluations ({name: {task: result}}) scored a task with different
    metrics: their difference would subtract one metric from another."""
    for t in tasks:
        used = {name: (r[t]["metric"], r[t]["graded"].get("name", r[t]["metric"])) for name, r in results.items()}
        if len(set(used.values())) > 1:
            said = ", ".join(f"{name} with {'/'.join(dict.fromkeys(m))}" for name, m in used.items())
            raise UdrError(f"{t} was scored with different metrics ({said}): evaluate them with the same metric")
