"""benchmarks/threads.py: the pipeline's CPU computations under several torch thread counts, on a tiny project."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import LOOP_TASKS, markdown_table

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "threads.py"


@pytest.mark.slow  # four subprocesses that import torch and transformers
def test_each_count_is_compared_with_the_reference_run_twice(looped):
    args = ["--params", str(looped / "params.yaml"), "--tasks", ",".join(LOOP_TASKS), "--threads", "1,3"]
    args += ["--reference", "2", "--pairs-per-task", "6", "--texts", "8", "--steps", "2"]
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "against 2 threads" in out.stdout
    table = markdown_table(out.stdout)
    assert set(table) == {"LM scores", "pool embeddings", "training"}
    header = next(line for line in out.stdout.splitlines() if line.startswith("| computation"))
    assert [c.strip() for c in header.split("|")[2:-1]] == ["2 again", "1 thread", "3 threads"]
    for name, cells in table.items():
        assert cells[1] == "same", f"{name}: the reference count twice must give the same bits"
        assert all(c == "same" or re.fullmatch(r"\d\.\de[-+]\d\d", c) for c in cells[2:]), cells


def test_a_missing_project_is_a_one_line_error_naming_the_run(tmp_path):
    args = ["--params", str(tmp_path / "params.yaml"), "--threads", "1"]
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"benchmarks/threads.py: error: params file not found: {tmp_path / 'params.yaml'}",
        "benchmarks/threads.py: error: the run on 2 threads failed (above)",
    ]
