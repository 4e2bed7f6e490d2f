"""The `udr` command line: thin Typer commands. :mod:`udr.cli.pipeline` has one per pipeline stage,
:mod:`udr.cli.serve` `udr retrieve`, :mod:`udr.cli.exp` `udr exp`; :mod:`udr.cli.app` the app itself."""

from udr.cli import adapt, exp, pipeline, repro, serve  # noqa: F401  (each registers its commands on the app)
from udr.cli.app import app, main, unwrap_help

unwrap_help(app)

__all__ = ["app", "main"]
