"""The rich progress bar every long stage shows (description, bar, done/total, extra columns, ETA)."""

from __future__ import annotations


def progress_bar(enabled: bool, *extra_columns: str):
    """A transient rich Progress; `extra_columns` are TextColumn formats (e.g. "{task.fields[x]}")."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        *(TextColumn(c) for c in extra_columns),
        TimeRemainingColumn(),
        disable=not enabled,
        transient=True,
    )
