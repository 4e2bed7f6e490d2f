"""The `udr report` stage: every method's per-task metrics -> metrics/summary.json, the results
table metrics/results.md (tasks x methods with averages per kind of task, as the paper's Tables 1-2),
and the score-vs-demonstrations plot (metrics/plots/shots.png + one CSV per task for DVC plots).
"""

from __future__ import annotations

import json
from pathlib import Path

from udr.errors import UdrError

KIND_TITLES = {"classification": "classification", "multiple_choice": "multiple choice", "generation": "generation"}


def _load_results(settings) -> dict[str, dict[str, dict]]:
    """{method: {task: result}} for the methods and tasks in params (all must exist)."""
    from udr.config import METHODS

    out: dict[str, dict[str, dict]] = {}
    for method in METHODS:
        out[method] = {}
        for task in settings.evaluation_tasks():
            path = settings.paths.method_metrics(method, task)
            if not path.is_file():
                raise UdrError(f"missing result {path}: run `udr evaluate --method {method}` first")
            out[method][task] = json.loads(path.read_text())
    return out


def kind_averages(results: dict[str, dict[str, dict]]) -> dict[str, dict[str, float]]:
    """{method: {kind: mean graded score over the tasks of that kind, "all": over every task}}."""
    out = {}
    for method, by_task in results.items():
        groups: dict[str, list[float]] = {}
        for r in by_task.values():
            groups.setdefault(r["kind"], []).append(r["graded"]["score"])
            groups.setdefault("all", []).append(r["graded"]["score"])
        out[method] = {f: sum(v) / len(v) for f, v in groups.items()}
    return out


def _cell(r: dict) -> str:
    if r["graded"]["name"] != r["metric"]:
        return f"{r['score']:.1f} / {r['graded']['score']:.1f}"
    return f"{r['score']:.1f}"


def results_markdown(results: dict[str, dict[str, dict]], averages: dict[str, dict[str, float]]) -> str:
    methods = list(results)
    tasks = list(next(iter(results.values())))
    first = results[methods[0]]
    lines = [
        "# In-context learning results",
        "",
        "Each cell: the task's metric in percent on its test split (n test examples), with the same LM and "
        "prompt format for every method; only the retrieved demonstrations differ. Where the metric is exact "
        "match the cell reads `EM / token F1`, and token F1 (the graded metric) enters the averages. "
        "Best per row in bold.",
        "",
        "| task | kind | metric | n | " + " | ".join(methods) + " |",
        "| --- | --- | --- | ---: | " + " | ".join("---:" for _ in methods) + " |",
    ]

    def row(label: str, fam: str, metric: str, n: str, values: list[float], cells: list[str]) -> str:
        best = max(values)
        shown = [f"**{c}**" if v == best else c for v, c in zip(values, cells)]
        return f"| {label} | {fam} | {metric} | {n} | " + " | ".join(shown) + " |"

    for task in tasks:
        r0 = first[task]
        metric = r0["metric"] if r0["graded"]["name"] == r0["metric"] else f"{r0['metric']} / {r0['graded']['name']}"
        lines.append(
            row(
                task,
                KIND_TITLES.get(r0["kind"], r0["kind"]),
                metric,
                str(r0["n"]),
                [results[m][task]["graded"]["score"] for m in methods],
                [_cell(results[m][task]) for m in methods],
            )
        )
    kinds = [k for k in KIND_TITLES if any(k in averages[m] for m in methods)]
    for kind in [*kinds, "all"]:
        values = [averages[m].get(kind, float("nan")) for m in methods]
        label = "**average, all tasks**" if kind == "all" else f"**average, {KIND_TITLES[kind]}**"
        lines.append(row(label, "", "graded", "", values, [f"{v:.1f}" for v in values]))
    lines.append("")
    secs = {m: sum(r["total_seconds"] for r in results[m].values()) for m in methods}
    lines.append("Evaluation time (s): " + ", ".join(f"{m} {s:.0f}" for m, s in secs.items()) + ".")
    lines.append("")
    return "\n".join(lines)


def shots_table(results: dict[str, dict[str, dict]]) -> dict[str, dict[str, dict[int, float]]]:
    """{task: {method: {demonstrations: graded score}}} for the results that carry shots."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for method, by_task in results.items():
        for task, r in by_task.items():
            if "shots" in r:
                out.setdefault(task, {})[method] = {int(n): s["graded"] for n, s in r["shots"].items()}
    return out


def write_shots_plot(shots: dict[str, dict[str, dict[int, float]]], results, out_dir: Path) -> None:
    """metrics/plots/shots.png and metrics/plots/shots/<task>.csv (demos, one column per method)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from udr.util.files import write_atomic, write_text_atomic

    out_dir.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, max(1, len(shots)), figsize=(5 * max(1, len(shots)), 3.6), squeeze=False)
    for ax, (task, by_method) in zip(axes[0], shots.items()):
        methods = list(by_method)
        counts = sorted({n for v in by_method.values() for n in v})
        csv = ["demos," + ",".join(methods)]
        csv += [f"{n}," + ",".join(f"{by_method[m].get(n, float('nan')):.4f}" for m in methods) for n in counts]
        write_text_atomic(out_dir / "shots" / f"{task}.csv", "\n".join(csv) + "\n")
        for m in methods:
            xs = sorted(by_method[m])
            ax.plot(xs, [by_method[m][x] for x in xs], marker="o", label=m)
        r = next(iter(results.values()))[task]
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(c) for c in counts])
        ax.set_xlabel("demonstrations (at most; generation is also capped by the context)")
        ax.set_ylabel(r["graded"]["name"])
        ax.set_title(f"{task} (n={r['n']})")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    write_atomic(out_dir / "shots.png", lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)


def run_report(settings) -> dict:
    """Write metrics/summary.json, metrics/results.md and the shots plot; returns the summary."""
    from udr.util.files import write_json_atomic, write_text_atomic

    paths = settings.paths
    results = _load_results(settings)
    averages = kind_averages(results)
    shots = shots_table(results)
    summary = {
        "tasks": {
            m: {
                t: {"metric": r["metric"], "score": r["score"], "graded": r["graded"]["score"], "n": r["n"]}
                for t, r in by_task.items()
            }
            for m, by_task in results.items()
        },
        "averages": averages,
        "shots": {t: {m: {str(n): s for n, s in v.items()} for m, v in by_m.items()} for t, by_m in shots.items()},
    }
    write_json_atomic(paths.summary, summary)
    write_text_atomic(paths.results, results_markdown(results, averages))
    if shots:
        write_shots_plot(shots, results, paths.plots)
    return summary
