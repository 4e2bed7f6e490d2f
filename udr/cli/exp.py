"""`udr exp`: DVC experiments, sweeps, the comparison table and the paper's analyses (thin: the work is
in :mod:`udr.experiments`).

Imports of rich and of the udr.experiments and udr.project modules are inside the functions that use them, to keep
`udr`'s start (`udr --help`) light.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from udr.cli.app import ParamsOpt, SetOpt, TaskOpt, app, console, load
from udr.errors import UdrError

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
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """One experiment: `dvc exp run -n NAME -S ...` in the workspace."""
    from udr.experiments.dvc import check_overrides, exp_run_args, run_dvc

    args = exp_run_args(name, set_ or [], targets or [])
    check_overrides(params, set_ or [])
    run_dvc(args, Path("."), dry=dry)


@exp_app.command("sweep")
def exp_sweep_cmd(
    targets: ExpTargets = None,
    set_: ExpSetOpt = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Experiments at a time.")] = 1,
    dry: DryOpt = False,
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """A grid (`-S key=v1,v2`): queued with `dvc exp run --queue`, run with `dvc queue start`; waits."""
    from udr.experiments.dvc import check_overrides, exp_run_args, run_queued

    if not set_:
        raise UdrError("a sweep needs at least one -S key=v1,v2")
    args = exp_run_args(None, set_, targets or [], queue=True)
    check_overrides(params, set_, sweep=True)
    run_queued(Path("."), [args], None if dry else load(params, None), jobs=jobs, dry=dry)


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
    from udr.experiments.dvc import run_dvc
    from udr.experiments.tables import comparison, experiment_rows, markdown_table

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
    console().print(
        "metrics/summary.json comes from `udr report`; experiments that stop at evaluate@udr "
        "(ablations, order, transfer) keep their tables in metrics/ablations.md, order.md and transfer.md"
    )


OnlyOpt = Annotated[list[str] | None, typer.Option("--only", help="Run just these (repeatable).")]
MissingOpt = Annotated[bool, typer.Option("--missing", help="Run only those with no saved DVC experiment yet.")]
SeedOpt = Annotated[
    list[int] | None, typer.Option("--seed", min=0, help="An extra training seed (default 1 and 2), repeatable.")
]


@exp_app.command("ablations")
def exp_ablations_cmd(only: OnlyOpt = None, missing: MissingOpt = False, dry: DryOpt = False) -> None:
    """The paper's ablations (Table 3) as named experiments -> metrics/ablations.md."""
    from udr.experiments.analyses import ablation_experiments, run_analysis

    tasks = load(Path("params.yaml"), None).task_names()
    experiments = ablation_experiments(tasks)
    # The trained tasks only (the paper's Table 3): unseen tasks have no single-task retriever to compare.
    out = run_analysis(Path("."), "ablations", experiments, only=only, missing=missing, dry=dry, tasks=tasks)
    if not dry:
        console().print(f"-> {out}")


@exp_app.command("order")
def exp_order_cmd(missing: MissingOpt = False, dry: DryOpt = False) -> None:
    """Demonstration order (Table 6): UDR on two tasks, ascending / descending / random -> metrics/order.md."""
    from udr.experiments.analyses import ORDER_TASKS, order_experiments, run_analysis

    out = run_analysis(Path("."), "order", order_experiments(), missing=missing, dry=dry, tasks=ORDER_TASKS)
    if not dry:
        console().print(f"-> {out}")


@exp_app.command("transfer")
def exp_transfer_cmd(
    lm: Annotated[str, typer.Option("--lm", help="The other inference LM (a model spec).")] = "",
    missing: MissingOpt = False,
    dry: DryOpt = False,
) -> None:
    """Transfer across LMs (Table 4): BM25, EPR and UDR with another inference LM -> metrics/transfer.md."""
    from udr.experiments.analyses import TRANSFER_LM, run_transfer

    scoring_lm = load(Path("params.yaml"), None).models.lm
    out = run_transfer(Path("."), scoring_lm, lm or TRANSFER_LM, missing=missing, dry=dry)
    if out is not None:
        console().print(f"-> {out}")


@exp_app.command("signal")
def exp_signal_cmd(params: ParamsOpt = Path("params.yaml")) -> None:
    """Which trained tasks carry signal with this LM (BM25 or SBERT resolved above random on validation)
    -> metrics/signal.md; the seed table's claims rest on them."""
    from udr.experiments.signal import write_signal

    settings = load(params, None)
    signal = write_signal(settings, settings.method_tasks("epr"))
    with_signal = [t for t, row in signal["tasks"].items() if row["signal"]]
    console().print(f"tasks with signal: {', '.join(with_signal) or 'none'} -> metrics/signal.md")


@exp_app.command("seeds")
def exp_seeds_cmd(
    seed: SeedOpt = None,
    only: OnlyOpt = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Experiments at a time.")] = 1,
    missing: MissingOpt = False,
    table: Annotated[bool, typer.Option("--table", help="Only write the table from the saved experiments.")] = False,
    dry: DryOpt = False,
) -> None:
    """UDR and the per-task DR-Target and EPR with more training seeds (queued DVC experiments) -> metrics/seeds.md."""
    from udr.experiments.seeds import SEEDS, run_seeds, write_seeds

    seeds = tuple(seed or SEEDS)
    if table and (only or missing or dry):
        raise UdrError("--table writes the table of every saved seed; --only, --missing and --dry choose what runs")
    if table:
        out = write_seeds(Path("."), seeds)
    else:
        out = run_seeds(Path("."), seeds, only=only, jobs=jobs, missing=missing, dry=dry)
    if out is not None:
        console().print(f"-> {out}")


@exp_app.command("lofo")
def exp_lofo_cmd(
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Experiments at a time.")] = 1,
    missing: MissingOpt = False,
    table: Annotated[bool, typer.Option("--table", help="Only write the table from the saved experiments.")] = False,
    dry: DryOpt = False,
) -> None:
    """Transfer one family at a time: UDR trained without each family with signal, tested on it against
    BM25 and SBERT (queued DVC experiments) -> metrics/lofo.md."""
    from udr.experiments.lofo import run_lofo, write_lofo

    out = write_lofo(Path(".")) if table else run_lofo(Path("."), jobs=jobs, missing=missing, dry=dry)
    if out is not None:
        console().print(f"-> {out}")


@exp_app.command("suite")
def exp_suite_cmd(
    profile: Annotated[Path, typer.Option("--profile", help="The params file to reproduce.")] = Path(
        "profiles/suite.yaml"
    ),
    work: Annotated[Path, typer.Option("--work", help="Its git worktree (made at HEAD where missing).")] = Path(
        "build/suite"
    ),
    name: Annotated[str, typer.Option("--name", "-n", help="The DVC experiment it is saved as.")] = "suite",
    seed: SeedOpt = None,
    table: Annotated[bool, typer.Option("--table", help="Only write the table from the saved experiment.")] = False,
    progress: Annotated[
        bool, typer.Option("--progress", help="Only show what the saved state holds so far, and what is to come.")
    ] = False,
    commit_state: Annotated[
        bool, typer.Option("--commit-state", help="Commit metrics/NAME/state/ (alone) after each step.")
    ] = False,
    dry: DryOpt = False,
) -> None:
    """The offline suite by DVC: PROFILE reproduced by `dvc repro` in a worktree of its own (resumable, on
    another machine too, from metrics/NAME/state/), saved as a DVC experiment -> metrics/NAME/pipeline.md."""
    from udr.experiments.seeds import SEEDS
    from udr.experiments.suite import run_suite, state_progress, write_suite_table

    root, seeds = Path("."), tuple(seed or SEEDS)
    if progress:
        print(state_progress(root, name, seeds, profile))
        return
    if not table:
        run_suite(root, profile=profile, work=work, name=name, seeds=seeds, dry=dry, commit=commit_state)
    if not dry:
        console().print(f"-> {write_suite_table(root, name, work, seeds)}")


@exp_app.command("labels")
def exp_labels_cmd(
    method: Annotated[
        list[str] | None, typer.Option("--method", "-m", help="A retriever to put labels on (default udr and sbert).")
    ] = None,
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """Label-aware selection (METHOD+labels) on the classification tasks with signal: its settings chosen on
    validation, then tested once against the retrievers without labels -> metrics/labels.md."""
    from udr.experiments.labels import label_tasks, write_labels
    from udr.workflows.label_sweep import run_label_sweep

    settings = load(params, None)
    tasks = label_tasks(settings)
    if tasks is None:
        raise UdrError("no signal table of these tasks: run `udr exp signal` first (metrics/signal.json)")
    if not tasks:
        raise UdrError("no trained classification task carries signal (metrics/signal.md): nothing to choose labels on")
    swept = run_label_sweep(settings, method or ["udr", "sbert"], tasks)
    console().print(f"-> {write_labels(settings, swept, tasks)}")


@exp_app.command("claims")
def exp_claims_cmd() -> None:
    """The paper's claims beside what this project measured (seed table, suite) -> metrics/claims.md."""
    from udr.experiments.paper_claims import write_claims

    console().print(f"-> {write_claims(Path('.'))}")


CandidatesOpt = Annotated[
    int, typer.Option("--candidates", "-n", min=2, help="Candidates per validation query, from BM25 ∪ SBERT.")
]


@exp_app.command("compare")
def exp_compare_cmd(
    a: Annotated[
        str,
        typer.Argument(metavar="A", help="A method (bm25, udr, ...) or a name saved with `udr evaluate --save-as`."),
    ],
    b: Annotated[str, typer.Argument(metavar="B", help="The one to compare it with.")],
    split: Annotated[str, typer.Option("--split", help="test or validation.")] = "test",
    metric: Annotated[
        str | None,
        typer.Option(
            "--metric",
            help="The metric compared, on every task: accuracy or macro_f1 where the answers are labels, or the "
            "task's own (the default: each task's own).",
            show_default=False,
        ),
    ] = None,
    task: TaskOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """A against B on the same rows: per task and on average, A - B with its paired bootstrap 95% interval
    (bold where resolved: clear of 0 by the claim margin), from the saved predictions; a label task compared
    by another metric than accuracy (macro-F1) shows accuracy's beside it."""
    from udr.experiments.tables import compare_table
    from udr.project.saved_evaluations import compare_saved, saved_results, saved_tasks

    if split not in ("test", "validation"):
        raise UdrError(f"bad split {split!r}: expected test or validation")
    settings = load(params, set_)
    tasks = list(task) if task else saved_tasks(settings, [a, b], split)
    if not tasks:
        raise UdrError(f"no task has saved {split} results of both {a} and {b}: run `udr evaluate` for them first")
    result = {m: saved_results(settings, m, tasks, split) for m in (a, b)}
    versus = compare_saved(settings, result, [(a, b)], split, metric)[a, b]
    if as_json:
        out = {}
        for t, iv in versus.per_task.items():
            sa, sb = versus.scores[t]
            out[t] = {"n": result[a][t]["n"], "metric": versus.metrics[t], a: sa, b: sb, **iv.to_dict()}
            if t in versus.accuracy:
                acc_a, acc_b, acc = versus.accuracy[t]
                out[t]["accuracy"] = {a: acc_a, b: acc_b, **acc.to_dict()}
        out["average"] = versus.average.to_dict()
        typer.echo(json.dumps(out, indent=2))
        return
    typer.echo(compare_table(a, b, versus, result[a]), nl=False)


@exp_app.command("curve")
def exp_curve_cmd(
    points: Annotated[
        list[str],
        typer.Argument(
            metavar="RECIPE:QUERIES=NAME...",
            help="A saved evaluation and where it sits: its recipe (a line), the scored queries per task it "
            "learned from, its name (a method or a `udr evaluate --save-as` name), e.g. UDR:512=udr512.",
        ),
    ],
    baseline: Annotated[
        str, typer.Option("--baseline", "-b", help="The saved evaluation every point is compared with.")
    ] = "bm25",
    split: Annotated[str, typer.Option("--split", help="test or validation.")] = "validation",
    out: Annotated[Path, typer.Option("--out", "-o", help="The table; the .json and .png go beside it.")] = Path(
        "metrics/curve.md"
    ),
    task: TaskOpt = None,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """The feedback curve: each point's average against the baseline's, with its paired bootstrap 95%
    interval, as a table and a plot (x: scored queries per task) -> metrics/curve.md, .json, .png."""
    from udr.experiments.curve import run_curve

    written = run_curve(load(params, set_), points, baseline, task, split, out)
    console().print(f"-> {written} (+ {written.with_suffix('.png').name}, {written.with_suffix('.json').name})")


@exp_app.command("ceiling")
def exp_ceiling_cmd(
    task: TaskOpt = None,
    candidates: CandidatesOpt = 32,
    rerun: Annotated[
        bool, typer.Option("--rerun", help="Evaluate BM25, SBERT, EPR and UDR again even if up to date.")
    ] = False,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """The ceiling of the LM's feedback on validation: its own best candidates as demos -> metrics/ceiling.md."""
    from udr.experiments.instruments import run_ceiling

    out = run_ceiling(load(params, set_), task, candidates, rerun=rerun)
    console().print(f"-> {out}")


@exp_app.command("agreement")
def exp_agreement_cmd(
    model: Annotated[
        list[str] | None,
        typer.Option("--model", "-m", help="Another trained model as LABEL=DIR (repeatable), e.g. a curve point."),
    ] = None,
    task: TaskOpt = None,
    candidates: CandidatesOpt = 32,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """How retrievers order validation candidates against the LM's feedback (NDCG@8, top-1) -> metrics/agreement.md."""
    from udr.experiments.instruments import run_agreement

    models = {}
    for spec in model or []:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            raise UdrError(f"bad --model {spec!r}: expected LABEL=DIR")
        if label in models:
            raise UdrError(f"--model label {label!r} is given twice: give each model its own label")
        models[label] = Path(path)
    out = run_agreement(load(params, set_), models, task, candidates)
    console().print(f"-> {out}")
