"""benchmarks/gpu_hours.py: the workload it counts from prepared data, and the FLOPs per stage."""

from __future__ import annotations

import pytest

from benchmarks.gpu_hours import METHODS, TaskWorkload, measure_task, stage_flops
from tests.conftest import prepare_with_candidates, write_params
from tests.tiny_models import save_tiny_encoder
from udr.config import load_settings

PAPERISH = {
    "candidates": {"k": 50},
    "mine": {"k": 20},
    "train": {"later_rounds": {"round1": "round0", "round2": "round1"}, "epochs_first": 30, "epochs_later": 10},
}


def test_stage_flops_follow_the_pipeline(tmp_path, data_dir):
    settings = load_settings(write_params(tmp_path, {"sst2": {}}, data_dir, **PAPERISH))
    t = TaskWorkload(
        "x", pool=1000, scored=100, test=50, pair_tokens=60, query_tokens=20, demo_tokens=30, eval_tokens=300
    )
    flops = stage_flops(settings, [t], lm_params=1e9, enc_params=1e8)
    l = settings.train.candidates_per_query
    assert flops["score"] == pytest.approx(2e9 * 60 * 100 * (50 + 20 + 20))  # round 0: K = 50, later: mine.k
    assert flops["train"] == pytest.approx(6e8 * 100 * (20 + l * 30) * (30 + 10 + 10))
    assert flops["train_epr"] == pytest.approx(6e8 * 100 * (20 + 2 * 30) * 30)
    assert flops["mine + index"] == pytest.approx(2e8 * (1000 * 30 + 100 * 20) * 3)
    assert flops["evaluate"] == pytest.approx(2e9 * METHODS * 50 * 300)


def test_the_workload_is_counted_from_prepared_data(tmp_path, data_dir):
    from transformers import AutoTokenizer

    write_params(tmp_path, {"sst2": {}, "e2e": {}}, data_dir, score={"queries_per_task": 12})
    prepare_with_candidates(tmp_path, ["sst2", "e2e"], data_dir, max_train=30, max_test=10, k=4)
    settings = load_settings(tmp_path / "params.yaml")
    tok = AutoTokenizer.from_pretrained(save_tiny_encoder(tmp_path / "enc"))
    for name in ("sst2", "e2e"):
        w = measure_task(settings, tmp_path, name, tok, tok, sample=100, seed=0)
        assert (w.pool, w.scored, w.test) == (30, 12, 10)
        assert 0 < w.query_tokens <= settings.encoder.max_query_length
        assert 0 < w.demo_tokens <= settings.encoder.max_demo_length
        assert w.pair_tokens > w.query_tokens  # a pair holds a demonstration, the query and the answer(s)
        assert w.pair_tokens <= settings.score.max_length
        assert w.eval_tokens > w.pair_tokens and w.eval_tokens <= settings.evaluate.context + 64
