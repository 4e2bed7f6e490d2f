"""Label-aware selection (udr.serving.selection): the pure re-rank and quotas, and the option through Python,
`udr retrieve`, the LangChain selector and the DSPy module, on a real sentence encoder and the sst2 pool."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from udr.errors import UdrError
from udr.retriever.label_selection import BALANCED, LabelSelection, quota_pick, select

QUERY = "a gripping, funny film"
QUERIES = [QUERY, "a dull, lifeless mess of a movie", "the actors are superb in it"]
pytestmark = pytest.mark.filterwarnings("ignore::udr.serving.evidence.UntrainedTaskWarning")


# ---------------------------------------------------------------- the pure selection

ranked = st.lists(st.sampled_from("abc"), min_size=1, max_size=30)


@given(ranked, st.integers(1, 12), st.integers(1, 5))
def test_a_quota_of_q_never_takes_more_than_q_of_a_label_and_fills_in_rank_order(labels, k, q):
    picked = quota_pick(labels, k, q)
    counts = Counter(labels[i] for i in picked)
    assert max(counts.values()) <= q
    assert picked == sorted(picked)
    assert len(picked) == min(k, sum(min(q, n) for n in Counter(labels).values()))
    # Greedy from the ranked list: a skipped row is one whose label had its q already.
    for i in set(range(max(picked) + 1)) - set(picked):
        assert sum(labels[j] == labels[i] for j in picked if j < i) == q


@given(ranked, st.integers(1, 12))
def test_balanced_shares_k_as_equally_as_the_candidates_allow(labels, k):
    picked = quota_pick(labels, k, BALANCED)
    assert len(picked) == min(k, len(labels)) and picked == sorted(picked)
    counts, available = Counter(labels[i] for i in picked), Counter(labels)
    short = [counts[label] for label in available if counts[label] < available[label]]  # could have had more
    assert not short or max(counts.values()) - min(short) <= 1


def test_balanced_over_two_labels_takes_two_and_two():
    assert quota_pick(list("aaaabb"), 4, BALANCED) == [0, 1, 4, 5]
    assert quota_pick(list("aaaaab"), 4, BALANCED) == [0, 1, 2, 5]  # one b among the candidates: a fills up


def test_a_large_weight_moves_the_predicted_label_first():
    sims, labels = [0.9, 0.8, 0.7, 0.6, 0.5], list("baaab")  # p̂: a 0.6, b 0.4
    assert select(sims, labels, 3, LabelSelection()) == [0, 1, 2]  # off: the similarity order
    assert select(sims, labels, 3, LabelSelection(weight=10.0, votes=5)) == [1, 2, 3]
    assert select(sims, labels, 3, LabelSelection(weight=10.0, votes=1)) == [0, 4, 1]  # one voter: b
    assert select(sims, labels, 3, LabelSelection(weight=0.05, votes=5)) == [0, 1, 2]  # small: similarity leads


@pytest.mark.parametrize(
    "options, message",
    [
        ({"weight": -1.0}, "bad label weight -1.0"),
        ({"weight": float("nan")}, "bad label weight nan"),
        ({"weight": True}, "bad label weight True"),
        ({"votes": 0}, "bad label votes 0"),
        ({"votes": 2.5}, "bad label votes 2.5"),
        ({"per_label": 0}, "bad per-label quota 0"),
        ({"per_label": "two"}, "bad per-label quota 'two'"),
    ],
)
def test_bad_options_are_one_line_errors(options, message):
    with pytest.raises(UdrError, match=message) as err:
        LabelSelection(**options)
    assert "\n" not in str(err.value)


def test_a_quota_from_the_shell_is_read_as_a_number():
    assert LabelSelection(per_label="3").per_label == 3
    assert not LabelSelection().active and LabelSelection(per_label=BALANCED).active


# ---------------------------------------------------------------- Python


def _similarity_order(retriever, query, task="sst2"):
    """Every pool row for `query`, most similar first (plain retrieval)."""
    size = len(retriever._pools[retriever.resolve_task(task)])
    return retriever.retrieve(query, task=task, k=size)


def test_no_weight_and_no_quota_is_todays_retrieval(real_retriever):
    plain = real_retriever.retrieve_batch(QUERIES, task="sst2", k=5)
    off = real_retriever.retrieve_batch(QUERIES, task="sst2", k=5, label_weight=0.0, label_votes=3, per_label=None)
    assert off == plain


def test_a_quota_takes_the_most_similar_rows_of_each_label_up_to_q(real_retriever):
    full = _similarity_order(real_retriever, QUERY)
    assert len({d.output for d in full}) == 2  # sst2: two labels
    for q, k in ((1, 2), (2, 4), (3, 5)):
        got = real_retriever.retrieve(QUERY, task="sst2", k=k, per_label=q)
        taken: Counter = Counter()
        want = []
        for d in full:
            if len(want) < k and taken[d.output] < q:
                taken[d.output] += 1
                want.append(d)
        assert got == want and max(Counter(d.output for d in got).values()) <= q


def test_balanced_returns_two_of_each_sst2_label(real_retriever):
    for demos in real_retriever.retrieve_batch(QUERIES, task="sst2", k=4, per_label="balanced"):
        assert sorted(Counter(d.output for d in demos).values()) == [2, 2]


def test_a_large_weight_serves_the_label_the_neighbours_vote_for_first(real_retriever):
    full = _similarity_order(real_retriever, QUERY)
    votes = Counter(d.output for d in full[:5])
    (winner, n), (_, m) = votes.most_common(2)
    assert n > m  # no tie among the voters
    got = real_retriever.retrieve(QUERY, task="sst2", k=3, label_weight=100.0, label_votes=5)
    assert got == [d for d in full if d.output == winner][:3]
    assert got != full[:3]  # the label moved candidates: plain retrieval differs here


def test_a_quota_the_candidates_cannot_fill_is_filled_from_the_whole_pool(real_retriever, monkeypatch):
    """Twelve near-identical rows of one intent outrank the rest: the 4k candidates hold no other intent, and
    a per-label quota of 1 still gets the best row of another (a second search, over the whole pool)."""
    from udr.retriever.search import DenseRetriever

    rows = [{"input": f"my card was declined at shop number {i}", "target": "declined"} for i in range(12)]
    rows += [{"input": "what will the weather be tomorrow", "target": "weather"}]
    rows += [{"input": "play some jazz music please", "target": "music"}]
    name = real_retriever.add_pool(rows, instruction="Intent: ", name="intents")
    query = "my card was declined at the shop"
    plain = _similarity_order(real_retriever, query, name)
    assert {d.output for d in plain[:8]} == {"declined"}
    searched, rank = [], DenseRetriever.rank
    monkeypatch.setattr(DenseRetriever, "rank", lambda self, q, k, **kw: searched.append(k) or rank(self, q, k, **kw))
    got = real_retriever.retrieve(query, task=name, k=2, per_label=1, label_votes=2)
    assert searched == [8, len(rows)]  # 4k candidates, then the whole pool
    assert got[0] == plain[0] and got[1] == next(d for d in plain if d.output != "declined")


def test_pools_without_labels_and_impossible_quotas_are_refused_in_one_line(real_retriever):
    cases = [
        ({"task": "break", "label_weight": 1.0}, "break is a generation pool"),
        ({"task": "sst2", "k": 5, "per_label": 2}, "gives at most 4 demonstrations: asked for 5"),
        ({"task": "sst2", "per_label": BALANCED, "diversity": 0.5}, "go separately"),
    ]
    for options, message in cases:
        with pytest.raises(UdrError, match=message) as err:
            real_retriever.retrieve(QUERY, **options)
        assert "\n" not in str(err.value)


def test_a_pool_without_labels_is_refused_before_it_is_embedded(real_retriever, monkeypatch):
    from udr.serving import api

    def embedded(*args, **kwargs):
        raise AssertionError("the pool was embedded")

    monkeypatch.setattr(real_retriever, "_served", {})
    monkeypatch.setattr(api, "serve_pool", embedded)
    with pytest.raises(UdrError, match="break is a generation pool"):
        real_retriever.retrieve(QUERY, task="break", label_weight=1.0)


# ---------------------------------------------------------------- udr retrieve


@pytest.fixture
def cli(served, run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("UDR_CACHE_DIR", str(tmp_path / "cache"))
    return lambda *args: run_cli(list(args), served)


def test_udr_retrieve_takes_the_label_options(cli, served, tmp_path):
    from udr import Retriever

    api = Retriever.load(root=served, cache_dir=tmp_path / "api-cache")
    options = ["-t", "sst2", "-k", "4", "--label-weight", "0.5", "--label-votes", "8", "--per-label", "balanced"]
    code, out, err = cli("retrieve", QUERY, *options, "--json")
    assert code == 0, err
    got = [json.loads(line) for line in out.splitlines()]
    want = api.retrieve(QUERY, task="sst2", k=4, label_weight=0.5, label_votes=8, per_label=BALANCED)
    assert [g["pool_id"] for g in got] == [d.pool_id for d in want]
    assert sorted(Counter(g["output"] for g in got).values()) == [2, 2]
    code, out, err = cli("retrieve", QUERY, *options)
    assert code == 0 and "label-aware order" in out, err

    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"query": q}) + "\n" for q in QUERIES))
    code, out, err = cli("retrieve", "--input", str(queries), "-t", "sst2", "-k", "2", "--per-label", "1")
    assert code == 0, err
    for line in out.splitlines():
        assert len({d["output"] for d in json.loads(line)["demonstrations"]}) == 2

    code, out, err = cli("retrieve", QUERY, "-t", "sst2", "--per-label", "some")
    assert code != 0 and "bad per-label quota 'some'" in err and len(err.strip().splitlines()) == 1
    code, out, err = cli("retrieve", QUERY, "-t", "break", "--per-label", "1")
    assert code != 0 and "break is a generation pool" in err and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------- LangChain and DSPy


def test_langchain_selector_takes_the_label_options(real_retriever):
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    from udr.serving.langchain_selector import UDRExampleSelector

    selector = UDRExampleSelector(real_retriever, task="sst2", k=4, per_label=BALANCED, label_weight=0.5)
    demos = real_retriever.retrieve(QUERY, task="sst2", k=4, per_label=BALANCED, label_weight=0.5)
    chosen = selector.select_examples({"input": QUERY})
    assert chosen == [{"input": d.input, "output": d.output} for d in demos[::-1]]
    assert sorted(Counter(e["output"] for e in chosen).values()) == [2, 2]

    examples = [{"input": d.input, "output": d.output} for d in demos]  # own examples: their outputs are labels
    own = UDRExampleSelector(real_retriever, examples=examples, instruction="Sentiment: ", k=2, per_label=1)
    assert len({e["output"] for e in own.select_examples({"input": QUERY})}) == 2
    for options, message in (({"task": "break", "per_label": 1}, "generation pool"), ({"per_label": 0}, "quota 0")):
        with pytest.raises(UdrError, match=message):
            UDRExampleSelector(real_retriever, **{"task": "sst2", **options})


def test_dspy_module_takes_the_label_options_and_keeps_them(real_retriever, tmp_path):
    dspy = pytest.importorskip("dspy", reason="the dspy extra is not installed")
    from udr.serving.dspy_fewshot import UDRFewShot

    fields = {"input_field": "sentence", "output_field": "sentiment"}
    predict = dspy.Predict("sentence -> sentiment")
    program = UDRFewShot(predict, real_retriever, task="sst2", k=4, per_label=BALANCED, **fields)
    demos = real_retriever.retrieve(QUERY, task="sst2", k=4, per_label=BALANCED)
    got = program.demonstrations(QUERY)
    assert [d.sentence for d in got] == [d.input for d in reversed(demos)]
    assert sorted(Counter(d.sentiment for d in got).values()) == [2, 2]

    path = tmp_path / "program.json"
    program.save(str(path))
    loaded = UDRFewShot(dspy.Predict("sentence -> sentiment"), real_retriever, task="sst2", k=2, **fields)
    loaded.load(str(path))
    assert [d.sentence for d in loaded.demonstrations(QUERY)] == [d.sentence for d in got]

    with pytest.raises(UdrError, match="break is a generation pool"):
        UDRFewShot(dspy.Predict("question -> answer"), real_retriever, task="break", label_weight=1.0)
