"""The score against the number of demonstrations (`evaluate.shots`): metrics/plots/shots.png, with 95%
Wilson bands where the metric is a proportion, and one CSV per task for `dvc plots show`.

matplotlib (the `pipeline` extra's) is imported only when a figure is drawn (:mod:`udr.util.figures`).
"""

from __future__ import annotations

from pathlib import Path

from udr.evaluation.bootstrap import PROPORTION_METRICS, wilson_interval
from udr.util.figures import pyplot, save_png
from udr.util.files import write_text_atomic


def shots_table(results: dict[str, dict[str, dict]]) -> dict[str, dict[str, dict[int, float]]]:
    """{task: {method: {demonstrations: graded score}}} for the results that carry shots."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for method, by_task in results.items():
        for task, r in by_task.items():
            if "shots" in r:
                out.setdefault(task, {})[method] = {int(n): s["graded"] for n, s in r["shots"].items()}
    return out


def write_shots_plot(shots: dict[str, dict[str, dict[int, float]]], results, out_dir: Path) -> None:
    """metrics/plots/shots.png and metrics/plots/shots/<task>.csv (demos, one column per method)."""
    plt = pyplot()

    out_dir.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, max(1, len(shots)), figsize=(5 * max(1, len(shots)), 3.6), squeeze=False)
    for ax, (task, by_method) in zip(axes[0], shots.items()):
        methods = list(by_method)
        counts = sorted({n for v in by_method.values() for n in v})
        csv = ["demos," + ",".join(methods)]
        csv += [f"{n}," + ",".join(f"{by_method[m].get(n, float('nan')):.4f}" for m in methods) for n in counts]
        write_text_atomic(out_dir / "shots" / f"{task}.csv", "\n".join(csv) + "\n")
        r = next(iter(results.values()))[task]
        proportion = r["graded"]["name"] in PROPORTION_METRICS
        for m in methods:
            xs = sorted(by_method[m])
            ys = [by_method[m][x] for x in xs]
            line = ax.plot(xs, ys, marker="o", label=m)[0]
            if proportion:  # a 95% interval per point: the test set is small
                low, high = zip(*(wilson_interval(y / 100, r["n"]) for y in ys))
                ax.fill_between(xs, [100 * v for v in low], [100 * v for v in high], color=line.get_color(), alpha=0.12)
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(c) for c in counts])
        ax.set_xlabel("demonstrations (at most; generation:\nalso capped by the context)")
        ax.set_ylabel(r["graded"]["name"])
        ax.set_title(f"{task} (n={r['n']}" + (", bands: 95% Wilson intervals)" if proportion else ")"), fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    save_png(fig, out_dir / "shots.png", dpi=110)
