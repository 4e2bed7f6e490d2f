"""A tiny project run through two rounds of Algorithm 1 by the CLI, shared by the retriever tests
(package scope: built once for tests/retriever)."""

from __future__ import annotations

import os

import pytest

from tests.conftest import run_udr, scoring_project
from tests.tiny_models import save_tiny_encoder

LOOP_TASKS = {"sst2": "classification", "break": "generation"}


@pytest.fixture(scope="package")
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
            "checkpoint_steps": 3,
            "candidates_per_query": 4,
            "freeze_demo_encoder": False,  # the paper's recipe, both encoders (the frozen E_d: test_training)
        },
        mine={"k": 4, "batch_size": 8},
    )
    resolve_model(str(save_tiny_encoder(root / "tiny-enc")), root / "models" / "base" / "encoder", kind="encoder")
    return root


@pytest.fixture(scope="package")
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
