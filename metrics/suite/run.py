"""The whole offline suite on test, run once for the recipe chosen on validation (README.md beside this).

One retriever trained on the round-0 feedback of 16 tasks from 7 families (profiles/suite.yaml), against
EPR on the same feedback and steps, BM25, SBERT and random, on the 16 trained tasks and on the unseen
ones: three held-out families (subj, cola, commongen) and cr, an unseen dataset of a trained family.

    .venv/bin/python metrics/suite/run.py [--only setup|jobs|report] [--jobs GLOBS] [--workers 2] [--threads 1]

Everything but the committed results lives in a project of its own (--work, default build/suite: its own
params.yaml, data/, models/, metrics/), with the udr code of one commit (--rev, git archive into
WORK/code, first on PYTHONPATH), so neither the default pipeline's outputs nor edits in the working tree
enter the run. Resumable: run it again and it skips finished jobs (WORK/done), `udr train` resumes from
its checkpoints and evaluations resume per task. The report step copies results and predictions here and
writes results.md, summary.json and headline.md (the README's table) from them.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NoReturn

import yaml

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "metrics" / "suite"
TRAINED = ["sst2", "sst5", "mr", "trec", "agnews", "rte", "snli", "copa", "cosmos_qa", "comv", "come"]
TRAINED += ["break", "smcalflow", "e2e", "dart", "python_code"]
HELD_OUT = ["subj", "cola", "commongen"]  # whole families no trained task belongs to
SIBLING = ["cr"]  # an unseen dataset of a trained family (sentiment)
GROUPS = {"trained": TRAINED, "held-out": HELD_OUT, "sibling": SIBLING}
# The recipe chosen on validation (validation.md): `udr train` overrides, and the WiSE-FT weight of the
# trained query encoder (None: not interpolated).
RECIPE: list[str] | None = ["train.loss=anchored", "train.loss_lambda=0.5"]  # None: not chosen yet
ALPHA: float | None = 0.75
UDR = "udr-suite"  # the saved name of the chosen recipe's evaluations
METHODS = [UDR, "epr", "bm25", "sbert", "random"]
LABEL = {UDR: "UDR (chosen recipe)", "epr": "EPR (same feedback, steps)", "bm25": "BM25", "sbert": "SBERT"}
LABEL["random"] = "random"


def log(work: Path, text: str) -> None:
    line = f"[{time.strftime('%H:%M:%S', time.gmtime())}] {text}"
    print(line, flush=True)
    with open(work / "logs" / "run.log", "a") as f:
        f.write(line + "\n")


def udr(work: Path, *args: str, threads: int, log_name: str | None = None) -> str | None:
    """`udr ARGS -p WORK/params.yaml` with the run's code and threads: its output appended to logs/LOG_NAME,
    or (no LOG_NAME) its standard output returned."""
    env = {**os.environ, "PYTHONPATH": str(work / "code"), "OMP_NUM_THREADS": str(threads)}
    env |= {"MKL_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "udr.cli", *args, "-p", str(work / "params.yaml")]
    if log_name is None:
        return subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, check=True).stdout
    with open(work / "logs" / log_name, "a") as out:
        subprocess.run(argv, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, check=True)
    return None


def result_file(work: Path, name: str, task: str) -> Path:
    """A saved test evaluation's result in the run's project."""
    return work / "metrics" / name / f"{task}.json"


def suite_params(work: Path) -> dict:
    """profiles/suite.yaml with the data mirror and the shipped feedback as absolute paths, the held-out
    tasks' test sets at 300 rows, and no shots plot or experiment beside (the recipe goes to `udr train`)."""
    p = yaml.safe_load((REPO / "profiles" / "suite.yaml").read_text())
    p["data"]["source_dir"] = str((REPO / p["data"]["source_dir"]).resolve())
    p["score"]["shipped"] = str(REPO / p["score"]["shipped"])
    for task in HELD_OUT + SIBLING:
        p["evaluate"]["unseen_tasks"][task]["max_test"] = 300
    p["evaluate"]["shots_tasks"] = []
    p["evaluate"]["beside"] = []
    return p


def fail(message: str) -> NoReturn:
    """Stop with a one-line error (exit status 1)."""
    raise SystemExit(f"run.py: {message}")


def work_folder(raw: str) -> Path:
    """The resolved --work folder; an empty name or a file, a one-line error."""
    if not raw.strip():
        fail("--work is empty: give the run's folder (default build/suite)")
    work = Path(raw).expanduser().resolve()
    if work.exists() and not work.is_dir():
        fail(f"--work {raw} is a file, not a folder")
    return work


def commit_of(rev: str) -> str:
    """The commit `rev` names in this repository; a name of none, a one-line error."""
    found = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if rev.startswith("-") or found.returncode != 0:
        fail(f"--rev {rev!r} names no commit of {REPO}")
    return found.stdout.strip()


def setup(work: Path, commit: str, threads: int) -> None:
    code = work / "code"
    before = (code / "REV").read_text().strip() if (code / "REV").is_file() else None
    if before not in (None, commit) and any(p.name != "setup" for p in (work / "done").iterdir()):
        sys.exit(f"{work} holds jobs run with the udr code of {before}, not {commit}: pass --rev {before}")
    if before != commit:
        shutil.rmtree(code, ignore_errors=True)
        code.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "udr"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(code)], input=archive.stdout, check=True)
        (code / "REV").write_text(commit + "\n")
    (work / "params.yaml").write_text(yaml.safe_dump(suite_params(work), sort_keys=False))
    log(work, f"setup: udr code of {commit}")
    if (work / "done" / "setup").exists():
        return
    for stage in ("prepare", "models", "candidates"):
        udr(work, stage, threads=threads, log_name=f"{stage}.log")
    # The shipped feedback of every trained task, checked on a seeded sample (score.check_queries).
    udr(work, "score", "--round", "0", threads=threads, log_name="score.log")
    (work / "done" / "setup").touch()


def udr_model() -> str:
    """The folder of the model evaluated as UDR: the trained one, or its interpolation (ALPHA)."""
    return "models/udr-trained" if ALPHA is None else f"models/udr-wise-{ALPHA}"


def train(work: Path, out: str, *extra: str, threads: int, log_name: str) -> None:
    """`udr train` of round 0 on the trained tasks into OUT (EXTRA: --epr, -S overrides)."""
    tasks = f"train.tasks=[{','.join(TRAINED)}]"
    udr(work, "train", "--round", "0", "--out", out, "-S", tasks, *extra, threads=threads, log_name=log_name)


def train_udr(work: Path, threads: int) -> None:
    overrides = [a for s in RECIPE or [] for a in ("-S", s)]
    train(work, "models/udr-trained", *overrides, threads=threads, log_name="train-udr.log")


def interpolate_udr(work: Path, threads: int) -> None:
    if ALPHA is not None:
        args = ["models/udr-trained", "--alpha", str(ALPHA), "--out", udr_model()]
        udr(work, "interpolate", *args, threads=threads, log_name="train-udr.log")


def train_epr(work: Path, threads: int) -> None:
    train(work, "models/epr", "--epr", threads=threads, log_name="train-epr.log")


def claimed(work: Path, key: str) -> bool:
    """Claim `key` for this process (WORK/claims/KEY holds its pid); False where a live process holds it,
    so that two runs on one WORK (e.g. with different --jobs) never do the same evaluation at once."""
    path = work / "claims" / key
    path.parent.mkdir(exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        holder = int(path.read_text() or 0)
        try:
            os.kill(holder, 0)
        except ProcessLookupError:  # a stopped run's claim
            path.unlink(missing_ok=True)
            return claimed(work, key)
        return holder == os.getpid()
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def evaluate(work: Path, name: str, tasks: list[str], threads: int) -> None:
    args = ["-m", "udr", "--model", udr_model(), "--save-as", UDR] if name == UDR else ["-m", name]
    for task in [t for t in tasks if not result_file(work, name, t).is_file()]:
        if claimed(work, f"{name}-{task}"):
            udr(work, "evaluate", *args, "-t", task, threads=threads, log_name=f"eval-{name}.log")
    if not all(result_file(work, name, t).is_file() for t in tasks):
        raise subprocess.CalledProcessError(1, f"evaluate {name}: tasks left to another run")


def job_list(threads: int) -> dict[str, tuple[str | None, object]]:
    """{job: (the job it waits for, what it runs)}, in the order workers take them."""
    jobs: dict[str, tuple[str | None, object]] = {
        "train-udr": (None, lambda w: train_udr(w, threads)),
        "train-epr": (None, lambda w: train_epr(w, threads)),
        "interpolate-udr": ("train-udr", lambda w: interpolate_udr(w, threads)),
    }
    for name in ("bm25", "sbert", UDR, "epr", "random"):
        wait = {UDR: "interpolate-udr", "epr": "train-epr"}.get(name)
        for group, tasks in GROUPS.items():
            jobs[f"eval-{name}-{group}"] = (wait, lambda w, n=name, t=tasks: evaluate(w, n, t, threads))
    return jobs


def run_jobs(work: Path, workers: int, threads: int, only: list[str] | None = None) -> None:
    jobs = job_list(threads)
    if only:
        jobs = {j: v for j, v in jobs.items() if any(fnmatch.fnmatch(j, pattern) for pattern in only)}
    if RECIPE is None:
        log(work, "no recipe chosen yet (RECIPE): UDR's jobs left out")
        jobs = {j: v for j, v in jobs.items() if not j.endswith("-udr") and not j.startswith(f"eval-{UDR}")}
    done, failed, running = work / "done", set(), set()
    lock = threading.Lock()

    def take() -> str | None:
        """The first pending job whose dependency is done; None when every pending one waits on a failure."""
        while True:
            with lock:
                pending = [j for j in jobs if not (done / j).exists() and j not in running and j not in failed]
                failed.update(j for j in pending if jobs[j][0] in failed)
                pending = [j for j in pending if j not in failed]
                ready = [j for j in pending if jobs[j][0] is None or (done / jobs[j][0]).exists()]
                if ready:
                    running.add(ready[0])
                    return ready[0]
                if not pending:
                    return None
            time.sleep(20)

    def worker(i: int) -> None:
        while (job := take()) is not None:
            start = time.time()
            log(work, f"worker {i}: {job}")
            try:
                jobs[job][1](work)
                (done / job).touch()
                log(work, f"worker {i}: {job} done in {time.time() - start:.0f} s")
            except subprocess.CalledProcessError:
                failed.add(job)
                log(work, f"worker {i}: {job} FAILED after {time.time() - start:.0f} s (logs/)")
            with lock:
                running.discard(job)

    threads_ = [threading.Thread(target=worker, args=(i + 1,)) for i in range(workers)]
    for t in threads_:
        t.start()
        time.sleep(2)
    for t in threads_:
        t.join()


def compare(work: Path, a: str, b: str, tasks: list[str]) -> dict | None:
    if not all(result_file(work, m, t).is_file() for m in (a, b) for t in tasks):
        return None
    return json.loads(udr(work, "exp", "compare", a, b, *[x for t in tasks for x in ("-t", t)], "--json", threads=1))


def reported_params(work: Path) -> str:
    """The run's params.yaml as the report commits it: paths relative to the repository."""
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["data"]["source_dir"] = os.path.relpath(params["data"]["source_dir"], REPO)
    params["score"]["shipped"] = os.path.relpath(params["score"]["shipped"], REPO)
    head = "# The params of this run's project (run.py); paths relative to the repository.\n"
    return head + yaml.safe_dump(params, sort_keys=False)


def check_made_here(work: Path) -> None:
    """`--only report` rewrites the committed results from `work`: a one-line error unless `work` is the
    run that made them (its code revision and params those committed in OUT)."""
    again = "run run.py without --only (finished jobs are skipped) to report a run of its own"
    rev, params = work / "code" / "REV", work / "params.yaml"
    if not (rev.is_file() and params.is_file()):
        fail(f"{work} holds no suite run (no code/REV or params.yaml): {again}")
    committed = (OUT / "CODE_REV").read_text().strip() if (OUT / "CODE_REV").is_file() else None
    if rev.read_text().strip() != committed:
        fail(f"{work} ran the udr code of {rev.read_text().strip()[:12]}, the committed results {committed}: {again}")
    try:
        ours = reported_params(work)
    except (KeyError, TypeError, ValueError, yaml.YAMLError):  # not a suite run's params at all
        ours = None
    if not (OUT / "params.yaml").is_file() or ours != (OUT / "params.yaml").read_text():
        fail(f"{work}/params.yaml is not the committed results' {OUT / 'params.yaml'}: {again}")


def report(work: Path) -> None:
    """Results and predictions copied to OUT, UDR minus each method per group (`udr exp compare --json`),
    and results.md, summary.json and headline.md written from them."""
    from write_results import write_all  # beside this file

    for name in METHODS:
        if (work / "metrics" / name).is_dir():
            (OUT / name).mkdir(parents=True, exist_ok=True)
            for f in (work / "metrics" / name).glob("*.json"):
                shutil.copy2(f, OUT / name / f.name)
            for f in (work / "data" / "predictions" / name).glob("*.parquet"):
                shutil.copy2(f, OUT / name / f.name)
    for b in METHODS[1:]:
        for group, tasks in GROUPS.items():
            d = compare(work, UDR, b, tasks)
            if d is not None:
                (OUT / f"compare-{b}-{group}.json").write_text(json.dumps(d, indent=1) + "\n")
    for name in ("udr", "epr"):
        metrics = work / "metrics" / "train" / ("runs/udr-trained" if name == "udr" else "epr") / "metrics.json"
        if metrics.is_file():
            shutil.copy2(metrics, OUT / f"train-{name}.json")
    (OUT / "params.yaml").write_text(reported_params(work))
    shutil.copy2(work / "code" / "REV", OUT / "CODE_REV")
    write_all(OUT, work / "logs" / "run.log", RECIPE, ALPHA)
    log(work, f"report: {OUT / 'results.md'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default=str(REPO / "build" / "suite"))
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", choices=["setup", "jobs", "report"])
    parser.add_argument("--jobs", help="Only these jobs (comma-separated globs, e.g. 'train-epr,eval-bm25-*').")
    args = parser.parse_args()
    work = work_folder(args.work)
    commit = commit_of(args.rev)
    if args.only == "report":
        check_made_here(work)
    for folder in ("logs", "done"):
        (work / folder).mkdir(parents=True, exist_ok=True)
    start = time.time()
    if args.only in (None, "setup"):
        setup(work, commit, args.threads * args.workers)
    if args.only in (None, "jobs"):
        run_jobs(work, args.workers, args.threads, args.jobs.split(",") if args.jobs else None)
    if args.only in (None, "report"):
        report(work)
    log(work, f"run.py {args.only or 'all'}: {time.time() - start:.0f} s wall")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
