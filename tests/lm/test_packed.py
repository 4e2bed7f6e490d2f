"""udr.lm.packed: padding-free packed rows give the padded scorer's log-likelihoods (fp32, 1e-4) for
ragged lengths, label sets, shared prefixes, truncated prompts and rows of every size; its block mask
is the mask it stands for; `score.engine` picks the path and refuses what it cannot run."""

from __future__ import annotations

import json
import shutil
from typing import get_args

import numpy as np
import polars as pl
import pytest
import torch

from tests.conftest import scoring_project
from tests.tiny_models import byte_tokenizer, tiny_llama
from udr.data.tasks import get_task
from udr.errors import UdrError
from udr.feedback.scoring import score_items
from udr.lm.packed import (
    ENGINES,
    PackedScorer,
    block_mask,
    dense_mask,
    make_scorer,
    pack_rows,
    padded_length,
    resolve_engine,
)
from udr.lm.prompt import PromptBuilder
from udr.lm.scorer import (
    LMScorer,
    ScoringItem,
    common_prefix,
    continuation_log_likelihood,
    length_batches,
    prefix_groups,
)

ATTENTIONS = ["sdpa", "flex"]  # flex runs uncompiled on a CPU: the same mask, its reference kernel


@pytest.fixture(scope="module")
def model():
    return tiny_llama(seed=1)


def _ids(rng, lo, hi):
    return tuple(int(x) for x in rng.integers(0, 256, int(rng.integers(lo, hi))))


def _items(seed: int, n: int = 24):
    """Single continuations, label sets (some with a common first token, as "Answer:" gives) and
    candidates shared by several queries (prompts starting with the same `shared` tokens)."""
    rng = np.random.default_rng(seed)
    items = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            items.append(ScoringItem(i, i, _ids(rng, 2, 60), (_ids(rng, 1, 12),), 0))
        elif kind == 1:
            conts = tuple((7,) + _ids(rng, 0, 4) for _ in range(int(rng.integers(2, 6))))
            items.append(ScoringItem(i, i, _ids(rng, 2, 60), conts, int(rng.integers(0, len(conts)))))
    for g in range(4):  # candidates shared by 1 to 4 queries
        prefix = _ids(rng, 1, 40)
        for q in range(g + 1):
            conts = (_ids(rng, 1, 6),) if g % 2 else tuple(_ids(rng, 1, 4) for _ in range(3))
            items.append(ScoringItem(100 + q, 200 + g, prefix + _ids(rng, 1, 30), conts, 0, shared=len(prefix)))
    return items


def _padded_scores(model, items):
    scorer = LMScorer(model, pad_id=256)
    out = [None] * len(items)
    for batch in length_batches(items, 256):
        values, _ = scorer.score_batch([items[i] for i in batch])
        for i, v in zip(batch, values):
            out[i] = v
    return out


def _row_tokens(items, groups) -> int:
    """The tokens packed rows run: every item's, less a group's shared prefix after its first item, less
    the answer prefix a label set's continuations share after the first, less each continuation's last
    token (a target only)."""
    shared = sum(items[g[0]].shared * (len(g) - 1) for g in groups)
    answers = sum(len(common_prefix(it.continuations)) * (len(it.continuations) - 1) for it in items)
    return sum(it.n_tokens - len(it.continuations) for it in items) - shared - answers


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("row_tokens", [64, 256, 4096], ids=["rows smaller than items", "several rows", "one row"])
@pytest.mark.parametrize("share", [False, True], ids=["no prefix sharing", "shared prefixes"])
def test_packed_scores_equal_the_padded_scorers(model, attention, row_tokens, share):
    items = _items(0)
    groups, _ = prefix_groups(items, 256) if share else ([], None)
    assert not share or any(len(g) > 1 for g in groups)
    scorer = PackedScorer(model, pad_id=256, row_tokens=row_tokens, attention=attention)
    values, stats = scorer.score(items, groups)
    want = _padded_scores(model, items)
    assert [len(v) for v in values] == [len(it.continuations) for it in items]
    assert np.abs(np.concatenate(values) - np.concatenate(want)).max() < 1e-4
    assert stats.pairs == len(items) and stats.tokens == _row_tokens(items, groups)
    assert stats.padded == 0 if attention == "sdpa" else stats.padded >= 0


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_packed_scores_equal_the_one_pair_reference(model, attention):
    items = _items(5, n=9)
    values, _ = PackedScorer(model, pad_id=256, row_tokens=512, attention=attention).score(items)
    for item, lp in zip(items, values):
        for v, cont in zip(lp, item.continuations):
            assert v == pytest.approx(continuation_log_likelihood(model, item.prompt, cont), abs=1e-4)


def test_truncated_prompts_score_as_in_the_padded_path(model):
    """PromptBuilder's truncation (the prompt keeps its end) on real-looking rows, label sets and generation."""
    rng = np.random.default_rng(2)
    for name, label, choices in (("sst2", 1, ["bad", "great"]), ("break", -1, [])):
        builder = PromptBuilder(byte_tokenizer(), get_task(name), None, 48)
        items = []
        for i in range(6):
            query = {"id": i, "input": "q" * int(rng.integers(5, 40)), "target": "abc", "label": label}
            cand = {"id": 100 + i, "input": "d" * int(rng.integers(5, 80)), "target": "t"}
            items.append(builder.scoring_item({**query, "choices": choices}, cand))
        cut = [it for it in items if it.shared == 0]
        assert cut and all(len(it.prompt) + max(map(len, it.continuations)) == 48 for it in cut)
        assert len(cut) < len(items)  # some prompts are whole
        values, _ = PackedScorer(model, pad_id=256, row_tokens=128).score(items)
        assert np.abs(np.concatenate(values) - np.concatenate(_padded_scores(model, items))).max() < 1e-4


def test_feedback_scores_equal_the_padded_engines(model):
    """score_items (the stage's): feedback scores (softmax over the label set, mean over generated
    tokens) of the packed engine equal the padded engine's, in the items' order."""
    items = _items(7)
    for generation in (False, True):
        use = [it for it in items if len(it.continuations) == 1] if generation else items
        padded, p_stats = score_items(LMScorer(model, pad_id=256), use, generation, 256)
        ticks = []
        packed, k_stats = score_items(
            PackedScorer(model, pad_id=256, row_tokens=256), use, generation, 256, ticks.append
        )
        assert np.abs(packed - padded).max() < 1e-5
        assert k_stats.pairs == p_stats.pairs == len(use) == sum(t.pairs for t in ticks)
        assert k_stats.tokens <= p_stats.tokens and k_stats.padded == 0


def _layout(seed: int, n: int):
    """The `ends` of a random packed row of n tokens: units of trees (prompt, continuations) and padding."""
    long = ScoringItem(999, 999, tuple(range(300)), ((1, 2), (3,)), 0)  # blocks wholly inside one pair
    items = [long, *_items(seed)]
    rows = pack_rows(items, prefix_groups(items, 256)[0], n, pad_id=0, pad_to_blocks=True)
    return torch.from_numpy(rows[0].ends)


def _listed(mask, count, index):
    """The (query block, key block) matrix of one kind of a BlockMask's blocks (partial or full)."""
    n, idx = getattr(mask, count)[0, 0], getattr(mask, index)[0, 0]
    out = torch.zeros(idx.shape, dtype=torch.bool)
    for row in range(len(n)):
        out[row, idx[row, : n[row]].long()] = True
    return out


@pytest.mark.parametrize("seed", [0, 3])
def test_the_block_mask_is_the_dense_mask_it_stands_for(seed):
    """Partial and full blocks of the BlockMask built from `ends` equal torch's own create_block_mask of
    the mask function, evaluated at every token pair."""
    from torch.nn.attention.flex_attention import create_block_mask

    ends = _layout(seed, 512)
    dense = dense_mask(ends)[0, 0]

    def mask_mod(b, h, q, kv):
        return (kv <= q) & (q < ends[kv])

    ours = block_mask(ends, mask_mod)
    theirs = create_block_mask(mask_mod, 1, None, len(ends), len(ends), device="cpu")
    for count, index in (("kv_num_blocks", "kv_indices"), ("full_kv_num_blocks", "full_kv_indices")):
        assert torch.equal(_listed(ours, count, index), _listed(theirs, count, index)), count
    pairs = dense.view(4, 128, 4, 128)
    assert torch.equal(_listed(ours, "full_kv_num_blocks", "full_kv_indices"), pairs.all(3).all(1))
    assert torch.equal(ours.to_dense()[0, 0].bool(), pairs.any(3).any(1))
    assert pairs.all(3).all(1).any() and not pairs.any(3).any(1).all()  # full blocks and skipped blocks
    assert dense.diagonal().all() and not dense.triu(1).any()  # every token sees itself, nothing later


def test_rows_pad_to_few_lengths_and_padding_sees_itself_only():
    assert [padded_length(n, 8192) for n in (1, 2048, 2049, 4096, 4097, 8192)] == [2048, 2048, 4096, 4096, 8192, 8192]
    assert padded_length(9000, 8192) == 9216  # one unit over the budget: a multiple of 1024
    items = _items(1)
    rows = pack_rows(items, [], 1024, pad_id=256, pad_to_blocks=True)
    assert all(len(r.ids) in (256, 512, 1024) and r.real <= len(r.ids) for r in rows)
    last = rows[-1]
    assert (last.ends[last.real :] == np.arange(last.real, len(last.ids)) + 1).all()
    assert (last.ids[last.real :] == 256).all()
    assert sum(r.pairs for r in rows) == len(items) and sum(r.real for r in rows) == _row_tokens(items, [])


def test_groups_without_a_shared_prefix_are_refused(model):
    scorer = PackedScorer(model, pad_id=256)
    a = ScoringItem(0, 0, (1, 2, 3, 4), ((5,),), 0, shared=2)
    b = ScoringItem(1, 0, (1, 9, 3, 4), ((5,),), 0, shared=2)
    with pytest.raises(ValueError, match="share a proper prompt prefix"):
        scorer.score([a, b], [[0, 1]])


def test_the_engine_setting(model):
    assert resolve_engine("auto", model) == "padded"  # a CPU keeps today's path, and its bits
    assert resolve_engine("packed", model) == "packed" and resolve_engine("padded", model) == "padded"
    assert isinstance(make_scorer("packed", model, bf16=False, pad_id=256, batch_tokens=512), PackedScorer)
    assert isinstance(make_scorer("auto", model, bf16=False, pad_id=256, batch_tokens=512), LMScorer)
    with pytest.raises(UdrError, match=r"^score.engine=fast: expected one of auto, padded, packed$"):
        resolve_engine("fast", model)
    windowed = tiny_llama(seed=1)
    windowed.config.sliding_window = 64
    with pytest.raises(UdrError, match=r"^score.engine=packed: the LM has no packed path \(model type llama") as info:
        resolve_engine("packed", windowed)
    assert "\n" not in str(info.value)
    assert resolve_engine("auto", windowed) == "padded"


def test_the_engine_is_a_validated_score_setting():
    from udr.config import ScoreSettings

    assert ScoreSettings().engine == "auto"
    assert get_args(ScoreSettings.model_fields["engine"].annotation) == ENGINES
    with pytest.raises(Exception, match="engine"):
        ScoreSettings(engine="fast")


def test_the_score_stage_with_the_packed_engine_writes_the_padded_engines_scores(tmp_path, data_dir):
    """`udr score` with score.engine=packed (on a CPU: SDPA with dense masks) against score.engine=padded,
    fp32: every pair's score to 1e-5, the same ranks; each run's report names its engine."""
    from udr.config import load_settings
    from udr.stages.score import run_score

    tasks = {"sst2": "classification", "break": "generation"}
    score = {"queries_per_task": 4, "shard_pairs": 9, "batch_tokens": 512, "dtype": "fp32"}
    (tmp_path / "project").mkdir()
    root = scoring_project(
        tmp_path / "project", tasks, data_dir, max_train=20, max_test=2, k=4, score=score, lm_src="lm-src"
    )
    frames = {}
    for engine in ("padded", "packed"):
        here = tmp_path / engine
        shutil.copytree(root, here)
        settings = load_settings(here / "params.yaml", [f"score.engine={engine}"])
        for task in tasks:
            summary = run_score(settings, task, 0, progress=False)
            assert summary.scored == 16 and summary.engine == engine  # the engine that ran, in the report
            assert json.loads(settings.paths.score_report(0, task).read_text())["engine"] == engine
            frames[engine, task] = pl.read_parquet(here / "data/scores/round0" / f"{task}.parquet")
    for task in tasks:
        a, b = frames["padded", task], frames["packed", task]
        both = a.join(b, on=["query_id", "candidate_id"], suffix="_packed")
        assert len(both) == len(a) == 16
        assert (both["score"] - both["score_packed"]).abs().max() < 1e-5
