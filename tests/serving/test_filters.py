"""udr.serving.filters: metadata filters applied before the ranking, from Python (the CLI's and LangChain's are
in tests/cli/test_serve.py and tests/serving/test_integrations.py)."""

from __future__ import annotations

import warnings

import pytest

from udr.errors import UdrError
from udr.util.notice import UdrNotice

INSTRUCTION = "Classify the request: "
QUERIES = ["my card was charged twice", "where is my new card", "I want to raise my credit limit"]
TOPICS = ["charge", "delivery", "limit", "fraud", "refund"]


def rows() -> list[dict]:
    """Own records with two metadata columns (lang, year: a number, as JSON lines give it)."""
    return [
        {
            "input": f"request {i} about a card {TOPICS[i % 5]} issue, case {i // 5}",
            "target": TOPICS[i % 5],
            "lang": "en" if i % 3 else "de",
            "year": 2020 + i % 4,
        }
        for i in range(60)
    ]


@pytest.fixture
def retriever(served, tmp_path):
    from udr import Retriever

    return Retriever.load(root=served, cache_dir=tmp_path / "cache", encoder="udr")


def _ranked(demos):
    return [(d.pool_id, d.input, round(d.similarity, 6)) for d in demos]


@pytest.mark.parametrize("diversity", [0.0, 0.5])
def test_a_filtered_retrieval_is_the_retrieval_over_the_filtered_pool(retriever, diversity):
    """The filter restricts the rows before the ranking: the same ids (as the whole pool numbers them) and
    order as retrieving from a pool of the passing rows only; a filter after the top k would return fewer."""
    records = rows()
    retriever.add_pool(records, instruction=INSTRUCTION, name="all")
    kept = [i for i, r in enumerate(records) if r["lang"] == "de" and r["year"] == 2021]
    retriever.add_pool([records[i] for i in kept], instruction=INSTRUCTION, name="some")
    for query in QUERIES:
        got = retriever.retrieve(query, "all", k=4, diversity=diversity, filter={"lang": "de", "year": 2021})
        want = retriever.retrieve(query, "some", k=4, diversity=diversity)
        assert _ranked(got) == [(kept[pid], x, s) for pid, x, s in _ranked(want)]
        assert len(got) == 4 and all(records[d.pool_id]["lang"] == "de" for d in got)
    batch = retriever.retrieve_batch(QUERIES, "all", k=4, diversity=diversity, filter={"lang": "de", "year": 2021})
    assert [_ranked(b) for b in batch] == [
        _ranked(retriever.retrieve(q, "all", k=4, diversity=diversity, filter={"lang": "de", "year": "2021"}))
        for q in QUERIES
    ]  # values compare as text


def test_a_filter_leaving_fewer_than_k_rows_returns_them_and_says_so(retriever):
    records = rows()
    retriever.add_pool(records, instruction=INSTRUCTION)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        demos = retriever.retrieve(QUERIES[0], k=8, filter={"lang": "de", "year": 2020})
    assert sorted(d.pool_id for d in demos) == [0, 12, 24, 36, 48]
    notes = [str(w.message) for w in caught if issubclass(w.category, UdrNotice) and "filter" in str(w.message)]
    assert notes == [
        "filter lang=de AND year=2020 leaves 5 of 60 rows of pool 'own': returning 5 demonstrations, not 8"
    ]
    with pytest.warns(UdrNotice, match="leaves 0 of 60 rows"):
        assert retriever.retrieve(QUERIES[0], k=8, filter={"lang": "fr"}) == []


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ({"langue": "en"}, r"^filter: unknown column 'langue' in pool 'own' \(its metadata columns: lang, year\)$"),
        ({"input": "x"}, r"unknown column 'input'"),  # a column the task reads is no metadata
        (["lang"], "expected a mapping"),
        ({"lang": ["en"]}, "value of 'lang' must be a string, number, boolean or None"),
    ],
)
def test_a_bad_filter_is_a_one_line_error(retriever, where, message):
    retriever.add_pool(rows(), instruction=INSTRUCTION)
    with pytest.raises(UdrError, match=message) as err:
        retriever.retrieve(QUERIES[0], k=4, filter=where)
    assert len(str(err.value).splitlines()) == 1


def test_a_task_pool_has_no_metadata_columns(retriever):
    with pytest.raises(UdrError, match="unknown column 'lang' in pool 'sst2' .*none: filters read an own pool"):
        retriever.retrieve("a fine film", "sst2", k=2, filter={"lang": "en"})


def test_metadata_are_the_columns_the_task_does_not_read(tmp_path):
    """A CSV's extra columns are metadata, the input and target columns (renamed or not) are not."""
    from udr.serving.pools import Columns, file_pool, own_task

    path = tmp_path / "cards.csv"
    path.write_text("text,intent,lang\nlost my card,lost_card,en\nkarte weg,lost_card,de\n")
    pool = file_pool(path, own_task(INSTRUCTION), Columns("text", "intent"))
    assert pool.metadata == ({"lang": "en"}, {"lang": "de"}) and pool.metadata_columns == ["lang"]
    path.write_text("review,label,lang\ngreat film,positive,en\nschlecht,negative,de\n")
    sst2 = file_pool(path, own_task(None, like="sst2"), Columns("review", None))  # read into sst2's "text"
    assert sst2.metadata == ({"lang": "en"}, {"lang": "de"})


def test_parse_where():
    from udr.serving.filters import parse_where

    assert parse_where(["lang=en", "year=2020", "note=a=b"]) == {"lang": "en", "year": "2020", "note": "a=b"}
    for bad, message in (("lang", "expected COLUMN=VALUE"), ("=en", "expected COLUMN=VALUE")):
        with pytest.raises(UdrError, match=message):
            parse_where([bad])
    with pytest.raises(UdrError, match="two values for column 'lang'"):
        parse_where(["lang=en", "lang=de"])
    # A mapping's items would be its keys, each read as a clause: refused like one string.
    for not_clauses in ({"lang=en": 1}, "lang=en", b"lang=en", 3):
        with pytest.raises(UdrError, match="expected COLUMN=VALUE clauses"):
            parse_where(not_clauses)
