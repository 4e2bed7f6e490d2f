"""Benchmark: which of the pipeline's CPU computations give the same bits under another torch thread count.

A matrix product splits its work among threads, and where a split divides a sum the partial sums add up in
another order: the last bits can change with the thread count. For each count in `--threads`, a fresh process
(`torch.set_num_threads`) computes with the project's own code and params, in the precision `dtype: auto`
resolves to here (or `-S score.dtype=...` and so on):

- *LM scores*: the feedback score of `--pairs-per-task` seeded round-0 pairs of each of `--tasks`
  (`udr.feedback.scoring.score_items`, the score stage's scorer; `evaluate` runs the same forwards);
- *pool embeddings*: E_d's embedding of `--texts` train inputs of each task (the index's forward);
- *training*: `--steps` optimiser steps of `udr train` round 0 on those tasks from the base encoder
  (`udr.retriever.training.train_step`), and the query encoder's weights after them.

The table compares each count with `--reference` (default 2, the count the committed results were made
with): "same" where every bit is, else the largest absolute difference. It needs a project's prepared data,
round-0 candidates and scores (`dvc repro score`).

    .venv/bin/python benchmarks/threads.py --threads 1,2,4
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

COMPUTATIONS = ("LM scores", "pool embeddings", "training")


def compute(args, threads: int, out: Path) -> None:
    """One thread count's arrays, saved to `out` (.npz): scores_<task>, embed_<task>, weights."""
    import torch

    torch.set_num_threads(threads)
    from benchmarks.scoring import build_items, sample_pairs
    from udr.config import load_settings
    from udr.data.prepare import read_prepared
    from udr.feedback.scoring import score_items
    from udr.lm.loading import load_causal_lm
    from udr.lm.scorer import LMScorer
    from udr.project.training import build_trainer, load_scored_queries
    from udr.retriever.initial import initial_bi_encoder
    from udr.retriever.sampling import TaskSampler
    from udr.retriever.training import train_step
    from udr.util.distributed import Distributed, resolve_lm_precision

    settings = load_settings(args.params, [*args.set, f"train.tasks=[{','.join(args.tasks)}]"])
    root, arrays = settings.root, {}
    _, score_dtype = resolve_lm_precision("cpu", settings.score.dtype, "score")
    model, tok = load_causal_lm(settings.paths.base_model("lm"))
    scorer = LMScorer(model.eval(), bf16=score_dtype == "bf16", pad_id=tok.pad_token_id or 0)
    for task in args.tasks:
        _, generation, items = build_items(root, task, tok, sample_pairs(root, task, args.pairs_per_task, 42), None)
        with torch.inference_mode():
            arrays[f"scores_{task}"] = score_items(scorer, items, generation, settings.score.batch_tokens)[0]
    del model, scorer

    base, spec = settings.paths.base_model("encoder"), str(settings.models.encoder)
    encoder = initial_bi_encoder(base, settings.encoder, base_spec=spec, shared=settings.train.shared_encoder)
    encoder.train(False)
    for task in args.tasks:
        texts = read_prepared(root, task, "train")["input"].to_list()[: args.texts]
        arrays[f"embed_{task}"] = encoder.encode(texts, "demo")

    data = load_scored_queries(settings, args.tasks, 0, settings.encoder)
    sampler = TaskSampler({t: len(q) for t, q in data.items()}, settings.train.alpha)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = build_trainer(settings, 0, base, Path(tmp) / "partial", "cpu", 0, args.steps, data)
        for step in range(args.steps):
            train_step(trainer, data, sampler, step, Distributed("cpu"))
        query = trainer.encoder.query_model
        arrays["weights"] = np.concatenate([p.detach().float().numpy().ravel() for p in query.parameters()])
    np.savez(out, **arrays)


def compare(reference: dict, other: dict, prefix: str) -> str:
    """ "same" where every array under `prefix` is bit for bit the reference's, else the largest difference."""
    keys = [k for k in reference if k.startswith(prefix)]
    if all(np.array_equal(reference[k], other[k]) for k in keys):
        return "same"
    return f"{max(float(np.max(np.abs(reference[k] - other[k]))) for k in keys):.1e}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=Path, default=REPO / "params.yaml")
    ap.add_argument("--set", "-S", action="append", default=[], help="parameter override key.path=value")
    ap.add_argument("--threads", default="1,2,4", help="comma-separated torch thread counts")
    ap.add_argument("--reference", type=int, default=2, help="the thread count the others are compared with")
    ap.add_argument("--tasks", type=lambda s: [t for t in s.split(",") if t], default=["sst2", "break"])
    ap.add_argument("--pairs-per-task", type=int, default=32)
    ap.add_argument("--texts", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        from udr.errors import UdrError

        try:
            compute(args, args.worker, args.out)
        except UdrError as exc:  # a missing project file or a bad parameter: one line, the parent says which run
            raise SystemExit(f"benchmarks/threads.py: error: {exc}") from None
        return 0

    counts = sorted({int(n) for n in args.threads.split(",")} - {args.reference})
    # The reference count runs twice: a difference there is no thread count's.
    runs = [(f"{args.reference} {_threads(args.reference)}", args.reference)]
    runs += [(f"{args.reference} again", args.reference)] + [(f"{n} {_threads(n)}", n) for n in counts]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, n) in enumerate(runs):
            out = Path(tmp) / f"{i}.npz"
            worker = [*(argv if argv is not None else sys.argv[1:]), "--worker", str(n), "--out", str(out)]
            if subprocess.run([sys.executable, __file__, *worker]).returncode != 0:
                raise SystemExit(f"benchmarks/threads.py: error: the run on {n} {_threads(n)} failed (above)")
            with np.load(out) as saved:
                results[label] = dict(saved)

    from udr.util.machine import machine_kind

    (ref_label, _), *others = runs
    print(f"CPU: {machine_kind()}; tasks {', '.join(args.tasks)}; against {ref_label}\n")
    print("| computation | " + " | ".join(label for label, _ in others) + " |")
    print("|---|" + "---:|" * len(others))
    for name, prefix in zip(COMPUTATIONS, ("scores_", "embed_", "weights")):
        cells = [compare(results[ref_label], results[label], prefix) for label, _ in others]
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


def _threads(n: int) -> str:
    return "thread" if n == 1 else "threads"


if __name__ == "__main__":
    raise SystemExit(main())
