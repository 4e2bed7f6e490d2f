"""Benchmark: where scoring's time goes on a device, for each engine (padded, packed), from a profile.

Workload: `benchmarks/scoring.py`'s pairs of one task (`--task`, `--pairs`), scored by
`score_items` as the score stage runs it, once untimed (the packed engine's attention compiles),
then once under `torch.profiler` (CPU and CUDA activities). Per engine, one row:

- wall s: the profiled pass, device synchronised;
- kernel s: the sum of the device's kernel and copy time (the device's own events);
- busy: kernel s / wall s. Far under 1 means the GPU waits on the host (launches, Python, the
  tokens' bookkeeping), not on its arithmetic or memory;
- launches: kernel launch calls on the host (cudaLaunchKernel and its variants), per pair and per
  second, and the mean kernel's duration;
- the three kernels that take the most device time, with their share.

On CPU the profile has no device events: wall s and the top host operators are what it shows.

    python benchmarks/gpu/profile_scoring.py --project PROJECT --device cuda --task sst2 --markdown
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.scoring import (  # noqa: E402
    build_items,
    fmt_table,
    random_llama_1b,
    sample_pairs,
    synchronize,
    workload_tokens,
)

HEADERS = [
    "model",
    "engine",
    "pairs",
    "tokens",
    "wall s",
    "kernel s",
    "busy",
    "launches",
    "per pair",
    "per s",
    "mean kernel us",
    "top kernels (share of kernel time)",
]
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch")


def _device_us(avg) -> float:
    """An averaged event's own device time in microseconds, across torch's names for it."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(avg, name, None)
        if value is not None:
            return float(value)
    return 0.0


def profile_row(label, engine, scorer, items, generation, batch_tokens, device) -> list:
    """One profiled pass of `scorer` over `items`: the table's row."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from udr.feedback.scoring import score_items

    score_items(scorer, items, generation, batch_tokens)  # untimed: compiles, warms the allocator
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    synchronize(device)
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        score_items(scorer, items, generation, batch_tokens)
        synchronize(device)
        wall = time.perf_counter() - t0
    averages = prof.key_averages()
    launches = sum(a.count for a in averages if a.key in LAUNCH_CALLS)
    # the device's own events (kernels, copies): a host operator's device time repeats its kernels'
    device_events = [a for a in averages if a.device_type == DeviceType.CUDA and _device_us(a) > 0]
    kernel_us = sum(_device_us(a) for a in device_events)
    if device_events:
        top = sorted(device_events, key=lambda a: -_device_us(a))[:3]
        tops = "; ".join(f"{a.key[:48]} {_device_us(a) / kernel_us:.0%}" for a in top)
    else:  # CPU: the host operators that take the most time
        host = sorted((a for a in averages if a.key.startswith("aten::")), key=lambda a: -a.self_cpu_time_total)[:3]
        total = sum(a.self_cpu_time_total for a in averages) or 1.0
        tops = "host: " + "; ".join(f"{a.key} {a.self_cpu_time_total / total:.0%}" for a in host)
    kernel_s = kernel_us / 1e6
    return [
        label,
        engine,
        len(items),
        workload_tokens(items),
        f"{wall:.2f}",
        f"{kernel_s:.2f}",
        f"{kernel_s / wall:.0%}" if device_events else "-",
        launches or "-",
        f"{launches / len(items):.0f}" if launches else "-",
        f"{launches / wall:,.0f}" if launches else "-",
        f"{kernel_us / launches:.0f}" if launches else "-",
        tops,
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", type=Path, default=REPO, help="project root (prepared data, candidates, models)")
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--pairs", type=int, default=320, help="pairs of the task's round-0 candidates")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--batch-tokens", type=int, default=8192, help="the padded engine's tokens per batch")
    ap.add_argument("--packed-tokens", type=int, default=32768, help="the packed engine's tokens per row")
    ap.add_argument("--random-llama-1b", action="store_true", help="also profile a random ~1B Llama-style model")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)

    import torch

    from udr.lm.loading import load_causal_lm
    from udr.lm.packed import PackedScorer
    from udr.lm.scorer import LMScorer

    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device available")
    device = torch.device(args.device)
    model, tok = load_causal_lm(args.project / "models" / "base" / "lm")
    n_params = sum(p.numel() for p in model.parameters())
    models = [(f"project LM {n_params / 1e6:.1f}M", model.to(device), None)]
    if args.random_llama_1b:
        big = random_llama_1b(device)
        models.append(("random Llama 853M", big, big.config.vocab_size))
    pairs = sample_pairs(args.project, args.task, args.pairs, args.seed)
    rows = []
    for label, lm, vocab in models:
        pad_id = (tok.pad_token_id or 0) % (vocab or 1 << 62)
        task, generation, items = build_items(args.project, args.task, tok, pairs, vocab)
        padded = LMScorer(lm, bf16=True, pad_id=pad_id)
        packed = PackedScorer(lm, bf16=True, pad_id=pad_id, row_tokens=args.packed_tokens)
        rows.append(profile_row(label, "padded", padded, items, generation, args.batch_tokens, device))
        rows.append(
            profile_row(label, f"packed ({packed.attention})", packed, items, generation, args.batch_tokens, device)
        )
    print(fmt_table(HEADERS, rows, args.markdown))
    print(
        f"\n{args.task}: {len(pairs)} pairs (seed {args.seed}), bf16 autocast, padded batches of {args.batch_tokens} "
        f"tokens, packed rows of {args.packed_tokens}; one profiled pass after an untimed one; kernel s = self device "
        f"time of every event; busy = kernel s / wall s; launches = kernel launch calls on the host."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
