"""A second, real process that holds the lock of a named thing (:mod:`udr.util.locks`) while a test runs the
writer of that thing in this one."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

HOLDER = """
import sys
from udr.util.locks import holding
with holding(sys.argv[1], "test"):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes our stdin
"""


def start_holder(target: Path) -> subprocess.Popen:
    """A Python process that has taken the lock of `target` and holds it until its stdin is closed."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(target)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


@contextlib.contextmanager
def another_process_holding(target: Path) -> Iterator[int]:
    """A Python process holding the lock of `target` until the block ends; yields its pid."""
    proc = start_holder(target)
    try:
        yield proc.pid
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
