"""`udr exp labels`: label-aware selection's settings chosen on validation, then tested once.

Steps, per retriever (`udr`, `sbert`):
1. sweep: `udr evaluate -m METHOD+labels --split validation` at each point of the grid (γ in `WEIGHTS`, each
   with and without a balanced quota, and the balanced quota alone), each saved as its own validation
   evaluation (`metrics/validation/METHOD-labels-w<γ>-<quota>/`); a point already saved is not run again;
2. choose: the point with the best mean validation score over the tasks, the plain retriever (γ 0, no quota)
   among them; ties go to the earlier point (smaller γ, no quota first);
3. test: `udr evaluate -m METHOD+labels` on test with the chosen settings (`metrics/METHOD+labels/`), which
   the table (:func:`udr.experiments.labels.write_labels`) sets against the retrievers without labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from udr.config import LabelSettings
from udr.errors import UdrError
from udr.paths import LABELS_SUFFIX
from udr.project.saved_evaluations import saved_results
from udr.stages.evaluate import run_evaluate
from udr.util.notice import notice

if TYPE_CHECKING:
    from udr.config import Settings

WEIGHTS = (0.1, 0.3, 1.0, 3.0)
QUOTAS = (None, "balanced")
PLAIN = LabelSettings(weight=0.0, per_label=None)


def grid() -> list[LabelSettings]:
    """The sweep's points, in tie-break order: the plain retriever first, then each γ without and with a
    balanced quota, and the balanced quota alone (γ 0) after the plain retriever."""
    points = [PLAIN, LabelSettings(weight=0.0, per_label="balanced")]
    points += [LabelSettings(weight=w, per_label=q) for w in WEIGHTS for q in QUOTAS]
    return points


def point_name(method: str, point: LabelSettings) -> str:
    """The saved validation evaluation of `method` at `point` (the plain retriever: the method's own)."""
    if point == PLAIN:
        return method
    return f"{method}-labels-w{point.weight:g}-{point.per_label or 'noquota'}"


def with_labels(settings: Settings, point: LabelSettings):
    """`settings` with `evaluate.labels` set to `point`, for every retriever (no retriever's own)."""
    evaluate = settings.evaluate.model_copy(update={"labels": point, "labels_by_method": {}})
    return settings.model_copy(update={"evaluate": evaluate})


def validation_score(settings: Settings, name: str, tasks: Sequence[str]) -> float | None:
    """The mean validation score of the saved evaluation `name` over `tasks`; None where one is missing."""

    try:
        results = saved_results(settings, name, tasks, split="validation")
    except UdrError:
        return None
    return sum(r["graded"]["score"] for r in results.values()) / len(tasks)


def sweep(settings: Settings, method: str, tasks: Sequence[str]) -> dict[str, float]:
    """Steps 1: every point of the grid evaluated on validation (the plain retriever too, if not yet);
    {point name: mean validation score}."""
    scores = {}
    for point in grid():
        name = point_name(method, point)
        if validation_score(settings, name, tasks) is None:
            labelled = point != PLAIN
            run_evaluate(
                with_labels(settings, point),
                f"{method}{LABELS_SUFFIX}" if labelled else method,
                tasks=list(tasks),
                split="validation",
                save_as=name if labelled else None,
            )
        scores[name] = validation_score(settings, name, tasks)
    return scores


def choose(method: str, scores: dict[str, float]) -> LabelSettings:
    """Step 2: the point with the best mean validation score (ties: the earlier point)."""
    points = grid()
    return max(points, key=lambda p: (scores[point_name(method, p)], -points.index(p)))


def run_label_sweep(settings: Settings, methods: Sequence[str], tasks: Sequence[str]) -> dict[str, dict]:
    """Steps 1-3 for each of `methods` on `tasks`: {method: {"validation": {point: score}, "chosen": settings}}.
    Where the plain retriever wins on validation, nothing is tested with labels (said in one line)."""
    out = {}
    for method in methods:
        scores = sweep(settings, method, tasks)
        chosen = choose(method, scores)
        out[method] = {"validation": scores, "chosen": chosen.model_dump()}
        if chosen == PLAIN:
            notice(f"{method}: the plain retriever is best on validation; {method}{LABELS_SUFFIX} is not tested")
            continue
        run_evaluate(with_labels(settings, chosen), f"{method}{LABELS_SUFFIX}", tasks=list(tasks), split="test")
    return out
