"""Demonstration retrievers behind one interface: for test inputs of a task, the k most relevant
items of the task's demonstration pool (its prepared train split), most similar first.

- ``random``: k pool items drawn uniformly, seeded by (seed, task, query text);
- ``bm25``: Okapi BM25 between the test input and the pool's inputs;
- ``sbert``: the off-the-shelf base encoder (all-MiniLM-L6-v2) as sentence-transformers uses it:
  mean pooling, L2-normalised, cosine similarity of the test input and the pool's inputs;
- ``epr``: the EPR baseline (``models/epr``, see :func:`udr.retriever.training.epr_settings`);
- ``udr``: the final UDR retriever (``models/final``) with its pool index from ``udr index``.

EPR and UDR are bi-encoders read as in training: E_q sees ``[I] x``, E_d the rendered
demonstration ``I z`` (see :mod:`udr.encoder`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from udr.errors import UdrError


@dataclass(frozen=True)
class Ranking:
    """Retrieved pool ids (n, k), most similar first, and their similarity scores (n, k)."""

    ids: np.ndarray
    scores: np.ndarray


class PoolRetriever(Protocol):
    pool_ids: np.ndarray

    def rank(self, queries: Sequence[str], k: int, exclude: Sequence[int | None] | None = None) -> Ranking:
        """The k best pool items per query; `exclude[i]` is a pool id query i must not get (itself)."""
        ...


def _check_k(k: int, pool_size: int, excluding: bool) -> None:
    room = pool_size - (1 if excluding else 0)
    if not 1 <= k <= room:
        raise UdrError(
            f"k out of range: asked for {k} demonstrations from a pool of {pool_size} (1 to {room} can be returned)"
        )


def _exclude_positions(pool_ids: np.ndarray, exclude, n: int) -> np.ndarray | None:
    """Pool ids to exclude -> pool positions (-1: none)."""
    if exclude is None:
        return None
    if len(exclude) != n:
        raise UdrError(f"exclude must name one pool id (or None) per query: {len(exclude)} for {n} queries")
    where = {int(i): p for p, i in enumerate(pool_ids)}
    return np.asarray([where.get(int(e), -1) if e is not None else -1 for e in exclude], dtype=np.int64)


class RandomRetriever:
    """k distinct pool items uniformly at random; the same query text always gets the same items."""

    def __init__(self, pool_ids: Sequence[int], seed: int, task: str):
        self.pool_ids = np.asarray(pool_ids, dtype=np.int64)
        self.seed, self.task = seed, task

    def rank(self, queries, k, exclude=None):
        from udr.data.prepare import task_rng

        m = len(self.pool_ids)
        excl = _exclude_positions(self.pool_ids, exclude, len(queries))
        _check_k(k, m, excl is not None)
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
        excl = _exclude_positions(self.pool_ids, exclude, len(queries))
        _check_k(k, len(self.pool_ids), excl is not None)
        ids = np.empty((len(queries), k), dtype=np.int64)
        scores = np.empty((len(queries), k), dtype=np.float32)
        for i, query in enumerate(queries):
            skip = int(excl[i]) if excl is not None and excl[i] >= 0 else None
            top, sc = self.index.top_k(query, k, exclude=skip)
            ids[i], scores[i] = self.pool_ids[top], sc
        return Ranking(ids, scores)


class DenseRetriever:
    """Maximum inner product between E_q(query text) and pre-computed pool embeddings (exact)."""

    def __init__(
        self,
        encoder,
        pool_ids: Sequence[int],
        pool_embeddings: np.ndarray,
        query_text=lambda x: x,
        batch_size: int = 64,
    ):
        from udr.retriever.search import ExactIndex

        self.encoder = encoder
        self.pool_ids = np.asarray(pool_ids, dtype=np.int64)
        if len(pool_embeddings) != len(self.pool_ids):
            raise UdrError(f"pool embeddings have {len(pool_embeddings)} rows for {len(self.pool_ids)} pool items")
        self.pool_embeddings = pool_embeddings
        self.query_text = query_text
        self.batch_size = batch_size
        device = "cpu" if encoder.device.type == "cpu" else str(encoder.device)
        self.index = ExactIndex(pool_embeddings, device)

    def embed_queries(self, queries: Sequence[str]) -> np.ndarray:
        return self.encoder.encode([self.query_text(q) for q in queries], "query", batch_size=self.batch_size)

    def rank(self, queries, k, exclude=None):
        excl = _exclude_positions(self.pool_ids, exclude, len(queries))
        _check_k(k, len(self.pool_ids), excl is not None)
        scores, pos = self.index.search(self.embed_queries(queries), k, exclude=excl)
        return Ranking(self.pool_ids[pos], scores)


# ---------------------------------------------------------------- building a task's retriever


def sbert_encoder(base_dir: Path):
    """The off-the-shelf sentence encoder: one model on both sides, mean pooling, normalised, no
    instruction."""
    from udr.lm.models import load_encoder
    from udr.retriever.encoder import BiEncoder, BiEncoderSettings

    model, tokenizer = load_encoder(Path(base_dir))
    settings = BiEncoderSettings(
        query_instruction=False,
        max_query_length=128,
        max_demo_length=128,
        pooling="mean",
        normalize=True,
        base=str(base_dir),
    )
    return BiEncoder(model.eval(), model, tokenizer, settings)


def method_model_dir(root: Path, method: str) -> Path | None:
    """The model a method reads (None for random and BM25)."""
    from udr.retriever.index import final_model_dir

    return {
        "sbert": root / "models" / "base" / "encoder",
        "epr": root / "models" / "epr",
        "udr": final_model_dir(root),
    }.get(method)


def check_method(method: str) -> None:
    """A one-line error for a method name udr does not know."""
    from udr.config import METHODS

    if method not in METHODS:
        raise UdrError(f"unknown method '{method}'; known methods: {', '.join(METHODS)}")


def build_retriever(method: str, settings, task_name: str, pool, *, progress: bool = False) -> PoolRetriever:
    """The retriever `method` over `pool` (a prepared train frame) of `task_name`."""
    from udr.data.tasks import get_task

    root = settings.root
    ids = np.asarray(pool["id"].to_list(), dtype=np.int64)
    inputs = pool["input"].to_list()
    if method == "random":
        return RandomRetriever(ids, settings.seed, task_name)
    if method == "bm25":
        return BM25Retriever(ids, inputs)
    check_method(method)

    from udr.retriever.encoder import BiEncoder, query_text
    from udr.retriever.index import embed_pool
    from udr.util.distributed import resolve_device_type

    model_dir = method_model_dir(root, method)
    if not model_dir.is_dir():
        step = {"sbert": "udr models", "epr": "udr train --epr", "udr": "udr index"}[method]
        raise UdrError(f"missing model {model_dir}: run `{step}` first")
    device = resolve_device_type(settings.evaluate.device, "evaluate.device")
    batch = settings.mine.batch_size
    if method == "sbert":
        encoder = sbert_encoder(model_dir).to(device)
        emb = encoder.encode(
            inputs, "demo", batch_size=batch, progress=progress, description=f"embedding {task_name} pool (sbert)"
        )
        return DenseRetriever(encoder, ids, emb, batch_size=batch)
    encoder = BiEncoder.load(model_dir).to(device)
    if method == "udr":
        from udr.data.prepare import prepared_file
        from udr.retriever.index import load_index
        from udr.util.files import file_sha256

        emb = load_index(model_dir, task_name, ids, file_sha256(prepared_file(root, task_name, "train")))
    else:
        emb = embed_pool(encoder, task_name, pool, batch, progress)
    instruction = get_task(task_name).instruction
    return DenseRetriever(encoder, ids, emb, lambda x: query_text(instruction, x, encoder.settings), batch_size=batch)
