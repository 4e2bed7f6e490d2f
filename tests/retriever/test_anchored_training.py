"""Training with train.loss anchored on the tiny two-task project (tests.conftest's `looped`): the reference
similarities are the initial encoder's, computed once before training from the training data the stage
loaded once (so that, without dropout, every pair starts at log 2), a round trains end to end and records
its settings, a resumed run equals an uninterrupted one, and the default's record and resume fingerprint
keep the keys they had."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch

from tests.conftest import LOOP_TASKS as TASKS


def _project(looped, tmp_path, *overrides):
    from udr.config import load_settings

    root = tmp_path / "proj"
    shutil.copytree(looped, root, ignore=shutil.ignore_patterns("rounds", "final"))
    return root, load_settings(root / "params.yaml", list(overrides))


def _train(settings, root, out, **kw):
    from udr.project.training import run_train

    init = root / "models/base/encoder"
    return run_train(settings, 0, init=init, out=out, log_dir=out.with_name(out.name + "-log"), progress=False, **kw)


@pytest.mark.parametrize("frozen", [False, True])
def test_the_reference_is_the_initial_encoder_and_every_pair_starts_at_log_2(looped, tmp_path, frozen):
    from udr.project.training import build_trainer as build
    from udr.project.training import load_scored_queries
    from udr.retriever.encoder import BiEncoder
    from udr.retriever.recipes import AnchoredRecipe

    root, settings = _project(
        looped,
        tmp_path,
        "train.loss=anchored",
        "train.anchor_top=2",
        f"train.freeze_demo_encoder={str(frozen).lower()}",
    )
    data = load_scored_queries(settings, list(TASKS), 0, settings.encoder)
    trainer = build(settings, 0, root / "models/base/encoder", tmp_path / "partial", "cpu", 0, 4, data)
    assert isinstance(trainer.recipe, AnchoredRecipe)
    base = BiEncoder.from_base(root / "models/base/encoder", trainer.encoder.settings)
    for task, queries in data.items():
        for sq in queries:
            q = base.encode([sq.text], "query")[0].astype(np.float64)
            d = base.encode(list(sq.candidate_texts), "demo").astype(np.float64)
            np.testing.assert_allclose(trainer.recipe.reference[(task, sq.query_id)], d @ q, rtol=1e-4, atol=1e-4)
    assert len(trainer.recipe.reference) == sum(len(q) for q in data.values())

    # Before any step, without dropout, the retriever is its reference: each pair's loss is log 2.
    batch = [(sq, trainer.recipe.sample(sq, None)) for sq in data["sst2"][:3]]
    trainer.encoder.train(False)
    with torch.no_grad():
        parts = trainer.micro_batch_loss(batch)
    assert parts.rank.item() == pytest.approx(math.log(2), abs=1e-4)


def test_anchored_training_runs_records_and_resumes_exactly(looped, tmp_path, monkeypatch):
    import udr.project.training as stage
    from udr.retriever.encoder import BiEncoder
    from udr.retriever.record import read_record

    overrides = ("train.loss=anchored", "train.anchor_beta=0.5", "train.anchor_top=2", "train.loss_lambda=0.5")
    root, settings = _project(looped, tmp_path, *overrides)
    out = root / "models/rounds/round0"
    loads = []
    load = stage.load_scored_queries
    monkeypatch.setattr(stage, "load_scored_queries", lambda *a, **kw: loads.append(1) or load(*a, **kw))
    summary = _train(settings, root, out)
    assert len(loads) == 1  # the reference similarities come from the queries the run trains on
    assert summary.steps >= 4 and np.isfinite(summary.loss_start) and np.isfinite(summary.loss_end)
    record = read_record(out)
    assert record["train"]["loss"] == "anchored"
    assert (record["train"]["anchor_beta"], record["train"]["anchor_top"]) == (0.5, 2)
    assert "feedback" not in record["train"]  # lm, the default: kept out as before the setting existed
    tsv = out.with_name("round0-log") / "plots/metrics/train/rank.tsv"
    anchor = [float(r.split("\t")[1]) for r in tsv.read_text().splitlines()[1:]]
    assert all(np.isfinite(anchor)) and all(v >= 0 for v in anchor)
    texts = ["some query text", "another one"]
    fresh = BiEncoder.from_base(root / "models/base/encoder", BiEncoder.load(out).settings)
    assert not np.allclose(BiEncoder.load(out).encode(texts, "query"), fresh.encode(texts, "query"))

    # Killed after 3 steps (a checkpoint), run again: the reference is computed from the initial encoder
    # again, and the run continues exactly as the uninterrupted one.
    other = tmp_path / "again"
    root2, settings2 = _project(looped, other, *overrides)
    out2 = root2 / "models/rounds/round0"
    assert _train(settings2, root2, out2, stop_after_steps=3) is None
    assert (out2.parent / ".round0.partial" / "checkpoint" / "state.json").is_file()
    resumed = _train(settings2, root2, out2)
    assert (resumed.loss_start, resumed.loss_end) == (summary.loss_start, summary.loss_end)
    for side in ("query", "demo"):
        assert np.array_equal(BiEncoder.load(out2).encode(texts, side), BiEncoder.load(out).encode(texts, side))


def test_the_defaults_record_and_fingerprint_keep_the_keys_they_had(looped):
    from udr.config import TrainSettings
    from udr.retriever.recipes import recorded_train_settings

    new = {"anchor_beta", "anchor_top", "feedback", "seed", "final_alpha"}  # final_alpha: the index's
    default = TrainSettings()
    kept = recorded_train_settings(default)
    assert kept == default.model_dump(exclude={"checkpoint_seconds", "device", *new})
    assert list(kept) == [k for k in default.model_dump(exclude={"checkpoint_seconds", "device"}) if k not in new]
    record = json.loads((looped / "models/rounds/round0/udr_record.json").read_text())
    assert not new & set(record["train"]) and record["train"]["loss"] == "paper"
    assert recorded_train_settings(default.model_copy(update={"final_alpha": 0.5})) == kept
    labels = recorded_train_settings(default.model_copy(update={"feedback": "labels"}), mode="json")
    assert labels["feedback"] == "labels" and "anchor_beta" not in labels
