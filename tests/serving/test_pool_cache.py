"""udr.serving.pool_cache: per-row pool embeddings, so that adding or removing rows embeds only what changed,
with the results of embedding the whole pool afresh."""

from __future__ import annotations

import numpy as np

QUERIES = ["a dog runs after a ball in the park", "how do I open a bank account", "the weather is sunny"]
INSTRUCTION = "Continue the sentence: "


def _records(lo: int, hi: int) -> list[dict]:
    topics = ["dogs", "banks", "weather", "football", "cooking", "trains", "music"]
    n = len(topics)
    texts = [f"sentence {i} about {topics[i % n]} and {topics[(3 * i) % n]}" for i in range(lo, hi)]
    return [{"input": text, "target": f"t{i}"} for i, text in zip(range(lo, hi), texts)]


def _retrieved(retriever, name):
    return [[(d.pool_id, d.similarity) for d in retriever.retrieve(q, name, k=8)] for q in QUERIES]


def _same(got, want):
    assert [[i for i, _ in row] for row in got] == [[i for i, _ in row] for row in want]
    np.testing.assert_allclose([[s for _, s in row] for row in got], [[s for _, s in row] for row in want], atol=1e-6)


def test_adding_and_removing_rows_embeds_only_the_new_ones_with_fresh_results(
    served, real_model, tmp_path, embedded_rows
):
    from udr import Retriever

    def load(cache):
        return Retriever.load(real_model, root=served, cache_dir=tmp_path / cache, encoder="udr")

    incremental = load("cache")
    pools = {
        "first": _records(0, 40),
        "added": _records(0, 52),  # 12 rows added
        "removed": _records(7, 52),  # 7 rows removed (the ids move: a row's id is its position)
        "both": _records(10, 55),  # 3 removed, 3 added
    }
    for name, records in pools.items():
        incremental.add_pool(records, instruction=INSTRUCTION, name=name)
    assert embedded_rows == [40, 12, 3]  # "removed" embedded nothing: every row was cached
    for name, records in pools.items():
        fresh = load(f"fresh-{name}")
        fresh.add_pool(records, instruction=INSTRUCTION, name=name)
        assert embedded_rows[-1] == len(records)
        _same(_retrieved(incremental, name), _retrieved(fresh, name))


def test_a_changed_instruction_is_another_row(served, tmp_path, embedded_rows):
    """A row's key is the text E_d reads: another instruction embeds every row again, the first rows stay."""
    from udr import Retriever

    retriever = Retriever.load(root=served, cache_dir=tmp_path / "cache", encoder="udr")
    records = _records(0, 10)
    retriever.add_pool(records, instruction=INSTRUCTION)
    retriever.add_pool(records, instruction="Summarize: ")
    retriever.add_pool(records, instruction=INSTRUCTION)
    assert embedded_rows == [10, 10]


def test_a_damaged_shard_is_embedded_again_and_the_others_kept(served, tmp_path, embedded_rows):
    from udr import Retriever

    retriever = Retriever.load(root=served, cache_dir=tmp_path / "cache", encoder="udr")
    retriever.add_pool(_records(0, 10), instruction=INSTRUCTION)
    (first,) = (tmp_path / "cache" / "pools").glob("*/*.npy")
    retriever.add_pool(_records(0, 14), instruction=INSTRUCTION)
    (added,) = set((tmp_path / "cache" / "pools").glob("*/*.npy")) - {first}
    added.write_bytes(added.read_bytes()[:-8])  # cut short: unreadable
    retriever.add_pool(_records(0, 14), instruction=INSTRUCTION)
    assert embedded_rows == [10, 4, 4]
    assert len(list((tmp_path / "cache" / "pools").glob("*/*.npy"))) == 2  # the damaged shard was replaced
