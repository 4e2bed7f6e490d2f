"""The feedback curve: saved evaluations of retrievers trained on more and more scored queries, each
against one baseline with its paired bootstrap interval, as a table and a plot.

A point is ``RECIPE:QUERIES=NAME``: the recipe's line on the plot, the scored queries per task it was
trained on (the x axis), and the name of its saved evaluation (a method, or a name given with
``udr evaluate --save-as``). Every point and the baseline must be evaluated on the same split rows.

matplotlib (the `pipeline` extra's) is imported only when a figure is drawn (:mod:`udr.util.figures`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from udr.errors import UdrError, listed
from udr.experiments.tables import markdown_table
from udr.project.saved_evaluations import saved_comparisons, saved_results, saved_tasks
from udr.util.figures import pyplot, save_png
from udr.util.files import check_output_path, write_json_atomic, write_text_atomic

if TYPE_CHECKING:
    from udr.config import Settings

_POINT = re.compile(r"^(?P<recipe>[^:=]+):(?P<queries>\d+)=(?P<name>[^:=\s]+)$")


@dataclass(frozen=True)
class CurvePoint:
    """One retriever on the curve: its recipe, the scored queries per task it learned from, its saved name."""

    recipe: str
    queries: int
    name: str


def parse_points(specs) -> list[CurvePoint]:
    """``RECIPE:QUERIES=NAME`` strings as points; a malformed or repeated one is a UdrError."""
    points = []
    for spec in specs:
        match = _POINT.match(spec.strip())
        if not match or int(match["queries"]) <= 0:
            raise UdrError(f"bad point {spec!r}: expected RECIPE:QUERIES=NAME with QUERIES > 0, e.g. UDR:512=udr512")
        points.append(CurvePoint(match["recipe"].strip(), int(match["queries"]), match["name"]))
    seen = set()
    for p in points:
        if (p.recipe, p.queries) in seen:
            raise UdrError(f"point {p.recipe}:{p.queries} is given twice")
        seen.add((p.recipe, p.queries))
    if not points:
        raise UdrError("no point given: expected RECIPE:QUERIES=NAME ...")
    return points


@dataclass(frozen=True)
class CurveRow:
    """A point's per-task scores and its average minus the baseline's (an Interval)."""

    point: CurvePoint
    scores: dict[str, float]
    versus_baseline: object

    @property
    def average(self) -> float:
        return sum(self.scores.values()) / len(self.scores)


def measure_curve(settings: Settings, points: list[CurvePoint], baseline: str, tasks: list[str], split: str):
    """(baseline's per-task scores, per-task n, [CurveRow]) from the saved results and predictions."""
    results = {
        m: saved_results(settings, m, tasks, split) for m in dict.fromkeys([baseline, *(p.name for p in points)])
    }
    versus = saved_comparisons(settings, [p.name for p in points], baseline, tasks, split)

    def scores(name: str) -> dict[str, float]:
        return {t: results[name][t]["graded"]["score"] for t in tasks}

    ns = {t: results[baseline][t]["n"] for t in tasks}
    return scores(baseline), ns, [CurveRow(p, scores(p.name), versus[p.name][1]) for p in points]


def curve_table(baseline: str, base: dict[str, float], rows: list[CurveRow], ns: dict[str, int]) -> str:
    """Markdown: one row per point (recipe, then queries), the baseline first; the last column is the
    average minus the baseline's with its 95% interval, bold where resolved (clear of 0 by the claim margin)."""
    tasks = list(base)
    header = ["retriever", "scored queries / task", *(f"{t} (n={ns[t]})" for t in tasks), "average", f"− {baseline}"]
    cells = [[baseline, "", *(f"{base[t]:.1f}" for t in tasks), f"{sum(base.values()) / len(tasks):.1f}", ""]]
    for r in sorted(rows, key=lambda r: (r.point.recipe, r.point.queries)):
        cells.append(
            [
                r.point.recipe,
                str(r.point.queries),
                *(f"{r.scores[t]:.1f}" for t in tasks),
                f"{r.average:.1f}",
                r.versus_baseline.markdown(),
            ]
        )
    return markdown_table(header, cells)


def write_curve_plot(baseline: str, base: dict[str, float], rows: list[CurveRow], split: str, path: Path) -> None:
    """The average against scored queries per task (log scale), a line per recipe, each point's bar its
    paired 95% interval against the baseline (drawn around the point), the baseline a dashed line."""
    plt = pyplot()

    recipes = list(dict.fromkeys(r.point.recipe for r in rows))
    fig, ax = plt.subplots(figsize=(6.4 + (2.6 if len(recipes) > 3 else 0), 4.0))
    for i, recipe in enumerate(recipes):
        mine = sorted((r for r in rows if r.point.recipe == recipe), key=lambda r: r.point.queries)
        dodge = 2 ** (0.04 * (i - (len(recipes) - 1) / 2))  # recipes side by side at a shared x
        xs = [r.point.queries * dodge for r in mine]
        ys = [r.average for r in mine]
        below = [r.versus_baseline.difference - r.versus_baseline.low for r in mine]
        above = [r.versus_baseline.high - r.versus_baseline.difference for r in mine]
        ax.errorbar(xs, ys, yerr=[below, above], marker="o", capsize=3, label=recipe)
    ax.axhline(sum(base.values()) / len(base), color="grey", linestyle="--", label=baseline)
    counts = sorted({r.point.queries for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(c) for c in counts])
    ax.set_xlabel("scored queries per task")
    ax.set_ylabel(f"{split} average over {len(base)} tasks")
    ax.set_title(f"bars: paired 95% interval of the difference to {baseline}", fontsize=9)
    ax.grid(alpha=0.3)
    if len(recipes) > 3:  # beside the axes, where it hides no point
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    else:
        ax.legend()
    fig.tight_layout()
    save_png(fig, path, dpi=110)


def run_curve(settings: Settings, specs, baseline: str, tasks: list[str] | None, split: str, out: Path) -> Path:
    """`udr exp curve`: out (Markdown), out.json and out.png from the saved evaluations of the points."""
    if split not in ("test", "validation"):
        raise UdrError(f"bad split {split!r}: expected test or validation")
    for path in (out, out.with_suffix(".json"), out.with_suffix(".png")):
        check_output_path(path, "--out")  # before any work: a folder there is one line, not IsADirectoryError
    points = parse_points(specs)
    names = [baseline, *(p.name for p in points)]
    tasks = list(tasks) if tasks else saved_tasks(settings, names, split)
    if not tasks:
        raise UdrError(f"no task has saved {split} results of all of {listed(names)}: run `udr evaluate` first")
    base, ns, rows = measure_curve(settings, points, baseline, tasks, split)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(
        out, f"# Feedback curve ({split})\n\n" + curve_table(baseline, base, rows, ns).rstrip("\n") + "\n"
    )
    write_json_atomic(
        out.with_suffix(".json"),
        {
            "split": split,
            "baseline": {"name": baseline, "scores": base},
            "points": [
                {
                    "recipe": r.point.recipe,
                    "queries": r.point.queries,
                    "name": r.point.name,
                    "scores": r.scores,
                    "average": r.average,
                    "versus_baseline": r.versus_baseline.to_dict(),
                }
                for r in rows
            ],
        },
    )
    write_curve_plot(baseline, base, rows, split, out.with_suffix(".png"))
    return out
