"""Pool embeddings: E_d's embedding of a task's demonstration pool (its whole train split), their
files, and the final index.

`udr index` (:mod:`udr.stages.index`) copies the last round's bi-encoder to `models/final/` and
writes, for every task,
`models/final/index/<task>.npy` (float32, one row per pool item) with a JSON sidecar holding the
pool's ids, the pool file's hash and the model it was made with, so a stale index is detected; and
`models/final/pools/` with a copy of each pool and the tasks' declarations (`tasks.json`), so the folder
retrieves without its project.

Imports of udr.retriever.encoder and udr.util.schemas (pydantic) are inside the functions that use them, to
keep `from udr import Retriever` and `udr retrieve` light.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from udr.data.tasks import Task
from udr.errors import UdrError
from udr.paths import Paths
from udr.util.files import (
    file_sha256,
    json_text,
    read_json_object,
    tree_hashes,
    write_atomic,
    write_text_atomic,
)

# ---------------------------------------------------------------- embedding files


def _meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def embeddings_sha256(emb: np.ndarray) -> str:
    """A checksum of embeddings: their shape, dtype and bytes (a well-formed but altered file, a NaN or a
    wrong width fails it)."""
    emb = np.ascontiguousarray(emb)
    digest = hashlib.sha256(f"{emb.shape}{emb.dtype.str}".encode())
    digest.update(emb.tobytes())
    return digest.hexdigest()


def save_embeddings(path, emb: np.ndarray, meta: dict) -> None:
    """Write `emb` to `path` (.npy, no pickle) and `meta` to `<path>.json`, each atomically.

    The sidecar stores {"shape", "dtype", "sha256", "meta"}; `load_embeddings` checks them against the
    array, so that a half-replaced pair or altered rows are caught.
    """
    path = Path(path)
    emb = np.asarray(emb)
    if emb.ndim != 2:
        raise UdrError(f"embeddings must be a 2-D (rows, dim) array, got shape {emb.shape}")
    try:
        sidecar = json_text(
            {"shape": list(emb.shape), "dtype": emb.dtype.str, "sha256": embeddings_sha256(emb), "meta": meta},
            sort_keys=True,
        )
    except (TypeError, ValueError) as exc:
        raise UdrError(f"embedding metadata for {path} is not JSON-serialisable: {exc}") from None

    def write(tmp: Path) -> None:
        with tmp.open("wb") as fh:  # a file object: np.save would append ".npy" to a name
            np.save(fh, emb, allow_pickle=False)

    write_atomic(path, write)
    write_text_atomic(_meta_path(path), sidecar)


def load_embeddings(path) -> tuple[np.ndarray, dict]:
    """Read back what `save_embeddings` wrote: (embeddings, meta)."""
    path = Path(path)
    meta_path = _meta_path(path)
    if not path.is_file():
        raise UdrError(f"missing index: {path} (run `udr index` first)")
    if not meta_path.is_file():
        raise UdrError(f"missing index metadata: {meta_path} (run `udr index` first)")
    try:
        emb = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise UdrError(f"unreadable index {path}: {exc}") from None
    from udr.util.schemas import IndexMeta, read_model

    sidecar = read_model(meta_path, IndexMeta, "index metadata", "rerun `udr index`")
    shape, dtype, meta = tuple(sidecar.shape), sidecar.dtype, sidecar.meta
    if emb.shape != shape or emb.dtype.str != dtype:
        raise UdrError(
            f"index {path} does not match its metadata (array {emb.shape} {emb.dtype.str}, "
            f"metadata {shape} {dtype}); rerun `udr index`"
        )
    if not np.isfinite(emb).all():
        raise UdrError(f"index {path} holds NaN or infinite values; rerun `udr index`")
    if sidecar.sha256 != embeddings_sha256(emb):
        raise UdrError(f"index {path} fails its checksum (altered, or written by an older udr); rerun `udr index`")
    return emb, meta


# ---------------------------------------------------------------- a model's pool index


def model_fingerprint(model_dir: Path) -> str:
    """A short hash of a bi-encoder's settings and of every file of its encoders and tokenizer (weights,
    configs, vocabularies): a change to any of them is another model."""
    from udr.retriever.encoder import BiEncoder

    model_dir = Path(model_dir)
    query_dir, demo_dir, _ = BiEncoder.part_dirs(model_dir)
    for weights in (query_dir / "model.safetensors", demo_dir / "model.safetensors"):
        if not weights.is_file():
            raise UdrError(f"incomplete model {model_dir}: no {weights}; train it again or pass another --model")
    parts = [file_sha256(BiEncoder.settings_file(model_dir))]
    for part in dict.fromkeys(BiEncoder.part_dirs(model_dir)):  # an export's tokenizer is its query encoder's
        parts += tree_hashes(part, model_dir)
    return hashlib.sha256("".join(parts).encode()).hexdigest()[:16]


def demo_text_inputs(task: Task) -> dict:
    """What E_d's text of a demonstration depends on besides the pool row and the model (whose settings,
    `encoder.instruction` included, the model fingerprint covers): the task's instruction and template.
    An index records them, and is refused when the task now declares others."""
    return {"instruction": task.instruction, "template": task.template}


def load_index(model_dir: Path, task: Task, pool_ids, pool_sha: str, fingerprint: str | None = None) -> np.ndarray:
    """The pool embeddings written by `udr index` for `task`, checked against the model (its
    `fingerprint`, computed when not given), the pool file's hash, the pool's ids and the instruction
    and template the queries will be read with (:func:`demo_text_inputs`)."""
    path = Paths.index(model_dir, task.name)
    if not path.is_file():
        raise UdrError(f"missing index {path}: run `udr index` first")
    emb, meta = load_embeddings(path)
    if meta.get("model") != (fingerprint or model_fingerprint(model_dir)) or meta.get("pool_sha256") != pool_sha:
        raise UdrError(f"mismatched index {path}: made with another model or pool; run `udr index` again")
    if meta.get("demo_text") != demo_text_inputs(task):
        raise UdrError(
            f"mismatched index {path}: its pool was embedded with another instruction or template than "
            f"{task.name} now declares; run `udr index -t {task.name}` again"
        )
    if list(meta.get("ids", [])) != [int(i) for i in pool_ids]:
        raise UdrError(
            f"mismatched index {path}: it lists other pool ids than the prepared train split; run `udr index` again"
        )
    return emb


def embed_pool(encoder, task: Task, frame, batch_size: int, progress: bool) -> np.ndarray:
    """E_d embeddings (n, d) of a prepared pool frame's rows, in row order."""
    from udr.retriever.encoder import demo_texts

    texts = demo_texts(task, frame["input"], frame["target"], encoder.settings)
    description = f"embedding {task.name} pool"
    return encoder.encode(texts, "demo", batch_size=batch_size, progress=progress, description=description)


def read_model_declarations(model_dir: Path) -> dict:
    """The task declarations a model folder carries, as `udr index` wrote them ({name: fields}; {} if none)."""
    path = Paths.model_tasks(model_dir)
    if not path.is_file():
        return {}
    return read_json_object(path, "task declarations", "run `udr index` again")
