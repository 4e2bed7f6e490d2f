"""Calling DVC for `udr exp` and `udr repro`: experiment runs, the queue, `-S` overrides written as DVC writes
them, and reading saved experiments back from git.

Imports of dvc, udr.config, udr.data.prepare and udr.evaluation.bootstrap (numpy, pydantic) are inside the
functions that use them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from udr.errors import UdrError
from udr.evaluation.claims import BOOTSTRAP_RESAMPLES
from udr.evaluation.comparisons import (
    check_predictions_give_result,
    checked_result,
    frame_metric,
    read_predictions,
)
from udr.paths import Paths
from udr.util.files import write_atomic
from udr.util.readers import parse_json

if TYPE_CHECKING:
    from udr.config import Settings


def dvc_executable() -> str:
    """The `dvc` next to this Python (the project's venv), else the one on PATH."""
    here = Path(sys.executable).with_name("dvc")
    found = str(here) if here.is_file() else shutil.which("dvc")
    if not found:
        raise UdrError("dvc not found: install the project (`make install`) or put dvc on PATH")
    return found


def dvc_args(*args: str) -> list[str]:
    return [dvc_executable(), *args]


def dvc_env() -> dict[str, str]:
    """The environment to run DVC in: DVC's queue workers start `dvc` and the stages start `udr` by name, so
    this Python's scripts come first on PATH."""
    return {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}


def run_dvc(args: list[str], root: Path, *, capture: bool = False, dry: bool = False, env: dict | None = None) -> str:
    """Run `dvc ARGS` in `root` (output streamed unless `capture`; `env`: variables set for it beside the
    process's); a failure is one UdrError line."""
    cmd = dvc_args(*args)
    if dry:
        print(" ".join(shlex.quote(a) for a in ["dvc", *args]))
        return ""
    done = subprocess.run(cmd, cwd=root, text=True, capture_output=capture, env={**dvc_env(), **(env or {})})
    if done.returncode != 0:
        why = _dvc_error_line(done.stderr or "") if capture else ""
        raise UdrError(f"`dvc {' '.join(args)}` failed with exit {done.returncode}" + (f": {why}" if why else ""))
    return done.stdout or ""


def _dvc_error_line(stderr: str) -> str:
    """What DVC said went wrong: its first `ERROR:` line, else the last line that is not its help banner."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    if errors:
        return errors[0]
    return next((line for line in reversed(lines) if "Having any troubles?" not in line), "")


def _sweep_choices(value: str) -> list[str]:
    """A sweep value `v1,v2` split at top-level commas (a YAML list `[a,b]` is one value)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(value):
        depth += 1 if ch in "[{" else -1 if ch in "]}" else 0
        if ch == "," and depth == 0:
            out.append(value[start:i])
            start = i + 1
    return [*out, value[start:]]


def dvc_missing(exc: ImportError) -> UdrError:
    return UdrError(f"dvc is not installed ({exc.name}): `make install` installs the pipeline's extras")


def check_overrides(params: Path, overrides, *, sweep: bool = False) -> None:
    """Validate `dvc exp run -S` overrides against `params` before DVC starts: first as udr reads them (an
    unknown key or a bad value is a one-line UdrError), then applied by DVC's own editor to a copy, which udr
    must read as valid settings. With `sweep`, each value of `key=v1,v2` is checked as udr reads it (with the
    other overrides at their first value) and the first values applied by DVC; Hydra's sweep functions are
    left to DVC."""
    if not overrides:
        return
    firsts = _check_as_udr_reads(params, overrides, sweep)
    with _beside(params, "check") as copy:
        _apply_as_dvc(params, firsts, copy)


def set_params(params: Path, overrides) -> None:
    """Write `overrides` into `params` as `dvc exp run -S` writes them: checked as udr reads them, applied by
    DVC's own editor (Hydra's forms: `key=v` sets a key, `+key=v` adds one, `++key=v` sets or adds, `~key`
    deletes; the file's comments kept) to a copy beside it, which must be valid settings, then renamed over
    it. A bad override is one UdrError line and leaves `params` as it was."""
    _check_as_udr_reads(params, overrides, sweep=False)
    with _beside(params, "set") as copy:
        _apply_as_dvc(params, overrides, copy)
        copy.replace(params)


def _check_as_udr_reads(params: Path, overrides, sweep: bool) -> list[str]:
    """Load `params` with each override as udr reads it (`+key=v`, `++key=v` as `key=v`; `~key` left to DVC);
    return the overrides with a sweep's values cut to its first, and without Hydra's sweep functions."""
    from udr.config import load_settings

    plain, firsts = [], []
    for o in overrides:
        if o.startswith("~"):
            firsts.append(o)
            continue
        prefix = o[: len(o) - len(o.lstrip("+"))]
        key, eq, value = o.removeprefix(prefix).partition("=")
        if not (key and eq):
            raise UdrError(f"bad override {o!r}: expected key.path=value, +key.path=value or ~key.path")
        if sweep and re.match(r"\s*\w+\(", value):  # a Hydra sweep function (range(...), choice(...))
            continue
        choices = _sweep_choices(value) if sweep else [value]
        plain.append((key, choices))
        firsts.append(f"{prefix}{key}={choices[0]}")
    udr_firsts = [f"{k}={choices[0]}" for k, choices in plain]
    load_settings(params, udr_firsts)
    for i, (key, choices) in enumerate(plain):
        for choice in choices[1:]:
            load_settings(params, [*udr_firsts[:i], f"{key}={choice}", *udr_firsts[i + 1 :]])
    return firsts


@contextlib.contextmanager
def _beside(params: Path, what: str):
    """A hidden `.yaml` path beside `params` (DVC's editor picks its format by the suffix), removed after."""
    path = params.with_name(f".{params.stem}.{what}-{os.getpid()}.yaml")
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def _apply_as_dvc(params: Path, overrides: list[str], copy: Path) -> None:
    """Write `params` with `overrides` applied by DVC (`dvc.utils.hydra.apply_overrides`) to `copy` and check
    that udr reads it as valid settings, the same as udr reads the overrides where it reads them alike (no
    `~key`); a refusal is one UdrError line."""
    try:
        from dvc.exceptions import InvalidArgumentError
        from dvc.utils.hydra import apply_overrides
    except ImportError as exc:
        raise dvc_missing(exc) from exc
    from udr.config import load_settings

    shutil.copyfile(params, copy)
    try:
        apply_overrides(copy, overrides)
    except InvalidArgumentError as exc:
        why = " ".join(str(exc.__cause__ or exc).split())
        raise UdrError(f"bad override {' '.join(overrides)}: DVC cannot set it ({why})") from None
    written = load_settings(copy)
    if not any(o.startswith("~") for o in overrides):
        read = load_settings(params, [o.lstrip("+") for o in overrides])
        if written.model_dump() != read.model_dump():
            raise UdrError(f"bad override {' '.join(overrides)}: DVC writes it otherwise than udr reads it")


EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]|\.(?!\.))*")


def check_experiment_name(name: str) -> str:
    """`name` if DVC (a git ref) and a folder under metrics/ take it as it is, else a one-line UdrError."""
    if not EXPERIMENT_NAME.fullmatch(name) or name.endswith((".", ".lock")) or len(name) > 100:
        raise UdrError(
            f"bad experiment name {name!r}: letters, digits, '_', '-' and single '.', starting with a letter or digit"
        )
    return name


def exp_run_args(name: str | None, overrides, targets=(), queue: bool = False, copy_paths=()) -> list[str]:
    """`dvc exp run`'s arguments; `copy_paths`: untracked paths a queued run's temporary folder needs."""
    args = ["exp", "run"]
    if name:
        args += ["-n", check_experiment_name(name)]
    for o in overrides:
        if "=" not in o and not o.startswith("~"):
            raise UdrError(f"bad parameter override {o!r}: expected key.path=value (or ~key.path to delete it)")
        args += ["-S", o]
    if queue:
        args.append("--queue")
    for path in copy_paths:
        args += ["-C", path]
    return args + list(targets)


TEMP_RUNS = Path(".dvc") / "tmp" / "exps"  # where DVC runs queued experiments, each in a folder of its own


def link_data_for_temp_runs(root: Path, settings: Settings) -> Path | None:
    """Queued experiments run in `.dvc/tmp/exps/<tmp>/`; a data directory given relative to the
    project and outside it (``../shared/data``) is linked where that relative path points from there
    (`.dvc/tmp/exps/shared` -> the project's `../shared`). Returns the link (None: nothing to link)."""
    source = Path(settings.data.source_dir)
    if source.is_absolute() or not source.parts or source.parts[0] != "..":
        return None
    ups = next(i for i, part in enumerate(source.parts) if part != "..") if set(source.parts) != {".."} else 0
    if not ups:
        return None
    run_dir = root / TEMP_RUNS / "run"  # any run folder: its own name never matters to a path out of it
    link = Path(os.path.normpath(run_dir / Path(*source.parts[: ups + 1])))
    target = Path(os.path.normpath(root.resolve() / Path(*source.parts[: ups + 1])))
    if link.is_symlink() and link.resolve() != target.resolve():
        link.unlink()
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target, target_is_directory=True)
    return link


QUEUE_STATUS_READS = 5  # consecutive failed reads of `dvc queue status` before a run gives up


def queue_tasks(status: str) -> dict[str, tuple[str, str]]:
    """The tasks `dvc queue status` lists, read at the columns of its header (Task, Name, Created, Status):
    task id -> (its name, or the task id where unnamed; its status)."""
    lines = status.splitlines()
    header = next((line for line in lines if "Name" in line and "Status" in line), None)
    if header is None or "Created" not in header:
        return {}
    tasks = {}
    for line in lines[lines.index(header) + 1 :]:
        if not line.strip() or line.startswith("Worker status"):
            continue
        task = line.split()[0]
        name = line[header.index("Name") : header.index("Created")].strip()
        tasks[task] = (name or task, line[header.index("Status") :].strip())
    return tasks


def read_queue(root: Path, env: dict | None = None, pause_seconds: float = 3.0) -> dict[str, tuple[str, str]]:
    """:func:`queue_tasks` of `dvc queue status` in `root`. DVC reads the queue's files while its workers
    write and remove them, so one read can fail (exit 255) while the queue is sound: a read is tried
    again up to QUEUE_STATUS_READS times, and only a failure that persists is raised."""
    for _ in range(QUEUE_STATUS_READS - 1):
        try:
            return queue_tasks(run_dvc(["queue", "status"], root, capture=True, env=env))
        except UdrError:
            time.sleep(pause_seconds)
    return queue_tasks(run_dvc(["queue", "status"], root, capture=True, env=env))  # its failure is raised


def run_queued(
    root: Path,
    queued: list[list[str]],
    settings: Settings,
    *,
    jobs: int = 1,
    dry: bool = False,
    env: dict | None = None,
    poll_seconds: float = 10.0,
) -> None:
    """Queue each `dvc exp run` argument list of `queued` (:func:`exp_run_args` with queue), run the queue
    with `dvc queue start -j JOBS` in DVC's temporary folders (the workspace's outputs stay as they are),
    wait for the tasks this call queued, print their status, and raise one UdrError line naming those of
    them that failed (tasks of earlier runs, failed or not, are neither waited for nor reported).
    `env`: variables set for DVC and the stages it runs."""
    if dry:
        for args in [*queued, ["queue", "start", "-j", str(jobs)]]:
            run_dvc(args, root, dry=True)
        return
    link_data_for_temp_runs(root, settings)
    before = read_queue(root, env)
    for args in queued:
        run_dvc(args, root, env=env)
    run_dvc(["queue", "start", "-j", str(jobs)], root, env=env)
    while True:
        mine = {task: row for task, row in read_queue(root, env).items() if task not in before}
        if not any(state in ("Queued", "Running") for _, state in mine.values()):
            break
        time.sleep(poll_seconds)
    for name, state in mine.values():
        print(f"{name}  {state}")
    failed = [name for name, state in mine.values() if state == "Failed"]
    if failed:
        raise UdrError(
            f"{len(failed)} queued experiment(s) failed: {', '.join(failed)} (why: `dvc queue logs {failed[0]}`)"
        )


def git_show(root: Path, rev: str, path: str) -> bytes:
    """The bytes of `path` at git revision `rev`; a missing one is a UdrError naming both."""
    done = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=root, capture_output=True)
    if done.returncode != 0:
        raise UdrError(f"no {path} at {rev[:12]}: run and commit that evaluation first")
    return done.stdout


def git_tree(root: Path, rev: str, folder: str) -> list[str]:
    """The names in `folder` at git revision `rev`; a folder not there is a UdrError naming both."""
    listing = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{rev}:{folder}"], cwd=root, capture_output=True, text=True
    )
    if listing.returncode != 0:
        raise UdrError(f"no {folder} at {rev}: run and commit it first")
    return listing.stdout.split()


def keep_evaluation(root: Path, rev: str, method: str, name: str) -> None:
    """Copy `method`'s test evaluation at git revision `rev` (its results and predictions) into the workspace
    as the saved evaluation `name`, which a clone reads at HEAD once committed (experiment refs do not travel
    with a clone; `dvc exp push` sends them)."""
    paths = Paths(root)
    # the predictions first: a saved evaluation whose results are there is taken as whole (a kill between
    # the two leaves predictions alone, which the next run copies again)
    for source, target in (
        (paths.predictions(method, "x").parent, paths.predictions(name, "x").parent),
        (paths.method_metrics(method, "x").parent, paths.method_metrics(name, "x").parent),
    ):
        folder = source.relative_to(root).as_posix()
        for file in git_tree(root, rev, folder):
            data = git_show(root, rev, f"{folder}/{file}")
            write_atomic(target / file, lambda p, data=data: p.write_bytes(data))


def saved_at(root: Path, name: str, tasks, rev: str = "HEAD") -> bool:
    """Whether git revision `rev` holds a saved test evaluation `name` of every task of `tasks`."""
    return set(tasks) <= saved_tasks(root, name, tasks, rev)


def saved_tasks(root: Path, name: str, tasks, rev: str = "HEAD") -> set[str]:
    """The tasks of `tasks` of which git revision `rev` holds a saved test evaluation `name` (none: empty)."""
    try:
        return set(method_results(root, name, tasks, rev))
    except UdrError:
        return set()


def method_results(root: Path, method: str, tasks, rev: str) -> dict[str, dict]:
    """{task: result} from metrics/<method>/*.json (test) at git revision `rev` (tasks None: all)."""
    try:
        listing = git_tree(root, rev, f"metrics/{method}")
    except UdrError:
        raise UdrError(f"no metrics/{method} at {rev}: run and commit the default pipeline first") from None
    names = [n for n in listing if tasks is None or Path(n).stem in tasks]
    out = {}
    for n in names:
        where, again = f"metrics/{method}/{n} at {rev[:12]}", f"commit a whole evaluation of {method}"
        out[Path(n).stem] = checked_result(
            parse_json(git_show(root, rev, f"metrics/{method}/{n}"), where, "result", again), where, again
        )
    return out


def method_scores(root: Path, method: str, tasks, rev: str) -> dict[str, float]:
    """{task: graded score} from metrics/<method>/*.json at git revision `rev` (tasks None: all)."""
    return {t: r["graded"]["score"] for t, r in method_results(root, method, tasks, rev).items()}


class SavedScorers:
    """The graded-score functions of saved evaluations read from git, each (task, method, revision) read and
    scored once, and each task's prepared test rows read once: one instance serves many comparisons."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._examples: dict = {}
        self._scorers: dict = {}

    def examples(self, task: str) -> list[dict]:
        from udr.data.prepare import read_prepared

        if task not in self._examples:
            self._examples[task] = read_prepared(self.root, task, "test").to_dicts()
        return self._examples[task]

    def scorer(self, task: str, method: str, rev: str):
        if (task, method, rev) not in self._scorers:
            import numpy as np

            root = self.root
            result = method_results(root, method, [task], rev)[task]
            path = Paths(root).predictions(method, task).relative_to(root).as_posix()
            where = f"{path} at {rev[:12]}"
            again = f"commit a whole evaluation of {method} on {task}"
            frame = read_predictions(where, again, git_show(root, rev, path))
            examples = self.examples(task)
            score = frame_metric(frame, examples, result["metric"], where, f"the prepared test split of {task}")
            every_row = score(np.arange(len(examples)))
            check_predictions_give_result(every_row, result, f"the predictions in {where}", again)
            self._scorers[task, method, rev] = score
        return self._scorers[task, method, rev]


def compare_revisions(root: Path, rows: dict, b: dict, seed: int, scorers: SavedScorers | None = None) -> dict:
    """Paired bootstrap of each row minus B on the test split, every side a saved evaluation per task
    read from git: each row of `rows` ({key: {task: side}}) and `b` ({task: side}) map a task to a side,
    (method, revision), or a list of them (one retriever trained with several seeds), whose graded scores
    are averaged on every resample. Returns {key: (per-task Intervals, average Interval)} over the tasks
    of `b`, from the predictions committed with each evaluation; each (method, revision, task) is read and
    scored once (across calls too, given the same `scorers`)."""
    from udr.evaluation.bootstrap import PairedTask, paired_bootstrap

    scorers = scorers if scorers is not None else SavedScorers(root)

    def side(task, sides):
        if isinstance(sides, tuple):
            return scorers.scorer(task, *sides)
        each = [scorers.scorer(task, *s) for s in sides]
        return lambda idx: sum(f(idx) for f in each) / len(each)

    return {
        key: paired_bootstrap(
            [PairedTask(len(scorers.examples(t)), side(t, row[t]), side(t, b[t])) for t in b],
            resamples=BOOTSTRAP_RESAMPLES,
            seed=seed,
        )
        for key, row in rows.items()
    }


def commit_time(root: Path, rev: str, path: str | None = None) -> int:
    """Committer time (Unix seconds) of git revision `rev`, or of the last commit up to `rev` that changed
    `path` (0 where none did)."""
    args = ["git", "log", "-1", "--format=%ct", rev, *(["--", path] if path else [])]
    out = subprocess.run(args, cwd=root, capture_output=True, text=True).stdout.strip()
    return int(out) if out else 0


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
