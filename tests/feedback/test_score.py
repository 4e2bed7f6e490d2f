"""udr.scoring / udr.feedback.score: exact scores, ranks, reuse, resume, torchrun, errors.

The scores of the batched scorer (length buckets, LM head at scored positions, shared-prefix KV
cache) must equal a direct one-pair-at-a-time computation (full logits, no cache) to 1e-4 in fp32.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.conftest import REPO, prepare_with_candidates, write_params
from tests.tiny_models import byte_tokenizer, save_tiny_lm, tiny_llama
from udr.errors import UdrError
from udr.lm.scorer import (
    LMScorer,
    PromptBuilder,
    ScoringItem,
    leading_special_tokens,
    length_batches,
    pair_score,
    reference_logprobs,
)

TASKS = {"sst2": "classification", "comv": "multiple_choice", "break": "generation"}


@pytest.fixture(scope="module")
def project(tmp_path_factory, data_dir):
    """A project dir with three real tasks prepared, BM25 candidates, and a tiny LM resolved."""
    from udr.lm.models import resolve_model

    root = tmp_path_factory.mktemp("proj")
    write_params(
        root,
        {t: {"max_train": 30, "max_test": 5} for t in TASKS},
        data_dir,
        candidates={"k": 5, "field": "paper"},
        score={"queries_per_task": 6, "shard_pairs": 7, "batch_tokens": 2048},
    )
    prepare_with_candidates(root, TASKS, data_dir, max_train=30, max_test=5, k=5)
    resolve_model(str(save_tiny_lm(root / "tiny-src")), root / "models" / "base" / "lm", kind="lm")
    return root


def _copy(project, tmp_path) -> Path:
    dest = tmp_path / "proj"
    shutil.copytree(project, dest)
    return dest


def _settings(root, *overrides):
    from udr.config import load_settings

    return load_settings(root / "params.yaml", list(overrides))


def _run(root, task, iteration=0, **kw):
    from udr.feedback.score import run_score

    return run_score(_settings(root), task, iteration, progress=False, **kw)


@pytest.fixture(scope="module")
def scored(project):
    return {t: (_run(project, t), pl.read_parquet(project / "data/scores/it0" / f"{t}.parquet")) for t in TASKS}


@pytest.mark.parametrize("task", TASKS)
def test_scores_equal_direct_computation(task, project, scored):
    from udr.data.tasks import get_task
    from udr.lm.models import load_causal_lm

    summary, frame = scored[task]
    assert summary.queries == 6 and summary.pairs == len(frame) == 6 * 5 and summary.reused == 0
    model, tok = load_causal_lm(project / "models/base/lm")
    t = get_task(task)
    rows = {r["id"]: r for r in pl.read_parquet(project / f"data/prepared/{task}/train.parquet").iter_rows(named=True)}
    builder = PromptBuilder(tok, t.template, None, 1024)
    generation = TASKS[task] == "generation"
    for q, c, score in frame.select("query_id", "candidate_id", "score").iter_rows():
        item = builder.item(rows[q], rows[c], generation)
        logps = [reference_logprobs(model, item.prompt, cont) for cont in item.continuations]
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


def test_s_cls_sums_to_at_most_one_over_labels():
    model = tiny_llama()
    tok = byte_tokenizer()
    builder = PromptBuilder(tok, "{input}\t{answer}", None, 512)
    query = {
        "id": 1,
        "input": "a fine film",
        "target": "It was great .",
        "label": 1,
        "choices": ["It was terrible .", "It was great .", "It was okay ."],
    }
    item = builder.item(query, {"id": 2, "input": "dull", "target": "It was terrible ."}, False)
    (logps,), _ = LMScorer(model, pad_id=256).score_batch([item])
    total = sum(pair_score(logps, g, False, 1) for g in range(3))
    assert total <= 1.0 + 1e-9 and total == pytest.approx(1.0, abs=1e-9)


def test_batched_paths_equal_reference_with_mixed_lengths():
    rng = np.random.default_rng(0)
    model = tiny_llama(1)
    scorer = LMScorer(model, pad_id=256)

    def ids(n):
        return tuple(int(x) for x in rng.integers(0, 256, n))

    multi = [
        ScoringItem(
            i, i, ids(rng.integers(2, 40)), tuple(ids(rng.integers(1, 5)) for _ in range(rng.integers(2, 5))), 0
        )
        for i in range(20)
    ]
    single = [ScoringItem(i, i, ids(rng.integers(2, 40)), (ids(rng.integers(1, 8)),), 0) for i in range(20)]
    for items in (multi, single):
        for batch in length_batches(items, 128):
            logps, stats = scorer.score_batch([items[i] for i in batch])
            assert stats.padded >= 0 and stats.pairs == len(batch)
            for i, lp in zip(batch, logps):
                for c, cont in enumerate(items[i].continuations):
                    assert lp[c] == pytest.approx(reference_logprobs(model, items[i].prompt, cont), abs=1e-4)


def test_length_batches_respect_budget_and_cover_all():
    items = [ScoringItem(i, i, (1,) * n, ((2,),), 0) for i, n in enumerate([5, 50, 3, 20, 20, 200, 7])]
    batches = list(length_batches(items, 64))
    assert sorted(i for b in batches for i in b) == list(range(len(items)))
    for b in batches:
        longest = max(items[i].n_tokens for i in b)
        assert len(b) == 1 or longest * len(b) <= 64


def test_reuse_of_earlier_scores(project, scored, tmp_path):
    root = _copy(project, tmp_path)
    old = pl.read_parquet(root / "data/candidates/it0/break.parquet")
    train_ids = pl.read_parquet(root / "data/prepared/break/train.parquet")["id"].to_list()
    # iteration 1 keeps every old candidate and adds two new ones per query
    extra = []
    for q in old["query_id"].unique().to_list():
        have = set(old.filter(pl.col("query_id") == q)["candidate_id"].to_list()) | {q}
        extra += [(q, c) for c in [c for c in train_ids if c not in have][:2]]
    new = pl.concat(
        [
            old.select("query_id", "candidate_id"),
            pl.DataFrame(extra, schema={"query_id": pl.Int64, "candidate_id": pl.Int64}, orient="row"),
        ]
    )
    (root / "data/candidates/it1").mkdir(parents=True)
    new.write_parquet(root / "data/candidates/it1/break.parquet")
    summary = _run(root, "break", iteration=1)
    it0 = scored["break"][1]
    it1 = pl.read_parquet(root / "data/scores/it1/break.parquet")
    assert summary.reused == len(it0) and summary.scored == 6 * 2 and len(it1) == len(it0) + 12
    both = it1.join(it0, on=["query_id", "candidate_id"], suffix="_0")
    assert len(both) == len(it0) and (both["score"] == both["score_0"]).all() and (both["scored_in"] == 0).all()
    assert (it1.filter(pl.col("scored_in") == 1)).height == 12


def test_resume_after_interruption_gives_identical_output(project, scored, tmp_path):
    root = _copy(project, tmp_path)
    (root / "data/scores").exists() and shutil.rmtree(root / "data/scores")
    assert _run(root, "sst2", stop_after_shards=2) is None  # "killed" after two of five shards
    partial = root / "data/scores/it0/.sst2.partial"
    assert len(list(partial.glob("shard-*.parquet"))) == 2 and not (root / "data/scores/it0/sst2.parquet").exists()
    summary = _run(root, "sst2")
    assert summary.scored == 30
    resumed = pl.read_parquet(root / "data/scores/it0/sst2.parquet")
    assert resumed.equals(scored["sst2"][1])
    assert not partial.exists()


def test_stale_partial_results_are_discarded(project, scored, tmp_path):
    root = _copy(project, tmp_path)
    shutil.rmtree(root / "data/scores")
    _run(root, "sst2", stop_after_shards=1)
    from udr.feedback.score import run_score

    run_score(_settings(root, "score.instruction=prefix"), "sst2", 0, progress=False)
    with_instruction = pl.read_parquet(root / "data/scores/it0/sst2.parquet")
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
        "-i",
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
    two = pl.read_parquet(root / "data/scores/it0/comv.parquet")
    one = scored["comv"][1]
    # Same pairs, ranks and provenance; scores equal up to float summation order (each process
    # runs 1 thread, the single process 2), which torch does not make bitwise identical.
    assert two.drop("score").equals(one.drop("score"))
    np.testing.assert_allclose(two["score"].to_numpy(), one["score"].to_numpy(), rtol=0, atol=1e-9)
    assert '"world_size": 2' in (root / "data/scores/it0/comv.json").read_text()


def test_candidates_with_unknown_ids_fail_clearly(project, tmp_path):
    root = _copy(project, tmp_path)
    known = pl.read_parquet(root / "data/prepared/sst2/train.parquet")["id"][0]
    bad = pl.DataFrame({"query_id": [99999], "candidate_id": [known], "rank": [1], "score": [0.0]})
    bad.write_parquet(root / "data/candidates/it0/sst2.parquet")
    with pytest.raises(UdrError, match=r"names 1 id\(s\) not in the prepared train split of sst2 \(first: \[99999\]\)"):
        _run(root, "sst2")


def test_empty_label_set_fails_clearly():
    builder = PromptBuilder(byte_tokenizer(), "{input}\t{answer}", None, 512)
    query = {"id": 7, "input": "x", "target": "y", "label": 0, "choices": []}
    with pytest.raises(UdrError, match="query id 7: empty label set"):
        builder.item(query, {"id": 8, "input": "z", "target": "w"}, False)


def test_missing_candidates_names_the_step(project, tmp_path):
    root = _copy(project, tmp_path)
    with pytest.raises(UdrError, match=r"udr mine --iteration 3"):
        _run(root, "sst2", iteration=3)


def test_prompt_keeps_its_end_when_too_long():
    builder = PromptBuilder(byte_tokenizer(), "{input}\t{answer}", None, 40)
    item = builder.item(
        {"id": 1, "input": "q" * 10, "target": "abc", "label": -1, "choices": []},
        {"id": 2, "input": "d" * 100, "target": "t"},
        True,
    )
    assert len(item.prompt) + 3 == 40 and bytes(item.prompt[-11:-1]) != b""  # the query survives at the end
    assert builder.encode("q" * 10 + "\t") == item.prompt[-11:]


def bos_tokenizer(text, add_special_tokens=False):
    """One token per byte, with a BOS (999) when special tokens are asked for, as Gemma's tokenizer does."""
    return {"input_ids": ([999] if add_special_tokens else []) + list(text.encode())}


def test_leading_special_tokens():
    assert leading_special_tokens(bos_tokenizer) == (999,)
    assert leading_special_tokens(byte_tokenizer()) == ()


def test_prompt_starts_with_bos_even_when_truncated():
    builder = PromptBuilder(bos_tokenizer, "{input}\t{answer}", None, 40)
    item = builder.item(
        {"id": 1, "input": "q" * 10, "target": "abc", "label": -1, "choices": []},
        {"id": 2, "input": "d" * 100, "target": "t"},
        True,
    )
    assert item.prompt[0] == 999 and len(item.prompt) + 3 == 40
    assert item.prompt[-11:] == builder.encode("q" * 10 + "\t")
