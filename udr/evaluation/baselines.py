"""Demonstration retrievers behind one interface: for test inputs of a task, the k most relevant
items of the task's demonstration pool (its prepared train split), most similar first.

- ``random``: k pool items drawn uniformly, seeded by (seed, task, query text);
- ``bm25``: Okapi BM25 between the test input and the pool's inputs;
- ``sbert``: the off-the-shelf base encoder (all-MiniLM-L6-v2) as sentence-transformers uses it:
  mean pooling, L2-normalised, cosine similarity of the test input and the pool's inputs;
- ``epr``: the EPR baseline (``models/epr``, see :func:`udr.retriever.training.epr_settings`);
- ``udr``: the final UDR retriever (``models/final``) with its pool index from ``udr index``.

EPR and UDR are bi-encoders read as in training: E_q sees ``[I] x``, E_d the rendered
demonstration ``I z`` (see :mod:`udr.retriever.encoder`); they and SBERT rank with
:class:`udr.retriever.search.DenseRetriever`, the retrieval core serving shares.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from udr.config import METHODS
from udr.errors import UdrError
from udr.paths import Paths
from udr.retriever.search import DenseRetriever, PoolRetriever, Ranking, check_k, exclude_positions
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
        from udr.feedback.bm25 import BM25Index

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


# ---------------------------------------------------------------- building a task's retriever


@dataclass(frozen=True)
class MethodModel:
    """The model a learned method reads, and the command that makes it."""

    path: Callable[[Paths], Path]
    made_by: str


# The methods of config.METHODS that read a model (random and BM25 read none).
METHOD_MODELS: dict[str, MethodModel] = {
    "sbert": MethodModel(lambda paths: paths.base_model("encoder"), "udr models"),
    "epr": MethodModel(lambda paths: paths.epr_model, "udr train --epr"),
    "udr": MethodModel(lambda paths: paths.final_model, "udr index"),
}


def check_method(method: str) -> None:
    """A one-line error for a method name udr does not know."""
    if method not in METHODS:
        raise UdrError(f"unknown method '{method}'; known methods: {', '.join(METHODS)}")


def sbert_encoder(base_dir: Path):
    """The off-the-shelf sentence encoder: one model on both sides, mean pooling, normalised, no
    instruction."""
    from udr.lm.loading import load_encoder
    from udr.retriever.encoder import BiEncoder, BiEncoderSettings

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


def build_retriever(
    method: str, settings, task_name: str, pool, *, progress: bool = False, model_dir: Path | None = None
) -> PoolRetriever:
    """The retriever `method` over `pool` (a prepared train frame) of `task_name`; `model_dir`: the
    bi-encoder of epr / udr (default: the pipeline's), whose pool is embedded here where it has no index."""
    check_method(method)
    ids = np.asarray(pool["id"].to_list(), dtype=np.int64)
    inputs = pool["input"].to_list()
    if method == "random":
        return RandomRetriever(ids, settings.seed, task_name)
    if method == "bm25":
        return BM25Retriever(ids, inputs)

    from udr.util.distributed import resolve_device_type

    model = METHOD_MODELS[method]
    own = model_dir is not None
    model_dir = Path(model_dir) if own else model.path(settings.paths)
    if not model_dir.is_dir():
        raise UdrError(f"missing model {model_dir}: run `{model.made_by}` first")
    if method == "sbert":
        batch = settings.mine.batch_size
        encoder = sbert_encoder(model_dir).to(resolve_device_type(settings.evaluate.device, "evaluate.device"))
        description = f"embedding {task_name} pool (sbert)"
        emb = encoder.encode(inputs, "demo", batch_size=batch, progress=progress, description=description)
        return DenseRetriever(encoder, ids, emb, batch_size=batch)
    from udr.retriever.encoder import BiEncoder
    from udr.retriever.index import load_index
    from udr.util.files import file_sha256

    encoder = BiEncoder.load(model_dir)
    # UDR reads its index where `udr index` wrote one; a pool without one (a task added since) is embedded here.
    if method == "udr" and Paths.index(model_dir, task_name).is_file():
        emb = load_index(model_dir, task_name, ids, file_sha256(settings.paths.prepared(task_name, "train")))
        return bi_encoder_retriever(encoder, settings, task_name, pool, embeddings=emb)
    return bi_encoder_retriever(encoder, settings, task_name, pool, progress=progress)


def bi_encoder_retriever(
    encoder, settings, task_name: str, pool, *, embeddings: np.ndarray | None = None, progress: bool = False
) -> DenseRetriever:
    """A UDR-style bi-encoder (UDR, EPR, any round's model, or the initial encoder) over `pool`, reading
    queries and demonstrations as training does; `embeddings`: the pool's, if already computed."""
    from udr.retriever.encoder import query_text
    from udr.retriever.index import embed_pool
    from udr.util.distributed import resolve_device_type

    batch = settings.mine.batch_size
    encoder = encoder.to(resolve_device_type(settings.evaluate.device, "evaluate.device"))
    task = settings.task(task_name)
    if embeddings is None:
        embeddings = embed_pool(encoder, task, pool, batch, progress)
    return DenseRetriever(
        encoder,
        pool["id"].to_list(),
        embeddings,
        lambda x: query_text(task.instruction, x, encoder.settings),
        batch_size=batch,
    )


def initial_bi_encoder(settings):
    """UDR's starting point before any training (:func:`udr.retriever.training.initial_bi_encoder` on the
    project's base encoder)."""
    from udr.retriever.training import initial_bi_encoder as from_base

    base = settings.paths.base_model("encoder")
    if not base.is_dir():
        raise UdrError(f"missing model {base}: run `udr models` first")
    return from_base(settings, base)
