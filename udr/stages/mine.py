"""The `udr mine` stage: round N's candidates of a task, mined with round N-1's retriever over the
task's pool for the scored queries and merged with round N-1's candidates
(:func:`udr.retriever.mining.mine_candidates`). Writes data/candidates/round<N>/<task>.parquet and, in
metrics/mine/round<N>/<task>.json, how many mined candidates were new, how much of the previous list was
found again and the time it took (kept out of the candidates' folder, which the next stages depend on).

Imports of the udr modules that load numpy or pydantic are inside the functions that use them, to keep the
start of `udr` and of its commands light.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from udr.errors import UdrError
from udr.util.distributed import resolve_device_type, use_threads
from udr.util.files import write_json_atomic, write_parquet_atomic
from udr.util.readers import read_parquet_checked

if TYPE_CHECKING:
    from udr.config import Settings


@dataclass
class MineSummary:
    task: str
    round: int
    queries: int
    k: int
    mined: int
    new: int
    new_fraction: float
    previous: int
    previous_found_again: float
    candidates: int
    seconds: float


def run_mine(settings: Settings, task_name: str, round_: int, *, progress: bool = True) -> MineSummary:
    """Mine round `round_`'s candidates of a task with the previous round's retriever; write them and
    their summary, and return it."""

    from udr.data.prepare import read_prepared
    from udr.feedback.scores_file import read_manifest
    from udr.retriever.encoder import BiEncoder
    from udr.retriever.mining import mine_candidates

    if round_ < 1:
        raise UdrError("mining starts at round 1 (round 0's candidates come from `udr candidates`)")
    start = time.perf_counter()
    paths = settings.paths
    model_dir = paths.round_model(round_ - 1)
    if not model_dir.is_dir():
        raise UdrError(f"missing model {model_dir}: run `udr train --round {round_ - 1}` first")
    previous_file = paths.candidates(round_ - 1, task_name)
    if not previous_file.is_file():
        raise UdrError(f"missing candidates {previous_file}: run round {round_ - 1} first")

    pool = read_prepared(settings.root, task_name, "train")
    # the queries whose scores round N-1 holds (the same every round)
    scores = paths.scores(round_ - 1, task_name)
    if not scores.is_file():
        raise UdrError(f"missing scores {scores}: run `udr score --round {round_ - 1}` first")
    manifest = read_manifest(scores, round_ - 1, task_name)
    queries = manifest.chosen_queries(settings.score.queries_per_task, settings.seed, scores, pool=len(pool))
    k = min(settings.mine.k, len(pool) - 1)
    if k < 1:
        raise UdrError(f"{task_name}: the pool has {len(pool)} rows, too few to mine from")
    device = resolve_device_type(settings.train.device, "train.device")
    use_threads(settings.train.threads)
    encoder = BiEncoder.load(model_dir).to(device)
    pair = {"query_id": "integer", "candidate_id": "integer"}
    again = f"run round {round_ - 1} again"
    previous = read_parquet_checked(previous_file, "candidates", list(pair), kinds=pair, non_null=list(pair), fix=again)
    mined = mine_candidates(
        encoder, settings.task(task_name), pool, queries, previous, k, settings.mine.batch_size, device, progress
    )

    out = paths.candidates(round_, task_name)
    write_parquet_atomic(mined.frame, out)
    summary = MineSummary(
        task_name,
        round_,
        len(queries),
        k,
        mined.mined,
        mined.new,
        round(mined.new / max(mined.mined, 1), 4),
        mined.previous,
        round(mined.found_again / max(mined.previous, 1), 4),
        len(mined.frame),
        round(time.perf_counter() - start, 2),
    )
    write_json_atomic(paths.mine_report(round_, task_name), asdict(summary))
    return summary
