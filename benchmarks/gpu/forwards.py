"""Benchmark: in-context evaluation's prompt forwards on a device, in prompt tokens/s and as a share of a
bf16 matrix-product peak measured in the same run (MFU).

Workload: `benchmarks/evaluate.py`'s: the first `--rows` test rows of each task (`--gen-rows` for
generation) with BM25's demonstrations, predicted by udr's `TaskEvaluation.predict` (label prompts in
length-bucketed batches, generation with udr's greedy decode loop). Tokens counted: the prompts' own
tokens (labels and generated tokens not counted), so the MFU is a lower bound of the LM's work.
FLOPs: 2 x parameters x tokens (attention not counted). Each task is timed `--repeats` times after an
untimed warm-up; the best run counts.

    python benchmarks/gpu/forwards.py --project PROJECT --device cuda --markdown
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.evaluate import fresh, load_workload  # noqa: E402
from benchmarks.scoring import fmt_table, peak_bf16_flops, synchronize  # noqa: E402

HEADERS = ["task", "kind", "prompts", "prompt tokens", "s", "prompts/s", "tokens/s", "MFU"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", type=Path, default=REPO, help="project root (params.yaml, prepared data, models)")
    ap.add_argument("--tasks", default="", help="comma-separated tasks (default: the project's)")
    ap.add_argument("--rows", type=int, default=0, help="test rows per classification task (0: all)")
    ap.add_argument("--gen-rows", type=int, default=0, help="test rows per generation task (0: all)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="bf16")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)

    import torch

    from udr.config import load_settings
    from udr.project.evaluation import language_model

    settings = load_settings(
        args.project / "params.yaml", [f"evaluate.device={args.device}", f"evaluate.dtype={args.dtype}"]
    )
    tasks = [t for t in args.tasks.split(",") if t] or settings.task_names()
    lm = language_model(settings)
    device = next(lm.model.parameters()).device
    n_params = sum(p.numel() for p in lm.model.parameters())
    peak = peak_bf16_flops(device) if device.type == "cuda" else None
    rows, total = [], {"n": 0, "tok": 0, "s": 0.0}
    for task in tasks:
        ev, prompts = load_workload(settings, lm, task, args.gen_rows if settings.task(task).generation else args.rows)
        fresh(ev).predict(prompts[:1])
        best = float("inf")
        for _ in range(args.repeats):
            synchronize(device)
            t0 = time.perf_counter()
            fresh(ev).predict(prompts)
            synchronize(device)
            best = min(best, time.perf_counter() - t0)
        tokens = sum(len(p.token_ids) for p in prompts)
        total["n"] += len(prompts)
        total["tok"] += tokens
        total["s"] += best
        rows.append(_row(task, ev.task.kind, len(prompts), tokens, best, n_params, peak))
    rows.append(_row("total", "", total["n"], total["tok"], total["s"], n_params, peak))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"{name}; LM {n_params / 1e6:.1f}M parameters, {args.dtype}, evaluate.batch_tokens "
        f"{settings.evaluate.batch_tokens}, context {settings.evaluate.context}"
        + (f"; measured bf16 matmul peak {peak / 1e12:.0f} TFLOP/s" if peak else "")
        + "\n"
    )
    print(fmt_table(HEADERS, rows, args.markdown))
    return 0


def _row(task, kind, n, tokens, seconds, n_params, peak):
    mfu = f"{2 * n_params * tokens / seconds / peak:.2%}" if peak else "-"
    return [task, kind, n, tokens, f"{seconds:.2f}", f"{n / seconds:.1f}", f"{tokens / seconds:,.0f}", mfu]


if __name__ == "__main__":
    sys.exit(main())
