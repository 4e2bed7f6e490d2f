"""Benchmark: the LM stages' precision on this machine, fp32 against bf16 autocast (`score.dtype`,
`evaluate.dtype`).

Whether bf16 autocast pays on a CPU depends on the CPU: with oneDNN's bf16 kernels (AVX-512, AMX)
it can beat fp32; without them (an AVX2-only CPU) torch falls back to a generic bf16 GEMM that is
several times slower than fp32. This script says which case this machine is, and measures both
precisions with the pipeline's own code in the same run, in alternating order (best of `--repeats`):

- *prompt forward*: `LMScorer.score_batch` on `--batches` batches of prompts of `--prompt-tokens`
  tokens with one short continuation each (the scoring stage's and label prediction's work);
- *decode steps*: `GreedyGenerator.generate_ids` on `--rows` prompts, `--new-tokens` greedy steps
  each: the time of its one-token forwards over the cache (LM head included), timed by
  `benchmarks.evaluate.ForwardTimer` on the model; the prompt forward before them is not counted.

Token ids are seeded random ids: speed does not depend on their values.

    .venv/bin/python benchmarks/precision.py --markdown
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.evaluate import ForwardTimer  # noqa: E402
from benchmarks.scoring import fmt_table  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=REPO / "models/base/lm", help="a resolved causal LM directory")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--batches", type=int, default=3, help="prompt-forward batches of 4 prompts")
    ap.add_argument("--rows", type=int, default=8, help="prompts decoded together")
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()

    import torch

    from udr.errors import UdrError
    from udr.lm.loading import load_causal_lm
    from udr.lm.predict import GreedyGenerator
    from udr.lm.scorer import LMScorer, ScoringItem
    from udr.util.distributed import cpu_has_bf16_kernels

    if not args.model.is_dir():
        raise SystemExit(f"benchmarks/precision.py: error: missing model {args.model} (run `udr models` first)")
    try:
        model, tokenizer = load_causal_lm(args.model)
    except UdrError as exc:
        raise SystemExit(f"benchmarks/precision.py: error: {exc}") from None
    gen = torch.Generator().manual_seed(0)
    vocab = min(model.config.vocab_size, 32000)

    def ids(n: int) -> tuple[int, ...]:
        return tuple(torch.randint(100, vocab, (n,), generator=gen).tolist())

    batches = [
        [ScoringItem(0, j, ids(args.prompt_tokens), (ids(4),), 0) for j in range(4)] for _ in range(args.batches)
    ]
    prompts = [ids(args.prompt_tokens) for _ in range(args.rows)]

    scorers = {bf16: LMScorer(model, bf16=bf16, pad_id=tokenizer.pad_token_id or 0) for bf16 in (False, True)}
    generators = {bf16: GreedyGenerator(model, tokenizer, bf16=bf16) for bf16 in (False, True)}
    for generator in generators.values():
        generator.stop_ids = []  # every row runs all the steps

    def prompt_forward(bf16: bool) -> float:
        start = time.perf_counter()
        for batch in batches:
            scorers[bf16].score_batch(batch)
        return time.perf_counter() - start

    # The decode steps: the model's one-token forwards over a cache, LM head included (the prompt
    # forward before them goes through the decoder alone, or counts as a prompt forward here).
    timer = ForwardTimer(model)

    def decode_steps(bf16: bool) -> float:
        timer.take()
        generators[bf16].generate_ids(prompts, args.new_tokens)
        return timer.take()["generation steps"]

    phases = {
        "prompt forward": (prompt_forward, args.batches * 4 * (args.prompt_tokens + 4)),
        "decode steps": (decode_steps, args.rows * (args.new_tokens - 1)),
    }
    best: dict[tuple[str, bool], float] = {}
    for phase, (run, _) in phases.items():
        run(False), run(True)  # warm-up: first allocations, oneDNN primitive creation
        for rep in range(args.repeats):
            for bf16 in (False, True) if rep % 2 == 0 else (True, False):
                seconds = run(bf16)
                best[phase, bf16] = min(best.get((phase, bf16), seconds), seconds)

    rows = []
    for phase, (_, tokens) in phases.items():
        fp32, bf16 = best[phase, False], best[phase, True]
        rows.append(
            [
                phase,
                tokens,
                f"{fp32:.2f}",
                f"{bf16:.2f}",
                f"{tokens / fp32:.0f}",
                f"{tokens / bf16:.0f}",
                f"{bf16 / fp32:.2f}x",
            ]
        )
    headers = ["phase", "tokens", "fp32 s", "bf16 s", "fp32 tok/s", "bf16 tok/s", "bf16 time / fp32 time"]
    print(fmt_table(headers, rows, args.markdown))
    n_params = sum(p.numel() for p in model.parameters()) / 1e6
    print(
        f"\nCPU capability {torch.backends.cpu.get_cpu_capability()}, bf16 kernels: "
        f"{'yes' if cpu_has_bf16_kernels() else 'no'}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, model {args.model.name} ({n_params:.1f}M), "
        f"best of {args.repeats}, alternating order"
    )


if __name__ == "__main__":
    main()
