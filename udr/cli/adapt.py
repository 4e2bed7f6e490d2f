"""`udr adapt`: a user's labelled file to the best demonstration retriever for their task. The command
parses its options into a request (:class:`udr.project.adapt.AdaptRequest`), runs it
(:func:`udr.workflows.adapt.run_adapt`, which chains the stages) and shows the outcome.

Imports of rich are inside the functions that use them, to keep `udr`'s start (`udr --help`) light.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from udr.cli.app import (
    InputColumnOpt,
    InstructionOpt,
    LabelColumnOpt,
    ParamsOpt,
    SetOpt,
    TaskMetricOpt,
    app,
    console,
    load,
    show_progress,
)
from udr.project.adapt import AdaptRequest, default_workspace
from udr.util.files import shown_path
from udr.workflows.adapt import run_adapt


@app.command("adapt")
def adapt_cmd(
    name: Annotated[str, typer.Argument(help="The task's name (1-64 letters, digits, _ . -).")],
    from_: Annotated[
        Path, typer.Option("--from", help="Labelled rows: a .csv, .tsv, .jsonl or .parquet file.", show_default=False)
    ],
    test: Annotated[
        Path | None,
        typer.Option(
            "--test", help="Test rows of the same columns (default: a seeded share of --from).", show_default=False
        ),
    ] = None,
    input_column: InputColumnOpt = None,
    label_column: LabelColumnOpt = None,
    instruction: InstructionOpt = None,
    metric: TaskMetricOpt = None,
    validation: Annotated[
        int | None,
        typer.Option(
            "--validation",
            min=10,
            help="Rows carved from --from to choose on (default: a fifth, 40-200).",
            show_default=False,
        ),
    ] = None,
    queries: Annotated[int, typer.Option("--queries", min=1, help="Train rows whose candidates the LM scores.")] = 256,
    minutes: Annotated[
        float | None,
        typer.Option(
            "--minutes", min=1, help="A time budget: fewer scored queries until the estimate fits.", show_default=False
        ),
    ] = None,
    max_train: Annotated[int, typer.Option("--max-train", min=1, help="Pool rows kept.")] = 1000,
    max_test: Annotated[int, typer.Option("--max-test", min=1, help="Test rows kept.")] = 300,
    test_all: Annotated[
        bool, typer.Option("--test-all", help="Every retriever on test, not only the recommended and the baselines.")
    ] = False,
    folder: Annotated[
        Path | None, typer.Option("--dir", help="The workspace (default: workspaces/NAME).", show_default=False)
    ] = None,
    export: Annotated[
        Path | None,
        typer.Option("--export", help="Where the winner goes (default: the workspace's export/).", show_default=False),
    ] = None,
    restart: Annotated[
        bool, typer.Option("--restart", help="Start over in the workspace a run left, instead of resuming it.")
    ] = False,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """Find the best demonstration retriever for your labelled data: a workspace, the LM's feedback on a few
    hundred rows, UDR adapted to them, every retriever compared on validation rows with paired intervals,
    the recommended one tested and exported. Run the same command again to resume a stopped run."""
    from rich.console import Console
    from rich.markdown import Markdown

    settings = load(params, set_)
    request = AdaptRequest(
        name=name,
        source=from_,
        folder=folder if folder is not None else default_workspace(settings.root, name),
        test=test,
        input_column=input_column,
        label_column=label_column,
        instruction=instruction,
        metric=metric,
        validation=validation,
        queries=queries,
        minutes=minutes,
        max_train=max_train,
        max_test=max_test,
        export=export,
        test_all=test_all,
        restart=restart,
    )
    out = console()
    outcome = run_adapt(settings, request, say=out.print, progress=show_progress())
    Console().print(Markdown(outcome.markdown()))
    out.print(f"written: {shown_path(request.folder, Path.cwd())}/metrics/adapt.md and adapt.json")
