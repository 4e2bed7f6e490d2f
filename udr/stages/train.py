"""The `udr train` stage: one round of the paper's Algorithm 1 (or the EPR baseline) from the project's
scores into a model directory, with its training log and model record: which model, from which one, into
which folder; the training itself (load, build, run, write; resumable) is :func:`udr.project.training.run_train`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from udr.errors import UdrError
from udr.paths import round_label
from udr.project.training import run_train
from udr.retriever.encoder import SETTINGS_NAME
from udr.retriever.recipes import baseline_train_settings
from udr.retriever.train_log import writing_run
from udr.util.files import resolve_target

if TYPE_CHECKING:
    from udr.config import Settings


def run_train_stage(
    settings: Settings,
    round_: int,
    *,
    baseline: str | None = None,
    task: str | None = None,
    out: Path | None = None,
    init: Path | None = None,
    replace: bool = False,
    progress: bool = True,
):
    """`udr train`: round N from round N-1's model (round 0 and the baselines from the base encoder; `init`:
    from that bi-encoder) into the round's model directory (`out`: a named one, logged under
    metrics/train/runs/, no other folder's) and training log, both locked; returns (summary or None off rank
    0, output directory). `baseline` (epr, dr-target): that baseline of `task` on its feedback alone (the
    paper's), or without `task` of every training task. A model recorded from another params file is not
    replaced unless `replace`."""
    paths = settings.paths
    settings.train.check_round(round_)
    if baseline is not None and round_ != 0:
        raise UdrError(f"the {baseline} baseline trains on round 0's scores only: drop --round")
    if task is not None and baseline is None:
        raise UdrError(f"--task {task!r} names a baseline's task: add --epr or --dr-target (train.tasks sets UDR's)")
    if task is not None and task not in settings.task_names():
        raise UdrError(f"--task {task!r}: not a task of prepare.tasks ({', '.join(settings.task_names())})")
    if init is None:
        init = paths.base_model("encoder") if round_ == 0 else paths.round_model(round_ - 1)
    elif not (Path(init) / SETTINGS_NAME).is_file():
        raise UdrError(f"missing model {init}: --init takes a trained udr bi-encoder directory")
    if baseline is not None:  # UDR's settings with the baseline's recipe, on round-0 (BM25) candidates only
        settings = settings.model_copy(update={"train": baseline_train_settings(baseline, settings.train, task)})
        default_out, log_dir = paths.baseline_folders(baseline, task)
    else:
        default_out, log_dir = paths.round_model(round_), paths.train_log(round_label(round_))
    # The path is resolved before anything is derived from it: `nosuch/..` is the current directory.
    target = resolve_target(Path(out) if out is not None else default_out, "--out")
    log_dir = paths.named_train_log(target) if target != default_out.resolve() else log_dir
    method = baseline or "udr"
    with writing_run(target, log_dir, settings.params_file, settings.root, replace) as out:
        summary = run_train(settings, round_, init=init, out=out, log_dir=log_dir, progress=progress, method=method)
    return summary, out
