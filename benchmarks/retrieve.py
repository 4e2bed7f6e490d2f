"""Benchmark: serving demonstrations with the Python API (`udr.Retriever`) against BM25 (bm25s).

Workload: a pool of `--pool-size` (default 50,000) real demonstrations in the generation shape
``{"input", "target"}``: CommonGen's train split (39,069 rows), then SMCalFlow's validation split
(from ../shared/data or $UDR_DATA_DIR), written to a JSON-lines file and served as an own pool
with one instruction. Queries: `--queries` (default 256) real inputs that are not in the pool
(CommonGen validation, then the SMCalFlow rows after the pool), k = 8.

Measured, for the dense retriever (the model at --model; default models/final, else the base
encoder from `udr models`) and for BM25 over the pool's inputs (udr.evaluation.baselines.BM25Retriever,
bm25s), in the same run:

- index build: dense = embedding the pool with E_d + the faiss index (empty cache), and reloading
  it from the embedding cache in a new Retriever; BM25 = tokenising and indexing the inputs;
- warm single-query latency p50 / p95 (each query alone, after 10 warm-up queries), for exact search
  and for approximate search (`search="approximate"`: a faiss IVF index), with the approximate
  search's recall@k against exact search on the queries;
- batch throughput: queries/s over batches of 64;
- one cold `udr retrieve QUERY --pool FILE --instruction I --json` (a new process; the pool is
  already in the cache), median of 3, next to `udr --help` (the floor: Python + Typer).

    .venv/bin/python benchmarks/retrieve.py                 # 50k pool, CPU
    .venv/bin/python benchmarks/retrieve.py --pool-size 5000 --queries 64   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

INSTRUCTION = "Generate a sentence using these concepts: "


def data_dir() -> Path:
    return Path(os.environ.get("UDR_DATA_DIR", REPO.parent / "shared" / "data"))


def read_rows(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def workload(pool_size: int, n_queries: int) -> tuple[list[dict], list[str]]:
    """(pool rows, queries): real rows, the queries disjoint from the pool."""
    commongen = read_rows(data_dir() / "commongen" / "train.jsonl")
    smcalflow = read_rows(data_dir() / "smcalflow" / "validation.jsonl")
    rows = [{"input": r["input"], "target": r["target"]} for r in commongen + smcalflow]
    if pool_size > len(rows) - n_queries:
        sys.exit(f"--pool-size {pool_size} too large: {len(rows)} rows here, {n_queries} kept for queries")
    pool = rows[:pool_size]
    held_out = [r["input"] for r in read_rows(data_dir() / "commongen" / "validation.jsonl")]
    held_out += [r["input"] for r in rows[pool_size:]]
    seen, queries = {r["input"] for r in pool}, []
    for q in held_out:
        if q not in seen and q not in queries:
            queries.append(q)
        if len(queries) == n_queries:
            break
    return pool, queries


def model_dir(arg: str | None) -> Path:
    """--model, else models/final, else a bi-encoder built from the base encoder (`udr models`)."""
    if arg:
        return Path(arg)
    from udr.paths import Paths

    final, base = Paths(REPO).final_model, Paths(REPO).base_model("encoder")
    if final.is_dir():
        return final
    if not base.is_dir():
        sys.exit("no model: run `dvc repro` (models/final) or `udr models --role encoder`, or pass --model")
    from udr.retriever.encoder import BiEncoder, BiEncoderSettings

    out = Path(tempfile.mkdtemp(prefix="udr-bench-model-")) / "base-biencoder"
    BiEncoder.from_base(base, BiEncoderSettings(max_demo_length=128)).save(out)
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def timed_queries(run_one, run_batch, queries: list[str], batch: int) -> dict:
    for q in queries[:10]:
        run_one(q)
    single = []
    for q in queries:
        t0 = time.perf_counter()
        run_one(q)
        single.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    done = 0
    for lo in range(0, len(queries) - batch + 1, batch):
        run_batch(queries[lo : lo + batch])
        done += batch
    seconds = time.perf_counter() - t0
    return {
        "p50_ms": 1000 * statistics.median(single),
        "p95_ms": 1000 * percentile(single, 95),
        "batch_qps": done / seconds if done else float("nan"),
    }


def cold_call(args: list[str], env: dict, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool-size", type=int, default=50_000)
    ap.add_argument("--queries", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("-k", type=int, default=8)
    ap.add_argument("--model", help="a udr bi-encoder directory (default: models/final)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the dense side)")
    args = ap.parse_args()

    import torch

    from udr import Retriever
    from udr.evaluation.baselines import BM25Retriever

    pool, queries = workload(args.pool_size, args.queries)
    model = model_dir(args.model)
    work = Path(tempfile.mkdtemp(prefix="udr-bench-"))
    try:
        pool_file = work / "pool.jsonl"
        pool_file.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in pool), encoding="utf-8")
        cache = work / "cache"
        print(
            f"pool: {len(pool)} demonstrations ({pool_file.stat().st_size / 1e6:.1f} MB), {len(queries)} queries, "
            f"k={args.k}, batch {args.batch}; model {model}; device {args.device}; torch threads "
            f"{torch.get_num_threads()}",
            file=sys.stderr,
        )

        rows = {}
        t0 = time.perf_counter()
        dense = Retriever.load(model, device=args.device, cache_dir=cache, batch_size=args.batch, progress=True)
        load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        dense.add_pool(pool_file, instruction=INSTRUCTION)
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        reloaded = Retriever.load(model, device=args.device, cache_dir=cache, batch_size=args.batch)
        reloaded.add_pool(pool_file, instruction=INSTRUCTION)
        reload_s = time.perf_counter() - t0
        rows["dense (udr)"] = {
            "build_s": build_s,
            "reload_s": reload_s,
            **timed_queries(
                lambda q: dense.retrieve(q, k=args.k),
                lambda qs: dense.retrieve_batch(qs, k=args.k),
                queries,
                args.batch,
            ),
        }

        t0 = time.perf_counter()
        approx = Retriever.load(model, device=args.device, cache_dir=cache, batch_size=args.batch, search="approximate")
        approx.add_pool(pool_file, instruction=INSTRUCTION)
        approx_build_s = time.perf_counter() - t0
        index = approx._searcher(approx.resolve_task(None)).index
        rows["dense (udr), approximate"] = {
            "build_s": float("nan"),
            "reload_s": approx_build_s,
            **timed_queries(
                lambda q: approx.retrieve(q, k=args.k),
                lambda qs: approx.retrieve_batch(qs, k=args.k),
                queries,
                args.batch,
            ),
        }
        exact_ids = [[d.pool_id for d in demos] for demos in dense.retrieve_batch(queries, k=args.k)]
        approx_ids = [[d.pool_id for d in demos] for demos in approx.retrieve_batch(queries, k=args.k)]
        recall = statistics.mean(len(set(a) & set(b)) / args.k for a, b in zip(exact_ids, approx_ids))
        ivf = f"IVF {index.nlist} cells, nprobe {index.nprobe}, calibrated recall@8 {index.calibrated_recall:.3f}"

        t0 = time.perf_counter()
        bm25 = BM25Retriever(range(len(pool)), [r["input"] for r in pool])
        rows["bm25 (bm25s)"] = {
            "build_s": time.perf_counter() - t0,
            "reload_s": float("nan"),
            **timed_queries(lambda q: bm25.rank([q], args.k), lambda qs: bm25.rank(qs, args.k), queries, args.batch),
        }

        env = {**os.environ, "UDR_CACHE_DIR": str(cache)}
        udr = str(Path(sys.executable).with_name("udr"))
        help_s = cold_call([udr, "--help"], env)
        cold_s = cold_call(
            [
                udr,
                "retrieve",
                queries[0],
                "--pool",
                str(pool_file),
                "--instruction",
                INSTRUCTION,
                "--model",
                str(model),
                "-k",
                str(args.k),
                "--json",
                "--device",
                args.device,
            ],
            env,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    d, b = rows["dense (udr)"], rows["bm25 (bm25s)"]
    print(
        "\n| retriever | index build s | reload from cache s | single p50 ms | single p95 ms | "
        f"batch-{args.batch} queries/s |"
    )
    print("|:--|--:|--:|--:|--:|--:|")
    for name, r in rows.items():
        reload = "-" if r["reload_s"] != r["reload_s"] else f"{r['reload_s']:.2f}"
        build = "-" if r["build_s"] != r["build_s"] else f"{r['build_s']:.1f}"
        print(f"| {name} | {build} | {reload} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} | {r['batch_qps']:.0f} |")
    print(
        f"| dense / bm25 | {d['build_s'] / b['build_s']:.1f}x | | {d['p50_ms'] / b['p50_ms']:.2f}x | "
        f"{d['p95_ms'] / b['p95_ms']:.2f}x | {d['batch_qps'] / b['batch_qps']:.2f}x |"
    )
    print(
        f"\napproximate search: {ivf}; recall@{args.k} against exact search on the {len(queries)} queries: "
        f"{recall:.4f}; its reload column includes training the IVF index"
    )
    print(f"model load (Retriever.load, imports included): {load_s:.2f} s")
    print(
        f"cold `udr retrieve ... --pool` (new process, pool cached), median of 3: {cold_s:.2f} s "
        f"(`udr --help`: {help_s:.2f} s)"
    )


if __name__ == "__main__":
    main()
