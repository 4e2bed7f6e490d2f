"""Every path of the pipeline, defined once. `dvc.yaml` declares the same layout as stage outputs.

data/prepared/<task>/{train,test}.parquet, meta.json        udr prepare
data/candidates/round<N>/<task>.parquet                      udr candidates (N = 0), udr mine (N > 0)
metrics/mine/round<N>/<task>.json                            udr mine (how it went)
data/scores/round<N>/<task>.parquet (+ .json)                udr score
data/precision/{score,train,evaluate}.json                   udr precision
models/base/{lm,encoder,eval_lm}/                            udr models (eval_lm: udr evaluate)
models/rounds/round<N>/, metrics/train/round<N>/             udr train --round N
<DIR>/, metrics/train/runs/<DIR's name>/                     udr train --out DIR (a named run)
models/<b>/<task>/, metrics/train/<b>/<task>/                udr train --<b> --task TASK (b: epr, dr-target)
models/<b>-multitask/, metrics/train/<b>-multitask/          udr train --<b> (one model of every task)
models/final/ (+ index/<task>.npy)                           udr index
metrics/<method>/<task>.json, data/predictions/<method>/     udr evaluate
data/oracle/<task>.parquet, metrics/{ceiling,agreement}.md   udr exp ceiling / agreement (validation)
metrics/{results.md,summary.json,headline.*,plots/}         udr report
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from udr.errors import UdrError, shorten

ROUND_PREFIX = "round"
NAMED_RUNS = "runs"  # metrics/train/runs/<name>: the logs of runs named with `udr train --out`
# The evaluated methods (config.METHODS) that read a model of the project's (:meth:`Paths.method_model`), and
# the command that makes it; random and BM25 read none.
METHOD_MODEL_COMMANDS = {
    "sbert": "udr models",
    "dr-target": "udr train --dr-target --task TASK",
    "epr": "udr train --epr --task TASK",
    "udr": "udr index",
}
# The evaluated methods trained one retriever per task (the paper's DR-Target and EPR baselines): their model
# folder holds a bi-encoder per task (<folder>/<task>/), and a task they never trained on (an unseen one) has none.
PER_TASK_METHODS = ("dr-target", "epr")
# The baselines `udr train --<name> --task T` trains per task (models/<name>/<task>/): EPR (the LM's feedback)
# and DR-Target (the BM25 similarity of targets), both with EPR's recipe; without --task, one multi-task model
# (models/<name>-multitask/; EPR's is the ablation "without list-wise ranking").
TRAINED_BASELINES = ("epr", "dr-target")
# The evaluated methods that read a trained bi-encoder of the project's (`udr evaluate --model` takes another).
BI_ENCODER_METHODS = (*PER_TASK_METHODS, "udr")


# `METHOD+labels`: a method's retriever with label-aware selection on top (`evaluate.labels`), evaluated on
# classification tasks; its results are saved under that name.
LABELS_SUFFIX = "+labels"


def split_labelled(method: str) -> tuple[str, bool]:
    """(the retriever's own method, whether label-aware selection is on top): `udr+labels` -> ("udr", True)."""
    if method.endswith(LABELS_SUFFIX):
        return method[: -len(LABELS_SUFFIX)], True
    return method, False


# Bytes of a name a user gives that becomes one folder or file name (a saved evaluation's, a task's): far
# below the 255 a file system allows, so that name and suffix fit whatever the name.
NAME_LIMIT = 100


def check_name_length(name: str, what: str) -> None:
    """A one-line UdrError, before any work, where `name` (a `what` that becomes a folder or file name)
    is longer than :data:`NAME_LIMIT`; the file system would refuse it mid-way ("File name too long")."""
    if len(os.fsencode(name)) > NAME_LIMIT:
        raise UdrError(f"bad {what} {shorten(name, 40)!r}: longer than {NAME_LIMIT} characters (it names a folder)")


def round_label(n: int) -> str:
    """The name of round `n` in paths, params (`train.later_rounds`) and DVC stages: round0, round1, ..."""
    return f"{ROUND_PREFIX}{n}"


def parse_round(text: str) -> int:
    """`1` or `round1` -> 1; anything else is a UdrError."""
    match = re.fullmatch(rf"(?:{ROUND_PREFIX})?(\d+)", str(text).strip())
    if not match:
        raise UdrError(f"bad round {text!r}: expected a number such as 1 or {round_label(1)}")
    return int(match.group(1))


@dataclass(frozen=True)
class Paths:
    """The pipeline's files under a project root (the directory of params.yaml)."""

    root: Path

    # ---------------------------------------------------------------- data
    def prepared_dir(self, task: str) -> Path:
        return self.root / "data" / "prepared" / task

    def prepared(self, task: str, split: str) -> Path:
        return self.prepared_dir(task) / f"{split}.parquet"

    def prepared_tasks(self) -> list[str]:
        """The tasks whose train split is prepared here."""
        found = (self.root / "data" / "prepared").glob("*/train.parquet")
        return sorted(p.parent.name for p in found if not p.parent.name.startswith("."))  # not temporary dirs

    def candidates(self, round_: int, task: str) -> Path:
        """Round 0: BM25 candidates; later rounds: mined and merged."""
        return self.root / "data" / "candidates" / round_label(round_) / f"{task}.parquet"

    def mine_report(self, round_: int, task: str) -> Path:
        """How a round's mining of a task went (counts, time): apart from the candidates, whose folder the
        later stages read, so that a re-run that mines the same candidates re-runs nothing after it."""
        return self.root / "metrics" / "mine" / round_label(round_) / f"{task}.json"

    def scores(self, round_: int, task: str) -> Path:
        """The LM's scores of a round's candidates (their manifest, :mod:`udr.feedback.scores_file`, beside)."""
        return self.root / "data" / "scores" / round_label(round_) / f"{task}.parquet"

    def score_report(self, round_: int, task: str) -> Path:
        """How a round's scoring of a task went (counts, time, throughput, the shipped sample's check); the
        scores' manifest, which later stages read, is the .json beside the scores."""
        return self.root / "metrics" / "score" / round_label(round_) / f"{task}.json"

    def precision(self, section: str) -> Path:
        """The device and precision a settings section's `device` and `dtype` resolve to on this machine."""
        return self.root / "data" / "precision" / f"{section}.json"

    def oracle(self, task: str) -> Path:
        """The oracle instruments' LM scores of a task's validation queries and their candidates (a
        `.candidates.parquet` and a `.json` summary beside; :mod:`udr.experiments.instruments`)."""
        return self.root / "data" / "oracle" / f"{task}.parquet"

    def predictions(self, method: str, task: str, split: str = "test") -> Path:
        """Every prediction of an evaluation (validation ones apart: they are not DVC outputs)."""
        folder = "predictions" if split == "test" else f"predictions-{split}"
        return self.root / "data" / folder / method / f"{task}.parquet"

    # ---------------------------------------------------------------- models
    def base_model(self, role: str) -> Path:
        """A resolved base model: lm, encoder, or eval_lm (`evaluate.lm` when it is another LM)."""
        return self.root / "models" / "base" / role

    def round_model(self, round_: int) -> Path:
        return self.root / "models" / "rounds" / round_label(round_)

    @property
    def epr_models(self) -> Path:
        """The per-task EPR baselines' folder: one bi-encoder per task, models/epr/<task>/."""
        return self.root / "models" / "epr"

    def baseline_folders(self, baseline: str, task: str | None) -> tuple[Path, Path]:
        """(model, training log) of `task`'s trained `baseline` (:data:`TRAINED_BASELINES`), or of the
        baseline's multi-task model where `task` is None (the EPR one: the ablation)."""
        if task is None:
            name = f"{baseline}-multitask"
            return self.root / "models" / name, self.train_log(name)
        return self.root / "models" / baseline / task, self.train_log(baseline) / task

    @property
    def final_model(self) -> Path:
        return self.root / "models" / "final"

    def method_model(self, method: str) -> Path | None:
        """The model folder an evaluated method reads (made by :data:`METHOD_MODEL_COMMANDS`): sbert the base
        encoder, dr-target and epr models/<method> (a bi-encoder per task, :data:`PER_TASK_METHODS`), udr
        models/final; None for a method that reads none (random, bm25)."""
        per_task = {m: self.root / "models" / m for m in PER_TASK_METHODS}
        folders = {"sbert": self.base_model("encoder"), **per_task, "udr": self.final_model}
        return folders.get(split_labelled(method)[0])

    @staticmethod
    def index(model_dir: Path, task: str) -> Path:
        """A model's embeddings of a task's pool (`udr index`)."""
        return Path(model_dir) / "index" / f"{task}.npy"

    @staticmethod
    def model_pools(model_dir: Path) -> Path:
        """Where a model folder carries its pools and their tasks' declarations (`udr index`)."""
        return Path(model_dir) / "pools"

    @staticmethod
    def model_pool(model_dir: Path, task: str) -> Path:
        """The pool a model's index embeds (a copy of the prepared train split), so the folder serves alone."""
        return Paths.model_pools(model_dir) / f"{task}.parquet"

    @staticmethod
    def model_tasks(model_dir: Path) -> Path:
        """The declarations of the tasks whose pools a model folder carries ({name: fields})."""
        return Paths.model_pools(model_dir) / "tasks.json"

    # ---------------------------------------------------------------- metrics
    def train_log(self, name: str) -> Path:
        """Training logs of a round (round<N>) or of a trained baseline (epr/<task>, epr-multitask, ...)."""
        return self.root / "metrics" / "train" / name

    def named_train_log(self, model_dir: Path) -> Path:
        """The training log of a named run (`udr train --out DIR`): metrics/train/runs/<DIR's name>, a
        folder apart from the pipeline's own logs, so that no named run replaces them or a folder above them."""
        name = Path(model_dir).resolve().name
        if not name or name.startswith("."):
            raise UdrError(f"--out {model_dir}: a model folder needs a name of its own (not {name or '/'!r})")
        return self.root / "metrics" / "train" / NAMED_RUNS / name

    def method_metrics(self, method: str, task: str, split: str = "test") -> Path:
        """An evaluation's result: metrics/<method>/<task>.json (test), metrics/<split>/<method>/<task>.json."""
        if split == "test":
            return self.root / "metrics" / method / f"{task}.json"
        return self.root / "metrics" / split / method / f"{task}.json"

    @property
    def summary(self) -> Path:
        return self.root / "metrics" / "summary.json"

    @property
    def headline(self) -> Path:
        """The summary's few flat numbers: the metrics file `dvc exp show` reads."""
        return self.root / "metrics" / "headline.json"

    @property
    def results(self) -> Path:
        return self.root / "metrics" / "results.md"

    @property
    def headline_table(self) -> Path:
        """This run beside the committed experiments (:mod:`udr.evaluation.headline`), shown in the README."""
        return self.root / "metrics" / "headline.md"

    @property
    def plots(self) -> Path:
        return self.root / "metrics" / "plots"

    def analysis(self, name: str) -> Path:
        """The table of a `udr exp` analysis: ablations, order, transfer, ceiling or agreement."""
        return self.root / "metrics" / f"{name}.md"


def summary_file(output: Path) -> Path:
    """The JSON summary a stage writes beside a parquet output."""
    return output.with_suffix(".json")
