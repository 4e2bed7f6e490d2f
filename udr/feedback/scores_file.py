"""The scores file and its manifest, the contract between `udr score` and what reads its output
(`udr train`, `udr mine`, the next run of `udr score`).

Beside `data/scores/round<N>/<task>.parquet` (query_id, candidate_id, score, rank, scored_in) the stage
writes `<task>.json`, the manifest (:class:`ScoresManifest`): the scored query ids, what every score
depends on (the task, round, train split, LM identity, prompt settings and precision) with its hash,
the file's checksum and the machine that scored. Readers take the query set from it and never
re-derive it; a file that does not match its manifest's checksum, or holds a NaN, is refused. How the
run went (time, throughput, the shipped sample's check) is a report apart, in metrics/score/.

Imports of polars are inside the functions that use them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from udr.errors import UdrError, first_line
from udr.paths import summary_file
from udr.util.files import file_sha256, read_json_object, write_json_atomic
from udr.util.readers import dataclass_from, read_parquet_checked
from udr.util.rng import task_rng


def query_choice(train_ids: np.ndarray, seed: int, task: str) -> np.ndarray:
    """Every train query id in the order of the seeded choice: its first n are the n queries scored
    (depends on the pool's ids only: the same queries every round, and a larger n keeps a smaller one's)."""
    ids = np.sort(np.asarray(train_ids, dtype=np.int64))
    return task_rng(seed, task, "score-queries").permutation(ids)


def inputs_hash(inputs: dict) -> str:
    """The hash of what a pair's score depends on (:attr:`ScoresManifest.inputs`)."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


@dataclass
class ScoresManifest:
    """What a scores file holds and what its scores depend on."""

    task: str
    round: int
    seed: int | None  # the seed of the queries' choice (None: an instrument's own queries, in id order)
    queries: list[int]  # the scored query ids in the order of their seeded choice: the first n are the choice of n
    pairs: int
    inputs: dict  # task, round, train split hash, LM identity, prompt settings, precision
    inputs_hash: str  # :func:`inputs_hash` of `inputs`: a run with the same reuses the scores
    sha256: str  # the scores file's checksum
    machine: str  # the device kind that scored (:func:`udr.util.machine.machine_kind`): last bits depend on it
    taken_from: str | None = None  # the shipped feedback (`score.shipped`) whose scores the file holds, if any

    def write(self, scores: Path) -> None:
        write_json_atomic(summary_file(scores), asdict(self))

    def chosen_queries(self, n: int, seed: int, scores: Path, pool: int | None = None) -> np.ndarray:
        """The ids (sorted) of the n queries that `n` and `seed` choose (every one of a `pool` of fewer rows),
        which the file holds when it was scored for at least as many with the same seed; else a one-line
        UdrError naming `udr score`."""
        n = n if pool is None else min(n, pool)
        if seed != self.seed or n > len(self.queries):
            raise UdrError(
                f"{scores} holds the scores of {len(self.queries)} queries chosen with seed {self.seed}; the params "
                f"choose {n} with seed {seed} (score.queries_per_task, seed): run `udr score --round {self.round}` "
                f"with the same parameters first"
            )
        return np.sort(np.asarray(self.queries[:n], dtype=np.int64))


def read_manifest(scores: Path, round_: int, task: str) -> ScoresManifest:
    """The manifest beside the scores file `scores`, or a one-line UdrError saying to score again."""
    path = summary_file(scores)
    fix = f"run `udr score --round {round_} --task {task}` again"
    if not path.is_file():
        raise UdrError(f"scores {scores} have no manifest {path.name}: {fix}")
    # each field of its declared type: a list of ids given as a string, a count as text, are refused here
    raw = read_json_object(path, "scores manifest", fix)
    manifest = dataclass_from(ScoresManifest, raw, path, "scores manifest", fix)
    try:
        hashed = inputs_hash(manifest.inputs)
    except (ValueError, TypeError, RecursionError) as exc:
        raise UdrError(f"unreadable scores manifest {path}: its inputs ({first_line(exc)}); {fix}") from None
    if manifest.inputs_hash != hashed:
        raise UdrError(f"scores {scores}: the manifest's inputs do not match their hash (edited by hand?): {fix}")
    return manifest


def load_scores(path: Path, round_: int, task: str, columns: list[str] | None = None):
    """(manifest, scores) of the scores file `path` (polars), verified before any reuse or training: it must
    match the checksum its manifest records, and every score must be finite. Anything else is a one-line
    UdrError saying to score again."""
    if not path.is_file():
        raise UdrError(f"missing scores {path}: run `udr score --round {round_}` first")
    manifest = read_manifest(path, round_, task)
    if manifest.sha256 != file_sha256(path):
        raise UdrError(
            f"scores {path} changed since `udr score` wrote them (checksum differs from its manifest): "
            f"run `udr score --round {round_} --task {task}` again"
        )
    return manifest, read_score_rows(path, round_, task, columns)


def read_scores(path: Path, round_: int, task: str, columns: list[str] | None = None):
    """The scores of :func:`load_scores` alone."""
    return load_scores(path, round_, task, columns)[1]


# The kinds of a scores file's columns (udr.util.readers.read_parquet_checked).
SCORE_KINDS = {"query_id": "integer", "candidate_id": "integer", "score": "number", "rank": "integer"}


def read_score_rows(path: Path, round_: int, task: str, columns: list[str] | None = None):
    """The rows of a scores file whose checksum the caller has checked against its manifest (polars), every
    score finite, or a one-line UdrError saying to score again."""
    fix = f"run `udr score --round {round_} --task {task}` again"
    frame = read_parquet_checked(path, "scores", columns, kinds=SCORE_KINDS, fix=fix)
    check_finite(frame, f"scores {path}", fix)
    return frame


def check_finite(frame, what: str, fix: str) -> None:
    """A one-line UdrError where `frame`'s score column holds NaN or an infinity."""
    import polars as pl

    if "score" not in frame.columns:
        return
    bad = frame.filter(~pl.col("score").cast(pl.Float64).is_finite() | pl.col("score").is_null())
    if len(bad):
        raise UdrError(f"{what} hold {len(bad)} NaN or infinite score(s) (first: query {bad['query_id'][0]}): {fix}")
