"""udr.retriever.search against a brute-force numpy oracle: exact top-k, exclusion, ties."""

from __future__ import annotations

import numpy as np
import pytest

from udr.errors import UdrError
from udr.retriever.search import ApproximateIndex, ExactIndex, exact_top_k

N, M, D = 50, 300, 16


def grid_data(seed: int, n: int = N, m: int = M, d: int = D):
    """Random vectors on a 1/4 grid: every inner product is exact in float32, with many ties."""
    rng = np.random.default_rng(seed)
    q = rng.integers(-8, 9, size=(n, d)).astype(np.float32) / 4
    p = rng.integers(-8, 9, size=(m, d)).astype(np.float32) / 4
    return q, p


def _torch_top_k_on_cpu(q, p, k, exclude=None, batch_size=2):
    """The torch (accelerator) route, run on the CPU."""
    return ExactIndex(p, "cpu", use_faiss=False).search(q, k, exclude, batch_size)


def gauss_data(seed: int, n: int = N, m: int = M, d: int = D):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)).astype(np.float32), rng.standard_normal((m, d)).astype(np.float32)


def brute_force(q, p, k, exclude=None):
    """Oracle: float64 scores, stable argsort of -score (ties by lower index), masked exclusions."""
    scores = q.astype(np.float64) @ p.astype(np.float64).T
    if exclude is not None:
        rows = np.flatnonzero(exclude >= 0)
        scores[rows, exclude[rows]] = -np.inf
    idx = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, idx, axis=1), idx


@pytest.mark.parametrize("k", [1, 10, 299, 300])
def test_equals_brute_force_on_grid_data(k):
    q, p = grid_data(0)
    scores, idx = exact_top_k(q, p, k)
    ref_s, ref_i = brute_force(q, p, k)
    assert scores.shape == idx.shape == (N, k)
    assert scores.dtype == np.float32 and idx.dtype == np.int64
    np.testing.assert_array_equal(idx, ref_i)
    np.testing.assert_allclose(scores, ref_s, atol=1e-5)


@pytest.mark.parametrize("k", [1, 10, 299])
def test_equals_brute_force_on_gaussian_data(k):
    # No exact ties here; near-ties may round either way in float32, so compare ranked scores
    # and check that every returned index really has the score reported for it.
    q, p = gauss_data(1)
    scores, idx = exact_top_k(q, p, k)
    ref_s, ref_i = brute_force(q, p, k)
    np.testing.assert_allclose(scores, ref_s, atol=1e-5)
    np.testing.assert_allclose(scores, np.take_along_axis(q @ p.T, idx, axis=1), atol=1e-5)
    assert (np.diff(scores, axis=1) <= 0).all()
    assert all(len(set(row)) == k for row in idx.tolist())
    assert (idx == ref_i).mean() > 0.99


@pytest.mark.parametrize("k", [1, 10, 299])
def test_exclusion_never_returns_the_query_itself(k):
    _, p = grid_data(2)
    rows = np.arange(0, M, 6)
    q, exclude = p[rows], rows.copy()
    exclude[::5] = -1  # some queries exclude nothing
    scores, idx = exact_top_k(q, p, k, exclude=exclude)
    assert idx.shape == (len(rows), k)
    for r in np.flatnonzero(exclude >= 0):
        assert exclude[r] not in idx[r]
    ref_s, ref_i = brute_force(q, p, k, exclude)
    np.testing.assert_array_equal(idx, ref_i)
    np.testing.assert_allclose(scores, ref_s, atol=1e-5)


def test_ties_go_to_the_lower_index():
    rng = np.random.default_rng(3)
    base = rng.standard_normal((5, 8)).astype(np.float32)
    pool = np.concatenate([base, base, base, base])  # row r duplicates rows r+5, r+10, r+15
    q = base[[2]]
    _, idx = exact_top_k(q, pool, 4)
    assert idx.tolist() == [[2, 7, 12, 17]]
    _, idx = exact_top_k(q, pool, 3, exclude=np.array([2]))
    assert idx.tolist() == [[7, 12, 17]]


def test_ties_across_the_fetch_boundary_are_exact():
    # Every pool row scores the same: far more ties than the extra rows fetched, so the
    # re-search / full-row fallback must kick in and return the lowest indices.
    pool = np.ones((500, 4), np.float32)
    q = np.ones((3, 4), np.float32)
    exclude = np.array([0, 3, -1])
    for run in (exact_top_k, _torch_top_k_on_cpu):
        scores, idx = run(q, pool, 5, exclude=exclude)
        assert idx.tolist() == [[1, 2, 3, 4, 5], [0, 1, 2, 4, 5], [0, 1, 2, 3, 4]]
        np.testing.assert_array_equal(scores, np.full((3, 5), 4, np.float32))


@pytest.mark.parametrize("k", [1, 10, 299])
def test_torch_path_equals_faiss_path(k):
    _, p = grid_data(4)
    q, _ = grid_data(5)
    exclude = np.arange(N) * 3
    faiss_s, faiss_i = exact_top_k(q, p, k, exclude=exclude)
    torch_s, torch_i = _torch_top_k_on_cpu(q, p, k, exclude, batch_size=7)
    np.testing.assert_array_equal(torch_i, faiss_i)
    np.testing.assert_allclose(torch_s, faiss_s, atol=1e-5)
    torch_s, torch_i = _torch_top_k_on_cpu(q, p, k, None, batch_size=4096)
    np.testing.assert_array_equal(torch_i, brute_force(q, p, k)[1])


def test_small_batches_give_the_same_result():
    q, p = grid_data(6)
    whole = exact_top_k(q, p, 10)
    batched = exact_top_k(q, p, 10, batch_size=3)
    np.testing.assert_array_equal(whole[1], batched[1])
    np.testing.assert_array_equal(whole[0], batched[0])


def test_inputs_are_converted_to_contiguous_float32():
    q, p = grid_data(7)
    ref = exact_top_k(q, p, 5)
    got = exact_top_k(np.asfortranarray(q.astype(np.float64)), p[::-1][::-1].tolist(), 5)
    np.testing.assert_array_equal(got[1], ref[1])


def test_k_out_of_range():
    q, p = grid_data(8, m=20)
    with pytest.raises(UdrError, match=r"^k out of range: asked for 50 neighbours from a pool of 20"):
        exact_top_k(q, p, 50)
    with pytest.raises(UdrError, match=r"k out of range: asked for 20 neighbours from a pool of 20"):
        exact_top_k(q, p, 20, exclude=np.full(N, -1))
    with pytest.raises(UdrError, match=r"k out of range: asked for 0 neighbours"):
        exact_top_k(q, p, 0)


def test_dimension_mismatch_and_empty_pool():
    q, p = grid_data(9)
    with pytest.raises(UdrError, match=r"dimension mismatch: queries have dimension 16, pool has 8"):
        exact_top_k(q, p[:, :8], 3)
    with pytest.raises(UdrError, match=r"empty pool"):
        exact_top_k(q, np.empty((0, D), np.float32), 3)


def test_bad_exclude_and_values():
    q, p = grid_data(10)
    with pytest.raises(UdrError, match=r"outside the pool"):
        exact_top_k(q, p, 3, exclude=np.full(N, M))
    with pytest.raises(UdrError, match=r"exclude must be 50 integer pool indices"):
        exact_top_k(q, p, 3, exclude=np.zeros(N - 1, np.int64))
    q[0, 0] = np.nan
    with pytest.raises(UdrError, match=r"queries contain NaN"):
        exact_top_k(q, p, 3)


def test_one_index_searched_many_times_equals_one_off_searches():
    q, p = grid_data(8)
    index = ExactIndex(p)
    for lo in range(0, N, 7):
        np.testing.assert_array_equal(index.search(q[lo : lo + 7], 5)[1], exact_top_k(q[lo : lo + 7], p, 5)[1])
    assert len(index) == M
    with pytest.raises(UdrError, match="CPU only"):
        ExactIndex(p, "cuda", use_faiss=True)


# ---------------------------------------------------------------- maximal marginal relevance


def test_mmr_without_diversity_keeps_the_ranking_and_with_it_skips_near_duplicates():
    from udr.retriever.search import mmr_order

    query = np.array([1.0, 0.0, 0.0])
    # Ranked by similarity: a, a copy of a, then b (less similar to the query, unlike a).
    candidates = np.array([[1.0, 0.1, 0.0], [1.0, 0.12, 0.0], [0.7, 0.0, 0.7]])
    assert mmr_order(query, candidates, 3, 0.0) == [0, 1, 2]
    assert mmr_order(query, candidates, 3, 0.5) == [0, 2, 1]
    # diversity 1: after the first pick (relevance breaks the tie), each pick minimises its largest
    # cosine to those picked: brute force.
    rng = np.random.default_rng(0)
    cands = rng.normal(size=(12, 5))
    order = mmr_order(rng.normal(size=5), cands, 5, 1.0)
    unit = cands / np.linalg.norm(cands, axis=1, keepdims=True)
    for step in range(1, 5):
        rest = [i for i in range(12) if i not in order[:step]]
        worst = {i: max(unit[i] @ unit[j] for j in order[:step]) for i in rest}
        assert order[step] == min(rest, key=lambda i: (worst[i], i))


def test_dense_retriever_diversity_reranks_within_the_fetched_neighbours():
    import torch

    from udr.retriever.search import MMR_FETCH, DenseRetriever

    class Encoder:  # queries are their own embeddings
        device = torch.device("cpu")

        def encode(self, texts, side, batch_size):
            return np.asarray([[float(x) for x in t.split(",")] for t in texts], dtype=np.float32)

    pool = np.random.default_rng(1).normal(size=(60, 4)).astype(np.float32)
    retriever = DenseRetriever(Encoder(), np.arange(100, 160), pool)
    queries = ["1,0,0,0", "0,1,1,0"]
    plain = retriever.rank(queries, 3)
    assert np.array_equal(retriever.rank(queries, 3, diversity=0.0).ids, plain.ids)
    diverse = retriever.rank(queries, 3, diversity=0.7)
    near = retriever.rank(queries, MMR_FETCH * 3)
    for query, ids, scores, fetched in zip(queries, diverse.ids, diverse.similarities, near.ids):
        assert len(set(ids)) == 3 and set(ids) <= set(fetched)
        assert np.allclose(scores, pool[ids - 100] @ np.asarray(query.split(","), dtype=np.float32))  # own scores
    assert not np.array_equal(diverse.ids, plain.ids)  # it re-ranks on this data
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(UdrError, match="diversity out of range"):
            retriever.rank(queries, 3, diversity=bad)
    for bad in (True, "0.5", None):
        with pytest.raises(UdrError, match="diversity: expected a number from 0 to 1"):
            retriever.rank(queries, 3, diversity=bad)
    assert np.array_equal(retriever.rank(queries, 3, diversity=np.float32(0.7)).ids, diverse.ids)  # numpy's numbers too


# ---------------------------------------------------------------- approximate search


def clustered_data(seed: int, n: int, m: int, d: int = 32, clusters: int = 40):
    """Queries and pool drawn around shared centres, normalised (like sentence embeddings)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, d))
    q = centres[rng.integers(clusters, size=n)] + 0.6 * rng.standard_normal((n, d))
    p = centres[rng.integers(clusters, size=m)] + 0.6 * rng.standard_normal((m, d))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    return q.astype(np.float32), p.astype(np.float32)


def test_approximate_search_reaches_its_calibrated_recall_on_new_queries():
    q, p = clustered_data(0, n=200, m=6000)
    index = ApproximateIndex(p)
    assert index.calibrated_recall >= 0.99
    assert 1 <= index.nprobe < index.nlist  # it scans a fraction of the cells, not all of them
    got_s, got_i = index.search(q, 8)
    want_s, want_i = brute_force(q, p, 8)
    recall = np.mean([len(set(a) & set(b)) / 8 for a, b in zip(got_i, want_i)])
    assert recall >= 0.97
    # the scores are the true inner products of the rows found, best first
    true = np.einsum("nd,nkd->nk", q.astype(np.float64), p[got_i].astype(np.float64))
    assert np.allclose(got_s, true, atol=1e-5)
    assert (np.diff(got_s, axis=1) <= 0).all()


def test_a_small_pool_is_indexed_without_faiss_warnings(capfd):
    """Under 39 rows per cell faiss prints a multi-line k-means warning to stderr, which says nothing about the
    search: a pool of a few hundred rows is indexed silently."""
    _, p = clustered_data(3, n=1, m=300)
    ApproximateIndex(p)
    assert "WARNING" not in capfd.readouterr().err


def test_approximate_search_honours_exclusion_and_always_fills_k():
    q, p = clustered_data(1, n=40, m=400)
    index = ApproximateIndex(p, target_recall=0.0)  # nprobe 1: a cell may hold fewer than k rows
    assert index.nprobe == 1
    exclude = np.arange(40)
    _, idx = index.search(p[:40], 30, exclude=exclude)
    assert (idx >= 0).all() and (idx != exclude[:, None]).all()
    assert all(len(set(row)) == 30 for row in idx)


def test_approximate_search_is_deterministic():
    _, p = clustered_data(2, n=1, m=3000)
    q, _ = clustered_data(3, n=50, m=1)
    a, b = ApproximateIndex(p), ApproximateIndex(p)
    assert a.nprobe == b.nprobe
    assert np.array_equal(a.search(q, 8)[1], b.search(q, 8)[1])


def test_without_faiss_the_cpu_search_runs_in_torch(monkeypatch):
    """A GPU machine's environment has no faiss: exact search on its CPU takes the torch route."""
    import udr.retriever.search as search

    monkeypatch.setattr(search, "_has_faiss", lambda: False)
    rng = np.random.default_rng(0)
    pool, queries = rng.normal(size=(50, 8)).astype(np.float32), rng.normal(size=(5, 8)).astype(np.float32)
    index = ExactIndex(pool, "cpu")
    assert not index.use_faiss
    assert np.array_equal(index.search(queries, 4)[1], ExactIndex(pool, "cpu", use_faiss=True).search(queries, 4)[1])
