"""The headline of a run: metrics/headline.json's few flat numbers (what `dvc exp show` compares), and
metrics/headline.md, this run's averages and UDR's differences from each baseline side by side with
committed experiments' (`evaluate.beside`), each column with its LM feedback, its test n and its paired
bootstrap intervals. The README shows headline.md as it is (tests/test_docs.py checks the copy)."""

from __future__ import annotations

from pathlib import Path

from udr.config import METHODS
from udr.errors import UdrError
from udr.evaluation.bootstrap import Interval
from udr.evaluation.comparisons import COMPARED
from udr.util.files import read_json_object
from udr.util.notice import notice

BASELINES = ("bm25", "sbert", "dr-target", "epr", "random")


def beside_columns(root: Path, paths: list[str]) -> list[dict]:
    """The committed experiments' summaries (each a summary.json with a label, its scored queries per task
    and epochs), relative paths from the params file's folder; a missing one is left out with a notice
    (:mod:`udr.util.notice`)."""
    columns = []
    for entry in paths:
        path = root / entry
        if not path.is_file():
            notice(f"evaluate.beside: no {entry} here; metrics/headline.md shows this run alone")
            continue
        summary = read_json_object(path, "evaluate.beside summary", "commit the experiment's summary.json again")
        missing = [k for k in ("label", "scored_queries_per_task", "averages", "udr_minus") if k not in summary]
        if missing:
            raise UdrError(f"evaluate.beside: {entry} has no {', '.join(missing)}")
        columns.append(summary)
    return columns


def _n(part: dict) -> str:
    tasks = part.get("tasks", {}).get("udr", {})
    return str(sum(r["n"] for r in tasks.values())) if tasks else ""


def _interval(d: dict | None) -> str:
    return Interval.of(d).markdown() if d else ""


def _rows(columns: list[dict], scope: str) -> list[str]:
    """The averages and differences of one scope ("" for the trained-on tasks, "unseen")."""
    parts = [c.get(scope, {}) if scope else c for c in columns]
    title = "unseen tasks" if scope else "six trained-on tasks"
    if not any(p.get("averages") for p in parts):
        return []
    lines = [f"| **{title}**: test examples | " + " | ".join(_n(p) for p in parts) + " |"]
    for m in METHODS:
        cells = [f"{p['averages'][m]['all']:.1f}" if m in p.get("averages", {}) else "" for p in parts]
        if any(cells):  # a per-task method has no model of an unseen task
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
    for b in BASELINES:
        cells = [_interval(p.get("udr_minus", {}).get(b, {}).get("all")) for p in parts]
        if any(cells):
            lines.append(f"| udr − {b} | " + " | ".join(cells) + " |")
    return lines


def headline_markdown(columns: list[dict]) -> str:
    """The side-by-side table: each column's LM feedback and epochs, then per scope its test n, each method's
    average graded score over the tasks, and UDR minus each baseline (paired bootstrap 95% interval over the
    same test examples, all tasks resampled at once; bold where resolved: clear of 0 by the claim margin)."""
    head = "| | " + " | ".join(c["label"] for c in columns) + " |"
    lines = [
        head,
        "| --- |" + " ---: |" * len(columns),
        "| LM feedback: scored queries per task | " + " | ".join(_feedback(c) for c in columns) + " |",
        "| UDR training epochs | " + " | ".join(f"{c['epochs']:g}" if "epochs" in c else "" for c in columns) + " |",
        *_rows(columns, ""),
        *_rows(columns, "unseen"),
    ]
    return "\n".join(lines) + "\n"


def _feedback(column: dict) -> str:
    note = column.get("feedback", "")
    return f"{column['scored_queries_per_task']}" + (f" ({note})" if note else "")


def flat_headline(summary: dict) -> dict[str, float]:
    """The few flat numbers `dvc exp show` compares experiments by: each method's all-task average, UDR minus
    the best baseline with its interval, and each method's unseen-task average (one decimal)."""
    out: dict[str, float] = {}
    for scope, part in (("", summary), ("unseen_", summary.get("unseen", {}))):
        averages = part.get("averages", {})
        for method, a in averages.items():
            out[f"{scope}{method}"] = round(a["all"], 1)
        baselines = {m: a["all"] for m, a in averages.items() if m not in (COMPARED, "random")}
        if scope == "" and baselines and COMPARED in averages:
            best = max(baselines, key=baselines.get)
            diff = part["udr_minus"][best]["all"]
            out[f"{COMPARED}-best"] = round(diff["difference"], 1)
            out[f"{COMPARED}-best_low"] = round(diff["low"], 1)
            out[f"{COMPARED}-best_high"] = round(diff["high"], 1)
    return out
