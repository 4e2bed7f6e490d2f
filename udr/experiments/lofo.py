"""Transfer one family at a time (the paper's Table 5, with power): for each task family in which
demonstrations matter with the project's LM, UDR trained on every other family's tasks and tested on the
held-out family's, against BM25 and SBERT on the same test rows.

Which families are held out is fixed before any test number: those with a task with signal
(:mod:`udr.experiments.signal`, decided on validation); a family none of whose tasks has signal carries no
claim and is not run. Each fold is a DVC experiment, `dvc exp run --queue -n lofo-<family>
-S train.tasks=[the other families' tasks] -S evaluate.tasks=[its tasks with signal] evaluate@udr`, run by
`dvc queue start -j JOBS` (the workspace keeps its models). The table, metrics/lofo.md (and .json), gives
per family and pooled over every held-out row UDR − SBERT and UDR − BM25 with paired 95% intervals, and the
in-domain UDR (HEAD: trained on every task) beside.

Imports of udr.config are inside the functions that use them, to keep the start of `udr` and of its commands
light.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from udr.errors import UdrError
from udr.evaluation.bootstrap import Interval
from udr.evaluation.claims import BOOTSTRAP_RESAMPLES, CLAIM_MARGIN
from udr.experiments.analyses import Experiment, queue_experiments
from udr.experiments.dvc import (
    SavedScorers,
    compare_revisions,
    keep_evaluation,
    method_results,
    method_scores,
    saved_at,
    saved_experiments,
)
from udr.experiments.signal import tasks_with_signal
from udr.experiments.tables import markdown_table
from udr.util.files import write_json_atomic, write_text_atomic

if TYPE_CHECKING:
    from udr.config import Settings

BASELINES = ("bm25", "sbert")
POOLED = "pooled: every held-out row"


def _slug(family: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", family.lower()).strip("-")


def fold_experiment(family: str) -> str:
    """The DVC experiment of the fold that holds `family` out."""
    return f"lofo-{_slug(family)}"


def signal_folds(settings: Settings, root: Path) -> dict[str, list[str]] | None:
    """{family: its trained tasks with signal} for each family held out, in task order; None where the signal
    rule (metrics/signal.json under `root`) has not been run."""
    signal = tasks_with_signal(root, settings.training_tasks())
    if signal is None:
        return None
    folds: dict[str, list[str]] = {}
    for t in signal:
        folds.setdefault(settings.task(t).family, []).append(t)
    return folds


def lofo_folds(settings: Settings, root: Path) -> dict[str, list[str]]:
    """:func:`signal_folds`, a one-line error where the signal rule has not been run."""
    folds = signal_folds(settings, root)
    if folds is None:
        raise UdrError("leave-one-family-out holds out the families with signal: run `udr exp signal` first")
    return folds


def lofo_experiments(settings: Settings, root: Path) -> tuple[Experiment, ...]:
    """One DVC experiment per held-out family: UDR trained on the other families' tasks, evaluated on its own."""
    trained = settings.training_tasks()
    out = []
    for family, held in lofo_folds(settings, root).items():
        others = [t for t in trained if settings.task(t).family != family]
        if not others:
            raise UdrError(f"holding out {family} leaves no task to train on")
        overrides = (
            f"train.tasks=[{','.join(others)}]",
            f"evaluate.tasks=[{','.join(held)}]",
            "evaluate.shots_tasks=[]",
        )
        out.append(Experiment(fold_experiment(family), f"{family} held out", overrides, ("evaluate@udr",)))
    return tuple(out)


def run_lofo(root: Path, *, jobs: int = 1, missing: bool = False, dry: bool = False) -> Path | None:
    """Queue and run the folds (with `missing`, those not saved yet), then write the table (None on a dry run)."""
    from udr.config import load_settings

    settings = load_settings(root / "params.yaml")
    queue_experiments(root, settings, lofo_experiments(settings, root), jobs=jobs, missing=missing, dry=dry)
    if dry:
        return None
    keep_fold_evaluations(root)
    return write_lofo(root)


def kept_name(family: str) -> str:
    """The saved evaluation that keeps the UDR of `family`'s fold at HEAD."""
    return f"udr-lofo-{_slug(family)}"


def keep_fold_evaluations(root: Path) -> list[str]:
    """Keep each fold experiment's UDR evaluation at HEAD as the saved evaluation `udr-lofo-<family>`
    (:func:`udr.experiments.dvc.keep_evaluation`). Returns the names written."""
    from udr.config import load_settings

    saved, written = saved_experiments(root), []
    for family in lofo_folds(load_settings(root / "params.yaml"), root):
        rev = saved.get(fold_experiment(family))
        if rev is not None:
            keep_evaluation(root, rev, "udr", kept_name(family))
            written.append(kept_name(family))
    return written


def lofo_table(root: Path, rev: str = "HEAD", experiments: bool = True) -> dict:
    """Per held-out family (and pooled over the families run) each side's average and UDR − baseline, read
    at git revision `rev`: each fold's UDR kept there, else (with `experiments`) its saved fold experiment's."""
    from udr.config import load_settings

    settings = load_settings(root / "params.yaml")
    folds, saved = lofo_folds(settings, root), saved_experiments(root) if experiments else {}
    run = {}  # family -> (saved evaluation, revision) of its fold's UDR: kept at `rev`, else its experiment's
    for f, tasks in folds.items():
        if saved_at(root, kept_name(f), tasks, rev):
            run[f] = (kept_name(f), rev)
        elif fold_experiment(f) in saved:
            run[f] = ("udr", saved[fold_experiment(f)])
    groups = {f: folds[f] for f in run}
    if len(run) > 1:
        groups[POOLED] = [t for f in run for t in folds[f]]
    rows = {}
    scorers = SavedScorers(root)  # each evaluation's predictions read once for every group
    for group, tasks in groups.items():
        held_out = {t: run[settings.task(t).family] for t in tasks}
        scores = {"UDR, family held out": _average(root, held_out)}
        scores |= {m: _average(root, {t: (m, rev) for t in tasks}) for m in (*BASELINES, "udr")}
        versus = {}
        for b in BASELINES:
            sides = {t: (b, rev) for t in tasks}
            _, iv = compare_revisions(root, {"udr": held_out}, sides, settings.seed, scorers)["udr"]
            versus[b] = iv.to_dict()
        rows[group] = {"tasks": tasks, "n": _rows(root, tasks, rev), "scores": scores, "versus": versus}
    return {"folds": {f: (f"{run[f][0]} at {run[f][1][:12]}" if f in run else None) for f in folds}, "groups": rows}


def _average(root: Path, sides: dict) -> float:
    return statistics.fmean(method_scores(root, m, [t], rev)[t] for t, (m, rev) in sides.items())


def _rows(root: Path, tasks, rev: str) -> int:
    return sum(r["n"] for r in method_results(root, "bm25", tasks, rev).values())


MADE_BY = "`udr exp lofo` (each fold a DVC experiment, `lofo-<family>`)"


def lofo_markdown(table: dict, made_by: str = MADE_BY) -> str:
    header = ["held out", "tasks", "n", "UDR, family held out", "UDR, trained on it (HEAD)", "BM25", "SBERT"]
    header += ["UDR held out − SBERT", "UDR held out − BM25"]
    cells = []
    for group, row in table["groups"].items():
        s, v = row["scores"], row["versus"]
        cells.append(
            [group, ", ".join(row["tasks"]), str(row["n"]), f"{s['UDR, family held out']:.1f}", f"{s['udr']:.1f}"]
            + [f"{s['bm25']:.1f}", f"{s['sbert']:.1f}", Interval.of(v["sbert"]).markdown()]
            + [Interval.of(v["bm25"]).markdown()]
        )
    not_run = [f for f, rev in table["folds"].items() if rev is None]
    return (
        "# Transfer, one family at a time\n\n"
        "Each row: UDR trained on every other family's tasks (`train.tasks`), tested on the held-out family's "
        "tasks with signal (metrics/signal.md), against BM25 and SBERT and the UDR trained on every task, on "
        f"the same test rows. Graded metric in percent, averaged over the family's tasks. Made by {made_by}. "
        "Paired bootstrap 95% intervals "
        f"({BOOTSTRAP_RESAMPLES} resamples, every task resampled at once); **bold** where the unrounded "
        f"interval clears 0 by {CLAIM_MARGIN} points. One training seed.\n\n"
        + markdown_table(header, cells)
        + (f"\nNot run yet: {', '.join(not_run)}.\n" if not_run else "")
    )


def write_lofo(root: Path) -> Path:
    table = lofo_table(root)
    out = Path(root) / "metrics" / "lofo.md"
    write_json_atomic(out.with_suffix(".json"), table)
    write_text_atomic(out, lofo_markdown(table))
    return out
