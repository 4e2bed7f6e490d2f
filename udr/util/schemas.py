"""The typed shape of each JSON file udr writes and reads back, and the one function that reads them:
:func:`read_model` (or :func:`model_from` for a value already parsed) checks a file against its model and
gives a one-line UdrError naming the file and its first bad field, never a KeyError or TypeError later.

Each model checks the fields udr reads from its file, strictly (no "80" for 80, no string for a number);
a field that a newer udr added is optional with a default, so that an older file still reads, and a field
udr does not read is kept as it is (a file written by a newer udr reads too). The files:

- :class:`ScoreReport`: `metrics/score/round<N>/<task>.json` (`udr score`);
- :class:`TrainReport`: `metrics/train/<run>/summary.json` (`udr train`);
- :class:`MineReport`: `metrics/mine/round<N>/<task>.json`, how `udr mine` went;
- :class:`EvaluationResult`: `metrics/<method>/<task>.json` (`udr evaluate`);
- :class:`ModelRecord`: a model folder's `udr_record.json` (`udr train`, `udr index`, `udr interpolate`),
  and :class:`TrainingRun`, one training run of it as the model card describes it;
- :class:`PreparedMeta`: a prepared task's `meta.json` (`udr prepare`);
- :class:`IndexMeta`: an index's metadata beside its embeddings (`udr index`).

The scores manifest is a dataclass read by :func:`udr.util.readers.dataclass_from`; parquet files (carried
pools included) by :func:`udr.util.readers.read_parquet_checked`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

from udr.errors import UdrError, shorten
from udr.util.readers import read_json, validation_reason

M = TypeVar("M", bound=BaseModel)


class FileModel(BaseModel):
    """A file udr writes: its read fields typed strictly, other fields kept."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)


def model_from(model: type[M], raw: Any, where: str | Path, what: str, fix: str = "", problem: str = "unreadable") -> M:
    """`raw` (the JSON value read from `where`) as `model`; one that is not, a one-line UdrError
    "<problem> <what> <where>: <the first bad field>[; <fix>]"."""
    tail = f"; {fix}" if fix else ""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        reason = validation_reason(exc, _model_names(FileModel))
        raise UdrError(f"{problem} {what} {shorten(where, 160)}: {reason}{tail}") from None
    except RecursionError:
        raise UdrError(f"{problem} {what} {shorten(where, 160)}: nested too deeply{tail}") from None


def _model_names(cls: type) -> frozenset[str]:
    """The names of `cls` and of every model under it (pydantic's tags of a union's members)."""
    return frozenset({cls.__name__}.union(*(_model_names(c) for c in cls.__subclasses__())))


def read_model(path: Path, model: type[M], what: str, fix: str = "") -> M:
    """The JSON file `path` read as `model` (:func:`model_from`); unreadable, a one-line UdrError naming it."""
    return model_from(model, read_json(path, what, fix), path, what, fix)


# ---------------------------------------------------------------- the stages' reports


class ScoreReport(FileModel):
    """`udr score`'s report of a task and round (udr.feedback.pair_scoring.ScoreSummary); an older report
    may hold the task alone."""

    task: str | None = None
    round: int | None = None
    pairs: int | None = None
    scored: int | None = None
    tokens: int | None = None
    seconds: float | None = None
    top1_score_mean: float | None = None
    machine: str = ""
    shipped: dict[str, Any] | None = None

    @property
    def checked_queries(self) -> int | None:
        """The shipped pairs' re-scored queries, where the scores were taken from shipped feedback."""
        n = (self.shipped or {}).get("checked_queries")
        return n if isinstance(n, int) and not isinstance(n, bool) else None


class TrainReport(FileModel):
    """`udr train`'s summary (udr.retriever.training.TrainSummary)."""

    steps: int
    seconds: float
    loss_start: float | None = None
    loss_end: float | None = None


class MineReport(FileModel):
    """`udr mine`'s summary of a task and round (udr.stages.mine.MineSummary)."""

    new_fraction: float | None = None
    seconds: float | None = None


# ---------------------------------------------------------------- evaluation results


class GradedScore(FileModel):
    name: str
    score: float


class ShotScore(FileModel):
    """A result's scores with another number of demonstrations (its `shots`)."""

    score: float
    graded: float


class EvaluationResult(FileModel):
    """`udr evaluate`'s result of a method on a task: its metric, n, score and graded score (the number
    averaged over tasks); what timing and provenance a newer udr records is optional."""

    metric: str
    n: int
    score: float
    graded: GradedScore
    kind: str
    seconds: float | None = None
    prompt_tokens_mean: float | None = None
    total_seconds: float = 0.0
    machine: str = ""
    model: str | None = None
    details: dict[str, float] | None = None
    shots: dict[Annotated[str, StringConstraints(pattern=r"^[0-9]{1,6}$")], ShotScore] | None = None


# ---------------------------------------------------------------- model folders


class RecordModels(FileModel):
    lm: str | None = None
    encoder: str | None = None


class RecordLoss(FileModel):
    start: float
    end: float


class BaseInit(FileModel):
    """Where a first training started: the base encoder."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)
    base: str


class ModelRecord(FileModel):
    """A model's `udr_record.json` (udr.retriever.record): every field optional (a record made by an
    older udr, or by `udr interpolate`, lacks some), each typed where present; `init` is the record of
    the model training started from, or the base encoder."""

    method: str | None = None
    round: int | None = None
    params_file: str | None = None
    project: str | None = None
    seed: int | None = None
    models: RecordModels | None = None
    tasks: dict[str, int] | None = None
    steps: int | None = None
    loss: RecordLoss | None = None
    train: dict[str, Any] | None = None
    candidates: dict[str, Any] | None = None
    interpolation: dict[str, Any] | None = None
    index: dict[str, Any] | None = None
    init: BaseInit | ModelRecord | None = None


class TrainSettingsRecord(FileModel):
    """The train settings a training run's record keeps, as its model card reads them."""

    loss: str
    loss_lambda: float
    batch_size: int
    lr: float
    candidates_per_query: int | None = None
    anchor_beta: float | None = None
    anchor_top: int | None = None
    freeze_demo_encoder: bool = False  # records older than the setting lack it
    feedback: str = "lm"


class RecordCandidates(FileModel):
    k: int


class TrainingRun(FileModel):
    """One training run of a model record, with every field its model card states of each run."""

    method: str
    round: int
    params_file: str
    seed: int
    steps: int
    loss: RecordLoss
    train: TrainSettingsRecord
    models: RecordModels | None = None
    candidates: RecordCandidates | None = None
    tasks: dict[str, int] = {}


class LastTrainingRun(TrainingRun):
    """A training's last run, whose feedback (its LM and candidates) the model card states too."""

    models: RecordModels
    candidates: RecordCandidates


# ---------------------------------------------------------------- prepared data


class SplitCount(FileModel):
    """A prepared split's rows: available in the source, kept, and the cap it was cut with."""

    available: int | None = None
    kept: int | None = None
    cap: int | None = None


class PreparedMeta(FileModel):
    """`udr prepare`'s `meta.json` beside a task's splits, as later commands read it."""

    counts: dict[str, SplitCount] = {}


# ---------------------------------------------------------------- indexes


class IndexMeta(FileModel):
    """An index's metadata: its embeddings' shape, dtype and checksum, and what was indexed."""

    shape: list[int]
    dtype: str
    meta: dict[str, Any]
    sha256: str | None = None
