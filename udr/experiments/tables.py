"""The tables of `udr exp`: `udr exp show`'s comparison (from `dvc exp show --json`) and the analyses'
Markdown tables."""

from __future__ import annotations

import json


def experiment_rows(show_json: list) -> list[tuple[str, dict, dict]]:
    """(name, params, metrics) per baseline and experiment in `dvc exp show --json` output."""
    rows = []

    def add(entry, fallback):
        data = entry.get("data") or {}
        params = ((data.get("params") or {}).get("params.yaml") or {}).get("data") or {}
        metrics = {}
        for content in (data.get("metrics") or {}).values():
            metrics.update(content.get("data") or {})
        rows.append((entry.get("name") or fallback, params, metrics))

    for base in show_json:
        rev = base.get("rev", "")
        add(base, rev if rev == "workspace" else rev[:7])
        for exp in base.get("experiments") or []:
            for rev_entry in exp.get("revs") or []:
                add(rev_entry, exp.get("name") or rev_entry.get("rev", "")[:7])
    return rows


def lookup(tree: dict, key: str):
    """`a.b.c` in nested dicts, or None."""
    node = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def flatten(tree: dict, prefix: str = "", depth: int = 2) -> dict[str, object]:
    """`{"a": {"b": 1}}` -> `{"a.b": 1}`, down to `depth` levels (deeper values stay whole)."""
    out = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v and depth > 1:
            out.update(flatten(v, key + ".", depth - 1))
        else:
            out[key] = v
    return out


DEFAULT_METRICS = (
    "averages.udr.all",
    "averages.udr.classification",
    "averages.udr.multiple_choice",
    "averages.udr.generation",
)


def comparison(rows, params: list[str] | None, metrics: list[str] | None) -> tuple[list[str], list[list[str]]]:
    """Header and cells: experiment, the chosen params (one column each; default: one column of
    the params that differ from the first committed row), the chosen metrics (default: UDR's averages)."""
    metrics = list(metrics or DEFAULT_METRICS)
    short = {"classification": "cls", "multiple_choice": "mc", "generation": "gen"}
    names = [".".join(short.get(part, part) for part in m.removeprefix("averages.").split(".")) for m in metrics]
    cells = []
    if params is None:
        reference = flatten(next((p for n, p, _ in rows if n != "workspace"), rows[0][1] if rows else {}))
        header = ["experiment", "changed params", *names]
        for name, p, m in rows:
            flat = flatten(p)
            diff = [
                f"{k}={_fmt(flat.get(k))}"
                for k in sorted(set(flat) | set(reference))
                if json.dumps(flat.get(k), sort_keys=True) != json.dumps(reference.get(k), sort_keys=True)
            ]
            cells.append([name, " ".join(diff) or "-", *(_fmt(lookup(m, k)) for k in metrics)])
        return header, cells
    header = ["experiment", *params, *names]
    for name, p, m in rows:
        cells.append([name, *(_fmt(lookup(p, k)) for k in params), *(_fmt(lookup(m, k)) for k in metrics)])
    return header, cells


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def markdown_table(header: list[str], cells: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
    return "\n".join(lines) + "\n"


def results_table(
    baseline: dict[str, float],
    results: dict[str, dict[str, float]],
    experiments,
    baseline_label: str,
    intervals: dict | None = None,
) -> str:
    """Markdown: one row per experiment (or per `row` group), a column per task and the mean, deltas
    against the baseline, with their 95% interval where `intervals` ({row key: Interval}) has one.
    A group's row takes the tasks its members evaluated."""
    tasks = list(baseline)
    intervals = intervals or {}
    header = ["setting", *tasks, "average", "Δ average [95% CI]" if intervals else "Δ average"]
    base_avg = sum(baseline.values()) / len(baseline)
    cells = [[baseline_label, *(f"{baseline[t]:.1f}" for t in tasks), f"{base_avg:.1f}", ""]]
    rows: dict[str, dict[str, float]] = {}
    labels: dict[str, str] = {}
    for exp in experiments:
        key = exp.row or exp.name
        labels[key] = exp.row or f"{exp.description} (`{exp.name}`)"
        scores = rows.setdefault(key, {})
        scores.update(results.get(exp.name) or {})  # a single-task experiment evaluates its own task only
    for key, scores in rows.items():
        cols = [f"{scores[t]:.1f}" if t in scores else "not run" for t in tasks]
        if all(t in scores for t in tasks):
            avg = sum(scores[t] for t in tasks) / len(tasks)
            delta = intervals[key].markdown() if key in intervals else f"{avg - base_avg:+.1f}"
            cells.append([labels[key], *cols, f"{avg:.1f}", delta])
        else:
            cells.append([labels[key], *cols, "", ""])
    return markdown_table(header, cells)


def transfer_table(rows: list[tuple[str, str, dict[str, float] | None]], tasks, intervals: dict | None = None) -> str:
    """Markdown: (inference LM, method, {task: score} or None if not run) -> one row each, with the
    mean, and `intervals` ({(inference LM, method): Interval}) in a last column where given."""
    intervals = intervals or {}
    header = ["inference LM", "method", *tasks, "average"]
    if intervals:
        header.append("− bm25 [95% CI]")
    cells = []
    for lm, method, scores in rows:
        extra = [intervals[lm, method].markdown() if (lm, method) in intervals else ""] if intervals else []
        if not scores:
            cells.append([lm, method, *("not run" for _ in tasks), "", *extra])
            continue
        avg = sum(scores[t] for t in tasks) / len(tasks)
        cells.append([lm, method, *(f"{scores[t]:.1f}" for t in tasks), f"{avg:.1f}", *extra])
    return markdown_table(header, cells)


def compare_table(a: str, b: str, versus, results: dict[str, dict]) -> str:
    """`udr exp compare`'s table (`versus`: :class:`udr.project.saved_evaluations.Versus`, `results`: A's
    {task: result}): per task n, each side's score and a - b with its 95% interval, then the average over
    the tasks. A task compared by another metric than its own is named with that metric, `task (accuracy)`,
    as is the row of accuracy beside a label task's other metric (not in the average)."""
    cells = []
    for t, iv in versus.per_task.items():
        n, own, (sa, sb) = str(results[t]["n"]), results[t]["metric"], versus.scores[t]
        label = t if versus.metrics[t] == own else f"{t} ({versus.metrics[t]})"
        cells.append([label, n, f"{sa:.1f}", f"{sb:.1f}", iv.markdown()])
        if t in versus.accuracy:
            acc_a, acc_b, acc = versus.accuracy[t]
            cells.append([f"{t} (accuracy)", n, f"{acc_a:.1f}", f"{acc_b:.1f}", acc.markdown()])
    mean_a = sum(sa for sa, _ in versus.scores.values()) / len(versus.scores)
    mean_b = sum(sb for _, sb in versus.scores.values()) / len(versus.scores)
    cells.append(["**average**", "", f"{mean_a:.1f}", f"{mean_b:.1f}", versus.average.markdown()])
    return markdown_table(["task", "n", a, b, f"{a} − {b}"], cells)
