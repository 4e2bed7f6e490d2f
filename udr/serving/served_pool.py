"""A pool served for retrieval: the pool with the searcher over its embeddings, built as one object, and its
search (with metadata filters and label-aware selection).

UDR embeds a pool with its task instruction (the model's `udr index` of a pipeline pool where it has one, else
the on-disk cache, :mod:`udr.serving.pool_cache`); where the base encoder serves the pool
(:meth:`udr.serving.served_model.ServedModel.base_reason`) it embeds the pool's inputs as the sbert baseline does.

Imports of the udr modules that load numpy or torch are inside the functions that use them, to keep
`from udr import Retriever` and `udr retrieve` light.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from udr.errors import UdrError
from udr.paths import Paths
from udr.serving.served_model import ServedModel
from udr.util.files import file_sha256

if TYPE_CHECKING:
    from udr.retriever.label_selection import LabelSelection

SEARCHES = ("exact", "approximate")


@dataclass(frozen=True)
class ServedPool:
    """A pool and the searcher over its embeddings: what one retrieval reads, swapped as one object."""

    pool: Any
    searcher: Any
    base: str = ""  # served with the base encoder: BY_EVIDENCE or AS_ASKED ("": UDR serves it)
    own_shape: bool = False  # an own pool read in the generation shape (no task's): its outputs are its labels
    # Metadata filter -> the searcher over the rows that pass it (udr.serving.filters.filtered_search).
    filtered: dict = field(default_factory=dict, compare=False, repr=False)

    def search(
        self,
        queries: list[str],
        k: int,
        *,
        diversity: float = 0.0,
        selection: LabelSelection | None = None,
        where: dict | None = None,
        batch_size: int = 64,
    ) -> list[list[tuple[int, float]]]:
        """(pool id, similarity) of the k best rows for each query, `batch_size` queries at a time: by similarity,
        or MMR's pick order with `diversity` (:meth:`udr.retriever.search.DenseRetriever.rank`), or the label-aware
        order with an active `selection` (:mod:`udr.serving.selection`; an own-shaped pool's outputs are its
        labels); among the rows that pass `where` only (:mod:`udr.serving.filters`)."""
        searcher = self.searcher
        if where:  # search the rows that pass only
            from udr.serving.filters import filtered_search

            searcher, k = filtered_search(self, where, k)
            if searcher is None:
                return [[] for _ in queries]
        labels = None
        if selection is not None and selection.active:
            from udr.serving.selection import check_label_k, label_ranking, pool_labels

            labels = pool_labels(self.pool, own_shape=self.own_shape)
        if not queries:  # the checks a query would meet: an empty batch checks k and the options against the pool
            from udr.retriever.search import check_k

            if labels is None:
                check_k(k, len(searcher.pool_ids), False)
            else:
                check_label_k(searcher, self.pool, labels, k, selection)
            return []
        out: list[list[tuple[int, float]]] = []
        for lo in range(0, len(queries), batch_size):
            chunk = queries[lo : lo + batch_size]
            if labels is None:
                ranking = searcher.rank(chunk, k, diversity=diversity)
                ranked = zip(ranking.ids, ranking.similarities)
            else:
                ranked = label_ranking(searcher, self.pool, labels, chunk, k, selection)
            out.extend(
                [(int(pid), float(similarity)) for pid, similarity in zip(ids, scores)] for ids, scores in ranked
            )
        return out


def check_search(search: str, device_type: str) -> str:
    """`search` if it is a known search on this device, else a one-line UdrError."""
    if search not in SEARCHES:
        raise UdrError(f"bad search {search!r}: expected one of {', '.join(SEARCHES)}")
    if search == "approximate" and device_type != "cpu":
        raise UdrError("approximate search runs on the CPU (faiss); on a GPU, exact search is the fast one")
    return search


def serve_pool(
    model: ServedModel,
    pool,
    base: str = "",
    *,
    search: str = "exact",
    cache_dir: Path | None = None,
    batch_size: int = 64,
    progress: bool = False,
) -> ServedPool:
    """`pool` with a searcher over its embeddings: UDR's (the index, the cache, or embedded now), or with
    `base` the base encoder's of the pool's inputs, as the sbert baseline embeds them (the cache, or embedded
    now)."""
    from udr.retriever.encoder import query_text
    from udr.retriever.search import DenseRetriever

    approximate = search == "approximate"
    if base:
        from udr.serving.pool_cache import cached_embeddings

        encoder = model.base_encoder()
        emb = cached_embeddings(
            encoder,
            model.base_fingerprint(),
            list(pool.inputs),
            pool,
            cache_dir=cache_dir,
            batch_size=batch_size,
            progress=progress,
        ).embeddings
        searcher = DenseRetriever(encoder, pool.ids, emb, batch_size=batch_size, approximate=approximate)
        return ServedPool(pool, searcher, base)
    emb = _pool_embeddings(model, pool, cache_dir, batch_size, progress)
    instruction, settings = pool.task.instruction, model.encoder.settings
    searcher = DenseRetriever(
        model.encoder,
        pool.ids,
        emb,
        lambda x: query_text(instruction, x, settings),
        batch_size=batch_size,
        approximate=approximate,
    )
    return ServedPool(pool, searcher)


def _pool_embeddings(model: ServedModel, pool, cache_dir: Path | None, batch_size: int, progress: bool):
    """The model's `udr index` for a pipeline pool when it has one (checked), else the cache."""
    from udr.retriever.index import load_index
    from udr.serving.pool_cache import cached_pool_embeddings

    if pool.prepared and Paths.index(model.model_dir, pool.name).is_file():
        return load_index(model.model_dir, pool.task, pool.ids, file_sha256(Path(pool.source)), model.fingerprint)
    return cached_pool_embeddings(
        model.encoder, model.fingerprint, pool, cache_dir=cache_dir, batch_size=batch_size, progress=progress
    ).embeddings
