"""A tiny project with every retriever evaluated and the report written, shared by the evaluation
tests (package scope: built once for tests/evaluation)."""

from __future__ import annotations

import pytest

from tests.conftest import prepare_with_candidates, run_udr, write_csv_task, write_params
from tests.tiny_models import save_tiny_encoder, save_tiny_lm

EVAL_TASKS = ["sst2", "break"]
EVAL_METHODS = ["random", "bm25", "sbert", "epr", "udr"]
# A task declared from a CSV (tests.conftest.write_csv_task), evaluated but never trained on.
UNSEEN_TASK = "reviews"


@pytest.fixture(scope="package")
def evaluated(tmp_path_factory, data_dir):
    """Round 0 and the EPR baseline trained on tiny models, every method evaluated (on an unseen declared
    task too), the report written."""
    import os

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
        ["train", "--epr"],
        ["index"],
        *(["evaluate", "--method", m] for m in EVAL_METHODS),
        ["report"],
    ):
        run_udr(root, *args)
    return root
