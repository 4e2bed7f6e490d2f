"""udr.serving.api (with udr.serving.pools and udr.serving.pool_cache): the Python retriever on a tiny
bi-encoder and real prepared pools."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO
from udr.errors import UdrError


@pytest.fixture
def retriever(served, tmp_path):
    from udr import Retriever

    return Retriever.load(root=served, cache_dir=tmp_path / "cache", batch_size=4)


def _pool_rows(root, task):
    import polars as pl

    frame = pl.read_parquet(root / "data" / "prepared" / task / "train.parquet")
    return {i: (x, y) for i, x, y in zip(frame["id"], frame["input"], frame["target"])}


def test_retrieve_returns_the_exact_top_k_of_the_index(served, retriever):
    from udr.data.tasks import get_task
    from udr.retriever.encoder import query_text
    from udr.retriever.index import load_embeddings

    query = "a gripping, funny film"
    demos = retriever.retrieve(query, task="sst2", k=5)
    rows = _pool_rows(served, "sst2")
    assert len(demos) == 5 and len({d.pool_id for d in demos}) == 5
    for d in demos:
        assert (d.input, d.output) == rows[d.pool_id]
    # Brute force over the index `udr index` wrote.
    emb, meta = load_embeddings(served / "models" / "final" / "index" / "sst2.npy")
    q = retriever.encoder.encode(
        [query_text(get_task("sst2").instruction, query, retriever.encoder.settings)], "query"
    )[0]
    scores = emb @ q
    where = {pid: row for row, pid in enumerate(meta["ids"])}
    got = [where[d.pool_id] for d in demos]
    np.testing.assert_allclose([d.similarity for d in demos], scores[got], rtol=1e-5, atol=1e-5)
    assert all(a >= b for a, b in zip([d.similarity for d in demos], [d.similarity for d in demos][1:]))
    rest = np.delete(scores, got)
    assert demos[-1].similarity >= rest.max() - 1e-5  # nothing left out scores higher (up to float rounding)


def test_batch_equals_single_queries_in_order(retriever):
    queries = [
        "a gripping, funny film",
        "dull and lifeless",
        "the best movie of the year",
        "not worth it",
        "an utter mess",
        "charming",
    ]
    batch = retriever.retrieve_batch(queries, task="sst2", k=3)  # batch_size 4: two batches
    assert len(batch) == len(queries)
    for query, demos in zip(queries, batch):
        single = retriever.retrieve(query, task="sst2", k=3)
        assert [d.pool_id for d in demos] == [d.pool_id for d in single]
        np.testing.assert_allclose([d.similarity for d in demos], [d.similarity for d in single], atol=1e-4)


def test_prompt_puts_the_most_similar_demonstration_last(retriever):
    demos = retriever.retrieve("a gripping, funny film", task="sst2", k=3)
    text = retriever.prompt("a gripping, funny film", demos, task="sst2")
    lines = text.split("\n")
    assert lines[:3] == [f"{d.input}\t{d.output}" for d in reversed(demos)]
    assert lines[3] == "a gripping, funny film\t"
    with_instruction = retriever.prompt("x", demos, task="sst2", instruction=True, order="descending")
    assert with_instruction.startswith("Sentiment of the sentence: " + f"{demos[0].input}\t{demos[0].output}\n")


def test_own_pool_records_are_embedded_once_and_cached(served, tmp_path, embedded_rows):
    from udr import Retriever

    records = [{"input": f"def f{i}(x): return x + {i}", "target": f"add {i} to x"} for i in range(12)]
    own = Retriever.from_pool(
        records, instruction="Comment on the code. Code: ", root=served, cache_dir=tmp_path / "cache"
    )
    demos = own.retrieve("def g(y): return y + 3", k=4)
    assert len(demos) == 4 and all(records[d.pool_id] == {"input": d.input, "target": d.output} for d in demos)
    assert len(list((tmp_path / "cache" / "pools").glob("*/*.npy"))) == 1
    assert embedded_rows == [12]

    again = Retriever.from_pool(
        records, instruction="Comment on the code. Code: ", root=served, cache_dir=tmp_path / "cache"
    )
    assert [d.pool_id for d in again.retrieve("def g(y): return y + 3", k=4)] == [d.pool_id for d in demos]
    assert embedded_rows == [12]  # the pool came from the cache: no demonstration embedded
    assert again.encoder._full is None  # ... and the query by the light encoder: transformers' model never loaded
    Retriever.from_pool(records, instruction="Explain the code: ", root=served, cache_dir=tmp_path / "cache")
    assert embedded_rows == [12, 12]  # another instruction: other texts, embedded again
    assert len(list((tmp_path / "cache" / "pools").glob("*/*.npy"))) == 2


def test_a_pool_another_process_is_embedding_is_refused_naming_its_pid(served, tmp_path):
    """Two processes embedding one pool into one cache: the second is refused in one line naming the
    first's pid; a finished entry is read while another process holds its lock."""
    from tests.locking import another_process_holding
    from udr import Retriever
    from udr.errors import UdrError

    records = [{"input": f"def f{i}(x): return x - {i}", "target": f"subtract {i}"} for i in range(8)]
    kwargs = {"instruction": "Comment on the code. Code: ", "root": served}
    Retriever.from_pool(records, **kwargs, cache_dir=tmp_path / "done")
    (entry,) = (tmp_path / "done" / "pools").glob("*/*.npy")  # the key is the model's and the texts', not the folder's
    with another_process_holding(tmp_path / "new" / entry.relative_to(tmp_path / "done")) as pid:
        with pytest.raises(UdrError, match=f"pool embedding cache entry .*pid {pid}") as err:
            Retriever.from_pool(records, **kwargs, cache_dir=tmp_path / "new")
        assert len(str(err.value).splitlines()) == 1
        assert not list((tmp_path / "new" / "pools").rglob("*.npy"))
    with another_process_holding(entry):
        Retriever.from_pool(records, **kwargs, cache_dir=tmp_path / "done")  # read whole, without the lock


@pytest.mark.parametrize("damage", ["half the rows", "nan", "width"])
def test_an_altered_cache_entry_is_embedded_again(served, tmp_path, damage):
    """A cache file that is well formed but altered (other rows, a NaN, another width with a matching
    sidecar) is not reused: the pool is embedded again and the entry replaced."""
    from udr import Retriever
    from udr.retriever.index import save_embeddings

    records = [{"input": f"def f{i}(x): return x * {i}", "target": f"multiply x by {i}"} for i in range(10)]
    kwargs = {"instruction": "Comment on the code. Code: ", "root": served, "cache_dir": tmp_path / "cache"}
    query = "def g(y): return y * 3"
    expected = [(d.pool_id, d.similarity) for d in Retriever.from_pool(records, **kwargs).retrieve(query, k=10)]
    (entry,) = (tmp_path / "cache" / "pools").glob("*/*.npy")
    emb = original = np.load(entry)
    emb = emb.copy()
    meta = json.loads(entry.with_name(entry.name + ".json").read_text())["meta"]
    if damage == "half the rows":
        emb[: len(emb) // 2] = -emb[: len(emb) // 2]
    elif damage == "nan":
        emb[3, 0] = np.nan
    else:
        emb = emb[:, :-1].copy()
    save_embeddings(entry, emb, meta)  # a consistent sidecar: only the checksum can tell
    assert [(d.pool_id, d.similarity) for d in Retriever.from_pool(records, **kwargs).retrieve(query, k=10)] == expected
    assert np.array_equal(np.load(entry), original)


def test_own_pool_file_is_re_embedded_when_it_changes(served, tmp_path):
    from udr import Retriever

    path = tmp_path / "pool.jsonl"
    path.write_text(
        "".join(
            json.dumps({"text": f"review {i}: {w}", "label": "positive" if i % 2 else "negative"}) + "\n"
            for i, w in enumerate(["great", "awful", "fine", "boring", "superb", "bad"])
        )
    )
    first = Retriever.from_pool(path, task="sst2", root=served, cache_dir=tmp_path / "cache")
    assert {d.output for d in first.retrieve("a superb film", task="sst2", k=6)} == {
        "It was great .",
        "It was terrible .",
    }
    path.write_text(path.read_text().replace("superb", "magnificent"))
    second = Retriever.from_pool(path, task="sst2", root=served, cache_dir=tmp_path / "cache")
    assert len(list((tmp_path / "cache" / "pools").glob("*/*.npy"))) == 2
    assert "review 4: magnificent" in {d.input for d in second.retrieve("a superb film", task="sst2", k=6)}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda r: r.retrieve("film", task="nope"), "unknown task 'nope'; known tasks: .*sst2"),
        (lambda r: r.retrieve("   ", task="sst2"), "empty query"),
        (lambda r: r.retrieve_batch(["ok", ""], task="sst2"), "empty query 2"),
        (lambda r: r.retrieve("film", task="sst2", k=0), "k out of range: asked for 0"),
        (lambda r: r.retrieve("film", task="sst2", k=31), "k out of range: asked for 31 .* pool of 30"),
        (
            lambda r: r.retrieve("film", task="trec"),
            "task 'trec' has no prepared pool .*: add `trec: {}` under prepare.tasks in params.yaml, then run "
            "`udr prepare -t trec`",
        ),
        (lambda r: r.retrieve("film"), "no task given"),
        (lambda r: r.retrieve_batch("abc", task="sst2"), "expected a list of strings, got one string"),
        *(
            (lambda r, k=k: r.retrieve("film", task="sst2", k=k), f"k: expected a whole number .*got {k!r}")
            for k in (2.7, True, "3", None)
        ),
        (lambda r: r.add_pool([{"input": "a", "target": "b"}]), "needs an instruction"),
        (lambda r: r.add_pool("absent.csv"), "pool file not found: absent.csv"),  # before the instruction
        (
            lambda r: r.add_pool([{"input": "a"}], instruction="I: "),
            r"records:1: malformed row .*missing field 'target'",
        ),
        (lambda r: r.add_pool([], instruction="I: "), "no demonstrations"),
    ],
)
def test_errors_are_one_line(retriever, call, message):
    with pytest.raises(UdrError, match=message) as info:
        call(retriever)
    assert "\n" not in str(info.value)


def test_malformed_pool_file_names_file_and_line(retriever, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"input": "a", "target": "b"}\n{"input": "c", "target": 3}\n')
    with pytest.raises(UdrError, match=rf"{path}:2: malformed row .*'target' must be a string"):
        retriever.add_pool(path, instruction="I: ")
    path.write_text('{"input": "a", "target": "b"}\n\nnot json\n')
    with pytest.raises(UdrError, match=rf"{path}:3: malformed row: invalid JSON"):
        retriever.add_pool(path, instruction="I: ")


def test_missing_and_mismatched_model_or_index(served, tmp_path):
    import shutil

    from udr import Retriever

    with pytest.raises(UdrError, match="missing model"):
        Retriever.load(tmp_path / "nowhere")
    with pytest.raises(UdrError, match="missing model: .* not a udr bi-encoder"):
        Retriever.load(served / "data")
    copy = tmp_path / "final"
    shutil.copytree(served / "models" / "final", copy)
    meta = copy / "index" / "sst2.npy.json"
    meta.write_text(meta.read_text().replace('"pool_sha256": "', '"pool_sha256": "0'))
    with pytest.raises(UdrError, match="mismatched index .*sst2.npy.*run `udr index` again"):
        Retriever.load(copy, root=served, cache_dir=tmp_path / "c").retrieve("film", task="sst2")
    # A model without an index for a task embeds its pool through the cache instead.
    shutil.rmtree(copy / "index")
    demos = Retriever.load(copy, root=served, cache_dir=tmp_path / "c").retrieve("film", task="sst2", k=3)
    assert len(demos) == 3 and len(list((tmp_path / "c" / "pools").glob("*/*.npy"))) == 1


def test_import_is_lean():
    code = (
        "import sys, udr, udr.cli; from udr import Retriever; "
        "heavy = {'torch', 'transformers', 'faiss', 'polars', 'numpy'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_approximate_search_serves_through_an_ivf_index(served, tmp_path):
    from udr import Retriever
    from udr.retriever.search import ApproximateIndex

    approx = Retriever.load(root=served, cache_dir=tmp_path / "cache", batch_size=4, search="approximate")
    demos = approx.retrieve("a gripping, funny film", task="sst2", k=5)
    assert isinstance(approx._served_pool(approx.resolve_task("sst2")).searcher.index, ApproximateIndex)
    assert len({d.pool_id for d in demos}) == 5
    assert all(a.similarity >= b.similarity for a, b in zip(demos, demos[1:]))
    with pytest.raises(UdrError, match="bad search 'fuzzy': expected one of exact, approximate"):
        Retriever.load(root=served, cache_dir=tmp_path / "cache", search="fuzzy")


def test_a_repeated_pool_record_is_served_once(retriever):
    rows = [{"input": "the film was great", "target": "positive"}] * 3 + [{"input": "dull", "target": "negative"}]
    name = retriever.add_pool(rows, instruction="Sentiment: ")
    got = retriever.retrieve("a great film", task=name, k=2)
    assert sorted((d.input, d.output) for d in got) == [("dull", "negative"), ("the film was great", "positive")]
    with pytest.raises(UdrError, match="k out of range: asked for 3 .* pool of 2"):
        retriever.retrieve("a great film", task=name, k=3)


def test_a_huge_query_is_refused_before_tokenising():
    from udr.serving.api import MAX_QUERY_CHARS, check_query

    check_query("x" * MAX_QUERY_CHARS)
    with pytest.raises(UdrError, match=r"query is 5,000,000 characters long: at most 100,000 are accepted"):
        check_query("x" * 5_000_000)


def test_threads_share_a_fresh_retriever(served, real_model, tmp_path):
    """8 threads calling add_pool and retrieve at once on a fresh Retriever (transformers not imported
    yet, in a new process): every one gets its demonstrations, none an ImportError."""
    script = f"""
import threading
from udr import Retriever
r = Retriever.load({str(real_model)!r}, root={str(served)!r}, cache_dir={str(tmp_path / "cache")!r})
errors, results = [], []
def work(i):
    try:
        rows = [{{"input": f"q{{i}} {{j}}", "target": "a"}} for j in range(3)]
        name = r.add_pool(rows, instruction="Q: ", name=f"p{{i}}")
        results.append(len(r.retrieve("q", task=name, k=2)))
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
print(errors, results)
assert not errors and results == [2] * 8
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


def test_a_demonstrations_former_score_name_still_reads_its_similarity_with_a_warning():
    from udr.serving.api import Demonstration

    demo = Demonstration(3, "x", "y", 0.5)
    assert demo.to_dict() == {"pool_id": 3, "input": "x", "output": "y", "similarity": 0.5}
    with pytest.warns(DeprecationWarning, match="similarity"):
        assert demo.score == 0.5


def test_replacing_an_own_pool_while_threads_retrieve_never_mixes_two_pools(served, real_model, tmp_path):
    """One thread replaces an own pool again and again (same name, other texts) while others retrieve
    from it: every result is wholly one pool's, its texts with the ranking and similarities computed on
    that pool's own embeddings."""
    import threading

    from udr import Retriever

    pool_a = [{"input": f"apples and pears number {j}", "target": "fruit"} for j in range(12)]
    pool_b = [{"input": f"{j} rockets launched to orbit", "target": "space"} for j in range(9)]
    r = Retriever.load(real_model, root=served, cache_dir=tmp_path / "cache")
    expected = {}
    for rows in (pool_a, pool_b):
        r.add_pool(rows, instruction="Q: ", name="mine")
        expected[rows[0]["target"]] = [(d.pool_id, d.input, d.similarity) for d in r.retrieve("fruit", "mine", k=4)]
    stop, results, errors = threading.Event(), [], []

    def swap():
        for i in range(150):
            r.add_pool(pool_a if i % 2 else pool_b, instruction="Q: ", name="mine")
        stop.set()

    def read():
        try:
            while not stop.is_set():
                results.append([(d.pool_id, d.input, d.similarity) for d in r.retrieve("fruit", "mine", k=4)])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=swap)] + [threading.Thread(target=read) for _ in range(3)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors and results
    for got in results:
        assert any(
            [(i, x) for i, x, _ in got] == [(i, x) for i, x, _ in want]
            and np.allclose([s for *_, s in got], [s for *_, s in want], atol=1e-4)
            for want in expected.values()
        ), got
