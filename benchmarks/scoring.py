"""Benchmark: udr's LM-feedback scorer against the published code's way of scoring.

Workload: for each task, a seeded sample of (query, candidate) pairs from the round-0 BM25
candidates, turned into prompts with `udr.lm.prompt.PromptBuilder` (no instruction, max_length 1024).

- udr scorer: `score_items(LMScorer(model), items, generation, batch_tokens)` (length-bucketed
  batches, LM head only at scored positions, prompt KV cache shared across a label / choice set).
- reference scorer (the published code's route): fixed-size batches of sequences in data order,
  right padding, a full `model(input_ids, attention_mask).logits` forward, fp32 log_softmax over
  every position, and one sequence (prompt + continuation) per label / choice: no prefix sharing.

Both give per-pair scores with `udr.lm.scorer.pair_score`; the script checks they agree and prints a
table of throughput. "Workload tokens" = real tokens of prompt + gold answer per pair, the same
numerator for both scorers (neither's extra work on the other choices or on padding is counted).

Timing (time.perf_counter, device synchronised, after an untimed warm-up batch of each scorer): by
default the two run in lockstep, batch by batch (after each udr batch, reference batches run until
the reference has done the same fraction of its work; each scorer's time is the sum of its own
batches), so load from other processes on a shared machine falls on both alike. `--sequential`
runs them back to back per task instead.

`--compare packed` sets udr's two engines against each other instead, on the same pairs and in the
same precision: the padded engine (`score.engine=padded`, length-bucketed padded batches of
`--batch-tokens`: before) and the packed one (`score.engine=packed`, padding-free rows of
`--packed-tokens`, FlexAttention on CUDA: after), both through `score_items` with shared prefixes as
the score stage runs them. Each task's pairs run once untimed through the packed engine (its
attention compiles there) and through a few pairs of the padded one; then each engine is timed
`--repeats` times (alternating which goes first), the best counting. The table has each engine's
tokens/s (and MFU with `--mfu`), their ratio, and the largest difference of their scores, which
must stay under 1e-3 in fp32 and under `score.check_tolerance` (0.25) in bf16 (else exit 1, after
the table). `--pairs-per-task 0` takes every candidate pair of each task (steady state on a GPU).

    .venv/bin/python benchmarks/scoring.py                 # SmolLM2-135M, CPU, fp32
    .venv/bin/python benchmarks/scoring.py --device cuda --dtype bf16 --random-llama-1b --mfu
    .venv/bin/python benchmarks/scoring.py --compare packed --device cuda --dtype bf16 --mfu --pairs-per-task 0 \
        --batch-tokens 8192 --packed-tokens 32768
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from udr.paths import Paths  # noqa: E402

DEFAULT_TASKS = ("sst2", "comv", "break", "e2e")
FP32_TOLERANCE = 1e-3
BF16_TOLERANCE = 0.25  # score.check_tolerance: how far the shipped feedback's recomputed sample may move


# ---------------------------------------------------------------- workload


def sample_pairs(root: Path, task: str, n: int, seed: int) -> list[tuple[int, int]]:
    """A seeded sample of n (query_id, candidate_id) pairs of a task's round-0 candidates (n <= 0: all),
    in (query_id, candidate_id) order (the order the score stage works in)."""
    import polars as pl

    cands = (
        pl.read_parquet(Paths(root).candidates(0, task), columns=["query_id", "candidate_id"])
        .unique()
        .sort(["query_id", "candidate_id"])
    )
    rng = np.random.default_rng([seed, zlib.crc32(task.encode())])
    n = len(cands) if n <= 0 else min(n, len(cands))
    pick = np.sort(rng.choice(len(cands), size=n, replace=False))
    sub = cands[pick.tolist()]
    return list(zip(sub["query_id"].to_list(), sub["candidate_id"].to_list()))


def file_digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def build_items(root: Path, task_name: str, tokenizer, pairs, vocab_size: int | None):
    """ScoringItems for the pairs; with `vocab_size`, token ids are taken modulo it (random model)."""
    import polars as pl

    from udr.data.tasks import get_task
    from udr.lm.prompt import PromptBuilder

    task = get_task(task_name)
    generation = task.generation
    train = pl.read_parquet(root / "data" / "prepared" / task_name / "train.parquet")
    rows = {r["id"]: r for r in train.iter_rows(named=True)}
    builder = PromptBuilder(tokenizer, task, None, max_length=1024)
    items = [builder.scoring_item(rows[q], rows[c]) for q, c in pairs]
    if vocab_size is not None:
        items = [
            replace(
                it,
                prompt=tuple(t % vocab_size for t in it.prompt),
                continuations=tuple(tuple(t % vocab_size for t in c) for c in it.continuations),
            )
            for it in items
        ]
    return task, generation, items


def workload_tokens(items) -> int:
    """Real tokens of prompt + gold answer, summed over pairs."""
    return sum(len(it.prompt) + len(it.continuations[it.gold]) for it in items)


# ---------------------------------------------------------------- the reference scorer


@dataclass
class RefStats:
    tokens: int = 0
    padded: int = 0

    @property
    def padding_fraction(self) -> float:
        total = self.tokens + self.padded
        return self.padded / total if total else 0.0


class ReferenceRun:
    """The published code's way of scoring, one batch per `step()`: every (prompt + continuation)
    its own sequence, fixed-size batches in data order, right padding, a full
    `model(input_ids, attention_mask).logits` forward, fp32 log_softmax at every position.
    `seconds` is the time spent in `step()` (device synchronised)."""

    def __init__(self, model, items, generation: bool, batch_size: int, pad_id: int):
        self.model, self.items, self.generation = model, items, generation
        self.batch_size, self.pad_id = batch_size, pad_id
        self.device = next(model.parameters()).device
        self.seqs = [(i, it.prompt + cont, len(it.prompt)) for i, it in enumerate(items) for cont in it.continuations]
        self.logps: list[list[float]] = [[] for _ in items]
        self.stats = RefStats()
        self.done = 0  # sequences scored
        self.seconds = 0.0

    @property
    def finished(self) -> bool:
        return self.done >= len(self.seqs)

    @property
    def progress(self) -> float:
        return self.done / len(self.seqs) if self.seqs else 1.0

    def step(self) -> None:
        import torch

        synchronize(self.device)
        t0 = time.perf_counter()
        chunk = self.seqs[self.done : self.done + self.batch_size]
        width = max(len(s) for _, s, _ in chunk)
        ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, (_, s, _) in enumerate(chunk):
            ids[r, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[r, : len(s)] = 1
        real = int(mask.sum())
        self.stats.tokens += real
        self.stats.padded += ids.numel() - real
        with torch.inference_mode():
            ids, mask = ids.to(self.device), mask.to(self.device)
            logits = self.model(input_ids=ids, attention_mask=mask).logits.float()
            lp = logits.log_softmax(-1)  # (B, L, V)
            tok = lp[:, :-1].gather(2, ids[:, 1:, None]).squeeze(2)  # log p(token t+1 | <= t)
            # only continuation tokens count: positions p-1 .. len(s)-2 predict the continuation
            pos = torch.arange(width - 1, device=self.device)[None, :]
            starts = torch.tensor([p - 1 for _, _, p in chunk], device=self.device)[:, None]
            ends = torch.tensor([len(s) - 1 for _, s, _ in chunk], device=self.device)[:, None]
            keep = (pos >= starts) & (pos < ends)
            sums = (tok.double() * keep).sum(1).cpu().tolist()
        for (i, _, _), v in zip(chunk, sums):
            self.logps[i].append(v)
        self.done += len(chunk)
        synchronize(self.device)
        self.seconds += time.perf_counter() - t0

    def run(self) -> ReferenceRun:
        while not self.finished:
            self.step()
        return self

    def scores(self) -> np.ndarray:
        from udr.feedback.scoring import pair_score

        return np.array(
            [
                pair_score(lp, it.gold, self.generation, len(it.continuations[it.gold]))
                for lp, it in zip(self.logps, self.items)
            ],
            dtype=np.float64,
        )


def measure(
    udr,
    model,
    items,
    generation: bool,
    batch_tokens: int,
    ref_batch: int,
    pad_id: int,
    device,
    lockstep: bool,
    ref_first: bool,
):
    """Score `items` with both scorers; returns (udr scores, udr BatchStats, udr seconds, ReferenceRun).

    lockstep: after each udr batch (the `on_batch` hook of `score_items`), reference batches run until
    the reference has done at least the same fraction of its work, and their time is taken out of the
    udr time; a load from elsewhere on the machine then falls on both scorers alike. Otherwise the two
    run back to back (`ref_first` picks the order)."""
    from udr.feedback.scoring import score_items

    ref = ReferenceRun(model, items, generation, ref_batch, pad_id)
    if not lockstep and ref_first:
        ref.run()
    done = [0]

    def catch_up(stats):
        done[0] += stats.pairs
        while lockstep and not ref.finished and ref.progress < done[0] / len(items):
            ref.step()

    synchronize(device)
    t0 = time.perf_counter()
    before = ref.seconds
    scores, stats = score_items(udr, items, generation, batch_tokens, on_batch=catch_up)
    synchronize(device)
    udr_seconds = time.perf_counter() - t0 - (ref.seconds - before)
    ref.run()
    return scores, stats, udr_seconds, ref


# ---------------------------------------------------------------- padded against packed


ENGINE_HEADERS = [
    "task",
    "kind",
    "pairs",
    "workload tokens (prompt+gold)",
    "padded s",
    "packed s",
    "padded tok/s",
    "packed tok/s",
    "speed-up packed/padded",
    "padded pad",
    "packed pad",
    "max abs diff",
]


def time_engines(padded, packed, items, generation: bool, batch_tokens: int, device, repeats: int, packed_first: bool):
    """Both engines on `items` through `score_items` (shared prefixes on, as the stage runs them):
    ({engine: (scores, BatchStats, best seconds)}). Untimed first: every pair through the packed
    engine (its compiled attention meets every row length it will see) and a few through the padded one."""
    from udr.feedback.scoring import score_items

    scorers = {"padded": padded, "packed": packed}
    score_items(packed, items, generation, batch_tokens)
    score_items(padded, items[: min(4, len(items))], generation, batch_tokens)
    best = {}
    for rep in range(repeats):
        order = ["packed", "padded"] if (rep % 2 == 0) == packed_first else ["padded", "packed"]
        for name in order:
            (scores, stats), seconds = timed(
                lambda s=scorers[name]: score_items(s, items, generation, batch_tokens), device
            )
            if name not in best or seconds < best[name][2]:
                best[name] = (scores, stats, seconds)
    return best


def compare_engines(args, project, model, tok, vocab, n_params, peak, device, pad_id) -> int:
    """`--compare packed`: the table of the padded engine (before) against the packed one (after)."""
    from udr.lm.packed import PackedScorer
    from udr.lm.scorer import LMScorer

    bf16 = args.dtype == "bf16"
    padded = LMScorer(model, bf16=bf16, pad_id=pad_id)
    packed = PackedScorer(model, bf16=bf16, pad_id=pad_id, row_tokens=args.packed_tokens, attention=args.attention)
    tolerance = BF16_TOLERANCE if bf16 else FP32_TOLERANCE
    rows, digests, worst = [], [], 0.0
    total = {"pairs": 0, "tokens": 0, "padded": 0.0, "packed": 0.0, "pad": [0, 0], "kpad": [0, 0]}
    for k, name in enumerate(t.strip() for t in args.tasks.split(",") if t.strip()):
        pairs = sample_pairs(project, name, args.pairs_per_task, args.seed)
        task, generation, items = build_items(project, name, tok, pairs, vocab)
        ntok = workload_tokens(items)
        best = time_engines(padded, packed, items, generation, args.batch_tokens, device, args.repeats, k % 2 == 0)
        (p_scores, p_stats, p_s), (k_scores, k_stats, k_s) = best["padded"], best["packed"]
        diff = float(np.max(np.abs(p_scores - k_scores))) if len(items) else 0.0
        worst = max(worst, diff)
        print(
            f"# {name}: {len(items)} pairs, {ntok} tokens, padded {p_s:.2f}s, packed {k_s:.2f}s "
            f"({packed.attention} attention), max|diff| {diff:.2e}",
            file=sys.stderr,
        )
        digests.append(f"{name} {file_digest(Paths(project).candidates(0, name))}")
        rows.append(_engine_row(name, task.kind, len(items), ntok, p_s, k_s, p_stats, k_stats, diff, n_params, peak))
        total["pairs"] += len(items)
        total["tokens"] += ntok
        total["padded"] += p_s
        total["packed"] += k_s
        for key, st in (("pad", p_stats), ("kpad", k_stats)):
            total[key][0] += st.tokens
            total[key][1] += st.padded
    from udr.lm.scorer import BatchStats

    rows.append(
        _engine_row(
            "total",
            "",
            total["pairs"],
            total["tokens"],
            total["padded"],
            total["packed"],
            BatchStats(*total["pad"]),
            BatchStats(*total["kpad"]),
            worst,
            n_params,
            peak,
        )
    )
    headers = ENGINE_HEADERS + (["padded MFU", "packed MFU"] if peak else [])
    print(fmt_table(headers, rows, args.markdown))
    print(
        f"\ntokens/s = workload tokens (prompt + gold answer per pair) / seconds, the same numerator for both; "
        f"pad = padding tokens / all tokens the engine ran; speed-up = padded s / packed s. dtype {args.dtype}; "
        f"padded: batch_tokens {args.batch_tokens}; packed: rows of {packed.capacity} tokens, {packed.attention} "
        f"attention; shared prefixes on; timing: best of {args.repeats}, after an untimed run"
        + (
            f"; MFU = 2 x {n_params / 1e6:.0f}M params x workload tokens / s / {peak / 1e12:.0f} TFLOP/s measured "
            f"bf16 peak"
            if peak
            else ""
        )
        + f". Workload: seed {args.seed}, {args.pairs_per_task or 'all'} pairs/task from data/candidates/round0 "
        f"(sha256[:12]: {', '.join(digests)})."
    )
    if not worst < tolerance:
        print(f"padded and packed scores differ by {worst:.3g} (>= {tolerance}) in {args.dtype}", file=sys.stderr)
        return 1
    return 0


def _engine_row(name, family, pairs, ntok, p_s, k_s, p_stats, k_stats, diff, n_params, peak):
    row = [
        name,
        family,
        pairs,
        ntok,
        f"{p_s:.2f}",
        f"{k_s:.2f}",
        f"{ntok / p_s:.0f}",
        f"{ntok / k_s:.0f}",
        f"{p_s / k_s:.2f}x",
        f"{p_stats.padding_fraction:.1%}",
        f"{k_stats.padding_fraction:.1%}",
        f"{diff:.1e}",
    ]
    if peak:
        row += [f"{2 * n_params * ntok / p_s / peak:.1%}", f"{2 * n_params * ntok / k_s / peak:.1%}"]
    return row


# ---------------------------------------------------------------- models and timing


def random_llama_1b(device):
    """A randomly initialised ~1B-parameter Llama-style decoder (for a GPU where weights can't be brought)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=2048,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        intermediate_size=5632,
        vocab_size=32000,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    return model.float().eval()


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device):
    synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - t0


def peak_bf16_flops(device, n: int = 8192, reps: int = 10) -> float:
    """Measured dense bf16 matmul rate (FLOP/s) on `device`: the MFU denominator."""
    import torch

    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    _, dt = timed(lambda: [a @ b for _ in range(reps)], device)
    return 2 * n**3 * reps / dt


# ---------------------------------------------------------------- table


def fmt_table(headers, rows, markdown: bool) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[j]) for r in cells) for j in range(len(headers))]

    def line(r):
        parts = [c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))]
        return ("| " + " | ".join(parts) + " |") if markdown else "  ".join(parts)

    sep = (
        "|" + "|".join(("-" * (w + 1) + ":") if j else (":" + "-" * (w + 1)) for j, w in enumerate(widths)) + "|"
        if markdown
        else "  ".join("-" * w for w in widths)
    )
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", type=Path, default=REPO, help="project root (its prepared data and candidates)")
    ap.add_argument("--tasks", default=",".join(DEFAULT_TASKS), help="comma-separated task names")
    ap.add_argument("--pairs-per-task", type=int, default=64, help="0: every candidate pair of each task")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--batch-tokens", type=int, default=1024, help="udr scorer's token budget per batch")
    ap.add_argument("--ref-batch-size", type=int, default=8, help="reference scorer's sequences per batch")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument(
        "--dtype",
        choices=("fp32", "bf16"),
        default="fp32",
        help="udr scorer precision (bf16 = autocast); the reference is always fp32",
    )
    ap.add_argument("--model", type=Path, help="a resolved causal LM directory (default: the project's models/base/lm)")
    ap.add_argument(
        "--random-llama-1b",
        action="store_true",
        help="random ~1B Llama-style model instead of --model (tokenizer still from --model)",
    )
    ap.add_argument(
        "--sequential",
        action="store_true",
        help="run the two scorers back to back per task (alternating which goes first) instead of "
        "in lockstep, batch by batch",
    )
    ap.add_argument("--repeats", type=int, default=1, help="time each task this many times; report the best")
    ap.add_argument("--mfu", action="store_true", help="on cuda: model FLOPs utilisation against a measured bf16 peak")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    ap.add_argument(
        "--compare",
        choices=("reference", "packed"),
        default="reference",
        help="reference: udr's scorer against the published code's route; packed: udr's padded engine "
        "(before) against its packed engine (after)",
    )
    ap.add_argument(
        "--packed-tokens", type=int, default=0, help="--compare packed: tokens per packed row (default: --batch-tokens)"
    )
    ap.add_argument(
        "--attention",
        choices=("auto", "flex", "sdpa"),
        default="auto",
        help="--compare packed: the packed rows' attention (auto: flex on cuda, sdpa with dense masks elsewhere)",
    )
    args = ap.parse_args(argv)
    args.packed_tokens = args.packed_tokens or args.batch_tokens
    project = args.project
    if args.model is None:
        args.model = project / "models" / "base" / "lm"

    import torch

    from udr.lm.loading import load_causal_lm
    from udr.lm.scorer import BatchStats, LMScorer

    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device available")
    device = torch.device(args.device)
    t_load = time.perf_counter()
    vocab = None
    if args.random_llama_1b:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(args.model)  # the real tokenizer; ids are taken modulo the vocab
        model = random_llama_1b(device)
        vocab = model.config.vocab_size
    else:
        model, tok = load_causal_lm(args.model)
    model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    pad_id = (tok.pad_token_id or 0) % (vocab or 1 << 62)
    udr = LMScorer(model, bf16=args.dtype == "bf16", pad_id=pad_id)
    print(
        f"# model: {'random Llama-style' if args.random_llama_1b else args.model} "
        f"({n_params / 1e6:.1f}M params), device {args.device}, udr dtype {args.dtype}, "
        f"{'padded against packed' if args.compare == 'packed' else 'reference fp32'}, "
        f"torch threads {torch.get_num_threads()}, loaded in {time.perf_counter() - t_load:.1f}s",
        file=sys.stderr,
    )

    peak = None
    if args.mfu:
        if device.type == "cuda":
            peak = peak_bf16_flops(device)
            print(f"# measured bf16 matmul peak: {peak / 1e12:.1f} TFLOP/s", file=sys.stderr)
        else:
            print("# --mfu: only measured on cuda; skipped", file=sys.stderr)

    if args.compare == "packed":
        return compare_engines(args, project, model, tok, vocab, n_params, peak, device, pad_id)

    rows, total = (
        [],
        {"pairs": 0, "tokens": 0, "u_s": 0.0, "r_s": 0.0, "u_tok": 0, "u_pad": 0, "r_tok": 0, "r_pad": 0, "diff": 0.0},
    )
    digests = []
    for k, name in enumerate(t.strip() for t in args.tasks.split(",") if t.strip()):
        pairs = sample_pairs(project, name, args.pairs_per_task, args.seed)
        task, generation, items = build_items(project, name, tok, pairs, vocab)
        ntok = workload_tokens(items)

        # warm-up: one small batch per scorer, untimed
        warm = items[: min(4, len(items))]
        measure(udr, model, warm, generation, args.batch_tokens, args.ref_batch_size, pad_id, device, False, False)

        u_best = r_best = float("inf")
        for rep in range(args.repeats):
            u_scores, u_stats, u_s, ref = measure(
                udr,
                model,
                items,
                generation,
                args.batch_tokens,
                args.ref_batch_size,
                pad_id,
                device,
                lockstep=not args.sequential,
                ref_first=(k + rep) % 2 == 1,
            )
            u_best, r_best = min(u_best, u_s), min(r_best, ref.seconds)
        r_scores, r_stats = ref.scores(), ref.stats
        diff = float(np.max(np.abs(u_scores - r_scores))) if len(items) else 0.0
        if args.dtype == "fp32" and not diff < FP32_TOLERANCE:
            raise SystemExit(f"{name}: udr and reference scores differ by {diff:.3g} (>= {FP32_TOLERANCE}) in fp32")
        assert isinstance(u_stats, BatchStats)
        print(
            f"# {name}: {len(items)} pairs, {ntok} tokens, udr {u_best:.2f}s, reference {r_best:.2f}s, "
            f"max|diff| {diff:.2e}",
            file=sys.stderr,
        )
        digests.append(f"{name} {file_digest(Paths(project).candidates(0, name))}")
        rows.append(
            _row(
                name,
                task.kind,
                len(items),
                ntok,
                u_best,
                r_best,
                u_stats.padding_fraction,
                r_stats.padding_fraction,
                diff,
                n_params,
                peak,
            )
        )
        for key, v in (
            ("pairs", len(items)),
            ("tokens", ntok),
            ("u_s", u_best),
            ("r_s", r_best),
            ("u_tok", u_stats.tokens),
            ("u_pad", u_stats.padded),
            ("r_tok", r_stats.tokens),
            ("r_pad", r_stats.padded),
        ):
            total[key] += v
        total["diff"] = max(total["diff"], diff)

    u_pf = total["u_pad"] / max(total["u_tok"] + total["u_pad"], 1)
    r_pf = total["r_pad"] / max(total["r_tok"] + total["r_pad"], 1)
    rows.append(
        _row(
            "total",
            "",
            total["pairs"],
            total["tokens"],
            total["u_s"],
            total["r_s"],
            u_pf,
            r_pf,
            total["diff"],
            n_params,
            peak,
        )
    )
    headers = [
        "task",
        "kind",
        "pairs",
        "workload tokens (prompt+gold)",
        "udr s",
        "ref s",
        "udr pairs/s",
        "ref pairs/s",
        "udr tok/s",
        "ref tok/s",
        "speed-up udr/ref",
        "udr pad",
        "ref pad",
        "max abs diff",
    ]
    if peak:
        headers += ["udr MFU", "ref MFU"]
    print(fmt_table(headers, rows, args.markdown))
    print(
        f"\ntokens/s = workload tokens (prompt + gold answer per pair) / seconds, same numerator for both; "
        f"pad = padding tokens / all tokens in the scorer's batches; speed-up = ref s / udr s. "
        f"udr: dtype {args.dtype}, batch_tokens {args.batch_tokens}; reference: fp32, batch {args.ref_batch_size}; "
        f"timing: {'back to back' if args.sequential else 'lockstep'}, best of {args.repeats}"
        + (
            f"; MFU = 2 x {n_params / 1e6:.0f}M params x workload tokens / s / "
            f"{peak / 1e12:.0f} TFLOP/s measured bf16 peak"
            if peak
            else ""
        )
        + f". Workload: seed {args.seed}, {args.pairs_per_task} pairs/task from data/candidates/round0 "
        f"(sha256[:12]: {', '.join(digests)})."
    )
    return 0


def _row(name, family, pairs, ntok, u_s, r_s, u_pad, r_pad, diff, n_params, peak):
    row = [
        name,
        family,
        pairs,
        ntok,
        f"{u_s:.2f}",
        f"{r_s:.2f}",
        f"{pairs / u_s:.1f}",
        f"{pairs / r_s:.1f}",
        f"{ntok / u_s:.0f}",
        f"{ntok / r_s:.0f}",
        f"{r_s / u_s:.2f}x",
        f"{u_pad:.1%}",
        f"{r_pad:.1%}",
        f"{diff:.1e}",
    ]
    if peak:
        row += [f"{2 * n_params * ntok / u_s / peak:.1%}", f"{2 * n_params * ntok / r_s / peak:.1%}"]
    return row


if __name__ == "__main__":
    raise SystemExit(main())
