"""A user-style intent task from the data mirror: TREC questions with their 50 fine question types.

Writes OUT/intents.csv (1,500 labelled rows, seeded, from TREC's train split) and OUT/intents-test.csv (300 rows,
seeded, from its test split), columns `question` and `intent` (e.g. `NUM:date`, `HUM:ind`), as a user with an
intent dataset would hand them to `udr adapt` (docs/tasks.md):

    python examples/trec_fine.py build/intents
    udr adapt intents --from build/intents/intents.csv --test build/intents/intents-test.csv \
        --input question --label intent --metric macro_f1 --test-all

The mirror is $UDR_DATA_DIR, else ../shared/data. The questions are those of the project's `trec` task, whose
coarse labels the shipped UDR trained on: a sibling of a trained task, not a new family.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import polars as pl

SEED = 42
ROWS = {"train": ("intents.csv", 1500), "test": ("intents-test.csv", 300)}


def main(out: Path) -> None:
    mirror = Path(os.environ.get("UDR_DATA_DIR") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")
    source = mirror / "trec"
    if not source.is_dir():
        sys.exit(f"error: no trec folder in the data mirror {mirror} (set UDR_DATA_DIR)")
    out.mkdir(parents=True, exist_ok=True)
    for split, (name, n) in ROWS.items():
        frame = pl.read_ndjson(source / f"{split}.jsonl").sample(n=n, seed=SEED, shuffle=True)
        frame.select(question="text", intent="fine_label").write_csv(out / name)
        print(f"{out / name}: {n} rows, {frame['fine_label'].n_unique()} intents")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/trec_fine.py OUT_DIR")
    main(Path(sys.argv[1]))
