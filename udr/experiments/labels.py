"""The label-aware selection table (`udr exp labels`): metrics/labels.md and metrics/labels.json.

It reads what :mod:`udr.workflows.label_sweep` saved: each retriever's validation sweep and the point chosen
there, and the test evaluations of the retrievers with and without labels (random, BM25, SBERT, UDR, and
SBERT / UDR with label-aware selection) on the classification tasks with signal. Per task and on average: each
one's score and label share (the share of its demonstrations carrying the query's gold label), and the paired
bootstrap differences of label-aware selection against UDR and SBERT, bold where resolved.

Imports of udr.project.saved_evaluations are inside the functions that use them, to keep the start of `udr` light.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from udr.experiments.tables import markdown_table
from udr.paths import LABELS_SUFFIX
from udr.util.files import write_json_atomic, write_text_atomic

if TYPE_CHECKING:
    from udr.config import Settings

BASELINES = ("random", "bm25", "sbert", "udr")


def label_tasks(settings: Settings) -> list[str] | None:
    """The tasks label-aware selection is chosen and tested on: the trained classification tasks with signal
    (None where the signal rule has not been run on them)."""
    from udr.experiments.signal import tasks_with_signal

    trained = [t for t in settings.method_tasks("epr") if settings.task(t).kind == "classification"]
    return tasks_with_signal(settings.root, trained)


def labels_file(root: Path) -> Path:
    return Path(root) / "metrics" / "labels.json"


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def _share(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def write_labels(settings: Settings, swept: dict[str, dict], tasks: Sequence[str]) -> Path:
    """metrics/labels.md and .json from `swept` (:func:`udr.workflows.label_sweep.run_label_sweep`'s result)."""
    from udr.project.saved_evaluations import compare_saved, saved_results

    labelled = [f"{m}{LABELS_SUFFIX}" for m, s in swept.items() if s["chosen"]["weight"] or s["chosen"]["per_label"]]
    names = [*BASELINES, *labelled]
    results = {m: saved_results(settings, m, tasks) for m in names}
    pairs = [(a, b) for a in labelled for b in ("udr", "sbert")]
    versus = compare_saved(settings, {m: results[m] for m in names}, pairs)
    rows = []
    for t in tasks:
        row = [t, str(results["udr"][t]["n"])]
        row += [f"{_fmt(results[m][t]['graded']['score'])} ({_share(results[m][t].get('label_share'))})" for m in names]
        rows.append(row)
    averages = {m: sum(results[m][t]["graded"]["score"] for t in tasks) / len(tasks) for m in names}
    rows.append(["**average**", str(sum(results["udr"][t]["n"] for t in tasks))] + [_fmt(averages[m]) for m in names])

    grid_rows = []
    for method, s in swept.items():
        for point, score in s["validation"].items():
            grid_rows.append([method, point, _fmt(score)])
    diffs = []
    for (a, b), v in versus.items():
        avg = v.average
        bold = avg.resolved
        text = f"{avg.difference:+.1f} [{avg.low:+.1f}, {avg.high:+.1f}]"
        diffs.append([f"{a} − {b}", str(sum(results[a][t]["n"] for t in tasks)), f"**{text}**" if bold else text])
        for t, iv in v.per_task.items():
            diffs.append([f"  {t}", str(results[a][t]["n"]), f"{iv.difference:+.1f} [{iv.low:+.1f}, {iv.high:+.1f}]"])

    chosen = "; ".join(
        f"{m}: γ {c['weight']:g}, {c['per_label'] or 'no'} quota, m {c['votes']}"
        for m, c in ((m, s["chosen"]) for m, s in swept.items())
    )
    md = (
        "# Label-aware selection\n\n"
        f"Classification tasks with signal: {', '.join(tasks)}. Settings chosen on validation ({chosen}); "
        "test once. Each cell: the test score (label share: the share of demonstrations carrying the query's "
        "gold label).\n\n"
        + markdown_table(["task", "n", *names], rows)
        + "\nDifferences on test (paired bootstrap over rows, 95% interval; bold where resolved):\n\n"
        + markdown_table(["difference", "n", "on average"], diffs)
        + "\nValidation sweep (mean score over the tasks; the plain retriever is the method's own name):\n\n"
        + markdown_table(["retriever", "point", "validation"], grid_rows)
    )
    out = labels_file(settings.root)
    write_json_atomic(
        out,
        {
            "tasks": list(tasks),
            "swept": swept,
            "test": {m: {t: results[m][t]["graded"]["score"] for t in tasks} for m in names},
            "label_share": {m: {t: results[m][t].get("label_share") for t in tasks} for m in names},
            "differences": {f"{a} − {b}": v.to_dict() for (a, b), v in versus.items()},
        },
    )
    write_text_atomic(out.with_suffix(".md"), md)
    return out.with_suffix(".md")
