"""benchmarks/precision.py: fp32 against bf16 autocast with the pipeline's scorer and decode loop."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiny_models import save_tiny_lm
from udr.lm.models import resolve_model

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "precision.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a subprocess that imports torch and transformers and runs both precisions
def test_prints_both_phases_for_both_precisions(tmp_path):
    lm = resolve_model(str(save_tiny_lm(tmp_path / "tiny")), tmp_path / "lm", kind="lm")
    out = _run("--model", str(lm), "--prompt-tokens", "16", "--batches", "1", "--rows", "2", "--new-tokens", "3")
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0] + " " + line.split()[1]: line.split() for line in out.stdout.splitlines() if line}
    assert rows["prompt forward"][2] == str(4 * (16 + 4))  # one batch of 4 prompts + 4-token continuations
    assert rows["decode steps"][2] == str(2 * (3 - 1))  # 2 rows, the steps after the prompt's
    # tok/s of both precisions (the seconds columns may print 0.00 for a tiny model)
    assert all(float(rows[p][5]) > 0 and float(rows[p][6]) > 0 for p in ("prompt forward", "decode steps"))
    assert "bf16 kernels: yes" in out.stdout or "bf16 kernels: no" in out.stdout


def test_a_missing_model_is_one_line_and_a_failure(tmp_path):
    out = _run("--model", str(tmp_path / "nothing"))
    assert out.returncode != 0
    want = f"benchmarks/precision.py: error: missing model {tmp_path / 'nothing'} (run `udr models` first)"
    assert out.stderr.strip().splitlines()[-1] == want
