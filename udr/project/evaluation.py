"""A project's inference LM and retrievers, as `udr evaluate` (:mod:`udr.stages.evaluate`), the `udr exp`
instruments (:mod:`udr.experiments.instruments`) and the benchmarks read them: the project's settings and paths
turned into the explicit arguments of :mod:`udr.evaluation.task_evaluation` and
:func:`udr.evaluation.baselines.build_retriever`, and a task's pool and evaluated rows, checked current.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from udr.config import Split
from udr.data.prepare import read_prepared
from udr.errors import UdrError
from udr.evaluation.baselines import RetrieverSetup, build_retriever, check_method
from udr.evaluation.task_evaluation import EvaluationSetup, LanguageModel, ResultFiles, load_language_model
from udr.lm.models import resolve_model
from udr.paths import BI_ENCODER_METHODS, split_labelled
from udr.retriever.encoder import SETTINGS_NAME, task_model_dir
from udr.retriever.index import model_fingerprint
from udr.retriever.label_selection import LabelSelection
from udr.retriever.search import PoolRetriever
from udr.util.distributed import resolve_device_type, use_threads
from udr.util.schemas import PreparedMeta, read_model

if TYPE_CHECKING:
    from udr.config import Settings


def language_model(settings: Settings) -> LanguageModel:
    """The inference LM: `evaluate.lm` where set (resolved once, next to the scoring LM), else the
    scoring LM of `udr models`; on `evaluate.device` in `evaluate.dtype`, with `evaluate.threads` torch threads."""
    use_threads(settings.evaluate.threads)
    if settings.evaluate.lm:
        lm_dir = resolve_model(settings.evaluate.lm, settings.paths.base_model("eval_lm"), kind="lm")
    else:
        lm_dir = settings.paths.base_model("lm")
    return load_language_model(lm_dir, settings.evaluate.device, settings.evaluate.dtype)


def retriever_setup(settings: Settings, method: str | None = None) -> RetrieverSetup:
    """The project's seed, `evaluate.device` and `mine.batch_size` to embed pools and queries with, and the
    label-aware selection of `method` (`evaluate.label_settings`, for a `METHOD+labels` method); the
    device is resolved (and checked) only where `method` embeds (sbert, epr, udr; None: a bi-encoder of
    one's own): random and BM25 embed nothing, and run whatever it says. Sets `evaluate.threads`."""
    use_threads(settings.evaluate.threads)
    embeds = method is None or settings.paths.method_model(method) is not None
    device = resolve_device_type(settings.evaluate.device, "evaluate.device") if embeds else "cpu"
    return RetrieverSetup(
        seed=settings.seed,
        device=device,
        batch_size=settings.mine.batch_size,
        labels=LabelSelection(**settings.evaluate.label_settings(method or "").model_dump()),
    )


def evaluation_setup(settings: Settings) -> EvaluationSetup:
    """The evaluate settings, the seed, and whether the task instruction leads each prompt (`score.instruction`)."""
    return EvaluationSetup(
        evaluate=settings.evaluate, seed=settings.seed, instruction=settings.score.instruction == "prefix"
    )


def method_retriever(
    settings: Settings, method: str, task_name: str, pool, *, progress: bool = False, model_dir: Path | None = None
) -> PoolRetriever:
    """The retriever `method` over `pool` (a prepared train frame) of `task_name`; `model_dir`: the
    bi-encoder of epr / udr (default: the pipeline's, :meth:`udr.paths.Paths.method_model`), whose pool is
    embedded here where it has no index."""
    check_method(method)
    paths = settings.paths
    return build_retriever(
        method,
        settings.task(task_name),
        pool,
        retriever_setup(settings, method),
        model_dir=Path(model_dir) if model_dir is not None else paths.method_model(method),
        pool_file=paths.prepared(task_name, "train"),
        progress=progress,
    )


def result_files(settings: Settings, name: str, task_name: str, split: str = "test") -> ResultFiles:
    """Where the evaluation `name` (a method, or a name given with --save-as) of a task on `split` is written."""
    paths = settings.paths
    return ResultFiles(
        result=paths.method_metrics(name, task_name, split), predictions=paths.predictions(name, task_name, split)
    )


def learned_model_fingerprint(settings: Settings, method: str, task_name: str, model: Path | None = None) -> str | None:
    """The fingerprint of the bi-encoder an EPR / UDR evaluation of `task_name` reads (`model`, default the
    pipeline's; a folder of per-task models: the task's); None for the methods that read none of their own,
    and where the model is missing (building the retriever then says so)."""
    method = split_labelled(method)[0]
    if method not in BI_ENCODER_METHODS:
        return None
    model_dir = Path(model) if model is not None else settings.paths.method_model(method)
    model_dir = task_model_dir(model_dir, task_name)
    return model_fingerprint(model_dir) if (model_dir / SETTINGS_NAME).is_file() else None


def check_prepared_caps(settings: Settings, task_name: str, split: str) -> None:
    """A one-line error when the prepared split was cut with another cap than the params' (stale data:
    `udr prepare` has not run since the cap changed)."""
    meta_file = settings.paths.prepared_dir(task_name) / "meta.json"
    if not meta_file.is_file():
        return
    caps = settings.task_caps(task_name)
    key = {"test": "max_test", "validation": "validation"}[split]
    want = getattr(caps, key, None)
    again = f"run `udr prepare -t {task_name}` again"
    counts = read_model(meta_file, PreparedMeta, "prepared data metadata", again).counts
    got = counts[split].cap if split in counts else None
    if want is not None and got is not None and want != got:
        raise UdrError(
            f"data/prepared/{task_name} was cut with {key} {got}, the params say {want}: run "
            f"`udr prepare -t {task_name}` first (or `udr evaluate --limit N` for a quick look)"
        )


def load_evaluated_task(
    settings: Settings, task_name: str, split: Split = "test", limit: int | None = None
) -> tuple[object, list[dict]]:
    """`udr evaluate`'s step 1: the task's pool (its prepared train frame) and its evaluated rows (the first
    `limit` of `split`); a missing validation split, a split cut with other caps than the params', or no rows
    is a one-line error."""
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
    return pool, rows
