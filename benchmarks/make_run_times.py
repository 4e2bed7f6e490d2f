"""The default run's time stage by stage, from a `make run` log whose lines are stamped with the second they
came (``<epoch seconds> <line>``, as benchmarks/make_run.sh writes it).

The install is the time before DVC's first stage; each stage runs until the next one starts, the last until
the log ends. Stages of one `foreach` share a row (``train_epr``: six tasks), except the evaluations, one row
per method; rows keep the order they first ran in. Stages DVC skipped as unchanged are named: their outputs
were current already (in git, as the committed results are on the CPU kind that made them, or from an
earlier run), so the table times only what this run made.

    python benchmarks/make_run_times.py make-run.log
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

RUNNING = re.compile(r"Running stage '([^']+)'")
SKIPPED = re.compile(r"Stage '([^']+)' didn't change, skipping")
ELAPSED = re.compile(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):(\d+(?:\.\d+)?)")


def parse(lines: list[str]) -> tuple[list[tuple[int, str]], list[tuple[int, str]], list[str], float | None]:
    """The stamped lines (second, text); the stages as they started (second, name); the skipped stages;
    /usr/bin/time's elapsed seconds where the log has them."""
    stamped, started, skipped, elapsed = [], [], [], None
    for number, line in enumerate(lines, 1):
        stamp, _, text = line.partition(" ")
        if not stamp.isdigit():
            raise ValueError(f"line {number} does not start with a stamp in epoch seconds: {line[:60]!r}")
        stamped.append((int(stamp), text))
        if m := RUNNING.search(text):
            started.append((int(stamp), m.group(1)))
        elif m := SKIPPED.search(text):
            skipped.append(m.group(1))
        elif m := ELAPSED.search(text):
            hours, minutes, seconds = m.groups()
            elapsed = int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)
    return stamped, started, skipped, elapsed


def row_of(stage: str) -> str:
    """The table row a stage's time adds to: its `foreach` group, the evaluations one per method."""
    group = stage.partition("@")[0]
    return stage if group == "evaluate" else group


def stage_rows(stamped, started) -> list[tuple[str, int, float]]:
    """(row, stages, seconds) in the order the rows first ran, the install first."""
    if not started:
        raise ValueError('no "Running stage" line: not the log of a `make run` that ran a stage')
    rows: dict[str, list] = {"install": [0, started[0][0] - stamped[0][0]]}
    ends = [second for second, _ in started[1:]] + [stamped[-1][0]]
    for (second, stage), end in zip(started, ends, strict=True):
        row = rows.setdefault(row_of(stage), [0, 0])
        row[0] += 1
        row[1] += end - second
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
        stamped, started, skipped, elapsed = parse(lines)
        rows = stage_rows(stamped, started)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        print(f"benchmarks/make_run_times.py: error: {args.log}: {reason}", file=sys.stderr)
        return 1
    print(table(rows, elapsed if elapsed is not None else stamped[-1][0] - stamped[0][0], skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
