"""`udr repro`: the DVC pipeline with several stages at once.

`dvc repro` runs one stage at a time, and a stage's torch computes with as many threads as it is given, yet
two cores run two one-thread trainings side by side in 1.1 to 1.6 times the time one two-thread training
takes alone (docs/performance.md). Each section's `threads` parameter fixes a stage's bits whatever runs beside it, so
this runs `jobs` stages at once, each DVC's own: `dvc --wait-for-lock repro --single-item STAGE`. DVC
releases its repository lock while a stage's command runs and takes it again to record the stage in
dvc.lock; its read/write locks keep a stage's outputs from being read while written. The steps:

1. the stages DVC runs every time (`always_changed`: `udr precision`), with what they depend on, by
   `dvc repro` itself;
2. the stages DVC reports changed, and every stage downstream of one: the ones that may run;
3. those, `jobs` at a time, each started once the stages it depends on have ended, the longest chain of
   stages still to come first; DVC skips any whose inputs came out unchanged.

With one job it is `dvc repro`. The command writes its `--set` overrides into params.yaml first
(`udr.experiments.dvc.set_params`, as `dvc exp run -S` writes them). Each stage's output goes to
`.dvc/tmp/repro/<stage>.log`; a stage that fails stops new ones from starting, and its log's end is the error.

Imports of dvc and networkx are inside the functions that use them, to keep the start of `udr` light.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from udr.errors import UdrError
from udr.experiments.dvc import dvc_args, dvc_env, dvc_missing

if TYPE_CHECKING:
    from udr.config import Settings

LOG_DIR = Path(".dvc/tmp/repro")


@dataclass
class StagePlan:
    """The stages that may run, each with the stages of the plan it waits for, and their order of preference."""

    waits_for: dict[str, set[str]]
    priority: dict[str, int] = field(default_factory=dict)
    first: list[str] = field(default_factory=list)


def plan_stages(root: Path, targets: list[str], *, status: bool = True) -> StagePlan:
    """Steps 1-2's reading of the pipeline (DVC's graph and, with `status`, its status): the always-changed
    stages to run first, then every stage that is changed or downstream of a changed one, among `targets` and
    what they depend on (all stages when there are none)."""
    try:
        import networkx as nx
        from dvc.exceptions import NotDvcRepoError
        from dvc.repo import Repo
    except ImportError as exc:
        raise dvc_missing(exc) from exc
    if not (root / "dvc.yaml").is_file():
        raise UdrError(f"no dvc.yaml in {root}: run `udr repro` in the project's folder")
    # a stage's address (`train_epr@sst2`, `dir/dvc.yaml:name`) is relative to the working directory
    with contextlib.chdir(root), contextlib.ExitStack() as stack:
        try:
            repo = stack.enter_context(Repo("."))
        except NotDvcRepoError as exc:
            raise UdrError(f"{root} is not a DVC repository (no .dvc/): `dvc init` makes one") from exc
        graph = repo.index.graph  # an edge runs from a stage to one it depends on
        named = {stage.addressing: stage for stage in graph}
        unknown = [t for t in targets if t not in named]
        if unknown:
            raise UdrError(f"unknown stage {unknown[0]!r}: `dvc stage list` names the pipeline's stages")
        wanted = set(named)
        if targets:
            wanted = set(targets) | {s.addressing for t in targets for s in nx.descendants(graph, named[t])}
        first = [name for name in named if name in wanted and named[name].always_changed]
        changed = set(repo.status(targets=sorted(wanted) if targets else None)) & wanted if status else set()
        dependents = {name: {d.addressing for d in graph.predecessors(stage)} for name, stage in named.items()}
        depends_on = {name: {d.addressing for d in graph.successors(stage)} for name, stage in named.items()}
    # an always-changed stage's status says so every time: what it writes, where changed, shows downstream
    may_run: set[str] = set()
    todo = list(changed - set(first))
    while todo:
        name = todo.pop()
        if name not in may_run and name in wanted:
            may_run.add(name)
            todo.extend(dependents[name])
    may_run -= set(first)
    ordered = [name for name in named if name in may_run]  # dvc.yaml's order breaks ties
    waits_for = {name: depends_on[name] & may_run for name in ordered}
    return StagePlan(waits_for, priority=chain_lengths(waits_for), first=first)


def chain_lengths(waits_for: dict[str, set[str]]) -> dict[str, int]:
    """Per stage, the number of stages in the longest chain that starts with it and waits on it."""
    waited_by: dict[str, list[str]] = {name: [] for name in waits_for}
    for name, deps in waits_for.items():
        for dep in deps:
            waited_by[dep].append(name)
    lengths: dict[str, int] = {}

    def length(name: str) -> int:
        if name not in lengths:
            lengths[name] = 1 + max((length(n) for n in waited_by[name]), default=0)
        return lengths[name]

    for name in waits_for:
        length(name)
    return lengths


def run_stages(
    root: Path,
    plan: StagePlan,
    jobs: int,
    start: Callable[[str], subprocess.Popen],
    on_end: Callable[[str, int, float], None],
) -> None:
    """Step 3: run the plan's stages `jobs` at a time (`start` launches one, `on_end` hears of its exit code
    and seconds). A failure stops new stages and, once the running ones end, raises one UdrError line."""
    waiting = dict(plan.waits_for)
    done: set[str] = set()
    running: dict[str, tuple[subprocess.Popen, float]] = {}
    failed: list[tuple[str, int]] = []
    order = {name: i for i, name in enumerate(plan.waits_for)}
    while waiting or running:
        ready = sorted(
            (n for n, deps in waiting.items() if deps <= done), key=lambda n: (-plan.priority.get(n, 0), order[n])
        )
        while ready and len(running) < jobs and not failed:
            name = ready.pop(0)
            del waiting[name]
            running[name] = (start(name), time.perf_counter())
        if not running:
            break
        time.sleep(0.2)
        for name, (process, began) in list(running.items()):
            code = process.poll()
            if code is None:
                continue
            del running[name]
            on_end(name, code, time.perf_counter() - began)
            if code == 0:
                done.add(name)
            else:
                failed.append((name, code))
    if failed:
        name, code = failed[0]
        raise UdrError(f"stage {name} failed (exit {code}): its output is {root / LOG_DIR / (name + '.log')}")
    if waiting:
        raise UdrError(f"stages left waiting on each other: {', '.join(sorted(waiting))}")


def default_jobs(settings: Settings, cores: int) -> int:
    """Stages at once on `cores` cores: as many as the largest of the sections' `threads` (0: all cores)
    leaves room for."""
    threads = max(getattr(settings, s).threads or cores for s in ("score", "train", "evaluate"))
    return max(1, cores // threads)


def log_tail(path: Path, lines: int = 15) -> str:
    """The last `lines` lines of a stage's log."""
    text = path.read_text(errors="replace") if path.is_file() else ""
    return "\n".join(text.splitlines()[-lines:])


def run_repro(root: Path, targets: list[str], jobs: int, say: Callable[[str], None] = print) -> None:
    """The whole run: with one job `dvc repro TARGETS`, else steps 1-3 (see the module)."""
    env = dvc_env()
    if jobs <= 1:
        if subprocess.run(dvc_args("repro", *targets), cwd=root, env=env).returncode != 0:
            raise UdrError("dvc repro failed: its output above names the stage")
        return
    first = plan_stages(root, targets, status=False).first
    if first and subprocess.run(dvc_args("repro", *first), cwd=root, env=env).returncode != 0:
        raise UdrError(f"dvc repro {' '.join(first)} failed: its output above names the stage")
    plan = plan_stages(root, targets)
    logs = root / LOG_DIR
    logs.mkdir(parents=True, exist_ok=True)
    total, ended = len(plan.waits_for), [0]
    say(f"{total} stage(s) may run, {jobs} at a time (each stage's output: {LOG_DIR}/<stage>.log)")

    def start(name: str) -> subprocess.Popen:
        with open(logs / f"{name}.log", "w") as log:
            args = dvc_args("--wait-for-lock", "repro", "--single-item", name)
            return subprocess.Popen(args, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)

    def on_end(name: str, code: int, seconds: float) -> None:
        ended[0] += 1
        log = logs / f"{name}.log"
        ran = "Running stage" in (log.read_text(errors="replace") if log.is_file() else "")
        what = "failed" if code else ("ran" if ran else "unchanged")
        say(f"[{ended[0]}/{total}] {name}: {what} ({seconds:.1f}s)")
        if code:
            say(log_tail(log))

    run_stages(root, plan, jobs, start, on_end)
