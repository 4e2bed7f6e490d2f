"""The pipeline's commands, one per DVC stage (udr.stages), and those that look around a project (`udr tasks`,
`udr show`, `udr rounds`, `udr init-task`: udr.project). Each only parses its options and calls its stage's or
command's function; what a stage computes lives in its subpackage.

Imports of rich, udr.config and the udr.data, udr.evaluation, udr.project and udr.stages modules are inside the
functions that use them, to keep `udr`'s start (`udr --help`) light.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated

import typer

from udr.cli.app import (
    InputColumnOpt,
    InstructionOpt,
    LabelColumnOpt,
    OutOpt,
    ParamsOpt,
    ReplaceOpt,
    RoundOpt,
    SetOpt,
    TaskMetricOpt,
    TaskOpt,
    app,
    console,
    console_out,
    load,
    selected_tasks,
    show_progress,
)
from udr.errors import UdrError
from udr.util.files import shown_path


@app.command("tasks")
def tasks_cmd(
    params: Annotated[
        Path | None,
        typer.Option("--params", "-p", help="Parameters file (default: params.yaml here, if any).", show_default=False),
    ] = None,
    set_: SetOpt = None,
) -> None:
    """Print the project's tasks (built-in and declared): kind, family, metric, source, where it was
    declared, whether its data is on this machine, and its role in params."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from udr.data.sources import mirror_available
    from udr.data.tasks import BuiltinSource, FileSource, MirrorSource, all_tasks

    roles: dict[str, str] = {}
    registry = None
    try:
        settings = load(params or Path("params.yaml"), set_)
        roles = {name: "trained" for name in settings.task_names()}
        roles.update({name: "unseen" for name in settings.unseen_task_names()})
        data_dir, registry = settings.data_dir(), settings.registry
    except UdrError as exc:
        if params is not None or Path("params.yaml").exists():  # only a missing default falls back
            raise
        from udr.config import DATA_DIR_ENV

        data_dir = Path(os.environ.get(DATA_DIR_ENV, "../shared/data"))
        console().print(f"note: {exc}; showing availability under {data_dir}")
    table = Table(title=f"udr tasks (data: {data_dir})")
    for col in ("task", "kind", "family", "metric", "source", "declared in", "available", "in params"):
        table.add_column(col)
    for task in all_tasks(registry):
        src = task.source
        if isinstance(src, MirrorSource):
            avail = "[green]yes[/]" if mirror_available(data_dir, src) else "[red]no[/]"
        elif isinstance(src, FileSource):
            ok = all(src.path(f).is_file() for f in (src.train, src.test) if f)
            avail = "[green]yes[/]" if ok else "[red]no[/]"
        elif isinstance(src, BuiltinSource):
            avail = "[green]yes[/] (built)"
        else:
            avail = "[yellow]hub only[/]"
        row = (task.name, task.kind, task.family, task.metric, src.describe(), task.declared_in)
        table.add_row(*map(escape, row), avail, roles.get(task.name, ""))
    Console(width=200).print(table)


@app.command("prepare")
def prepare_cmd(task: TaskOpt = None, params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None) -> None:
    """Write data/prepared/<task>/{train,test}.parquet (+ meta.json) for the tasks in params."""
    from udr.stages.prepare import run_prepare

    settings = load(params, set_)
    for name in selected_tasks(settings, task, unseen=True):
        start = time.perf_counter()
        meta = run_prepare(settings, name)
        c = meta["counts"]
        console().print(
            f"prepared {name}: train {c['train']['kept']}/{c['train']['available']}, "
            f"test {c['test']['kept']}/{c['test']['available']} "
            f"({meta['split']} split, {time.perf_counter() - start:.1f}s)"
        )


@app.command("models")
def models_cmd(
    role: Annotated[list[str] | None, typer.Option("--role", help="lm and/or encoder (default both).")] = None,
    force: Annotated[bool, typer.Option(help="Resolve again even if cached.")] = False,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """Resolve the model specs in params to safetensors directories under models/base/<role>/."""
    from udr.stages.models import run_models

    settings = load(params, set_)
    for name, spec, path, seconds in run_models(settings, role, force=force):
        console().print(f"model {name}: {spec} -> {path} ({seconds:.1f}s)")


@app.command("precision")
def precision_cmd(params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None) -> None:
    """Write the device, precision and threads each of score, train and evaluate resolves to on this machine
    (data/precision/<section>.json): DVC re-runs the stages that compute in one where it changes."""
    from udr.stages.precision import run_precision

    settings = load(params, set_)
    for section, facts in run_precision(settings).items():
        console().print(f"{section}: {facts['dtype']} on {facts['device']}, {facts['threads']} thread(s)")


@app.command("candidates")
def candidates_cmd(task: TaskOpt = None, params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None) -> None:
    """Round 0: BM25 top-K candidates for every train query -> data/candidates/round0/<task>.parquet."""
    from udr.stages.candidates import run_candidates

    settings = load(params, set_)
    for name in selected_tasks(settings, task):
        start = time.perf_counter()
        out, field = run_candidates(settings, name, progress=show_progress())
        console().print(
            f"candidates {name}: top-{settings.candidates.k} by BM25 over {field}s -> "
            f"{shown_path(out, settings.root)} ({time.perf_counter() - start:.1f}s)"
        )


@app.command("score")
def score_cmd(
    round_: RoundOpt = 0,
    task: TaskOpt = None,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """Score candidates with the LM -> data/scores/round<N>/<task>.parquet (resumable; runs under torchrun)."""
    from udr.stages.score import run_score

    settings = load(params, set_)
    settings.train.check_round(round_)
    for name in selected_tasks(settings, task):
        s = run_score(settings, name, round_, progress=show_progress())
        if s is not None:
            console().print(
                f"scored {name} round {round_}: {s.queries} queries, {s.pairs} pairs "
                f"({s.reused} reused, {s.scored} scored), {s.pairs_per_s} pairs/s, "
                f"{s.tokens_per_s} tok/s, padding {s.padding_fraction:.1%}, {s.seconds}s "
                f"[{s.device}/{s.dtype}, {s.world_size} process(es)]",
                markup=False,  # the bracket is text, not a rich style
            )
            if s.shipped:
                c = s.shipped
                console().print(
                    f"  taken from {c['source']} after {c['checked_queries']} queries ({c['checked_pairs']} pairs) "
                    f"scored again agreed: largest difference {c['max_abs_diff']:.4f} (tolerance {c['tolerance']})"
                )


@app.command("train")
def train_cmd(
    round_: RoundOpt = 0,
    epr: Annotated[
        bool,
        typer.Option(
            "--epr",
            help="Train the EPR baseline on round 0's scores: with --task, that task's alone -> models/epr/TASK/ "
            "(the paper's per-task baseline); without, every training task at once -> models/epr-multitask/ "
            "(the ablation).",
        ),
    ] = False,
    dr_target: Annotated[
        bool,
        typer.Option(
            "--dr-target",
            help="Train the DR-Target baseline: EPR's recipe with candidates ranked by the BM25 similarity of their "
            "targets (no LM); with --task -> models/dr-target/TASK/.",
        ),
    ] = False,
    task: Annotated[
        str | None,
        typer.Option(
            "--task", "-t", help="With --epr or --dr-target: the task whose baseline to train.", show_default=False
        ),
    ] = None,
    out: OutOpt = None,
    init: Annotated[
        Path | None,
        typer.Option(
            "--init",
            help="Start from this trained udr bi-encoder (default: the base encoder for round 0 and --epr, "
            "round N-1's model for round N).",
            show_default=False,
        ),
    ] = None,
    replace: ReplaceOpt = False,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """Train the bi-encoder on round N's scores -> models/rounds/round<N>/ or --out (resumable; runs under torchrun)."""
    from udr.stages.train import run_train_stage

    settings = load(params, set_)
    if epr and dr_target:
        raise UdrError("--epr and --dr-target exclude each other: one baseline at a time")
    baseline = "epr" if epr else "dr-target" if dr_target else None
    summary, out = run_train_stage(
        settings, round_, baseline=baseline, task=task, out=out, init=init, replace=replace, progress=show_progress()
    )
    if summary is not None:
        name = (
            (f"{task}'s {baseline} baseline" if task else f"multi-task {baseline}") if baseline else f"round {round_}"
        )
        console().print(
            f"trained {name}: {summary.steps} steps, loss {summary.loss_start:.4f} -> "
            f"{summary.loss_end:.4f}, {summary.seconds}s -> {shown_path(out, settings.root)}"
        )


@app.command("interpolate")
def interpolate_cmd(
    model: Annotated[Path, typer.Argument(help="The trained udr bi-encoder (a model folder).", show_default=False)],
    alpha: Annotated[
        float,
        typer.Option(
            "--alpha",
            help="Weight of the trained model: alpha * trained + (1 - alpha) * initial (0 to 1).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", help="The model folder to write (e.g. models/wise-0.5).", show_default=False)
    ],
    initial: Annotated[
        Path | None,
        typer.Option(
            "--initial",
            help="The initial encoder: a udr bi-encoder folder or a resolved base encoder (default: the "
            "project's models/base/encoder, the base the model was trained from).",
            show_default=False,
        ),
    ] = None,
    replace: ReplaceOpt = False,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """Interpolate a trained bi-encoder's weights with its initial encoder's (WiSE-FT) -> --out, a model folder
    that `udr index --model`, `udr evaluate --model` and serving read; its record names alpha and both sources."""
    from udr.retriever.interpolation import write_interpolation

    settings = load(params, set_)
    written = write_interpolation(
        model,
        alpha,
        out,
        initial=initial,
        base_dir=settings.paths.base_model("encoder"),
        base_spec=str(settings.models.encoder),
        params_file=settings.params_file,
        root=settings.root,
        replace=replace,
    )
    console().print(
        f"interpolated {shown_path(model, settings.root)} with alpha {alpha} -> {shown_path(written, settings.root)}"
    )


@app.command("mine")
def mine_cmd(
    round_: RoundOpt = 1, task: TaskOpt = None, params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None
) -> None:
    """Mine round N's candidates with round N-1's retriever -> data/candidates/round<N>/<task>.parquet."""
    from udr.stages.mine import run_mine

    settings = load(params, set_)
    settings.train.check_round(round_)
    for name in selected_tasks(settings, task):
        s = run_mine(settings, name, round_, progress=show_progress())
        console().print(
            f"mined {name} round {round_}: {s.queries} queries x top-{s.k}, {s.new} new "
            f"({s.new_fraction:.1%}), {s.previous_found_again:.1%} of the previous list found again, "
            f"{s.candidates} candidates in all ({s.seconds}s)"
        )


@app.command("index")
def index_cmd(
    task: TaskOpt = None,
    model: Annotated[
        Path | None,
        typer.Option(
            "--model",
            help="The bi-encoder to index (default: the last round's model); without --out it is indexed in place.",
            show_default=False,
        ),
    ] = None,
    out: OutOpt = None,
    replace: ReplaceOpt = False,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """Copy the last round's retriever to models/final/ (or --out) and embed every task's pool with it
    (-t: only these tasks' pools, into the folder an earlier `udr index` made)."""
    from udr.stages.index import run_index

    settings = load(params, set_)
    chosen = selected_tasks(settings, task, unseen=True) if task else None
    report = run_index(settings, tasks=chosen, model=model, out=out, replace=replace, progress=show_progress())
    pools = ", ".join(f"{t} {r['pool']}" for t, r in report["tasks"].items() if chosen is None or t in chosen)
    which = f"round {report['round']}'s model" if isinstance(report["round"], int) else f"model {report['round']}"
    console().print(f"indexed with {which} ({report['model']}): {pools}")


@app.command("evaluate")
def evaluate_cmd(
    method: Annotated[
        str,
        typer.Option(
            "--method",
            "-m",
            help="random, bm25, sbert, dr-target, epr, udr; METHOD+labels (e.g. udr+labels: with label-aware "
            "selection, on classification tasks); or encoder:FOLDER: any sentence-transformers or Hugging Face "
            "encoder (a folder of config.json and *.safetensors; a hub id org/name where online) as a dense "
            "retriever with its own pooling and normalisation, saved as --save-as or the folder's name.",
        ),
    ],
    task: TaskOpt = None,
    split: Annotated[
        str, typer.Option("--split", help="test, or validation (the rows set aside to choose settings on).")
    ] = "test",
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=1, help="A quick look: the first N rows of each task, printed, nothing written."),
    ] = None,
    model: Annotated[
        Path | None,
        typer.Option(
            "--model",
            help="The bi-encoder to evaluate (epr / udr; default: models/epr/TASK / models/final); with --model the "
            "results are printed, not written over the pipeline's (unless --save-as names them).",
            show_default=False,
        ),
    ] = None,
    save_as: Annotated[
        str | None,
        typer.Option(
            "--save-as",
            help="Save the results and predictions under this name instead of the method's (e.g. a named "
            "model on validation), for `udr exp compare`.",
            show_default=False,
        ),
    ] = None,
    instruction: Annotated[
        bool,
        typer.Option(
            "--instruction", help="With -m encoder:FOLDER: the task instruction leads queries and pool inputs."
        ),
    ] = False,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """In-context evaluation with one retriever -> metrics/<method>/<task>.json, data/predictions/<method>/
    (validation: metrics/validation/, data/predictions-validation/; --save-as NAME: NAME instead of
    <method>; --limit: printed only)."""
    from udr.paths import check_name_length
    from udr.stages.evaluate import run_evaluate

    if save_as is not None:
        check_name_length(save_as, "name")  # before the LM loads
    if split not in ("test", "validation"):
        raise UdrError(f"bad split {split!r}: expected test or validation")
    settings = load(params, set_)
    tasks = selected_tasks(settings, task, unseen=True) if task else None
    results = run_evaluate(
        settings,
        method,
        tasks=tasks,
        split=split,
        progress=show_progress(),
        limit=limit,
        model=model,
        save_as=save_as,
        instruction=instruction,
    )
    for name, r in results.items():
        graded = f" ({r['graded']['name']} {r['graded']['score']:.2f})" if r["graded"]["name"] != r["metric"] else ""
        ci = r["interval"]
        console().print(
            f"{method} on {name}: {r['metric']} {r['score']:.2f} [95% CI {ci['low']:.2f}, {ci['high']:.2f}, "
            f"{ci['method']}]{graded} over {r['n']} {split} examples, "
            f"{r['demos_mean']:.1f} demonstrations, {r['total_seconds']}s"
            + (
                f" (--limit {limit}: the first {r['n']} rows, a quick look, not a comparison of methods; not saved)"
                if limit
                else f" (saved as {r['saved_as']})"
                if r.get("saved_as")
                else " (--model: not saved)"
                if model
                else ""
            )
        )


@app.command("report")
def report_cmd(params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None) -> None:
    """Collect metrics/<method>/*.json -> metrics/summary.json, metrics/results.md and the shots plot."""
    from udr.stages.report import run_report

    settings = load(params, set_)
    run_report(settings)
    print(settings.paths.results.read_text(), end="")


@app.command("show")
def show_cmd(
    method: Annotated[
        str,
        typer.Option(
            "--method",
            "-m",
            help="random, bm25, sbert, dr-target, epr, udr, METHOD+labels, or a name saved with evaluate --save-as.",
        ),
    ],
    task: Annotated[str, typer.Option("--task", "-t", help="The task whose examples to show.")],
    n: Annotated[int, typer.Option("-n", help="How many examples (the first ones).")] = 3,
    wrong: Annotated[bool, typer.Option("--wrong", help="Only examples the LM got wrong.")] = False,
    split: Annotated[str, typer.Option("--split", help="test, or validation.")] = "test",
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines (one per example).")] = False,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """An evaluation's examples: each input, the demonstrations in its prompt, the gold answer and the prediction."""
    from udr.config import METHODS
    from udr.evaluation.saved_names import check_saved_name
    from udr.paths import split_labelled
    from udr.project.show import read_examples, select_examples

    if split_labelled(method)[0] not in METHODS:  # a method, with or without label-aware selection
        check_saved_name(method)  # a name `udr evaluate --save-as` can write
    if split not in ("test", "validation"):
        raise UdrError(f"bad split {split!r}: expected test or validation")
    settings = load(params, set_)
    examples = read_examples(settings, method, task, split)
    shown = select_examples(examples, n, wrong=wrong)
    if as_json:
        for e in shown:
            print(json.dumps(e.to_dict(), ensure_ascii=False))
        return
    from rich.markup import escape

    out = console_out()
    right = sum(e.correct for e in examples)
    out.print(
        f"[bold]{escape(method)} on {escape(task)}[/] ({split}): {len(shown)} of {len(examples)} examples"
        f"{' the LM got wrong' if wrong else ''}; {right} of {len(examples)} predictions equal the gold answer. "
        f"Demonstrations in prompt order ({settings.evaluate.order})."
    )
    for e in shown:
        mark = "[green]right[/]" if e.correct else "[red]wrong[/]"
        out.print(f"\n[bold]example {e.id}[/] ({mark})")
        for i, (pid, x, y) in enumerate(e.demonstrations, 1):
            out.print(f"  {i:>2}. [dim]pool {pid}[/]  {escape(x)}  ->  {escape(y)}")
        out.print(f"  [bold]input[/]       {escape(e.input)}")
        out.print(f"  [bold]gold[/]        {escape(e.gold)}")
        out.print(f"  [bold]prediction[/]  {escape(e.prediction)}")


@app.command("rounds")
def rounds_cmd(params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None) -> None:
    """Per round: training loss start/end, mined candidates that were new, mean LM score of the best
    candidate, stage seconds (read from the stages' outputs)."""
    from rich.console import Console
    from rich.table import Table

    from udr.project.rounds import rounds_table

    settings = load(params, set_)
    table = Table(
        "round",
        "task",
        "pairs",
        "scored",
        "best LM score (all)",
        "retrieved: best / mean",
        "mined new",
        "loss start",
        "loss end",
        "score s",
        "mine s",
        "train s",
    )

    def fmt(v, spec=""):
        return "-" if v is None else format(v, spec)

    for r in rounds_table(settings):
        table.add_row(
            str(r["round"]),
            r["task"],
            fmt(r["pairs"]),
            fmt(r["scored"]),
            fmt(r["top1_score_mean"], ".4f"),
            "-" if not r["retrieved"] else f"{r['retrieved'][0]:.4f} / {r['retrieved'][1]:.4f}",
            fmt(r["mined_new_fraction"], ".1%"),
            fmt(r.get("train_loss_start"), ".3f"),
            fmt(r.get("train_loss_end"), ".3f"),
            fmt(r["score_seconds"], ".0f"),
            fmt(r["mine_seconds"], ".0f"),
            fmt(r.get("train_seconds"), ".0f"),
        )
    Console().print(table)  # the report itself goes to stdout


@app.command("init-task")
def init_task_cmd(
    name: Annotated[str, typer.Argument(help="The new task's name (1-64 letters, digits, _ . -).")],
    from_: Annotated[
        Path, typer.Option("--from", help="The task's rows: a .csv, .tsv, .jsonl or .parquet file.", show_default=False)
    ],
    test: Annotated[
        Path | None,
        typer.Option(
            "--test",
            help="The task's test rows, a file of the same columns (any of the same formats); default: prepare "
            "carves prepare.test_fraction off --from.",
            show_default=False,
        ),
    ] = None,
    folder: Annotated[
        Path | None,
        typer.Option(
            "--dir", help="The workspace folder (default: workspaces/NAME beside the params file).", show_default=False
        ),
    ] = None,
    input_column: InputColumnOpt = None,
    label_column: LabelColumnOpt = None,
    instruction: InstructionOpt = None,
    metric: TaskMetricOpt = None,
    max_train: Annotated[int, typer.Option("--max-train", min=1, help="Pool rows kept (prepare's cap).")] = 1000,
    max_test: Annotated[int, typer.Option("--max-test", min=1, help="Test rows kept (prepare's cap).")] = 200,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """Make a workspace for your own classification task: a folder with its own params.yaml and the task's
    declaration and data, whose runs write their data, models and metrics there and leave the project's
    pipeline as it is; its models/base and models/final link to the project's."""
    from udr.project.workspace import WorkspaceRequest, init_workspace

    settings = load(params, set_)
    request = WorkspaceRequest(
        name=name,
        source=from_,
        folder=folder if folder is not None else settings.root / "workspaces" / name,
        test=test,
        input_column=input_column,
        label_column=label_column,
        instruction=instruction,
        metric=metric,
        max_train=max_train,
        max_test=max_test,
    )
    ws = init_workspace(settings, request)
    where = shown_path(ws.folder, Path.cwd())
    rows = f"{ws.rows} rows" if ws.test_rows is None else f"{ws.rows} rows + {ws.test_rows} test rows"
    console().print(
        f"task {name}: {rows}, input '{ws.input}', label '{ws.label}' ({ws.labels} labels) -> {where}/ "
        f"(params.yaml, data/tasks/{name}.yaml); next: cd {where} && udr prepare"
    )
