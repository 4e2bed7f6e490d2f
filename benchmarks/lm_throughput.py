"""Benchmark: the LM stages' tokens per second against this machine's own matrix-product rate.

Three figures in one run, for each precision (fp32, and bf16 autocast as the stages run it):

1. **matrix products**: the decoder's own projection shapes (q, k, v, o, gate, up, down of one
   layer) on `--matrix-tokens` rows, `F.linear` back to back; their rate divided by the decoder's
   FLOPs per token (2 x its projection weights: 0.21 GFLOP for SmolLM2-135M) is the tokens/s that
   matrix products alone allow. Every other row is given as a share of it.
2. **decoder forward**: the plain decoder (random ids, hidden states only) at fixed shapes
   (`--shapes`, rows x tokens), as the stages' batches are.
3. **the stages' own work**, on the project's prepared data, with the stages' code:
   - scoring (`udr score`'s `score_items`) of the default run's pairs: each task's scored queries
     (`score.queries_per_task`) with their round-0 candidates; tokens = each pair's prompt and
     continuations, as the stage's summary counts them;
   - scoring a pool's recurring candidates (`--pool-candidates` candidates of each task with every
     pair of the round-0 candidates that has them, what a shard looks like when every pool row is
     scored) with `score.share_prefixes` on and off; tokens as above (the pairs' own, so sharing a
     demonstration shows as a higher rate);
   - label prediction and generation (`udr evaluate`'s `TaskEvaluation.predict`) on the first
     `--rows` / `--gen-rows` test rows with BM25's demonstrations; tokens = the prompts' (and, for
     generation, the generated ones).

Timing: `time.perf_counter()`, best of `--repeats`, the precisions in alternating order (fp32 then
bf16, then bf16 then fp32, ...), so load from other processes falls on both alike. The stage rows
exclude process start and model load (`benchmarks/evaluate.py --breakdown` measures those). The CPU
is printed with the table: compare figures only within one run on one machine.

    .venv/bin/python benchmarks/lm_throughput.py --markdown
    .venv/bin/python benchmarks/lm_throughput.py --rows 0 --gen-rows 0 --markdown   # the whole test splits
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.scoring import fmt_table  # noqa: E402

PRECISIONS = ("fp32", "bf16")
SCORE_TASKS = ("sst2", "trec", "comv", "break", "e2e", "python_code")
EVAL_TASKS = ("sst2", "trec", "comv", "e2e", "break")
FP32_TOLERANCE = 1e-4  # fp32 scores of one pair by two routes (rounding only; tests/lm/test_scorer.py)


@dataclass
class Row:
    """One line of the table: what ran, its tokens, and its best seconds per precision."""

    name: str
    tokens: int
    seconds: dict[str, float] = field(default_factory=dict)


def cpu_name() -> str:
    """The CPU's model name (Linux), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def projection_shapes(decoder) -> list[tuple[int, int]]:
    """(in, out) of every linear layer of one decoder layer."""
    import torch

    layer = decoder.layers[0]
    return [(m.in_features, m.out_features) for m in layer.modules() if isinstance(m, torch.nn.Linear)]


def flops_per_token(decoder) -> float:
    """2 x the decoder's projection weights: the matrix-product FLOPs of one token's forward."""
    return 2.0 * len(decoder.layers) * sum(i * o for i, o in projection_shapes(decoder))


def best_of(runs: dict, repeats: int) -> dict[str, float]:
    """Each run's best seconds over `repeats` rounds, the runs in alternating order."""
    best: dict[str, float] = {}
    for rep in range(repeats):
        for name in runs if rep % 2 == 0 else list(reversed(runs)):
            start = time.perf_counter()
            runs[name]()
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
    return best


def matrix_row(decoder, tokens: int, repeats: int) -> Row:
    """The decoder layer's projections on `tokens` rows: seconds for one layer's worth, per precision."""
    import torch

    torch.manual_seed(0)
    shapes = projection_shapes(decoder)
    ops = {}
    for precision in PRECISIONS:
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        pairs = [(torch.randn(tokens, i, dtype=dtype), torch.randn(o, i, dtype=dtype)) for i, o in shapes]

        def run(pairs=pairs):
            for x, w in pairs:
                torch.nn.functional.linear(x, w)

        run()  # warm-up
        ops[precision] = run
    seconds = best_of(ops, max(repeats, 3))
    # Stated as the seconds the whole decoder's projections would take on `tokens` tokens.
    return Row(
        f"matrix products ({tokens} tokens, one layer's shapes)",
        tokens,
        {k: v * len(decoder.layers) for k, v in seconds.items()},
    )


def decoder_rows(model, shapes: list[tuple[int, int]], repeats: int) -> list[Row]:
    import torch

    from udr.lm.precision import lm_forward_context

    decoder, rows = model.get_decoder(), []
    for batch, width in shapes:
        ids = torch.randint(
            100, model.config.vocab_size - 100, (batch, width), generator=torch.Generator().manual_seed(0)
        )
        runs = {}
        for precision in PRECISIONS:

            def run(bf16=precision == "bf16", ids=ids):
                with lm_forward_context("cpu", bf16):
                    decoder(input_ids=ids)

            run()
            runs[precision] = run
        rows.append(Row(f"decoder forward {batch} x {width}", batch * width, best_of(runs, repeats)))
    return rows


def scoring_items(settings, tokenizer, task_name: str, pairs) -> list:
    from udr.data.prepare import read_prepared
    from udr.lm.prompt import PromptBuilder

    task = settings.task(task_name)
    train = read_prepared(settings.root, task_name, "train")
    rows = {r["id"]: r for r in train.iter_rows(named=True)}
    instruction = task.instruction if settings.score.instruction == "prefix" else None
    builder = PromptBuilder(tokenizer, task, instruction, settings.score.max_length)
    return [builder.scoring_item(rows[q], rows[c]) for q, c in pairs]


def default_pairs(settings, task_name: str) -> list[tuple[int, int]]:
    """The default run's round-0 pairs of a task: its scored queries' candidates (the stage's order)."""
    from udr.project.scoring import load_work

    work = load_work(settings, task_name, 0)
    return list(zip(work.todo["query_id"].to_list(), work.todo["candidate_id"].to_list()))


def pool_pairs(settings, task_name: str, n_candidates: int) -> list[tuple[int, int]]:
    """Every round-0 pair of `n_candidates` seeded candidates of a task (each with all its queries)."""
    import numpy as np
    import polars as pl

    cands = pl.read_parquet(settings.paths.candidates(0, task_name), columns=["query_id", "candidate_id"]).unique()
    ids = np.sort(cands["candidate_id"].unique().to_numpy())
    chosen = np.random.default_rng(settings.seed).choice(ids, size=min(n_candidates, len(ids)), replace=False)
    sub = cands.filter(pl.col("candidate_id").is_in(chosen.tolist())).sort(["candidate_id", "query_id"])
    return list(zip(sub["query_id"].to_list(), sub["candidate_id"].to_list()))


def scoring_row(name, scorers, items, generation, batch_tokens, repeats, share_prefixes=True) -> Row:
    from udr.feedback.scoring import score_items

    runs = {
        p: (lambda s=s: score_items(s, items, generation, batch_tokens, share_prefixes=share_prefixes))
        for p, s in scorers.items()
    }
    return Row(name, sum(it.n_tokens for it in items), best_of(runs, repeats))


def pool_agreement(scorer, items, generation, batch_tokens) -> float:
    """Max |score difference| between shared prefixes on and off (the same scorer and items)."""
    from udr.feedback.scoring import score_items

    on, _ = score_items(scorer, items, generation, batch_tokens, share_prefixes=True)
    off, _ = score_items(scorer, items, generation, batch_tokens, share_prefixes=False)
    return float(abs(on - off).max()) if len(items) else 0.0


def evaluation_rows(settings, lms: dict, tasks, rows: int, gen_rows: int, repeats: int) -> list[Row]:
    from benchmarks.evaluate import fresh, load_workload

    out = []
    for task in tasks:
        generation = settings.task(task).generation
        evs = {p: load_workload(settings, lm, task, gen_rows if generation else rows) for p, lm in lms.items()}
        generated = {}

        def run(p, evs=evs, generated=generated, generation=generation):
            ev, prompts = evs[p]
            texts = fresh(ev).predict(prompts)[1]
            generated[p] = sum(len(ev.builder.encode(t)) + 1 for t in texts) if generation else 0

        for p in lms:  # warm-up
            ev, prompts = evs[p]
            fresh(ev).predict(prompts[:1])
        seconds = best_of({p: (lambda p=p: run(p)) for p in lms}, repeats)
        prompts = evs[PRECISIONS[0]][1]
        tokens = sum(len(x.token_ids) for x in prompts) + generated[PRECISIONS[0]]
        kind = "generation" if generation else "label prediction"
        out.append(Row(f"{kind}: {task} ({len(prompts)} prompts)", tokens, seconds))
    return out


def table(rows: list[Row], matrix: Row, flop: float) -> list[list]:
    """tok/s and the share of the matrix-product rate, per precision."""
    lines = []
    for row in rows:
        line = [row.name, row.tokens]
        for p in PRECISIONS:
            s = row.seconds.get(p)
            tps = row.tokens / s if s else float("nan")
            share = tps / (matrix.tokens / matrix.seconds[p])
            line += [f"{s:.2f}" if s else "", f"{tps:,.0f}", f"{share:.0%}" if share >= 0.1 else f"{share:.1%}"]
        lines.append(line)
    return lines


HEADERS = ["workload", "tokens", *[f"{p} {col}" for p in PRECISIONS for col in ("s", "tok/s", "of matrix rate")]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=Path, default=None, help="params.yaml of the project (default: this repo's)")
    ap.add_argument("--set", "-S", action="append", default=[], help="parameter override key.path=value")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--matrix-tokens", type=int, default=1024)
    ap.add_argument("--shapes", default="32x96,8x400", help="decoder forward shapes, rows x tokens")
    ap.add_argument("--score-tasks", default=",".join(SCORE_TASKS), help="'' skips the scoring rows")
    ap.add_argument("--pool-candidates", type=int, default=25, help="0 skips the pool rows")
    ap.add_argument("--pool-tasks", default="sst2,python_code")
    ap.add_argument("--eval-tasks", default=",".join(EVAL_TASKS), help="'' skips the evaluation rows")
    ap.add_argument("--rows", type=int, default=24, help="test rows per classification task (0: all)")
    ap.add_argument("--gen-rows", type=int, default=8, help="test rows per generation task (0: all)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.rows < 0 or args.gen_rows < 0 or args.pool_candidates < 0:
        ap.error("--repeats must be positive; --rows, --gen-rows and --pool-candidates non-negative")
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s]

    import torch

    from udr.config import load_settings
    from udr.evaluation.task_evaluation import LanguageModel
    from udr.lm.loading import load_causal_lm
    from udr.lm.predict import GreedyGenerator
    from udr.lm.scorer import LMScorer

    settings = load_settings(args.params or REPO / "params.yaml", args.set)
    model, tokenizer = load_causal_lm(settings.paths.base_model("lm"))
    decoder = model.get_decoder()
    flop = flops_per_token(decoder)
    pad = tokenizer.pad_token_id or 0
    scorers = {p: LMScorer(model, bf16=p == "bf16", pad_id=pad) for p in PRECISIONS}
    say = lambda msg: print(msg, file=sys.stderr, flush=True)

    matrix = matrix_row(decoder, args.matrix_tokens, args.repeats)
    rows = [matrix, *decoder_rows(model, shapes, args.repeats)]
    say(f"matrix products and decoder forwards done ({torch.get_num_threads()} threads)")
    batch_tokens = settings.score.batch_tokens
    for task in [t for t in args.score_tasks.split(",") if t]:
        items = scoring_items(settings, tokenizer, task, default_pairs(settings, task))
        generation = settings.task(task).generation
        rows.append(
            scoring_row(f"scoring: {task} ({len(items)} pairs)", scorers, items, generation, batch_tokens, args.repeats)
        )
        say(f"scoring {task} done")
    for task in [t for t in args.pool_tasks.split(",") if t] if args.pool_candidates else []:
        items = scoring_items(settings, tokenizer, task, pool_pairs(settings, task, args.pool_candidates))
        generation = settings.task(task).generation
        agreement = pool_agreement(scorers["fp32"], items, generation, batch_tokens)
        say(f"pool scoring {task}: shared prefixes on against off, fp32 max |score diff| {agreement:.1e}")
        if agreement > FP32_TOLERANCE:
            print(f"error: shared prefixes moved {task}'s fp32 scores by {agreement:.1e}", file=sys.stderr)
            return 1
        for share in (False, True):
            name = (
                f"scoring a pool: {task} ({len(items)} pairs, {args.pool_candidates} candidates), "
                f"shared prefixes {'on' if share else 'off'}"
            )
            rows.append(scoring_row(name, scorers, items, generation, batch_tokens, args.repeats, share))
        say(f"pool scoring {task} done")
    eval_tasks = [t for t in args.eval_tasks.split(",") if t]
    if eval_tasks:
        lms = {
            p: LanguageModel(model, tokenizer, scorers[p], GreedyGenerator(model, tokenizer, bf16=p == "bf16"))
            for p in PRECISIONS
        }
        rows += evaluation_rows(settings, lms, eval_tasks, args.rows, args.gen_rows, args.repeats)

    print(
        f"CPU: {cpu_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}; "
        f"decoder {flop / 1e9:.3f} GFLOP/token; best of {args.repeats}"
    )
    rate = {p: flop * matrix.tokens / matrix.seconds[p] / 1e12 for p in PRECISIONS}
    print("matrix-product rate: " + ", ".join(f"{p} {r:.3f} TFLOP/s" for p, r in rate.items()))
    print(fmt_table(HEADERS, table(rows, matrix, flop), args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
