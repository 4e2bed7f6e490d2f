"""The `udr score` stage: a round's candidate pairs of a task's scored queries, the shipped feedback and
earlier runs reused, the rest scored (:mod:`udr.feedback.pair_scoring`: resumable shards, torchrun
scale-out, the output file).

Output `data/scores/round<N>/<task>.parquet`: query_id, candidate_id, score, rank (1 = most helpful;
ties broken by lower candidate id), scored_in (the round that computed the score), with its manifest
beside (`.json`, :mod:`udr.feedback.scores_file`: the scored queries, what the scores depend on, the
checksum); counts, time and throughput go to `metrics/score/round<N>/<task>.json`.

Steps: load (the round's pairs, :func:`udr.project.scoring.load_work`), reuse (the shipped feedback's pairs
after a sample of them agrees, :func:`udr.feedback.shipped.take_shipped`, else an earlier run's,
:func:`reuse_earlier_run`), run and write (:func:`udr.feedback.pair_scoring.score_work`).

Imports of polars are inside the functions that use them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from udr.errors import UdrError
from udr.feedback.pair_scoring import ScoreSummary, ScoreWork, ScoringSetup, score_inputs, score_work
from udr.feedback.scores_file import load_scores
from udr.feedback.shipped import take_shipped
from udr.project.scoring import load_work, scoring_setup
from udr.util.distributed import resolve_lm_precision
from udr.util.notice import notice
from udr.util.resume import finish_publishing, partial_dir

if TYPE_CHECKING:
    from udr.config import Settings


def run_score(
    settings: Settings, task_name: str, round_: int, *, progress: bool = True, stop_after_shards: int | None = None
) -> ScoreSummary | None:
    """`udr score`: the LM's score of every candidate pair of `task_name`'s scored queries in round
    `round_` (pairs scored in the round before are reused), written to `data/scores/round<N>/<task>.parquet`
    with its manifest, and the run's report to `metrics/score/`. Resumes from finished shards; under
    torchrun every process scores its share. Returns the summary (None on ranks other than 0, or when
    `stop_after_shards` ended the run early, which tests use to simulate a kill)."""
    start = time.perf_counter()
    setup = scoring_setup(settings)
    work = load_work(settings, task_name, round_)
    out = settings.paths.scores(round_, task_name)
    finish_publishing(partial_dir(out))  # the output a kill left staged: reused below like any earlier run's
    # Shipped feedback first, so that its sample is checked on every run; the rest from an earlier run.
    label = (Path(settings.score.shipped) / f"{task_name}.parquet").as_posix()
    work, sample, not_taken = take_shipped(work, shipped_file(settings, task_name), label, setup)
    if sample is None:
        todo = len(work.todo)
        work = reuse_earlier_run(setup, work, out)
        if not_taken:
            notice(f"{not_taken}: {_instead(todo, len(work.todo))}")
    return score_work(
        setup,
        work,
        out,
        report=settings.paths.score_report(round_, task_name),
        start=start,
        progress=progress,
        stop_after_shards=stop_after_shards,
        sample=sample,
    )


def _instead(todo: int, left: int) -> str:
    """What a run does with its `todo` pairs where no shipped feedback is taken, `left` of them not in an
    earlier run's output."""
    if left == todo:
        return f"scoring its {todo} pairs here"
    if left == 0:
        return f"reusing all {todo} of its pairs from an earlier run's output of the same inputs"
    return f"scoring {left} of its {todo} pairs here, the rest reused from an earlier run's output"


def shipped_file(settings: Settings, task: str) -> Path:
    """Where `task`'s shipped round-0 scores would be (`score.shipped`, relative to the params file's folder)."""
    folder = Path(settings.score.shipped)
    return (folder if folder.is_absolute() else settings.root / folder) / f"{task}.parquet"


def reuse_earlier_run(setup: ScoringSetup, work: ScoreWork, out: Path) -> ScoreWork:
    """Pairs an earlier run of the same round already wrote to `out` with the same inputs (e.g. before
    `score.queries_per_task` grew: a larger number keeps the smaller one's queries) join the reused ones."""
    import polars as pl

    if not out.is_file():
        return work
    _, dtype = resolve_lm_precision(setup.score.device, setup.score.dtype, "score")
    try:  # no manifest, or a file changed since, or holding NaN: scored again
        manifest, earlier = load_scores(out, work.round, work.task.name, list(work.reused.columns))
    except UdrError:
        return work
    if manifest.inputs_hash != score_inputs(work, setup.score, setup.lm_dir, dtype):
        return work
    if manifest.taken_from and not setup.score.reuse_shipped:
        return work  # scores taken from shipped feedback, where every pair is to be scored here
    earlier = earlier.cast(work.reused.schema).join(work.todo, on=["query_id", "candidate_id"], how="semi")
    reused = pl.concat([work.reused, earlier])
    todo = work.todo.join(earlier, on=["query_id", "candidate_id"], how="anti").sort(["candidate_id", "query_id"])
    return replace(work, reused=reused, todo=todo, taken_from=manifest.taken_from)
