"""`udr train` (udr.stages.train, running udr.retriever.training): two rounds of Algorithm 1 through the CLI
on tiny models (every round's outputs, resume, single-task training, round errors, torchrun)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.conftest import LOOP_TASKS as TASKS
from tests.conftest import REPO


def test_loop_writes_every_round(looped):
    root = looped
    for n in (0, 1):
        assert (root / f"models/rounds/round{n}/udr_encoder.json").is_file()
        summary = json.loads((root / f"metrics/train/round{n}/summary.json").read_text())
        assert summary["steps"] >= 1 and np.isfinite(summary["loss_start"]) and np.isfinite(summary["loss_end"])
        assert (root / f"metrics/train/round{n}/loss.png").stat().st_size > 0
        assert (root / f"metrics/train/round{n}/plots/metrics/train/loss.tsv").is_file()
    assert not list((root / "models/rounds").glob(".*partial"))  # checkpoints removed when done
    for task in TASKS:
        mined = pl.read_parquet(root / f"data/candidates/round1/{task}.parquet")
        assert set(mined.columns) == {"query_id", "candidate_id", "rank", "score", "new"}
        report = json.loads((root / f"metrics/mine/round1/{task}.json").read_text())
        assert report["mined"] == 8 * 4 and report["new"] == int(mined["new"].sum())
        # every previous candidate of the scored queries is kept
        prev = pl.read_parquet(root / f"data/candidates/round0/{task}.parquet")
        prev = prev.filter(pl.col("query_id").is_in(mined["query_id"].unique().to_list()))
        assert len(prev.join(mined, on=["query_id", "candidate_id"], how="anti")) == 0
        scores1 = json.loads((root / f"metrics/score/round1/{task}.json").read_text())
        assert scores1["reused"] == len(prev) and scores1["scored"] == report["new"]
        index = np.load(root / f"models/final/index/{task}.npy")
        assert index.shape == (24, 32)


def test_training_moves_the_model(looped):
    from udr.retriever.encoder import BiEncoder

    texts = ["some query text", "another one"]
    e0 = BiEncoder.load(looped / "models/rounds/round0").encode(texts, "query")
    e1 = BiEncoder.load(looped / "models/rounds/round1").encode(texts, "query")
    assert not np.allclose(e0, e1)


def test_resumed_training_equals_uninterrupted(looped, tmp_path, monkeypatch):
    """Kill round 0's training a step after a checkpoint, run again: the step is trained again, same weights.
    The clock reads one second more at every look: a checkpoint after the step ending 3 s after the last."""
    import itertools
    import types

    from udr.config import load_settings
    from udr.project.training import run_train
    from udr.retriever import training
    from udr.retriever.encoder import BiEncoder

    clock = itertools.count()
    monkeypatch.setattr(
        training, "time", types.SimpleNamespace(monotonic=lambda: next(clock), perf_counter=time.perf_counter)
    )
    root = tmp_path / "proj"
    shutil.copytree(looped, root, ignore=shutil.ignore_patterns("rounds", "final"))
    settings = load_settings(root / "params.yaml", ["train.checkpoint_seconds=3"])
    kw = dict(init=root / "models/base/encoder", log_dir=root / "metrics/train/round0", progress=False)
    out = root / "models/rounds/round0"
    assert run_train(settings, 0, out=out, stop_after_steps=4, **kw) is None
    partial = out.parent / ".round0.partial"
    state = partial / "checkpoint/state.json"
    assert state.is_file() and (partial / "manifest.json").is_file() and not out.exists()
    assert json.loads(state.read_text())["step"] == 3  # the clock at 0 (start), 1, 2, 3 (saved), 4, 5
    summary = run_train(settings, 0, out=out, **kw)
    texts = ["some query text", "another one"]
    for side in ("query", "demo"):
        assert np.array_equal(
            BiEncoder.load(out).encode(texts, side), BiEncoder.load(looped / "models/rounds/round0").encode(texts, side)
        )
    reference = json.loads((looped / "metrics/train/round0/summary.json").read_text())
    assert summary.loss_start == reference["loss_start"] and summary.loss_end == reference["loss_end"]
    tsv = "plots/metrics/train/loss.tsv"
    assert (root / "metrics/train/round0" / tsv).read_text() == (looped / "metrics/train/round0" / tsv).read_text()


def test_a_killed_run_keeps_the_earlier_log_whole(looped, tmp_path):
    """A run over an existing model and log, killed after a few steps, leaves the earlier log as it was (its
    summary.json is what `udr adapt` reads); the resumed run swaps in the whole new log, nothing left beside."""
    from udr.config import load_settings
    from udr.project.training import run_train

    root = tmp_path / "proj"
    shutil.copytree(looped, root)
    settings = load_settings(root / "params.yaml")
    log = root / "metrics/train/round0"
    before = {p.relative_to(log): p.read_bytes() for p in log.rglob("*") if p.is_file()}
    kw = dict(init=root / "models/base/encoder", log_dir=log, out=root / "models/rounds/round0", progress=False)
    assert run_train(settings, 0, stop_after_steps=4, **kw) is None
    assert {p.relative_to(log): p.read_bytes() for p in log.rglob("*") if p.is_file()} == before
    summary = run_train(settings, 0, **kw)
    assert json.loads((log / "summary.json").read_text())["steps"] == summary.steps > 4
    tsv = Path("plots/metrics/train/loss.tsv")
    assert (log / tsv).read_bytes() == before[tsv]  # the same training, logged whole
    assert not (log.parent / ".round0.live").exists() and (log / "loss.png").is_file()


def test_a_kill_while_a_checkpoint_is_written_keeps_the_one_before(looped, tmp_path, monkeypatch):
    """Killed while the second checkpoint is saved (the optimiser's file half-way), the first stays whole
    and resumable, and the resumed run ends with the uninterrupted run's weights."""
    import torch

    from udr.config import load_settings
    from udr.project.training import run_train
    from udr.retriever.encoder import BiEncoder

    root = tmp_path / "proj"
    shutil.copytree(looped, root, ignore=shutil.ignore_patterns("rounds", "final"))
    settings = load_settings(root / "params.yaml", ["train.checkpoint_seconds=0"])
    kw = dict(init=root / "models/base/encoder", log_dir=root / "metrics/train/round0", progress=False)
    out = root / "models/rounds/round0"
    saves, real_save = [], torch.save

    def killed_on_the_second(obj, path, *args, **kwargs):
        saves.append(path)
        if len(saves) == 2:
            Path(path).write_bytes(b"half")
            raise KeyboardInterrupt
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", killed_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        run_train(settings, 0, out=out, **kw)
    monkeypatch.setattr(torch, "save", real_save)
    checkpoint = out.parent / ".round0.partial/checkpoint"
    assert json.loads((checkpoint / "state.json").read_text())["step"] == 1
    assert len(torch.load(checkpoint / "optimizer.pt", weights_only=True)["optimizer"]["state"]) > 0
    run_train(settings, 0, out=out, **kw)
    texts = ["some query text", "another one"]
    reference = BiEncoder.load(looped / "models/rounds/round0")
    for side in ("query", "demo"):
        assert np.array_equal(BiEncoder.load(out).encode(texts, side), reference.encode(texts, side))


def test_a_kill_before_the_record_is_written_keeps_the_old_model_with_its_record(looped, tmp_path, monkeypatch):
    """The trained model and its record enter the output folder together: killed between the two, the old
    model stays, with its own record, and the next run writes the new one."""
    from udr.config import load_settings
    from udr.project.training import run_train
    from udr.retriever import training
    from udr.retriever.encoder import BiEncoder
    from udr.retriever.record import read_record

    root = tmp_path / "proj"
    shutil.copytree(looped, root)
    settings = load_settings(root / "params.yaml", ["train.seed=7"])
    kw = dict(init=root / "models/base/encoder", log_dir=root / "metrics/train/round0", progress=False)
    out = root / "models/rounds/round0"
    texts = ["some query text", "another one"]
    before, record = BiEncoder.load(out).encode(texts, "query"), read_record(out)

    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(training, "write_record", killed)
    with pytest.raises(KeyboardInterrupt):
        run_train(settings, 0, out=out, **kw)
    assert np.array_equal(BiEncoder.load(out).encode(texts, "query"), before) and read_record(out) == record
    monkeypatch.undo()
    run_train(settings, 0, out=out, **kw)
    assert not np.array_equal(BiEncoder.load(out).encode(texts, "query"), before)
    assert read_record(out)["train"]["seed"] == 7


def test_a_checkpoint_resumes_only_in_the_precision_it_was_made_in(looped, tmp_path, monkeypatch):
    """train.dtype auto resolves per CPU kind: a checkpoint made in bf16 is not resumed in fp32 (another kind
    of machine picking up the run), the partial is started again."""
    from udr.config import load_settings
    from udr.project.training import run_train
    from udr.util import distributed

    root = tmp_path / "proj"
    shutil.copytree(looped, root, ignore=shutil.ignore_patterns("rounds", "final"))
    settings = load_settings(root / "params.yaml", ["train.dtype=auto", "train.checkpoint_seconds=0"])
    kw = dict(init=root / "models/base/encoder", log_dir=root / "metrics/train/round0", progress=False)
    out = root / "models/rounds/round0"
    manifest, state = out.parent / ".round0.partial/manifest.json", out.parent / ".round0.partial/checkpoint/state.json"
    monkeypatch.setattr(distributed, "cpu_prefers_bf16", lambda: True)
    assert run_train(settings, 0, out=out, stop_after_steps=4, **kw) is None
    assert json.loads(manifest.read_text())["precision"] == "bf16" and json.loads(state.read_text())["step"] == 4
    monkeypatch.setattr(distributed, "cpu_prefers_bf16", lambda: False)
    assert run_train(settings, 0, out=out, stop_after_steps=3, **kw) is None
    assert json.loads(manifest.read_text())["precision"] == "fp32" and json.loads(state.read_text())["step"] == 3


def test_training_seed_changes_only_the_draws(looped, tmp_path):
    """train.seed set to the global seed trains the same weights as unset (and records nothing); another
    value trains other weights on the same feedback, and the record says which."""
    from udr.config import load_settings
    from udr.project.training import run_train
    from udr.retriever.encoder import BiEncoder
    from udr.retriever.record import read_record

    texts = ["some query text", "another one"]
    reference = BiEncoder.load(looped / "models/rounds/round0").encode(texts, "query")
    assert "seed" not in read_record(looped / "models/rounds/round0")["train"]
    for value, same in ((load_settings(looped / "params.yaml").seed, True), (7, False)):
        root = tmp_path / f"seed{value}"
        shutil.copytree(looped, root, ignore=shutil.ignore_patterns("rounds", "final"))
        settings = load_settings(root / "params.yaml", [f"train.seed={value}"])
        out = root / "models/rounds/round0"
        kw = dict(init=root / "models/base/encoder", log_dir=root / "metrics/train/round0", progress=False)
        run_train(settings, 0, out=out, **kw)
        assert np.array_equal(BiEncoder.load(out).encode(texts, "query"), reference) is same
        assert read_record(out)["train"]["seed"] == value


def test_single_task_training_reads_only_that_task(looped, tmp_path):
    from udr.config import load_settings
    from udr.project.training import run_train

    root = tmp_path / "proj"
    shutil.copytree(looped, root, ignore=shutil.ignore_patterns("rounds", "final"))
    settings = load_settings(root / "params.yaml", ["train.tasks=[break]"])
    run_train(
        settings,
        0,
        out=root / "models/rounds/round0",
        init=root / "models/base/encoder",
        log_dir=root / "metrics/train/round0",
        progress=False,
    )
    summary = json.loads((root / "metrics/train/round0/summary.json").read_text())
    everything = json.loads((looped / "metrics/train/round0/summary.json").read_text())
    assert list(summary["queries"]) == ["break"] and len(everything["queries"]) == len(TASKS) > 1
    assert summary["steps"] < everything["steps"]


def test_round_errors(looped, run_cli):
    code, _, err = run_cli(["train", "-r", "5"], looped)
    assert code == 1 and "bad round 5" in err
    code, _, err = run_cli(["mine", "-r", "0"], looped)
    assert code == 1 and "bad round 0" not in err and "round 1" in err


@pytest.mark.slow
def test_two_process_training_equals_one_process(looped, tmp_path):
    """`torchrun --nproc_per_node=2 udr train` follows the one-process run (same losses to float order)."""
    from udr.retriever.encoder import BiEncoder

    root = tmp_path / "proj"
    shutil.copytree(looped, root, ignore=shutil.ignore_patterns("rounds", "final"))
    env = {k: v for k, v in os.environ.items() if k != "UDR_DATA_DIR"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "udr.cli",
        "train",
        "-r",
        "0",
    ]
    proc = subprocess.run(
        cmd, cwd=root, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    one = (looped / "metrics/train/round0/plots/metrics/train/loss.tsv").read_text().splitlines()[1:]
    two = (root / "metrics/train/round0/plots/metrics/train/loss.tsv").read_text().splitlines()[1:]
    # Losses agree to float summation order over the first steps (two of them with updates: a rank that
    # skipped the gradient sum would drift at once). Adam normalises each gradient, so in near-zero
    # gradients float-order differences become full-size updates that compound step by step (on one CI
    # CPU: 1e-5 relative at step 6, 0.7% at step 8): later losses, and the weights, are compared loosely.
    two_loss, one_loss = ([float(r.split("\t")[1]) for r in rows] for rows in (two, one))
    np.testing.assert_allclose(two_loss[:4], one_loss[:4], rtol=1e-5)
    np.testing.assert_allclose(two_loss, one_loss, rtol=2e-2)
    texts = ["some query text", "another one"]
    for side in ("query", "demo"):
        np.testing.assert_allclose(
            BiEncoder.load(root / "models/rounds/round0").encode(texts, side),
            BiEncoder.load(looped / "models/rounds/round0").encode(texts, side),
            atol=1e-2,
        )


# --- the training recipes: distill loss, frozen E_d, shared encoder --------------------------------------


def _project(looped, tmp_path, *overrides):
    """A copy of the looped project without its models, and its settings with `overrides`."""
    from udr.config import load_settings

    root = tmp_path / "proj"
    shutil.copytree(looped, root, ignore=shutil.ignore_patterns("rounds", "final"))
    return root, load_settings(root / "params.yaml", list(overrides))


def _train(settings, root, out, init=None, **kw):
    from udr.project.training import run_train

    init = init or root / "models/base/encoder"
    return run_train(settings, 0, init=init, out=out, log_dir=out.with_name(out.name + "-log"), progress=False, **kw)


def _weights(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_scored_queries_carry_the_lm_scores_in_lm_order(looped):
    from udr.config import load_settings
    from udr.project.training import load_scored_queries

    settings = load_settings(looped / "params.yaml")
    data = load_scored_queries(settings, list(TASKS), 0, settings.encoder)
    for task, queries in data.items():
        scores = pl.read_parquet(looped / f"data/scores/round0/{task}.parquet")
        for sq in queries:
            rows = scores.filter(pl.col("query_id") == sq.query_id).sort("rank")
            assert sq.candidate_ids == tuple(rows["candidate_id"]) and sq.candidate_scores == tuple(rows["score"])
            assert list(sq.candidate_scores) == sorted(sq.candidate_scores, reverse=True)


def test_training_reads_the_scored_queries_params_ask_for(looped):
    """Scores of more queries hold the fewer ones (the manifest's first n): training takes exactly those;
    asking for more queries than were scored, or for another seed's queries, is a one-line error naming
    `udr score`."""
    from udr.config import load_settings
    from udr.errors import UdrError
    from udr.feedback.scores_file import query_choice
    from udr.project.training import load_scored_queries

    settings = load_settings(looped / "params.yaml", ["score.queries_per_task=3"])
    data = load_scored_queries(settings, list(TASKS), 0, settings.encoder)
    for task, queries in data.items():
        ids = pl.read_parquet(looped / f"data/prepared/{task}/train.parquet")["id"].to_numpy()
        assert [q.query_id for q in queries] == sorted(query_choice(ids, settings.seed, task)[:3].tolist())
    more = load_settings(looped / "params.yaml", ["score.queries_per_task=12"])
    with pytest.raises(UdrError, match=r"holds the scores of 8 queries chosen with seed 42; the params choose 12"):
        load_scored_queries(more, list(TASKS), 0, more.encoder)
    other_seed = load_settings(looped / "params.yaml", ["seed=7"])
    with pytest.raises(UdrError, match=r"the params choose 8 with seed 7 .*run `udr score --round 0"):
        load_scored_queries(other_seed, list(TASKS), 0, other_seed.encoder)


def test_distill_training_logs_the_kl_as_its_rank_part(looped, tmp_path):
    root, settings = _project(looped, tmp_path, "train.loss=distill", "train.loss_lambda=1.0", "train.epochs_first=1")
    _train(settings, root, root / "models/rounds/round0")
    tsv = root / "models/rounds/round0-log/plots/metrics/train"
    loss = [float(r.split("\t")[1]) for r in (tsv / "loss.tsv").read_text().splitlines()[1:]]
    kl = [float(r.split("\t")[1]) for r in (tsv / "rank.tsv").read_text().splitlines()[1:]]
    assert len(loss) == 4 and loss == kl and all(v >= 0 for v in kl)  # lambda 1: the KL alone
    default = (looped / "metrics/train/round0/plots/metrics/train/loss.tsv").read_text().splitlines()[1:5]
    assert loss != [float(r.split("\t")[1]) for r in default]


def test_frozen_demo_encoder_moves_only_e_q_and_ranks_against_the_whole_pool(looped, tmp_path):
    import torch

    from udr.data.prepare import read_prepared
    from udr.project.training import build_trainer as build
    from udr.project.training import load_scored_queries
    from udr.retriever.demo_encoders import FrozenDemoEncoder
    from udr.retriever.encoder import BiEncoder, demo_texts
    from udr.retriever.sampling import TaskSampler
    from udr.retriever.training import train_step
    from udr.util.distributed import Distributed

    root, settings = _project(looped, tmp_path, "train.freeze_demo_encoder=true")
    init = root / "models/base/encoder"
    data = load_scored_queries(settings, list(TASKS), 0, settings.encoder)
    trainer = build(settings, 0, init, tmp_path / "partial", "cpu", 0, 4, data)
    enc = trainer.encoder
    demo_before, query_before = _weights(enc.demo_model), _weights(enc.query_model)
    assert trainer.params and {id(p) for p in trainer.params} == {id(p) for p in enc.query_model.parameters()}
    assert not enc.demo_model.training  # the cache is made, and stays valid, without dropout
    assert isinstance(trainer.demos, FrozenDemoEncoder)

    # The cache: each task's whole pool as an untouched E_d embeds it.
    base = BiEncoder.from_base(init, enc.settings)
    pool_texts = {}
    for task in TASKS:
        frame = read_prepared(root, task, "train")
        pool_texts[task] = demo_texts(settings.task(task), frame["input"], frame["target"], enc.settings)
        cache = trainer.demos.pools[task]
        assert cache.emb.shape == (24, 32) and list(cache.row) == [int(i) for i in frame["id"]]
        np.testing.assert_allclose(cache.emb.numpy(), base.encode(pool_texts[task], "demo"), atol=1e-5)

    # One micro-batch by hand (dropout off): L_ib is a softmax over the task's 23 other pool rows.
    batch = [(data["sst2"][0], [0, 1, 2]), (data["sst2"][1], [1, 3])]
    enc.query_model.eval()
    with torch.no_grad():
        got = trainer.micro_batch_loss(batch)
    q = base.encode([sq.text for sq, _ in batch], "query")
    pool = base.encode(pool_texts["sst2"], "demo")
    ce = []
    for qv, (sq, pos) in zip(q, batch):
        row = trainer.demos.pools["sst2"].row
        logits = pool @ qv
        logits[row[sq.query_id]] = -np.inf
        positive = row[sq.candidate_ids[pos[0]]]
        ce.append(-(logits[positive] - np.log(np.exp(logits - logits.max()).sum()) - logits.max()))
    assert got.in_batch.item() == pytest.approx(float(np.mean(ce)), rel=1e-4)
    enc.query_model.train()

    sampler = TaskSampler({t: len(qs) for t, qs in data.items()}, settings.train.alpha)
    for step in range(2):
        assert np.isfinite(train_step(trainer, data, sampler, step, Distributed("cpu"))["loss"])
    assert all(torch.equal(v, demo_before[k]) for k, v in enc.demo_model.state_dict().items())
    assert all(p.grad is None for p in enc.demo_model.parameters())
    assert any(not torch.equal(v, query_before[k]) for k, v in enc.query_model.state_dict().items())


def test_frozen_demo_encoder_saves_the_untouched_e_d(looped, tmp_path):
    from udr.retriever.encoder import BiEncoder

    root, settings = _project(looped, tmp_path, "train.freeze_demo_encoder=true", "train.epochs_first=0.5")
    out = root / "models/rounds/round0"
    _train(settings, root, out)
    trained, base = BiEncoder.load(out), BiEncoder.load(looped / "models/rounds/round0")
    texts = ["a gripping film", "what is the capital of peru"]
    fresh = BiEncoder.from_base(root / "models/base/encoder", trained.settings)
    assert np.array_equal(trained.encode(texts, "demo"), fresh.encode(texts, "demo"))
    assert not np.allclose(trained.encode(texts, "query"), fresh.encode(texts, "query"))
    assert not np.allclose(trained.encode(texts, "demo"), base.encode(texts, "demo"))  # the loop project trains E_d


def test_shared_encoder_trains_one_encoder_and_round_trips(looped, tmp_path):

    from udr.retriever.encoder import SETTINGS_NAME, BiEncoder

    root, settings = _project(looped, tmp_path, "train.shared_encoder=true", "train.epochs_first=1")
    out = root / "models/rounds/round0"
    _train(settings, root, out)
    enc = BiEncoder.load(out)
    assert enc.settings.shared and enc.demo_model is enc.query_model
    assert len(list(enc.parameters())) == len(list(enc.query_model.parameters()))
    assert (out / "query/model.safetensors").read_bytes() == (out / "demo/model.safetensors").read_bytes()
    assert json.loads((out / SETTINGS_NAME).read_text())["shared"] is True
    assert "shared" not in json.loads((looped / "models/rounds/round0" / SETTINGS_NAME).read_text())
    texts = ["a gripping film", "what is the capital of peru"]
    np.testing.assert_array_equal(enc.encode(texts, "query"), enc.encode(texts, "demo"))  # shorter than both limits
    fresh = BiEncoder.from_base(root / "models/base/encoder", enc.settings)
    assert fresh.demo_model is fresh.query_model
    assert not np.allclose(enc.encode(texts, "query"), fresh.encode(texts, "query"))

    enc.save(tmp_path / "again")
    again = BiEncoder.load(tmp_path / "again")
    assert again.demo_model is again.query_model and again.settings == enc.settings
    np.testing.assert_array_equal(again.encode(texts, "demo"), enc.encode(texts, "demo"))

    # Killed after a checkpoint and resumed: the same weights as the uninterrupted run.
    resumed = root / "models/rounds/resumed"
    assert _train(settings, root, resumed, stop_after_steps=3) is None
    manifest = json.loads((resumed.parent / ".resumed.partial/manifest.json").read_text())
    assert manifest["train"]["shared_encoder"] is True and "distill_temperature" in manifest["train"]
    _train(settings, root, resumed)
    for side in ("query", "demo"):
        np.testing.assert_array_equal(BiEncoder.load(resumed).encode(texts, side), enc.encode(texts, side))

    # A later round without sharing unties it: E_d starts as a copy of the shared encoder and both learn.
    _, untied = _project(looped, tmp_path / "b", "train.epochs_first=0.5")
    _train(untied, root, root / "models/rounds/untied", init=out)
    two = BiEncoder.load(root / "models/rounds/untied")
    assert not two.settings.shared and two.demo_model is not two.query_model
    assert not np.allclose(two.encode(texts, "query"), two.encode(texts, "demo"))


def test_a_shared_encoder_indexes_and_exports(looped, tmp_path):
    from udr.config import load_settings
    from udr.data.prepare import read_prepared
    from udr.retriever.encoder import BiEncoder, demo_texts
    from udr.stages.index import run_index

    root, settings = _project(looped, tmp_path, "train.shared_encoder=true", "train.epochs_first=0.5")
    model = root / "models/rounds/round0"
    _train(settings, root, model)
    enc = BiEncoder.load(model)
    run_index(load_settings(root / "params.yaml", ["train.later_rounds={}"]), progress=False)
    final = BiEncoder.load(root / "models/final")
    assert final.demo_model is final.query_model
    for task in TASKS:
        frame = read_prepared(root, task, "train")
        texts = demo_texts(settings.task(task), frame["input"], frame["target"], enc.settings)
        np.testing.assert_allclose(
            np.load(root / f"models/final/index/{task}.npy"), enc.encode(texts, "demo"), atol=1e-6
        )

    pytest.importorskip("sentence_transformers", reason="the sentence-transformers extra is not installed")
    from udr.serving.export import export_sentence_transformers

    out = tmp_path / "export"
    export_sentence_transformers(model, out, {t: settings.task(t) for t in TASKS}, "card")
    exported = BiEncoder.load(out)
    assert exported.settings.shared and exported.demo_model is exported.query_model
    texts = ["a gripping film", "what is the capital of peru"]
    for side in ("query", "demo"):
        np.testing.assert_allclose(exported.encode(texts, side), enc.encode(texts, side), atol=1e-6)


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step\\(\\)` has been overridden")
@pytest.mark.parametrize("loss", ["paper", "distill"])
def test_grad_cache_gives_the_whole_batch_loss_and_its_gradients(looped, tmp_path, loss):
    """With train.grad_cache, micro-batches of 1 query give the step the loss and parameter gradients of
    the whole batch in one forward (micro_batch = batch_size, no cache): L_ib over all its candidates.
    Without it, smaller micro-batches give a different loss (each L_ib over its own candidates only)."""
    import torch

    from udr.project.training import build_trainer as build
    from udr.project.training import load_scored_queries
    from udr.retriever.backward import GradCacheBackward, PlainBackward
    from udr.retriever.sampling import TaskSampler
    from udr.retriever.training import train_step
    from udr.util.distributed import Distributed

    grads, losses = {}, {}
    for name, overrides in {
        "one micro-batch": ["train.micro_batch=4"],
        "grad cache": ["train.micro_batch=1", "train.grad_cache=true"],
        "micro-batches": ["train.micro_batch=1"],
    }.items():
        root, settings = _project(
            looped, tmp_path / name.replace(" ", "-"), f"train.loss={loss}", "train.dtype=fp32", *overrides
        )
        data = load_scored_queries(settings, list(TASKS), 0, settings.encoder)
        trainer = build(settings, 0, root / "models/base/encoder", tmp_path / name / "partial", "cpu", 0, 4, data)
        assert isinstance(trainer.backward, GradCacheBackward if name == "grad cache" else PlainBackward)
        trainer.encoder.query_model.eval()  # dropout off: the two routes see the same encoder
        trainer.encoder.demo_model.eval()
        sampler = TaskSampler({t: len(qs) for t, qs in data.items()}, settings.train.alpha)
        trainer.optimizer.step = lambda: None  # keep the gradients of step 0 to compare them
        losses[name] = train_step(trainer, data, sampler, 0, Distributed("cpu"))
        grads[name] = torch.cat([p.grad.flatten() for p in trainer.params if p.grad is not None])
    whole, cached = losses["one micro-batch"], losses["grad cache"]
    for part in ("loss", "rank", "in_batch"):
        assert cached[part] == pytest.approx(whole[part], rel=1e-5)
    torch.testing.assert_close(grads["grad cache"], grads["one micro-batch"], rtol=1e-4, atol=1e-6)
    assert losses["micro-batches"]["in_batch"] != pytest.approx(whole["in_batch"], rel=1e-3)


def test_grad_cache_refuses_a_frozen_demo_encoder(looped, tmp_path):
    from udr.errors import UdrError

    with pytest.raises(UdrError, match="train.grad_cache.*freeze_demo_encoder"):
        _project(looped, tmp_path, "train.grad_cache=true", "train.freeze_demo_encoder=true")


def test_a_pool_smaller_than_the_queries_asked_for_is_scored_and_trained_whole(tmp_path):
    """A pool of fewer rows than score.queries_per_task has every row scored (the score stage's choice is a
    slice of the seeded order); training and mining take them all instead of refusing the file."""
    from udr.errors import UdrError
    from udr.feedback.scores_file import ScoresManifest

    manifest = ScoresManifest("copa", 0, 42, [5, 3, 9], 30, {}, "", "", "cpu")
    assert manifest.chosen_queries(500, 42, tmp_path / "s.parquet", pool=3).tolist() == [3, 5, 9]
    assert manifest.chosen_queries(2, 42, tmp_path / "s.parquet", pool=3).tolist() == [3, 5]
    with pytest.raises(UdrError, match="holds the scores of 3 queries"):
        manifest.chosen_queries(500, 42, tmp_path / "s.parquet", pool=4)


def test_indexing_the_same_model_twice_writes_the_same_bytes(looped, tmp_path):
    """models/final is a dependency of `evaluate@udr`: DVC keeps that evaluation only while the folder's bytes stay
    the same, so `udr index` of the same model writes the same files, its report with no timing in it."""
    from udr.config import load_settings
    from udr.stages.index import run_index

    root = tmp_path / "proj"
    shutil.copytree(looped, root, ignore=shutil.ignore_patterns("final"))
    settings = load_settings(root / "params.yaml", ["train.later_rounds={}"])
    final = root / "models/final"

    def folder_bytes() -> dict:
        return {p.relative_to(final).as_posix(): p.read_bytes() for p in sorted(final.rglob("*")) if p.is_file()}

    run_index(settings, progress=False)
    first = folder_bytes()
    run_index(settings, replace=True, progress=False)
    assert folder_bytes() == first
    assert all(set(entry) == {"pool"} for entry in json.loads(first["index/report.json"])["tasks"].values())


def test_a_kill_while_tasks_are_added_to_an_index_leaves_it_as_it_was(looped, tmp_path, monkeypatch):
    """`udr index -t` adds tasks to an indexed folder through a copy swapped in whole: killed after the first
    task's embeddings, the folder keeps every byte it had; run again, it holds the tasks' new indexes."""
    from udr.config import load_settings
    from udr.stages import index
    from udr.stages.index import run_index

    root = tmp_path / "proj"
    shutil.copytree(looped, root, ignore=shutil.ignore_patterns("final"))
    settings = load_settings(root / "params.yaml", ["train.later_rounds={}"])
    final = root / "models/final"
    run_index(settings, progress=False)
    before = {p.relative_to(final).as_posix(): p.read_bytes() for p in sorted(final.rglob("*")) if p.is_file()}
    for task in TASKS:  # pools grown since: every task's index changes
        pool = settings.paths.prepared(task, "train")
        frame = pl.read_parquet(pool)
        frame.vstack(frame.tail(1).with_columns(pl.col("id") + 100_000)).write_parquet(pool)
    real, saved = index.save_embeddings, []

    def killed_after_the_first(path, *args):
        if saved:
            raise KeyboardInterrupt
        saved.append(path)
        real(path, *args)

    monkeypatch.setattr(index, "save_embeddings", killed_after_the_first)
    with pytest.raises(KeyboardInterrupt):
        run_index(settings, tasks=list(TASKS), progress=False)
    assert (
        saved
        and {p.relative_to(final).as_posix(): p.read_bytes() for p in sorted(final.rglob("*")) if p.is_file()} == before
    )
    assert [p.name for p in final.parent.iterdir() if p.name.startswith(".final.")] == []
    monkeypatch.undo()
    run_index(settings, tasks=list(TASKS), progress=False)
    after = {p.relative_to(final).as_posix(): p.read_bytes() for p in sorted(final.rglob("*")) if p.is_file()}
    assert set(after) == set(before) and all(after[f"index/{t}.npy"] != before[f"index/{t}.npy"] for t in TASKS)
