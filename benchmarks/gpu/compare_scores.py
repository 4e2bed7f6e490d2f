"""How far two runs' LM feedback agree on the pairs both scored (e.g. a GPU run's bf16 scores against
the CPU's): per task, the pairs in common, the median and mean Spearman correlation within a query,
the share of queries whose best candidate is the same, and the largest and median |score difference|.

    python benchmarks/gpu/compare_scores.py GPU_SCORES_DIR data/feedback/round0 --markdown
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HEADERS = ["task", "pairs", "median Spearman", "mean Spearman", "same top-1", "max |diff|", "median |diff|"]


def agreement(a_path: Path, b_path: Path) -> list:
    import polars as pl
    from scipy.stats import spearmanr

    a, b = pl.read_parquet(a_path), pl.read_parquet(b_path)
    both = a.join(b, on=["query_id", "candidate_id"], suffix="_b")
    rhos, same = [], []
    for _, group in both.group_by("query_id"):
        x, y = group["score"].to_numpy(), group["score_b"].to_numpy()
        if len(x) > 2 and np.ptp(x) > 0 and np.ptp(y) > 0:
            rhos.append(spearmanr(x, y).statistic)
        same.append(np.argmax(x) == np.argmax(y))
    diff = np.abs(both["score"].to_numpy() - both["score_b"].to_numpy())
    return [
        a_path.stem,
        f"{len(both)}/{len(a)}",
        f"{np.median(rhos):.3f}",
        f"{np.mean(rhos):.3f}",
        f"{np.mean(same):.1%}",
        f"{diff.max():.3g}",
        f"{np.median(diff):.3g}",
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path, help="a folder of <task>.parquet score files")
    ap.add_argument("b", type=Path, help="the folder to compare with (its pairs in common)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    rows = [agreement(p, args.b / p.name) for p in sorted(args.a.glob("*.parquet")) if (args.b / p.name).is_file()]
    if not rows:
        raise SystemExit(f"no task has score files in both {args.a} and {args.b}")
    sep = " | "
    print("| " + sep.join(HEADERS) + " |")
    print("|" + " --- |" * len(HEADERS))
    for r in rows:
        print("| " + sep.join(map(str, r)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
