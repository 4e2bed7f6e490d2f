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
from pathlib import Path

RUNNING = re.compile(r"Running stage '([^']+)'")
SKIPPED = re.compile(r"Stage '([^']+)' didn't change, skipping")
# `udr repro`'s lines: the plan (stages run at once from here on), and each stage as it ends.
AT_ONCE = re.compile(r"stage\(s\) may run, (\d+) at a time")
ENDED = re.compile(r"\[\d+/\d+\] (\S+): (ran|unchanged|failed) \((\d+(?:\.\d+)?)s\)")
ELAPSED = re.compile(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):(\d+(?:\.\d+)?)")


def parse(lines: list[str]) -> dict:
    """The stamped lines (second, text); the stages as they started one after the other (second, name); the
    stages `udr repro` ran at once as they ended (second, name, seconds); the skipped stages; the second
    stages started running at once (None: never); /usr/bin/time's elapsed seconds where the log has them."""
    found: dict = {"stamped": [], "started": [], "ended": [], "skipped": [], "at_once": None, "elapsed": None}
    for number, line in enumerate(lines, 1):
        stamp, _, text = line.partition(" ")
        if not stamp.isdigit():
            raise ValueError(f"line {number} does not start with a stamp in epoch seconds: {line[:60]!r}")
        second = int(stamp)
        found["stamped"].append((second, text))
        if m := RUNNING.search(text):
            found["started"].append((second, m.group(1)))
        elif m := SKIPPED.search(text):
            found["skipped"].append(m.group(1))
        elif m := ENDED.search(text):
            name, what, seconds = m.groups()
            if what == "unchanged":
                found["skipped"].append(name)
            else:
                found["ended"].append((second, name, float(seconds)))
        elif AT_ONCE.search(text) and found["at_once"] is None:
            found["at_once"] = second
        elif m := ELAPSED.search(text):
            hours, minutes, seconds = m.groups()
            found["elapsed"] = int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)
    return found


def row_of(stage: str) -> str:
    """The table row a stage's time adds to: its `foreach` group, the evaluations one per method."""
    group = stage.partition("@")[0]
    return stage if group == "evaluate" else group


def stage_rows(found: dict) -> list[tuple[str, int, float]]:
    """(row, stages, seconds) in the order the rows first ran, the install first."""
    stamped, started, ended, at_once = found["stamped"], found["started"], found["ended"], found["at_once"]
    if not started and not ended:
        raise ValueError('no "Running stage" line: not the log of a `make run` that ran a stage')
    spans = []  # (start, name, seconds)
    log_end = stamped[-1][0]
    for i, (second, stage) in enumerate(started):
        ends = [started[i + 1][0]] if i + 1 < len(started) else [log_end]
        if at_once is not None and at_once >= second:
            ends.append(at_once)
        spans.append((second, stage, min(ends) - second))
    spans += [(second - seconds, stage, seconds) for second, stage, seconds in ended]
    spans.sort(key=lambda span: span[0])
    rows: dict[str, list] = {"install": [0, spans[0][0] - stamped[0][0]]}
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
        found = parse(lines)
        rows = stage_rows(found)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        print(f"benchmarks/make_run_times.py: error: {args.log}: {reason}", file=sys.stderr)
        return 1
    stamped, elapsed = found["stamped"], found["elapsed"]
    print(table(rows, elapsed if elapsed is not None else stamped[-1][0] - stamped[0][0], found["skipped"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
