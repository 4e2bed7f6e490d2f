"""The `udr` command line: one thin command per pipeline stage.

Every command reads params.yaml (`--params`) with `--set key.path=value` overrides, validated by
:mod:`udr.config`. Heavy libraries are imported inside commands so `udr --help` stays fast.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from udr.errors import UdrError

app = typer.Typer(
    name="udr",
    help="Unified Demonstration Retriever: prepare data, score with an LM, train, mine, retrieve.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ParamsOpt = Annotated[Path, typer.Option("--params", "-p", help="Parameters file.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-S", help="Override a parameter: key.path=value (repeatable)."),
]
TaskOpt = Annotated[
    list[str] | None,
    typer.Option("--task", "-t", help="Only this task (repeatable); default: every task in params."),
]


def _parse_round(value: str) -> int:
    text = str(value).removeprefix("it")
    if not text.isdigit():
        raise typer.BadParameter(f"expected a round number such as 1 or it1, got {value!r}")
    return int(text)


IterationOpt = Annotated[
    int,
    typer.Option(
        "--iteration",
        "-i",
        parser=_parse_round,
        metavar="N|itN",
        help="Round of Algorithm 1 (0 = BM25 candidates); 1 or it1.",
    ),
]


def _console():
    from rich.console import Console

    return Console(stderr=True)


def _settings(params: Path, overrides: list[str] | None):
    from udr.config import load_settings

    return load_settings(params, overrides or [])


def _selected_tasks(settings, tasks: list[str] | None) -> list[str]:
    from udr.data.tasks import get_task

    chosen = tasks or settings.task_names()
    for name in chosen:
        get_task(name)
        if name not in settings.prepare.tasks:
            raise UdrError(f"task '{name}' is not in prepare.tasks of the params file; add it there first")
    return chosen


@app.command("tasks")
def tasks_cmd(params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None) -> None:
    """Print the task registry: family, metric, source, and whether its data is on this machine."""
    from rich.console import Console
    from rich.table import Table

    from udr.data.prepare import mirror_available
    from udr.data.tasks import BuiltinSource, MirrorSource, all_tasks

    configured: set[str] = set()
    data_dir = None
    try:
        settings = _settings(params, set_)
        configured, data_dir = set(settings.task_names()), settings.data_dir()
    except UdrError as exc:
        if params.exists():
            raise
        import os

        from udr.config import DATA_DIR_ENV

        data_dir = Path(os.environ.get(DATA_DIR_ENV, "../shared/data"))
        _console().print(f"[yellow]note:[/] {exc}; showing availability under {data_dir}")
    table = Table(title=f"udr tasks (data: {data_dir})")
    for col in ("task", "family", "group", "metric", "source", "available", "in params"):
        table.add_column(col)
    for task in all_tasks():
        src = task.source
        if isinstance(src, MirrorSource):
            ok = mirror_available(data_dir, src)
            avail = "[green]yes[/]" if ok else "[red]no[/]"
        elif isinstance(src, BuiltinSource):
            avail = "[green]yes[/] (built)"
        else:
            avail = "[yellow]hub only[/]"
        table.add_row(
            task.name,
            task.family,
            task.group,
            task.metric,
            src.describe(),
            avail,
            "yes" if task.name in configured else "",
        )
    Console(width=200).print(table)


@app.command("prepare")
def prepare_cmd(task: TaskOpt = None, params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None) -> None:
    """Write data/prepared/<task>/{train,test}.parquet (+ meta.json) for the tasks in params."""
    from udr.data.prepare import prepare_task, prepared_dir
    from udr.data.tasks import get_task

    settings = _settings(params, set_)
    console = _console()
    for name in _selected_tasks(settings, task):
        caps = settings.prepare.tasks[name]
        start = time.perf_counter()
        meta = prepare_task(
            get_task(name),
            settings.data_dir(),
            prepared_dir(settings.root, name),
            seed=settings.seed,
            test_fraction=settings.prepare.test_fraction,
            max_train=caps.max_train,
            max_test=caps.max_test,
        )
        c = meta["counts"]
        console.print(
            f"prepared {name}: train {c['train']['kept']}/{c['train']['available']}, "
            f"test {c['test']['kept']}/{c['test']['available']} "
            f"({meta['split']} split, {time.perf_counter() - start:.1f}s)"
        )


@app.command("models")
def models_cmd(
    role: Annotated[list[str] | None, typer.Option("--role", "-r", help="lm and/or encoder (default both).")] = None,
    force: Annotated[bool, typer.Option(help="Resolve again even if cached.")] = False,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """Resolve the model specs in params to safetensors directories under models/base/<role>/."""
    from udr.lm.models import resolve_model

    settings = _settings(params, set_)
    roles = {"lm": ("lm", settings.models.lm), "encoder": ("encoder", settings.models.encoder)}
    for name in role or list(roles):
        if name not in roles:
            raise UdrError(f"unknown model role '{name}'; expected one of: {', '.join(roles)}")
        kind, spec = roles[name]
        start = time.perf_counter()
        path = resolve_model(spec, settings.root / "models" / "base" / name, kind=kind, force=force)
        _console().print(f"model {name}: {spec} -> {path} ({time.perf_counter() - start:.1f}s)")


@app.command("candidates")
def candidates_cmd(task: TaskOpt = None, params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None) -> None:
    """Iteration 0: BM25 top-K candidates for every train query -> data/candidates/it0/<task>.parquet."""
    from udr.data.prepare import read_prepared
    from udr.data.tasks import get_task
    from udr.feedback.bm25 import bm25_candidates, candidate_field
    from udr.feedback.score import candidates_path
    from udr.util.files import write_parquet_atomic

    settings = _settings(params, set_)
    cfg = settings.candidates
    for name in _selected_tasks(settings, task):
        t = get_task(name)
        start = time.perf_counter()
        train = read_prepared(settings.root, name, "train")
        frame = bm25_candidates(train, t.family, cfg.field, cfg.k, progress=sys.stderr.isatty())
        out = candidates_path(settings.root, 0, name)
        write_parquet_atomic(frame, out)
        _console().print(
            f"candidates {name}: {len(train)} queries x top-{cfg.k} by BM25 over "
            f"{candidate_field(t.family, cfg.field)}s -> {out.relative_to(settings.root)} ({time.perf_counter() - start:.1f}s)"
        )


@app.command("score")
def score_cmd(
    iteration: IterationOpt = 0,
    task: TaskOpt = None,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """Score candidates with the LM -> data/scores/it<N>/<task>.parquet (resumable; runs under torchrun)."""
    from udr.feedback.score import run_score

    settings = _settings(params, set_)
    for name in _selected_tasks(settings, task):
        summary = run_score(settings, name, iteration, progress=sys.stderr.isatty())
        if summary is not None:
            _console().print(
                f"scored {name} it{iteration}: {summary.queries} queries, {summary.pairs} pairs "
                f"({summary.reused} reused, {summary.scored} scored), {summary.pairs_per_s} pairs/s, "
                f"{summary.tokens_per_s} tok/s, padding {summary.padding_fraction:.1%}, {summary.seconds}s "
                f"[{summary.device}/{summary.dtype}, {summary.world_size} process(es)]"
            )


@app.command("train")
def train_cmd(
    iteration: IterationOpt = 0,
    epr: Annotated[
        bool, typer.Option("--epr", help="Train the EPR baseline on round 0's scores -> models/epr/.")
    ] = False,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """Train the bi-encoder on round N's scores -> models/rounds/it<N>/ (resumable; runs under torchrun)."""
    from udr.evaluation.baselines import method_model_dir
    from udr.retriever.index import round_model_dir
    from udr.retriever.training import epr_settings, run_train

    settings = _settings(params, set_)
    _check_round(settings, iteration)
    root = settings.root
    init = root / "models" / "base" / "encoder" if iteration == 0 or epr else round_model_dir(root, iteration - 1)
    if epr:
        if iteration != 0:
            raise UdrError("the EPR baseline trains on round 0's scores only: drop --iteration")
        settings, out, log_dir, name = epr_settings(settings), method_model_dir(root, "epr"), "epr", "EPR baseline"
    else:
        out, log_dir, name = round_model_dir(root, iteration), f"it{iteration}", f"round {iteration}"
    summary = run_train(
        settings,
        0 if epr else iteration,
        init=init,
        out=out,
        log_dir=root / "metrics" / "train" / log_dir,
        progress=sys.stderr.isatty(),
    )
    if summary is not None:
        _console().print(
            f"trained {name}: {summary.steps} steps, loss {summary.loss_start:.4f} -> "
            f"{summary.loss_end:.4f}, {summary.seconds}s -> {out.relative_to(root)}"
        )


@app.command("mine")
def mine_cmd(
    iteration: IterationOpt = 1, task: TaskOpt = None, params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None
) -> None:
    """Mine round N's candidates with round N-1's retriever -> data/candidates/it<N>/<task>.parquet."""
    from udr.retriever.mining import run_mine

    settings = _settings(params, set_)
    _check_round(settings, iteration)
    for name in _selected_tasks(settings, task):
        s = run_mine(settings, name, iteration, progress=sys.stderr.isatty())
        _console().print(
            f"mined {name} it{iteration}: {s.queries} queries x top-{s.k}, {s.new} new "
            f"({s.new_fraction:.1%}), {s.previous_found_again:.1%} of the previous list found again, "
            f"{s.candidates} candidates in all ({s.seconds}s)"
        )


@app.command("evaluate")
def evaluate_cmd(
    method: Annotated[str, typer.Option("--method", "-m", help="random, bm25, sbert, epr or udr.")],
    task: TaskOpt = None,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """In-context evaluation with one retriever -> metrics/<method>/<task>.json, data/predictions/<method>/."""
    from udr.evaluation.evaluate import run_evaluate

    settings = _settings(params, set_)
    for name, r in run_evaluate(
        settings, method, tasks=_selected_tasks(settings, task) if task else None, progress=sys.stderr.isatty()
    ).items():
        graded = f" ({r['graded']['name']} {r['graded']['score']:.2f})" if r["graded"]["name"] != r["metric"] else ""
        _console().print(
            f"{method} on {name}: {r['metric']} {r['score']:.2f}{graded} over {r['n']} test examples, "
            f"{r['demos_mean']:.1f} demonstrations, {r['total_seconds']}s"
        )


@app.command("report")
def report_cmd(params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None) -> None:
    """Collect metrics/<method>/*.json -> metrics/summary.json, metrics/results.md and the shots plot."""
    from udr.evaluation.report import run_report

    settings = _settings(params, set_)
    run_report(settings)
    print((settings.root / "metrics" / "results.md").read_text(), end="")


@app.command("index")
def index_cmd(params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None) -> None:
    """Copy the last round's retriever to models/final/ and embed every task's pool with it."""
    from udr.retriever.index import run_index

    settings = _settings(params, set_)
    report = run_index(settings, progress=sys.stderr.isatty())
    pools = ", ".join(f"{t} {r['pool']}" for t, r in report["tasks"].items())
    _console().print(f"indexed with round {report['round']}'s model ({report['model']}): {pools}")


@app.command("rounds")
def rounds_cmd(params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None) -> None:
    """Per round: training loss start/end, mined candidates that were new, mean LM score of the best
    candidate, stage seconds (read from the stages' outputs)."""
    from rich.console import Console
    from rich.table import Table

    from udr.retriever.rounds import rounds_table

    settings = _settings(params, set_)
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


@app.command("retrieve")
def retrieve_cmd(
    query: Annotated[
        str | None, typer.Argument(help="The text to find demonstrations for.", show_default=False)
    ] = None,
    task: Annotated[
        str | None,
        typer.Option(
            "--task", "-t", help="The task whose pool to search (with --pool: your rows follow this task's shape)."
        ),
    ] = None,
    k: Annotated[int, typer.Option("-k", "--top-k", help="How many demonstrations, most similar first.")] = 8,
    as_json: Annotated[
        bool, typer.Option("--json", help="JSON lines (one per demonstration) instead of a table.")
    ] = False,
    input_file: Annotated[
        Path | None, typer.Option("--input", help='Batch: a JSON-lines file of {"query": ..., "task": optional}.')
    ] = None,
    output_file: Annotated[
        Path | None,
        typer.Option("--output", help="Batch results, one JSON line per query in input order (default: stdout)."),
    ] = None,
    model: Annotated[
        Path | None,
        typer.Option(
            "--model",
            help="A udr bi-encoder directory (default: models/final, the pipeline's final model)",
            show_default=False,
        ),
    ] = None,
    prompt: Annotated[
        bool,
        typer.Option(
            "--prompt",
            help="Print the in-context prompt (the demonstrations, "
            "most similar last, then the query) ready to send to an LM.",
        ),
    ] = False,
    pool: Annotated[
        Path | None,
        typer.Option("--pool", help="Your own demonstrations (JSON lines) instead of the task's prepared pool."),
    ] = None,
    instruction: Annotated[
        str | None, typer.Option("--instruction", help="The task instruction of your own pool (default: --task's).")
    ] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
) -> None:
    """Retrieve demonstrations for a query (or a file of queries) with a trained retriever."""
    if (query is None) == (input_file is None):
        raise UdrError("give one QUERY or --input FILE (not both)")
    if output_file is not None and input_file is None:
        raise UdrError("--output goes with --input (a batch); a single query prints to the terminal")
    if instruction is not None and pool is None:
        raise UdrError("--instruction goes with --pool (your own demonstrations)")
    if query is not None:
        from udr.serving.api import check_query

        check_query(query)
    from udr.serving.api import Retriever

    interactive = sys.stderr.isatty()
    retriever = Retriever.load(model, device=device, progress=interactive)
    if pool is not None:
        task = retriever.add_pool(pool, instruction=instruction, task=task)
    if input_file is not None:
        from udr.serving.query_file import read_queries, retrieve_lines
        from udr.util.files import write_text_atomic

        lines = retrieve_lines(retriever, read_queries(input_file, task), k, prompt=prompt, progress=interactive)
        text = "".join(line + "\n" for line in lines)
        if output_file is None:
            sys.stdout.write(text)
        else:
            write_text_atomic(output_file, text)
            _console().print(f"{len(lines)} queries -> {output_file}")
        return
    task = retriever.resolve_task(task)
    demos = retriever.retrieve(query, task=task, k=k)
    text = retriever.prompt(query, demos, task=task) if prompt else None
    if as_json:
        import json

        for rank, d in enumerate(demos, 1):
            print(json.dumps({"rank": rank, **d.to_dict()}, ensure_ascii=False))
        if text is not None:
            print(json.dumps({"prompt": text}, ensure_ascii=False))
    elif text is not None:
        print(text)
    else:
        _print_demonstrations(query, task, demos)


def _print_demonstrations(query: str, task: str, demos) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        "#",
        "score",
        "input",
        "output",
        "pool id",
        title=f"{task}: {len(demos)} demonstrations for {query!r}, most similar first",
        title_justify="left",
    )
    for rank, d in enumerate(demos, 1):
        table.add_row(str(rank), f"{d.score:.3f}", d.input, d.output, str(d.pool_id))
    Console().print(table)


exp_app = typer.Typer(
    help="DVC experiments: single runs, sweeps, the comparison table, the paper's analyses.", no_args_is_help=True
)
app.add_typer(exp_app, name="exp")
ExpSetOpt = Annotated[
    list[str] | None, typer.Option("--set", "-S", help="key.path=value (sweep: v1,v2,...), repeatable.")
]
ExpTargets = Annotated[
    list[str] | None, typer.Argument(help="Stages to run (default: the whole pipeline).", show_default=False)
]
DryOpt = Annotated[bool, typer.Option("--dry", help="Print the dvc commands instead of running them.")]


@exp_app.command("run")
def exp_run_cmd(
    name: Annotated[str, typer.Argument(help="Experiment name.")],
    targets: ExpTargets = None,
    set_: ExpSetOpt = None,
    dry: DryOpt = False,
) -> None:
    """One experiment: `dvc exp run -n NAME -S ...` in the workspace."""
    from udr.experiments.analyses import exp_run_args, run_dvc

    run_dvc(exp_run_args(name, set_ or [], targets or []), Path("."), dry=dry)


@exp_app.command("sweep")
def exp_sweep_cmd(
    targets: ExpTargets = None,
    set_: ExpSetOpt = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Experiments at a time.")] = 1,
    dry: DryOpt = False,
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """A grid (`-S key=v1,v2`): queued with `dvc exp run --queue`, run with `dvc queue start`; waits."""
    from udr.experiments.analyses import exp_run_args, link_data_for_temp_runs, run_dvc, wait_for_queue

    if not set_:
        raise UdrError("a sweep needs at least one -S key=v1,v2")
    if not dry:
        link_data_for_temp_runs(Path("."), _settings(params, None))
    run_dvc(exp_run_args(None, set_, targets or [], queue=True), Path("."), dry=dry)
    run_dvc(["queue", "start", "-j", str(jobs)], Path("."), dry=dry)
    if not dry:
        wait_for_queue(Path("."))
        run_dvc(["queue", "status"], Path("."))


@exp_app.command("show")
def exp_show_cmd(
    param: Annotated[
        list[str] | None,
        typer.Option("--param", "-P", help="A params.yaml key to show (default: those that differ)."),
    ] = None,
    metric: Annotated[
        list[str] | None,
        typer.Option("--metric", "-M", help="A metrics/summary.json key (default: UDR's averages)."),
    ] = None,
    markdown: Annotated[bool, typer.Option("--md", help="A Markdown table.")] = False,
) -> None:
    """The experiments side by side: chosen params and metrics (from `dvc exp show --json`)."""
    import json

    from udr.experiments.analyses import comparison, experiment_rows, markdown_table, run_dvc

    rows = experiment_rows(json.loads(run_dvc(["exp", "show", "--json"], Path("."), capture=True) or "[]"))
    header, cells = comparison(rows, param, metric)
    if markdown:
        print(markdown_table(header, cells), end="")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table()
    changed = header[1] == "changed params"
    for i, name in enumerate(header):
        if i == 0:
            table.add_column(name, overflow="fold", max_width=24)
        elif i == 1 and changed:
            table.add_column(name, overflow="fold", ratio=1)
        else:  # metrics (and chosen params) stay on one line
            table.add_column(name, no_wrap=True)
    for row in cells:
        table.add_row(*([row[0], row[1].replace(" ", "\n"), *row[2:]] if changed else row))
    Console(width=80).print(table)
    _console().print(
        "metrics/summary.json comes from `udr report`; experiments that stop at evaluate@udr "
        "(ablations, order, transfer) keep their tables in metrics/ablations.md, order.md and transfer.md"
    )


OnlyOpt = Annotated[list[str] | None, typer.Option("--only", help="Run just these (repeatable).")]
MissingOpt = Annotated[bool, typer.Option("--missing", help="Run only those with no saved DVC experiment yet.")]


@exp_app.command("ablations")
def exp_ablations_cmd(only: OnlyOpt = None, missing: MissingOpt = False, dry: DryOpt = False) -> None:
    """The paper's ablations (Table 3) as named experiments -> metrics/ablations.md."""
    from udr.experiments.analyses import ablation_experiments

    tasks = _settings(Path("params.yaml"), None).task_names()
    _run_analysis(
        ablation_experiments(tasks),
        only,
        missing,
        dry,
        "ablations",
        "UDR (default configuration, HEAD)",
        "The paper's Table 3 on this configuration: each row retrains UDR with one change and "
        "evaluates it (graded metric, percent). The single-task row is one round-0 retriever per "
        "task; compare it with the (multi-task) round-0 row above it.",
    )


@exp_app.command("order")
def exp_order_cmd(missing: MissingOpt = False, dry: DryOpt = False) -> None:
    """Demonstration order (Table 6): UDR on two tasks, ascending / descending / random -> metrics/order.md."""
    from udr.experiments.analyses import ORDER_TASKS, order_experiments

    _run_analysis(
        order_experiments(),
        None,
        missing,
        dry,
        "order",
        "ascending (HEAD's committed run)",
        f"The paper's Table 6 on this configuration: UDR's demonstrations in three orders on "
        f"{' and '.join(ORDER_TASKS)} (graded metric, percent).",
        tasks=ORDER_TASKS,
    )


@exp_app.command("transfer")
def exp_transfer_cmd(
    lm: Annotated[str, typer.Option("--lm", help="The other inference LM (a model spec).")] = "",
    missing: MissingOpt = False,
    dry: DryOpt = False,
) -> None:
    """Transfer across LMs (Table 4): BM25, EPR and UDR with another inference LM -> metrics/transfer.md."""
    from udr.experiments.analyses import (
        TRANSFER_LM,
        TRANSFER_METHODS,
        TRANSFER_TASKS,
        method_scores,
        run_named,
        saved_experiments,
        transfer_experiment,
        transfer_table,
    )
    from udr.util.files import write_text_atomic

    root = Path(".")
    settings = _settings(root / "params.yaml", None)
    lm = lm or TRANSFER_LM
    exp = transfer_experiment(lm)
    if not (missing and exp.name in saved_experiments(root)):
        run_named(root, [exp], dry=dry)
    if dry:
        return
    base = [
        (f"{settings.models.lm} (scored the candidates; HEAD)", m, method_scores(root, m, TRANSFER_TASKS, rev="HEAD"))
        for m in TRANSFER_METHODS
    ]
    rev = saved_experiments(root).get(exp.name)
    other = [
        (
            f"{lm} (`{exp.name}`{f', {rev[:7]}' if rev else ''})",
            m,
            method_scores(root, m, TRANSFER_TASKS, rev=rev) if rev else None,
        )
        for m in TRANSFER_METHODS
    ]
    out = root / "metrics" / "transfer.md"
    write_text_atomic(
        out,
        "# Transfer across LMs\n\nThe paper's Table 4 on this configuration: the retrievers trained "
        f"with {settings.models.lm}'s feedback, evaluated with another inference LM on "
        f"{', '.join(TRANSFER_TASKS)} (graded metric, percent; same prompts, context and test sets).\n\n"
        f"Made by `udr exp transfer`: `dvc exp run -n {exp.name} "
        f"{' '.join('-S ' + o for o in exp.overrides)} {' '.join(exp.targets)}`.\n\n"
        + transfer_table(base + other, TRANSFER_TASKS),
    )
    _console().print(f"-> {out}")


def _run_analysis(experiments, only, missing, dry, name, baseline_label, intro, tasks=None) -> None:
    from udr.experiments.analyses import method_scores, results_table, run_named, saved_experiments
    from udr.util.files import write_text_atomic

    chosen = [e for e in experiments if not only or e.name in only]
    unknown = set(only or []) - {e.name for e in experiments}
    if unknown:
        raise UdrError(
            f"unknown experiment {', '.join(sorted(unknown))}; known: {', '.join(e.name for e in experiments)}"
        )
    root = Path(".")
    if missing:
        done = saved_experiments(root)
        chosen = [e for e in chosen if e.name not in done]
    baseline = method_scores(root, "udr", tasks, rev="HEAD")
    out = root / "metrics" / f"{name}.md"

    def write():
        # Every row reads its named DVC experiment, so runs made by separate invocations add up.
        saved = saved_experiments(root)
        results = {e.name: method_scores(root, "udr", tasks, rev=saved[e.name]) for e in experiments if e.name in saved}
        runs = ", ".join(f"{e.name} {saved[e.name][:7]}" for e in experiments if e.name in saved) or "none yet"
        write_text_atomic(
            out,
            f"# {name.capitalize()}\n\n{intro}\n\nMade by `udr exp {name}`: each row is the "
            "DVC experiment of that name, `dvc exp run -n NAME -S ... evaluate@udr` "
            f"(`udr exp {name} --dry` prints them; `dvc exp show` lists them). "
            f"Experiment commits: {runs}.\n\n" + results_table(baseline, results, experiments, baseline_label),
        )

    run_named(root, chosen, dry=dry, on_done=write)  # the table after each experiment
    if not dry:
        if not chosen:  # nothing ran (--missing): the table from what is saved
            write()
        _console().print(f"-> {out}")


def _check_round(settings, iteration: int) -> None:
    rounds = settings.train.rounds
    if iteration not in rounds:
        raise UdrError(f"bad iteration {iteration}: params define rounds {rounds} (train.later_rounds)")


def main() -> None:
    """Console entry point: UdrError becomes one line on stderr and exit status 1."""
    try:
        app()
    except UdrError as exc:
        print(f"udr: error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("udr: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
