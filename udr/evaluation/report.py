"""The `udr report` stage: every method's per-task metrics -> metrics/summary.json, the results
table metrics/results.md (tasks x methods with averages per kind of task, as the paper's Tables 1-2),
UDR's difference from each baseline with its paired bootstrap 95% interval (per task and on the
average, from the saved predictions), and the score-vs-demonstrations plot (metrics/plots/shots.png
+ one CSV per task for DVC plots). The unseen tasks (evaluate.unseen_tasks: never scored, never
trained on) get their own tables, as the paper's Table 5, and stay out of the main averages.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from udr.errors import UdrError, first_line
from udr.evaluation.bootstrap import PROPORTION_METRICS, wilson_interval

# UDR is compared with every other method of config.METHODS.
COMPARED = "udr"
BOOTSTRAP_RESAMPLES = 1000

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
        label = f"**average, {scope}**" if kind == "all" else f"**average, {KIND_TITLES[kind]}**"
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
        r = next(iter(results.values()))[task]
        proportion = r["graded"]["name"] in PROPORTION_METRICS
        for m in methods:
            xs = sorted(by_method[m])
            ys = [by_method[m][x] for x in xs]
            line = ax.plot(xs, ys, marker="o", label=m)[0]
            if proportion:  # a 95% interval per point: the test set is small
                low, high = zip(*(wilson_interval(y / 100, r["n"]) for y in ys))
                ax.fill_between(xs, [100 * v for v in low], [100 * v for v in high], color=line.get_color(), alpha=0.12)
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(c) for c in counts])
        ax.set_xlabel("demonstrations (at most; generation:\nalso capped by the context)")
        ax.set_ylabel(r["graded"]["name"])
        ax.set_title(f"{task} (n={r['n']}" + (", bands: 95% Wilson intervals)" if proportion else ")"), fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    write_atomic(out_dir / "shots.png", lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)


def prediction_scorer(settings, method: str, task: str, examples: list[dict], metric: str, split: str = "test"):
    """The graded score of `method`'s saved predictions on `task`'s `split` as a function of example
    indices (:data:`udr.evaluation.bootstrap.ScoreOn`), `examples` being that split's prepared rows."""
    import polars as pl

    path = settings.paths.predictions(method, task, split)
    if not path.is_file():
        raise UdrError(f"missing predictions {path}: run `udr evaluate --method {method}` first")
    frame = pl.read_parquet(path, columns=["id", "prediction"])
    return frame_scorer(frame, examples, metric, f"{path}", f"the prepared {split} split of {task}")


def frame_scorer(frame, examples: list[dict], metric: str, source: str, rows: str):
    """The graded score of the predictions in `frame` (columns id, prediction) as a function of
    indices into `examples`; `source` and `rows` name the two in the error when they differ."""
    from udr.evaluation.metrics import GradedStatistics

    by_id = dict(zip(frame["id"].to_list(), frame["prediction"].to_list()))
    if set(by_id) != {int(r["id"]) for r in examples}:
        raise UdrError(f"{source} does not cover {rows}: re-run `udr evaluate`")
    return GradedStatistics(metric, [by_id[int(r["id"])] for r in examples], examples).score


def saved_results(settings, name: str, tasks: Sequence[str], split: str = "test") -> dict[str, dict]:
    """{task: result} of a saved evaluation (a method, or a name given with `udr evaluate --save-as`) on
    `split`; a missing one is a UdrError naming it."""
    out = {}
    for t in tasks:
        path = settings.paths.method_metrics(name, t, split)
        if not path.is_file():
            raise UdrError(f"missing result {path}: evaluate {name} on {t} ({split}) first")
        again = f"evaluate {name} on {t} ({split}) again"
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise UdrError(f"unreadable result {path} ({first_line(exc)}): {again}") from None
        graded = result.get("graded") if isinstance(result, dict) else None
        if (
            not isinstance(graded, dict)
            or not all(k in result for k in ("metric", "n", "score"))
            or "score" not in graded
        ):
            raise UdrError(f"malformed result {path} (not what `udr evaluate` writes): {again}")
        out[t] = result
    return out


def check_same_metrics(results: dict[str, dict[str, dict]], tasks: Sequence[str]) -> None:
    """A one-line error where two saved evaluations ({name: {task: result}}) scored a task with different
    metrics: their difference would subtract one metric from another."""
    for t in tasks:
        used = {name: (r[t]["metric"], r[t]["graded"].get("name", r[t]["metric"])) for name, r in results.items()}
        if len(set(used.values())) > 1:
            said = ", ".join(f"{name} with {'/'.join(dict.fromkeys(m))}" for name, m in used.items())
            raise UdrError(f"{t} was scored with different metrics ({said}): evaluate them with the same metric")


def saved_comparisons(settings, names: Sequence[str], b: str, tasks: Sequence[str], split: str = "test"):
    """{a: (per-task Intervals, average Interval) of a - b} for each a in `names`, saved evaluations on
    the same `split` rows: paired bootstrap from their predictions, each read and scored once (b's too,
    however many it meets)."""
    from udr.data.prepare import read_prepared
    from udr.evaluation.bootstrap import PairedTask, paired_bootstrap

    examples = {t: read_prepared(settings.root, t, split).to_dicts() for t in tasks}
    results = {m: saved_results(settings, m, tasks, split) for m in dict.fromkeys([*names, b])}
    check_same_metrics(results, tasks)
    scorers = {
        (m, t): prediction_scorer(settings, m, t, examples[t], results[m][t]["metric"], split)
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
        (m, t): prediction_scorer(settings, m, t, examples[t], results[m][t]["metric"]) for m in results for t in tasks
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


def comparison_markdown(
    comparison: dict,
    results: dict[str, dict[str, dict]],
    seed: int,
    *,
    title: str = f"## {COMPARED.upper()} against each baseline",
    scope: str = "all tasks",
) -> str:
    """The table of UDR minus each baseline: difference [95% interval], resolved ones in bold."""
    baselines = list(comparison)
    tasks = list(results[COMPARED])

    lines = [
        title,
        "",
        f"UDR's graded score minus the baseline's on the same test examples, with the paired bootstrap 95% "
        f"interval ({BOOTSTRAP_RESAMPLES} resamples of the test examples, seed {seed}; the average resamples "
        "every task at once). **Bold**: resolved, the interval excludes 0; otherwise the test set cannot tell "
        "the two apart.",
        "",
        "| task | n | " + " | ".join(f"udr - {b}" for b in baselines) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in baselines) + " |",
    ]
    for task in tasks:
        cells = [comparison[b][0][task].markdown() for b in baselines]
        lines.append(f"| {task} | {results[COMPARED][task]['n']} | " + " | ".join(cells) + " |")
    lines.append(f"| **average, {scope}** |  | " + " | ".join(comparison[b][1].markdown() for b in baselines) + " |")
    lines.append("")
    return "\n".join(lines)


def _summary(results: dict[str, dict[str, dict]], averages: dict, comparison: dict, shots: dict) -> dict:
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
        f"{COMPARED}_minus": {
            b: {"tasks": {t: iv.to_dict() for t, iv in per_task.items()}, "all": average.to_dict()}
            for b, (per_task, average) in comparison.items()
        },
    }
    if not shots:
        del summary["shots"]
    return summary


def _split_unseen(settings, results: dict[str, dict[str, dict]]) -> tuple[dict, dict]:
    """(results of the trained-on tasks, results of the unseen tasks); either may hold no task."""
    unseen = set(settings.unseen_task_names())
    seen = {m: {t: r for t, r in by_task.items() if t not in unseen} for m, by_task in results.items()}
    new = {m: {t: r for t, r in by_task.items() if t in unseen} for m, by_task in results.items()}
    return seen, new


def headline(summary: dict) -> dict[str, float]:
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


def run_report(settings) -> dict:
    """`udr report`: write metrics/summary.json (its flat headline: metrics/headline.json),
    metrics/results.md (the results table and UDR against each baseline with bootstrap intervals, then
    the same two for the unseen tasks) and the shots plot; returns the summary."""
    from udr.evaluation.headline import beside_columns, headline_markdown, run_column
    from udr.util.files import write_json_atomic, write_text_atomic

    paths = settings.paths
    seen, unseen = _split_unseen(settings, _load_results(settings))
    shots = shots_table(seen)
    summary: dict = {}
    markdown = ""
    if next(iter(seen.values())):
        averages = kind_averages(seen)
        comparison = udr_versus_baselines(settings, seen)
        summary = _summary(seen, averages, comparison, shots)
        markdown = results_markdown(seen, averages) + "\n" + comparison_markdown(comparison, seen, settings.seed)
    if next(iter(unseen.values())):
        averages = kind_averages(unseen)
        comparison = udr_versus_baselines(settings, unseen)
        summary["unseen"] = _summary(unseen, averages, comparison, {})
        title, scope = "# Unseen tasks", "unseen tasks"
        markdown += "\n" if markdown else ""
        markdown += results_markdown(unseen, averages, title=title, intro=UNSEEN_INTRO, scope=scope) + "\n"
        markdown += comparison_markdown(
            comparison,
            unseen,
            settings.seed,
            title=f"## {COMPARED.upper()} against each baseline, unseen tasks",
            scope=scope,
        )
    write_json_atomic(paths.summary, summary)
    write_json_atomic(paths.headline, headline(summary))
    if summary:
        columns = [run_column(settings, summary), *beside_columns(settings.root, settings.evaluate.beside)]
        write_text_atomic(paths.headline_table, headline_markdown(columns))
    write_text_atomic(paths.results, markdown)
    if shots:
        write_shots_plot(shots, seen, paths.plots)
    return summary
