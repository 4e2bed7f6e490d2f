"""Training seeds: UDR and the per-task DR-Target and EPR trained with three seeds, the paper's average, and the claims
compared on seed-averaged retrievers.

`udr exp seeds` trains them again with other training seeds (`train.seed`: task, query and candidate
sampling, dropout; the data, the scored queries and the evaluation keep the global seed, so every seed
learns from the same feedback and is tested on the same rows). Each seed is a DVC experiment,
`dvc exp run --queue -n seed-N -S train.seed=N evaluate@epr evaluate@udr` (DR-Target's, added later, its own:
`dr-target-seed-N`, `evaluate@dr-target`), run by `dvc queue start -j JOBS` in DVC's temporary folders (the
workspace's models stay the committed ones). HEAD's committed run is the
global seed's. The table, metrics/seeds.md (and .json), gives per task each seed's score, their mean and
standard deviation beside random, BM25 and SBERT (which no training seed moves) and the paper's values, and
compares the retrievers seed-averaged: a paired bootstrap over the test rows in which each side's graded
score on a resample is the mean of its seeds' (:func:`udr.experiments.dvc.compare_revisions`), over all
trained tasks and over the tasks with signal (:mod:`udr.experiments.signal`).

Imports of udr.config, udr.errors, udr.evaluation.bootstrap and udr.experiments.dvc's readers are inside the functions
that use them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from udr.errors import UdrError
from udr.evaluation.claims import BOOTSTRAP_RESAMPLES, CLAIM_MARGIN
from udr.experiments.analyses import Experiment, chosen_experiments, queue_experiments
from udr.experiments.dvc import (
    SavedScorers,
    commit_time,
    compare_revisions,
    keep_evaluation,
    method_results,
    method_scores,
    saved_at,
    saved_experiments,
    saved_tasks,
)
from udr.experiments.signal import RULE, tasks_with_signal
from udr.experiments.tables import markdown_table
from udr.util.files import write_json_atomic, write_text_atomic

if TYPE_CHECKING:
    from udr.config import Settings

SEEDS = (1, 2)  # with the global seed's committed run: three
SEEDED = ("dr-target", "epr", "udr")  # retrievers a training seed moves
# The seeded retrievers each seed's experiments train: {experiment name's prefix: methods}; "" names the first,
# `seed-N` (UDR and EPR), and DR-Target's came after it, `dr-target-seed-N`.
SEED_GROUPS = {"": ("epr", "udr"), "dr-target": ("dr-target",)}
FIXED = ("random", "bm25", "sbert")  # and those it does not
MULTITASK = "epr-multitask"  # `udr train --epr` saved with `udr evaluate ... --save-as epr-multitask`: one seed
LABELS = {"random": "random", "bm25": "BM25", "sbert": "SBERT", "dr-target": "DR-Target (per task)"}
LABELS |= {"epr": "EPR (per task)", "udr": "UDR"}
LABELS[MULTITASK] = "multi-task EPR"
# The paper's Tables 1-2 (GPT-Neo-2.7B scoring and inferring, the datasets' whole test sets), for the tasks
# whose data this project takes from the paper's own release; python_code is another dataset here.
PAPER = {
    "sst2": {"random": 57.7, "bm25": 74.1, "sbert": 84.3, "epr": 87.9, "udr": 92.4},
    "sst5": {"random": 28.2, "bm25": 38.3, "sbert": 40.0, "epr": 46.9, "udr": 50.5},
    "mr": {"random": 56.0, "bm25": 71.4, "sbert": 79.0, "epr": 80.6, "udr": 85.2},
    "cr": {"random": 52.4, "bm25": 57.2, "sbert": 61.3, "epr": 65.7, "udr": 82.6},
    "agnews": {"random": 74.2, "bm25": 88.4, "sbert": 88.3, "epr": 89.9, "udr": 91.5},
    "trec": {"random": 42.6, "bm25": 89.4, "sbert": 89.4, "epr": 95.2, "udr": 96.6},
    "copa": {"random": 71.6, "bm25": 71.2, "sbert": 72.4, "epr": 73.2, "udr": 72.8},
    "cosmos_qa": {"random": 26.2, "bm25": 27.1, "sbert": 27.3, "epr": 28.4, "udr": 29.9},
    "come": {"random": 41.4, "bm25": 41.4, "sbert": 41.1, "epr": 43.0, "udr": 45.6},
    "comv": {"random": 50.5, "bm25": 50.9, "sbert": 50.3, "epr": 50.4, "udr": 63.9},
    "snli": {"random": 33.0, "bm25": 41.5, "sbert": 42.0, "epr": 74.0, "udr": 83.6},
    "rte": {"random": 55.6, "bm25": 50.5, "sbert": 49.8, "epr": 55.6, "udr": 65.3},
    "subj": {"random": 60.0, "bm25": 78.8, "sbert": 88.7, "epr": 92.1, "udr": 95.0},
    "cola": {"random": 52.8, "bm25": 53.3, "sbert": 56.3, "epr": 70.3, "udr": 78.9},
    "break": {"random": 1.9, "dr-target": 22.1, "bm25": 26.0, "sbert": 22.4, "epr": 31.9, "udr": 35.2},
    "smcalflow": {"random": 8.7, "dr-target": 41.6, "bm25": 46.1, "sbert": 43.1, "epr": 54.3, "udr": 60.4},
    "commongen": {"random": 21.1, "dr-target": 24.5, "bm25": 26.0, "sbert": 25.7, "epr": 25.3, "udr": 27.1},
    "dart": {"random": 20.4, "dr-target": 30.1, "bm25": 28.4, "sbert": 27.9, "epr": 31.8, "udr": 34.5},
    "e2e": {"random": 21.9, "dr-target": 24.7, "bm25": 29.2, "sbert": 24.2, "epr": 29.3, "udr": 32.6},
}
PAPER_COLUMNS = ("dr-target", "epr", "udr")
# The claims, seed-averaged: (A, B) as A − B.
CLAIMS = (
    ("udr", "epr", "one multi-task UDR over task-specific EPRs (the paper's main comparison)"),
    ("udr", MULTITASK, "list-wise ranking over EPR's loss, both multi-task (the paper's Table 3 ablation)"),
    (MULTITASK, "epr", "multi-task over single-task training, both with EPR's loss"),
    ("udr", "bm25", "UDR over BM25"),
    ("udr", "sbert", "UDR over SBERT"),
    ("epr", "sbert", "EPR over SBERT"),
    ("udr", "dr-target", "UDR over DR-Target (targets' BM25 similarity instead of the LM's feedback)"),
    ("epr", "dr-target", "the LM's feedback over the targets' similarity, both per task with EPR's recipe"),
    ("udr", "random", "UDR over random demonstrations"),
)


def experiment_name(group: str, seed: int) -> str:
    """The DVC experiment of a seed group (:data:`SEED_GROUPS`) and training seed."""
    return f"{group}-seed-{seed}" if group else f"seed-{seed}"


def seed_experiments(seeds=SEEDS) -> tuple[Experiment, ...]:
    """The DVC experiments of the extra training seeds, one per seed and group of :data:`SEED_GROUPS`: UDR and
    every task's EPR, then every task's DR-Target, trained and evaluated again."""
    return tuple(
        Experiment(
            experiment_name(group, s),
            f"training seed {s}" + (f" ({group})" if group else ""),
            (f"train.seed={s}", "evaluate.shots_tasks=[]"),
            tuple(f"evaluate@{m}" for m in methods),
        )
        for s in seeds
        for group, methods in SEED_GROUPS.items()
    )


def run_seeds(
    root: Path, seeds=SEEDS, *, only=None, jobs: int = 1, missing: bool = False, dry: bool = False
) -> Path | None:
    """Queue and run the seeds' experiments (`only` those named, e.g. DR-Target's alone after a change to it;
    with `missing`, only those not saved yet), then write the table; returns its path (None on a dry run)."""
    from udr.config import load_settings

    settings = load_settings(root / "params.yaml")
    experiments = chosen_experiments(seed_experiments(seeds), only)
    queue_experiments(root, settings, experiments, jobs=jobs, missing=missing, dry=dry)
    if dry:
        return None
    keep_seed_evaluations(root, seeds)
    return write_seeds(root, seeds)


def _mean_sd(values: list[float]) -> tuple[float, float | None]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def task_groups(settings: Settings, trained: list[str], signal: list[str] | None) -> dict[str, list[str]]:
    """The seed table's groups of tasks: all trained, with signal and without (where the rule has run), unseen."""
    groups = {"all trained tasks": trained}
    if signal:
        groups["tasks with signal"] = signal
    if signal is not None and len(signal) < len(trained):
        groups["tasks without signal (no claim)"] = [t for t in trained if t not in signal]
    unseen = [t for t in settings.evaluation_tasks() if t not in trained]
    if unseen:
        groups["unseen tasks"] = unseen
    return groups


def seed_table(root: Path, seeds=SEEDS, rev: str = "HEAD", grouping=task_groups, experiments: bool = True) -> dict:
    """Every number of metrics/seeds.md: per task the fixed retrievers' scores and each seed's score of the
    seeded ones (EPR: the trained tasks only), the groups of tasks (all trained, with signal, without,
    unseen), and per group each claim both sides of which cover it: its seed-averaged interval and each
    seed's difference of averages. The global seed's run, and the extra seeds' evaluations kept beside it,
    are read at git revision `rev` (a saved experiment's commit: the suite's table); `grouping` makes the
    groups (:func:`task_groups`' signature); without `experiments`, only the kept evaluations count (the
    suite's, whose repository may hold the default run's seed experiments of the same names)."""
    from udr.config import load_settings

    settings = load_settings(root / "params.yaml")
    trained, tasks = settings.method_tasks("epr"), settings.evaluation_tasks()
    covered = {m: settings.method_tasks(m) for m in SEEDED}
    shown = rev if rev == "HEAD" else rev[:12]
    runs = [(f"seed {settings.training_seed} ({shown})", {m: (m, rev) for m in SEEDED})]
    runs += [(f"seed {s}", sides) for s, sides in seed_sides(root, seeds, covered, rev, experiments).items()]
    fixed = [*FIXED, *([MULTITASK] if saved_at(root, MULTITASK, trained, rev) else [])]
    covered |= {m: trained if m == MULTITASK else tasks for m in fixed}
    # an extra seed may be evaluated on some of the tasks only (the suite's: those that bear on a claim)
    scores = {
        m: [method_scores(root, sides[m][0], covered[m], sides[m][1]) if m in sides else {} for _, sides in runs]
        for m in SEEDED
    }
    scores |= {m: [method_scores(root, m, covered[m], rev)] for m in fixed}
    sizes = {t: r["n"] for t, r in method_results(root, "random", tasks, rev).items()}
    signal = tasks_with_signal(root, trained)
    groups = grouping(settings, trained, signal)

    def seeds_of(m: str, members) -> list[int]:  # the runs of m that cover every member (a fixed one's: all)
        if m not in SEEDED:
            return list(range(len(runs)))
        return [i for i, s in enumerate(scores[m]) if set(members) <= set(s)]

    def side(m: str, seeds_in: list[int]):  # a claim's side: the seeds both sides share, or the one run
        return [runs[i][1][m] for i in seeds_in] if m in SEEDED else (m, rev)

    def average(m: str, i: int, members) -> float:  # seed i's average (a fixed retriever's one run)
        return statistics.fmean(scores[m][min(i, len(scores[m]) - 1)][t] for t in members)

    claims = []
    scorers = SavedScorers(root)  # each evaluation's predictions read once for every claim
    for group, members in groups.items():
        for a, b, meaning in CLAIMS:
            if a not in scores or b not in scores or not set(members) <= set(covered[a]) & set(covered[b]):
                continue
            both = [i for i in seeds_of(a, members) if i in seeds_of(b, members)]
            if not both:  # no run of a seeded side covers the whole group
                continue
            rows = {a: {t: side(a, both) for t in members}}
            _, interval = compare_revisions(root, rows, {t: side(b, both) for t in members}, settings.seed, scorers)[a]
            per_seed = [average(a, i, members) - average(b, i, members) for i in both]
            claims.append(
                {"group": group, "a": a, "b": b, "claim": meaning, "n": sum(sizes[t] for t in members)}
                | {"interval": interval.to_dict(), "per_seed": per_seed}
            )
    return {
        "seeds": [label for label, _ in runs],
        "read_from": [{m: f"{name} at {rev[:12]}" for m, (name, rev) in sides.items()} for _, sides in runs],
        "fixed": fixed,
        "tasks": {
            t: {"n": sizes[t], "kind": settings.task(t).kind}
            | {m: [s.get(t) for s in scores[m]] for m in scores if t in covered[m]}
            for t in tasks
        },
        "groups": groups,
        "signal_rule": RULE if signal is not None else None,
        "claims": claims,
        "paper": {t: PAPER[t] for t in trained if t in PAPER},  # the paper trained on cr and subj too
        "resamples": BOOTSTRAP_RESAMPLES,
    }


def kept_name(method: str, seed: int) -> str:
    """The saved evaluation that keeps `method`'s run with training seed `seed` at HEAD."""
    return f"{method}-seed-{seed}"


def seed_sides(
    root: Path, seeds, covered: dict[str, list[str]], rev: str = "HEAD", experiments: bool = True
) -> dict[int, dict[str, tuple]]:
    """{seed: {method: (saved evaluation, revision)}} of each extra seed run: its evaluations kept at `rev`
    (:func:`keep_seed_evaluations`), or (with `experiments`) those of its DVC experiment where there is no kept
    one or the experiment is newer than the kept one's last commit (a seed run again: the kept evaluation is the
    earlier run's until this one is kept and committed). A seed may have some seeded retrievers only (the
    others' runs still to come), and an evaluation some of `covered`'s tasks only."""
    saved = saved_experiments(root) if experiments else {}
    out = {}
    for s in seeds:
        sides = {}
        for group, methods in SEED_GROUPS.items():
            experiment = saved.get(experiment_name(group, s))
            run_at = commit_time(root, experiment) if experiment is not None else 0
            for m in methods:
                kept = saved_tasks(root, kept_name(m, s), covered[m], rev)
                from_experiment = experiment is not None and (
                    not kept or run_at > commit_time(root, rev, f"metrics/{kept_name(m, s)}")
                )
                if from_experiment:
                    sides[m] = (m, experiment)
                elif kept:
                    sides[m] = (kept_name(m, s), rev)
        if sides:
            out[s] = sides
    return out


def keep_seed_evaluations(root: Path, seeds=SEEDS) -> list[str]:
    """Keep each seed experiment's evaluations of the seeded retrievers at HEAD as saved evaluations,
    `<method>-seed-<N>` (:func:`udr.experiments.dvc.keep_evaluation`). Returns the names written."""
    saved, written = saved_experiments(root), []
    for s in seeds:
        for group, methods in SEED_GROUPS.items():
            rev = saved.get(experiment_name(group, s))
            if rev is None:
                continue
            for m in methods:
                keep_evaluation(root, rev, m, kept_name(m, s))
                written.append(kept_name(m, s))
    return written


def seeded_cells(values: list[float | None]) -> list[str]:
    """Each seed's value ("–" for a seed not evaluated there) and the mean ± sd of those there."""
    mean, sd = _mean_sd([v for v in values if v is not None])
    each = " / ".join("–" if v is None else f"{v:.1f}" for v in values)
    return [each, f"{mean:.1f}" + (f" ± {sd:.1f}" if sd is not None else "")]


def _group_mean(values: list[float | None]) -> float | None:
    return None if None in values else statistics.fmean(values)


def group_averages(rows: list[dict], method: str) -> list[float | None]:
    """Each run's (seed's) mean of `method` over a group's task rows of :func:`seed_table` (None for a run not
    evaluated on every task of the group); [] where some task has no value of `method`."""
    if not all(method in row for row in rows):
        return []
    return [_group_mean([row[method][i] for row in rows]) for i in range(len(rows[0][method]))]


def seeds_markdown(table: dict) -> str:
    """metrics/seeds.md from :func:`seed_table`'s numbers."""
    return (
        "# Training seeds\n\n"
        f"UDR, DR-Target and EPR (one retriever per task each) trained with {len(table['seeds'])} training seeds: "
        f"{', '.join(table['seeds'])}. "
        "A training seed draws the tasks, queries and candidates of each step and the dropout; the data, the "
        "LM's feedback and the test rows are the same for every seed, so random, BM25 and SBERT have one value. "
        "Graded metric in percent on each task's test rows; beside, the paper's values (GPT-Neo-2.7B, the "
        "whole test sets, other metrics for some generation tasks) for the trained tasks whose data this "
        "project takes from the paper's release. Made by `udr exp seeds`: each extra seed is a DVC experiment, "
        "`seed-N` (`dvc exp show -A`), whose evaluations are kept at HEAD as `udr-seed-N` and `epr-seed-N` "
        "(DR-Target's experiment `dr-target-seed-N`, kept as `dr-target-seed-N`; metrics/ and data/predictions/). "
        "The paper reports DR-Target on its generation tasks only.\n\n" + seed_tables_markdown(table)
    )


def seed_tables_markdown(table: dict) -> str:
    """The tables of :func:`seed_table`'s numbers (per task and group, then the claims), for any heading."""
    from udr.evaluation.bootstrap import Interval

    fixed = table["fixed"]
    header = ["task", "n", *(LABELS[m] for m in fixed)]
    for m in SEEDED:
        header += [f"{LABELS[m]}: each seed", f"{LABELS[m]}: mean ± sd"]
    header += [f"paper: {LABELS[m].removesuffix(' (per task)')}" for m in PAPER_COLUMNS]
    cells = []
    for t, row in table["tasks"].items():
        paper = table["paper"].get(t, {})
        cells.append(
            [t, str(row["n"]), *(f"{row[m][0]:.1f}" if m in row else "" for m in fixed)]
            + [c for m in SEEDED for c in (seeded_cells(row[m]) if m in row else ["", ""])]
            + [f"{paper[m]:.1f}" if m in paper else "" for m in PAPER_COLUMNS]
        )
    for group, members in table["groups"].items():
        rows = [table["tasks"][t] for t in members]
        once = [f"{statistics.fmean(r[m][0] for r in rows):.1f}" if all(m in r for r in rows) else "" for m in fixed]
        seeded = []
        for m in SEEDED:
            each = group_averages(rows, m)
            seeded += seeded_cells(each) if each else ["", ""]
        cells.append(
            [f"**average: {group}**", str(sum(r["n"] for r in rows)), *once, *seeded, *[""] * len(PAPER_COLUMNS)]
        )
    claim_cells = [
        [
            c["group"],
            f"{LABELS[c['a']]} − {LABELS[c['b']]}",
            str(c["n"]),
            Interval.of(c["interval"]).markdown(),
            " / ".join(f"{d:+.1f}" for d in c["per_seed"]),
        ]
        for c in table["claims"]
    ]
    signal = (
        f"Tasks with signal: by the rule of metrics/signal.md ({table['signal_rule']})."
        if table["signal_rule"]
        else ("No signal rule has been run (`udr exp signal`): every trained task is averaged.")
    )
    partial = any(None in row.get(m, []) for row in table["tasks"].values() for m in SEEDED)
    covering = (
        " A group's claims average the seeds evaluated on every task of the group (–: a seed not evaluated on "
        "that task), as many as its per-seed column lists."
        if partial
        else ""
    )
    return (
        markdown_table(header, cells) + f"\n{signal}\n\n## Claims on seed-averaged retrievers\n\n"
        "Each side's score on a bootstrap resample of the test rows is the mean of its seeds' scores on those "
        f"rows; paired 95% interval of the difference of the group's average ({table['resamples']} resamples, "
        f"every task resampled at once), **bold** where the unrounded interval clears 0 by {CLAIM_MARGIN} points "
        "(resolved). Per seed: the difference of averages of that seed's retrievers (the fixed ones' single run)."
        f"{covering}\n\n"
        + markdown_table(["tasks", "claim", "n", "seed-averaged difference [95% CI]", "per seed"], claim_cells)
    )


def write_seeds(root: Path, seeds=SEEDS) -> Path:
    """Write metrics/seeds.json and metrics/seeds.md from HEAD's run and the saved seed experiments; a seed
    of `seeds` with nothing saved is a one-line UdrError, the files as they were."""
    table = seed_table(root, seeds)
    unsaved = [str(s) for s in seeds if f"seed {s}" not in table["seeds"]]
    if unsaved:
        raise UdrError(
            f"no saved run of training seed {', '.join(unsaved)} (no DVC experiment, no kept evaluation): run "
            f"`udr exp seeds --seed {' --seed '.join(unsaved)}` first; metrics/seeds.md is unchanged"
        )
    out = Path(root) / "metrics" / "seeds.md"
    write_json_atomic(out.with_suffix(".json"), table)
    write_text_atomic(out, seeds_markdown(table))
    return out
