"""The `udr` command line: thin Typer commands, one per pipeline stage (see :mod:`udr.cli.commands`)."""

from udr.cli.commands import app, main

__all__ = ["app", "main"]
