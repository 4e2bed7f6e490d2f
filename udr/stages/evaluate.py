"""The `udr evaluate` stage: in-context learning on each task's test split with one retriever's
demonstrations, for a project's data, models and output files. Steps per task: load (the pool and the
evaluated rows, checked current: :func:`udr.project.evaluation.load_evaluated_task`), build (the method's retriever over
the pool, :func:`udr.project.evaluation.method_retriever`), run and write
(:func:`udr.evaluation.task_evaluation.evaluate_task`).

Outputs, per method and task:
- ``metrics/<method>/<task>.json``: metric, score, graded score, n, seconds, mean demonstrations and
  prompt tokens, and for the shots plot's tasks and methods the score at each demonstration count;
- ``data/predictions/<method>/<task>.parquet``: id, prediction, gold, the demonstration ids in prompt
  order, prompt tokens: every result can be inspected.

``-m encoder:SPEC`` (any encoder folder or hub id, :func:`udr.evaluation.baselines.load_encoder_method`)
writes under its --save-as name, or its folder's, as a named evaluation does.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import astuple
from pathlib import Path
from typing import TYPE_CHECKING

from udr.config import Split
from udr.errors import UdrError
from udr.evaluation.baselines import (
    EncoderMethod,
    check_method,
    encoder_retriever,
    encoder_spec,
    load_encoder_method,
)
from udr.evaluation.saved_names import check_saved_name, encoder_saved_name
from udr.evaluation.task_evaluation import LanguageModel, evaluate_task
from udr.paths import BI_ENCODER_METHODS, split_labelled
from udr.project.evaluation import (
    evaluation_setup,
    language_model,
    learned_model_fingerprint,
    load_evaluated_task,
    method_retriever,
    result_files,
    retriever_setup,
)
from udr.util.locks import holding

if TYPE_CHECKING:
    from udr.config import Settings


def run_evaluate(
    settings: Settings,
    method: str,
    *,
    tasks: list[str] | None = None,
    split: Split = "test",
    progress: bool = True,
    limit: int | None = None,
    model: Path | None = None,
    save_as: str | None = None,
    instruction: bool = False,
) -> dict[str, dict]:
    """`udr evaluate`: in-context learning with `method`'s demonstrations on each task's `split` (test;
    validation: the rows `udr prepare` set aside to choose settings on) for `tasks` (default
    `evaluate.tasks` or every task in params; on validation the unseen tasks are left out). Writes, per task, the result
    (`metrics/<method>/<task>.json`; validation: `metrics/validation/<method>/<task>.json`) and every
    prediction with its demonstration ids (`data/predictions/<method>/<task>.parquet`; validation:
    `data/predictions-validation/...`); returns {task: result}. With `limit`, a quick look: the split's
    first `limit` rows, nothing written; with `model`, that bi-encoder (epr, udr) instead of the
    pipeline's, nothing written either, unless `save_as` names the result (written as the method
    `save_as` would be, for `udr exp compare`). `encoder:SPEC`: that encoder (a folder or hub id) as a
    dense retriever, saved as `save_as` or its folder's name; `instruction`: the task instruction leads
    its texts."""
    check_method(method)  # before loading the LM
    spec = encoder_spec(method)
    if instruction and spec is None:
        raise UdrError(f"--instruction goes with -m encoder:FOLDER, not {method}")
    if spec is not None and save_as is None and limit is None:
        save_as = encoder_saved_name(spec, lambda n: astuple(result_files(settings, n, "x", split)))
    if save_as is not None:
        files = result_files(settings, save_as, "x", split)
        check_saved_name(save_as, (files.result, files.predictions))
        if limit is not None:
            raise UdrError("--save-as and --limit exclude each other: a quick look is not saved")
    if model is not None:
        if split_labelled(method)[0] not in BI_ENCODER_METHODS:
            known = ", ".join(f"-m {m}" for m in BI_ENCODER_METHODS)
            raise UdrError(f"--model goes with a trained bi-encoder's method ({known}), not {method}")
        if not Path(model).is_dir():
            raise UdrError(f"missing model {model}: give a trained udr bi-encoder directory")
    if not tasks:
        # the pipeline's per-task EPR has no model of a task it never trained on; a --model may serve them all
        tasks = settings.method_tasks(method) if model is None else settings.evaluation_tasks()
        if split == "validation":  # settings are chosen on the trained-on tasks: unseen ones stay unseen
            tasks = [t for t in tasks if t not in settings.evaluate.unseen_tasks]
    with contextlib.ExitStack() as locks:  # each result written is this process's alone, before any work
        if limit is None and (model is None or save_as is not None):
            for name in tasks:
                locks.enter_context(holding(result_files(settings, save_as or method, name, split).result, "result"))
        encoder = load_encoder_method(spec, instruction) if spec is not None else None
        lm = language_model(settings)
        return {
            name: evaluate_project_task(
                settings,
                lm,
                method,
                name,
                split=split,
                progress=progress,
                limit=limit,
                model=model,
                save_as=save_as,
                encoder=encoder,
            )
            for name in tasks
        }


def evaluate_project_task(
    settings: Settings,
    lm: LanguageModel,
    method: str,
    name: str,
    *,
    split: Split = "test",
    progress: bool = True,
    limit: int | None = None,
    model: Path | None = None,
    save_as: str | None = None,
    encoder: EncoderMethod | None = None,
) -> dict:
    """One task of `udr evaluate` (with `model`, that bi-encoder's; with `encoder`, that encoder's): writes
    its result and predictions (not with `limit`, the first `limit` rows only, a quick look, nor with `model`
    unless `save_as` names them),
    returns the result. A learned method's result names its model's fingerprint (of `model`, or of the task's
    model in a folder of per-task models), so a model card finds the results of its own model."""
    start = time.perf_counter()
    pool, rows = load_evaluated_task(settings, name, split, limit)
    if encoder is not None:
        retriever = encoder_retriever(encoder, settings.task(name), pool, retriever_setup(settings), progress)
    else:
        retriever = method_retriever(settings, method, name, pool, progress=progress, model_dir=model)
    fingerprint = learned_model_fingerprint(settings, method, name, model)
    saved = limit is None and (model is None or save_as is not None)
    return evaluate_task(
        lm,
        "encoder" if encoder is not None else method,
        settings.task(name),
        pool,
        rows,
        retriever,
        evaluation_setup(settings),
        split=split,
        progress=progress,
        shots=limit is None,
        fingerprint=fingerprint,
        save_as=save_as,
        encoder=encoder.record if encoder is not None else None,
        labels=settings.evaluate.label_settings(method).model_dump() if split_labelled(method)[1] else None,
        write_to=result_files(settings, save_as or method, name, split) if saved else None,
        started=start,
    )
