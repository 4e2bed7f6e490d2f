"""Exact maximum-inner-product top-K search (faiss `IndexFlatIP` on CPU, torch matmul + topk on
an accelerator), and the dense retriever built on it: the one retrieval core that mining, evaluation
(EPR, UDR, SBERT) and serving share. Results are deterministic: scores descend and equal scores (as
computed in float32) are broken by lower pool index first. Serving may instead search a large pool
approximately (:class:`ApproximateIndex`, a faiss IVF index with a calibrated recall).

Imports of faiss and torch are inside the functions that use them, to keep `from udr import Retriever` and `udr
retrieve` light.
"""

from __future__ import annotations

import importlib.util
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from udr.errors import UdrError

# Maximal marginal relevance re-ranks this many times k of the most similar demonstrations.
MMR_FETCH = 4

# Neighbours fetched beyond the k needed, so that a tie at the k-th place can usually be resolved
# without a second search (see `_select`).
_EXTRA = 8


def exact_top_k(
    queries: np.ndarray,
    pool: np.ndarray,
    k: int,
    exclude: np.ndarray | None = None,
    device: str = "cpu",
    batch_size: int = 4096,
) -> tuple[np.ndarray, np.ndarray]:
    """The k pool rows with the largest inner product with each query, best first: a one-off
    :class:`ExactIndex` search (see :meth:`ExactIndex.search` for the contract)."""
    return ExactIndex(pool, device).search(queries, k, exclude, batch_size)


class ExactIndex:
    """Exact maximum-inner-product search over a fixed pool (m, d), built once, searched many times.

    device "cpu" holds a faiss `IndexFlatIP`; any other torch device string ("cuda", "cuda:1")
    holds the pool as a tensor there and searches with torch matmul + topk. `use_faiss=False`
    takes the torch route on the CPU too (tests compare the two), and so does an environment without
    faiss (a GPU machine's, where the search runs in torch anyway).
    """

    def __init__(self, pool: np.ndarray, device: str = "cpu", use_faiss: bool | None = None):
        self.pool = _as_matrix(pool, "pool")
        if len(self.pool) == 0:
            raise UdrError("empty pool: nothing to search (the pool has 0 rows)")
        self.use_faiss = device == "cpu" and _has_faiss() if use_faiss is None else use_faiss
        if self.use_faiss and device != "cpu":
            raise UdrError(f"faiss search runs on the CPU only, not on device '{device}'")
        if self.use_faiss:
            import faiss

            self._faiss = faiss.IndexFlatIP(self.pool.shape[1])
            self._faiss.add(self.pool)
        else:
            import torch

            try:
                dev = torch.device(device)
            except (RuntimeError, ValueError) as exc:
                raise UdrError(f"bad device '{device}': {exc}") from None
            if dev.type == "cuda" and not torch.cuda.is_available():
                raise UdrError(f"device '{device}' requested but CUDA is not available")
            self._tensor = torch.from_numpy(self.pool).to(dev)

    def __len__(self) -> int:
        return len(self.pool)

    def search(
        self, queries: np.ndarray, k: int, exclude: np.ndarray | None = None, batch_size: int = 4096
    ) -> tuple[np.ndarray, np.ndarray]:
        """The k pool rows with the largest inner product with each query, best first.

        queries: (n, d), made contiguous float32. `exclude[i]` is a pool index that query i must
        not get back (its own row when the queries are pool rows), or -1 for none; the list still
        has k entries. Returns (scores (n, k) float32, indices (n, k) int64), scores descending,
        ties by lower pool index first.

        Each query batch (`batch_size` queries; on torch devices it holds a batch_size x m float32
        score matrix) first fetches k (+1 with exclusion) + 8 neighbours, re-sorts them by
        (-score, index) and keeps the first k. That order is exact whenever the k-th kept score is
        strictly above the lowest fetched score (every unfetched row scores at most that). Rows
        where it is not (a tie across the fetch boundary) are redone with every score considered,
        so the result is exact for ties of any size. "Tie" means equal float32 scores as computed;
        the faiss and torch paths may differ in the last bit of a score and hence in the order of
        near-ties. The torch path assumes full-fp32 matmul (TF32 off, torch's default).
        """
        queries = _as_matrix(queries, "queries")
        n, m = len(queries), len(self.pool)
        if queries.shape[1] != self.pool.shape[1]:
            raise UdrError(
                f"dimension mismatch: queries have dimension {queries.shape[1]}, pool has {self.pool.shape[1]}"
            )
        k = int(k)
        room = m - (1 if exclude is not None else 0)
        if k < 1 or k > room:
            which = "other " if exclude is not None else ""
            raise UdrError(
                f"k out of range: asked for {k} neighbours from a pool of {m} "
                f"(at most {room} {which}rows can be returned)"
            )
        if batch_size < 1:
            raise UdrError(f"batch_size must be at least 1, got {batch_size}")
        if exclude is not None:
            exclude = np.asarray(exclude)
            if exclude.shape != (n,) or not np.issubdtype(exclude.dtype, np.integer):
                raise UdrError(
                    f"exclude must be {n} integer pool indices (-1 for none), "
                    f"got shape {exclude.shape} dtype {exclude.dtype}"
                )
            exclude = exclude.astype(np.int64)
            if n and (exclude.min() < -1 or exclude.max() >= m):
                raise UdrError(f"exclude holds an index outside the pool of {m} rows (use -1 for none)")
        if n == 0:
            return np.empty((0, k), np.float32), np.empty((0, k), np.int64)
        if self.use_faiss:
            return self._faiss_search(queries, k, exclude, batch_size)
        return self._torch_search(queries, k, exclude, batch_size)

    def _faiss_search(self, queries, k, exclude, batch_size):
        m = len(self.pool)
        out_s = np.empty((len(queries), k), np.float32)
        out_i = np.empty((len(queries), k), np.int64)
        for lo in range(0, len(queries), batch_size):
            rows = np.arange(lo, min(lo + batch_size, len(queries)))
            fetch = _fetch_size(k, exclude, m)
            while len(rows):
                scores, idx = self._faiss.search(queries[rows], fetch)
                ex = exclude[rows] if exclude is not None else None
                s, i, ok = _select(scores, idx, k, ex, m)
                out_s[rows[ok]], out_i[rows[ok]] = s[ok], i[ok]
                if fetch >= m and not ok.all():
                    raise UdrError("faiss returned an incomplete ranking (non-finite scores?)")
                # Ties across the fetch boundary: search those rows again, fetching 4x as many.
                rows, fetch = rows[~ok], min(m, fetch * 4)
        return out_s, out_i

    def _torch_search(self, queries, k, exclude, batch_size):
        import torch

        m = len(self.pool)
        pool_t = self._tensor
        fetch = _fetch_size(k, exclude, m)
        out_s = np.empty((len(queries), k), np.float32)
        out_i = np.empty((len(queries), k), np.int64)
        with torch.inference_mode():
            for lo in range(0, len(queries), batch_size):
                hi = min(lo + batch_size, len(queries))
                full = torch.from_numpy(queries[lo:hi]).to(pool_t.device) @ pool_t.T
                top = torch.topk(full, fetch, dim=1, largest=True, sorted=True)
                scores, idx = top.values.cpu().numpy(), top.indices.cpu().numpy()
                ex = exclude[lo:hi] if exclude is not None else None
                s, i, ok = _select(scores, idx, k, ex, m)
                if not ok.all():
                    # Ties across the fetch boundary: rank those rows over all m scores (same values).
                    bad = np.flatnonzero(~ok)
                    all_s = full[torch.from_numpy(bad).to(pool_t.device)].cpu().numpy()
                    all_i = np.broadcast_to(np.arange(m, dtype=np.int64), all_s.shape)
                    ex_bad = ex[bad] if ex is not None else None
                    s[bad], i[bad], _ = _select(all_s, all_i, k, ex_bad, m)
                out_s[lo:hi], out_i[lo:hi] = s, i
        return out_s, out_i


class ApproximateIndex:
    """Approximate maximum-inner-product search for large pools: a faiss inverted-file index
    (`IndexIVFFlat`: k-means cells, a query scans only the `nprobe` cells nearest to it).

    `nprobe` is calibrated when the index is built: `calibration` pool rows (seeded) serve as queries,
    and nprobe doubles until their recall@k against exact search (their own row left out) reaches
    `target_recall` (or every cell is scanned). Searching returns what faiss finds, best first, with
    the ordering contract of :meth:`ExactIndex.search` among the rows found; the recall on real
    queries is measured by benchmarks/retrieve.py.
    """

    def __init__(
        self,
        pool: np.ndarray,
        *,
        k: int = 8,
        target_recall: float = 0.99,
        calibration: int = 256,
        train_rows: int = 20_000,
        seed: int = 0,
    ):
        import faiss

        self.pool = _as_matrix(pool, "pool")
        m, dim = self.pool.shape
        if m == 0:
            raise UdrError("empty pool: nothing to search (the pool has 0 rows)")
        rng = np.random.default_rng(seed)
        self.nlist = max(1, int(round(np.sqrt(m))))
        quantizer = faiss.IndexFlatIP(dim)
        self._faiss = faiss.IndexIVFFlat(quantizer, dim, self.nlist, faiss.METRIC_INNER_PRODUCT)
        self._faiss.cp.seed = seed
        # faiss only warns below 39 rows per cell (k-means runs the same): a pool of under ~1,500 rows has fewer
        self._faiss.cp.min_points_per_centroid = 1
        train = self.pool if m <= train_rows else self.pool[np.sort(rng.choice(m, train_rows, replace=False))]
        self._faiss.train(train)
        self._faiss.add(self.pool)
        self._quantizer = quantizer  # the IVF index does not own it
        self.nprobe, self.calibrated_recall = self._calibrate(rng, min(k, m - 1), target_recall, calibration)

    def __len__(self) -> int:
        return len(self.pool)

    def _calibrate(self, rng, k: int, target: float, n: int) -> tuple[int, float]:
        m = len(self.pool)
        if k < 1:
            return self.nlist, 1.0
        rows = np.sort(rng.choice(m, min(n, m), replace=False))
        _, want = ExactIndex(self.pool).search(self.pool[rows], k, exclude=rows)
        nprobe = 1
        while True:
            self._faiss.nprobe = nprobe
            _, got = self.search(self.pool[rows], k, exclude=rows)
            recall = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(want, got)]))
            if recall >= target or nprobe >= self.nlist:
                return nprobe, recall
            nprobe = min(self.nlist, nprobe * 2)

    def search(
        self, queries: np.ndarray, k: int, exclude: np.ndarray | None = None, batch_size: int = 4096
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores (n, k), pool indices (n, k)) of the best rows found, as :meth:`ExactIndex.search`
        (arguments and ordering), except that a true neighbour in an unscanned cell is missed; when
        fewer than k rows are found the search is widened to every cell for that query."""
        queries = _as_matrix(queries, "queries")
        m = len(self.pool)
        out_s = np.empty((len(queries), k), np.float32)
        out_i = np.empty((len(queries), k), np.int64)
        fetch = _fetch_size(k, exclude, m)
        for lo in range(0, len(queries), batch_size):
            hi = min(lo + batch_size, len(queries))
            scores, idx = self._faiss.search(queries[lo:hi], fetch)
            ex = exclude[lo:hi] if exclude is not None else None
            s, i, _ = _select(scores, idx, k, ex, m)
            missing = (i < 0) if ex is None else (i < 0) | (i == ex[:, None])  # kept only as filler
            short = np.flatnonzero(missing.any(axis=1))
            if len(short):  # too few rows in the scanned cells: scan them all
                nprobe, self._faiss.nprobe = self._faiss.nprobe, self.nlist
                scores, idx = self._faiss.search(queries[lo:hi][short], fetch)
                self._faiss.nprobe = nprobe
                s[short], i[short], _ = _select(scores, idx, k, ex[short] if ex is not None else None, m)
            out_s[lo:hi], out_i[lo:hi] = s, i
        return out_s, out_i


def _has_faiss() -> bool:
    return importlib.util.find_spec("faiss") is not None


def _as_matrix(x, name: str) -> np.ndarray:
    """`x` as a contiguous float32 (rows, dim) array with finite values, or a UdrError."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise UdrError(f"{name} must be a 2-D (rows, dim) array, got shape {x.shape}")
    if x.shape[1] == 0:
        raise UdrError(f"{name} have dimension 0")
    if not np.isfinite(x).all():
        raise UdrError(f"{name} contain NaN or infinite values")
    return x


def _fetch_size(k: int, exclude: np.ndarray | None, m: int) -> int:
    return min(m, k + (1 if exclude is not None else 0) + _EXTRA)


def _select(scores: np.ndarray, idx: np.ndarray, k: int, exclude: np.ndarray | None, m: int):
    """Exact top-k from fetched candidates: (scores (r, k), indices (r, k), trusted (r,)).

    `scores`/`idx` (r, f) hold, per row, the f best pool rows in any order. Rows are re-sorted by
    (-score, index) with excluded entries last. A row is trusted when all m were fetched or its
    k-th kept score is strictly above its lowest fetched score: rows left out score no higher than
    that, so none of them can belong in the top k.
    """
    drop = idx < 0
    if exclude is not None:
        drop |= idx == exclude[:, None]
    order = np.lexsort((idx, -scores, drop), axis=1)
    s = np.take_along_axis(scores, order, axis=1)[:, :k]
    i = np.take_along_axis(idx, order, axis=1)[:, :k]
    kept_dropped = np.take_along_axis(drop, order, axis=1)[:, :k].any(axis=1)
    if scores.shape[1] >= m:
        trusted = ~kept_dropped
    else:
        trusted = (s[:, -1] > scores.min(axis=1)) & ~kept_dropped
    return s, i.astype(np.int64), trusted


# ---------------------------------------------------------------- retrievers over a pool


@dataclass(frozen=True)
class Ranking:
    """Retrieved pool ids (n, k), most similar first, and their similarities (n, k)."""

    ids: np.ndarray
    similarities: np.ndarray


class PoolRetriever(Protocol):
    pool_ids: np.ndarray

    def rank(self, queries: Sequence[str], k: int, exclude: Sequence[int | None] | None = None) -> Ranking:
        """The k best pool items per query; `exclude[i]` is a pool id query i must not get (itself)."""
        ...


def check_diversity(diversity: float) -> float:
    """A one-line error unless `diversity` is a real number (numpy's too, not a bool) with 0 <= diversity <= 1."""
    if isinstance(diversity, bool) or not isinstance(diversity, numbers.Real):
        raise UdrError(f"diversity: expected a number from 0 to 1, got {type(diversity).__name__}")
    if not 0.0 <= float(diversity) <= 1.0:
        raise UdrError(f"diversity out of range: {diversity!r} (0: most similar first, up to 1: most diverse)")
    return float(diversity)


def mmr_order(query: np.ndarray, candidates: np.ndarray, k: int, diversity: float) -> list[int]:
    """Maximal marginal relevance (Carbonell & Goldstein, 1998; LangChain's `lambda_mult` = 1 - diversity):
    greedily pick the candidate maximising (1 - diversity) * cos(q, d) - diversity * max cos(d, picked).

    query (dim,) and candidates (m, dim), best first; returns k candidate positions in pick order.
    Cosine on both sides, whatever the retriever's similarity, so the two terms are on one scale;
    ties go to the better-ranked candidate. diversity 0 gives the candidates' own order.
    """

    def unit(x: np.ndarray) -> np.ndarray:
        return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)

    cands = unit(candidates.astype(np.float64))
    relevance = cands @ unit(query.astype(np.float64))
    redundancy = np.full(len(cands), -np.inf)
    picked: list[int] = []
    for _ in range(min(k, len(cands))):
        penalty = np.where(np.isfinite(redundancy), redundancy, 0.0)
        value = (1.0 - diversity) * relevance - diversity * penalty
        value[picked] = -np.inf
        best = int(np.argmax(value))  # the first maximum: the better-ranked candidate
        picked.append(best)
        redundancy = np.maximum(redundancy, cands @ cands[best])
    return picked


def check_k(k: int, pool_size: int, excluding: bool) -> None:
    room = pool_size - (1 if excluding else 0)
    if not 1 <= k <= room:
        raise UdrError(
            f"k out of range: asked for {k} demonstrations from a pool of {pool_size} (1 to {room} can be returned)"
        )


def exclude_positions(pool_ids: np.ndarray, exclude, n: int) -> np.ndarray | None:
    """Pool ids to exclude -> pool positions (-1: none)."""
    if exclude is None:
        return None
    if len(exclude) != n:
        raise UdrError(f"exclude must name one pool id (or None) per query: {len(exclude)} for {n} queries")
    where = {int(i): p for p, i in enumerate(pool_ids)}
    return np.asarray([where.get(int(e), -1) if e is not None else -1 for e in exclude], dtype=np.int64)


class DenseRetriever:
    """Maximum inner product between E_q(query text) and pre-computed pool embeddings (exact; with
    `approximate`, an :class:`ApproximateIndex` on the CPU)."""

    def __init__(
        self,
        encoder,
        pool_ids: Sequence[int],
        pool_embeddings: np.ndarray,
        query_text=lambda x: x,
        batch_size: int = 64,
        approximate: bool = False,
    ):
        self.encoder = encoder
        self.pool_ids = np.asarray(pool_ids, dtype=np.int64)
        if len(pool_embeddings) != len(self.pool_ids):
            raise UdrError(f"pool embeddings have {len(pool_embeddings)} rows for {len(self.pool_ids)} pool items")
        self.pool_embeddings = pool_embeddings
        self.query_text = query_text
        self.batch_size = batch_size
        device = "cpu" if encoder.device.type == "cpu" else str(encoder.device)
        self.index = ApproximateIndex(pool_embeddings) if approximate else ExactIndex(pool_embeddings, device)

    def embed_queries(self, queries: Sequence[str]) -> np.ndarray:
        return self.encoder.encode([self.query_text(q) for q in queries], "query", batch_size=self.batch_size)

    def rank(self, queries, k, exclude=None, diversity: float = 0.0):
        """The k best pool items per query. diversity > 0: re-rank the `MMR_FETCH` x k most similar by
        maximal marginal relevance (:func:`mmr_order`), so near-duplicate demonstrations give way."""
        diversity = check_diversity(diversity)
        excl = exclude_positions(self.pool_ids, exclude, len(queries))
        check_k(k, len(self.pool_ids), excl is not None)
        embedded = self.embed_queries(queries)
        if diversity == 0.0:
            scores, pos = self.index.search(embedded, k, exclude=excl)
            return Ranking(self.pool_ids[pos], scores)
        fetch = min(len(self.pool_ids) - (1 if excl is not None else 0), max(k, MMR_FETCH * k))
        scores, pos = self.index.search(embedded, fetch, exclude=excl)
        picks = [mmr_order(q, self.pool_embeddings[p], k, diversity) for q, p in zip(embedded, pos)]
        return Ranking(
            np.stack([self.pool_ids[p[o]] for p, o in zip(pos, picks)]),
            np.stack([s[o] for s, o in zip(scores, picks)]),
        )
