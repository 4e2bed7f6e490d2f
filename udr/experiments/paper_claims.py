"""metrics/claims.md: the paper's claims, each beside what this project measured, with its paired
interval and, where the retrievers were trained with several seeds, each seed's difference.

It gathers what other tables computed and computes nothing itself: the default run's seed table
(metrics/seeds.json, :mod:`udr.experiments.seeds`), the leave-one-family-out folds (metrics/lofo.json,
:mod:`udr.experiments.lofo`) and, where it was run, the offline suite's by DVC (its seed-shaped table
metrics/suite/pipeline.json and its folds metrics/suite/lofo.json, :mod:`udr.experiments.suite`). A missing source
leaves its rows out.
`udr exp claims` writes it, and metrics/claims.png, the same rows as a picture (each difference, its interval,
each seed's difference and the claim margin); `docs/sync_readme.py` copies the table into the README.

matplotlib is imported only when a figure is drawn (:mod:`udr.util.figures`).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

from udr.evaluation.bootstrap import Interval
from udr.evaluation.claims import CLAIM_MARGIN
from udr.experiments.suite import EXPERIMENT, LOFO_TABLE, TABLE
from udr.experiments.tables import markdown_table
from udr.util.figures import pyplot, save_png
from udr.util.files import write_text_atomic
from udr.util.readers import read_json

# (the paper's claim, [(seed-table claim (a, b), its group), ...])
PAPER_CLAIMS = (
    (
        "one multi-task UDR beats task-specific EPRs (Tables 1-2)",
        [(("udr", "epr"), "tasks with signal"), (("udr", "epr"), "all trained tasks")],
    ),
    (
        "UDR beats DR-Target, trained per task on its targets' similarity (Tables 1-2)",
        [(("udr", "dr-target"), "tasks with signal"), (("udr", "dr-target"), "all trained tasks")],
    ),
    (
        "list-wise ranking beats EPR's loss, both multi-task (Table 3)",
        [(("udr", "epr-multitask"), "tasks with signal"), (("udr", "epr-multitask"), "all trained tasks")],
    ),
    (
        "multi-task training is at least single-task (Table 3)",
        [(("epr-multitask", "epr"), "tasks with signal")],
    ),
    (
        "UDR transfers to unseen tasks, above SBERT (Table 5)",
        [(("udr", "sbert"), "unseen tasks")],
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


@dataclass(frozen=True)
class ClaimRow:
    """One measurement of a paper's claim: what was compared where, over n rows, with its interval and,
    where the retrievers were trained with several seeds, each seed's difference (None or one value: one seed)."""

    claim: str
    evidence: str
    n: int
    interval: Interval
    per_seed: tuple[float, ...] | None = None

    def cells(self) -> list[str]:
        several = self.per_seed is not None and len(self.per_seed) > 1
        seeds = " / ".join(f"{d:+.1f}" for d in self.per_seed) if several else "one seed"
        return [self.claim, self.evidence, str(self.n), self.interval.markdown(), seeds, finding(self.interval)]


def claims_rows(root: Path) -> list[ClaimRow]:
    """The table's rows from the seed table, the suite's table and the folds found under `root`."""
    metrics = Path(root) / "metrics"
    seeds = (
        read_json(metrics / "seeds.json", "seed table", "run `udr exp seeds --table`")
        if (metrics / "seeds.json").is_file()
        else None
    )
    pipeline = metrics / EXPERIMENT / Path(TABLE).with_suffix(".json")
    by_dvc = read_json(pipeline, "suite table", "run `udr exp suite --table`") if pipeline.is_file() else None
    rows = []
    for claim, seeded in PAPER_CLAIMS:
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
    return rows


def _shown(tasks: list[str]) -> str:
    return ", ".join(tasks) if len(tasks) <= 6 else f"{len(tasks)} tasks"


def _seeded_rows(claim: str, table: dict | None, pair: tuple[str, str], groups, source: str) -> list[ClaimRow]:
    """The rows of a seed-shaped table's (metrics/seeds.json, the suite's) claim A − B in each of `groups`
    it has."""
    rows = []
    for group in groups:
        found = [c for c in (table or {}).get("claims", []) if (c["a"], c["b"], c["group"]) == (*pair, group)]
        if not found:
            continue
        c = found[0]
        evidence = f"{source}, {group} ({_shown(table['groups'][group])}): {LABELS[pair[0]]} − {LABELS[pair[1]]}"
        rows.append(ClaimRow(claim, evidence, c["n"], Interval.of(c["interval"]), tuple(c["per_seed"])))
    return rows


def _lofo_rows(claim: str, lofo: dict, source: str) -> list[ClaimRow]:
    """The fold table's UDR − SBERT, pooled over the held-out families (the one family where only one ran)."""
    groups = lofo.get("groups", {})
    pooled = [g for g in groups if g.startswith("pooled")] or list(groups)[:1]
    rows = []
    for g in pooled:
        label = f"{source}, one family held out at a time ({_shown(groups[g]['tasks'])}): UDR − SBERT"
        rows.append(ClaimRow(claim, label, groups[g]["n"], Interval.of(groups[g]["versus"]["sbert"])))
    return rows


def write_claims(root: Path) -> Path:
    """Write metrics/claims.md and metrics/claims.png (none where the table has no row); returns the table's path."""
    header = ["the paper's claim", "measured here", "n", "difference [95% CI]", "each seed", "finding"]
    rows = claims_rows(root)
    out = Path(root) / "metrics" / "claims.md"
    write_text_atomic(out, markdown_table(header, [row.cells() for row in rows]))
    if rows:
        plot_claims(rows, out.with_suffix(".png"))
    else:  # no picture of an empty table, nor a stale one beside it
        out.with_suffix(".png").unlink(missing_ok=True)
    return out


def plot_claims(rows: list[ClaimRow], out: Path) -> list[str]:
    """A forest plot of `rows` at `out`: per row, its difference (a dot, filled where resolved), its 95% interval
    (a bar), each seed's difference (small crosses), the claim margin (grey band around 0); rows grouped under their
    claim (rows come grouped, as :func:`claims_rows` makes them), top down in table order. Returns the y-axis
    labels, top down."""
    plt = pyplot()

    labels = [f"{r.evidence} (n = {r.n})" for r in rows]
    ys, tops, y = [], {}, 0.0  # each row's height, top down; each claim's first row's
    for r in rows:
        if r.claim not in tops:
            y -= 0.6 if tops else 0.0  # a gap before each claim but the first
            tops[r.claim] = y
        ys.append(y)
        y -= 1
    fig, ax = plt.subplots(figsize=(11, 0.42 * len(rows) + 0.5 * len(tops) + 1.2))
    ax.axvspan(-CLAIM_MARGIN, CLAIM_MARGIN, color="0.88", zorder=0)
    ax.axvline(0, color="0.5", lw=0.8, zorder=1)
    for r, at in zip(rows, ys):
        iv = r.interval
        color = ("C0" if iv.difference > 0 else "C3") if iv.resolved else "0.3"
        ax.plot([iv.low, iv.high], [at, at], color=color, lw=2, zorder=2)
        ax.plot([iv.difference], [at], "o", color=color, mfc=color if iv.resolved else "white", ms=6, zorder=3)
        if r.per_seed is not None and len(r.per_seed) > 1:
            ax.plot(r.per_seed, [at] * len(r.per_seed), "x", color="0.45", ms=4, zorder=3)
    ax.set_yticks(ys, [_wrapped(label) for label in labels], fontsize=7)
    for claim, top in tops.items():  # each claim's title above its rows
        ax.text(0.0, top + 0.55, claim, transform=ax.get_yaxis_transform(), fontsize=8, weight="bold", va="bottom")
    ax.set_ylim(min(ys) - 0.8, max(ys) + 1.2)
    ax.set_xlabel(
        "difference A − B, points: the dot and its bar seed-averaged (or one seed) with the 95% paired bootstrap "
        f"interval,\nx each seed's difference; grey ±{CLAIM_MARGIN:g}, the claim margin; a filled dot is resolved "
        "(blue above, red below)",
        fontsize=8,
    )
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    save_png(fig, out, dpi=110)
    return labels


def _wrapped(text: str, width: int = 70) -> str:
    return "\n".join(textwrap.wrap(text, width))
