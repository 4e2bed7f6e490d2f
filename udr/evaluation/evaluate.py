"""The `udr evaluate` stage: in-context learning on each task's test split with one retriever's
demonstrations.

For every test input the retriever ranks the task's pool (its prepared train split); the prompt
takes, most similar first, `evaluate.max_demos` demonstrations for classification / multiple choice
and as many as fit in the context for generation (:func:`udr.evaluation.icl.assemble`), in `evaluate.order`.
The LM then predicts (:mod:`udr.lm.predict`) and the task's metric scores it (:mod:`udr.evaluation.metrics`).

Outputs, per method and task:
- ``metrics/<method>/<task>.json``: metric, score, graded score, n, seconds, mean demonstrations and
  prompt tokens, and for the shots plot's tasks and methods the score at each demonstration count;
- ``data/predictions/<method>/<task>.parquet``: id, prediction, gold, the demonstration ids in prompt
  order, prompt tokens: every result can be inspected.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from udr.config import Split
from udr.errors import UdrError


@dataclass
class LanguageModel:
    """The inference LM with its tokenizer, label scorer and greedy generator."""

    model: object
    tokenizer: object
    scorer: object
    generator: object

    @classmethod
    def load(cls, settings) -> LanguageModel:
        import torch

        from udr.lm.loading import load_causal_lm
        from udr.lm.models import resolve_model
        from udr.lm.predict import GreedyGenerator
        from udr.lm.scorer import LMScorer
        from udr.util.distributed import resolve_lm_precision

        if settings.evaluate.lm:  # another inference LM than the scoring one: resolved (once) next to it
            lm_dir = resolve_model(settings.evaluate.lm, settings.paths.base_model("eval_lm"), kind="lm")
        else:
            lm_dir = settings.paths.base_model("lm")
        if not lm_dir.is_dir():
            raise UdrError(f"missing model {lm_dir}: run `udr models` first")
        device_type, dtype = resolve_lm_precision(settings.evaluate.device, settings.evaluate.dtype, "evaluate")
        model, tokenizer = load_causal_lm(lm_dir)
        model.to(torch.device(device_type))
        bf16 = dtype == "bf16"
        return cls(
            model,
            tokenizer,
            LMScorer(model, bf16=bf16, pad_id=tokenizer.pad_token_id or 0),
            GreedyGenerator(model, tokenizer, bf16=bf16),
        )


def check_prepared_caps(settings, task_name: str, split: str) -> None:
    """A one-line error when the prepared split was cut with another cap than the params' (stale data:
    `udr prepare` has not run since the cap changed)."""
    import json

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


class TaskEvaluation:
    """One task's pool, evaluated split (test, or validation to choose settings on), retrieved
    demonstrations and tokenised texts, ready to build prompts at any demonstration count."""

    def __init__(
        self,
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
    ):
        from udr.data.prepare import read_prepared
        from udr.evaluation.baselines import build_retriever
        from udr.lm.prompt import PromptBuilder

        cfg = settings.evaluate
        self.settings, self.lm, self.method = settings, lm, method
        self.task = settings.task(task_name)
        self.generation = self.task.generation
        root = settings.root
        pool = read_prepared(root, task_name, "train")
        self.split = split
        if split == "validation" and not settings.paths.prepared(task_name, split).is_file():
            raise UdrError(
                f"task {task_name} has no validation split: set prepare.tasks.{task_name}.validation "
                f"to a number of rows and run `udr prepare -t {task_name}`"
            )
        check_prepared_caps(settings, task_name, split)
        self.rows = read_prepared(root, task_name, split).to_dicts()[:limit]
        if not self.rows:
            raise UdrError(f"task {task_name} has no {split} rows: nothing to evaluate")
        self.pool = {int(r["id"]): (r["input"], r["target"]) for r in pool.select("id", "input", "target").to_dicts()}
        instruction = self.task.instruction if settings.score.instruction == "prefix" else None
        self.builder = PromptBuilder(lm.tokenizer, self.task, instruction, cfg.context)

        want = cfg.candidates if self.generation else max([cfg.max_demos, *self.shots()])
        k = min(want, len(pool))
        if retriever is None:  # else an instrument's own ranking (e.g. the LM's oracle order)
            retriever = build_retriever(method, settings, task_name, pool, progress=progress, model_dir=model)
        start = time.perf_counter()
        queries = [r["input"] for r in self.rows]
        from udr.retriever.search import DenseRetriever

        if cfg.diversity and isinstance(retriever, DenseRetriever):  # random and BM25 have no embeddings
            self.ranking = retriever.rank(queries, k, diversity=cfg.diversity)
        else:
            self.ranking = retriever.rank(queries, k)
        self._done: dict[tuple[int, ...], object] = {}  # prompt token ids -> prediction
        self.retrieval_seconds = time.perf_counter() - start
        if self.generation:
            longest = max(len(self.builder.encode(t)) for _, t in self.pool.values())
            self.max_new_tokens = min(cfg.max_new_tokens, longest)

    def shots(self) -> list[int]:
        cfg = self.settings.evaluate
        if self.split == "test" and self.task.name in cfg.shots_tasks and self.method in cfg.shots_methods:
            return list(cfg.shots)
        return []

    def prompts(self, max_demos: int | None):
        """One assembled prompt per test row (demonstrations capped at `max_demos`, None: as many as fit)."""
        from udr.evaluation.icl import assemble
        from udr.util.rng import task_rng

        cfg = self.settings.evaluate
        out = []
        for row, ranked in zip(self.rows, self.ranking.ids):
            demos = [(int(i), *self.pool[int(i)]) for i in ranked]
            if self.generation:
                reserve = self.max_new_tokens
            else:
                reserve = max(len(self.builder.encode(c)) for c in row["choices"])
            rng = (
                task_rng(self.settings.seed, self.task.name, f"order/{cfg.order_seed}/{row['id']}")
                if cfg.order == "random"
                else None
            )
            out.append(
                assemble(
                    self.builder,
                    demos,
                    row["input"],
                    context=cfg.context,
                    reserve=reserve,
                    max_demos=max_demos,
                    order=cfg.order,
                    rng=rng,
                )
            )
        return out

    def predict(self, prompts, on_batch=None) -> tuple[list, list[str]]:
        """(predictions for the metric, their texts). A prompt already predicted at another
        demonstration count (e.g. 8 for a shots point equal to the main run) is not run again."""
        from udr.lm.predict import predict_choices
        from udr.lm.scorer import ScoringItem

        cfg = self.settings.evaluate
        todo = [j for j, p in enumerate(prompts) if p.token_ids not in self._done]
        if on_batch and len(todo) < len(prompts):
            on_batch(len(prompts) - len(todo))
        if self.generation:
            texts = self.lm.generator.generate(
                [prompts[j].token_ids for j in todo], self.max_new_tokens, cfg.batch_tokens, on_batch
            )
            self._done.update((prompts[j].token_ids, t) for j, t in zip(todo, texts))
            preds = [self._done[p.token_ids] for p in prompts]
            return preds, preds
        items = []
        for j in todo:
            row = self.rows[j]
            conts = tuple(self.builder.encode(c) for c in row["choices"])
            items.append(ScoringItem(int(row["id"]), 0, prompts[j].token_ids, conts, int(row["label"])))
        labels, _ = predict_choices(self.lm.scorer, items, cfg.batch_tokens, on_batch)
        self._done.update((prompts[j].token_ids, label) for j, label in zip(todo, labels))
        preds = [self._done[p.token_ids] for p in prompts]
        return preds, [row["choices"][i] for row, i in zip(self.rows, preds)]

    def run(
        self, max_demos: int | None, bar=None, description: str = "", *, interval: bool = False
    ) -> tuple[dict, list, list[str]]:
        """Assemble, predict and score at one demonstration count: (result, prompts, prediction texts);
        `interval`: with the score's 95% interval (:func:`udr.evaluation.bootstrap.score_interval`)."""
        from udr.evaluation.bootstrap import score_interval
        from udr.evaluation.metrics import score_task

        prompts = self.prompts(max_demos)
        job = bar.add_task(description, total=len(prompts)) if bar is not None else None
        advance = (lambda n: bar.advance(job, n)) if bar is not None else None
        start = time.perf_counter()
        preds, texts = self.predict(prompts, advance)
        result = score_task(self.task.metric, preds, self.rows)
        if interval:
            result["interval"] = score_interval(
                self.task.metric, preds, self.rows, result["score"], seed=self.settings.seed
            )
        result["seconds"] = round(time.perf_counter() - start, 2)
        result["demos_mean"] = float(np.mean([len(p.demo_ids) for p in prompts]))
        result["prompt_tokens_mean"] = float(np.mean([len(p.token_ids) for p in prompts]))
        if bar is not None:
            bar.remove_task(job)
        return result, prompts, texts


def _write_predictions(path: Path, ev: TaskEvaluation, prompts, texts: list[str]) -> None:
    import polars as pl

    from udr.util.files import write_parquet_atomic

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
    from udr.evaluation.baselines import check_method

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
    lm = LanguageModel.load(settings)
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
    from udr.evaluation.baselines import METHOD_MODELS
    from udr.retriever.index import model_fingerprint

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
    from udr.util.files import write_json_atomic
    from udr.util.progress import progress_bar

    cfg = settings.evaluate
    start = time.perf_counter()
    ev = TaskEvaluation(
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
    from udr.config import METHODS

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
