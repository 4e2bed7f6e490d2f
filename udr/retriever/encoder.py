"""The UDR bi-encoder: a query encoder E_q and a demonstration encoder E_d, pooled (CLS, as in the
paper, or mean), dot product.

sim(x, z) = E_q([I] x) . E_d(I z), where I is the task instruction and z the whole demonstration
(input and answer, rendered with the task's template): :func:`query_text` and :func:`demo_texts`,
the one definition of what each encoder reads. The instruction goes on the demonstration
side and on the query side when `query_instruction` is true (the paper); the published code
leaves test queries bare. `instruction: false` drops it from both sides (an ablation).

On disk (`BiEncoder.save`): ``query/`` and ``demo/`` (transformers `save_pretrained`, safetensors),
``tokenizer/``, and ``udr_encoder.json`` with the settings below. `BiEncoder.load(path)` reads it back.
A shared bi-encoder (``shared: true``, `train.shared_encoder`: E_q is E_d, one set of weights) is saved
the same way, its one encoder in both directories, so every reader of the two keeps working; `load`
ties them again.

Imports of numpy, torch and transformers are inside the functions that use them, to keep the start of `udr` and of
its commands light.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError, model_serializer, model_validator

from udr.config import EncoderSettings, Pooling, Similarity
from udr.data.tasks import Task
from udr.errors import UdrError, shorten
from udr.lm.loading import load_encoder
from udr.util.files import building_dir, check_no_links_out, inside, json_text, read_json_object
from udr.util.progress import progress_bar
from udr.util.readers import read_json
from udr.util.weights import load_weights, save_tokenizer

SETTINGS_NAME = "udr_encoder.json"
MADE = "a udr bi-encoder"  # what a folder holding SETTINGS_NAME is, in the guard's errors
EXPORT_NAME = "udr_export.json"  # a `udr export` (sentence-transformers) of a bi-encoder, see udr.serving.export


def task_model_dir(folder: Path, task: str) -> Path:
    """The bi-encoder `folder` serves `task` with: the folder itself where it is one bi-encoder (a multi-task
    model serves every task), else its `task` subfolder where that is one (one model per task, as EPR's
    models/epr/<task>/). A folder of per-task models without `task`'s is a one-line error; a missing folder is
    returned as it is, for the caller to say which command makes it."""
    folder = Path(folder)
    if not folder.is_dir() or (folder / SETTINGS_NAME).is_file():
        return folder
    if (folder / task / SETTINGS_NAME).is_file():
        return folder / task
    trained = sorted(p.name for p in folder.iterdir() if (p / SETTINGS_NAME).is_file())
    if not trained:
        raise UdrError(f"missing model {folder}: not a udr bi-encoder, nor a folder of per-task bi-encoders")
    raise UdrError(
        f"missing model {folder / task}: {folder} holds per-task bi-encoders of {shorten(', '.join(trained), 120)}, "
        f"none of {task} (a per-task EPR: `udr train --epr --task {task}`)"
    )


class BiEncoderSettings(EncoderSettings):
    """How a saved bi-encoder reads texts: the `encoder` parameters it was trained with, plus its pooling."""

    pooling: Pooling = "cls"  # resolved: cls (the paper) or mean (e.g. all-MiniLM's own), see base_pooling
    similarity: Similarity = "dot"  # resolved: cosine L2-normalises every embedding (see base_similarity)
    base: str = ""  # the base model directory or spec it was initialised from (provenance only)
    shared: bool = False  # one encoder for both sides (E_q is E_d), see train.shared_encoder

    @model_validator(mode="before")
    @classmethod
    def _normalize_flag(cls, data: Any) -> Any:
        # Models saved before `similarity` existed say `normalize: true|false`.
        if isinstance(data, dict) and "normalize" in data:
            data = dict(data)
            data.setdefault("similarity", "cosine" if data.pop("normalize") else "dot")
        return data

    @model_serializer(mode="wrap")
    def _omit_unshared(self, handler):
        # Two-encoder models (the default) keep writing the settings they always wrote, so their
        # udr_encoder.json, export metadata and model fingerprints stay byte-identical.
        data = handler(self)
        if isinstance(data, dict) and not self.shared:
            data.pop("shared", None)
        return data

    @property
    def normalize(self) -> bool:
        """Whether embeddings are L2-normalised (cosine similarity)."""
        return self.similarity == "cosine"


def _sentence_transformers_module(model_dir: Path, kind: str) -> dict | None:
    """The first entry of a model's sentence-transformers modules.json whose type is `models.<kind>`;
    None without that file, when it is unreadable, or when it has no such module."""
    modules = Path(model_dir) / "modules.json"
    if not modules.is_file():
        return None
    try:
        entries = [e for e in json.loads(modules.read_text()) if isinstance(e, dict)]
        # the module's class name ends its type: sentence_transformers.models.Pooling before version 6, a
        # longer path after
        return next((e for e in entries if str(e.get("type", "")).rsplit(".", 1)[-1] == kind), None)
    except (OSError, ValueError, TypeError, RecursionError):
        return None


def base_pooling(model_dir: Path) -> Pooling:
    """A base encoder's own pooling: what its sentence-transformers config (modules.json and the Pooling
    module's config.json) says, or CLS for a plain transformers model (the paper's bert-base)."""
    pooling = _sentence_transformers_module(model_dir, "Pooling")
    if pooling is None:
        return "cls"
    try:
        config = json.loads((Path(model_dir) / pooling["path"] / "config.json").read_text())
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return "cls"
    if not isinstance(config, dict):
        return "cls"
    if config.get("pooling_mode") in ("mean", "cls"):  # sentence-transformers 6 names the mode
        return config["pooling_mode"]
    if config.get("pooling_mode_mean_tokens"):
        return "mean"
    if config.get("pooling_mode_cls_token"):
        return "cls"
    modes = ", ".join(k for k, v in config.items() if k.startswith("pooling_mode") and v) or "none"
    raise UdrError(f"{model_dir}: pooling {modes} is not supported (cls or mean); set encoder.pooling")


def resolve_pooling(setting: str, base_dir: Path) -> Pooling:
    """The pooling a new bi-encoder gets: `encoder.pooling`, where auto is the base model's own."""
    return base_pooling(base_dir) if setting == "auto" else setting


def base_similarity(model_dir: Path) -> Similarity:
    """A base encoder's own similarity: cosine where its sentence-transformers modules.json has a Normalize
    module (all-MiniLM-L6-v2), else the dot product (a plain transformers model, the paper's bert-base)."""
    return "dot" if _sentence_transformers_module(model_dir, "Normalize") is None else "cosine"


def resolve_similarity(setting: str, base_dir: Path) -> Similarity:
    """The similarity a new bi-encoder gets: `encoder.similarity`, where auto is the base model's own."""
    return base_similarity(base_dir) if setting == "auto" else setting


def query_text(instruction: str, input: str, settings: EncoderSettings) -> str:
    """What E_q reads for a query x: [I] x (the instruction when `instruction` and `query_instruction`)."""
    return f"{instruction}{input}" if settings.instruction and settings.query_instruction else input


def demo_texts(task: Task, inputs: Sequence[str], answers: Sequence[str], settings: EncoderSettings) -> list[str]:
    """What E_d reads for each demonstration z = (input, answer) of a task's pool: [I] z, the
    demonstration rendered with the task's template (the instruction when `instruction`)."""
    instruction = task.instruction if settings.instruction else ""
    return [instruction + task.render(i, a) for i, a in zip(inputs, answers)]


# Characters kept per token an encoder reads before tokenising (far above any real token's length, so the
# kept tokens are those of the whole text).
CHARS_PER_TOKEN = 1000


def encode_batches(texts: Sequence[str], batch_size: int) -> list[list[int]]:
    """The positions of `texts` in the batches inference embeds them in: cut from the texts sorted by
    (character length, position), so padding stays small and the batching depends on the texts only."""
    order = sorted(range(len(texts)), key=lambda i: (len(texts[i]), i))
    return [order[lo : lo + batch_size] for lo in range(0, len(order), batch_size)]


def pool_hidden(hidden, attention_mask, settings: EncoderSettings):
    """Pooled embeddings (B, d) of last hidden states (B, L, d): the first token's (cls) or the mean
    over the real tokens (mean), normalised to unit length when the similarity is cosine."""
    if settings.pooling == "cls":
        emb = hidden[:, 0]
    elif settings.pooling == "mean":
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        emb = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    else:
        raise UdrError(f"unknown pooling {settings.pooling!r} (expected cls or mean)")
    if settings.normalize:
        emb = emb / emb.norm(dim=-1, keepdim=True).clamp(min=1e-12)
    return emb


class BiEncoder:
    """Two transformers encoders sharing one tokenizer (or one encoder for both sides where
    ``settings.shared``: then ``demo_model is query_model``). `embed` keeps gradients (training);
    `encode` is batched, length-sorted inference returning numpy float32."""

    def __init__(self, query_model: Any, demo_model: Any, tokenizer: Any, settings: BiEncoderSettings):
        self.query_model = query_model
        self.demo_model = demo_model
        self.tokenizer = tokenizer
        self.settings = settings

    # ------------------------------------------------------------ construction and I/O

    @classmethod
    def from_base(cls, base_dir: Path, settings: BiEncoderSettings) -> BiEncoder:
        """Both encoders initialised from the same resolved base encoder (two independent copies, or
        one encoder for both where ``settings.shared``)."""
        query_model, tokenizer = load_encoder(base_dir)
        demo_model = query_model if settings.shared else load_encoder(base_dir)[0]
        return cls(query_model, demo_model, tokenizer, settings)

    @staticmethod
    def settings_file(path: Path) -> Path:
        """The file holding the settings of the bi-encoder at `path`: `udr_encoder.json` in a udr model
        directory, `udr_export.json` in a udr export (`udr export`); the former where neither exists."""
        path = Path(path)
        if not (path / SETTINGS_NAME).is_file() and (path / EXPORT_NAME).is_file():
            return path / EXPORT_NAME
        return path / SETTINGS_NAME

    @classmethod
    def load_settings(cls, path: Path) -> BiEncoderSettings:
        """The settings of the bi-encoder at `path`: a udr model directory, or a udr export."""
        meta = cls.settings_file(path)
        key = "encoder" if meta.name == EXPORT_NAME else None
        if not meta.is_file():
            raise UdrError(
                f"missing model: {path} is not a udr bi-encoder (no {SETTINGS_NAME}); "
                "train one with `udr train` or pass --model"
            )
        raw = read_json(meta, "bi-encoder settings", expect=dict)
        try:
            return BiEncoderSettings.model_validate(raw.get(key) if key else raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            reason = f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
            raise UdrError(f"{meta}: unreadable bi-encoder settings ({shorten(reason, 160)})") from None
        except RecursionError:
            raise UdrError(f"{meta}: unreadable bi-encoder settings (nested too deeply)") from None

    @classmethod
    def part_dirs(cls, path: Path) -> tuple[Path, Path, Path]:
        """(E_q, E_d, tokenizer) directories of a udr model directory or of a udr export (its routes: folders
        inside it). A folder with a link out of itself is a one-line error (:func:`check_no_links_out`)."""
        path, meta = Path(path), cls.settings_file(path)
        check_no_links_out(path)
        if meta.name != EXPORT_NAME:
            return path / "query", path / "demo", path / "tokenizer"
        routes = read_json_object(meta, "export metadata", "export it again").get("routes", {})
        if not isinstance(routes, dict):
            raise UdrError(f'bad routes in {meta}: expected an object {{"query": DIR, "demo": DIR}}')
        query = inside(path, routes.get("query", "query"), f"route 'query' of {meta}")
        demo = inside(path, routes.get("demo", "demo"), f"route 'demo' of {meta}")
        return query, demo, query

    @classmethod
    def load(cls, path: Path) -> BiEncoder:
        """Load a saved bi-encoder directory, or a udr export of one (safetensors only)."""
        import torch
        from transformers import AutoModel, AutoTokenizer

        path = Path(path)
        settings = cls.load_settings(path)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        rebuild = "train it again (`udr train`) or pass another --model"
        query_dir, demo_dir, tokenizer_dir = cls.part_dirs(path)
        models = [
            load_weights(
                lambda d=d: AutoModel.from_pretrained(
                    d, use_safetensors=True, dtype=torch.float32, trust_remote_code=False
                ),
                d,
                rebuild,
            ).eval()
            for d in ((query_dir,) if settings.shared else (query_dir, demo_dir))
        ]
        tokenizer = load_weights(
            lambda: AutoTokenizer.from_pretrained(tokenizer_dir, trust_remote_code=False), tokenizer_dir, rebuild
        )
        return cls(models[0], models[-1], tokenizer, settings)

    def share(self, shared: bool) -> BiEncoder:
        """Tie E_d to E_q (one encoder for both sides: E_q's weights; E_d's are dropped) or untie a shared
        encoder (E_d becomes an independent copy of it); records the choice in the settings."""
        if shared:
            self.demo_model = self.query_model
        elif self.demo_model is self.query_model:
            self.demo_model = copy.deepcopy(self.query_model)
        self.settings = self.settings.model_copy(update={"shared": shared})
        return self

    def save(self, path: Path) -> None:
        """Write the bi-encoder to `path` (replaced atomically: built beside it, then swapped in)."""
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        with building_dir(Path(path), (SETTINGS_NAME,), MADE) as tmp:
            self.query_model.save_pretrained(tmp / "query", safe_serialization=True)
            self.demo_model.save_pretrained(tmp / "demo", safe_serialization=True)
            save_tokenizer(self.tokenizer, tmp / "tokenizer")
            (tmp / SETTINGS_NAME).write_text(json_text(self.settings.model_dump()))

    # ------------------------------------------------------------ embedding

    def to(self, device) -> BiEncoder:
        self.query_model.to(device)
        self.demo_model.to(device)
        return self

    def train(self, mode: bool = True) -> BiEncoder:
        self.query_model.train(mode)
        self.demo_model.train(mode)
        return self

    def parameters(self):
        yield from self.query_model.parameters()
        if self.demo_model is not self.query_model:  # a shared encoder's parameters once
            yield from self.demo_model.parameters()

    @property
    def device(self):
        return next(self.query_model.parameters()).device

    def _model(self, side: str):
        if side not in ("query", "demo"):
            raise ValueError(f"side must be 'query' or 'demo', got {side!r}")
        return self.query_model if side == "query" else self.demo_model

    def _max_length(self, side: str) -> int:
        return self.settings.max_query_length if side == "query" else self.settings.max_demo_length

    def embed(self, texts: Sequence[str], side: str, chunk: int = 0):
        """Pooled embeddings (n, d) of `texts` by the `side` ("query" or "demo") encoder, with gradients.

        chunk > 0: the texts go through the model in chunks of that many, cut from the texts sorted by
        token length, so each chunk pads only to its own longest (the rows come back in the order of
        `texts`). Without dropout the result equals one padded batch up to float rounding; in training,
        dropout masks are drawn per chunk, so the random draws differ from one batch's.
        """
        import torch

        texts = list(texts)
        if chunk <= 0 or len(texts) <= chunk:
            return self._pool(self._tokenize(texts, side, padding=True), side)
        features = self._tokenize(texts, side, padding=False)
        order = sorted(range(len(texts)), key=lambda i: (len(features["input_ids"][i]), i))
        parts = []
        for lo in range(0, len(order), chunk):
            idx = order[lo : lo + chunk]
            batch = self.tokenizer.pad({k: [v[i] for i in idx] for k, v in features.items()}, return_tensors="pt")
            parts.append(self._pool(batch, side))
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.tensor(order)] = torch.arange(len(order))
        return torch.cat(parts)[inverse.to(parts[0].device)]

    def _tokenize(self, texts: list[str], side: str, padding: bool):
        # Only the first max_length tokens are read: a text is cut long before tokenising it, so a
        # megabyte query costs what its start does (CHARS_PER_TOKEN leaves every kept token intact).
        limit = self._max_length(side) * CHARS_PER_TOKEN
        return self.tokenizer(
            [t[:limit] for t in texts],
            padding=padding,
            truncation=True,
            max_length=self._max_length(side),
            return_tensors="pt" if padding else None,
        )

    def _pool(self, batch, side: str):
        """Pooled (and, for cosine, normalised) embeddings of one padded, tokenised batch."""
        batch = batch.to(self.device)
        hidden = self._model(side)(**batch).last_hidden_state
        return pool_hidden(hidden, batch["attention_mask"], self.settings)

    def encode(
        self,
        texts: Sequence[str],
        side: str,
        batch_size: int = 64,
        progress: bool = False,
        description: str = "embedding",
    ):
        """Pooled embeddings (see `embed`) as a float32 numpy array (n, d), in the order of `texts`, without
        gradients. Batches are cut
        from length-sorted texts, so padding stays small; the result does not depend on it beyond
        float rounding."""
        import numpy as np
        import torch

        texts = list(texts)
        out = None
        was_training = self._model(side).training
        self._model(side).eval()
        with torch.inference_mode(), progress_bar(progress) as bar:
            job = bar.add_task(description, total=len(texts))
            for idx in encode_batches(texts, batch_size):
                emb = self.embed([texts[i] for i in idx], side).float().cpu().numpy()
                if out is None:
                    out = np.empty((len(texts), emb.shape[1]), dtype=np.float32)
                out[idx] = emb
                bar.update(job, advance=len(idx))
        self._model(side).train(was_training)
        if out is None:
            return np.empty((0, self.dimension), dtype=np.float32)
        return out

    @property
    def dimension(self) -> int:
        return int(self.query_model.config.hidden_size)
