"""Shipped feedback: round-0 LM scores versioned with the project (`score.shipped`, by default the whole
pool's scores under data/feedback/round0/), which `udr score` takes instead of scoring their pairs again,
once a seeded sample of them, scored again here, agrees.

A task's shipped file is taken only where its manifest's inputs hash equals this run's (same data, LM
and prompt settings; the precision may differ: the sample decides) and its checksum matches; a changed
file is an error, never used. The sample is `score.check_queries` seeded queries (all their candidates):
their scores are computed here and each must lie within `score.check_tolerance` of the shipped one, else
the stage fails and writes nothing.
The output then holds the shipped scores for every pair, the sample's too, so training reads the same
feedback on every machine.

Why a tolerance and not equality: in bf16 a pair's score depends in its last bits on the batch it is
scored in (padding, the prefixes shared with other queries), so a sample scored apart differs from the
same pairs scored in the whole run even on the machine that wrote them (measured in
`metrics/feedback/shipped-check.md`).

Imports of polars are inside the functions that use them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from udr.errors import UdrError, first_line
from udr.feedback.pair_scoring import ScoreWork, ScoringSetup, score_inputs
from udr.feedback.scores_file import ScoresManifest, query_choice, read_manifest, read_score_rows
from udr.paths import summary_file as manifest_path
from udr.util.files import file_sha256
from udr.util.rng import task_rng

KEY = ["query_id", "candidate_id"]


@dataclass
class ShippedSample:
    """The shipped pairs a run scores again, and how to check and replace them once scored."""

    source: Path
    label: str  # the source as the params give it (relative to the params file's folder where it is there)
    manifest: ScoresManifest  # the shipped file's
    shipped: object  # the sample's shipped scores (polars): query_id, candidate_id, score, scored_in
    taken: int  # pairs taken from the shipped file without scoring
    tolerance: float
    queries: int

    def verify(self, new):
        """The scores `new` (this run's, polars) with the sample's replaced by the shipped ones, and what the
        check found (for the summary); a UdrError where a sampled pair differs beyond the tolerance."""
        import polars as pl

        # sorted: a join's row order is not fixed, and the mean's float sum (and the worst pair named) follow it
        both = self.shipped.join(new.select([*KEY, "score"]), on=KEY, suffix="_here").sort(KEY)
        if len(both) != len(self.shipped):
            missing = len(self.shipped) - len(both)
            raise UdrError(f"shipped feedback {self.source}: {missing} sampled pair(s) not scored")
        diff = (both["score"] - both["score_here"]).abs()
        worst = int(diff.arg_max() or 0)
        max_diff = float(diff.max() or 0.0)
        if max_diff > self.tolerance:
            over = int((diff > self.tolerance).sum())
            raise UdrError(
                f"shipped feedback {self.source} disagrees with this machine's LM: {over} of {len(both)} re-scored "
                f"pairs differ by more than score.check_tolerance={self.tolerance} (largest {max_diff:.4g}, query "
                f"{both['query_id'][worst]}); check models.lm and the score settings, or score every pair here "
                f"with score.reuse_shipped=false"
            )
        sample = self.shipped.select(new.columns).cast(new.schema)
        merged = pl.concat([new.join(sample, on=KEY, how="anti"), sample])
        return merged, {
            "source": self.label,
            "sha256": self.manifest.sha256,
            "written_on": self.manifest.machine,
            "taken": self.taken,
            "checked_queries": self.queries,
            "checked_pairs": len(both),
            "max_abs_diff": round(max_diff, 6),
            "mean_abs_diff": round(float(diff.mean() or 0.0), 6),
            "tolerance": self.tolerance,
        }


def take_shipped(work: ScoreWork, source: Path, label: str, setup: ScoringSetup):
    """(work, sample, None): `work` with every shipped pair of its to-do list moved to the reused ones but
    the sample's, which stay to be scored and checked; (work, None, why) where the task has no shipped file,
    or one of other inputs (`why` says which, for the caller's notice of what it does instead), and
    (work, None, None) where none is to be taken (switched off, a later round, nothing to do). `source`: the
    task's shipped scores (`label`: as the params name them); `setup`: the score settings (`reuse_shipped`,
    `check_queries`, `check_tolerance`), the LM (the pairs' inputs hash) and the sample's seed. The shipped
    file's own precision is accepted (an fp32 run takes bf16 feedback): the sample, scored at this run's,
    must agree all the same."""
    import polars as pl

    cfg = setup.score
    if not (cfg.reuse_shipped and work.round == 0 and len(work.todo)):
        return work, None, None
    if not source.is_file():
        return (
            work,
            None,
            f"no shipped feedback of {work.task.name} in {label.rsplit('/', 1)[0] or '.'} (score.shipped)",
        )
    manifest = _shipped_manifest(source)
    if manifest.inputs_hash != score_inputs(work, cfg, setup.lm_dir, manifest.inputs.get("dtype", "")):
        return work, None, f"shipped feedback {source} was scored with other inputs (data, LM or prompt)"
    _check_query_order(manifest, work, source)
    shipped = read_score_rows(source, 0, work.task.name, [*KEY, "score", "scored_in"]).cast(work.reused.schema)
    available = work.todo.join(shipped, on=KEY, how="inner")
    covered = _fully_covered_queries(work.todo, available)
    if not covered.size:
        return work, None, f"shipped feedback {source} covers none of {work.task.name}'s scored queries"
    picked = task_rng(setup.seed, work.task.name, "shipped-check").permutation(covered)[: cfg.check_queries]
    in_sample = pl.col("query_id").is_in(picked.tolist())
    taken = available.filter(~in_sample).select(work.reused.columns)
    todo = work.todo.join(taken, on=KEY, how="anti").sort(["candidate_id", "query_id"])
    reused = pl.concat([work.reused, taken])
    sample = ShippedSample(
        source,
        label,
        manifest,
        available.filter(in_sample).select(taken.columns),
        len(taken),
        cfg.check_tolerance,
        len(picked),
    )
    return replace(work, reused=reused, todo=todo), sample, None


CHECKSUMS = "SHA256SUMS"  # a shipped folder's list of its files' checksums (`sha256sum` format)


def _shipped_manifest(source: Path) -> ScoresManifest:
    """The shipped file's manifest, whose checksum the file must match, and both files the checksums of
    the folder's SHA256SUMS, which must be there (the committed list: an edit of the scores together with
    their manifest's checksum is caught too). Shipped data is never taken unverified."""
    restore = "restore it (git checkout) or score every pair with score.reuse_shipped=false"
    listed = read_checksums(source.parent, restore)
    digests = {path: file_sha256(path) for path in (source, manifest_path(source))}  # each file hashed once
    for path, digest in digests.items():
        if listed.get(path.name) != digest:
            raise UdrError(f"shipped feedback {path} differs from its checksum in {CHECKSUMS}: {restore}")
    manifest = read_manifest(source, 0, source.stem)
    if manifest.sha256 != digests[source]:
        raise UdrError(
            f"shipped feedback {source} changed since it was written (checksum differs from its manifest): {restore}"
        )
    return manifest


def read_checksums(folder: Path, fix: str = "restore it (git checkout)") -> dict[str, str]:
    """{file name: sha256} of `folder`'s SHA256SUMS (lines "<hex>  <name>"); a missing or unreadable one
    (a directory, say), a one-line UdrError ending in `fix`: without it nothing shipped is verified."""
    path = Path(folder) / CHECKSUMS
    if not path.exists():
        raise UdrError(f"shipped feedback {folder} has no {CHECKSUMS} (the list of its files' checksums): {fix}")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UdrError(f"unreadable {path}: {first_line(exc)}; {fix}") from None
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or not name.strip():
            raise UdrError(f"malformed {path}, line {n}: expected '<sha256>  <file name>'")
        out[name.strip().lstrip("*")] = digest.lower()
    return out


def _check_query_order(manifest: ScoresManifest, work: ScoreWork, source: Path) -> None:
    """The manifest's queries are the seeded choice's first n (a smaller `queries_per_task` takes a prefix
    of them, so their order matters and no checksum covers it): a reordered list is refused."""
    ids = np.asarray(work.train["id"].to_list())
    expected = query_choice(ids, manifest.seed, work.task.name)[: len(manifest.queries)]
    if [int(q) for q in expected] != [int(q) for q in manifest.queries]:
        raise UdrError(
            f"shipped feedback {manifest_path(source)}: its queries are not the seeded choice of seed "
            f"{manifest.seed} (reordered or edited); restore it (git checkout)"
        )


def _fully_covered_queries(todo, available) -> np.ndarray:
    """Query ids all of whose to-do pairs the shipped file holds, sorted."""
    need = todo.group_by("query_id").len()
    have = available.group_by("query_id").len()
    joined = need.join(have, on="query_id", suffix="_have")
    return np.sort(joined.filter(joined["len"] == joined["len_have"])["query_id"].to_numpy())
