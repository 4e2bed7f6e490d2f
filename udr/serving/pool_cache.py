"""The on-disk cache of pool embeddings for pools `udr index` did not embed (own pools, other models).

An entry is keyed by the model's fingerprint and the pool's content (every text E_d reads, so a
changed file, instruction or template is embedded again) and stored as ``<cache>/pools/<key>.npy``
with a JSON sidecar (:func:`udr.retriever.index.save_embeddings`, written atomically). The cache lives in
``$UDR_CACHE_DIR``, else ``$XDG_CACHE_HOME/udr``, else ``~/.cache/udr``. Entries are never read
as pickles; an unreadable entry, or one whose array does not match the checksum stored beside it,
is embedded again and replaced. One process embeds and writes an entry at a time (its lock,
:mod:`udr.util.locks`): a second is refused in one line; a finished entry is read without it.

Imports of udr.retriever.encoder (pydantic) are inside the functions that use them, to keep `from udr import
Retriever` and `udr retrieve` light.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from udr.errors import UdrError
from udr.retriever.index import embeddings_sha256, load_embeddings, save_embeddings
from udr.util.locks import holding


def default_cache_dir() -> Path:
    if os.environ.get("UDR_CACHE_DIR"):
        return Path(os.environ["UDR_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "udr"


def cache_path(cache_dir: Path, fingerprint: str, texts) -> Path:
    """The entry for the model `fingerprint` and the texts E_d reads (instruction, template, every
    row): equal keys, equal embeddings."""
    content = hashlib.sha256()
    for text in texts:
        content.update(text.encode("utf-8"))
        content.update(b"\0")
    key = hashlib.sha256(f"{fingerprint}\0{content.hexdigest()}".encode()).hexdigest()[:32]
    return Path(cache_dir) / "pools" / f"{key}.npy"


def cached_pool_embeddings(
    encoder, fingerprint: str, pool, *, cache_dir: Path | None = None, batch_size: int = 64, progress: bool = False
) -> tuple[np.ndarray, bool]:
    """E_d embeddings (len(pool), d) of `pool` with `encoder` (whose fingerprint is `fingerprint`),
    from the cache when present; returns (embeddings, came from the cache)."""
    from udr.retriever.encoder import demo_texts

    texts = demo_texts(pool.task, pool.inputs, pool.outputs, encoder.settings)
    path = cache_path(cache_dir or default_cache_dir(), fingerprint, texts)
    cached = _cached(path, fingerprint, len(pool))  # an entry is written whole (renamed): read without the lock
    if cached is not None:
        return cached, True
    with holding(path, "pool embedding cache entry"):  # one process embeds and writes it; a second is refused
        cached = _cached(path, fingerprint, len(pool))
        if cached is not None:
            return cached, True
        emb = encoder.encode(
            texts,
            "demo",
            batch_size=batch_size,
            progress=progress,
            description=f"embedding {pool.name} pool ({len(pool)} demonstrations)",
        )
        try:
            meta = {"model": fingerprint, "pool": pool.source, "rows": len(pool), "sha256": embeddings_sha256(emb)}
            save_embeddings(path, emb, meta)
        except OSError as exc:
            raise UdrError(f"cannot write the embedding cache {path}: {exc} (set $UDR_CACHE_DIR)") from None
    return emb, False


def _cached(path: Path, fingerprint: str, rows: int) -> np.ndarray | None:
    """The entry's embeddings where it is there, of the model `fingerprint`, of `rows` rows and matching its
    checksum; None otherwise (missing, unreadable, half-replaced or altered: embedded again)."""
    if not path.is_file():
        return None
    try:
        emb, meta = load_embeddings(path)
    except UdrError:
        return None
    ok = meta.get("model") == fingerprint and emb.shape[0] == rows and meta.get("sha256") == embeddings_sha256(emb)
    return emb if ok else None
