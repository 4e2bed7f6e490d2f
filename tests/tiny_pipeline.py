"""A tiny project of this repository's pipeline, for tests that run DVC on it (slow)."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from tests.conftest import REPO
from tests.tiny_models import save_tiny_encoder, save_tiny_lm


def tiny_pipeline_project(tmp_path: Path, data_dir: Path) -> tuple[Path, dict]:
    """A project of this repository's udr code and dvc.yaml whose params run the whole pipeline on tiny models
    in seconds (sst2 and e2e trained, cr unseen): (its root, the params, not yet written)."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "data" / "tasks").mkdir(parents=True)
    shutil.copytree(REPO / "udr", root / "udr", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", root / "dvc.yaml")
    shutil.copy(REPO / ".dvcignore", root / ".dvcignore")
    # Committed inputs dvc.yaml names: the shipped feedback's folder (none of this tiny project's pairs)
    # and the experiment shown beside the results.
    (root / "data" / "feedback" / "round0").mkdir(parents=True)
    beside = root / "metrics" / "feedback" / "test-q1000"
    beside.mkdir(parents=True)
    shutil.copy(REPO / "metrics" / "feedback" / "test-q1000" / "summary.json", beside / "summary.json")
    lm, enc = save_tiny_lm(tmp_path / "tiny-lm"), save_tiny_encoder(tmp_path / "tiny-enc")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["source_dir"] = str(data_dir)
    params["prepare"]["tasks"] = {"sst2": {"max_train": 16, "max_test": 4}, "e2e": {"max_train": 16, "max_test": 3}}
    params["models"] = {"lm": str(lm), "encoder": str(enc)}
    params["candidates"]["k"] = 4
    params["score"].update(queries_per_task=4, batch_tokens=2048, dtype="fp32")
    params["encoder"].update(max_query_length=48, max_demo_length=64)
    params["train"].update(
        later_rounds={"round1": "round0"},
        batch_size=2,
        micro_batch=2,
        epochs_first=1,
        epochs_later=1,
        warmup_steps=0,
        candidates_per_query=3,
    )
    params["mine"].update(k=3, batch_size=8)
    params["evaluate"].update(
        context=600,
        max_demos=2,
        max_new_tokens=4,
        candidates=4,
        batch_tokens=2048,
        shots=[1, 2],
        dtype="fp32",
        unseen_tasks={"cr": {"max_train": 16, "max_test": 4}},
    )
    return root, params
