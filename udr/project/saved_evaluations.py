"""A project's saved evaluations (a method's, or a name given with `udr evaluate --save-as`) read back and
compared: the paired bootstrap of two methods' difference from their saved predictions, per task and on
the average (:mod:`udr.evaluation.bootstrap`), in each task's own metric or one chosen, with accuracy's
beside it where the task's answers are labels and the compared metric is another (macro-F1). `udr report`
compares UDR with each baseline, and in a workspace each named run with every method; `udr exp compare`
and the `udr exp` instruments compare saved evaluations.

Imports of numpy, udr.config, udr.data.prepare, udr.evaluation.bootstrap and udr.evaluation.metrics are inside
the functions that use them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from udr.errors import UdrError
from udr.evaluation.claims import BOOTSTRAP_RESAMPLES
from udr.evaluation.comparisons import (
    BESIDE,
    COMPARED,
    accuracy_beside,
    check_predictions_give_result,
    check_same_metrics,
    checked_result,
    chosen_metrics,
    frame_predictions,
    read_predictions,
)
from udr.paths import check_name_length
from udr.util.notice import notice
from udr.util.readers import read_json

if TYPE_CHECKING:
    from udr.config import Settings


def prediction_metric(
    settings: Settings, method: str, task: str, examples: list[dict], metric: str, split: str = "test"
):
    """The graded score of `method`'s saved predictions on `task`'s `split` as a function of example
    indices (:data:`udr.evaluation.bootstrap.MetricOn`), `examples` being that split's prepared rows."""
    from udr.evaluation.metrics import GradedStatistics

    return GradedStatistics(metric, saved_predictions(settings, method, task, examples, split), examples).score


def saved_predictions(settings: Settings, method: str, task: str, examples: list[dict], split: str = "test") -> list:
    """`method`'s saved predictions of `task`'s `split`, in the order of `examples` (that split's rows)."""
    path = settings.paths.predictions(method, task, split)
    if not path.is_file():
        raise UdrError(f"missing predictions {path}: run `udr evaluate --method {method}` first")
    frame = read_predictions(path, f"evaluate {method} on {task} ({split}) again")
    return frame_predictions(frame, examples, f"{path}", f"the prepared {split} split of {task}")


@dataclass
class Versus:
    """A - B on the same rows: per task and on average in `metrics` ({task: metric}), each side's score
    (`scores`: {task: (A's, B's)}), and accuracy's (`accuracy`: {task: (A's, B's, Interval)}) where
    :func:`udr.evaluation.comparisons.accuracy_beside`."""

    metrics: dict[str, str]
    scores: dict[str, tuple[float, float]]
    per_task: dict
    average: object
    accuracy: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """{"tasks": {task: interval}, "all": interval} and, where shown beside, {"accuracy": {task: interval}}."""
        out = {"tasks": {t: iv.to_dict() for t, iv in self.per_task.items()}, "all": self.average.to_dict()}
        if self.accuracy:
            out["accuracy"] = {t: iv.to_dict() for t, (_, _, iv) in self.accuracy.items()}
        return out


def compare_saved(
    settings: Settings,
    results: dict[str, dict[str, dict]],
    pairs: Sequence[tuple[str, str]],
    split: str = "test",
    metric: str | None = None,
) -> dict[tuple[str, str], Versus]:
    """{(a, b): Versus} for each pair of saved evaluations in `results` ({name: {task: result}}, every
    name with the same tasks), paired bootstrap from their predictions, each read once and checked to give
    its result's graded score. `metric` None: each task's own, which both must have used; else that metric
    (a one-line error where a task cannot use it)."""
    import numpy as np

    from udr.data.prepare import read_prepared
    from udr.evaluation.bootstrap import PairedTask, paired_bootstrap
    from udr.evaluation.metrics import GradedStatistics

    first = next(iter(results.values()))
    tasks = list(first)
    used = {m for pair in pairs for m in pair}
    if metric is None:
        check_same_metrics({m: results[m] for m in used}, tasks)
    kinds = {t: settings.task(t).kind for t in tasks}
    metrics = chosen_metrics(kinds, {t: first[t]["metric"] for t in tasks}, metric)
    beside = [t for t in tasks if accuracy_beside(kinds[t], metrics[t])]
    examples = {t: read_prepared(settings.root, t, split).to_dicts() for t in tasks}
    predictions = {(m, t): saved_predictions(settings, m, t, examples[t], split) for m in used for t in tasks}
    stats: dict = {}

    def scorer(m: str, t: str, chosen: str):
        if (m, t, chosen) not in stats:
            stats[m, t, chosen] = GradedStatistics(chosen, predictions[m, t], examples[t]).score
        return stats[m, t, chosen]

    def bootstrap(a: str, b: str, chosen: dict[str, str]):
        paired = [PairedTask(len(examples[t]), scorer(a, t, chosen[t]), scorer(b, t, chosen[t])) for t in chosen]
        return paired_bootstrap(paired, resamples=BOOTSTRAP_RESAMPLES, seed=settings.seed)

    def whole(m: str, t: str, chosen: str) -> float:
        return scorer(m, t, chosen)(np.arange(len(examples[t])))

    for m in used:
        for t in tasks:
            source = f"the predictions in {settings.paths.predictions(m, t, split)}"
            again = f"evaluate {m} on {t} ({split}) again"
            check_predictions_give_result(whole(m, t, results[m][t]["metric"]), results[m][t], source, again)

    out = {}
    for a, b in pairs:
        per_task, average = bootstrap(a, b, metrics)
        versus = Versus(
            metrics,
            {t: (whole(a, t, metrics[t]), whole(b, t, metrics[t])) for t in tasks},
            dict(zip(tasks, per_task)),
            average,
        )
        if beside:
            accuracy, _ = bootstrap(a, b, {t: BESIDE for t in beside})
            versus.accuracy = {t: (whole(a, t, BESIDE), whole(b, t, BESIDE), iv) for t, iv in zip(beside, accuracy)}
        out[a, b] = versus
    return out


def saved_results(settings: Settings, name: str, tasks: Sequence[str], split: str = "test") -> dict[str, dict]:
    """{task: result} of a saved evaluation (a method, or a name given with `udr evaluate --save-as`) on
    `split`; a missing one is a UdrError naming it."""
    check_name_length(name, "name")
    out = {}
    for t in tasks:
        path = settings.paths.method_metrics(name, t, split)
        if not path.is_file():
            raise UdrError(f"missing result {path}: evaluate {name} on {t} ({split}) first")
        again = f"evaluate {name} on {t} ({split}) again"
        out[t] = checked_result(read_json(path, "result", again), str(path), again)
    return out


def saved_comparisons(settings: Settings, names: Sequence[str], b: str, tasks: Sequence[str], split: str = "test"):
    """{a: (per-task Intervals, average Interval) of a - b} for each a in `names`, saved evaluations on
    the same `split` rows, in each task's own metric: :func:`compare_saved`'s intervals, each prediction
    file read and scored once (b's too, however many it meets)."""
    for name in (*names, b):
        check_name_length(name, "name")
    results = {m: saved_results(settings, m, tasks, split) for m in dict.fromkeys([*names, b])}
    versus = compare_saved(settings, results, [(a, b) for a in names], split)
    return {a: (list(versus[a, b].per_task.values()), versus[a, b].average) for a in names}


def saved_comparison(settings: Settings, a: str, b: str, tasks: Sequence[str], split: str = "test"):
    """(per-task Intervals, average Interval) of a - b, two saved evaluations (methods, or names given
    with `udr evaluate --save-as`) on the same `split` rows: paired bootstrap from their predictions."""
    return saved_comparisons(settings, [a], b, tasks, split)[a]


def saved_tasks(settings: Settings, names: Sequence[str], split: str = "test") -> list[str]:
    """The tasks in params (or prepared) that every one of `names` has a saved result for on `split`."""
    for name in names:
        check_name_length(name, "name")
    candidates = settings.evaluation_tasks()
    return [t for t in candidates if all(settings.paths.method_metrics(m, t, split).is_file() for m in names)]


def udr_versus_baselines(settings: Settings, results: dict[str, dict[str, dict]]) -> dict[str, Versus]:
    """{baseline: Versus}: UDR's graded score minus the baseline's on the same test examples, paired
    bootstrap (:mod:`udr.evaluation.bootstrap`) from the saved predictions (each checked against its
    metrics file), with accuracy's beside a label task's other metric."""
    pairs = [(COMPARED, m) for m in results if m != COMPARED]
    return {baseline: versus for (_, baseline), versus in compare_saved(settings, results, pairs).items()}


def named_runs(settings: Settings, tasks: Sequence[str]) -> dict[str, dict[str, dict]]:
    """{name: {task: test result}} of the runs saved with `udr evaluate --save-as NAME` (each result says
    `saved_as: NAME`) that have a result for every one of `tasks`, by name; one with some of them only is
    left out with a note. None in a DVC project (a dvc.yaml beside the params file), whose report is a
    stage of the pipeline and reads the pipeline's methods alone: named runs are a workspace's."""
    from udr.config import METHODS

    if (settings.root / "dvc.yaml").exists():
        return {}
    folder = settings.paths.method_metrics("x", "x").parent.parent
    out = {}
    for name in sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        paths = {t: settings.paths.method_metrics(name, t) for t in tasks}
        if name in METHODS or not any(path.is_file() for path in paths.values()):
            continue
        again = f"evaluate {name} again (`udr evaluate --save-as {name}`)"
        found = {t: read_json(path, "result", again) for t, path in paths.items() if path.is_file()}
        if not all(isinstance(r, dict) and r.get("saved_as") == name for r in found.values()):
            continue  # a folder of metrics/ that is no named run
        if len(found) < len(paths):
            lacking = [t for t in tasks if t not in found]
            notice(f"named run {name} has no result of {', '.join(lacking)}: left out")
            continue
        out[name] = {t: checked_result(r, str(paths[t]), again) for t, r in found.items()}
    return out
