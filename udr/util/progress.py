"""The progress every long stage shows: a rich progress bar (description, bar, done/total, extra columns,
ETA) on a terminal, and plain periodic lines on stderr in a log or a pipe, so a long run never looks stuck.

Imports of rich are inside the functions that use them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

# Seconds between two progress lines of a task when stderr is not a terminal.
PROGRESS_SECONDS_ENV = "UDR_PROGRESS_SECONDS"
DEFAULT_PROGRESS_SECONDS = 30.0


def progress_bar(enabled: bool, *extra_columns: str):
    """A transient rich Progress on a terminal, :class:`LineProgress` elsewhere, silent unless `enabled`;
    `extra_columns` are TextColumn formats (e.g. "{task.fields[x]}")."""
    if enabled and not sys.stderr.isatty():
        return LineProgress(extra_columns)
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


def progress_seconds() -> float:
    """The seconds between progress lines: $UDR_PROGRESS_SECONDS, else 30."""
    raw = os.environ.get(PROGRESS_SECONDS_ENV, "")
    try:
        return max(0.0, float(raw)) if raw.strip() else DEFAULT_PROGRESS_SECONDS
    except ValueError:
        return DEFAULT_PROGRESS_SECONDS


@dataclass
class _Job:
    description: str
    total: float | None
    completed: float
    fields: dict
    start: float = field(default_factory=time.monotonic)
    start_completed: float = 0.0
    last_line: float = field(default_factory=time.monotonic)
    printed: bool = False


class LineProgress:
    """rich Progress's task interface (add_task, advance, update, remove_task) writing one line per task to
    stderr every `interval` seconds (done/total, rate, time left, extra columns), and a last line when a
    task that printed any ends."""

    def __init__(self, extra_columns: tuple[str, ...] = (), interval: float | None = None, stream=None):
        self.columns = extra_columns
        self.interval = progress_seconds() if interval is None else interval
        self.stream = stream
        self.jobs: dict[int, _Job] = {}

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, exc_type, *_exc) -> None:
        if exc_type is None:
            for job in list(self.jobs):
                self.remove_task(job)

    def add_task(self, description: str, total: float | None = None, completed: float = 0, **fields) -> int:
        job = max(self.jobs, default=-1) + 1
        self.jobs[job] = _Job(description, total, completed, fields, start_completed=completed)
        return job

    def advance(self, job: int, advance: float = 1) -> None:
        self.update(job, advance=advance)

    def update(self, job: int, *, advance: float = 0, completed: float | None = None, **fields) -> None:
        j = self.jobs[job]
        j.completed = completed if completed is not None else j.completed + advance
        j.fields.update(fields)
        now = time.monotonic()
        if now - j.last_line >= self.interval:
            j.last_line, j.printed = now, True
            self._print(j, now)

    def remove_task(self, job: int) -> None:
        j = self.jobs.pop(job)
        if j.printed:
            self._print(j, time.monotonic())

    def line(self, j: _Job, now: float) -> str:
        """`description: done/total (pct), rate/s, elapsed, time left, extra columns`."""
        elapsed = now - j.start
        rate = (j.completed - j.start_completed) / elapsed if elapsed > 0 else 0.0
        done = f"{j.completed:g}" + (f"/{j.total:g} ({j.completed / j.total:.0%})" if j.total else "")
        text = f"{j.description}: {done}, {rate:.2f}/s, {elapsed:.0f}s"
        if j.total and rate > 0 and j.completed < j.total:
            text += f", ~{(j.total - j.completed) / rate:.0f}s left"
        task = SimpleNamespace(fields=j.fields)
        extras = []
        for column in self.columns:
            try:
                extras.append(column.format(task=task))
            except (KeyError, ValueError, TypeError, AttributeError, IndexError):
                continue
        return ", ".join([text, *extras])

    def _print(self, j: _Job, now: float) -> None:
        print(self.line(j, now), file=self.stream or sys.stderr, flush=True)
