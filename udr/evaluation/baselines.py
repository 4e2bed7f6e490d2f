"""Demonstration retrievers behind one interface: for test inputs of a task, the k most relevant
items of the task's demonstration pool (its prepared train split), most similar first.

- ``random``: k pool items drawn uniformly, seeded by (seed, task, query text);
- ``bm25``: Okapi BM25 between the test input and the pool's inputs;
- ``sbert``: the off-the-shelf base encoder (all-MiniLM-L6-v2) as sentence-transformers uses it:
  mean pooling, L2-normalised, cosine similarity of the test input and the pool's inputs;
- ``epr``: the EPR baseline (``models/epr``, trained with :func:`udr.retriever.recipes.epr_train_settings`);
- ``udr``: the final UDR retriever (``models/final``) with its pool index from ``udr index``.

:func:`build_retriever` builds a method's retriever over a pool from the model folder it is given; which
folder each method reads in a project is :meth:`udr.paths.Paths.method_model`'s.

EPR and UDR are bi-encoders read as in training: E_q sees ``[I] x``, E_d the rendered
demonstration ``I z`` (see :mod:`udr.retriever.encoder`); they and SBERT rank with
:class:`udr.retriever.search.DenseRetriever`, the retrieval core serving shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from udr.config import METHODS
from udr.data.tasks import Task
from udr.errors import UdrError
from udr.feedback.bm25 import BM25Index
from udr.lm.loading import load_encoder
from udr.paths import METHOD_MODEL_COMMANDS, Paths
from udr.retriever.encoder import BiEncoder, BiEncoderSettings, query_text
from udr.retriever.index import embed_pool, load_index
from udr.retriever.search import DenseRetriever, PoolRetriever, Ranking, check_k, exclude_positions
from udr.util.files import file_sha256
from udr.util.rng import task_rng


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


def check_method(method: str) -> None:
    """A one-line error for a method name udr does not know."""
    if method not in METHODS:
        raise UdrError(f"unknown method '{method}'; known methods: {', '.join(METHODS)}")


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
    embeddings = None
    if method == "udr" and pool_file is not None and Paths.index(model_dir, task.name).is_file():
        embeddings = load_index(model_dir, task, ids, file_sha256(pool_file))
    encoder = BiEncoder.load(model_dir)
    return bi_encoder_retriever(encoder, task, pool, setup.device, setup.batch_size, embeddings, progress)
