"""The `udr evaluate` stage: in-context learning on each task's test split with one retriever's
demonstrations (:mod:`udr.evaluation.task_evaluation`), for a project's data, models and output files;
and the project's retriever of each method (:func:`build_retriever`), which the instruments share.

Outputs, per method and task:
- ``metrics/<method>/<task>.json``: metric, score, graded score, n, seconds, mean demonstrations and
  prompt tokens, and for the shots plot's tasks and methods the score at each demonstration count;
- ``data/predictions/<method>/<task>.parquet``: id, prediction, gold, the demonstration ids in prompt
  order, prompt tokens: every result can be inspected.

Imports of polars are inside the functions that use them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from udr.config import METHODS, Split
from udr.data.prepare import read_prepared
from udr.errors import UdrError
from udr.evaluation.baselines import BM25Retriever, RandomRetriever, check_method, sbert_retriever
from udr.evaluation.baselines import bi_encoder_retriever as over_pool
from udr.evaluation.task_evaluation import LanguageModel, TaskEvaluation
from udr.lm.models import resolve_model
from udr.paths import Paths, check_name_length
from udr.retriever.encoder import BiEncoder
from udr.retriever.index import load_index, model_fingerprint
from udr.retriever.search import PoolRetriever
from udr.util.distributed import resolve_device_type, resolve_lm_precision
from udr.util.files import file_sha256, write_json_atomic, write_parquet_atomic
from udr.util.progress import progress_bar

# ---------------------------------------------------------------- the project's retrievers and LM


@dataclass(frozen=True)
class MethodModel:
    """The model a learned method reads, and the command that makes it."""

    path: Callable[[Paths], Path]
    made_by: str


# The methods of config.METHODS that read a model (random and BM25 read none).
METHOD_MODELS: dict[str, MethodModel] = {
    "sbert": MethodModel(lambda paths: paths.base_model("encoder"), "udr models"),
    "epr": MethodModel(lambda paths: paths.epr_model, "udr train --epr"),
    "udr": MethodModel(lambda paths: paths.final_model, "udr index"),
}


def build_retriever(
    method: str, settings, task_name: str, pool, *, progress: bool = False, model_dir: Path | None = None
) -> PoolRetriever:
    """The retriever `method` over `pool` (a prepared train frame) of `task_name`; `model_dir`: the
    bi-encoder of epr / udr (default: the pipeline's), whose pool is embedded here where it has no index."""
    check_method(method)
    ids = np.asarray(pool["id"].to_list(), dtype=np.int64)
    if method == "random":
        return RandomRetriever(ids, settings.seed, task_name)
    if method == "bm25":
        return BM25Retriever(ids, pool["input"].to_list())

    model = METHOD_MODELS[method]
    model_dir = Path(model_dir) if model_dir is not None else model.path(settings.paths)
    if not model_dir.is_dir():
        raise UdrError(f"missing model {model_dir}: run `{model.made_by}` first")
    if method == "sbert":
        return sbert_retriever(model_dir, task_name, pool, _device(settings), settings.mine.batch_size, progress)
    # UDR reads its index where `udr index` wrote one; a pool without one (a task added since) is embedded here.
    embeddings = None
    if method == "udr" and Paths.index(model_dir, task_name).is_file():
        pool_sha = file_sha256(settings.paths.prepared(task_name, "train"))
        embeddings = load_index(model_dir, settings.task(task_name), ids, pool_sha)
    return bi_encoder_retriever(BiEncoder.load(model_dir), settings, task_name, pool, embeddings, progress)


def bi_encoder_retriever(encoder, settings, task_name: str, pool, embeddings=None, progress: bool = False):
    """:func:`udr.evaluation.baselines.bi_encoder_retriever` with the project's task, device and batch size."""
    return over_pool(
        encoder, settings.task(task_name), pool, _device(settings), settings.mine.batch_size, embeddings, progress
    )


def _device(settings) -> str:
    return resolve_device_type(settings.evaluate.device, "evaluate.device")


def load_language_model(settings) -> LanguageModel:
    """The inference LM: `evaluate.lm` where set (resolved once, next to the scoring LM), else the
    scoring LM of `udr models`; on `evaluate.device` in `evaluate.dtype`."""
    if settings.evaluate.lm:
        lm_dir = resolve_model(settings.evaluate.lm, settings.paths.base_model("eval_lm"), kind="lm")
    else:
        lm_dir = settings.paths.base_model("lm")
    if not lm_dir.is_dir():
        raise UdrError(f"missing model {lm_dir}: run `udr models` first")
    device_type, dtype = resolve_lm_precision(settings.evaluate.device, settings.evaluate.dtype, "evaluate")
    return LanguageModel.load(lm_dir, device_type, dtype)


def check_prepared_caps(settings, task_name: str, split: str) -> None:
    """A one-line error when the prepared split was cut with another cap than the params' (stale data:
    `udr prepare` has not run since the cap changed)."""
    meta_file = settings.paths.prepared_dir(task_name) / "meta.json"
    if not meta_file.is_file():
        return
    caps = settings.task_caps(task_name)
    key = {"test": "max_test", "validation": "validation"}[split]
    want = getattr(caps, key, None)
    got = json.loads(meta_file.read_text()).get("counts", {}).get(split, {}).get("cap")
    if want is not None and got is not None and want != got:
        raise UdrError(
            f"data/prepared/{task_name} was cut with {key} {got}, the params say {want}: run "
            f"`udr prepare -t {task_name}` first (or `udr evaluate --limit N` for a quick look)"
        )


def task_evaluation(
    settings,
    lm: LanguageModel,
    method: str,
    task_name: str,
    *,
    split: Split = "test",
    progress: bool,
    retriever=None,
    limit: int | None = None,
    model: Path | None = None,
) -> TaskEvaluation:
    """`task_name`'s evaluation on `split` (its first `limit` rows) with `method`'s retriever (`model`:
    that bi-encoder's; `retriever`: an instrument's own ranking, e.g. the LM's oracle order)."""
    pool = read_prepared(settings.root, task_name, "train")
    if split == "validation" and not settings.paths.prepared(task_name, split).is_file():
        raise UdrError(
            f"task {task_name} has no validation split: set prepare.tasks.{task_name}.validation "
            f"to a number of rows and run `udr prepare -t {task_name}`"
        )
    check_prepared_caps(settings, task_name, split)
    rows = read_prepared(settings.root, task_name, split).to_dicts()[:limit]
    if not rows:
        raise UdrError(f"task {task_name} has no {split} rows: nothing to evaluate")
    if retriever is None:
        retriever = build_retriever(method, settings, task_name, pool, progress=progress, model_dir=model)
    task = settings.task(task_name)
    return TaskEvaluation(
        lm,
        method,
        task,
        pool,
        rows,
        retriever,
        settings.evaluate,
        seed=settings.seed,
        instruction=task.instruction if settings.score.instruction == "prefix" else None,
        split=split,
    )


def _write_predictions(path: Path, ev: TaskEvaluation, prompts, texts: list[str]) -> None:
    import polars as pl

    # The texts too (the input, each demonstration's input and output in prompt order): `udr show` reads
    # the file alone, on a clone that has the predictions but not the prepared data.
    frame = pl.DataFrame(
        {
            "id": [int(r["id"]) for r in ev.rows],
            "input": [r["input"] for r in ev.rows],
            "prediction": texts,
            "gold": [r["target"] for r in ev.rows],
            "demo_ids": [list(p.demo_ids) for p in prompts],
            "demo_inputs": [[ev.pool[i][0] for i in p.demo_ids] for p in prompts],
            "demo_outputs": [[ev.pool[i][1] for i in p.demo_ids] for p in prompts],
            "prompt_tokens": [len(p.token_ids) for p in prompts],
        },
        schema_overrides={
            "demo_ids": pl.List(pl.Int64),
            "demo_inputs": pl.List(pl.String),
            "demo_outputs": pl.List(pl.String),
        },
    )
    write_parquet_atomic(frame, path)


def run_evaluate(
    settings,
    method: str,
    *,
    tasks: list[str] | None = None,
    split: Split = "test",
    progress: bool = True,
    limit: int | None = None,
    model: Path | None = None,
    save_as: str | None = None,
) -> dict[str, dict]:
    """`udr evaluate`: in-context learning with `method`'s demonstrations on each task's `split` (test;
    validation: the rows `udr prepare` set aside to choose settings on) for `tasks` (default
    `evaluate.tasks` or every task in params; on validation the unseen tasks are left out). Writes, per task, the result
    (`metrics/<method>/<task>.json`; validation: `metrics/validation/<method>/<task>.json`) and every
    prediction with its demonstration ids (`data/predictions/<method>/<task>.parquet`; validation:
    `data/predictions-validation/...`); returns {task: result}. With `limit`, a quick look: the split's
    first `limit` rows, nothing written; with `model`, that bi-encoder (epr, udr) instead of the
    pipeline's, nothing written either, unless `save_as` names the result (written as the method
    `save_as` would be, for `udr exp compare`)."""
    check_method(method)  # before loading the LM
    if save_as is not None:
        check_saved_name(save_as, settings, split)
        if limit is not None:
            raise UdrError("--save-as and --limit exclude each other: a quick look is not saved")
    if model is not None:
        if method not in ("epr", "udr"):
            raise UdrError(f"--model goes with -m epr or -m udr (a trained bi-encoder), not {method}")
        if not Path(model).is_dir():
            raise UdrError(f"missing model {model}: give a trained udr bi-encoder directory")
    lm = load_language_model(settings)
    if not tasks:
        tasks = settings.evaluation_tasks()
        if split == "validation":  # settings are chosen on the trained-on tasks: unseen ones stay unseen
            tasks = [t for t in tasks if t not in settings.evaluate.unseen_tasks]
    fingerprint = learned_model_fingerprint(settings, method, model)  # once, not per task
    return {
        name: evaluate_task(
            settings,
            lm,
            method,
            name,
            split=split,
            progress=progress,
            limit=limit,
            model=model,
            fingerprint=fingerprint,
            save_as=save_as,
        )
        for name in tasks
    }


def learned_model_fingerprint(settings, method: str, model: Path | None = None) -> str | None:
    """The fingerprint of the bi-encoder an EPR / UDR evaluation reads (`model`, default the pipeline's);
    None for the methods that read none of their own, and where the model is missing (building the
    retriever then says so)."""
    if method not in ("epr", "udr"):
        return None
    model_dir = Path(model) if model is not None else METHOD_MODELS[method].path(settings.paths)
    return model_fingerprint(model_dir) if model_dir.is_dir() else None


def evaluate_task(
    settings,
    lm: LanguageModel,
    method: str,
    name: str,
    *,
    split: Split = "test",
    progress: bool = True,
    retriever=None,
    limit: int | None = None,
    model: Path | None = None,
    fingerprint: str | None = None,
    save_as: str | None = None,
) -> dict:
    """One task of `udr evaluate` (with `retriever`, that ranking under the name `method`; with `model`,
    that bi-encoder's): writes its result and predictions (not with `limit`, the first `limit` rows only, a
    quick look, nor with `model` unless `save_as` names them), returns the result. A learned method's
    result names its model's fingerprint (`model`; `fingerprint` when the caller has it), so a model card
    finds the results of its own model."""
    cfg = settings.evaluate
    start = time.perf_counter()
    ev = task_evaluation(
        settings, lm, method, name, split=split, progress=progress, retriever=retriever, limit=limit, model=model
    )
    with progress_bar(progress) as bar:
        main_demos = None if ev.generation else cfg.max_demos
        result, prompts, texts = ev.run(main_demos, bar, f"{method} on {name}", interval=True)
        shots = {}
        for n in ev.shots() if limit is None else ():
            shot = result if n == main_demos else ev.run(n, bar, f"{method} on {name}, {n} demonstrations")[0]
            shots[str(n)] = _shot_entry(shot)
    result = {
        "method": method,
        "task": name,
        "kind": ev.task.kind,
        "family": ev.task.family,
        **result,
        "retrieval_seconds": round(ev.retrieval_seconds, 2),
        "context": cfg.context,
        "order": cfg.order,
        "total_seconds": round(time.perf_counter() - start, 2),
    }
    if shots:
        result["shots"] = shots
    if cfg.lm:
        result["lm"] = cfg.lm
    if retriever is None and method in ("epr", "udr"):
        result["model"] = fingerprint or learned_model_fingerprint(settings, method, model)
    if save_as is not None:
        result["saved_as"] = save_as
    if limit is None and (model is None or save_as is not None):
        saved = save_as or method
        _write_predictions(settings.paths.predictions(saved, name, split), ev, prompts, texts)
        write_json_atomic(settings.paths.method_metrics(saved, name, split), result)
    return result


# Folders of metrics/ (and metrics/validation/) that are not a method's results.
RESERVED_NAMES = frozenset({"validation", "train", "plots", "feedback", "ceiling"})


def check_saved_name(name: str, settings=None, split: str = "test") -> None:
    """A one-line error, before any work, unless `name` can name a saved evaluation: a plain folder name
    that is not a method's (the pipeline's results are not overwritten), nor another folder of metrics/,
    nor (with `settings`) a file where its result or prediction folder would go (metrics/summary.json)."""
    check_name_length(name, "name")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise UdrError(f"bad name {name!r}: letters, digits, '_', '.' and '-', starting with a letter or digit")
    if name in METHODS or name in RESERVED_NAMES:
        raise UdrError(f"name {name!r} is taken by the pipeline's own results; choose another")
    if settings is not None:
        for folder in (settings.paths.method_metrics(name, "x", split), settings.paths.predictions(name, "x", split)):
            if folder.parent.exists() and not folder.parent.is_dir():
                raise UdrError(f"name {name!r} is taken by the file {folder.parent}; choose another")


def _shot_entry(result: dict) -> dict:
    return {"score": result["score"], "graded": result["graded"]["score"], "demos_mean": result["demos_mean"]}
