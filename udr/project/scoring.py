"""A project's scoring work, as `udr score` (:mod:`udr.stages.score`), the `udr exp` instruments, the benchmarks
and the tools read it: the scoring setup of its settings, and a round's candidate pairs of a task's scored
queries, split into those reused from the round before and those to score.

Imports of polars are inside the functions that use them, to keep the start of `udr` light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from udr.data.prepare import read_prepared
from udr.errors import UdrError
from udr.feedback.pair_scoring import ScoreWork, ScoringSetup
from udr.feedback.scores_file import query_choice, read_scores
from udr.util.readers import read_parquet_checked

if TYPE_CHECKING:
    from udr.config import Settings


def scoring_setup(settings: Settings) -> ScoringSetup:
    """The project's score settings, resolved LM and seed, as :mod:`udr.feedback.pair_scoring` takes them."""
    return ScoringSetup(score=settings.score, lm_dir=settings.paths.base_model("lm"), seed=settings.seed)


def load_work(settings: Settings, task_name: str, round_: int) -> ScoreWork:
    """`udr score`'s step 1: the round's candidate pairs of the scored queries, split into reused and to-do."""
    import polars as pl

    paths = settings.paths
    train = read_prepared(settings.root, task_name, "train")
    cand_file = paths.candidates(round_, task_name)
    if not cand_file.is_file():
        step = "udr candidates" if round_ == 0 else f"udr mine --round {round_}"
        raise UdrError(f"missing candidates {cand_file}: run `{step}` first")
    pair = {"query_id": "integer", "candidate_id": "integer"}
    again = "run `udr candidates` again" if round_ == 0 else f"run `udr mine --round {round_}` again"
    cands = read_parquet_checked(cand_file, "candidates", list(pair), kinds=pair, non_null=list(pair), fix=again)
    known = set(train["id"].to_list())
    unknown = sorted((set(cands["query_id"].to_list()) | set(cands["candidate_id"].to_list())) - known)
    if unknown:
        raise UdrError(
            f"{cand_file} names {len(unknown)} id(s) not in the prepared train split of "
            f"{task_name} (first: {unknown[:5]}); re-run `udr candidates` after `udr prepare`"
        )
    # the first queries_per_task of the seeded choice, in its order (the manifest's)
    queries = query_choice(np.asarray(train["id"].to_list()), settings.seed, task_name)[
        : settings.score.queries_per_task
    ]
    pairs = cands.filter(pl.col("query_id").is_in(queries.tolist())).unique().sort(["query_id", "candidate_id"])
    reused = pl.DataFrame(
        schema={"query_id": pl.Int64, "candidate_id": pl.Int64, "score": pl.Float64, "scored_in": pl.Int16}
    )
    if round_ > 0:
        previous = paths.scores(round_ - 1, task_name)
        if not previous.is_file():
            raise UdrError(f"missing scores of round {round_ - 1}: {previous}; run it first")
        old = read_scores(previous, round_ - 1, task_name, ["query_id", "candidate_id", "score", "scored_in"])
        reused = pairs.join(old, on=["query_id", "candidate_id"], how="inner").select(reused.columns)
    # Candidate order: a shard then holds each candidate's pairs together (its prefix runs once).
    todo = pairs.join(reused, on=["query_id", "candidate_id"], how="anti").sort(["candidate_id", "query_id"])
    return ScoreWork(
        task=settings.task(task_name),
        round=round_,
        train=train,
        train_file=paths.prepared(task_name, "train"),
        candidates_file=cand_file,
        queries=queries,
        reused=reused,
        todo=todo,
        seed=settings.seed,
    )
