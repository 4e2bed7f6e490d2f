"""`udr adapt`'s run: the project's stages chained in a workspace, step by step (:mod:`udr.project.adapt`
says which, decides the plan, the recommendation and the report, and records the finished steps a run
resumes from). The command (:mod:`udr.cli.adapt`) parses its options into a request and shows the outcome.

Imports of udr.config, udr.data, udr.project.workspace, udr.retriever, udr.serving and udr.stages are inside
the functions that use them, to keep `udr`'s start (`udr --help`) light.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from udr.project import adapt
from udr.util.files import resolve_target, shown_path
from udr.util.locks import holding

if TYPE_CHECKING:
    from udr.config import Settings


def evaluate_candidate(settings: Settings, task: str, method: str, split: str, *, progress: bool) -> None:
    """`method` (a candidate of udr.project.adapt) on `split`, saved under its name; skipped where saved
    already (a run resumed)."""
    from udr.stages.evaluate import run_evaluate

    if settings.paths.method_metrics(method, task, split).is_file():
        return
    adapted = adapt.LABELLED.get(method, method) == adapt.ADAPTED  # `udr evaluate -m udr --model` its folder
    evaluated = adapt.evaluated_method(method)
    run_evaluate(
        settings,
        evaluated,
        tasks=[task],
        split=split,
        model=adapt.adapted_model(settings) if adapted else None,
        save_as=None if evaluated == method else method,
        progress=progress,
    )


def train_adapted(settings: Settings, *, progress: bool) -> Path:
    """UDR trained on the task's feedback from the project's UDR into the workspace's `models/adapted`
    (kept where a finished run left it)."""
    from udr.retriever.encoder import SETTINGS_NAME
    from udr.stages.train import run_train_stage

    out = adapt.adapted_model(settings)
    if not (out / SETTINGS_NAME).is_file():
        run_train_stage(settings, 0, init=settings.paths.final_model, out=out, progress=progress)
    return out


def open_workspace(project_settings: Settings, request: adapt.AdaptRequest, folder: Path, *, say) -> adapt.StepRecord:
    """The step record of the run in the workspace `folder` (resolved and locked by the caller): a new
    workspace's (written with it; what the input files alone decide is checked before), or that of the
    run of the same request there, resumed (:func:`udr.project.adapt.resumed_record`)."""
    from udr.data.sources import read_records
    from udr.project.workspace import init_workspace

    r = request
    fingerprint = adapt.request_fingerprint(r)
    record = adapt.resumed_record(folder, fingerprint, r.restart, shown_path(r.folder, Path.cwd()))
    if record is not None:
        say(f"workspace {folder}: resuming the run there ({len(record.done)} steps done; --restart starts over)")
        return record
    rows = len(read_records(r.source, r.name))
    test_fraction = project_settings.prepare.test_fraction
    workspace = r.workspace_request(
        folder, r.validation or adapt.default_validation(rows, r.test is not None, test_fraction)
    )
    ws = init_workspace(
        project_settings, workspace, extra_files={adapt.STEPS_NAME: adapt.StepRecord(folder, fingerprint).text()}
    )
    say(f"workspace {ws.folder}: task {r.name}, input '{ws.input}', label '{ws.label}' ({ws.labels} labels)")
    return adapt.StepRecord.read(folder)


def plan_run(settings: Settings, request: adapt.AdaptRequest, rates: adapt.Rates, params: Path, *, say) -> dict:
    """The plan of a run over the prepared task (:func:`udr.project.adapt.plan_adaptation`), said, and its
    budget of scored queries written to the workspace's params file; returned as a mapping (recorded)."""
    from udr.data.prepare import read_prepared

    r = request
    splits = {s: read_prepared(settings.root, r.name, s) for s in ("train", "validation", "test")}
    counts = {s: len(frame) for s, frame in splits.items()}
    methods = adapt.candidates(settings.task(r.name).kind)
    row_tokens, choice_tokens = adapt.pool_tokens(settings, r.name, splits["train"])
    plan = adapt.plan_adaptation(
        rates,
        row_tokens=row_tokens,
        choice_tokens=choice_tokens,
        pool_rows=counts["train"],
        validation_rows=counts["validation"],
        test_rows=counts["test"],
        queries=r.queries,
        candidates=settings.candidates.k,
        max_demos=settings.evaluate.max_demos,
        context=settings.evaluate.context,
        batch_size=settings.train.batch_size,
        epochs=settings.train.epochs_first,
        test_methods=methods[1:] if r.test_all else ("recommended", "sbert", "bm25"),
        minutes=r.minutes,
        validated=len(methods),
    )
    say(plan.describe())
    if plan.queries != settings.score.queries_per_task:
        adapt.set_workspace_params(params, "score", {"queries_per_task": plan.queries})
    return asdict(plan)


def prepare_pool(settings: Settings, task: str, say) -> None:
    """The prepare step: the task's splits, and one line where `--max-train` cut its pool."""
    from udr.data.prepare import pool_cut_note
    from udr.stages.prepare import run_prepare

    cut = pool_cut_note(run_prepare(settings, task), "--max-train")
    if cut is not None:
        say(cut)


def run_adapt(project_settings: Settings, request: adapt.AdaptRequest, *, say, progress: bool = True) -> adapt.Outcome:
    """`udr adapt`: the steps of :mod:`udr.project.adapt` in the workspace `request.folder`, a new one or
    the one a run of the same request left (its finished steps skipped; `request.restart`: started over);
    returns the outcome, also written to the workspace's `metrics/adapt.json` and `metrics/adapt.md`. The
    workspace and `--export` are locked for the run (:mod:`udr.util.locks`) and checked, with the project's
    models and all the input files alone decide, before anything is written."""
    from udr.config import load_settings
    from udr.serving.export import writing_export
    from udr.stages.candidates import run_candidates
    from udr.stages.score import run_score

    r = request
    rates = adapt.recorded_rates(project_settings)  # before anything is written
    adapt.check_project_models(project_settings)
    folder = resolve_target(r.folder, "--dir")
    with contextlib.ExitStack() as held:
        held.enter_context(holding(folder, "workspace"))
        previous = adapt.StepRecord.read(folder) if folder.is_dir() and not r.restart else None
        if r.export is not None and (r.restart or previous is None or "export" not in previous.done):
            held.enter_context(writing_export(r.export))  # not a finished run's own export (an SBERT copy)
        steps = adapt.Steps(say, open_workspace(project_settings, r, folder, say=say))
        params = folder / "params.yaml"
        steps.run("prepare", prepare_pool, load_settings(params), r.name, say)
        plan = adapt.Plan.from_dict(
            steps.kept("plan", lambda: plan_run(load_settings(params), r, rates, params, say=say))
        )
        settings = load_settings(params)  # with the plan's budget

        def evaluate(method: str, split: str) -> None:
            evaluate_candidate(settings, r.name, method, split, progress=progress)

        steps.run("candidates", run_candidates, settings, r.name, progress=progress)
        steps.run("score", run_score, settings, r.name, 0, progress=progress)
        steps.run("train", train_adapted, settings, progress=progress)
        methods = adapt.candidates(settings.task(r.name).kind)
        for method in methods:
            steps.run(f"validate {method}", evaluate, method, "validation")
        checked = adapt.comparison_rows(settings, r.name, methods, "validation")
        choice = adapt.recommend(checked)
        say(f"recommended: {choice.method}: {choice.reason}")
        tested = list(dict.fromkeys(methods[1:] if r.test_all else (choice.method, "sbert", "bm25")))
        for method in tested:
            steps.run(f"test {method}", evaluate, method, "test")
        target = r.export or folder / "export"
        exported = steps.kept("export", lambda: adapt.export_winner(settings, r.name, choice.method, target))
        outcome = adapt.Outcome(
            task=r.name,
            metric=settings.task(r.name).metric,
            plan={**asdict(plan), "total_seconds": plan.total_seconds},
            validation=checked,
            choice=asdict(choice),
            test=adapt.comparison_rows(settings, r.name, tested, "test"),
            export=exported,
            seconds=steps.seconds,
            labels=adapt.selection_of(settings, choice.method) if choice.method in adapt.LABELLED else None,
        )
        adapt.write_outcome(folder, outcome)
        adapt.record_workspace(project_settings.root, r.name, folder)  # `udr retrieve -t NAME` follows it
    return outcome
