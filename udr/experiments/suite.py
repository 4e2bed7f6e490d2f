"""The offline suite as a DVC pipeline: a profile's configuration (default profiles/suite.yaml: 16 trained
tasks from 7 families, unseen tasks beside) reproduced by the project's own dvc.yaml, then saved as the DVC
experiment `suite`, which `dvc exp show` lists beside the seeds and the folds.

It runs in a git worktree of its own (`build/suite` by default) made at HEAD once, so the default
pipeline's outputs in the workspace stay as they are and the run keeps the code of the commit it began
with; its params.yaml is the profile with the data mirror's path relative to it. `dvc repro` there is the
whole run: every stage the default configuration has (data, the shipped round-0 feedback checked, UDR,
DR-Target and EPR per task, the index, every retriever's evaluation, the report), and it resumes where it
stopped: a finished stage is in the worktree's dvc.lock and is not run again. At the end
`dvc exp save -n suite` records the worktree's state as the experiment.

The run outlasts a machine (hours on 2 cores: docs/experiments.md), so it also resumes on another one. It takes the
steps of :func:`suite_steps` in turn (the signal rule and the multi-task EPR among them, outside the
pipeline), and after each it copies the worktree's dvc.lock, the outputs git keeps (results and predictions;
models and caches are git-ignored) and the files of the steps outside the pipeline into
metrics/<name>/state/, to be committed, with the commit the run runs. A
worktree made anew is made at that commit and starts from that state: DVC re-runs what it lacks (models,
data) and skips every evaluation whose code, params, data and model came out the same (training is
deterministic on one CPU kind, not across kinds). A fresh start (new code): remove the worktree
(`git worktree remove --force build/suite`) and the state.

Each trained retriever is trained again with the extra training seeds (:data:`udr.experiments.seeds.SEEDS`),
one DVC experiment per retriever and seed in DVC's queue, evaluated only on the tasks that bear on a claim
(the trained tasks with signal, the unseen ones) to spare hours of evaluation; each one's evaluation is kept
in the worktree as `<method>-seed-<N>`, where the table reads it. Transfer is tested one family at a time
the same way (:mod:`udr.experiments.lofo`): for each family with a task with signal, UDR trained on the
other families' tasks, one experiment `<name>-lofo-<family>` kept as `udr-lofo-<family>`.

The table, metrics/<name>/pipeline.md (and .json; the suite's beside its other results in metrics/suite/),
is the seed table's shape read from the saved experiment at its commit: per task and per group of tasks
(trained, split as the paper's Tables 1-2 and by signal; unseen tasks of a trained family; unseen families)
each retriever's score, and the claims with paired 95% intervals over the same test rows; the folds' table,
metrics/<name>/lofo.md, is :mod:`udr.experiments.lofo`'s read there too; metrics/<name>/headline.md is the
README's view of the table, per group of tasks.

Imports of udr.config and udr.evaluation.bootstrap are inside the functions that use them, to keep the start of
`udr` light.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from udr.errors import UdrError
from udr.experiments.dvc import (
    check_experiment_name,
    exp_run_args,
    keep_evaluation,
    run_dvc,
    run_queued,
    saved_experiments,
)
from udr.experiments.labels import label_tasks
from udr.experiments.lofo import fold_experiment, lofo_experiments, lofo_markdown, lofo_table, signal_folds
from udr.experiments.lofo import kept_name as fold_kept_name
from udr.experiments.seeds import (
    LABELS,
    MULTITASK,
    SEED_GROUPS,
    SEEDS,
    experiment_name,
    group_averages,
    kept_name,
    seed_table,
    seed_tables_markdown,
    seeded_cells,
    task_groups,
)
from udr.experiments.signal import SIGNAL_METHODS, signal_file, tasks_with_signal
from udr.experiments.tables import markdown_table
from udr.util.files import building_dir, remove, write_json_atomic, write_text_atomic
from udr.util.notice import notice
from udr.util.readers import read_json

if TYPE_CHECKING:
    from udr.config import Settings

PROFILE = Path("profiles/suite.yaml")
WORK = Path("build/suite")
EXPERIMENT = "suite"
TABLE = "pipeline.md"  # in metrics/<the experiment's name>/: metrics/suite/ beside the suite's other results
LOFO_TABLE = "lofo.md"  # beside it: the folds, one family held out at a time
HEADLINE = "headline.md"  # beside it: the README's view of the table
SAVED = ("metrics", "data/predictions")  # what the experiment's commit keeps beside dvc.lock and params
STATE = "state"  # metrics/<name>/state/: the run's dvc.lock and git-kept outputs, committed as they come
LOCK = "dvc.lock"
COMMIT = "COMMIT"  # in the state: the commit whose code the run runs
SIGNAL = signal_file(Path()).as_posix()  # the signal rule's table, in the worktree
SCORE_STAGES = "score"  # dvc.yaml's round-0 scoring, one stage per task (`score@<task>`)


def saved_folders(name: str, split: str = "test") -> tuple[str, ...]:
    """The folders, relative to the worktree, of an evaluation saved as `name` (a `*` in it matches names):
    its results and its predictions."""
    from udr.paths import Paths

    paths = Paths(Path())
    return tuple(
        file.parent.as_posix() for file in (paths.method_metrics(name, "-", split), paths.predictions(name, "-", split))
    )


# What `udr exp labels` writes: its table, UDR's validation evaluation, each point of its validation sweep
# (`<method>-labels-w<γ>-<quota>`) and the chosen settings' test evaluation
LABEL_OUTPUTS = (
    "metrics/labels.json",
    "metrics/labels.md",
    *saved_folders("udr", "validation"),
    *saved_folders("*-labels-*", "validation"),
    *saved_folders("*+labels"),
)


@dataclass(frozen=True)
class Step:
    """One step of the run, `tool` with `args` in the worktree: dvc (`dvc ARGS`), udr (`udr ARGS`), seed (a
    seeded retriever's extra training seed, `args` = (method, seed): :func:`run_seed`) or fold (UDR with a
    family held out, `args` = (family,): :func:`run_fold`). A step other than dvc is outside the pipeline, in
    a `part` (the signal rule, the multi-task EPR, the seeds, the folds); it is skipped where its
    part is done, or where the saved results it makes (`makes`: metrics/<name>/, one file per task it
    evaluates) are all there, here or from the state; once done, its `outputs` (paths in the worktree, a `*` in
    one matching names) are kept in the state."""

    tool: str
    args: tuple[str, ...]
    part: str = ""
    makes: str = ""
    outputs: tuple[str, ...] = ()


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise UdrError(f"`git {' '.join(args)}` failed: {tail[0]}")
    return done.stdout.strip()


def suite_params(root: Path, profile: Path, work: Path = WORK) -> dict:
    """The profile's params with the data mirror's path relative to the worktree `work`: $UDR_DATA_DIR where it
    is set, else the profile's `data.source_dir` read as params.yaml reads it (relative to the project root).
    Relative, so that the run's lock, and the state saved from it, name no path of this machine."""
    from udr.config import DATA_DIR_ENV
    from udr.util.safe_yaml import load_yaml

    if not profile.is_file():
        raise UdrError(f"missing profile {profile}: give a params file (`udr exp suite --profile FILE`)")
    params = load_yaml(profile.read_text(encoding="utf-8"), f"profile {profile}")
    if not isinstance(params, dict) or not isinstance(params.get("data"), dict):
        raise UdrError(f"bad profile {profile}: not a params file (no data section)")
    source = os.environ.get(DATA_DIR_ENV) or Path(root) / params["data"].get("source_dir", "")
    params["data"]["source_dir"] = os.path.relpath(Path(source).resolve(), (Path(root) / work).resolve())
    return params


def suite_worktree(root: Path, work: Path, rev: str = "HEAD") -> Path:
    """The run's worktree: made at `rev` where there is none (`git worktree add --detach`), else checked to be
    a worktree of this repository. Returns its resolved path."""
    work = (Path(root) / work).resolve()
    if not work.exists():
        _git(root, "worktree", "add", "--detach", str(work), rev)
        return work
    if not (work / ".git").is_file():
        raise UdrError(f"{work} is not a git worktree of this repository: remove it or give another --work")
    mine, theirs = (Path(_git(p, "rev-parse", "--path-format=absolute", "--git-common-dir")) for p in (root, work))
    if mine != theirs:
        raise UdrError(f"{work} is a worktree of another repository ({theirs}): give another --work")
    return work


def current_stages(work: Path) -> set[str]:
    """The stages of `work`'s dvc.yaml that `dvc status` finds up to date there."""
    stages = set(run_dvc(["stage", "list", "--name-only"], work, capture=True).split())
    return stages - set(json.loads(run_dvc(["status", "--json"], work, capture=True) or "{}"))


def kept_outputs(work: Path, current: set[str]) -> list[str]:
    """The outputs git keeps (not git-ignored) of the `current` stages in `work`'s dvc.lock: what another
    machine needs beside the code and the state's lock to skip those stages. (A lock entry the worktree's
    commit brought, of a stage this run has not reproduced yet or that dvc.yaml no longer has, is not current.)"""
    lock = yaml.safe_load((work / LOCK).read_text()) or {}
    stages = lock.get("stages", {})
    paths = {o["path"] for name, stage in stages.items() if name in current for o in stage.get("outs", [])}
    paths = sorted(p for p in paths if (work / p).exists())
    paths = [p for p in paths if not any(p.startswith(q + "/") for q in paths)]  # a folder's files go with it
    if not paths:
        return []
    ignored = subprocess.run(
        ["git", "check-ignore", "--stdin"], cwd=work, input="\n".join(paths), capture_output=True, text=True
    )
    if ignored.returncode not in (0, 1):  # 1: none ignored
        raise UdrError(f"`git check-ignore` failed in {work}: {ignored.stderr.strip()}")
    return [p for p in paths if p not in set(ignored.stdout.split())]


def _copy(source: Path, target: Path) -> None:
    """Copy a file or a folder (merged into one that is there) to `target`, its parents made."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        shutil.copy2(source, target)


def save_state(work: Path, state: Path, current: set[str] | None = None, parts=()) -> None:
    """Copy `work`'s dvc.lock, its commit, the git-kept outputs of its `current` stages (default: those
    :func:`current_stages` finds) and the `parts` (files of the steps outside the pipeline that are done) into
    `state`, built beside and then swapped in (:func:`udr.util.files.building_dir`), so a kill at any instant
    leaves the old state or the new one."""
    current = current_stages(work) if current is None else current
    with building_dir(state) as new:
        shutil.copy2(work / LOCK, new / LOCK)
        (new / COMMIT).write_text(_git(work, "rev-parse", "HEAD") + "\n")
        for p in [*kept_outputs(work, current), *outputs_in(work, parts)]:
            _copy(work / p, new / p)


def commit_state(root: Path, state: Path, message: str) -> bool:
    """Commit the folder `state` alone in the repository `root` (`git commit -- STATE`: whatever else is staged
    stays staged) where it changed. False where nothing did, or where git failed (another git command holding
    the index, say): a notice, not an error, so that hours of run go on; the next commit takes the change up."""
    folder = state.relative_to(root).as_posix()
    try:
        _git(root, "add", "-A", "--", folder)
        if subprocess.run(["git", "diff", "--cached", "--quiet", "--", folder], cwd=root).returncode == 0:
            return False
        _git(root, "commit", "-q", "-m", message, "--", folder)
    except UdrError as error:
        notice(f"{folder} was saved but not committed ({error}); the next step's commit takes it up")
        return False
    return True


def outputs_in(work: Path, outputs) -> list[str]:
    """The paths of `outputs` (a `*` in one matching names) that are in `work`."""
    return [q.relative_to(work).as_posix() for p in outputs for q in sorted(work.glob(p))]


def state_commit(state: Path) -> str | None:
    """The commit a saved state's run runs (None where there is no state)."""
    return (state / COMMIT).read_text().strip() if (state / COMMIT).is_file() else None


# In the worktree, once its saved state is copied in: until then (a kill while copying) it is restored again.
RESTORED = ".udr-suite-restored"


def restore_state(state: Path, work: Path) -> bool:
    """Copy a saved state (dvc.lock and outputs) into a worktree made anew; False where there is none."""
    if not (state / LOCK).is_file():
        return False
    for item in state.iterdir():
        if item.name != COMMIT:
            _copy(item, work / item.name)
    return True


def restored_worktree(root: Path, work: Path, state: Path, steps: list[Step]) -> Path:
    """The run's worktree (:func:`suite_worktree`: a run another machine began goes on with that commit's code,
    so its finished stages still count) with the saved `state` copied in once, before any step: the outputs of
    `steps` outside the pipeline that came with the commit (the default run's) removed first. A worktree a kill
    left before it was ready is restored again. Returns its resolved path."""
    work = suite_worktree(root, work, state_commit(state) or "HEAD")
    if not (work / RESTORED).is_file():
        for p in outputs_in(work, [p for step in steps for p in step.outputs]):
            remove(work / p)
        if restore_state(state, work):
            print(f"resuming from {state.relative_to(root)}")
        write_text_atomic(work / RESTORED, "the saved state is restored here; steps run from it\n")
    return work


def suite_families(settings: Settings) -> list[str]:
    """The families of the run's trained tasks, in task order: those a fold may hold out."""
    return list(dict.fromkeys(settings.task(t).family for t in settings.training_tasks()))


def suite_steps(seeds=SEEDS, families=()) -> list[Step]:
    """The run's steps in order: the evaluations of the retrievers that train nothing; the signal rule on
    validation (`udr exp signal`, which the table's groups read); the shipped feedback checked; UDR's
    evaluation, then the other trained retrievers' (udr.config.METHODS order); the multi-task EPR, trained and
    evaluated; label-aware selection (`udr exp labels`: chosen on validation, tested once); each trained
    retriever with each extra training seed of `seeds`, UDR's and EPR's before DR-Target's, with the folds in
    between (transfer: UDR trained with each of `families` held out, where it has a task with signal); then
    the rest of the pipeline (the report)."""
    from udr.config import METHODS
    from udr.paths import BI_ENCODER_METHODS

    trained = sorted((m for m in METHODS if m in BI_ENCODER_METHODS), key=lambda m: m != "udr")
    steps = [Step("dvc", ("repro", f"evaluate@{m}")) for m in METHODS if m not in BI_ENCODER_METHODS]
    for m in SIGNAL_METHODS:
        made = saved_folders(m, "validation")
        steps.append(Step("udr", ("evaluate", "--split", "validation", "-m", m), "signal", f"validation/{m}", made))
    steps.append(Step("udr", ("exp", "signal"), "signal", outputs=(SIGNAL, SIGNAL.replace(".json", ".md"))))
    # the shipped feedback checked (every task's `score` stage) on its own: its results are kept in the state,
    # while a trained model is not, so another machine skips them (some ten minutes on 2 cores)
    steps.append(Step("dvc", ("repro", SCORE_STAGES)))
    steps += [Step("dvc", ("repro", f"evaluate@{m}")) for m in trained]
    evaluated = ("evaluate", "-m", "epr", "--model", f"models/{MULTITASK}", "--save-as", MULTITASK)
    steps += [
        Step("udr", ("train", "--epr"), "multitask", MULTITASK),
        Step("udr", evaluated, "multitask", MULTITASK, saved_folders(MULTITASK)),
        Step("udr", ("exp", "labels"), "labels", outputs=LABEL_OUTPUTS),
    ]
    # UDR's and per-task EPR's seeds first, which the claims compare; then the folds; DR-Target's seeds last
    seeded = {prefix: [] for prefix in SEED_GROUPS}
    for prefix, group in SEED_GROUPS.items():
        for seed in seeds:
            for m in (m for m in trained if m in group):
                kept = kept_name(m, seed)
                seeded[prefix].append(Step("seed", (m, str(seed)), "seeds", kept, saved_folders(kept)))
    first, *later = seeded.values()
    folds = [Step("fold", (f,), "lofo", fold_kept_name(f), saved_folders(fold_kept_name(f))) for f in families]
    steps += first + folds + [step for group in later for step in group]
    return [*steps, Step("dvc", ("repro",))]


def seed_tasks(work: Path, settings: Settings, method: str) -> list[str]:
    """The tasks an extra training seed of `method` is evaluated on: those that bear on a claim, the trained
    tasks with signal (the rule run in the worktree) and the unseen tasks (UDR's transfer)."""
    signal = tasks_with_signal(work, settings.method_tasks("epr")) or []
    return [t for t in settings.method_tasks(method) if t in signal or t in settings.evaluate.unseen_tasks]


def step_done(step: Step, work: Path, settings: Settings) -> bool:
    """Whether a step outside the pipeline is done in the worktree: every task it evaluates (the run's trained
    tasks; a seed's :func:`seed_tasks`) has its saved result."""
    if step.part == "labels" and label_tasks(settings) == []:  # no classification task with signal: nothing to do
        return True
    if step.tool == "fold":  # a family none of whose tasks has signal is not held out: nothing to do
        tasks = fold_tasks(work, settings, step.args[0])
        return tasks is not None and results_in(step, work, tasks)
    tasks = step_tasks(step, work, settings)
    if step.args[:1] == ("train",):  # the model its evaluation reads, trained (a session may end before that)
        return results_in(step, work, tasks) or multitask_trained(work, settings)
    return results_in(step, work, tasks)


def step_tasks(step: Step, work: Path, settings: Settings) -> list[str]:
    """The tasks a seed or udr step evaluates: a seed's :func:`seed_tasks`, else the run's trained tasks."""
    return seed_tasks(work, settings, step.args[0]) if step.tool == "seed" else settings.method_tasks("epr")


def multitask_trained(work: Path, settings: Settings) -> bool:
    """Whether `work` holds the multi-task EPR that `udr train --epr` trains from its settings: a finished model
    (one is renamed into place whole) whose record has this run's seed and EPR training settings."""
    from udr.retriever.recipes import baseline_train_settings, recorded_train_settings
    from udr.retriever.record import read_record

    record = read_record(work / "models" / MULTITASK)
    if record is None:
        return False
    train = recorded_train_settings(baseline_train_settings("epr", settings.train, None), mode="json")
    return (record.get("method"), record.get("seed"), record.get("train")) == ("epr", settings.seed, train)


def step_args(step: Step, work: Path, settings: Settings) -> list[str]:
    """`udr` arguments of an evaluation step outside the pipeline: the tasks whose saved results are missing
    (`-t` each) where some are there already, so that a step a session's end cut off goes on where it was."""
    if step.args[:1] != ("evaluate",) or not step.makes:
        return list(step.args)
    tasks = step_tasks(step, work, settings)
    missing = missing_results(step, work, tasks)
    return list(step.args) + ([a for t in missing for a in ("-t", t)] if len(missing) < len(tasks) else [])


def results_in(step: Step, folder: Path, tasks: list[str] | None) -> bool:
    """Whether the results of a step outside the pipeline are in `folder` (a worktree, or a saved state): for
    each of `tasks`, or (None: a state, which has no params to name them) for some task."""
    if step.part == "signal":  # the rule measured: its validation evaluations are done too
        measured = tasks_with_signal(folder, tasks) is not None if tasks is not None else signal_file(folder).is_file()
        if measured:
            return True
    if step.part == "labels":
        return (folder / LABEL_OUTPUTS[0]).is_file()
    made = folder / "metrics" / step.makes
    return bool(step.makes) and (made.is_dir() if tasks is None else not missing_results(step, folder, tasks))


def missing_results(step: Step, folder: Path, tasks: list[str]) -> list[str]:
    """The tasks of `tasks` with no saved result of `step` (metrics/<makes>/<task>.json) in `folder`."""
    return [t for t in tasks if not (folder / "metrics" / step.makes / f"{t}.json").is_file()]


def untracked_paths(work: Path) -> list[str]:
    """The paths in `work` that git neither tracks nor ignores (a folder all of whose files are such: the folder):
    the outputs this run made that a queued experiment's temporary folder needs as well."""
    return _git(work, "ls-files", "--others", "--exclude-standard", "--directory").splitlines()


def seed_experiment(name: str, method: str, seed) -> str:
    """The DVC experiment of run `name`'s extra training seed of `method`: `<name>-<method>-seed-<N>`."""
    return experiment_name(f"{name}-{method}", seed)


def queue_and_keep(work: Path, settings: Settings, experiment: str, planned, method: str, kept: str, env: dict) -> None:
    """Run the DVC experiment `experiment` in DVC's queue where it is not saved yet (`planned()`: its overrides and
    targets; the worktree's untracked outputs go along), then keep its evaluation of `method` in the worktree
    as the saved evaluation `kept`."""
    if experiment not in saved_experiments(work):
        overrides, targets = planned()
        args = exp_run_args(experiment, overrides, targets, queue=True, copy_paths=untracked_paths(work))
        run_queued(work, [args], settings, env=env)
    keep_evaluation(work, saved_experiments(work)[experiment], method, kept)


def run_seed(work: Path, settings: Settings, step: Step, name: str, env: dict) -> None:
    """A seed step (`step.args`: method, seed): the DVC experiment `<name>-<method>-seed-<N>`, `train.seed=N` and the
    evaluation on :func:`seed_tasks` only, run in DVC's queue (a temporary folder: the worktree's models and
    outputs stay the global seed's; its finished stages and outputs come along), then kept in the worktree as
    the saved evaluation `<method>-seed-<N>` (:func:`udr.experiments.seeds.kept_name`)."""
    method, seed = step.args[0], int(step.args[1])

    def planned():
        tasks = seed_tasks(work, settings, method)
        overrides = (f"train.seed={seed}", "evaluate.shots_tasks=[]", f"evaluate.tasks=[{','.join(tasks)}]")
        return overrides, (f"evaluate@{method}",)

    queue_and_keep(work, settings, seed_experiment(name, method, seed), planned, method, kept_name(method, seed), env)


def fold_tasks(folder: Path, settings: Settings, family: str) -> list[str] | None:
    """The tasks a fold holding `family` out is evaluated on: the family's trained tasks with signal (the rule
    run in `folder`, a worktree or a state; None where it has not run)."""
    folds = signal_folds(settings, folder)
    return None if folds is None else folds.get(family, [])


def fold_run_experiment(name: str, family: str) -> str:
    """The DVC experiment of run `name`'s fold holding `family` out: `<name>-lofo-<family>`."""
    return f"{name}-{fold_experiment(family)}"


def run_fold(work: Path, settings: Settings, step: Step, name: str, env: dict) -> None:
    """A fold step (`step.args`: family): the DVC experiment `<name>-lofo-<family>`, UDR trained on the other
    families' tasks and evaluated on the family's tasks with signal (:func:`udr.experiments.lofo.lofo_experiments`),
    run in DVC's queue as a seed is, then kept in the worktree as the saved evaluation `udr-lofo-<family>`."""
    family = step.args[0]

    def planned():
        (fold,) = [e for e in lofo_experiments(settings, work) if e.name == fold_experiment(family)]
        return fold.overrides, fold.targets

    queue_and_keep(work, settings, fold_run_experiment(name, family), planned, "udr", fold_kept_name(family), env)


def run_udr(args: list[str], work: Path, env: dict) -> None:
    """Run `udr ARGS` in `work` with this Python's scripts first on PATH and `env` beside; a failure is one
    UdrError line."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    done = subprocess.run(["udr", *args], cwd=work, env={**os.environ, "PATH": path, **env})
    if done.returncode != 0:
        raise UdrError(f"`udr {' '.join(args)}` failed with exit {done.returncode} in {work}")


def suite_folder(root: Path, name: str) -> Path:
    """metrics/<name>/, where run `name` keeps its state and tables (a one-line UdrError for a bad name)."""
    return Path(root) / "metrics" / check_experiment_name(name)


def run_suite(
    root: Path,
    *,
    profile: Path = PROFILE,
    work: Path = WORK,
    name: str = EXPERIMENT,
    seeds=SEEDS,
    dry: bool = False,
    commit: bool = False,
):
    """Reproduce `profile` in its worktree (`dvc repro`, resumable), each trained retriever with the extra training
    `seeds` too, and save it as the DVC experiment `name`; with `commit`, the state is committed after each step
    (:func:`commit_state`). Returns the worktree."""
    from udr.config import load_settings

    root = Path(root)
    state = suite_folder(root, name) / STATE
    params = suite_params(root, root / profile, work)
    # the results and predictions are git's in this pipeline (cache: false); a new task's are untracked
    save = ["exp", "save", "-n", name, "-f", *(a for f in SAVED for a in ("-I", f))]
    steps = suite_steps(seeds, suite_families(load_settings(root / profile)))
    if dry:
        rev = state_commit(state) or "HEAD"
        print(f"git worktree add --detach {work} {rev}  # where it is missing; then {state} copied in")
        for step in steps:
            if step.tool == "udr":
                print(" ".join(["udr", *step.args]) + f"  # where the {step.part} part is not done")
            elif step.tool == "seed":
                method, seed = step.args
                overrides = f"-S train.seed={seed} -S evaluate.tasks=[...]"
                print(
                    f"dvc exp run --queue -n {seed_experiment(name, method, seed)} {overrides} evaluate@{method}"
                    "  # evaluate.tasks: those with signal and the unseen; where the seed is not kept yet"
                )
            elif step.tool == "fold":
                overrides = "-S train.tasks=[...] -S evaluate.tasks=[...]"
                print(
                    f"dvc exp run --queue -n {fold_run_experiment(name, step.args[0])} {overrides} evaluate@udr"
                    f"  # {step.args[0]} held out, where it has a task with signal and is not kept yet"
                )
            else:
                run_dvc(list(step.args), root / work, dry=True)
        run_dvc(save, root / work, dry=True)
        return root / work
    if commit:  # a commit that fails hours into the run would stop it: no identity stops it now, in one line
        _git(root, "var", "GIT_COMMITTER_IDENT")
    work = restored_worktree(root, work, state, steps)
    write_text_atomic(work / "params.yaml", yaml.safe_dump(params, sort_keys=False))
    settings = load_settings(work / "params.yaml")  # a profile udr cannot read stops here, in one line
    # the stages' `udr` runs the worktree's code, the commit the run began with
    code = {"PYTHONPATH": os.pathsep.join([str(work), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    outside = [s for s in steps if s.tool != "dvc"]
    for step in steps:
        if step.tool == "dvc":
            run_dvc(list(step.args), work, env=code)
        elif step_done(step, work, settings):
            pass
        elif step.tool == "seed":
            run_seed(work, settings, step, name, code)
        elif step.tool == "fold":
            run_fold(work, settings, step, name, code)
        else:
            run_udr(step_args(step, work, settings), work, code)
        done = [p for s in outside if step_done(s, work, settings) for p in s.outputs]
        save_state(work, state, parts=done)
        if commit:
            commit_state(root, state, f"{name} state: {step_label(step)} done")
    run_dvc(save, work, env=code)
    return work


def state_progress(root: Path, name: str = EXPERIMENT, seeds=SEEDS, profile: Path = PROFILE) -> str:
    """What the saved state of run `name` holds so far, as Markdown: each task's graded score (test) of every
    retriever evaluated, and the steps still to come (from the state and `profile` alone: no worktree, no
    DVC)."""
    from udr.config import METHODS, load_settings

    state = suite_folder(root, name) / STATE
    if not (state / LOCK).is_file():
        raise UdrError(f"no saved state in {state}: `udr exp suite` has not finished a step here yet")
    settings = load_settings(Path(root) / profile)
    steps = suite_steps(seeds, suite_families(settings))
    to_come = []
    for step in steps:
        if step.tool == "fold":  # kept, or not held out: its family has no task with signal
            done = results_in(step, state, None) or fold_tasks(state, settings, step.args[0]) == []
        elif step.tool == "dvc" and step.args[1:]:  # an evaluation's results (the feedback check's: metrics/score)
            done = (state / "metrics" / step.args[1].split("@")[-1]).is_dir()
        elif step.tool != "dvc":
            done = results_in(step, state, None)
        else:
            done = False
        if not done:
            to_come.append(step_label(step))
    metrics = state / "metrics"
    retrievers = [m for m in (*METHODS, MULTITASK) if (metrics / m).is_dir()]
    retrievers += sorted(p.name for p in metrics.glob("*+labels") if p.is_dir())  # label-aware selection
    extra = [s.makes for s in steps if s.tool in ("seed", "fold") and (metrics / s.makes).is_dir()]
    return (
        f"# {name}: the saved state so far (commit {state_commit(state)[:12]})\n\n"
        + (_scores_table(metrics, retrievers) if retrievers else "No evaluation yet.\n")
        + (f"\nExtra training seeds and folds (a family held out):\n\n{_scores_table(metrics, extra)}" if extra else "")
        + "\nSteps to come (a step shown done may run again where its inputs changed):\n\n"
        + "".join(f"- {step}\n" for step in to_come)
    )


def step_label(step: Step) -> str:
    """A step in words: `dvc repro evaluate@udr`, training seed 1 of udr, sentiment held out."""
    shown = {"seed": f"training seed {step.args[-1]} of {step.args[0]}", "fold": f"{step.args[0]} held out"}
    return shown.get(step.tool) or f"`{' '.join([step.tool, *step.args])}`"


def _scores_table(metrics: Path, names: list[str]) -> str:
    """Each task's graded score (test) of each saved evaluation of `names` in `metrics`, as Markdown."""
    scores = {
        m: {f.stem: read_json(f, "result")["graded"]["score"] for f in sorted((metrics / m).glob("*.json"))}
        for m in names
    }
    tasks = list(dict.fromkeys(t for m in names for t in scores[m]))
    cells = [[t, *(f"{scores[m][t]:.1f}" if t in scores[m] else "" for m in names)] for t in tasks]
    return markdown_table(["task", *names], cells)


def suite_groups(settings: Settings, trained: list[str], signal: list[str] | None) -> dict[str, list[str]]:
    """The suite's groups of tasks: the trained ones, split as the paper's Tables 1-2 (classification and
    multiple choice; generation) and by the signal rule where it has run in the worktree; the unseen tasks of
    a family some trained task belongs to (a new dataset of a known family), and of families none does (the
    paper's Table 5)."""
    groups = {"all trained tasks": trained}
    choice = [t for t in trained if not settings.task(t).generation]
    if choice and len(choice) < len(trained):
        groups["trained: classification and multiple choice"] = choice
        groups["trained: generation"] = [t for t in trained if t not in choice]
    groups |= {g: ts for g, ts in task_groups(settings, trained, signal).items() if g != "unseen tasks"}
    families = {settings.task(t).family for t in trained}
    unseen = [t for t in settings.evaluation_tasks() if t not in trained]
    groups["unseen tasks of a trained family"] = [t for t in unseen if settings.task(t).family in families]
    groups["unseen families"] = [t for t in unseen if settings.task(t).family not in families]
    return {g: tasks for g, tasks in groups.items() if tasks}


def suite_table(root: Path, name: str = EXPERIMENT, work: Path = WORK, seeds=SEEDS) -> dict:
    """Every number of the table, read from the experiment `name` at its commit in the suite's worktree: the
    seed table's (:func:`udr.experiments.seeds.seed_table`: per task each retriever's score, each training
    seed's where the worktree has saved seed experiments, and the claims on seed-averaged retrievers) over
    :func:`suite_groups`."""
    work = Path(root) / work
    if not (work / "params.yaml").is_file():
        raise UdrError(f"missing {work / 'params.yaml'}: the suite's worktree is gone; run `udr exp suite` again")
    rev = saved_experiments(work).get(name)
    if rev is None:
        raise UdrError(f"no DVC experiment {name!r} here: run `udr exp suite` first")
    return {"experiment": name, "commit": rev} | seed_table(work, seeds, rev, grouping=suite_groups, experiments=False)


def suite_markdown(table: dict) -> str:
    """metrics/<name>/pipeline.md from :func:`suite_table`'s numbers."""
    return (
        "# The offline suite, run by DVC\n\n"
        f"The DVC experiment `{table['experiment']}` (commit {table['commit'][:12]}; `udr exp suite`): the suite "
        "profile reproduced by the project's pipeline, every trained retriever with training seeds "
        f"{', '.join(table['seeds'])}. Graded metric in percent on each task's test rows; beside, the paper's "
        "values (GPT-Neo-2.7B, the whole test sets) for the trained tasks whose data this project takes from "
        "the paper's release.\n\n" + seed_tables_markdown(table)
    )


# The headline's columns (the suite's groups, those the table has) and rows: each retriever's average, then UDR − each
HEADLINE_GROUPS = (
    "tasks with signal",
    "all trained tasks",
    "unseen families",
    "unseen tasks of a trained family",
)
HEADLINE_METHODS = ("udr", "epr", "dr-target", MULTITASK, "bm25", "sbert", "random")


def suite_headline(table: dict) -> str:
    """metrics/<name>/headline.md, the README's view of :func:`suite_table`'s numbers: per group of
    :data:`HEADLINE_GROUPS`, its test rows, each retriever's average (a seeded one's mean over the seeds evaluated
    on the whole group, ± their standard deviation), and UDR − each other retriever, seed-averaged with its paired
    95% interval (bold: resolved). A seeded retriever evaluated on the group with one seed only says so."""
    from udr.evaluation.bootstrap import Interval

    groups = [g for g in HEADLINE_GROUPS if g in table["groups"]]
    tasks = {g: [table["tasks"][t] for t in table["groups"][g]] for g in groups}

    def average(m: str, g: str) -> str:
        each = group_averages(tasks[g], m)
        there = sum(v is not None for v in each)
        return seeded_cells(each)[1] + (" (one seed)" if len(each) > 1 and there == 1 else "") if there else ""

    averages = {m: [average(m, g) for g in groups] for m in HEADLINE_METHODS}
    claims = {(c["b"], c["group"]): c for c in table["claims"] if c["a"] == "udr"}
    methods = [m for m in HEADLINE_METHODS if any(averages[m])]
    header = ["", *(f"{g} ({', '.join(table['groups'][g])})" if len(table["groups"][g]) <= 4 else g for g in groups)]
    cells = [["test examples", *(str(sum(row["n"] for row in tasks[g])) for g in groups)]]
    cells += [[LABELS[m], *averages[m]] for m in methods]
    cells += [
        [f"UDR − {LABELS[b]}"]
        + [Interval.of(claims[b, g]["interval"]).markdown() if (b, g) in claims else "" for g in groups]
        for b in methods
        if b != "udr" and any((b, g) in claims for g in groups)
    ]
    return markdown_table(header, cells)


def write_suite_table(root: Path, name: str = EXPERIMENT, work: Path = WORK, seeds=SEEDS) -> Path:
    """metrics/<name>/pipeline.md (and .json) with its headline.md, and metrics/<name>/lofo.md (and .json) where
    a fold ran."""
    out = suite_folder(root, name) / TABLE
    table = suite_table(root, name, work, seeds)
    write_json_atomic(out.with_suffix(".json"), table)
    write_text_atomic(out, suite_markdown(table))
    write_text_atomic(out.with_name(HEADLINE), suite_headline(table))
    folds = lofo_table(Path(root) / work, table["commit"], experiments=False)  # the folds kept in the worktree
    if folds["groups"]:
        lofo = out.with_name(LOFO_TABLE)
        made_by = f"`udr exp suite` (each fold a DVC experiment, `{name}-lofo-<family>`, kept as `udr-lofo-<family>`)"
        write_json_atomic(lofo.with_suffix(".json"), folds)
        write_text_atomic(lofo, lofo_markdown(folds, made_by))
    return out
