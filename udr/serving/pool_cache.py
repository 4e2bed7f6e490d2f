"""The on-disk cache of pool embeddings for pools `udr index` did not embed (own pools, other models, the
base encoder's).

The cache keeps each row's embedding, keyed by the model's fingerprint and the row's text as E_d reads it
(instruction, template and the row: a changed row, instruction or template is another key), so that adding
rows to a pool embeds only the new rows and removing rows embeds nothing. A model's entries live in
``<cache>/pools/<model key>/``, in shards: each ``<shard key>.npy`` holds the rows one embedding wrote, with a
JSON sidecar naming each row's key (:func:`udr.retriever.index.save_embeddings`, written atomically). The
cache lives in ``$UDR_CACHE_DIR``, else ``$XDG_CACHE_HOME/udr``, else ``~/.cache/udr``. Entries are never read
as pickles; an unreadable shard, or one whose array does not match the checksum stored beside it, is ignored
and its rows embedded again (into a shard of that name where the same rows are missing: it is replaced). One
process embeds and writes a shard at a time (its lock, :mod:`udr.util.locks`): a second is refused in one
line; finished shards are read without it.

Imports of udr.retriever.encoder (pydantic) are inside the functions that use them, to keep `from udr import
Retriever` and `udr retrieve` light.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from udr.errors import UdrError
from udr.retriever.index import embeddings_sha256, load_embeddings, save_embeddings
from udr.util.locks import holding

SHARD_SUFFIX = ".npy"


def default_cache_dir() -> Path:
    if os.environ.get("UDR_CACHE_DIR"):
        return Path(os.environ["UDR_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "udr"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def model_folder(cache_dir: Path, fingerprint: str) -> Path:
    """The folder of the model `fingerprint`'s row embeddings."""
    return Path(cache_dir) / "pools" / _digest(fingerprint)


def row_key(text: str) -> str:
    """A row's key within its model's folder: the hash of the text E_d reads for it."""
    return _digest(text)


def shard_path(folder: Path, keys) -> Path:
    """The shard that holds the rows `keys` (the same rows embedded again go to the same shard)."""
    return Path(folder) / f"{_digest(chr(0).join(sorted(keys)))}{SHARD_SUFFIX}"


@dataclass(frozen=True)
class PoolEmbeddings:
    """A pool's E_d embeddings (len(pool), d), and how many of its rows were embedded now (0: all cached)."""

    embeddings: np.ndarray
    embedded: int


def cached_pool_embeddings(
    encoder, fingerprint: str, pool, *, cache_dir: Path | None = None, batch_size: int = 64, progress: bool = False
) -> PoolEmbeddings:
    """E_d embeddings of `pool` with `encoder` (whose fingerprint is `fingerprint`), each row read as E_d reads
    it (:func:`udr.retriever.encoder.demo_texts`): :func:`cached_embeddings` of those texts."""
    from udr.retriever.encoder import demo_texts

    texts = demo_texts(pool.task, pool.inputs, pool.outputs, encoder.settings)
    return cached_embeddings(
        encoder, fingerprint, texts, pool, cache_dir=cache_dir, batch_size=batch_size, progress=progress
    )


def cached_embeddings(
    encoder,
    fingerprint: str,
    texts: list[str],
    pool,
    *,
    cache_dir: Path | None = None,
    batch_size: int = 64,
    progress: bool = False,
) -> PoolEmbeddings:
    """Demonstration-side embeddings of `texts` (one per row of `pool`, as `encoder` reads them; its
    fingerprint `fingerprint`): each row's from the cache where it is there, the others embedded now and
    added to the cache as one shard."""
    keys = [row_key(t) for t in texts]
    folder = model_folder(cache_dir or default_cache_dir(), fingerprint)
    found = _cached_rows(folder, fingerprint, set(keys))  # finished shards are whole (renamed): read without a lock
    missing = _missing(keys, found)
    if not missing:
        return PoolEmbeddings(_assemble(keys, found), 0)
    path = shard_path(folder, missing)
    with holding(path, "pool embedding cache entry"):  # one process embeds and writes it; a second is refused
        found.update(_shard_rows(path, fingerprint, set(missing)))  # written meanwhile by another process
        missing = _missing(keys, found)
        if missing:
            first = {key: i for i, key in reversed(list(enumerate(keys)))}
            emb = encoder.encode(
                [texts[first[key]] for key in missing],
                "demo",
                batch_size=batch_size,
                progress=progress,
                description=f"embedding {pool.name} pool ({len(missing)} of {len(pool)} demonstrations)",
            )
            try:
                meta = {"model": fingerprint, "pool": pool.source, "keys": missing, "sha256": embeddings_sha256(emb)}
                save_embeddings(path, emb, meta)
            except OSError as exc:
                raise UdrError(f"cannot write the embedding cache {path}: {exc} (set $UDR_CACHE_DIR)") from None
            found.update(zip(missing, emb))
    return PoolEmbeddings(_assemble(keys, found), len(missing))


def _missing(keys: list[str], found: dict) -> list[str]:
    """The keys not in `found`, each once, in pool order."""
    return list(dict.fromkeys(key for key in keys if key not in found))


def _assemble(keys: list[str], found: dict) -> np.ndarray:
    return np.stack([found[key] for key in keys]).astype(np.float32, copy=False)


def _cached_rows(folder: Path, fingerprint: str, wanted: set[str]) -> dict[str, np.ndarray]:
    """{key: embedding} of the `wanted` rows the folder's shards hold (a shard holding none of them is not
    loaded)."""
    found: dict[str, np.ndarray] = {}
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob(f"*{SHARD_SUFFIX}")):
        if wanted.issubset(found):
            break
        found.update(_shard_rows(path, fingerprint, wanted - found.keys()))
    return found


def _shard_rows(path: Path, fingerprint: str, wanted: set[str]) -> dict[str, np.ndarray]:
    """{key: embedding} of the `wanted` rows shard `path` holds: none where it is missing, unreadable,
    half-replaced, of another model or fails its checksum (its rows are then embedded again)."""
    try:
        keys = json.loads(path.with_name(path.name + ".json").read_text(encoding="utf-8"))["meta"]["keys"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not isinstance(keys, list) or not wanted.intersection(keys):
        return {}
    try:
        emb, meta = load_embeddings(path)  # checks shape, dtype, finiteness and checksum
    except UdrError:
        return {}
    if meta.get("model") != fingerprint or meta.get("keys") != keys or meta.get("sha256") != embeddings_sha256(emb):
        return {}  # the checksum in its own metadata too: a sidecar rewritten to match altered rows is caught
    return {key: emb[row] for row, key in enumerate(keys) if key in wanted}
