"""Training logs: per-step losses with dvclive (`dvc plots show`), the round's summary.json and its
loss curve as a PNG."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np

from udr.util.files import remove, write_atomic, write_json_atomic


class TrainLog:
    """dvclive per-step metrics under `log_dir` (replayed from the checkpoint's history on resume,
    so a resumed run's log equals an uninterrupted run's), plus summary.json and loss.png at the end."""

    def __init__(self, log_dir: Path, history: list[dict]):
        from dvclive import Live

        remove(log_dir)
        self.dir = log_dir
        self.live = Live(str(log_dir), save_dvc_exp=False, dvcyaml=None, report=None)
        for record in history:
            self.log(record)

    def log(self, record: dict) -> None:
        self.live.step = record["step"]
        for key in ("loss", "rank", "in_batch", "lr"):
            self.live.log_metric(f"train/{key}", record[key], plot=True)
        self.live.next_step()

    def finish(self, summary, title: str) -> None:
        self.live.end()
        write_json_atomic(self.dir / "summary.json", asdict(summary))
        plot_losses(self.dir, self.dir / "loss.png", title)


def plot_losses(log_dir: Path, png: Path, title: str) -> None:
    """The training curve (total, rank and in-batch loss per step, with a moving average) as a PNG."""
    import csv

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    write_atomic(png, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)
