"""`udr repro`: the DVC pipeline with several stages at once (:mod:`udr.workflows.repro`).

Imports of udr.workflows.repro (DVC's) are inside the functions that use them, to keep `udr`'s start light.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from udr.cli.app import app, load


@app.command("repro")
def repro_cmd(
    targets: Annotated[
        list[str] | None, typer.Argument(help="Stages to reproduce, with what they depend on (default: all).")
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            help="Stages at once (default: the cores over the largest `threads` of score, train and evaluate). "
            "Results do not depend on it; 1 is `dvc repro`.",
            show_default=False,
        ),
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            "-S",
            help="Set a parameter in params.yaml first, as `dvc exp run -S` does: key.path=value,"
            " +key=value (add), ~key (delete); repeatable.",
        ),
    ] = None,
) -> None:
    """Reproduce the DVC pipeline (`dvc repro`) of params.yaml here, running independent stages at once."""
    from udr.experiments.dvc import set_params
    from udr.workflows.repro import default_jobs, run_repro

    if overrides:
        set_params(Path("params.yaml"), overrides)
    settings = load(Path("params.yaml"), None)
    run_repro(settings.root, list(targets or []), jobs or default_jobs(settings, os.cpu_count() or 1))
