"""Estimate: the GPU hours of a parameters file's pipeline (e.g. profiles/paper.yaml), from the FLOPs
of its workload and a throughput.

The workload is counted from a project's prepared data (`udr prepare` beside its params.yaml), tokenised
as the pipeline does it (`udr.lm.prompt.PromptBuilder` for the LM, the bi-encoder's texts and length
caps for the encoders), on a seeded sample of rows per task; row counts are exact:

- score (every round): scored queries x K candidates; one pair = the prompt (one demonstration and
  the query) and every label / choice continuation, or the gold answer for generation: 2 P_lm FLOPs
  per token (P = parameters);
- train (every round): epochs x scored queries x (query + l demonstrations) tokens through the two
  encoders, 6 P_enc FLOPs per token (forward and backward); EPR's baseline: round 0's epochs with
  l = 2;
- mine (rounds after 0) and index: the pool and the scored queries through the encoders, 2 P_enc;
- evaluate (5 methods): every test row's prompt (`evaluate.max_demos` demonstrations for
  classification, `evaluate.candidates` up to `evaluate.context` for generation; random pool rows
  stand in for the retrieved ones) and its answer tokens, 2 P_lm per token.

Left out: attention's own FLOPs (a few per cent at these lengths), the shots plot's extra
evaluations, BM25. Decoding is memory-bound on a GPU, so generation takes longer than its FLOPs say.

GPU hours = FLOPs / (peak x MFU) / 3600. The throughput is an input: MFU as measured by
`benchmarks/scoring.py --device cuda --dtype bf16 --mfu` on your GPU (not yet measured in this
project: no GPU has been lent to it). Without one, the table shows a range of MFUs; when every task
is counted, it also gives the MFU that the paper's own figure (about 8 days on 8 A100s, Appendix B)
implies for the workload.

    cp profiles/paper.yaml params.yaml && udr prepare       # in a project of its own
    .venv/bin/python benchmarks/gpu_hours.py --params params.yaml --tokenizer models/base/lm \\
        --encoder-tokenizer models/base/encoder --lm-params 2.7e9 --encoder-params 110e6 --markdown
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.scoring import fmt_table  # noqa: E402

METHODS = 5  # random, bm25, sbert, epr, udr
EPR_CANDIDATES = 2  # one positive, one negative per query
A100_BF16_TFLOPS = 312.0  # dense bf16 peak of the paper's GPU (NVIDIA's data sheet)
PAPER_GPU_HOURS = 8 * 24 * 8  # "about 8 days" on 8 A100s (Appendix B)


@dataclass(frozen=True)
class TaskWorkload:
    """Row counts and mean token lengths of one task, as the pipeline would run it."""

    name: str
    pool: int  # train rows: the demonstration pool
    scored: int  # train queries scored (score.queries_per_task, capped by the pool)
    test: int
    pair_tokens: float  # LM tokens of one scored (query, candidate) pair, every continuation included
    query_tokens: float  # E_q tokens of a query
    demo_tokens: float  # E_d tokens of a demonstration
    eval_tokens: float  # LM tokens of one test prompt and its answer(s)


def measure_task(settings, project: Path, name: str, lm_tok, enc_tok, sample: int, seed: int) -> TaskWorkload:
    """The task's workload from its prepared train / test splits (`sample` rows for the lengths)."""
    from udr.data.prepare import read_prepared
    from udr.lm.prompt import PromptBuilder
    from udr.retriever.encoder import demo_texts, query_text

    task = settings.task(name)
    train = read_prepared(project, name, "train").to_dicts()
    test = read_prepared(project, name, "test").to_dicts()
    rng = np.random.default_rng(seed)

    def pick(rows):
        return [rows[i] for i in rng.choice(len(rows), size=min(sample, len(rows)), replace=False)]

    queries, candidates, tests = pick(train), pick(train), pick(test)

    instruction = task.instruction if settings.score.instruction == "prefix" else None
    scorer = PromptBuilder(lm_tok, task, instruction, settings.score.max_length)
    pair = np.mean(
        [
            len(item.prompt) + sum(len(c) for c in item.continuations)
            for item in (scorer.scoring_item(q, c) for q, c in zip(queries, candidates))
        ]
    )

    enc = settings.encoder

    def enc_len(texts, cap):
        return float(np.mean([min(cap, len(ids)) for ids in enc_tok(texts)["input_ids"]]))

    query = enc_len([query_text(task.instruction, q["input"], enc) for q in queries], enc.max_query_length)
    demo = enc_len(
        demo_texts(task, [c["input"] for c in candidates], [c["target"] for c in candidates], enc), enc.max_demo_length
    )

    cfg = settings.evaluate
    ev = PromptBuilder(lm_tok, task, instruction, cfg.context)
    demos = [len(ev.demonstration(c["input"], c["target"])) for c in candidates]
    n_demos = cfg.candidates if task.generation else cfg.max_demos
    lengths = []
    for row in tests:
        answers = [ev.encode(row["target"])] if task.generation else [ev.encode(c) for c in row["choices"]]
        room = cfg.context - (min(cfg.max_new_tokens, len(answers[0])) if task.generation else max(map(len, answers)))
        chosen = rng.choice(demos, size=min(n_demos, len(demos)), replace=False)
        prompt = min(room, len(ev.head) + int(chosen.sum()) + len(ev.query(row["input"])))
        lengths.append(prompt + sum(len(a) for a in answers))
    return TaskWorkload(
        name,
        len(train),
        min(settings.score.queries_per_task, len(train)),
        len(test),
        float(pair),
        query,
        demo,
        float(np.mean(lengths)),
    )


def stage_flops(settings, tasks: list[TaskWorkload], lm_params: float, enc_params: float) -> dict[str, float]:
    """FLOPs of each stage of the whole pipeline (all rounds, all tasks)."""
    rounds = settings.train.rounds

    def per_epoch(demos_per_query: int) -> float:  # encoder tokens of one epoch
        return sum(t.scored * (t.query_tokens + demos_per_query * t.demo_tokens) for t in tasks)

    encode_pools = sum(t.pool * t.demo_tokens + t.scored * t.query_tokens for t in tasks)
    epochs = [settings.train.epochs_first] + [settings.train.epochs_later] * (len(rounds) - 1)
    k = [settings.candidates.k] + [settings.mine.k] * (len(rounds) - 1)
    return {
        "score": sum(2 * lm_params * kr * sum(t.scored * t.pair_tokens for t in tasks) for kr in k),
        "train": sum(6 * enc_params * e * per_epoch(settings.train.candidates_per_query) for e in epochs),
        "train_epr": 6 * enc_params * epochs[0] * per_epoch(EPR_CANDIDATES),
        "mine + index": 2 * enc_params * encode_pools * len(rounds),
        "evaluate": 2 * lm_params * METHODS * sum(t.test * t.eval_tokens for t in tasks),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--params", type=Path, default=REPO / "params.yaml", help="the project's params file (data/prepared beside it)"
    )
    ap.add_argument("--tokenizer", type=Path, required=True, help="the scoring LM's tokenizer (or a proxy)")
    ap.add_argument("--encoder-tokenizer", type=Path, required=True, help="the bi-encoder's tokenizer (or a proxy)")
    ap.add_argument("--lm-params", type=float, required=True, help="the scoring / inference LM's parameters")
    ap.add_argument("--encoder-params", type=float, required=True, help="parameters of one encoder (E_q or E_d)")
    ap.add_argument("--peak-tflops", type=float, default=A100_BF16_TFLOPS, help="the GPU's bf16 peak")
    ap.add_argument("--mfu", type=float, nargs="+", default=[0.2, 0.35, 0.5], help="model FLOPs utilisation(s)")
    ap.add_argument("--sample", type=int, default=300, help="rows per task for the mean lengths")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)

    from transformers import AutoTokenizer

    from udr.config import load_settings

    settings = load_settings(args.params)
    lm_tok = AutoTokenizer.from_pretrained(args.tokenizer)
    enc_tok = AutoTokenizer.from_pretrained(args.encoder_tokenizer)
    names = settings.task_names()
    present = [n for n in names if settings.paths.prepared(n, "train").is_file()]
    missing = sorted(set(names) - set(present))
    tasks = [measure_task(settings, settings.root, n, lm_tok, enc_tok, args.sample, settings.seed) for n in present]

    print(
        fmt_table(
            ["task", "pool", "scored", "test", "LM tokens / pair", "E_q tokens", "E_d tokens", "LM tokens / test"],
            [
                [t.name, t.pool, t.scored, t.test, f"{t.pair_tokens:.0f}", f"{t.query_tokens:.0f}"]
                + [f"{t.demo_tokens:.0f}", f"{t.eval_tokens:.0f}"]
                for t in tasks
            ],
            args.markdown,
        )
    )
    flops = stage_flops(settings, tasks, args.lm_params, args.encoder_params)
    total = sum(flops.values())
    peak = args.peak_tflops * 1e12
    rows = [
        [stage, f"{f / 1e15:,.0f}", *(f"{f / (peak * m) / 3600:,.0f}" for m in args.mfu)]
        for stage, f in [*flops.items(), ("total", total)]
    ]
    print()
    print(fmt_table(["stage", "PFLOP", *(f"GPU h at MFU {m:.0%}" for m in args.mfu)], rows, args.markdown))
    counted = f"{len(present)} of {len(names)} tasks counted; peak {args.peak_tflops:.0f} TFLOP/s."
    if missing:
        print(f"\n{counted} Not prepared here, so not counted: {', '.join(missing)}.")
    else:
        implied = total / (PAPER_GPU_HOURS * 3600 * A100_BF16_TFLOPS * 1e12)
        print(
            f"\n{counted} The paper's ~{PAPER_GPU_HOURS} A100 hours for its whole run would mean an MFU of "
            f"{implied:.1%} on this workload."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
