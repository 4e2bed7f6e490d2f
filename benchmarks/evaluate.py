"""Benchmark: udr's in-context evaluation against a plain Hugging Face reference, on the same prompts.

Workload: for each task (default: sst2, trec = classification, comv = multiple choice, e2e and
break = generation), the first `--rows` test rows (`--gen-rows` for generation; 0: every test row,
the workload `udr evaluate` runs) of the project's prepared data, with BM25's demonstrations
(`evaluate.max_demos` of them for classification, as many as fit in `evaluate.context` for
generation), assembled by `udr.evaluation.task_evaluation.TaskEvaluation`: the prompts
`udr evaluate --method bm25` builds. BM25 needs no trained model, so the benchmark runs on any
project whose data is prepared.

- udr: `TaskEvaluation.predict` (`udr.lm.predict`): label / choice prompts in length-bucketed
  batches under `evaluate.batch_tokens` (`--batch-tokens`), the prompt run once with its key/value
  cache shared by every label, the LM head only at scored positions; generation in batches with
  udr's greedy decode loop (finished rows leave the batch).
- reference: one prompt at a time, a full `model(prompt + label).logits` forward per label
  (`udr.lm.scorer.continuation_log_likelihood`, the plain route udr's scorer is tested against) for
  classification, and `model.generate` (greedy, stopped at the newline tokens:
  `reference_greedy`) for generation.

The script checks that both predict the same labels and texts (in fp32 a difference is an error;
with `--dtype bf16` it is reported: batch shapes move bf16 results by up to ~0.03 in log-likelihood).
- floor: one plain decoder forward per prompt, one prompt at a time (no labels, no LM head, no
  decode steps): the prompt tokens any exact prediction must run through the LM. On a CPU a single
  prompt already runs near a batch's throughput, so reference / floor bounds what an exact
  classification speed-up can reach here (generation adds decode steps, which batching does cut).

Timing: `time.perf_counter()` per task, after an untimed warm-up of each side on one prompt;
`--repeats N` times each side N times in alternating order and keeps the best. The first run of a
large batch in a process pays for fresh memory (its activations reach tens of MB), which one-prompt
runs never do, so use N >= 2 for udr's steady state (what a long evaluation runs at).

`--breakdown` instead times where udr's own evaluation spends its time, per task: the prompt
forwards, the label continuations, the generation steps (forward hooks on the decoder), the rest of
predicting (batching, decoding text), building the prompts, embedding the pool for a dense method
(SBERT, the base encoder: `udr evaluate --method sbert` embeds it on every run), and, once, the
process start (`import udr.cli.app` in a new process) and loading the LM.

    .venv/bin/python benchmarks/evaluate.py --markdown
    .venv/bin/python benchmarks/evaluate.py --breakdown --markdown
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.scoring import fmt_table  # noqa: E402

DEFAULT_TASKS = ("sst2", "trec", "comv", "e2e", "break")


# ---------------------------------------------------------------- the reference


def reference_greedy(model, ids, mask, max_new_tokens: int, stop_ids, pad_id: int) -> list[list[int]]:
    """The plain route: transformers' `generate`, greedy and stopped at `stop_ids`, on a (left-padded)
    batch; each row's `max_new_tokens` new token ids (padding after its stop token). The reference
    here, and the oracle `udr.lm.predict.GreedyGenerator` is tested against."""
    import torch

    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=list(stop_ids),
            pad_token_id=pad_id,
            top_p=None,
            top_k=None,
            temperature=None,
        )
    return out[:, ids.shape[1] :].tolist()


class PlainReference:
    """In-context prediction as a plain transformers user writes it: one prompt at a time."""

    def __init__(self, model, stop_ids, pad_id, bf16: bool):
        import torch

        self.model, self.stop_ids, self.pad_id, self.bf16 = model, stop_ids, pad_id, bf16
        self._torch = torch

    def _context(self):
        torch = self._torch
        return torch.autocast("cpu" if self.model.device.type == "cpu" else "cuda", enabled=self.bf16)

    def choice(self, prompt, continuations) -> int:
        """The continuation with the highest summed log-likelihood: one full forward per continuation."""
        from udr.lm.scorer import continuation_log_likelihood

        with self._context():
            scores = [continuation_log_likelihood(self.model, prompt, cont) for cont in continuations]
        return max(range(len(scores)), key=lambda j: (scores[j], -j))

    def generate(self, prompt, max_new_tokens: int) -> list[int]:
        """Greedy `generate` of one prompt, stopped at a newline token; the new token ids."""
        ids = self._torch.tensor([list(prompt)], device=self.model.device)
        mask = self._torch.ones_like(ids)
        with self._context():
            return reference_greedy(self.model, ids, mask, max_new_tokens, self.stop_ids, self.pad_id)[0]


# ---------------------------------------------------------------- workload


def load_workload(settings, lm, task: str, rows: int):
    """A TaskEvaluation of BM25's demonstrations on the task's first `rows` test rows (0: all of them,
    what `udr evaluate` runs), and its prompts."""
    from dataclasses import replace

    from udr.evaluation.task_evaluation import task_evaluation
    from udr.project.evaluation import evaluation_setup, load_evaluated_task, method_retriever

    pool, test_rows = load_evaluated_task(settings, task)
    bm25 = method_retriever(settings, "bm25", task, pool)
    ev = task_evaluation(lm, "bm25", settings.task(task), pool, test_rows, bm25, evaluation_setup(settings))
    if rows:
        ev.rows = ev.rows[:rows]
        ev.ranking = replace(ev.ranking, ids=ev.ranking.ids[:rows], similarities=ev.ranking.similarities[:rows])
    prompts = ev.prompts(None if ev.generation else settings.evaluate.max_demos)
    return ev, prompts


def fresh(ev):
    """The evaluation with its prediction memo emptied (so a timed run predicts every prompt)."""
    ev._done = {}
    return ev


def reference_predictions(ref: PlainReference, ev, prompts) -> list:
    if ev.generation:
        return [ev.lm.generator.decode_line(ref.generate(p.token_ids, ev.max_new_tokens)) for p in prompts]
    return [ref.choice(p.token_ids, [ev.builder.encode(c) for c in row["choices"]]) for p, row in zip(prompts, ev.rows)]


# ---------------------------------------------------------------- udr against the reference


def prompt_floor(model, prompts, bf16: bool) -> None:
    """One plain decoder forward per prompt, one prompt at a time: the prompt tokens every exact
    prediction must run through the LM, and nothing else (no labels, no LM head, no decode steps)."""
    import torch

    device, decoder = model.device, model.get_decoder()
    with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        for p in prompts:
            decoder(input_ids=torch.tensor([list(p.token_ids)], device=device))


def time_sides(runs: dict, repeats: int) -> tuple[dict, dict]:
    """Each run's best seconds over `repeats` rounds (in alternating order) and its last result."""
    best, out = {}, {}
    for rep in range(repeats):
        for name in runs if rep % 2 == 0 else reversed(runs):
            start = time.perf_counter()
            out[name] = runs[name]()
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
    return best, out


def compare(settings, lm, tasks, rows, gen_rows, bf16: bool, repeats: int = 1) -> tuple[list, bool]:
    """Per task: udr's, the reference's and the floor's seconds (each the best of `repeats` runs, in
    alternating order) and whether udr and the reference predict the same."""
    ref = PlainReference(lm.model, lm.generator.stop_ids, lm.generator.pad_id, bf16)
    table, all_agree = [], True
    total = {"n": 0, "tok": 0, "udr": 0.0, "ref": 0.0, "floor": 0.0}
    for task in tasks:
        ev, prompts = load_workload(settings, lm, task, gen_rows if settings.task(task).generation else rows)
        # warm-up (untimed): one prompt each
        fresh(ev).predict(prompts[:1])
        reference_predictions(ref, ev, prompts[:1])
        best, out = time_sides(
            {
                "udr": lambda: fresh(ev).predict(prompts)[0],  # noqa: B023 (called before the loop moves on)
                "ref": lambda: reference_predictions(ref, ev, prompts),  # noqa: B023
                "floor": lambda: prompt_floor(lm.model, prompts, bf16),  # noqa: B023
            },
            repeats,
        )
        agree = sum(a == b for a, b in zip(out["udr"], out["ref"]))
        all_agree &= agree == len(prompts)
        tokens = sum(len(p.token_ids) for p in prompts)
        for key, value in (("n", len(prompts)), ("tok", tokens), *best.items()):
            total[key] += value
        table.append(_row(task, ev.task.kind, len(prompts), tokens, best, f"{agree}/{len(prompts)}"))
        print(
            f"  {task}: udr {best['udr']:.1f}s, reference {best['ref']:.1f}s, floor {best['floor']:.1f}s",
            file=sys.stderr,
            flush=True,
        )
    table.append(_row("total", "", total["n"], total["tok"], total, ""))
    return table, all_agree


def _row(task, kind, n, tokens, seconds, agree):
    udr_s, ref_s, floor_s = seconds["udr"], seconds["ref"], seconds["floor"]
    return [
        task,
        kind,
        n,
        tokens,
        f"{udr_s:.2f}",
        f"{ref_s:.2f}",
        f"{floor_s:.2f}",
        f"{n / udr_s:.2f}",
        f"{n / ref_s:.2f}",
        f"{ref_s / udr_s:.2f}x",
        f"{ref_s / floor_s:.2f}x",
        agree,
    ]


COMPARE_HEADERS = [
    "task",
    "kind",
    "prompts",
    "prompt tokens",
    "udr s",
    "ref s",
    "floor s",
    "udr prompts/s",
    "ref prompts/s",
    "speed-up ref/udr",
    "ref/floor",
    "same predictions",
]


# ---------------------------------------------------------------- where udr's time goes


class ForwardTimer:
    """Seconds in the LM decoder's forward, split by the kind of call: a prompt forward (no cache
    yet), label continuations (a multi-token forward over a cache) and generation steps (one token
    over a cache). Given the whole causal LM instead of its decoder, it counts the LM head too."""

    def __init__(self, decoder):
        self.seconds = {"prompt forward": 0.0, "label continuations": 0.0, "generation steps": 0.0}
        self._start = 0.0
        self._kind = ""
        decoder.register_forward_pre_hook(self._pre, with_kwargs=True)
        decoder.register_forward_hook(self._post)

    def _pre(self, module, args, kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        ids = kwargs.get("input_ids")
        if cache is None or cache.get_seq_length() == 0:
            self._kind = "prompt forward"
        elif ids is not None and ids.shape[1] == 1:
            self._kind = "generation steps"
        else:
            self._kind = "label continuations"
        self._start = time.perf_counter()

    def _post(self, module, args, output):
        self.seconds[self._kind] += time.perf_counter() - self._start

    def take(self) -> dict[str, float]:
        out = dict(self.seconds)
        for key in self.seconds:
            self.seconds[key] = 0.0
        return out


def process_start_seconds(repeats: int = 3) -> float:
    """Median wall time of a new Python process importing udr's CLI (what every `udr evaluate` pays)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import udr.cli.app"], check=True, cwd=REPO)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def breakdown(settings, lm, tasks, rows, gen_rows, load_s: float) -> list:
    from udr.data.prepare import read_prepared
    from udr.project.evaluation import method_retriever

    timer = ForwardTimer(lm.model.get_decoder())
    table = []
    for task in tasks:
        n = gen_rows if settings.task(task).generation else rows
        ev, _ = load_workload(settings, lm, task, n)
        start = time.perf_counter()
        prompts = ev.prompts(None if ev.generation else settings.evaluate.max_demos)
        build_s = time.perf_counter() - start
        timer.take()
        start = time.perf_counter()
        fresh(ev).predict(prompts)
        predict_s = time.perf_counter() - start
        parts = timer.take()
        pool = read_prepared(settings.root, task, "train")
        start = time.perf_counter()
        method_retriever(settings, "sbert", task, pool, progress=False)
        embed_s = time.perf_counter() - start
        rest = predict_s - sum(parts.values())
        table.append(
            [
                task,
                len(prompts),
                f"{build_s:.2f}",
                *(f"{parts[k]:.2f}" for k in ("prompt forward", "label continuations", "generation steps")),
                f"{rest:.2f}",
                f"{predict_s:.2f}",
                f"{embed_s:.2f}",
            ]
        )
        print(f"  {task}: predict {predict_s:.1f}s", file=sys.stderr, flush=True)
    start_s = process_start_seconds()
    table.append(["(once per process)", "", "", "", "", "", "", f"start {start_s:.2f} + LM load {load_s:.2f}", ""])
    return table


BREAKDOWN_HEADERS = [
    "task",
    "prompts",
    "build prompts s",
    "prompt forward s",
    "label continuations s",
    "generation steps s",
    "other predict s",
    "predict s",
    "SBERT pool embedding s",
]


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", type=Path, default=REPO, help="project root (its params.yaml and prepared data)")
    ap.add_argument("--tasks", default=",".join(DEFAULT_TASKS), help="comma-separated task names")
    ap.add_argument("--rows", type=int, default=40, help="test rows per classification / multiple-choice task (0: all)")
    ap.add_argument("--gen-rows", type=int, default=12, help="test rows per generation task (0: all)")
    ap.add_argument("--batch-tokens", type=int, help="udr's evaluate.batch_tokens (default: the project's)")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="both sides' precision")
    ap.add_argument("--repeats", type=int, default=1, help="time each side this many times; report the best")
    ap.add_argument("--breakdown", action="store_true", help="time udr's evaluation by part instead")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    if args.rows < 0 or args.gen_rows < 0:
        ap.error("--rows and --gen-rows must be >= 0 (0: every test row)")

    from udr.config import load_settings
    from udr.project.evaluation import language_model

    overrides = [f"evaluate.dtype={args.dtype}"]
    if args.batch_tokens:
        overrides.append(f"evaluate.batch_tokens={args.batch_tokens}")
    settings = load_settings(args.project / "params.yaml", overrides)
    tasks = [t for t in args.tasks.split(",") if t]
    start = time.perf_counter()
    lm = language_model(settings)
    load_s = time.perf_counter() - start
    import torch

    params = sum(p.numel() for p in lm.model.parameters()) / 1e6
    print(
        f"LM {settings.paths.base_model('lm')} ({params:.1f}M parameters), "
        f"{args.dtype}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"evaluate.batch_tokens {settings.evaluate.batch_tokens}, context {settings.evaluate.context}",
        file=sys.stderr,
    )
    if args.breakdown:
        table = breakdown(settings, lm, tasks, args.rows, args.gen_rows, load_s)
        print(fmt_table(BREAKDOWN_HEADERS, table, args.markdown))
        return 0
    table, agree = compare(settings, lm, tasks, args.rows, args.gen_rows, args.dtype == "bf16", args.repeats)
    print(fmt_table(COMPARE_HEADERS, table, args.markdown))
    if not agree and args.dtype == "fp32":
        print("error: udr and the reference predicted differently in fp32", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
