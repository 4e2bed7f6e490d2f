"""The offline suite as a DVC pipeline: a profile's configuration (default profiles/suite.yaml: 16 trained
tasks from 7 families, unseen tasks beside) reproduced by the project's own dvc.yaml, then saved as the DVC
experiment `suite`, which `dvc exp show` lists beside the seeds and the folds.

It runs in a git worktree of its own (`build/suite` by default) made at HEAD once, so the default
pipeline's outputs in the workspace stay as they are and the run keeps the code of the commit it began
with; its params.yaml is the profile with the data mirror's path made absolute. `dvc repro` there is the
whole run: every stage the default configuration has (data, the shipped round-0 feedback checked, UDR,
DR-Target and EPR per task, the index, every retriever's evaluation, the report), and it resumes where it
stopped: a finished stage is in the worktree's dvc.lock and is not run again. At the end
`dvc exp save -n suite` records the worktree's state as the experiment. A fresh start (new code): remove
the worktree (`git worktree remove --force build/suite`).

The table, metrics/<name>/pipeline.md (and .json; the suite's beside its other results in metrics/suite/),
reads the saved experiment at its commit: per group of tasks (trained; unseen tasks of a trained family;
unseen families) each retriever's average and UDR minus each baseline with its paired 95% interval over the
same test rows.

Imports of udr.config are inside the functions that use them, to keep the start of `udr` light.
"""

from __future__ import annotations

import os
import statistics
import subprocess
from pathlib import Path

import yaml

from udr.errors import UdrError
from udr.evaluation.bootstrap import Interval
from udr.evaluation.claims import BOOTSTRAP_RESAMPLES, CLAIM_MARGIN
from udr.experiments.dvc import SavedScorers, compare_revisions, method_scores, run_dvc, saved_experiments
from udr.experiments.tables import markdown_table
from udr.util.files import write_json_atomic, write_text_atomic

PROFILE = Path("profiles/suite.yaml")
WORK = Path("build/suite")
EXPERIMENT = "suite"
TABLE = "pipeline.md"  # in metrics/<the experiment's name>/: metrics/suite/ beside the suite's other results
SAVED = ("metrics", "data/predictions")  # what the experiment's commit keeps beside dvc.lock and params
METHODS = ("random", "bm25", "sbert", "dr-target", "epr", "udr")
LABELS = {"random": "random", "bm25": "BM25", "sbert": "SBERT", "dr-target": "DR-Target (per task)"}
LABELS |= {"epr": "EPR (per task)", "udr": "UDR"}


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise UdrError(f"`git {' '.join(args)}` failed: {tail[0]}")
    return done.stdout.strip()


def suite_params(root: Path, profile: Path) -> dict:
    """The profile's params with the data mirror's path absolute: $UDR_DATA_DIR where it is set, else the
    profile's `data.source_dir` read as params.yaml reads it (relative to the project root)."""
    from udr.config import DATA_DIR_ENV

    if not profile.is_file():
        raise UdrError(f"missing profile {profile}: give a params file (`udr exp suite --profile FILE`)")
    params = yaml.safe_load(profile.read_text())
    if not isinstance(params, dict) or not isinstance(params.get("data"), dict):
        raise UdrError(f"bad profile {profile}: not a params file (no data section)")
    source = os.environ.get(DATA_DIR_ENV) or Path(root) / params["data"].get("source_dir", "")
    params["data"]["source_dir"] = str(Path(source).resolve())
    return params


def suite_worktree(root: Path, work: Path) -> Path:
    """The run's worktree: made at HEAD where there is none (`git worktree add --detach`), else checked to be
    a worktree of this repository. Returns its resolved path."""
    work = (Path(root) / work).resolve()
    if not work.exists():
        _git(root, "worktree", "add", "--detach", str(work), "HEAD")
        return work
    if not (work / ".git").is_file():
        raise UdrError(f"{work} is not a git worktree of this repository: remove it or give another --work")
    mine, theirs = (Path(_git(p, "rev-parse", "--path-format=absolute", "--git-common-dir")) for p in (root, work))
    if mine != theirs:
        raise UdrError(f"{work} is a worktree of another repository ({theirs}): give another --work")
    return work


def run_suite(root: Path, *, profile: Path = PROFILE, work: Path = WORK, name: str = EXPERIMENT, dry: bool = False):
    """Reproduce `profile` in its worktree (`dvc repro`, resumable) and save it as the DVC experiment `name`.
    Returns the worktree."""
    from udr.config import load_settings

    root = Path(root)
    params = suite_params(root, root / profile)
    if dry:
        print(f"git worktree add --detach {work} HEAD  # where it is missing")
        run_dvc(["repro"], root / work, dry=True)
        run_dvc(["exp", "save", "-n", name, "-f", *(a for f in SAVED for a in ("-I", f))], root / work, dry=True)
        return root / work
    work = suite_worktree(root, work)
    write_text_atomic(work / "params.yaml", yaml.safe_dump(params, sort_keys=False))
    load_settings(work / "params.yaml")  # a profile udr cannot read stops here, in one line
    # the stages' `udr` runs the worktree's code, the commit the run began with
    code = {"PYTHONPATH": os.pathsep.join([str(work), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    run_dvc(["repro"], work, env=code)
    # the results and predictions are git's in this pipeline (cache: false); a new task's are untracked
    run_dvc(["exp", "save", "-n", name, "-f", *(a for f in SAVED for a in ("-I", f))], work, env=code)
    return work


def task_groups(settings) -> dict[str, list[str]]:
    """The suite's groups of tasks: the trained ones; the unseen tasks of a family some trained task belongs
    to (a new dataset of a known family); the unseen tasks of families none does (the paper's Table 5)."""
    trained = settings.task_names()
    families = {settings.task(t).family for t in trained}
    unseen = [t for t in settings.evaluation_tasks() if t not in trained]
    groups = {
        "trained tasks": trained,
        "unseen tasks of a trained family": [t for t in unseen if settings.task(t).family in families],
        "unseen families": [t for t in unseen if settings.task(t).family not in families],
    }
    return {g: tasks for g, tasks in groups.items() if tasks}


def suite_table(root: Path, name: str = EXPERIMENT, work: Path = WORK) -> dict:
    """Every number of the table, read from the experiment `name` at its commit: per group each retriever's
    average, and UDR minus each baseline (paired bootstrap, every task resampled at once). The test rows are
    the worktree's prepared ones (the run's; the workspace has the default configuration's tasks only)."""
    from udr.config import load_settings

    work = Path(root) / work
    params = work / "params.yaml"
    if not params.is_file():
        raise UdrError(f"missing {params}: the suite's worktree is gone; run `udr exp suite` again")
    rev = saved_experiments(work).get(name)
    if rev is None:
        raise UdrError(f"no DVC experiment {name!r} here: run `udr exp suite` first")
    settings = load_settings(params)
    scorers = SavedScorers(work)
    out: dict = {"experiment": name, "commit": rev, "resamples": BOOTSTRAP_RESAMPLES, "groups": {}}
    for group, tasks in task_groups(settings).items():
        methods = [m for m in METHODS if set(tasks) <= set(settings.method_tasks(m))]
        averages = {m: statistics.fmean(method_scores(work, m, tasks, rev).values()) for m in methods}
        udr = {"udr": {t: ("udr", rev) for t in tasks}}
        minus = {}
        for b in (m for m in methods if m != "udr"):
            _, interval = compare_revisions(work, udr, {t: (b, rev) for t in tasks}, settings.seed, scorers)["udr"]
            minus[b] = interval.to_dict()
        out["groups"][group] = {"tasks": tasks, "averages": averages, "udr_minus": minus}
    return out


def suite_markdown(table: dict) -> str:
    """metrics/suite/pipeline.md from :func:`suite_table`'s numbers."""
    rows = []
    for group, part in table["groups"].items():
        for m, average in part["averages"].items():
            versus = part["udr_minus"].get(m)
            cell = Interval.of(versus).markdown() if versus else ""
            rows.append([group, LABELS[m], f"{average:.1f}", cell])
    return (
        "# The offline suite, run by DVC\n\n"
        f"The DVC experiment `{table['experiment']}` (commit {table['commit'][:12]}; `udr exp suite`): the suite "
        "profile reproduced by the project's pipeline. Graded metric in percent, averaged over each group's tasks; "
        f"UDR minus each baseline: paired bootstrap 95% interval over the same test rows ({table['resamples']} "
        f"resamples, every task resampled at once), **bold** where the unrounded interval clears 0 by "
        f"{CLAIM_MARGIN} points.\n\n" + markdown_table(["tasks", "retriever", "average", "UDR − it [95% CI]"], rows)
    )


def write_suite_table(root: Path, name: str = EXPERIMENT, work: Path = WORK) -> Path:
    table = suite_table(root, name, work)
    out = Path(root) / "metrics" / name / TABLE
    write_json_atomic(out.with_suffix(".json"), table)
    write_text_atomic(out, suite_markdown(table))
    return out
