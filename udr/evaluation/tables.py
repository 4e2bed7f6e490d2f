"""The results tables of `udr report` as Markdown: tasks x methods with averages per kind of task (the
paper's Tables 1-2, and Table 5 for the unseen tasks), and UDR (or a named run) minus each other method
with its interval. A label task scored by another metric than accuracy (macro-F1) gets a row of its
accuracy beside, which enters no average."""

from __future__ import annotations

from udr.evaluation.claims import BOOTSTRAP_RESAMPLES, CLAIM_MARGIN
from udr.evaluation.comparisons import BESIDE, COMPARED, accuracy_beside

KIND_TITLES = {"classification": "classification", "multiple_choice": "multiple choice", "generation": "generation"}


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


RESULTS_INTRO = (
    "Each cell: the task's metric in percent on its test split (n test examples), with the same LM and "
    "prompt format for every method; only the retrieved demonstrations differ. Where the metric is exact "
    "match the cell reads `EM / token F1`, and token F1 (the graded metric) enters the averages. "
    "Best per row in bold."
)
UNSEEN_INTRO = (
    "Tasks evaluated but never trained on (evaluate.unseen_tasks): the LM never scored their candidates "
    "and UDR never saw them in training; each is retrieved from its own pool. As the paper's Table 5, "
    "they show whether the retriever transfers to new tasks. Cells as above; they do not enter the "
    "averages of the tables above."
)


def results_markdown(
    results: dict[str, dict[str, dict]],
    averages: dict[str, dict[str, float]],
    *,
    title: str = "# In-context learning results",
    intro: str = RESULTS_INTRO,
    scope: str = "all tasks",
) -> str:
    methods = list(results)
    tasks = list(next(iter(results.values())))
    first = results[methods[0]]
    lines = [title, "", intro, ""]
    lines += [
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
        kind = KIND_TITLES.get(r0["kind"], r0["kind"])
        lines.append(
            row(
                task,
                kind,
                metric,
                str(r0["n"]),
                [results[m][task]["graded"]["score"] for m in methods],
                [_cell(results[m][task]) for m in methods],
            )
        )
        beside = [beside_score(results[m][task]) for m in methods]
        if all(v is not None for v in beside):
            lines.append(row(f"{task} ({BESIDE})", kind, BESIDE, str(r0["n"]), beside, [f"{v:.1f}" for v in beside]))
    kinds = [k for k in KIND_TITLES if any(k in averages[m] for m in methods)]
    for kind in [*kinds, "all"]:
        values = [averages[m].get(kind, float("nan")) for m in methods]
        label = f"**average, {scope}**" if kind == "all" else f"**average, {KIND_TITLES[kind]}**"
        lines.append(row(label, "", "graded", "", values, [f"{v:.1f}" for v in values]))
    lines.append("")
    secs = {m: sum(r["total_seconds"] for r in results[m].values()) for m in methods}
    lines.append("Evaluation time (s): " + ", ".join(f"{m} {s:.0f}" for m, s in secs.items()) + ".")
    lines.append("")
    return "\n".join(lines)


def beside_score(result: dict) -> float | None:
    """A result's accuracy where it is shown beside its metric (a label task scored by macro-F1), else None."""
    if not accuracy_beside(result["kind"], result["graded"]["name"]):
        return None
    return (result.get("details") or {}).get(BESIDE)


def task_summary(result: dict) -> dict:
    """A result in metrics/summary.json: metric, score, graded score, n, and accuracy where shown beside."""
    out = {"metric": result["metric"], "score": result["score"], "graded": result["graded"]["score"], "n": result["n"]}
    beside = beside_score(result)
    return out if beside is None else {**out, BESIDE: beside}


def comparison_markdown(
    comparison: dict,
    results: dict[str, dict[str, dict]],
    seed: int,
    *,
    title: str = f"## {COMPARED.upper()} against each baseline",
    scope: str = "all tasks",
    compared: str = COMPARED,
) -> str:
    """The table of `compared` minus each other method ({method: Versus}): difference [95% interval],
    resolved ones in bold, accuracy's in a row of its own beside a label task's other metric."""
    baselines = list(comparison)
    tasks = list(results[compared])
    who = (
        ("UDR's graded score minus the baseline's", "udr")
        if compared == COMPARED
        else (
            f"The graded score of {compared} (a named run) minus each method's",
            compared,
        )
    )
    accuracy = [t for t in tasks if all(t in comparison[b].accuracy for b in baselines)]
    lines = [
        title,
        "",
        f"{who[0]} on the same test examples, with the paired bootstrap 95% "
        f"interval ({BOOTSTRAP_RESAMPLES} resamples of the test examples, seed {seed}; the average resamples "
        f"every task at once). **Bold**: resolved, the unrounded interval clears 0 by {CLAIM_MARGIN} points, more "
        "than results move between CPU kinds; otherwise the test set cannot tell the two apart."
        + (f" Rows `({BESIDE})`: the same for accuracy, beside the task's metric (not averaged)." if accuracy else ""),
        "",
        "| task | n | " + " | ".join(f"{who[1]} - {b}" for b in baselines) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in baselines) + " |",
    ]
    for task in tasks:
        n = results[compared][task]["n"]
        lines.append(
            f"| {task} | {n} | " + " | ".join(comparison[b].per_task[task].markdown() for b in baselines) + " |"
        )
        if task in accuracy:
            cells = [comparison[b].accuracy[task][2].markdown() for b in baselines]
            lines.append(f"| {task} ({BESIDE}) | {n} | " + " | ".join(cells) + " |")
    lines.append(
        f"| **average, {scope}** |  | " + " | ".join(comparison[b].average.markdown() for b in baselines) + " |"
    )
    lines.append("")
    return "\n".join(lines)
