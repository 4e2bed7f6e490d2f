"""The default run's time stage by stage, from a `make run` log whose lines are stamped with the second they
came (``<epoch seconds> <line>``, as benchmarks/make_run.sh writes it).

The install is the time before DVC's first stage. Where `dvc repro` runs the stages one after the other, each
runs until the next one starts, the last until the log ends; where `udr repro` runs several at once, it prints
each stage's own seconds as it ends (``[3/40] train_epr@sst2: ran (72.1s)``), and a row adds those up, so the
rows then add up to more than the total. Stages of one `foreach` share a row (``train_epr``: six tasks),
except the evaluations, one row per method; rows keep the order they first ran in. Stages DVC skipped as
unchanged are named: their outputs were current already (in git, as the committed results are on the CPU
kind that made them, or from an earlier run), so the table times only what this run made.

    python benchmarks/make_run_times.py make-run.log
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

RUNNING = re.compile(r"Running stage '([^']+)'")
SKIPPED = re.compile(r"Stage '([^']+)' didn't change, skipping")
# `udr repro`'s lines: the plan (stages run at once from here on), and each stage as it ends.
AT_ONCE = re.compile(r"stage\(s\) may run, (\d+) at a time")
ENDED = re.compile(r"\[\d+/\d+\] (\S+): (ran|unchanged|failed) \((\d+(?:\.\d+)?)s\)")
ELAPSED = re.compile(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):(\d+(?:\.\d+)?)")


@dataclass
class RunLog:
    """What a stamped `make run` log says: its lines (second, text); the stages as they started one after
    the other (second, name); the stages `udr repro` ran at once as they ended (second, name, seconds); the
    skipped stages; the second stages began to run at once (None: never); /usr/bin/time's elapsed seconds."""

    stamped: list[tuple[int, str]] = field(default_factory=list)
    started: list[tuple[int, str]] = field(default_factory=list)
    ended: list[tuple[int, str, float]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    at_once: int | None = None
    elapsed: float | None = None


def parse(lines: list[str]) -> RunLog:
    """The log's stamped lines read (:class:`RunLog`)."""
    log = RunLog()
    for number, line in enumerate(lines, 1):
        stamp, _, text = line.partition(" ")
        if not stamp.isdigit():
            raise ValueError(f"line {number} does not start with a stamp in epoch seconds: {line[:60]!r}")
        second = int(stamp)
        log.stamped.append((second, text))
        if m := RUNNING.search(text):
            log.started.append((second, m.group(1)))
        elif m := SKIPPED.search(text):
            log.skipped.append(m.group(1))
        elif m := ENDED.search(text):
            name, what, seconds = m.groups()
            if what == "unchanged":
                log.skipped.append(name)
            else:
                log.ended.append((second, name, float(seconds)))
        elif AT_ONCE.search(text) and log.at_once is None:
            log.at_once = second
        elif m := ELAPSED.search(text):
            hours, minutes, seconds = m.groups()
            log.elapsed = int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)
    return log


def row_of(stage: str) -> str:
    """The table row a stage's time adds to: its `foreach` group, the evaluations one per method."""
    group = stage.partition("@")[0]
    return stage if group == "evaluate" else group


def stage_rows(log: RunLog) -> list[tuple[str, int, float]]:
    """(row, stages, seconds) in the order the rows first ran, the install first."""
    if not log.started and not log.ended:
        raise ValueError('no "Running stage" line: not the log of a `make run` that ran a stage')
    # a stage run one after the other lasts until the next starts, or stages begin to run at once, or the log ends
    boundaries = [second for second, _ in log.started[1:]] + [log.stamped[-1][0]]
    spans = []  # (start, name, seconds)
    for (second, stage), end in zip(log.started, boundaries, strict=True):
        if log.at_once is not None and log.at_once >= second:
            end = min(end, log.at_once)
        spans.append((second, stage, end - second))
    spans += [(second - seconds, stage, seconds) for second, stage, seconds in log.ended]
    spans.sort(key=lambda span: span[0])
    rows: dict[str, list] = {"install": [0, spans[0][0] - log.stamped[0][0]]}
    for _, stage, seconds in spans:
        row = rows.setdefault(row_of(stage), [0, 0])
        row[0] += 1
        row[1] += seconds
    return [(name, count, seconds) for name, (count, seconds) in rows.items()]


def table(rows, total: float, skipped: list[str]) -> str:
    """The markdown table: minutes per row and the total."""
    out = ["| step | stages | minutes |", "| --- | ---: | ---: |"]
    out += [f"| {name} | {count or ''} | {seconds / 60:.1f} |" for name, count, seconds in rows]
    out.append(f"| total | {sum(count for _, count, _ in rows)} | {total / 60:.1f} |")
    if skipped:
        out += ["", f"Skipped as unchanged, their outputs current ({len(skipped)}): {', '.join(skipped)}"]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="the stamped `make run` log")
    args = parser.parse_args(argv)
    try:
        # Bytes split at "\n" only: progress bars' carriage returns stay inside their stamped line.
        text = args.log.read_bytes().decode("utf-8", errors="replace")
        lines = [line for line in text.split("\n") if line.strip()]
        if not lines:
            raise ValueError("the log is empty")
        log = parse(lines)
        rows = stage_rows(log)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        print(f"benchmarks/make_run_times.py: error: {args.log}: {reason}", file=sys.stderr)
        return 1
    total = log.elapsed if log.elapsed is not None else log.stamped[-1][0] - log.stamped[0][0]
    print(table(rows, total, log.skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
