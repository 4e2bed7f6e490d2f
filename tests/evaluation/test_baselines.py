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


# ---------------------------------------------------------------- an encoder of one's own (-m encoder:SPEC)


def _st_encoder(tmp_path, src, pooling, *, normalize=True, new_format=False, similarity=None):
    from tests.stages.test_evaluate_encoder import st_folder

    path = st_folder(
        tmp_path / f"{pooling}-{normalize}-{new_format}-{similarity}",
        src,
        pooling=pooling,
        normalize=normalize,
        new_format=new_format,
    )
    if similarity is not None:
        (path / "config_sentence_transformers.json").write_text(f'{{"similarity_fn_name": "{similarity}"}}')
    return path


@pytest.mark.parametrize("new_format", [False, True])
def test_an_encoder_folder_is_read_as_sentence_transformers_reads_it(tmp_path, new_format):
    """Pooling from the Pooling module (the legacy flags and sentence-transformers 6's `pooling_mode`),
    cosine with a Normalize module or by default, dot where the config says so; a plain folder: CLS, dot."""
    from udr.evaluation.baselines import _encoder_modules, encoder_reading

    src = save_tiny_encoder(tmp_path / "plain")
    assert encoder_reading(src, _encoder_modules(src)) == ("cls", "dot")
    for pooling, normalize, similarity, want in (
        ("mean", True, None, ("mean", "cosine")),
        ("cls", False, None, ("cls", "cosine")),
        ("cls", False, "dot", ("cls", "dot")),
        ("mean", True, "dot", ("mean", "cosine")),  # Normalize: the dot product is the cosine
    ):
        path = _st_encoder(tmp_path, src, pooling, normalize=normalize, new_format=new_format, similarity=similarity)
        assert encoder_reading(path, _encoder_modules(path)) == want
    path = _st_encoder(tmp_path, src, "cls", normalize=False, new_format=new_format, similarity="euclidean")
    with pytest.raises(UdrError, match="similarity euclidean is not one udr ranks with"):
        encoder_reading(path, _encoder_modules(path))


def test_an_encoder_folder_embeds_as_the_sbert_baseline_does(tmp_path, sbert):
    """The sbert baseline's tiny encoder as a sentence-transformers folder (mean, Normalize, 128 tokens):
    the same pool embeddings and rankings as SBERT's; with --instruction the task instruction leads both."""
    import polars as pl

    from udr.data.tasks import get_task
    from udr.evaluation.baselines import RetrieverSetup, encoder_retriever, load_encoder_method

    path = _st_encoder(tmp_path, save_tiny_encoder(tmp_path / "plain"), "mean")
    method = load_encoder_method(str(path))
    assert method.encoder.settings.max_query_length == method.encoder.settings.max_demo_length == 128
    pool = pl.DataFrame({"id": POOL_IDS, "input": POOL})
    task = get_task("sst2")
    retriever = encoder_retriever(method, task, pool, RetrieverSetup(0, "cpu", 8))
    assert np.array_equal(retriever.pool_embeddings, sbert.pool_embeddings)
    assert np.array_equal(retriever.rank(POOL[:4], 5).ids, sbert.rank(POOL[:4], 5).ids)
    led = encoder_retriever(load_encoder_method(str(path), instruction=True), task, pool, RetrieverSetup(0, "cpu", 8))
    assert np.allclose(
        led.pool_embeddings[0], method.encoder.encode([task.instruction + POOL[0]], "demo")[0], atol=1e-6
    )
    assert led.query_text("x") == task.instruction + "x" and retriever.query_text("x") == "x"
