"""Two instruments on validation that say what this LM's feedback can give a retriever, and how much of
it a retriever has learned (`udr exp ceiling`, `udr exp agreement`).

Both read the same oracle scores. Each validation query of a trained task gets the top `n` candidates
of BM25 ∪ SBERT over its task's pool (the two rankings interleaved, duplicates dropped), and the LM scores
every pair with the feedback score s(z) of :mod:`udr.feedback.scoring`, which sees the gold answer;
scoring resumes from its shards like `udr score`.

- **The ceiling** evaluates in-context learning with the LM's own best candidates: for classification
  the 8 best, in ascending order; for generation, as many as fit. It stands for a retriever that
  learned this LM's feedback perfectly, among those candidates. If it is not well above BM25, more of
  this feedback cannot lift UDR there.
- **Agreement** compares how a retriever orders the same candidates with how the LM does. It reports
  NDCG@8, with the LM's scores min-max scaled within each query as gains, and top-1 agreement (the
  retriever's first is the LM's first). For queries never trained on, this says whether training
  learned the LM's preferences beyond the queries it saw. The random retriever gives the chance level.

Imports of polars and of the udr.project.evaluation, udr.evaluation, udr.retriever and udr.util.schemas modules
(pydantic, torch) are inside the functions that use them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from udr.data.prepare import read_prepared
from udr.errors import UdrError
from udr.project.saved_evaluations import saved_comparison
from udr.retriever.search import Ranking
from udr.util.distributed import resolve_lm_precision
from udr.util.files import file_sha256, write_json_atomic, write_parquet_atomic, write_text_atomic
from udr.util.resume import finish_publishing, partial_dir

if TYPE_CHECKING:
    from udr.config import Settings

SOURCES = ("bm25", "sbert")  # the retrievers whose union gives each validation query its candidates
CEILING = "ceiling"  # the ceiling's method name in metrics/validation/ and data/predictions-validation/
COMPARED = ("bm25", "sbert", "epr", "udr")  # beside the ceiling
AGREEMENT_AT = 8  # NDCG@8: the demonstrations a classification prompt takes
CANDIDATES = 32


def interleave(rankings: Sequence[Sequence[int]], n: int) -> list[int]:
    """Round-robin over the rankings (best first), each id once, until n ids (or all of them)."""
    out: list[int] = []
    seen: set[int] = set()
    for position in range(max((len(r) for r in rankings), default=0)):
        for ranking in rankings:
            if position < len(ranking) and int(ranking[position]) not in seen:
                seen.add(int(ranking[position]))
                out.append(int(ranking[position]))
                if len(out) == n:
                    return out
    return out


def _validation(settings: Settings, task_name: str):
    if task_name not in settings.task_names():
        raise UdrError(f"task {task_name} is not trained on (prepare.tasks): the instruments read its LM feedback")
    path = settings.paths.prepared(task_name, "validation")
    if not path.is_file():
        raise UdrError(
            f"task {task_name} has no validation split: set prepare.tasks.{task_name}.validation "
            f"to a number of rows and run `udr prepare -t {task_name}`"
        )
    pool = read_prepared(settings.root, task_name, "train")
    rows = read_prepared(settings.root, task_name, "validation")
    if not len(rows):
        raise UdrError(f"task {task_name} has no validation rows")
    if set(rows["id"].to_list()) & set(pool["id"].to_list()):
        raise UdrError(f"task {task_name}: validation ids overlap the pool's; re-run `udr prepare -t {task_name}`")
    return pool, rows


def oracle_candidates(settings: Settings, task_name: str, pool, rows, n: int = CANDIDATES, *, progress: bool = False):
    """Each validation query (`rows`)'s top `n` of BM25 ∪ SBERT over `pool` (query_id, candidate_id, position)."""
    import polars as pl

    from udr.project.evaluation import method_retriever

    n = min(n, len(pool))
    queries = rows["input"].to_list()
    rankings = [method_retriever(settings, m, task_name, pool, progress=progress).rank(queries, n).ids for m in SOURCES]
    q_ids, c_ids, positions = [], [], []
    for i, q in enumerate(rows["id"].to_list()):
        merged = interleave([r[i] for r in rankings], n)
        q_ids += [int(q)] * len(merged)
        c_ids += merged
        positions += list(range(len(merged)))
    schema = {"query_id": pl.Int64, "candidate_id": pl.Int64, "position": pl.Int32}
    return pl.DataFrame({"query_id": q_ids, "candidate_id": c_ids, "position": positions}, schema=schema)


def oracle_scores(settings: Settings, task_name: str, pool, rows, n: int = CANDIDATES, *, progress: bool = True):
    """The LM's feedback score of every validation query's candidates (query_id, candidate_id, score,
    rank), at `data/oracle/<task>.parquet`: read if it was scored from the same inputs (the pairs' inputs
    as `udr score` hashes them, and the validation split), else scored (resumable). `pool` and `rows`:
    the task's prepared train and validation splits."""
    import polars as pl

    from udr.feedback.pair_scoring import ScoreWork, score_inputs, score_work
    from udr.project.scoring import scoring_setup

    out = settings.paths.oracle(task_name)
    cands_file = out.with_suffix(".candidates.parquet")
    cands = oracle_candidates(settings, task_name, pool, rows, n, progress=progress)
    if not (cands_file.is_file() and pl.read_parquet(cands_file).equals(cands)):
        write_parquet_atomic(cands, cands_file)
    reused = pl.DataFrame(
        schema={"query_id": pl.Int64, "candidate_id": pl.Int64, "score": pl.Float64, "scored_in": pl.Int16}
    )
    work = ScoreWork(
        task=settings.task(task_name),
        round=0,
        train=pl.concat([pool, rows], how="vertical_relaxed"),
        train_file=settings.paths.prepared(task_name, "train"),
        candidates_file=cands_file,
        queries=np.asarray(rows["id"].to_list(), dtype=np.int64),
        reused=reused,
        todo=cands.select("query_id", "candidate_id").sort(["candidate_id", "query_id"]),
    )
    depends_on = {"instrument": "oracle", "validation": file_sha256(settings.paths.prepared(task_name, "validation"))}
    _, dtype = resolve_lm_precision(settings.score.device, settings.score.dtype, "score")
    setup = scoring_setup(settings)
    wanted = {"inputs": score_inputs(work, setup.score, setup.lm_dir, dtype), **depends_on}
    manifest = out.with_suffix(".manifest.json")
    finish_publishing(partial_dir(out))
    if out.is_file() and manifest.is_file() and json.loads(manifest.read_text()) == wanted:
        return pl.read_parquet(out)
    companions = {manifest: wanted}
    if score_work(setup, work, out, depends_on=depends_on, progress=progress, companions=companions) is None:
        raise UdrError("oracle scoring runs in one process (not under torchrun)")
    return pl.read_parquet(out)


# ---------------------------------------------------------------- the ceiling


class FixedRanking:
    """A ranking made beforehand for a known list of queries (in that order): the LM's oracle order."""

    def __init__(self, queries: Sequence[str], ids: np.ndarray):
        self.queries, self.ids = list(queries), np.asarray(ids, dtype=np.int64)

    def rank(self, queries, k, exclude=None) -> Ranking:
        if list(queries) != self.queries:
            raise UdrError("a fixed ranking was asked for other queries than it was made for")
        if not 1 <= k <= self.ids.shape[1]:
            raise UdrError(f"k out of range: {k} asked, {self.ids.shape[1]} ranked per query")
        return Ranking(self.ids[:, :k], np.zeros((len(self.ids), k), dtype=np.float32))


def lm_order(scores, rows) -> np.ndarray:
    """Each validation row's candidates, the LM's best first (rows x n)."""
    by_query = {
        q: ids
        for q, ids in scores.sort(["query_id", "rank"])
        .group_by("query_id", maintain_order=True)
        .agg("candidate_id")
        .iter_rows()
    }
    missing = [q for q in rows["id"].to_list() if q not in by_query]
    if missing:
        raise UdrError(f"oracle scores miss validation queries {missing[:5]}: run the scoring again")
    lengths = {len(by_query[q]) for q in rows["id"].to_list()}
    if len(lengths) != 1:
        raise UdrError("oracle scores: validation queries have different numbers of candidates")
    return np.asarray([by_query[q] for q in rows["id"].to_list()], dtype=np.int64)


def run_ceiling(
    settings: Settings,
    tasks: Sequence[str] | None = None,
    n: int = CANDIDATES,
    *,
    rerun: bool = False,
    progress: bool = True,
) -> Path:
    """Score the oracle candidates, evaluate the ceiling and (where missing or older than their model)
    BM25, SBERT, EPR and UDR on validation; write `metrics/ceiling.md` and `.json`."""
    from udr.project.evaluation import language_model

    tasks = list(tasks or settings.task_names())
    splits = {t: _validation(settings, t) for t in tasks}  # every task checked before the LM loads
    lm = language_model(settings)
    for t in tasks:
        pool, rows = splits[t]
        scores = oracle_scores(settings, t, pool, rows, n, progress=progress)
        retriever = FixedRanking(rows["input"].to_list(), lm_order(scores, rows))
        evaluate_validation(settings, lm, CEILING, t, pool, rows, progress=progress, retriever=retriever)
        for m in COMPARED:
            if rerun or not _fresh(settings, m, t):
                evaluate_validation(settings, lm, m, t, pool, rows, progress=progress)
    return write_ceiling_table(settings, tasks, n)


def evaluate_validation(
    settings: Settings, lm, method: str, task: str, pool, rows, *, progress: bool, retriever=None
) -> dict:
    """`method`'s evaluation of `task`'s validation `rows` with demonstrations from `pool` (`retriever`: a
    ranking of one's own, e.g. the LM's oracle order, else the method's), written where `udr evaluate
    --split validation` writes it; returns the result."""
    from udr.evaluation.task_evaluation import evaluate_task
    from udr.project.evaluation import (
        check_prepared_caps,
        evaluation_setup,
        learned_model_fingerprint,
        method_retriever,
        result_files,
    )

    start = time.perf_counter()
    check_prepared_caps(settings, task, "validation")
    fingerprint = None
    if retriever is None:
        retriever = method_retriever(settings, method, task, pool, progress=progress)
        fingerprint = learned_model_fingerprint(settings, method, task)
    return evaluate_task(
        lm,
        method,
        settings.task(task),
        pool,
        rows.to_dicts(),
        retriever,
        evaluation_setup(settings),
        split="validation",
        progress=progress,
        fingerprint=fingerprint,
        write_to=result_files(settings, method, task, "validation"),
        started=start,
    )


def _fresh(settings: Settings, method: str, task: str) -> bool:
    """Whether `method`'s validation result on `task` is newer than its model and the prepared data."""
    result = settings.paths.method_metrics(method, task, "validation")
    if not result.is_file() or not settings.paths.predictions(method, task, "validation").is_file():
        return False
    deps = [settings.paths.prepared(task, "train"), settings.paths.prepared(task, "validation")]
    model = settings.paths.method_model(method)
    if model is not None and model.is_dir():
        from udr.retriever.encoder import task_model_dir

        try:
            model = task_model_dir(model, task)  # the bi-encoder that serves the task (per-task: its own)
        except UdrError:
            return False  # no model of the task: evaluating it says so
        deps += [p for p in model.rglob("*") if p.is_file()]
    return all(result.stat().st_mtime >= p.stat().st_mtime for p in deps if p.exists())


def validation_comparison(settings: Settings, a: str, b: str, tasks: Sequence[str]):
    """(per-task Intervals, average Interval) of a - b on the validation split, paired bootstrap."""
    return saved_comparison(settings, a, b, tasks, "validation")


def write_ceiling_table(settings: Settings, tasks: Sequence[str], n: int = CANDIDATES) -> Path:
    from udr.util.schemas import EvaluationResult, read_model

    methods = [CEILING, *COMPARED]
    again = "run the instrument again"
    results = {
        m: {
            t: read_model(settings.paths.method_metrics(m, t, "validation"), EvaluationResult, "result", again)
            for t in tasks
        }
        for m in methods
    }
    graded = {m: {t: r.graded.score for t, r in by_task.items()} for m, by_task in results.items()}
    sizes = {t: results[CEILING][t].n for t in tasks}
    pairs = [(CEILING, "bm25"), ("udr", "bm25"), (CEILING, "udr")]
    intervals = {f"{a} - {b}": validation_comparison(settings, a, b, tasks) for a, b in pairs}

    head = ["task", "n", *methods, *intervals]
    lines = ["| " + " | ".join(head) + " |", "| --- | " + " | ".join("---:" for _ in head[1:]) + " |"]
    for j, t in enumerate(tasks):
        values = [f"{graded[m][t]:.1f}" for m in methods] + [v[0][j].markdown() for v in intervals.values()]
        lines.append(f"| {t} | {sizes[t]} | " + " | ".join(values) + " |")
    means = [f"{np.mean([graded[m][t] for t in tasks]):.1f}" for m in methods]
    lines.append("| **average** |  | " + " | ".join(means + [v[1].markdown() for v in intervals.values()]) + " |")
    out = settings.paths.analysis("ceiling")
    write_text_atomic(
        out,
        "# The ceiling of this LM's feedback (validation)\n\n"
        f"For each validation query the LM ({settings.models.lm}) scores its top {n} candidates of BM25 ∪ SBERT "
        "with the feedback score s(z) it gives in training (it sees the gold answer); the ceiling prompts with "
        "its best ones, most helpful last (ascending), as a retriever that learned this feedback perfectly "
        "would. Graded metric, percent, on each task's validation split; differences with their paired "
        f"bootstrap 95% interval ({'**bold**'}: resolved). Made by `udr exp ceiling`.\n\n" + "\n".join(lines) + "\n",
    )
    write_json_atomic(
        out.with_suffix(".json"),
        {
            "candidates": n,
            "lm": settings.models.lm,
            "n": sizes,
            "graded": graded,
            "intervals": {
                k: {"tasks": {t: iv.to_dict() for t, iv in zip(tasks, v[0])}, "average": v[1].to_dict()}
                for k, v in intervals.items()
            },
        },
    )
    return out


# ---------------------------------------------------------------- agreement


def ndcg(gains_in_order: Sequence[float], all_gains: Sequence[float], k: int) -> float:
    """NDCG@k of a ranking whose items have `gains_in_order` (the ranking's order), against the best
    order of `all_gains`; 1.0 when every gain is 0 (any order is ideal)."""
    discounts = 1.0 / np.log2(np.arange(2, k + 2))
    got = np.asarray(gains_in_order[:k], dtype=np.float64)
    best = np.sort(np.asarray(all_gains, dtype=np.float64))[::-1][:k]
    ideal = float(best @ discounts[: len(best)])
    return float(got @ discounts[: len(got)]) / ideal if ideal > 0 else 1.0


def agreement_of(order: Sequence[int], lm_scores: dict[int, float], k: int = AGREEMENT_AT) -> tuple[float, bool]:
    """(NDCG@k, top-1 agreement) of a retriever's `order` of a query's candidates against the LM's
    scores of them (gains: min-max scaled within the query)."""
    values = np.asarray(list(lm_scores.values()), dtype=np.float64)
    low, high = float(values.min()), float(values.max())
    span = high - low

    def gain(c: int) -> float:
        return (lm_scores[c] - low) / span if span > 0 else 0.0

    best = max(lm_scores, key=lambda c: (lm_scores[c], -c))  # ties: the lower id, as `rank` breaks them
    return ndcg([gain(c) for c in order], [gain(c) for c in lm_scores], k), int(order[0]) == best


def candidate_order(ranking_ids: np.ndarray, candidates: Sequence[int]) -> list[int]:
    """`candidates` in the order a full pool ranking puts them."""
    where = {int(c): p for p, c in enumerate(ranking_ids)}
    if any(int(c) not in where for c in candidates):
        raise UdrError("a candidate is not in the retriever's ranking of the pool")
    return sorted((int(c) for c in candidates), key=lambda c: where[c])


def retriever_agreement(retriever, rows, scores, k: int = AGREEMENT_AT) -> dict:
    """Mean NDCG@k and top-1 agreement of one retriever over a task's validation queries."""
    by_query: dict[int, dict[int, float]] = {}
    for q, c, s in scores.select("query_id", "candidate_id", "score").iter_rows():
        by_query.setdefault(int(q), {})[int(c)] = float(s)
    full = retriever.rank(rows["input"].to_list(), len(retriever.pool_ids)).ids
    values = [
        agreement_of(candidate_order(full[i], list(by_query[int(q)])), by_query[int(q)], k)
        for i, q in enumerate(rows["id"].to_list())
    ]
    return {
        "ndcg": float(np.mean([v[0] for v in values])),
        "top1": float(np.mean([v[1] for v in values])),
        "n": len(values),
    }


def run_agreement(
    settings: Settings,
    models: dict[str, Path] | None = None,
    tasks: Sequence[str] | None = None,
    n: int = CANDIDATES,
    *,
    progress: bool = True,
) -> Path:
    """NDCG@8 and top-1 agreement with the LM for random, BM25, SBERT, the initial encoder, EPR, UDR
    (where trained) and `models` ({label: model dir}); writes `metrics/agreement.md` and `.json`."""
    tasks = list(tasks or settings.task_names())
    for label, path in (models or {}).items():
        if label in AGREEMENT_RETRIEVERS:
            raise UdrError(
                f"--model label {label!r} is the pipeline's own row ({', '.join(AGREEMENT_RETRIEVERS)}): choose another"
            )
        if not Path(path).is_dir():
            raise UdrError(f"missing model {path} (for {label})")
    table: dict[str, dict[str, dict]] = {}
    for t in tasks:
        pool, rows = _validation(settings, t)
        scores = oracle_scores(settings, t, pool, rows, n, progress=progress)
        retrievers = _retrievers(settings, t, pool, models or {}, progress)
        for label, make in retrievers.items():
            table.setdefault(label, {})[t] = retriever_agreement(make(), rows, scores)
    return write_agreement_table(settings, table, tasks, n, models or {})


# The rows run_agreement always has (epr and udr where trained): a --model label may not replace one.
AGREEMENT_RETRIEVERS = ("random", "bm25", "sbert", "initial encoder", "epr", "udr")


def _retrievers(settings: Settings, task: str, pool, models: dict, progress: bool) -> dict:
    """{label: a function building that retriever over `pool`}: random, BM25, SBERT, the initial encoder,
    EPR and UDR where trained, then `models`."""
    from udr.evaluation.baselines import bi_encoder_retriever
    from udr.project.evaluation import method_retriever, retriever_setup
    from udr.retriever.encoder import BiEncoder
    from udr.retriever.initial import initial_bi_encoder

    def method(m: str):
        return lambda: method_retriever(settings, m, task, pool, progress=progress)

    def over_pool(encoder):
        setup = retriever_setup(settings)
        return bi_encoder_retriever(encoder, settings.task(task), pool, setup.device, setup.batch_size)

    def model(path: Path):
        return lambda: over_pool(BiEncoder.load(Path(path)))

    def initial_encoder():
        base = settings.paths.base_model("encoder")
        if not base.is_dir():
            raise UdrError(f"missing model {base}: run `udr models` first")
        base_spec, shared = str(settings.models.encoder), settings.train.shared_encoder
        return over_pool(initial_bi_encoder(base, settings.encoder, base_spec=base_spec, shared=shared))

    out = {m: method(m) for m in ("random", "bm25", "sbert")}
    out["initial encoder"] = initial_encoder
    out.update({m: method(m) for m in ("epr", "udr") if settings.paths.method_model(m).is_dir()})
    out.update({label: model(path) for label, path in models.items()})
    return out


def recorded_model_path(path: Path, root: Path) -> str:
    """A model folder as the agreement table records it: relative to the project `root` where it lies
    inside it, else its folder's last two path parts (e.g. `models/udr512`); never a machine path."""
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        tail = resolved.parts[1:][-2:]  # parts[0] is the anchor, `/`
        return Path(*tail).as_posix() if tail else "."


def write_agreement_table(settings: Settings, table: dict, tasks: Sequence[str], n: int, models: dict) -> Path:
    head = ["retriever", *tasks, "average"]
    sizes = {t: next(iter(table.values()))[t]["n"] for t in tasks}
    lines = []
    for metric, title in (("ndcg", f"NDCG@{AGREEMENT_AT}"), ("top1", "top-1 agreement")):
        lines += [
            f"## {title}",
            "",
            "| " + " | ".join(head) + " |",
            "| --- | " + " | ".join("---:" for _ in head[1:]) + " |",
        ]
        lines.append("| n (validation queries) | " + " | ".join(str(sizes[t]) for t in tasks) + " |  |")
        for label, per_task in table.items():
            values = [per_task[t][metric] for t in tasks]
            lines.append(f"| {label} | " + " | ".join(f"{v:.3f}" for v in values) + f" | {np.mean(values):.3f} |")
        lines.append("")
    extra = "".join(
        f"\n- {label}: `{recorded_model_path(path, settings.paths.root)}`" for label, path in models.items()
    )
    out = settings.paths.analysis("agreement")
    write_text_atomic(
        out,
        "# Agreement with the LM's feedback (validation)\n\n"
        f"How each retriever orders every validation query's top {n} candidates of BM25 ∪ SBERT, against the "
        f"LM's ({settings.models.lm}) feedback scores of them: NDCG@{AGREEMENT_AT} with the LM's scores, min-max "
        "scaled within each query, as gains, and the share of queries where the retriever's first candidate is "
        "the LM's first. Validation queries are never trained on, so a trained retriever above the initial "
        "encoder has learned the LM's preferences beyond the queries it saw; random is the chance level. "
        f"Made by `udr exp agreement`.{extra}\n\n" + "\n".join(lines),
    )
    write_json_atomic(out.with_suffix(".json"), {"candidates": n, "lm": settings.models.lm, "retrievers": table})
    return out
