"""Shared fixtures: the real data mirror, a CLI runner, a tiny project directory, and tiny projects run
through the pipeline once per session: `looped` (two rounds of Algorithm 1; the retriever, training and
`udr rounds` tests), `evaluated` (every method evaluated and the report written; the evaluate, report and
`udr show` tests and the benchmarks' on it) and `served` (the serving tests)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from tests.tiny_models import save_tiny_encoder, save_tiny_lm

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("UDR_DATA_DIR", REPO.parent / "shared" / "data")).resolve()


def pytest_collection_modifyitems(config, items):
    """The slow tests first (stable otherwise): under `pytest -n 2 --dist loadfile` (`make test`) their files
    start on the workers at once instead of one of them ending the run alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA_DIR.is_dir():
        pytest.fail(f"the real data mirror is missing at {DATA_DIR} (set UDR_DATA_DIR)")
    return DATA_DIR


def write_params(root: Path, tasks: dict, data_dir: Path, **sections) -> Path:
    """A params.yaml in `root` with the given tasks and caps (and any extra sections)."""
    raw = {
        "seed": 42,
        "data": {"source_dir": str(data_dir)},
        "prepare": {"test_fraction": 0.2, "tasks": tasks},
        **sections,
    }
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture
def run_cli(capsys, monkeypatch):
    """Run the `udr` entry point in-process in a directory; returns (exit code, stdout, stderr)."""
    from udr.cli import main

    # Each test's params.yaml names its data directory; the environment must not override it.
    monkeypatch.delenv("UDR_DATA_DIR", raising=False)

    def run(args: list[str], cwd: Path) -> tuple[int, str, str]:
        monkeypatch.chdir(cwd)
        monkeypatch.setattr(sys, "argv", ["udr", *args])
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def run_udr(root: Path, *args: str) -> None:
    """Run `udr ARGS` in-process in `root` and assert it exits 0 (for module-scoped fixtures, which
    cannot use the `run_cli` fixture)."""
    from udr.cli import main

    old = os.getcwd()
    os.chdir(root)
    sys.argv = ["udr", *args]
    try:
        main()
    except SystemExit as exc:
        assert not exc.code, f"udr {' '.join(args)} exited {exc.code}"
    finally:
        os.chdir(old)


def markdown_table(text: str) -> dict[str, list[str]]:
    """The body rows of a markdown table in printed output (a benchmark's `--markdown` table,
    `benchmarks.scoring.fmt_table`), each a list of its stripped cells, keyed by the first."""
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): [c.strip() for c in cells] for cells in rows[1:]}


def prepare_with_candidates(root: Path, tasks, data_dir: Path, max_train: int, max_test: int, k: int) -> None:
    """Prepare real tasks in `root` with tiny caps and write their BM25 candidates (round 0)."""
    from udr.data.prepare import prepare_task, read_prepared
    from udr.data.tasks import get_task
    from udr.feedback.bm25 import bm25_candidates
    from udr.paths import Paths
    from udr.util.files import write_parquet_atomic

    paths = Paths(root)
    for name in tasks:
        prepare_task(
            get_task(name),
            data_dir,
            paths.prepared_dir(name),
            seed=42,
            test_fraction=0.2,
            max_train=max_train,
            max_test=max_test,
        )
        frame = bm25_candidates(read_prepared(root, name, "train"), get_task(name).kind, "paper", k, progress=False)
        write_parquet_atomic(frame, paths.candidates(0, name))


def scoring_project(
    root: Path, tasks, data_dir: Path, *, max_train: int, max_test: int, k: int, score: dict, lm_src: str, **sections
) -> Path:
    """A project in `root` ready for `udr score`: params (the caps, K BM25 candidates, `score` and any other
    `sections`), the real tasks prepared with their round-0 candidates, and a tiny LM resolved (built in
    `root / lm_src`)."""
    from tests.tiny_models import save_tiny_lm
    from udr.lm.models import resolve_model

    caps = {"max_train": max_train, "max_test": max_test}
    write_params(
        root, {t: caps for t in tasks}, data_dir, candidates={"k": k, "field": "paper"}, score=score, **sections
    )
    prepare_with_candidates(root, tasks, data_dir, max_train=max_train, max_test=max_test, k=k)
    resolve_model(str(save_tiny_lm(root / lm_src)), root / "models" / "base" / "lm", kind="lm")
    return root


def write_csv_task(tasks_dir: Path, data_dir: Path, name: str = "reviews", rows: int = 40) -> Path:
    """A user's own task as the README declares one: `rows` real product reviews (the mirror's cr train
    split) written to a CSV with the user's own column names and labels, and a YAML declaration of it in
    `tasks_dir`; returns the declaration file."""
    import csv
    import json

    tasks_dir.mkdir(parents=True, exist_ok=True)
    lines = (data_dir / "cr" / "train.jsonl").read_text().splitlines()[:rows]
    with (tasks_dir / f"{name}.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["review", "sentiment", "source"])
        for line in lines:
            row = json.loads(line)
            writer.writerow([row["text"], {"negative": "neg", "positive": "pos"}[row["label"]], "cr"])
    declaration = {
        name: {
            "kind": "classification",
            "family": "sentiment",
            "instruction": "Sentiment of the review: ",
            "data": {"train": f"{name}.csv"},
            "input": "review",
            "label": "sentiment",
            "verbalizers": {"neg": "It was terrible .", "pos": "It was great ."},
        }
    }
    path = tasks_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(declaration, sort_keys=False))
    return path


SERVED_TASKS = ["sst2", "break"]


@pytest.fixture(scope="session")
def served(tmp_path_factory, data_dir):
    """A project for the serving tests: sst2 and break prepared (30 train rows each) and a tiny
    bi-encoder as round 0, copied to models/final and indexed by `udr index`."""
    import os

    from udr.data.prepare import prepare_task
    from udr.data.tasks import get_task
    from udr.lm.models import resolve_model
    from udr.paths import Paths
    from udr.retriever.encoder import BiEncoder, BiEncoderSettings

    root = tmp_path_factory.mktemp("serve")
    write_params(
        root,
        {t: {"max_train": 30, "max_test": 4} for t in SERVED_TASKS},
        data_dir,
        train={"later_rounds": {}},
        mine={"batch_size": 8},
    )
    paths = Paths(root)
    for name in SERVED_TASKS:
        prepare_task(
            get_task(name), data_dir, paths.prepared_dir(name), seed=42, test_fraction=0.2, max_train=30, max_test=4
        )
    settings = BiEncoderSettings(max_query_length=48, max_demo_length=64)
    base = resolve_model(str(save_tiny_encoder(root / "tiny-enc")), paths.base_model("encoder"), kind="encoder")
    BiEncoder.from_base(base, settings).save(paths.round_model(0))
    os.environ.pop("UDR_DATA_DIR", None)
    run_udr(root, "index")
    return root


# ---------------------------------------------------------------- two rounds of Algorithm 1

LOOP_TASKS = {"sst2": "classification", "break": "generation"}


@pytest.fixture(scope="session")
def loop_project(tmp_path_factory, data_dir):
    """Two real tasks (tiny caps), BM25 candidates, a tiny LM and a tiny BERT resolved."""
    from udr.lm.models import resolve_model

    root = tmp_path_factory.mktemp("loop")
    scoring_project(
        root,
        LOOP_TASKS,
        data_dir,
        max_train=24,
        max_test=4,
        k=5,
        score={"queries_per_task": 8, "shard_pairs": 16, "batch_tokens": 2048, "dtype": "fp32"},
        lm_src="tiny-lm",
        encoder={"max_query_length": 64, "max_demo_length": 96},
        train={
            "later_rounds": {"round1": "round0"},
            "batch_size": 4,
            "micro_batch": 2,
            "epochs_first": 2,
            "epochs_later": 1,
            "warmup_steps": 1,
            "lr": 1e-3,
            "checkpoint_seconds": 0,  # a checkpoint after every step
            "candidates_per_query": 4,
            "freeze_demo_encoder": False,  # the paper's recipe, both encoders (the frozen E_d: test_train)
        },
        mine={"k": 4, "batch_size": 8},
    )
    resolve_model(str(save_tiny_encoder(root / "tiny-enc")), root / "models" / "base" / "encoder", kind="encoder")
    return root


@pytest.fixture(scope="session")
def looped(loop_project):
    """Round 0 and round 1 run through the CLI entry point (in-process)."""
    os.environ.pop("UDR_DATA_DIR", None)
    for args in (
        ["score", "-r", "0"],
        ["train", "-r", "0"],
        ["mine", "-r", "1"],
        ["score", "-r", "1"],
        ["train", "-r", "1"],
        ["index"],
    ):
        run_udr(loop_project, *args)
    return loop_project


# ---------------------------------------------------------------- every retriever evaluated

EVAL_TASKS = ["sst2", "break"]
EVAL_METHODS = ["random", "bm25", "sbert", "dr-target", "epr", "udr"]
# A task declared from a CSV (write_csv_task), evaluated but never trained on.
UNSEEN_TASK = "reviews"


@pytest.fixture(scope="session")
def evaluated(tmp_path_factory, data_dir):
    """Round 0 and the per-task DR-Target and EPR baselines trained on tiny models, every method evaluated (on an unseen
    declared task too, but EPR, which has no model of it), the report written."""
    from udr.lm.models import resolve_model

    root = tmp_path_factory.mktemp("eval")
    write_params(
        root,
        {t: {"max_train": 20, "max_test": 6} for t in EVAL_TASKS},
        data_dir,
        candidates={"k": 4},
        score={"queries_per_task": 6, "batch_tokens": 2048, "dtype": "fp32"},
        encoder={"max_query_length": 48, "max_demo_length": 64},
        train={
            "later_rounds": {},
            "batch_size": 3,
            "micro_batch": 3,
            "epochs_first": 1,
            "epochs_later": 1,
            "warmup_steps": 0,
            "lr": 1e-3,
            "candidates_per_query": 3,
        },
        mine={"k": 3, "batch_size": 8},
        evaluate={
            "context": 700,
            "max_demos": 3,
            "max_new_tokens": 6,
            "candidates": 8,
            "batch_tokens": 1024,
            "shots": [1, 2, 3],
            "shots_tasks": ["sst2"],
            "shots_methods": ["bm25", "udr"],
            "dtype": "fp32",
            "unseen_tasks": {UNSEEN_TASK: {"max_train": 20, "max_test": 6}},
        },
    )
    write_csv_task(root / "data" / "tasks", data_dir, UNSEEN_TASK)
    prepare_with_candidates(root, EVAL_TASKS, data_dir, max_train=20, max_test=6, k=4)
    resolve_model(str(save_tiny_lm(root / "tiny-lm")), root / "models" / "base" / "lm", kind="lm")
    resolve_model(str(save_tiny_encoder(root / "tiny-enc")), root / "models" / "base" / "encoder", kind="encoder")
    os.environ.pop("UDR_DATA_DIR", None)
    for args in (
        ["prepare", "--task", UNSEEN_TASK],
        ["score"],
        ["train"],
        *(["train", f"--{b}", "--task", t] for b in ("epr", "dr-target") for t in EVAL_TASKS),
        ["index"],
        *(["evaluate", "--method", m] for m in EVAL_METHODS),
        ["report"],
    ):
        run_udr(root, *args)
    return root
