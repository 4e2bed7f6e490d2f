"""The model a :class:`udr.Retriever` serves, and what is known of it.

Its bi-encoder and folder, its fingerprint, the tasks and pools the folder carries, the project at `root` (its
settings, task registry and prepared pools), the tasks the model was trained on and the project's evidence on
tasks it never trained on (:mod:`udr.serving.evidence`), the base encoder the project compares it with, and so
which of the two serves a pool (`encoder_choice`, one of ENCODERS), with the note saying so once per pool.
Each fact is read once, on first need. A base encoder's export (`udr adapt`'s SBERT winner,
:func:`udr.serving.export.export_base_encoder`) is a served model whose every pool the base encoder it holds
serves, as the sbert baseline reads it (:class:`BaseExport`).

Imports of huggingface_hub and the udr modules that load numpy or pydantic are inside the functions that use
them, to keep `from udr import Retriever` and `udr retrieve` light.
"""

from __future__ import annotations

import hashlib
import threading
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from udr.data.tasks import builtin_tasks, get_task
from udr.errors import UdrError, quoted
from udr.lm.models import hub_id
from udr.paths import Paths
from udr.serving.evidence import (
    AS_ASKED,
    BASE_METHOD,
    BY_EVIDENCE,
    Measurement,
    Training,
    model_training,
    notice,
    prefers_base,
    project_measurement,
    untrained,
    untrained_note,
)
from udr.util.distributed import resolve_device_type
from udr.util.files import check_no_links_out, file_sha256, tree_hashes

if TYPE_CHECKING:
    from udr.config import Settings
    from udr.serving.pools import Pool
    from udr.serving.query_encoder import ServingEncoder

ENCODERS = ("auto", "udr", "base")  # which encoder serves a pool (Retriever.load's `encoder`)
BASE_EXPORT_NAME = "udr_base_export.json"  # in an export of the base encoder (udr.serving.export)


def is_base_export(folder: Path) -> bool:
    """Whether `folder` is an export of the base encoder (it holds BASE_EXPORT_NAME)."""
    return (Path(folder) / BASE_EXPORT_NAME).is_file()


class BaseExport:
    """The served model's `encoder` where the model is a base encoder's export: its device only; the base encoder
    it holds is loaded on first need (:meth:`ServedModel.base_encoder`) and serves every pool."""

    settings = None

    def __init__(self, device):
        self.device = device


class ServedModel:
    """A bi-encoder as a retriever serves it (`encoder`, a ServingEncoder, from `model_dir`), with the project at
    `root` (`params`: its params file, default root/params.yaml) and the encoder choice; see the module docstring."""

    def __init__(
        self,
        encoder: ServingEncoder,
        model_dir: Path | str,
        *,
        root: Path | str = ".",
        params: Path | str | None = None,
        encoder_choice: str = "auto",
    ):
        self.encoder = encoder
        self.encoder_choice = check_encoder_choice(encoder_choice)
        self.model_dir = Path(model_dir)
        self.base_export = isinstance(encoder, BaseExport)  # the base encoder serves every pool
        self.chosen_by_adapt = False  # `udr adapt` chose it for the tasks it serves: their evidence is said there
        if self.base_export and self.encoder_choice == "udr":
            raise UdrError(
                f"{self.model_dir} is an export of the base encoder (sbert): it holds no UDR to serve with "
                'encoder "udr"'
            )
        self.root = Path(root)
        self.params = None if params is None else Path(params)
        self._fingerprint: str | None = None
        self._base_encoder = None  # the base encoder (sbert), loaded on first need
        self._base_fingerprint: str | None = None
        # (name, own, task it is read as, base) of the pools whose untrained-task note was considered: said once each.
        self._noted: set[tuple] = set()
        self._noted_lock = threading.Lock()

    # ------------------------------------------------------------ the model

    @property
    def fingerprint(self) -> str:
        """The model's fingerprint (hash of its settings and weights), computed once."""
        if self.base_export:
            return self.base_fingerprint()
        if self._fingerprint is None:
            from udr.retriever.index import model_fingerprint

            self._fingerprint = model_fingerprint(self.model_dir)
        return self._fingerprint

    @cached_property
    def model_tasks(self) -> dict:
        """{name: Task}: the tasks whose pools the model folder carries, as they were declared then."""
        from udr.serving.pools import model_tasks

        return model_tasks(self.model_dir)

    @cached_property
    def model_pools(self) -> list[str]:
        """The tasks whose pools the model folder carries (`udr index`)."""
        from udr.serving.pools import model_pool_tasks

        return model_pool_tasks(self.model_dir)

    @cached_property
    def training(self) -> Training:
        """The tasks the model was trained on (its record, or an export's model card; read once), or unknown."""
        return model_training(self.model_dir)

    # ------------------------------------------------------------ the project

    @cached_property
    def project(self) -> Settings | None:
        """The settings of the project at `root` (its params file, read once), or None without one."""
        from udr.serving.pools import project_settings

        return project_settings(self.root, self.params)

    @property
    def registry(self) -> dict:
        """{name: Task}: the model folder's tasks, the built-in ones and those the project at `root`
        declares (the project's win on a name both have)."""
        return {**self.model_tasks, **(builtin_tasks() if self.project is None else self.project.registry)}

    @cached_property
    def measurement(self) -> Measurement | None:
        """What the project at `root` measured on tasks its UDR never trained on (its metrics/summary.json,
        read once), or None without one."""
        return project_measurement(self.root, lambda: self.fingerprint)

    def pipeline_tasks(self) -> list[str]:
        """The tasks with a pipeline pool: the model folder's and the project's prepared ones."""
        return sorted(set(self.model_pools) | set(Paths(self.root).prepared_tasks()))

    def pipeline_pool(self, task: str) -> Pool:
        """The pipeline pool of `task`: the model folder's, else the project's prepared one (checked)."""
        from udr.serving.pools import model_pool, prepared_pool

        if task in self.model_pools:  # the project is not read: a broken declaration elsewhere cannot stop it
            pool = model_pool(self.model_dir, self.model_tasks.get(task) or get_task(task))
            self._check_carried_pool(task)
            return pool
        self._check_exported(task)
        return prepared_pool(self.root, task, self.project)

    def _check_exported(self, task: str) -> None:
        """A one-line error where the model is a `udr export` that carries no pool of `task` and the project
        at `root` has none either: the tasks it carries, and how to add one."""
        from udr.retriever.encoder import EXPORT_NAME

        exported = (self.model_dir / EXPORT_NAME).is_file() or self.base_export
        if not exported or Paths(self.root).prepared(task, "train").is_file():
            return
        carried = ", ".join(self.model_pools) or "none"
        raise UdrError(
            f"the export {self.model_dir} carries no pool of task '{task}' (its pools: {carried}): give the "
            f"task's demonstrations with --pool FILE (Python: add_pool), or export it again with "
            f"`udr export DIR -t {task}` in the project that prepared {task}"
        )

    def _check_carried_pool(self, task: str) -> None:
        """A one-line error where the project at `root` prepared `task` again since `udr index` copied its
        pool into the model folder (as `udr evaluate` refuses the stale index): the folder's pool is stale."""
        prepared = Paths(self.root).prepared(task, "train")
        if prepared.is_file() and file_sha256(prepared) != file_sha256(Paths.model_pool(self.model_dir, task)):
            raise UdrError(
                f"the model folder's pool of {task} differs from the project's prepared {task} (prepared again "
                f"since `udr index`?): run `udr index -t {task}` again, or retrieve from outside the project"
            )

    # ------------------------------------------------------------ the base encoder and the evidence

    @cached_property
    def base_encoder_dir(self) -> tuple[Path | None, str]:
        """(the base encoder the sbert baseline reads, `udr evaluate -m sbert`: the project's models/base/encoder,
        where it is the one the model was trained from (the spec the model's settings record, where they record
        one), else None; why not, where None)."""
        from udr.lm.loading import read_provenance

        if self.base_export:
            return self.model_dir, ""
        folder = Paths(self.root).method_model(BASE_METHOD)
        record = read_provenance(folder) if folder.is_dir() else None
        if record is None or record.get("kind") not in (None, "encoder"):
            return None, f"no resolved base encoder at {folder} (`udr models` resolves it in the project)"
        recorded, spec = str(getattr(self.encoder.settings, "base", "") or ""), str(record.get("spec") or "")
        if recorded and spec and recorded != spec:
            return None, f"the base encoder at {folder} is {spec}, and this model was trained from {recorded}"
        return folder, ""

    def base_folder(self) -> Path:
        """The base encoder's folder (:attr:`base_encoder_dir`), or a one-line UdrError saying why there is none."""
        folder, why = self.base_encoder_dir
        if folder is None:
            raise UdrError(f'encoder "base": {why}; serve with encoder "udr" instead')
        return folder

    def base_encoder(self):
        """The base encoder as the sbert baseline reads it, on the model's device (loaded once)."""
        if self._base_encoder is None:
            from udr.serving.query_encoder import _LOAD_LOCK

            folder = self.base_folder()
            with _LOAD_LOCK:  # one thread imports transformers and loads it
                if self._base_encoder is None:
                    from udr.evaluation.baselines import sbert_encoder

                    self._base_encoder = sbert_encoder(folder).to(self.encoder.device)
        return self._base_encoder

    def base_fingerprint(self) -> str:
        """The base encoder's key in the pool cache: a hash of every file of its folder (computed once)."""
        if self._base_fingerprint is None:
            parts = tree_hashes(self.base_folder())
            self._base_fingerprint = "base:" + hashlib.sha256("".join(parts).encode()).hexdigest()[:16]
        return self._base_fingerprint

    def base_reason(self, read_as: str | None, own: bool) -> str:
        """Why the base encoder serves a pool read as `read_as` (`own`: an own pool): AS_ASKED (encoder "base", or
        a base encoder's export),
        BY_EVIDENCE (encoder "auto", a pool the model was not trained on, the project's evidence preferring the
        base encoder, which is this model's), or "" where UDR serves it."""
        if self.encoder_choice == "base" or self.base_export:
            return AS_ASKED
        if self.encoder_choice == "udr" or not untrained(read_as, own, self.training):
            return ""
        if not prefers_base(self.measurement) or self.base_encoder_dir[0] is None:
            return ""
        return BY_EVIDENCE

    def note_untrained(self, name: str, read_as: str | None, own: bool, base: str = "") -> None:
        """Say once (an UntrainedTaskWarning) where pool `name` (read as `read_as`; `own`: an own pool) is an own
        pool, or a task the model was not trained on, and whether the base encoder serves it (`base`, a
        :meth:`base_reason`): nothing is read again after the first retrieval from a pool. The base encoder's
        export says nothing (it was trained on no task, and serves each as `udr evaluate -m sbert` does), nor does
        a model `udr adapt` chose (`chosen_by_adapt`: the retriever that follows it said so)."""
        if self.base_export or self.chosen_by_adapt:
            return
        key = (name, own, read_as, base)
        if key in self._noted:
            return
        with self._noted_lock:
            if key in self._noted:
                return
            self._noted.add(key)
        message = untrained_note(name, read_as, own, self.training, lambda: self.measurement, base)
        if message is not None:
            notice(message)


def check_encoder_choice(encoder) -> str:
    """`encoder` if it is one of ENCODERS, else a one-line UdrError."""
    if not isinstance(encoder, str) or encoder not in ENCODERS:
        raise UdrError(f"bad encoder {encoder!r}: expected one of {', '.join(ENCODERS)}")
    return encoder


def model_folder(path: Path | str | None, root: Path) -> Path:
    """The folder of the bi-encoder at `path` (default: the pipeline's final model under `root`): a local folder,
    or a hub export downloaded; a one-line UdrError where there is none, or it links out."""
    model_dir = Path(path) if path is not None else Paths(root).final_model
    repo_id = hub_id(str(path)) if path is not None else None
    if repo_id is not None:
        model_dir = _download(repo_id)
    if not model_dir.is_dir():
        raise UdrError(
            f"missing model {model_dir}: train one with `dvc repro` (or `udr index`), "
            "or pass the directory of a udr bi-encoder"
        )
    check_no_links_out(model_dir)  # pools, index and declarations are read from inside it only
    return model_dir


def _download(repo_id: str) -> Path:
    """A udr export on the Hugging Face hub, downloaded (safetensors and configs only)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(
            snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.md", "*.parquet"])
        )
    except Exception as exc:  # offline, unknown repo, auth: all one line
        raise UdrError(
            f"missing model {repo_id}: no local folder of that name, and the hub did not give it "
            f"({exc.__class__.__name__}); are you offline?"
        ) from None


DEVICES = ("auto", "cpu", "cuda")


def check_device(device: str) -> str:
    """The device type `device` (one of DEVICES) resolves to here, or a one-line UdrError."""
    check_device_name(device)
    return resolve_device_type(device, "device")


def check_device_name(device) -> None:
    """A one-line UdrError unless `device` is one of DEVICES (checked without torch)."""
    if not isinstance(device, str) or device not in DEVICES:
        raise UdrError(f"bad device {quoted(device)} (expected {', '.join(DEVICES)})")
