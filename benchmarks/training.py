"""Benchmark: UDR training steps with length-sorted demonstration chunks (`train.length_chunk`) against
one padded batch per micro-batch (`train.length_chunk=0`).

Workload: the project's own round-0 LM feedback (`data/scores/round0/`, from `dvc repro` or
`udr score`), with the project's params (`--set` overrides them). Both trainers start from the same
init (the base encoder) and run the same steps: the same tasks, queries and candidates (the step
RNG is seeded by step), in lockstep (step s of one, then step s of the other), so load from other
processes falls on both alike. Each step's time is `time.perf_counter()` around `train_step`.

Dropout masks are drawn per forward chunk, so the two runs' random draws, and hence their losses,
differ after step 0; the script also checks, with dropout off, that the chunked embeddings equal the
one-batch ones (max |diff|), which is what makes the change a pure saving. `--epr` times the EPR
baseline's steps (`epr_train_settings`: two candidates a query, both encoders learn) instead of UDR's.

    .venv/bin/python benchmarks/training.py --steps 12
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=Path, default=REPO / "params.yaml")
    ap.add_argument("--set", "-S", action="append", default=[], help="parameter override key.path=value")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--chunk", type=int, default=16, help="length_chunk of the chunked run")
    ap.add_argument(
        "--compare",
        choices=["chunk", "dtype"],
        default="chunk",
        help="chunk: one padded batch against length-sorted chunks; dtype: train.dtype fp32 against bf16",
    )
    ap.add_argument(
        "--epr",
        action="store_true",
        help="the EPR baseline's steps (two candidates a query, both encoders learn) instead of UDR's",
    )
    args = ap.parse_args()

    import torch

    from benchmarks.lm_throughput import cpu_name
    from udr.config import load_settings
    from udr.project.training import build_trainer, load_scored_queries
    from udr.retriever.recipes import epr_train_settings
    from udr.retriever.sampling import TaskSampler
    from udr.retriever.training import train_step
    from udr.util.distributed import Distributed

    base = load_settings(args.params, args.set)
    if args.epr:
        base = base.model_copy(update={"train": epr_train_settings(base.train)})
    if args.compare == "chunk":
        variants = {"one padded batch (0)": {"length_chunk": 0}, f"length-sorted chunks ({args.chunk})": {}}
        variants = {n: {"length_chunk": args.chunk, **v} for n, v in variants.items()}
    else:
        variants = {"fp32": {"dtype": "fp32"}, "bf16 autocast": {"dtype": "bf16"}}
    runs = {}
    for name, update in variants.items():
        runs[name] = base.model_copy(update={"train": base.train.model_copy(update={**update, "device": "cpu"})})
    tasks = base.training_tasks()
    data = load_scored_queries(base, tasks, 0, base.encoder)
    sampler = TaskSampler({t: len(q) for t, q in data.items()}, base.train.alpha)
    dp = Distributed("cpu")
    init = base.paths.base_model("encoder")
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {
            name: build_trainer(settings, 0, init, Path(tmp) / str(i), "cpu", 0, args.steps, data)
            for i, (name, settings) in enumerate(runs.items())
        }
        times = {n: [] for n in runs}
        losses = {n: [] for n in runs}
        for step in range(args.steps):
            for name in runs:
                t0 = time.perf_counter()
                record = train_step(trainers[name], data, sampler, step, dp)
                times[name].append(time.perf_counter() - t0)
                losses[name].append(record["loss"])

        # Exactness without dropout: the same texts, one padded batch vs chunks.
        encoder = trainers[next(iter(runs))].encoder
        encoder.train(False)
        texts = [t for queries in data.values() for q in queries[:8] for t in q.candidate_texts[:8]]
        with torch.no_grad():
            diff = (encoder.embed(texts, "demo") - encoder.embed(texts, "demo", chunk=args.chunk)).abs().max().item()

    recipe = "EPR's (both encoders learn)" if args.epr else "UDR's"
    candidates = 2 if args.epr else base.train.candidates_per_query
    print(
        f"tasks {', '.join(tasks)}; {args.steps} of {recipe} steps of {base.train.batch_size} queries x "
        f"{candidates} candidates, micro-batch {base.train.micro_batch}; torch threads "
        f"{torch.get_num_threads()}\n"
    )
    print(f"CPU: {cpu_name()}")
    first_column = "demonstrations per forward" if args.compare == "chunk" else "precision"
    print(f"| {first_column} | s/step (median) | steps/s | mean loss |")
    print("| --- | ---: | ---: | ---: |")
    medians = {}
    for name in runs:
        medians[name] = statistics.median(times[name])
        print(f"| {name} | {medians[name]:.2f} | {1 / medians[name]:.3f} | {statistics.mean(losses[name]):.4f} |")
    first, second = medians.values()
    print(f"\nspeed-up (median s/step, {' / '.join(runs)}): {first / second:.2f}x")
    print(f"max |embedding diff| with dropout off, {len(texts)} demonstrations: {diff:.2e}")


if __name__ == "__main__":
    main()
