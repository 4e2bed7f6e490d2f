"""The `udr index` stage: a bi-encoder (default: the last round's, interpolated with its initial encoder where
`train.final_alpha` is below 1) copied to models/final/ with every
prepared task's pool embedded by its E_d (:mod:`udr.retriever.index`), a copy of each pool and the tasks'
declarations, so that the folder retrieves without its project; `--tasks` adds tasks to an indexed folder.

Imports of udr.retriever.encoder (pydantic) are inside the functions that use them, to keep the start of `udr` and
of its commands light.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from udr.data.prepare import read_prepared
from udr.errors import UdrError
from udr.paths import Paths
from udr.retriever.index import (
    demo_text_inputs,
    embed_pool,
    model_fingerprint,
    read_model_declarations,
    save_embeddings,
)
from udr.retriever.record import read_record, rebase_project, write_record, writing_model
from udr.util.distributed import resolve_device_type, use_threads
from udr.util.files import building_dir, check_no_links_out, file_sha256, write_atomic, write_json_atomic

if TYPE_CHECKING:
    from udr.config import Settings


def run_index(
    settings: Settings,
    *,
    tasks: list[str] | None = None,
    model: Path | None = None,
    out: Path | None = None,
    replace: bool = False,
    progress: bool = True,
) -> dict:
    """Copy a bi-encoder (default: the last round's model) to `out` (default: models/final; with `model`
    and no `out`, the model's own folder) and index every prepared task's pool with it; the folder also
    gets each pool, its task declaration and, in its record, what was indexed, so it serves from anywhere.

    tasks: index only these (the others' indexes are kept); the folder must then already hold the model.
    A folder recorded from another params file is not replaced unless `replace`."""
    from udr.retriever.encoder import SETTINGS_NAME

    paths = settings.paths
    if model is None:
        last = settings.train.rounds[-1]
        src = paths.round_model(last)
        if not src.is_dir():
            raise UdrError(f"missing model {src}: run `udr train --round {last}` first")
    else:
        src = Path(model)
        if not (src / SETTINGS_NAME).is_file():
            raise UdrError(f"missing model {src}: --model takes a trained udr bi-encoder directory")
    dst = Path(out) if out is not None else src if model is not None else paths.final_model
    with writing_model(dst, settings.params_file, settings.root, replace) as target:  # locked, resolved, checked
        return _write_index(settings, src, target, model, tasks, progress)


def _write_index(
    settings: Settings, src: Path, dst: Path, model: Path | None, tasks: list[str] | None, progress: bool
) -> dict:
    """:func:`run_index`'s work into the resolved, locked folder `dst`."""
    from udr.retriever.encoder import BiEncoder

    for folder in dict.fromkeys((src, dst)):  # nothing is read or written through a link out of either
        if folder.is_dir():
            check_no_links_out(folder)
    device = resolve_device_type(settings.train.device, "train.device")
    use_threads(settings.train.threads)
    label = settings.train.rounds[-1] if model is None else str(src)
    if tasks is None:
        with building_dir(dst) as tmp:
            shutil.copytree(src, tmp, dirs_exist_ok=True)
            shutil.rmtree(tmp / "index", ignore_errors=True)  # an indexed --model: its old indexes go
            shutil.rmtree(Paths.model_pools(tmp), ignore_errors=True)
            if (record := read_record(tmp)) is not None:  # its project, named from the copy's place
                record = rebase_project(record, src, dst)
                write_record(tmp, record)
            alpha = settings.train.final_alpha
            if model is None and alpha < 1.0:  # the last round's model interpolated with its initial encoder
                _interpolate_into(settings, src, tmp, dst, record, alpha)
            report = {"round": label, "model": model_fingerprint(tmp), "tasks": {}}
            if model is None and alpha < 1.0:
                report["final_alpha"] = alpha
            encoder = BiEncoder.load(tmp).to(device)
            _index_tasks(settings, encoder, tmp, settings.prepared_task_names(), report, progress)
        return report
    report_file = dst / "index" / "report.json"
    if not report_file.is_file() or model_fingerprint(dst) != model_fingerprint(src):
        raise UdrError(
            f"{dst} does not hold {'the last round' if model is None else src}'s indexed model yet: "
            "run `udr index` (every task) first, then -t for the tasks you add"
        )
    report = json.loads(report_file.read_text())
    with building_dir(dst) as tmp:  # a copy, swapped in whole: a kill leaves the folder as it was
        shutil.copytree(dst, tmp, dirs_exist_ok=True)
        _index_tasks(settings, BiEncoder.load(tmp).to(device), tmp, tasks, report, progress)
    return report


def _interpolate_into(settings: Settings, src: Path, tmp: Path, dst: Path, record: dict | None, alpha: float) -> None:
    """`train.final_alpha` below 1: the copy `tmp` of the last round's model `src` (becoming `dst`, its record
    `record`) holds
    alpha * trained + (1 - alpha) * its initial encoder's weights (WiSE-FT, :mod:`udr.retriever.interpolation`),
    its record saying so."""
    from udr.retriever.interpolation import interpolated_encoder, interpolation_record

    if record is None:
        raise UdrError(f"{src} has no udr_record.json: train.final_alpha interpolates a model `udr train` made")
    base = settings.paths.base_model("encoder")
    trained, initial = interpolated_encoder(src, read_record(src), alpha, None, base, settings.models.encoder)
    trained.save(tmp)
    write_record(tmp, {**record, "interpolation": interpolation_record(alpha, src, initial, dst)})


def _index_tasks(settings: Settings, encoder, model_dir: Path, names: list[str], report: dict, progress: bool) -> None:
    """Embed `names`' prepared pools into `model_dir` (index, pool copy, declarations, record, report.json)."""
    paths = settings.paths
    fingerprint = report["model"]
    declared = read_model_declarations(model_dir)
    for name in names:  # unseen tasks too: UDR retrieves for them
        source = paths.prepared(name, "train")
        pool = read_prepared(settings.root, name, "train")
        task = settings.task(name)
        emb = embed_pool(encoder, task, pool, settings.mine.batch_size, progress)
        ids = [int(i) for i in pool["id"]]
        meta = {
            "task": name,
            "ids": ids,
            "model": fingerprint,
            "pool_sha256": file_sha256(source),
            "demo_text": demo_text_inputs(task),
        }
        write_atomic(Paths.model_pool(model_dir, name), lambda tmp, source=source: shutil.copyfile(source, tmp))
        save_embeddings(Paths.index(model_dir, name), emb, meta)
        if task.declaration is not None:
            declared[name] = task.declaration
        # No timing here: the folder is a dependency of `evaluate@udr`, and DVC keeps a stage only while the bytes of
        # its inputs stay the same, so a clean clone that trains the same weights must write the same folder.
        report["tasks"][name] = {"pool": len(pool)}
    write_json_atomic(Paths.model_tasks(model_dir), declared)
    record = read_record(model_dir)
    if record is not None:
        indexed = {t: r["pool"] for t, r in report["tasks"].items()}
        write_record(model_dir, {**record, "index": {"pools": indexed}})
    write_json_atomic(model_dir / "index" / "report.json", report)
