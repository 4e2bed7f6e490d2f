"""Which tasks carry signal with the project's LM: the rule that decides, before any test number, which tasks
a claim about retrievers may rest on.

A task carries signal when, on its validation split, BM25 or SBERT is resolved above the random retriever
(:attr:`udr.evaluation.bootstrap.Interval.resolved`: the unrounded paired interval clears 0 by the claim
margin). On a task where the choice of demonstrations moves nothing, every retriever is level with random,
and averaging it into a claim only dilutes the claim. `udr exp signal` reads the three saved validation
evaluations (`udr evaluate --split validation -m random|bm25|sbert`) and writes metrics/signal.md and
metrics/signal.json, which the seed table (:mod:`udr.experiments.seeds`) reads.

Imports of udr.project.saved_evaluations and udr.evaluation.bootstrap are inside the functions that use them, to keep
the start of `udr` and of its commands light.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from udr.errors import UdrError
from udr.evaluation.claims import BOOTSTRAP_RESAMPLES, CLAIM_MARGIN
from udr.experiments.tables import markdown_table
from udr.util.files import write_json_atomic, write_text_atomic
from udr.util.readers import read_json

if TYPE_CHECKING:
    from udr.config import Settings

SIGNAL_METHODS = ("random", "bm25", "sbert")
RULE = (
    "a task carries signal when, on its validation split, BM25 or SBERT is resolved above the random retriever "
    f"(paired bootstrap, {BOOTSTRAP_RESAMPLES} resamples; the unrounded interval clears 0 by {CLAIM_MARGIN} points)"
)


def signal_file(root: Path) -> Path:
    return Path(root) / "metrics" / "signal.json"


def measure_signal(settings: Settings, tasks: list[str]) -> dict:
    """{"rule", "tasks": {task: {n, random, bm25, sbert, bm25 − random, sbert − random, signal}}} from the
    saved validation evaluations of random, BM25 and SBERT on `tasks`."""
    from udr.project.saved_evaluations import compare_saved, saved_results

    try:
        results = {m: saved_results(settings, m, tasks, split="validation") for m in SIGNAL_METHODS}
    except UdrError as missing:
        raise UdrError(
            f"{missing}; the signal rule reads random, BM25 and SBERT on validation: "
            "`udr evaluate --split validation -m random` (then bm25, sbert)"
        ) from None
    versus = compare_saved(settings, results, [("bm25", "random"), ("sbert", "random")], split="validation")
    out = {}
    for t in tasks:
        # scores from the predictions the intervals resample, not the result files beside them
        row = {"n": results["random"][t]["n"], "metric": versus["bm25", "random"].metrics[t]}
        row["random"] = versus["bm25", "random"].scores[t][1]
        above = []
        for m in ("bm25", "sbert"):
            row[m], iv = versus[m, "random"].scores[t][0], versus[m, "random"].per_task[t]
            row[f"{m} − random"] = iv.to_dict()
            above.append(iv.resolved and iv.difference > 0)
        row["signal"] = any(above)
        out[t] = row
    return {"rule": RULE, "split": "validation", "tasks": out}


def signal_markdown(signal: dict) -> str:
    from udr.evaluation.bootstrap import Interval

    cells = []
    for t, row in signal["tasks"].items():
        ivs = [Interval.of(row[f"{m} − random"]).markdown() for m in ("bm25", "sbert")]
        scores = [f"{row[m]:.1f}" for m in SIGNAL_METHODS]
        cells.append([t, str(row["n"]), *scores, *ivs, "yes" if row["signal"] else "no"])
    header = ["task", "n", "random", "BM25", "SBERT", "BM25 − random", "SBERT − random", "signal"]
    with_signal = [t for t, row in signal["tasks"].items() if row["signal"]]
    return (
        "# Tasks with signal\n\n"
        f"The rule, fixed before any test number: {signal['rule']}. Graded metric in percent on each task's "
        "validation rows, the same LM, prompts and context for every retriever. Made by `udr exp signal`.\n\n"
        + markdown_table(header, cells)
        + f"\nTasks with signal: {', '.join(with_signal) or 'none'}. The seed table's claims rest on these "
        "(metrics/seeds.md); the others are reported apart.\n"
    )


def write_signal(settings: Settings, tasks: list[str]) -> dict:
    """Measure the signal rule on `tasks` and write metrics/signal.json and metrics/signal.md."""
    signal = measure_signal(settings, tasks)
    write_json_atomic(signal_file(settings.root), signal)
    write_text_atomic(signal_file(settings.root).with_suffix(".md"), signal_markdown(signal))
    return signal


def tasks_with_signal(root: Path, tasks: list[str]) -> list[str] | None:
    """The tasks of `tasks` the committed signal rule (metrics/signal.json) says carry signal; None where the
    rule has not been run, or left one of `tasks` out."""
    path = signal_file(root)
    if not path.is_file():
        return None
    measured = read_json(path, "signal table", "run `udr exp signal` again")["tasks"]
    if not set(tasks) <= set(measured):
        return None
    return [t for t in tasks if measured[t]["signal"]]
