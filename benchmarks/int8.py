"""Benchmark: int8 schemes for the LM's decoder on CPU against bf16 autocast, speed and agreement.

Every scheme runs the pipeline's own code (`udr.feedback.scoring.score_items` with `LMScorer` for the
scoring stage, `predict_choices` and `GreedyGenerator` for the evaluation's prompts) on a copy of the
LM whose decoder projections (q, k, v, o, gate, up, down of every layer) are replaced; the
embeddings and the LM head stay as they are (the scorer applies the head in fp32 at scored
positions only). Schemes:

- `bf16`: the pipeline's default, the fp32 model under bf16 autocast (the baseline);
- `bf16-weights`: the whole model cast to bf16, no autocast (not int8: how much of a speed-up comes
  from leaving autocast rather than from int8);
- `dyn-tensor`: torch's dynamic int8 (`torch.ao.quantization.quantize_dynamic`, the default qconfig:
  one scale per weight tensor, activations quantized per tensor at run time), fp32 elsewhere;
- `dyn-channel`: the same with one scale per output channel of a weight (`per_channel_dynamic_qconfig`);
- `smooth-channel`: SmoothQuant-style: each projection's input channels divided by
  s = max|x|^0.5 / max|w|^0.5 (activation maxima from fp32 forwards over `--calib-queries` other
  queries' pairs per task) and its weight columns multiplied by s, then `dyn-channel`;
- `ao-w8`, `ao-w8a8`: torchao's weight-only int8 on a bf16 copy and dynamic int8 activations with
  int8 weights on fp32 (`Int8WeightOnlyConfig`, `Int8DynamicActivationInt8WeightConfig`), run only
  where torchao imports.

Workloads (the project's data): *scoring*, every round-0 candidate of `--queries` seeded queries per
task, prompts from `PromptBuilder` as `benchmarks/scoring.py` builds them; *evaluation*, BM25's
prompts for the first `--rows` test rows of each classification / multiple-choice task and
`--gen-rows` of each generation task (`benchmarks/evaluate.py`'s workload: labels scored, lines
generated greedily).

Timing: the schemes run interleaved, one query's candidates (scoring) or one batch of prompts
(evaluation) at a time, each chunk starting with the next scheme in turn, so that other processes'
load falls on all alike; a scheme's time is the sum of its own chunks (after an untimed warm-up chunk
each). Agreement with `bf16`: over queries, the median Spearman correlation of a scheme's scores of a
query's candidates with bf16's, the share of queries whose best candidate is bf16's, and the mean
|score difference|; for evaluation prompts, the share of predictions equal to bf16's.

    .venv/bin/python benchmarks/int8.py --markdown
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import warnings
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from benchmarks.scoring import fmt_table  # noqa: E402

DEFAULT_TASKS = ("sst2", "comv", "break", "e2e")
BASELINE = "bf16"
SCHEMES = ("bf16", "bf16-weights", "dyn-tensor", "dyn-channel", "smooth-channel", "ao-w8", "ao-w8a8")
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
HEADERS = [
    "workload",
    "scheme",
    "tokens",
    "s",
    "tok/s",
    "speed vs bf16",
    "median Spearman",
    "same top-1",
    "mean abs Δscore",
    "same predictions",
]


# ---------------------------------------------------------------- agreement


def spearman(a, b) -> float:
    """Spearman's rank correlation (average ranks for ties); 1.0 where either side is constant."""
    from scipy.stats import rankdata

    ra, rb = rankdata(a), rankdata(b)
    if ra.std() == 0 or rb.std() == 0:
        return 1.0 if (ra.std() == 0) == (rb.std() == 0) else 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def within_query_agreement(query_ids, ref, other) -> dict[str, float]:
    """Median within-query Spearman of `other` against `ref`, the share of queries whose top-1
    candidate is the same (first index on ties), and the mean |difference| over all pairs."""
    query_ids, ref, other = np.asarray(query_ids), np.asarray(ref, dtype=float), np.asarray(other, dtype=float)
    rhos, same = [], []
    for q in dict.fromkeys(query_ids.tolist()):
        at = query_ids == q
        rhos.append(spearman(ref[at], other[at]))
        same.append(int(np.argmax(ref[at])) == int(np.argmax(other[at])))
    return {
        "spearman": float(np.median(rhos)),
        "top1": float(np.mean(same)),
        "mad": float(np.mean(np.abs(ref - other))),
    }


# ---------------------------------------------------------------- schemes


def _projections(decoder):
    """{qualified name: (parent module, attribute)} of every decoder projection (nn.Linear)."""
    return {
        f"{path}.{name}": (module, name)
        for path, module in decoder.named_modules()
        for name, child in module.named_children()
        if name in PROJECTIONS and type(child).__name__ == "Linear"
    }


def activation_maxima(model, items_by_task, batch_tokens: int) -> dict[str, object]:
    """Per decoder projection (by qualified name), the max |input| of each input channel over fp32
    scoring of `items_by_task` ((items, generation) pairs)."""
    import torch

    from udr.feedback.scoring import score_items
    from udr.lm.scorer import LMScorer

    maxima: dict[str, torch.Tensor] = {}

    def hook(key):
        def record(module, args):
            x = args[0].detach().abs().reshape(-1, args[0].shape[-1]).amax(0).float()
            maxima[key] = x if key not in maxima else torch.maximum(maxima[key], x)

        return record

    projections = _projections(model.get_decoder()).items()
    handles = [getattr(p, n).register_forward_pre_hook(hook(key)) for key, (p, n) in projections]
    try:
        scorer = LMScorer(model, bf16=False, pad_id=0)
        for items, generation in items_by_task:
            score_items(scorer, items, generation, batch_tokens)
    finally:
        for h in handles:
            h.remove()
    return maxima


class Smoothed:
    """Builds a projection that divides its input channels by `scale` before a linear whose weight
    columns were multiplied by it (SmoothQuant's migration of activation outliers into the weight)."""

    @staticmethod
    def wrap(linear, act_max, alpha: float = 0.5):
        import torch

        class SmoothedLinear(torch.nn.Module):
            def __init__(self, inner, inv_scale):
                super().__init__()
                self.inner = inner
                self.register_buffer("inv_scale", inv_scale)

            def forward(self, x):
                return self.inner(x * self.inv_scale)

        w_max = linear.weight.detach().abs().amax(0).clamp(min=1e-5)
        scale = (act_max.clamp(min=1e-5).pow(alpha) / w_max.pow(1 - alpha)).clamp(min=1e-5)
        inner = torch.nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None)
        with torch.no_grad():
            inner.weight.copy_(linear.weight * scale[None, :])
            if linear.bias is not None:
                inner.bias.copy_(linear.bias)
        return SmoothedLinear(inner, (1.0 / scale).to(linear.weight.dtype))


def build_scheme(name: str, model, maxima=None):
    """(model, bf16 autocast) of `name`: a copy of the fp32 `model` with its decoder projections
    replaced (the baseline: the model itself)."""
    import torch
    from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

    if name == "bf16":
        return model, True
    if name == "bf16-weights":
        return copy.deepcopy(model).to(torch.bfloat16), False
    if name.startswith("ao-"):
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, quantize_

        out = copy.deepcopy(model)
        config = Int8WeightOnlyConfig() if name == "ao-w8" else Int8DynamicActivationInt8WeightConfig()
        if name == "ao-w8":
            out = out.to(torch.bfloat16)
        quantize_(out.get_decoder(), config, filter_fn=lambda m, fqn: fqn.rsplit(".", 1)[-1] in PROJECTIONS)
        return out, False
    out = copy.deepcopy(model)
    decoder = out.get_decoder()
    if name == "smooth-channel":
        for key, (parent, attr) in _projections(decoder).items():
            setattr(parent, attr, Smoothed.wrap(getattr(parent, attr), maxima[key]))
    qconfig = default_dynamic_qconfig if name == "dyn-tensor" else per_channel_dynamic_qconfig
    torch.backends.quantized.engine = "x86"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layers = torch.nn.ModuleList(decoder.layers)
        quantize_dynamic(layers, {torch.nn.Linear: qconfig}, inplace=True)
    return out, False


# ---------------------------------------------------------------- workloads


def sample_queries(root: Path, task: str, n: int, seed: int, skip: int = 0) -> list[tuple[int, int]]:
    """Every round-0 (query_id, candidate_id) pair of `n` seeded queries of a task (after the first
    `skip` of the seeded order), in (query_id, candidate_id) order."""
    import polars as pl

    from udr.paths import Paths

    cands = pl.read_parquet(Paths(root).candidates(0, task), columns=["query_id", "candidate_id"]).unique()
    queries = np.sort(cands["query_id"].unique().to_numpy())
    rng = np.random.default_rng([seed, zlib.crc32(task.encode())])
    chosen = set(rng.permutation(queries)[skip : skip + n].tolist())
    sub = cands.filter(pl.col("query_id").is_in(list(chosen))).sort(["query_id", "candidate_id"])
    return list(zip(sub["query_id"].to_list(), sub["candidate_id"].to_list()))


class Clock:
    """Per-scheme seconds summed over chunks run in turn."""

    def __init__(self, names):
        self.names = list(names)
        self.seconds = dict.fromkeys(self.names, 0.0)
        self.turn = 0

    def round(self, run):
        """Run `run(name)` for every scheme, starting with the next one in turn; their results."""
        order = self.names[self.turn % len(self.names) :] + self.names[: self.turn % len(self.names)]
        self.turn += 1
        out = {}
        for name in order:
            start = time.perf_counter()
            out[name] = run(name)
            self.seconds[name] += time.perf_counter() - start
        return out


def run_scoring(scorers, tasks_items, batch_tokens: int):
    """Scores of every scheme on every task's pairs, one query at a time in turn; (seconds, tokens,
    {scheme: scores}, query keys)."""
    from udr.feedback.scoring import score_items

    clock = Clock(scorers)
    first_items, first_gen = tasks_items[0][1][:1], tasks_items[0][2]
    clock.round(lambda s: score_items(scorers[s], first_items, first_gen, batch_tokens))  # warm-up
    clock.seconds = dict.fromkeys(clock.names, 0.0)
    scores = {s: [] for s in scorers}
    keys, tokens = [], 0
    for task, items, generation in tasks_items:
        by_query: dict[int, list] = {}
        for it in items:
            by_query.setdefault(it.query_id, []).append(it)
        for q, chunk in by_query.items():
            out = clock.round(lambda s: score_items(scorers[s], chunk, generation, batch_tokens)[0])  # noqa: B023
            for s in scorers:
                scores[s].extend(out[s].tolist())
            keys += [f"{task}:{q}"] * len(chunk)
            tokens += sum(len(it.prompt) + len(it.continuations[it.gold]) for it in chunk)
        print(f"  scored {task}: {len(items)} pairs", file=sys.stderr, flush=True)
    return clock.seconds, tokens, scores, keys


def run_evaluation(lms, workloads, batch_tokens: int, chunk: int):
    """Predictions of every scheme on every task's prompts, `chunk` prompts at a time in turn;
    (seconds, prompt tokens, {scheme: predictions})."""
    from udr.lm.predict import predict_choices
    from udr.lm.scorer import ScoringItem

    def predict(name, ev, work):
        scorer, generator = lms[name]
        if ev.generation:
            return generator.generate([p.token_ids for p in work], ev.max_new_tokens, batch_tokens)
        return predict_choices(scorer, work, batch_tokens)[0]

    clock = Clock(lms)
    preds = {s: [] for s in lms}
    tokens, warm = 0, False
    for task, ev, prompts in workloads:
        work = prompts if ev.generation else choice_items(ev, prompts, ScoringItem)
        if not warm:
            clock.round(lambda s: predict(s, ev, work[:1]))  # noqa: B023
            clock.seconds, warm = dict.fromkeys(clock.names, 0.0), True
        for start in range(0, len(work), chunk):
            part = work[start : start + chunk]
            out = clock.round(lambda s: predict(s, ev, part))  # noqa: B023
            for s in lms:
                preds[s].extend(out[s])
        tokens += sum(len(p.token_ids) for p in prompts)
        print(f"  evaluated {task}: {len(prompts)} prompts", file=sys.stderr, flush=True)
    return clock.seconds, tokens, preds


def choice_items(ev, prompts, scoring_item):
    """The label-scoring items of a classification / multiple-choice task's prompts (as
    `TaskEvaluation.predict` builds them)."""
    items = []
    for row, p in zip(ev.rows, prompts):
        conts = tuple(ev.builder.encode(c) for c in row["choices"])
        items.append(scoring_item(int(row["id"]), 0, p.token_ids, conts, int(row["label"])))
    return items


# ---------------------------------------------------------------- table


def table_rows(workload: str, seconds, tokens: int, agreement) -> list[list[str]]:
    """The table's rows of one workload: per scheme its time, rate, speed against bf16 and its
    agreement with bf16 (`agreement[scheme]`: spearman/top1/mad for scoring, or same for prompts)."""
    rows = []
    for name, s in seconds.items():
        a = agreement.get(name, {})
        rows.append(
            [
                workload,
                name,
                str(tokens),
                f"{s:.1f}",
                f"{tokens / s:.0f}" if s > 0 else "-",
                f"{seconds[BASELINE] / s:.2f}x" if s > 0 else "-",
                f"{a['spearman']:.3f}" if "spearman" in a else "-",
                f"{a['top1']:.2f}" if "top1" in a else "-",
                f"{a['mad']:.3f}" if "mad" in a else "-",
                f"{a['same']:.2f}" if "same" in a else "-",
            ]
        )
    return rows


def passes(seconds, agreement, name: str, speed: float = 1.5, rho: float = 0.98) -> bool:
    """Whether a scheme is at least `speed` times as fast as bf16 at a median Spearman >= `rho`."""
    return seconds[name] > 0 and seconds[BASELINE] / seconds[name] >= speed and agreement[name]["spearman"] >= rho


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", type=Path, default=REPO, help="project root (params.yaml, data, models)")
    ap.add_argument("--tasks", default=",".join(DEFAULT_TASKS), help="comma-separated task names")
    ap.add_argument("--queries", type=int, default=6, help="scored queries per task (all their candidates)")
    ap.add_argument("--calib-queries", type=int, default=2, help="other queries per task for smooth-channel")
    ap.add_argument("--rows", type=int, default=8, help="evaluation rows per classification / choice task (0: none)")
    ap.add_argument("--gen-rows", type=int, default=1, help="evaluation rows per generation task (0: none)")
    ap.add_argument("--chunk", type=int, default=4, help="evaluation prompts per interleaved chunk")
    ap.add_argument("--schemes", default=",".join(SCHEMES), help="comma-separated, bf16 always included")
    ap.add_argument("--batch-tokens", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)

    import importlib.util

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    names = [BASELINE] + [s for s in dict.fromkeys(args.schemes.split(",")) if s and s != BASELINE]
    unknown = [s for s in names if s not in SCHEMES]
    if unknown:
        ap.error(f"unknown scheme(s) {', '.join(unknown)}: expected {', '.join(SCHEMES)}")
    if importlib.util.find_spec("torchao") is None:
        skipped = [s for s in names if s.startswith("ao-")]
        if skipped:
            print(f"# torchao is not installed: skipping {', '.join(skipped)}", file=sys.stderr)
        names = [s for s in names if not s.startswith("ao-")]

    from benchmarks.evaluate import load_workload
    from benchmarks.scoring import build_items
    from udr.config import load_settings
    from udr.evaluation.task_evaluation import LanguageModel
    from udr.lm.loading import load_causal_lm
    from udr.lm.predict import GreedyGenerator
    from udr.lm.scorer import LMScorer
    from udr.util.machine import machine_kind

    model, tok = load_causal_lm(args.project / "models" / "base" / "lm")
    pad = tok.pad_token_id or 0
    tasks = [t for t in args.tasks.split(",") if t]
    scored, calib = [], []
    for t in tasks:
        pairs = sample_queries(args.project, t, args.queries, args.seed)
        _, gen, items = build_items(args.project, t, tok, pairs, None)
        scored.append((t, items, gen))
        if "smooth-channel" in names:
            pairs = sample_queries(args.project, t, args.calib_queries, args.seed, skip=args.queries)
            _, gen, items = build_items(args.project, t, tok, pairs, None)
            calib.append((items, gen))
    maxima = activation_maxima(model, calib, args.batch_tokens) if calib else None
    models = {s: build_scheme(s, model, maxima) for s in names}
    scorers = {s: LMScorer(m, bf16=bf16, pad_id=pad) for s, (m, bf16) in models.items()}
    print(
        f"# {machine_kind('cpu')}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"quantized engine x86, schemes {', '.join(names)}",
        file=sys.stderr,
        flush=True,
    )

    seconds, tokens, scores, keys = run_scoring(scorers, scored, args.batch_tokens)
    agreement = {s: within_query_agreement(keys, scores[BASELINE], scores[s]) for s in names}
    rows = table_rows("scoring", seconds, tokens, agreement)

    settings = load_settings(args.project / "params.yaml", ["evaluate.dtype=bf16"])
    gens = {s: GreedyGenerator(m, tok, bf16=bf16) for s, (m, bf16) in models.items()}
    base_lm = LanguageModel(model, tok, scorers[BASELINE], gens[BASELINE], machine_kind("cpu"))
    workloads = []
    for t in tasks:
        generation = settings.task(t).generation
        n = args.gen_rows if generation else args.rows
        if n:
            ev, prompts = load_workload(settings, base_lm, t, n)
            workloads.append((t, ev, prompts))
    if workloads:
        lms = {s: (scorers[s], gens[s]) for s in names}
        e_seconds, e_tokens, preds = run_evaluation(lms, workloads, settings.evaluate.batch_tokens, args.chunk)
        same = {s: {"same": float(np.mean([a == b for a, b in zip(preds[BASELINE], preds[s])]))} for s in names}
        rows += table_rows("evaluation", e_seconds, e_tokens, same)

    print(fmt_table(HEADERS, rows, args.markdown))
    good = [s for s in names if s != BASELINE and passes(seconds, agreement, s)]
    print(f"# passing (scoring >= 1.5x bf16, median Spearman >= 0.98): {', '.join(good) or 'none'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
