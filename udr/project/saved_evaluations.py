"""A project's saved evaluations (a method's, or a name given with `udr evaluate --save-as`) read back and
compared: the paired bootstrap of two methods' difference from their saved predictions, per task and on
the average (:mod:`udr.evaluation.bootstrap`). `udr report` compares UDR with each baseline; the `udr
exp` instruments compare saved evaluations.

Imports of numpy, udr.data.prepare and udr.evaluation.bootstrap are inside the functions that use them, to
keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

from collections.abc import Sequence

from udr.errors import UdrError
from udr.evaluation.comparisons import (
    BOOTSTRAP_RESAMPLES,
    COMPARED,
    check_same_metrics,
    checked_result,
    frame_metric,
    read_predictions,
)
from udr.paths import check_name_length
from udr.util.readers import read_json


def prediction_metric(settings, method: str, task: str, examples: list[dict], metric: str, split: str = "test"):
    """The graded score of `method`'s saved predictions on `task`'s `split` as a function of example
    indices (:data:`udr.evaluation.bootstrap.MetricOn`), `examples` being that split's prepared rows."""
    path = settings.paths.predictions(method, task, split)
    if not path.is_file():
        raise UdrError(f"missing predictions {path}: run `udr evaluate --method {method}` first")
    frame = read_predictions(path, f"evaluate {method} on {task} ({split}) again")
    return frame_metric(frame, examples, metric, f"{path}", f"the prepared {split} split of {task}")


def saved_results(settings, name: str, tasks: Sequence[str], split: str = "test") -> dict[str, dict]:
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


def saved_comparisons(settings, names: Sequence[str], b: str, tasks: Sequence[str], split: str = "test"):
    """{a: (per-task Intervals, average Interval) of a - b} for each a in `names`, saved evaluations on
    the same `split` rows: paired bootstrap from their predictions, each read and scored once (b's too,
    however many it meets)."""
    from udr.data.prepare import read_prepared
    from udr.evaluation.bootstrap import PairedTask, paired_bootstrap

    for name in (*names, b):
        check_name_length(name, "name")
    examples = {t: read_prepared(settings.root, t, split).to_dicts() for t in tasks}
    results = {m: saved_results(settings, m, tasks, split) for m in dict.fromkeys([*names, b])}
    check_same_metrics(results, tasks)
    scorers = {
        (m, t): prediction_metric(settings, m, t, examples[t], results[m][t]["metric"], split)
        for m in results
        for t in tasks
    }
    return {
        a: paired_bootstrap(
            [PairedTask(len(examples[t]), scorers[a, t], scorers[b, t]) for t in tasks],
            resamples=BOOTSTRAP_RESAMPLES,
            seed=settings.seed,
        )
        for a in names
    }


def saved_comparison(settings, a: str, b: str, tasks: Sequence[str], split: str = "test"):
    """(per-task Intervals, average Interval) of a - b, two saved evaluations (methods, or names given
    with `udr evaluate --save-as`) on the same `split` rows: paired bootstrap from their predictions."""
    return saved_comparisons(settings, [a], b, tasks, split)[a]


def saved_tasks(settings, names: Sequence[str], split: str = "test") -> list[str]:
    """The tasks in params (or prepared) that every one of `names` has a saved result for on `split`."""
    for name in names:
        check_name_length(name, "name")
    candidates = settings.evaluation_tasks()
    return [t for t in candidates if all(settings.paths.method_metrics(m, t, split).is_file() for m in names)]


def udr_versus_baselines(settings, results: dict[str, dict[str, dict]]) -> dict[str, tuple[dict, object]]:
    """{baseline: ({task: Interval}, Interval of the average)}: UDR's graded score minus the baseline's
    on the same test examples, paired bootstrap (:mod:`udr.evaluation.bootstrap`) from the saved
    predictions. The observed differences are checked against the metrics files."""
    import numpy as np

    from udr.data.prepare import read_prepared
    from udr.evaluation.bootstrap import PairedTask, paired_bootstrap

    tasks = list(results[COMPARED])
    examples = {t: read_prepared(settings.root, t, "test").to_dicts() for t in tasks}
    # Each method's predictions are read and scored once, UDR's included, however many baselines it
    # meets; resamples only sum per-example statistics (corpus BLEU included).
    scorers = {
        (m, t): prediction_metric(settings, m, t, examples[t], results[m][t]["metric"]) for m in results for t in tasks
    }
    out = {}
    for baseline in (m for m in results if m != COMPARED):
        paired = [PairedTask(len(examples[t]), scorers[COMPARED, t], scorers[baseline, t]) for t in tasks]
        per_task, average = paired_bootstrap(paired, resamples=BOOTSTRAP_RESAMPLES, seed=settings.seed)
        for task, interval in zip(tasks, per_task):
            reported = results[COMPARED][task]["graded"]["score"] - results[baseline][task]["graded"]["score"]
            if not np.isclose(interval.difference, reported, atol=1e-6):
                raise UdrError(
                    f"predictions of {task} give {interval.difference:.4f} for udr - {baseline}, the metrics "
                    f"files {reported:.4f}: re-run `udr evaluate`"
                )
        out[baseline] = (dict(zip(tasks, per_task)), average)
    return out
