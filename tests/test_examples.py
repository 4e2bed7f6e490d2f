"""The example scripts beside the package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_the_intent_example_is_a_seeded_user_style_csv_pair(tmp_path, data_dir):
    def build(out):
        env = {"UDR_DATA_DIR": str(data_dir), "PATH": ""}
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / "trec_fine.py"), str(out)], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return pl.read_csv(out / "intents.csv"), pl.read_csv(out / "intents-test.csv")

    pool, test = build(tmp_path / "a")
    assert pool.columns == ["question", "intent"] == test.columns
    assert (pool.height, test.height) == (1500, 300) and pool["intent"].n_unique() > 40
    assert ":" in pool["intent"][0]  # a fine type (NUM:date), not the coarse label
    again, _ = build(tmp_path / "b")
    assert again.equals(pool)  # seeded


def test_the_intent_example_names_a_missing_mirror(tmp_path):
    env = {"UDR_DATA_DIR": str(tmp_path / "none"), "PATH": ""}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "trec_fine.py"), str(tmp_path)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 1 and "no trec folder in the data mirror" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
