"""`udr retrieve`: demonstrations for a query, a file of queries, or your own pool, from the shell.

Imports of rich and of the udr.serving and udr.retriever modules are inside the functions that use them, to keep
`udr`'s start (`udr --help`) light.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from udr.cli.app import ParamsOpt, SetOpt, app, console, load, show_progress
from udr.errors import UdrError


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
    diversity: Annotated[
        float,
        typer.Option(
            "--diversity",
            help="0 to 1: re-rank by maximal marginal relevance, trading similarity to the query for "
            "variety among the demonstrations (0: plain top-k).",
        ),
    ] = 0.0,
    label_weight: Annotated[
        float,
        typer.Option(
            "--label-weight",
            help="Label-aware selection (a classification pool): re-rank by similarity + this weight times the "
            "share of the demonstration's label among the --label-votes nearest rows (0: off).",
        ),
    ] = 0.0,
    label_votes: Annotated[
        int, typer.Option("--label-votes", help="How many nearest pool rows vote the query's label.")
    ] = 16,
    per_label: Annotated[
        str | None,
        typer.Option(
            "--per-label",
            help="At most this many demonstrations of each label, or 'balanced' (as equal as possible across the "
            "labels among the candidates).",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="JSON lines (one per demonstration) instead of a table.")
    ] = False,
    input_file: Annotated[
        Path | None,
        typer.Option("--input", help='Batch: a JSON-lines file of {"query": ..., "task": optional}; - reads stdin.'),
    ] = None,
    output_file: Annotated[
        Path | None,
        typer.Option("--output", help="Batch results, one JSON line per query in input order (default, or -: stdout)."),
    ] = None,
    model: Annotated[
        Path | None,
        typer.Option(
            "--model",
            help="A udr bi-encoder directory, or a `udr export` of one, or `udr adapt`'s export (default: "
            "models/final, the pipeline's final model; for a task `udr adapt` ran on, the retriever it recommended)",
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
        typer.Option(
            "--pool",
            help="Your own demonstrations (.jsonl, .csv, .tsv or .parquet) instead of the task's prepared pool.",
        ),
    ] = None,
    instruction: Annotated[
        str | None, typer.Option("--instruction", help="The task instruction of your own pool (default: --task's).")
    ] = None,
    input_column: Annotated[
        str | None,
        typer.Option(
            "--input-column", help="The --pool file's input column (default: input, or --task's).", show_default=False
        ),
    ] = None,
    target_column: Annotated[
        str | None,
        typer.Option(
            "--target-column",
            "--label-column",
            help="The --pool file's target (or label) column (default: target, or --task's).",
            show_default=False,
        ),
    ] = None,
    where: Annotated[
        list[str] | None,
        typer.Option(
            "--where",
            help="COLUMN=VALUE: search only the --pool rows whose column COLUMN (one beyond the input and target) "
            "is VALUE; repeat for an AND.",
            show_default=False,
        ),
    ] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    params: Annotated[
        Path | None,
        typer.Option(
            "--params",
            "-p",
            help="The project's params file: its pools, declared tasks and models/final "
            "(default: params.yaml here, if any).",
            show_default=False,
        ),
    ] = None,
    search: Annotated[
        str,
        typer.Option(
            "--search",
            help="exact, or approximate (a faiss IVF index calibrated to recall@8 0.99: faster for "
            "large pools and many queries).",
        ),
    ] = "exact",
    encoder: Annotated[
        str,
        typer.Option(
            "--encoder",
            help="Which encoder serves: auto (UDR; the base encoder, as `udr evaluate -m sbert` reads it, for a "
            "pool or task the model was not trained on where the project measured it better on unseen tasks), "
            "udr, or base.",
        ),
    ] = "auto",
) -> None:
    """Retrieve demonstrations for a query (or a file of queries) with a trained retriever."""
    from udr.serving.request import RetrieveRequest, answer

    request = RetrieveRequest(  # checked here, before the model loads and the queries run
        query=query,
        task=task,
        k=k,
        diversity=diversity,
        label_weight=label_weight,
        label_votes=label_votes,
        per_label=per_label,
        as_json=as_json,
        input_file=input_file,
        output_file=output_file,
        model=model,
        prompt=prompt,
        pool=pool,
        instruction=instruction,
        input_column=input_column,
        target_column=target_column,
        where=tuple(where or ()),
        device=device,
        params=params,
        search=search,
        encoder=encoder,
    )
    # A note on an untrained task goes to stderr (the entry point's notices), before the results.
    result = answer(request, progress=show_progress())
    if request.batch:
        if request.output_file is None:
            sys.stdout.write("".join(line + "\n" for line in result.lines))
        else:
            console().print(f"{len(result.lines)} queries -> {request.output_file}")
    elif as_json:
        for rank, d in enumerate(result.demonstrations, 1):
            print(json.dumps({"rank": rank, **d.to_dict()}, ensure_ascii=False))
        if result.prompt is not None:
            print(json.dumps({"prompt": result.prompt}, ensure_ascii=False))
    elif result.prompt is not None:
        print(result.prompt)
    else:
        labelled = request.label_selection.active
        _print_demonstrations(query, result.task, list(result.demonstrations), diversity, labelled)


def _print_demonstrations(query: str, task: str, demos, diversity: float = 0.0, labelled: bool = False) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    # Queries and pool texts are data: brackets in them ("name[The Mill]") are not Rich markup.
    table = Table(
        "#",
        "similarity",
        "input",
        "output",
        "pool id",
        title=escape(
            f"{task}: {len(demos)} demonstrations for {query!r}, "
            + (
                f"diversity {diversity:g} (maximal marginal relevance order)"
                if diversity
                else "label-aware order"
                if labelled
                else "most similar first"
            )
        ),
        title_justify="left",
    )
    for rank, d in enumerate(demos, 1):
        table.add_row(str(rank), f"{d.similarity:.3f}", escape(d.input), escape(d.output), str(d.pool_id))
    Console().print(table)


@app.command("export")
def export_cmd(
    out_dir: Annotated[
        Path, typer.Argument(help="Where to write the export: a new or empty directory, or an earlier export.")
    ],
    format_: Annotated[
        str, typer.Option("--format", help="The export format: sentence-transformers (v5+, a Router).")
    ] = "sentence-transformers",
    model: Annotated[
        Path | None,
        typer.Option("--model", help="A udr bi-encoder directory (default: models/final)", show_default=False),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", help="How the model card's snippets load it (default: OUT_DIR); e.g. a hub id."),
    ] = None,
    tasks: Annotated[
        list[str] | None,
        typer.Option(
            "--task",
            "-t",
            help="Export this task's prompt and pool (repeatable; default: the model folder's pools, "
            "else the project's prepared tasks).",
            show_default=False,
        ),
    ] = None,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
) -> None:
    """Export the trained retriever for other tools, with its tasks' pools and a model card written from the
    model's own record."""
    from udr.serving.export import EXPORT_FORMATS, export_pools, export_sentence_transformers, writing_export
    from udr.serving.model_card import card_tasks, model_card

    if format_ not in EXPORT_FORMATS:
        raise UdrError(f"unknown export format '{format_}' (known: {', '.join(EXPORT_FORMATS)})")
    with writing_export(out_dir) as target:  # locked and checked, before the model card reads the run
        settings = load(params, set_)
        model_dir = model or settings.paths.final_model
        chosen = card_tasks(settings, model_dir, tasks)
        pools = export_pools(model_dir, chosen, lambda t: settings.paths.prepared(t, "train"))
        for task_name in tasks or ():
            if task_name not in pools:
                raise UdrError(
                    f"task '{task_name}' has no pool to export: the model folder carries none and the project has "
                    f"not prepared it; run `udr prepare -t {task_name}` first"
                )
        card = model_card(settings, model_dir, name or str(out_dir), chosen)
        meta = export_sentence_transformers(model_dir, target, chosen, card, pools)
    shown = os.path.relpath(model_dir) if Path(model_dir).is_absolute() else model_dir
    console().print(
        f"exported {shown} -> {out_dir} (sentence-transformers, {len(meta['tasks'])} task prompts, "
        f"{len(pools)} pools, model card)"
    )
