"""Embedding a task's demonstration pool (its whole train split) with E_d, and the final index.

`udr index` copies the last round's bi-encoder to `models/final/` and writes, for every task,
`models/final/index/<task>.npy` (float32, one row per pool item) with a JSON sidecar holding the
pool's ids, the pool file's hash and the model it was made with, so a stale index is detected.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np

from udr.errors import UdrError


def round_model_dir(root: Path, iteration: int) -> Path:
    return root / "models" / "rounds" / f"it{iteration}"


def final_model_dir(root: Path) -> Path:
    return root / "models" / "final"


def index_path(model_dir: Path, task: str) -> Path:
    return Path(model_dir) / "index" / f"{task}.npy"


def model_fingerprint(model_dir: Path) -> str:
    """A short hash of a bi-encoder's settings and weights."""
    import hashlib

    from udr.retriever.encoder import SETTINGS_NAME
    from udr.util.files import file_sha256

    model_dir = Path(model_dir)
    parts = [file_sha256(model_dir / SETTINGS_NAME)]
    parts += [file_sha256(p) for p in sorted(model_dir.glob("*/model.safetensors"))]
    return hashlib.sha256("".join(parts).encode()).hexdigest()[:16]


def load_index(model_dir: Path, task: str, pool_ids, pool_sha: str, fingerprint: str | None = None) -> np.ndarray:
    """The pool embeddings written by `udr index` for `task`, checked against the model (its
    `fingerprint`, computed when not given), the pool file's hash and the pool's ids."""
    from udr.retriever.search import load_embeddings

    path = index_path(model_dir, task)
    if not path.is_file():
        raise UdrError(f"missing index {path}: run `udr index` first")
    emb, meta = load_embeddings(path)
    if meta.get("model") != (fingerprint or model_fingerprint(model_dir)) or meta.get("pool_sha256") != pool_sha:
        raise UdrError(f"mismatched index {path}: made with another model or pool; run `udr index` again")
    if list(meta.get("ids", [])) != [int(i) for i in pool_ids]:
        raise UdrError(
            f"mismatched index {path}: it lists other pool ids than the prepared train split; run `udr index` again"
        )
    return emb


def pool_texts(task, inputs, targets, settings) -> list[str]:
    """What E_d (with bi-encoder `settings`) reads for each (input, target) of a task's pool (a
    registered name or a Task): the instruction, then the rendered demonstration."""
    from udr.data.tasks import get_task
    from udr.retriever.encoder import demo_text

    task = get_task(task) if isinstance(task, str) else task
    return [demo_text(task.instruction, task.render(i, t), settings) for i, t in zip(inputs, targets)]


def embed_pool(encoder, task_name: str, frame, batch_size: int, progress: bool) -> np.ndarray:
    """E_d embeddings (n, d) of a pool frame's rows, in row order."""
    return encoder.encode(
        pool_texts(task_name, frame["input"], frame["target"], encoder.settings),
        "demo",
        batch_size=batch_size,
        progress=progress,
        description=f"embedding {task_name} pool",
    )


def run_index(settings, *, progress: bool = True) -> dict:
    """Copy the last round's model to models/final and index every task's pool with it."""
    from udr.data.prepare import prepared_file, read_prepared
    from udr.retriever.encoder import BiEncoder
    from udr.retriever.search import save_embeddings
    from udr.util.distributed import resolve_device_type
    from udr.util.files import file_sha256

    root = settings.root
    last = settings.train.rounds[-1]
    src = round_model_dir(root, last)
    if not src.is_dir():
        raise UdrError(f"missing model {src}: run `udr train --iteration {last}` first")
    dest = final_model_dir(root)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    encoder = BiEncoder.load(tmp).to(resolve_device_type(settings.train.device, "train.device"))
    fingerprint = model_fingerprint(tmp)
    report = {"round": last, "model": fingerprint, "tasks": {}}
    for name in settings.task_names():
        t0 = time.perf_counter()
        pool = read_prepared(root, name, "train")
        emb = embed_pool(encoder, name, pool, settings.mine.batch_size, progress)
        save_embeddings(
            index_path(tmp, name),
            emb,
            {
                "task": name,
                "ids": [int(i) for i in pool["id"]],
                "model": fingerprint,
                "pool_sha256": file_sha256(prepared_file(root, name, "train")),
            },
        )
        report["tasks"][name] = {"pool": len(pool), "seconds": round(time.perf_counter() - t0, 2)}
    (tmp / "index" / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return report
