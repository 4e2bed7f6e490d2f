"""results.md, summary.json and headline.md of the suite's test run, from the files run.py copied beside
this: each method's <name>/<task>.json (udr evaluate) and compare-<method>-<group>.json (udr exp compare
--json of the chosen UDR minus that method: paired bootstrap, BOOTSTRAP_RESAMPLES resamples, seed 42, the
average resampling every task at once). Usage: write_results.py [RUN_LOG] (run.py's report step calls write_all);
without a run log, the job times already in results.md are kept."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from run import GROUPS, LABEL, METHODS, UDR

from udr.evaluation.bootstrap import Interval
from udr.evaluation.claims import BOOTSTRAP_RESAMPLES, CLAIM_MARGIN

# The tables' names of the methods: run.py's, but for EPR, which the suite trains once on all 16 tasks at once
# with EPR's loss (the paper's ablation "without list-wise ranking", not its per-task EPR baseline).
LABELS = LABEL | {"epr": "multi-task EPR (EPR's loss: the ablation)"}
TIMES_HEADING = "## Job times (this run's log)"

TITLES = {
    "trained": "the 16 trained tasks",
    "held-out": "three held-out families (subj, cola, commongen)",
    "sibling": "cr, an unseen dataset of a trained family",
}


def read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def load(out: Path, name: str, task: str) -> dict | None:
    """A method's result on a task, None where it was not run."""
    return read(out / name / f"{task}.json")


def comparison(out: Path, method: str, group: str) -> dict | None:
    """The chosen UDR minus `method` on a group's tasks (udr exp compare --json), None where not run."""
    return read(out / f"compare-{method}-{group}.json")


def interval(d: dict) -> str:
    """A compare JSON entry as `+1.2 [-0.3, +2.7]`, bold where resolved."""
    return Interval(d["difference"], d["low"], d["high"]).markdown()


def average(out: Path, name: str, tasks: list[str], key=lambda r: r["graded"]["score"]) -> float | None:
    rows = [load(out, name, t) for t in tasks]
    values = [key(r) for r in rows if r and key(r) is not None]
    return sum(values) / len(values) if rows and all(rows) and values else None


def scores_table(out: Path, tasks: list[str]) -> list[str]:
    ns = {t: next((r["n"] for m in METHODS if (r := load(out, m, t))), "?") for t in tasks}
    lines = [
        "| task | n | " + " | ".join(LABELS[m] for m in METHODS) + " |",
        "| --- | ---: |" + " ---: |" * len(METHODS),
    ]
    for t in tasks:
        cells = [f"{r['graded']['score']:.1f}" if (r := load(out, m, t)) else "not run" for m in METHODS]
        lines.append(f"| {t} | {ns[t]} | " + " | ".join(cells) + " |")
    avgs = [average(out, m, tasks) for m in METHODS]
    lines.append("| **average** | | " + " | ".join(f"{a:.1f}" if a is not None else "" for a in avgs) + " |")
    shares = [average(out, m, tasks, key=lambda r: r.get("label_share")) for m in METHODS]
    if any(s is not None for s in shares):
        cells = [f"{s:.2f}" if s is not None else "" for s in shares]
        lines.append("| label share (classification, multiple choice) | | " + " | ".join(cells) + " |")
    return lines


def diff_table(out: Path, tasks: list[str], group: str) -> list[str]:
    lines = [f"| {LABELS[UDR]} − | " + " | ".join(tasks) + " | average |", "| --- |" + " ---: |" * (len(tasks) + 1)]
    rows = [(b, d) for b in METHODS[1:] if (d := comparison(out, b, group))]
    for b, d in rows:
        lines.append(f"| {LABELS[b]} | " + " | ".join(interval(d[t]) for t in tasks) + f" | {interval(d['average'])} |")
    return lines if rows else ["Not run."]


def headline(out: Path) -> list[str]:
    """The README's table: each group's n, each method's average, and UDR minus each with its interval."""
    lines = ["| | " + " | ".join(TITLES[g] for g in GROUPS) + " |", "| --- |" + " ---: |" * len(GROUPS)]
    ns = []
    for tasks in GROUPS.values():
        rows = [load(out, UDR, t) for t in tasks]
        ns.append(str(sum(r["n"] for r in rows)) if all(rows) else "")
    lines.append("| test examples | " + " | ".join(ns) + " |")
    for m in METHODS:
        cells = [f"{a:.1f}" if (a := average(out, m, tasks)) is not None else "" for tasks in GROUPS.values()]
        lines.append(f"| {LABELS[m]} | " + " | ".join(cells) + " |")
    for b in METHODS[1:]:
        cells = [interval(d["average"]) if (d := comparison(out, b, g)) else "" for g in GROUPS]
        lines.append(f"| UDR − {LABELS[b]} | " + " | ".join(cells) + " |")
    return lines


def timings(run_log: Path | None, results_md: Path) -> list[str]:
    """The job times of RUN_LOG, or (no run log) those of RESULTS_MD's section, kept as they are."""
    if not run_log or not run_log.is_file():
        lines = results_md.read_text().splitlines() if results_md.is_file() else []
        if TIMES_HEADING not in lines:
            return []
        section = lines[lines.index(TIMES_HEADING) + 2 :]
        return section[: next((i for i, x in enumerate(section) if not x.startswith("- ")), len(section))]
    found = re.findall(r"\[(\S+)\] worker \d+: (\S+) done in (\d+) s", run_log.read_text())
    return [f"- {job}: {int(s) / 60:.1f} min (finished {at} UTC)" for at, job, s in found]


def summary(out: Path, recipe: list[str] | None, alpha: float | None) -> dict:
    tasks = [t for ts in GROUPS.values() for t in ts]
    return {
        "recipe": {"overrides": recipe, "interpolation_alpha": alpha},
        "results": {
            m: {
                t: {"graded": r["graded"]["score"], "n": r["n"], "label_share": r.get("label_share")}
                for t in tasks
                if (r := load(out, m, t))
            }
            for m in METHODS
        },
        "averages": {g: {m: average(out, m, ts) for m in METHODS} for g, ts in GROUPS.items()},
        "udr_minus": {b: {g: comparison(out, b, g) for g in GROUPS} for b in METHODS[1:]},
    }


def write_all(out: Path, run_log: Path | None, recipe: list[str] | None, alpha: float | None) -> None:
    rev = (out / "CODE_REV").read_text().strip() if (out / "CODE_REV").is_file() else "?"
    chosen = "not chosen yet" if recipe is None else ", ".join(recipe) or "train.loss paper, train.feedback lm"
    if alpha is not None:
        chosen += f"; query encoder interpolated with its initial weights, alpha {alpha}"
    md = [
        "# The whole offline suite on test",
        "",
        "Generated by `write_results.py` from the files beside it (the run's `udr evaluate` results and",
        "predictions, and `udr exp compare --json`); the protocol and the reading are in `README.md` beside it.",
        "Rerun: `.venv/bin/python metrics/suite/run.py`.",
        "",
        f"udr code: `{rev}`. Recipe: {chosen}. Differences: paired bootstrap over the same test rows",
        f"({BOOTSTRAP_RESAMPLES:,} resamples, seed 42; the average resamples every task at once). **Bold**: the",
        f"unrounded interval clears 0 by {CLAIM_MARGIN} points.",
        "",
    ]
    for group, tasks in GROUPS.items():
        md += [f"## Scores: {TITLES[group]}", "", *scores_table(out, tasks), ""]
        md += [f"## UDR minus each retriever: {TITLES[group]}", "", *diff_table(out, tasks, group), ""]
    missing = [
        f"{LABELS[m]} on {', '.join(t for ts in GROUPS.values() for t in ts if not load(out, m, t))}"
        for m in METHODS
        if any(not load(out, m, t) for ts in GROUPS.values() for t in ts)
    ]
    md += ["## Not run", "", *([f"- {x}" for x in missing] or ["- nothing"]), ""]
    if times := timings(run_log, out / "results.md"):
        md += [TIMES_HEADING, "", *times, ""]
    (out / "results.md").write_text("\n".join(md))
    (out / "summary.json").write_text(json.dumps(summary(out, recipe, alpha), indent=1) + "\n")
    (out / "headline.md").write_text("\n".join(headline(out)) + "\n")


if __name__ == "__main__":
    from run import ALPHA, RECIPE

    here = Path(__file__).parent
    write_all(here, Path(sys.argv[1]) if len(sys.argv) > 1 else None, RECIPE, ALPHA)
