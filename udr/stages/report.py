"""The `udr report` stage: every method's per-task metrics -> metrics/summary.json, the results
table metrics/results.md (tasks x methods with averages per kind of task, as the paper's Tables 1-2),
UDR's difference from each baseline with its paired bootstrap 95% interval (per task and on the
average, from the saved predictions), and the score-vs-demonstrations plot (metrics/plots/shots.png
+ one CSV per task for DVC plots). The unseen tasks (evaluate.unseen_tasks: never scored, never
trained on) get their own tables, as the paper's Table 5, and stay out of the main averages. In a
workspace (no dvc.yaml), each run saved with `udr evaluate --save-as NAME` is a column of the tables and
gets a table of its own against every method (summary.json: `named`).

Imports of udr.config and udr.util.schemas (pydantic) are inside the functions that use them, to keep the
start of `udr` and of its commands light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from udr.errors import UdrError
from udr.evaluation.comparisons import COMPARED, checked_result
from udr.evaluation.headline import beside_columns, flat_headline, headline_markdown
from udr.evaluation.shots_plot import shots_table, write_shots_plot
from udr.evaluation.tables import UNSEEN_INTRO, comparison_markdown, kind_averages, results_markdown, task_summary
from udr.project.saved_evaluations import compare_saved, named_runs, udr_versus_baselines
from udr.util.files import resolve_target, write_json_atomic, write_text_atomic
from udr.util.machine import machine_kind, machine_note, result_machines
from udr.util.notice import notice
from udr.util.readers import read_json

if TYPE_CHECKING:
    from udr.config import Settings


def _load_results(settings: Settings) -> dict[str, dict[str, dict]]:
    """{method: {task: result}} for the methods in params and the tasks each is evaluated on (all must exist;
    :meth:`udr.config.Settings.method_tasks`: the per-task EPR has no unseen task). A per-task method with
    neither its models folder nor any result (a workspace has no EPR of its task) is left out with a notice."""
    from udr.config import METHODS
    from udr.paths import PER_TASK_METHODS

    out: dict[str, dict[str, dict]] = {}
    for method in METHODS:
        folder, tasks = settings.paths.method_model(method), settings.method_tasks(method)
        evaluated = any(settings.paths.method_metrics(method, t).is_file() for t in tasks)
        if method in PER_TASK_METHODS and not folder.is_dir() and not evaluated:
            notice(f"no {method} models here ({folder.name}/<task>): {method} is left out of the report")
            continue
        out[method] = {}
        for task in tasks:
            path = settings.paths.method_metrics(method, task)
            if not path.is_file():
                raise UdrError(f"missing result {path}: run `udr evaluate --method {method}` first")
            again = f"run `udr evaluate --method {method}` again"
            out[method][task] = checked_result(read_json(path, "result", again), str(path), again)
    return out


def _summary(results: dict[str, dict[str, dict]], averages: dict, comparison: dict, shots: dict) -> dict:
    summary = {
        "tasks": {m: {t: task_summary(r) for t, r in by_task.items()} for m, by_task in results.items()},
        "averages": {m: averages[m] for m in results},
        "shots": {t: {m: {str(n): s for n, s in v.items()} for m, v in by_m.items()} for t, by_m in shots.items()},
        f"{COMPARED}_minus": {b: v.to_dict() for b, v in comparison.items()},
    }
    if not shots:
        del summary["shots"]
    return summary


def _part(
    settings: Settings, results: dict, named: dict, shots: dict, scope: str, heading: str, **text
) -> tuple[dict, str]:
    """The summary and Markdown of one scope's results: the table (named runs as columns), UDR against each
    baseline, and each named run against every method."""
    both = {**results, **named}
    averages = kind_averages(both)
    comparison = udr_versus_baselines(settings, results)
    summary = _summary(results, averages, comparison, shots)
    markdown = results_markdown(both, averages, scope=scope, **text) + "\n"
    title = f"## {COMPARED.upper()} {heading}"
    markdown += comparison_markdown(comparison, results, settings.seed, title=title, scope=scope)
    versus = compare_saved(settings, both, [(n, m) for n in named for m in results]) if named else {}
    for name, by_task in named.items():
        against = {m: versus[name, m] for m in results}
        summary.setdefault("named", {})[name] = {
            "tasks": {t: task_summary(r) for t, r in by_task.items()},
            "averages": averages[name],
            "minus": {m: v.to_dict() for m, v in against.items()},
        }
        title = f"## {name} {heading.replace('baseline', 'method')}"
        markdown += "\n" + comparison_markdown(against, named, settings.seed, title=title, scope=scope, compared=name)
    return summary, markdown


def _split_unseen(settings: Settings, results: dict[str, dict[str, dict]]) -> tuple[dict, dict]:
    """(results of the trained-on tasks, results of the unseen tasks); either may hold no task, and a method
    with no result in one (the per-task EPR on the unseen tasks) is left out of it."""
    unseen = set(settings.unseen_task_names())
    seen = {m: {t: r for t, r in by_task.items() if t not in unseen} for m, by_task in results.items()}
    new = {m: {t: r for t, r in by_task.items() if t in unseen} for m, by_task in results.items()}
    return _with_results(seen), _with_results(new)


def _with_results(results: dict[str, dict[str, dict]]) -> dict[str, dict[str, dict]]:
    """`results` less the methods without any; all of them where none has any (an empty scope)."""
    kept = {m: by_task for m, by_task in results.items() if by_task}
    return kept or results


def run_column(settings: Settings, summary: dict, reports: dict) -> dict:
    """The column of this run (its metrics/summary.json): where its round-0 feedback came from is read from
    the score reports (`reports`: :func:`score_reports`; shipped, with its re-scored sample, or scored here)."""
    shipped, checked = [], set()
    for task in settings.train.tasks or settings.task_names():
        record = reports[task]
        shipped.append(bool(record.shipped))
        if record.shipped:
            checked.add(record.checked_queries)
    if shipped and all(shipped):
        # what the score reports record, not the configured score.check_queries (a task may have had fewer)
        counts = "/".join(str(n) for n in sorted(c for c in checked if isinstance(c, int))) or "?"
        feedback = f"shipped, {counts} re-scored"
    elif any(shipped):
        feedback = "shipped for some tasks"
    else:
        feedback = "scored here"
    return {
        **summary,
        "label": "this run",
        "scored_queries_per_task": settings.score.queries_per_task,
        "epochs": settings.train.epochs_first,
        "feedback": feedback,
    }


def score_reports(settings: Settings) -> dict:
    """{task: its round-0 score report (:class:`udr.util.schemas.ScoreReport`)} of the params' tasks (an
    empty report where a task has none)."""
    from udr.util.schemas import ScoreReport, read_model

    out = {}
    for task in settings.task_names():
        path = settings.paths.score_report(0, task)
        fix = f"run `udr score --task {task}` again"
        out[task] = read_model(path, ScoreReport, "score report", fix) if path.is_file() else ScoreReport()
    return out


def run_report(settings: Settings) -> dict:
    """`udr report`: write metrics/summary.json (its flat headline: metrics/headline.json),
    metrics/results.md (the results table and UDR against each baseline with bootstrap intervals, then
    the same two for the unseen tasks) and the shots plot; returns the summary."""
    paths = settings.paths
    for target in (paths.summary, paths.headline, paths.headline_table, paths.results, paths.plots / "shots.png"):
        resolve_target(target, "udr report's output")  # a folder it cannot write: refused before any work
    results = _load_results(settings)
    reports = score_reports(settings)
    machines = result_machines(results, reports)
    seen, unseen = _split_unseen(settings, results)
    named_seen, named_unseen = _split_unseen(settings, named_runs(settings, settings.evaluation_tasks()))
    shots = shots_table(seen)
    summary: dict = {}
    markdown = ""
    if next(iter(seen.values())):
        summary, markdown = _part(settings, seen, named_seen, shots, "all tasks", "against each baseline")
    if next(iter(unseen.values())):
        text = {"title": "# Unseen tasks", "intro": UNSEEN_INTRO}
        part, more = _part(
            settings, unseen, named_unseen, {}, "unseen tasks", "against each baseline, unseen tasks", **text
        )
        summary["unseen"] = part
        markdown += ("\n" if markdown else "") + more
    if summary:
        summary["machines"] = machines
        markdown += f"\nMade on: {'; '.join(machines) or 'not recorded'} (from the result files).\n"
    note = machine_note(machines, machine_kind("cpu"))
    if note:
        notice(note)
    write_json_atomic(paths.summary, summary)
    write_json_atomic(paths.headline, flat_headline(summary))
    if summary:
        columns = [run_column(settings, summary, reports), *beside_columns(settings.root, settings.evaluate.beside)]
        write_text_atomic(paths.headline_table, headline_markdown(columns))
    write_text_atomic(paths.results, markdown)
    if shots:
        write_shots_plot(shots, seen, paths.plots)
    return summary
