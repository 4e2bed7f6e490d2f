"""In-context learning on one task: the inference LM, and a task's evaluated rows with their retrieved
demonstrations, assembled into prompts at any demonstration count, predicted and scored.

For every evaluated input the retriever ranks the task's pool (its prepared train split); the prompt
takes, most similar first, `max_demos` demonstrations for classification / multiple choice and as many
as fit in the context for generation (:func:`udr.evaluation.icl.assemble`), in the configured order.
The LM then predicts (:mod:`udr.lm.predict`) and the task's metric scores it
(:mod:`udr.evaluation.metrics`). :func:`evaluate_task` runs it at the configured demonstration count (and
at each of the shots plot's), and writes the result and every prediction where it is told; the `udr
evaluate` stage (:mod:`udr.stages.evaluate`) and the `udr exp` instruments give it a project's data, models
and output files.

Imports of torch and polars are inside the functions that use them, to keep the start of `udr` and of its
commands light.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from udr.config import EvaluateSettings, Split
from udr.data.tasks import Task
from udr.errors import UdrError
from udr.evaluation.bootstrap import score_interval
from udr.evaluation.icl import assemble
from udr.evaluation.metrics import label_share, metric_result
from udr.lm.loading import load_causal_lm
from udr.lm.predict import GreedyGenerator, predict_choices
from udr.lm.prompt import PromptBuilder
from udr.lm.scorer import LMScorer, ScoringItem
from udr.retriever.search import DenseRetriever
from udr.util.distributed import resolve_lm_precision
from udr.util.files import write_json_atomic, write_parquet_atomic
from udr.util.machine import machine_kind
from udr.util.progress import progress_bar
from udr.util.rng import task_rng


@dataclass
class LanguageModel:
    """The inference LM with its tokenizer, label scorer and greedy generator."""

    model: object
    tokenizer: object
    scorer: object
    generator: object
    machine: str = ""  # the device kind it runs on (:func:`udr.util.machine.machine_kind`), named by results

    @classmethod
    def load(cls, lm_dir: Path, device_type: str, dtype: str) -> LanguageModel:
        """The causal LM in `lm_dir` (safetensors) on `device_type`, predicting in `dtype` (bf16: autocast)."""
        import torch

        model, tokenizer = load_causal_lm(lm_dir)
        model.to(torch.device(device_type))
        bf16 = dtype == "bf16"
        return cls(
            model,
            tokenizer,
            LMScorer(model, bf16=bf16, pad_id=tokenizer.pad_token_id or 0),
            GreedyGenerator(model, tokenizer, bf16=bf16),
            machine_kind(device_type),
        )


def load_language_model(lm_dir: Path, device: str, dtype: str) -> LanguageModel:
    """The inference LM in `lm_dir` (missing: a one-line error naming `udr models`) on `device` in `dtype`,
    both resolved as `evaluate.device` and `evaluate.dtype` are (auto: the machine's)."""
    if not lm_dir.is_dir():
        raise UdrError(f"missing model {lm_dir}: run `udr models` first")
    device_type, dtype = resolve_lm_precision(device, dtype, "evaluate")
    return LanguageModel.load(lm_dir, device_type, dtype)


@dataclass(frozen=True)
class EvaluationSetup:
    """What evaluating a task takes of a project beyond its LM, rows and retriever: the evaluate settings,
    the seed (random demonstration orders, the score's interval), and whether the task instruction leads
    every prompt (`score.instruction: prefix`)."""

    evaluate: EvaluateSettings
    seed: int
    instruction: bool


@dataclass(frozen=True)
class ResultFiles:
    """Where an evaluation's result (JSON) and its predictions (parquet) are written."""

    result: Path
    predictions: Path


class TaskEvaluation:
    """One task's pool, evaluated rows (of test, or of validation to choose settings on), retrieved
    demonstrations and tokenised texts, ready to build prompts at any demonstration count."""

    def __init__(
        self,
        lm: LanguageModel,
        method: str,
        task: Task,
        pool,
        rows: list[dict],
        retriever,
        cfg: EvaluateSettings,
        *,
        seed: int,
        instruction: str | None,
        split: Split = "test",
    ):
        """`pool`: the task's prepared train frame (id, input, target); `rows`: the evaluated rows;
        `retriever`: ranks the pool for each row's input; `instruction`: the task instruction that leads
        every prompt, or None; `seed`: random demonstration orders and the score's interval."""
        self.cfg, self.seed, self.lm, self.method, self.task = cfg, seed, lm, method, task
        self.generation = task.generation
        self.split, self.rows = split, rows
        self.pool = {int(r["id"]): (r["input"], r["target"]) for r in pool.select("id", "input", "target").to_dicts()}
        # Each pool row's gold label (the index of its answer among its choices), for `label_share`.
        has_labels = not self.generation and "label" in pool.columns
        self.labels = dict(zip(pool["id"].to_list(), pool["label"].to_list())) if has_labels else None
        self.builder = PromptBuilder(lm.tokenizer, task, instruction, cfg.context)

        want = cfg.candidates if self.generation else max([cfg.max_demos, *self.shots()])
        k = min(want, len(pool))
        start = time.perf_counter()
        queries = [r["input"] for r in self.rows]
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
        cfg = self.cfg
        if self.split == "test" and self.task.name in cfg.shots_tasks and self.method in cfg.shots_methods:
            return list(cfg.shots)
        return []

    def prompts(self, max_demos: int | None):
        """One assembled prompt per test row (demonstrations capped at `max_demos`, None: as many as fit)."""
        cfg = self.cfg
        out = []
        for row, ranked in zip(self.rows, self.ranking.ids):
            demos = [(int(i), *self.pool[int(i)]) for i in ranked]
            if self.generation:
                reserve = self.max_new_tokens
            else:
                reserve = max(len(self.builder.encode(c)) for c in row["choices"])
            rng = (
                task_rng(self.seed, self.task.name, f"order/{cfg.order_seed}/{row['id']}")
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
        cfg = self.cfg
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
        prompts = self.prompts(max_demos)
        job = bar.add_task(description, total=len(prompts)) if bar is not None else None
        advance = (lambda n: bar.advance(job, n)) if bar is not None else None
        start = time.perf_counter()
        preds, texts = self.predict(prompts, advance)
        result = metric_result(self.task.metric, preds, self.rows)
        if interval:
            result["interval"] = score_interval(self.task.metric, preds, self.rows, result["score"], seed=self.seed)
        result["seconds"] = round(time.perf_counter() - start, 2)
        result["demos_mean"] = float(np.mean([len(p.demo_ids) for p in prompts]))
        result["prompt_tokens_mean"] = float(np.mean([len(p.token_ids) for p in prompts]))
        if self.labels is not None:
            result["label_share"] = label_share([p.demo_ids for p in prompts], self.rows, self.labels)
        if bar is not None:
            bar.remove_task(job)
        return result, prompts, texts


def task_evaluation(
    lm: LanguageModel,
    method: str,
    task: Task,
    pool,
    rows: list[dict],
    retriever,
    setup: EvaluationSetup,
    split: Split = "test",
) -> TaskEvaluation:
    """`task`'s evaluation of `rows` (of `split`) with `retriever`'s demonstrations from `pool` (its
    prepared train frame), under the name `method`."""
    instruction = task.instruction if setup.instruction else None
    return TaskEvaluation(
        lm, method, task, pool, rows, retriever, setup.evaluate, seed=setup.seed, instruction=instruction, split=split
    )


def evaluate_task(
    lm: LanguageModel,
    method: str,
    task: Task,
    pool,
    rows: list[dict],
    retriever,
    setup: EvaluationSetup,
    *,
    split: Split = "test",
    progress: bool = True,
    shots: bool = True,
    fingerprint: str | None = None,
    save_as: str | None = None,
    encoder: dict | None = None,
    labels: dict | None = None,
    write_to: ResultFiles | None = None,
    started: float | None = None,
) -> dict:
    """In-context learning on `rows` of `task` (of `split`) with `retriever`'s demonstrations from `pool`,
    under the name `method`: the result at the configured demonstration count, with the shots plot's counts
    where `shots` and the task and method are the plot's; written with every prediction to `write_to` where
    given. The result records `fingerprint` (the learned model the retriever reads), `save_as` (the
    name it is saved under), `encoder` (what an `encoder:SPEC` method read) and `labels` (a `METHOD+labels`
    method's label-aware selection) where given, and for
    classification and multiple choice `label_share` (the share of demonstrations carrying the query's gold
    label, :func:`udr.evaluation.metrics.label_share`); its total seconds count from `started`
    (time.perf_counter(), default now: e.g. before the data was read and the retriever built)."""
    cfg = setup.evaluate
    start = time.perf_counter() if started is None else started
    ev = task_evaluation(lm, method, task, pool, rows, retriever, setup, split)
    with progress_bar(progress) as bar:
        main_demos = None if ev.generation else cfg.max_demos
        result, prompts, texts = ev.run(main_demos, bar, f"{method} on {task.name}", interval=True)
        at_shots = {}
        for n in ev.shots() if shots else ():
            shot = result if n == main_demos else ev.run(n, bar, f"{method} on {task.name}, {n} demonstrations")[0]
            at_shots[str(n)] = _shot_entry(shot)
    result = {
        "method": method,
        "task": task.name,
        "kind": task.kind,
        "family": task.family,
        **result,
        "retrieval_seconds": round(ev.retrieval_seconds, 2),
        "context": cfg.context,
        "order": cfg.order,
        "total_seconds": round(time.perf_counter() - start, 2),
    }
    if lm.machine:  # bf16 results differ in their last bits between machines: each names its own
        result["machine"] = lm.machine
    if at_shots:
        result["shots"] = at_shots
    if cfg.lm:
        result["lm"] = cfg.lm
    if fingerprint is not None:
        result["model"] = fingerprint
    if save_as is not None:
        result["saved_as"] = save_as
    if encoder is not None:
        result["encoder"] = encoder
    if labels is not None:
        result["labels"] = labels
    if write_to is not None:
        write_predictions(write_to.predictions, ev, prompts, texts)
        write_json_atomic(write_to.result, result)
    return result


def write_predictions(path: Path, ev: TaskEvaluation, prompts, texts: list[str]) -> None:
    """Every prediction of `ev` with its gold answer, the demonstrations of its prompt and their texts."""
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


def _shot_entry(result: dict) -> dict:
    return {"score": result["score"], "graded": result["graded"]["score"], "demos_mean": result["demos_mean"]}
