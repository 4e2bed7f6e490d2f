"""metrics/claims.md: the paper's claims, each beside what this project measured, with its paired
interval and, where the retrievers were trained with several seeds, each seed's difference.

It gathers what other tables computed and computes nothing itself: the default run's seed table
(metrics/seeds.json, :mod:`udr.experiments.seeds`), the leave-one-family-out folds (metrics/lofo.json,
:mod:`udr.experiments.lofo`) and, where it was run, the offline suite's comparisons
(metrics/suite/compare-<baseline>-<group>.json: one seed). A missing source leaves its rows out.
`udr exp claims` writes it; `docs/sync_readme.py` copies it into the README.
"""

from __future__ import annotations

from pathlib import Path

from udr.evaluation.bootstrap import Interval
from udr.experiments.suite import EXPERIMENT, LOFO_TABLE, TABLE
from udr.experiments.tables import markdown_table
from udr.util.files import write_text_atomic
from udr.util.readers import read_json

# (the paper's claim, [(seed-table claim (a, b), its group), ...], [(suite baseline, suite group, label)])
PAPER_CLAIMS = (
    (
        "one multi-task UDR beats task-specific EPRs (Tables 1-2)",
        [(("udr", "epr"), "tasks with signal"), (("udr", "epr"), "all trained tasks")],
        [],
    ),
    (
        "UDR beats DR-Target, trained per task on its targets' similarity (Tables 1-2)",
        [(("udr", "dr-target"), "tasks with signal"), (("udr", "dr-target"), "all trained tasks")],
        [],
    ),
    (
        "list-wise ranking beats EPR's loss, both multi-task (Table 3)",
        [(("udr", "epr-multitask"), "tasks with signal")],
        [("epr", "trained", "suite: 16 trained tasks, UDR − multi-task EPR")],
    ),
    (
        "multi-task training is at least single-task (Table 3)",
        [(("epr-multitask", "epr"), "tasks with signal")],
        [],
    ),
    (
        "UDR transfers to unseen tasks, above SBERT (Table 5)",
        [(("udr", "sbert"), "unseen tasks")],
        [("sbert", "held-out", "suite: three held-out families, UDR − SBERT")],
    ),
)
# The suite's groups (metrics/suite/pipeline.json, udr.experiments.suite.suite_groups) that answer a seed-table group.
SUITE_GROUPS = {
    "tasks with signal": ("tasks with signal",),
    "all trained tasks": ("all trained tasks",),
    "unseen tasks": ("unseen families", "unseen tasks of a trained family"),
}
LABELS = {"udr": "UDR", "epr": "per-task EPR", "epr-multitask": "multi-task EPR", "sbert": "SBERT", "bm25": "BM25"}
LABELS["dr-target"] = "per-task DR-Target"


def finding(interval: Interval) -> str:
    if not interval.resolved:
        return "not resolved"
    return "resolved above" if interval.difference > 0 else "resolved below"


def claims_rows(root: Path) -> list[list[str]]:
    """The table's rows from the seed table, the suite's table and comparisons, and the folds found under `root`."""
    metrics = Path(root) / "metrics"
    seeds = (
        read_json(metrics / "seeds.json", "seed table", "run `udr exp seeds --table`")
        if (metrics / "seeds.json").is_file()
        else None
    )
    pipeline = metrics / EXPERIMENT / Path(TABLE).with_suffix(".json")
    by_dvc = read_json(pipeline, "suite table", "run `udr exp suite --table`") if pipeline.is_file() else None
    rows = []
    for claim, seeded, suite in PAPER_CLAIMS:
        for (a, b), group in seeded:
            rows += _seeded_rows(claim, seeds, (a, b), [group], "default run")
        for (a, b), group in seeded:
            rows += _seeded_rows(claim, by_dvc, (a, b), SUITE_GROUPS[group], "suite by DVC")
        if claim == PAPER_CLAIMS[-1][0]:  # transfer: the folds, pooled (the default run's, the suite's)
            for folds, source, again in (
                (metrics / "lofo.json", "default run", "run `udr exp lofo --table`"),
                (
                    metrics / EXPERIMENT / Path(LOFO_TABLE).with_suffix(".json"),
                    "suite by DVC",
                    "run `udr exp suite --table`",
                ),
            ):
                if folds.is_file():
                    rows += _lofo_rows(claim, read_json(folds, "fold table", again), source)
        for baseline, group, label in suite:
            path = metrics / "suite" / f"compare-{baseline}-{group}.json"
            if not path.is_file():
                continue
            compared = read_json(path, "suite comparison")
            iv = Interval.of(compared["average"])
            n = sum(v["n"] for k, v in compared.items() if k != "average")
            rows.append([claim, label, str(n), iv.markdown(), "one seed", finding(iv)])
    return rows


def _shown(tasks: list[str]) -> str:
    return ", ".join(tasks) if len(tasks) <= 6 else f"{len(tasks)} tasks"


def _seeded_rows(claim: str, table: dict | None, pair: tuple[str, str], groups, source: str) -> list[list[str]]:
    """The rows of a seed-shaped table's (metrics/seeds.json, the suite's) claim A − B in each of `groups`
    it has."""
    rows = []
    for group in groups:
        found = [c for c in (table or {}).get("claims", []) if (c["a"], c["b"], c["group"]) == (*pair, group)]
        if not found:
            continue
        c, iv = found[0], Interval.of(found[0]["interval"])
        evidence = f"{source}, {group} ({_shown(table['groups'][group])}): {LABELS[pair[0]]} − {LABELS[pair[1]]}"
        per_seed = " / ".join(f"{d:+.1f}" for d in c["per_seed"])
        rows.append([claim, evidence, str(c["n"]), iv.markdown(), per_seed, finding(iv)])
    return rows


def _lofo_rows(claim: str, lofo: dict, source: str) -> list[list[str]]:
    """The fold table's UDR − SBERT, pooled over the held-out families (the one family where only one ran)."""
    groups = lofo.get("groups", {})
    pooled = [g for g in groups if g.startswith("pooled")] or list(groups)[:1]
    rows = []
    for g in pooled:
        iv = Interval.of(groups[g]["versus"]["sbert"])
        label = f"{source}, one family held out at a time ({_shown(groups[g]['tasks'])}): UDR − SBERT"
        rows.append([claim, label, str(groups[g]["n"]), iv.markdown(), "one seed", finding(iv)])
    return rows


def write_claims(root: Path) -> Path:
    """Write metrics/claims.md; returns its path."""
    header = ["the paper's claim", "measured here", "n", "difference [95% CI]", "each seed", "finding"]
    out = Path(root) / "metrics" / "claims.md"
    write_text_atomic(out, markdown_table(header, claims_rows(root)))
    return out
