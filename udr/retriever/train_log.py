"""Training logs: per-step losses in dvclive's file layout (`dvc plots show` reads them), the round's
summary.json and its loss curve as a PNG.

matplotlib (the `pipeline` extra's) is imported only when a figure is drawn (:mod:`udr.util.figures`).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import numpy as np

from udr.errors import UdrError
from udr.paths import NAMED_RUNS
from udr.retriever.record import writing_model
from udr.util.figures import pyplot, save_png
from udr.util.files import remove, replace_dir, shown_path, write_json_atomic, write_text_atomic
from udr.util.locks import holding

LOGGED = ("loss", "rank", "in_batch", "lr")
# In a named run's log (metrics/train/runs/<name>/): the resolved model folder it logs, its identity.
LOGGED_MODEL = "model.txt"


@contextlib.contextmanager
def writing_run(out: Path, log_dir: Path, params_file: str, root: Path, replace: bool) -> Iterator[Path]:
    """Hold the locks of the resolved model folder `out` and of its training log `log_dir` (only on the
    process that writes, rank 0 under torchrun), then check them: `out` as `writing_model` does, and
    a named run's log (under metrics/train/runs/) must be no other model folder's of the same name (a log
    naming none, an older one, is anyone's). Yields `out`, which the log records once training starts
    (:class:`TrainLog`), so that a run refused before it claims no name."""
    named = is_named_log(log_dir)
    writes = int(os.environ.get("RANK", "0")) == 0
    with (
        writing_model(out, params_file, root, replace, lock=writes) as out,
        holding(log_dir, "training log") if writes else contextlib.nullcontext(),
    ):
        owner = _logged_model(log_dir) if named else None
        if owner and owner != str(out):
            shown = shown_path(log_dir, root)
            raise UdrError(
                f"{shown} is the training log of the model folder {owner}, not {out}: "
                f"give --out a folder of another name, or remove {shown}"
            )
        yield out


def is_named_log(log_dir: Path) -> bool:
    """Whether `log_dir` is a named run's training log (under metrics/train/runs/), which records its model folder."""
    return Path(log_dir).parent.name == NAMED_RUNS


def _logged_model(log_dir: Path) -> str | None:
    """The model folder a named run's log records (:data:`LOGGED_MODEL`), or None."""
    try:
        return (Path(log_dir) / LOGGED_MODEL).read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


class TrainLog:
    """Per-step metrics under `log_dir`: `plots/metrics/train/<key>.tsv` (a `step` and a value column)
    and `metrics.json` (the last step's values), the files dvclive writes, byte for byte (tested).

    Written here rather than through dvclive, whose logger imports most of DVC (scmrepo, dulwich, dvc-data):
    training runs where DVC is not installed, e.g. under torchrun on a GPU machine. The history is replayed
    from the checkpoint on resume, so a resumed run's log equals an uninterrupted run's. A named run's log
    (under metrics/train/runs/) records the model folder `out` it logs (:data:`LOGGED_MODEL`).

    The run writes in a folder beside `log_dir` (:func:`live_log_dir`), swapped in for `log_dir` by
    :meth:`finish`: a kill at any instant leaves the earlier run's whole log (its summary.json, which
    `udr adapt` reads) or the new one."""

    def __init__(self, log_dir: Path, history: list[dict], out: Path):
        self.dest = Path(log_dir)
        self.dir = live_log_dir(self.dest)
        remove(self.dir)  # a killed run's, replayed from the checkpoint below
        if is_named_log(log_dir):
            write_text_atomic(self.dir / LOGGED_MODEL, f"{out}\n")
        self.plots = self.dir / "plots" / "metrics" / "train"
        for record in history:
            self.log(record)

    def log(self, record: dict) -> None:
        self.plots.mkdir(parents=True, exist_ok=True)
        for key in LOGGED:
            path = self.plots / f"{key}.tsv"
            header = "" if path.exists() else f"step\t{key}\n"
            with path.open("a", encoding="utf-8") as fh:
                fh.write(f"{header}{record['step']}\t{record[key]}\n")
        summary = {"train": {key: record[key] for key in LOGGED}, "step": record["step"]}
        write_text_atomic(self.dir / "metrics.json", json.dumps(summary, indent=4) + "\n")

    def finish(self, summary, title: str) -> None:
        """Write the run's summary.json and loss.png, then swap the finished log in for `log_dir`."""
        self.dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.dir / "summary.json", asdict(summary))
        plot_losses(self.dir, self.dir / "loss.png", title)
        replace_dir(self.dir, self.dest)


def live_log_dir(log_dir: Path) -> Path:
    """Where a running training writes the log that replaces `log_dir` when it ends: `.<name>.live` beside it."""
    return log_dir.with_name(f".{log_dir.name}.live")


def plot_losses(log_dir: Path, png: Path, title: str) -> None:
    """The training curve (total, rank and in-batch loss per step, with a moving average) as a PNG."""

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4))
    for key in ("loss", "rank", "in_batch"):
        f = log_dir / "plots" / "metrics" / "train" / f"{key}.tsv"
        if not f.is_file():
            continue
        with f.open() as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        steps = [int(r["step"]) for r in rows]
        values = np.array([float(r[key]) for r in rows])
        w = max(1, len(values) // 20)
        smooth = np.convolve(values, np.ones(w) / w, mode="valid")
        (line,) = ax.plot(steps, values, alpha=0.25)
        ax.plot(steps[w - 1 :], smooth, color=line.get_color(), label=key if w == 1 else f"{key} (moving mean of {w})")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    save_png(fig, png, dpi=100)
