"""udr.evaluation.baselines: every retriever returns k distinct pool items, never the excluded item,
deterministically."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tiny_models import save_tiny_encoder
from udr.errors import UdrError
from udr.evaluation.baselines import BM25Retriever, RandomRetriever, sbert_encoder
from udr.retriever.search import DenseRetriever

POOL_IDS = list(range(100, 130))
POOL = [f"sentence number {i} about {'cats' if i % 3 else 'dogs'} and item {i % 7}" for i in range(30)]


@pytest.fixture(scope="module")
def sbert(tmp_path_factory):
    from udr.lm.models import resolve_model

    tmp = tmp_path_factory.mktemp("enc")
    path = resolve_model(str(save_tiny_encoder(tmp / "src")), tmp / "encoder", kind="encoder")
    encoder = sbert_encoder(path)
    emb = encoder.encode(POOL, "demo", batch_size=8)
    return DenseRetriever(encoder, POOL_IDS, emb, batch_size=8)


def _retrievers(sbert):
    return {
        "random": RandomRetriever(POOL_IDS, seed=1, task="sst2"),
        "bm25": BM25Retriever(POOL_IDS, POOL),
        "dense": sbert,
    }


@pytest.mark.parametrize("name", ["random", "bm25", "dense"])
@pytest.mark.parametrize("k", [1, 5, 29])
def test_k_distinct_pool_items_never_the_excluded_one(sbert, name, k):
    retriever = _retrievers(sbert)[name]
    queries = POOL[:6]
    ranking = retriever.rank(queries, k, exclude=POOL_IDS[:6])
    assert ranking.ids.shape == (6, k) and ranking.similarities.shape == (6, k)
    for own, row in zip(POOL_IDS[:6], ranking.ids):
        assert len(set(row.tolist())) == k
        assert set(row.tolist()) <= set(POOL_IDS)
        assert own not in row
    assert np.all(np.diff(ranking.similarities, axis=1) <= 1e-6)  # most similar first


@pytest.mark.parametrize("name", ["bm25", "dense"])
def test_a_pool_text_finds_itself_first_unless_excluded(sbert, name):
    retriever = _retrievers(sbert)[name]
    ranking = retriever.rank(POOL[3:5], 3)
    assert ranking.ids[:, 0].tolist() == POOL_IDS[3:5]


def test_random_is_seeded_per_query():
    a = RandomRetriever(POOL_IDS, seed=1, task="sst2")
    first = a.rank(["q1", "q2"], 8).ids
    again = a.rank(["q2", "q1"], 8).ids  # the same query gets the same items wherever it is
    assert first[0].tolist() == again[1].tolist() and first[1].tolist() == again[0].tolist()
    assert RandomRetriever(POOL_IDS, seed=2, task="sst2").rank(["q1"], 8).ids[0].tolist() != first[0].tolist()
    assert first[0].tolist() != first[1].tolist()


def test_dense_scores_are_cosines_of_normalised_mean_pooled_embeddings(sbert):
    emb = sbert.pool_embeddings
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    q = sbert.embed_queries(["cats and dogs"])
    ranking = sbert.rank(["cats and dogs"], 4)
    expected = np.sort(emb @ q[0])[::-1][:4]
    assert np.allclose(ranking.similarities[0], expected, atol=1e-5)


@pytest.mark.parametrize("name", ["random", "bm25", "dense"])
def test_k_out_of_range(sbert, name):
    retriever = _retrievers(sbert)[name]
    with pytest.raises(UdrError, match="k out of range"):
        retriever.rank(["x"], 31)
    with pytest.raises(UdrError, match="k out of range"):
        retriever.rank(["x"], 30, exclude=[POOL_IDS[0]])
    with pytest.raises(UdrError, match="k out of range"):
        retriever.rank(["x"], 0)
