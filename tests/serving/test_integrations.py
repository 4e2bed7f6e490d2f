"""The LangChain example selector against the real library (the `langchain` extra), on a real sentence
encoder and real prepared pools (the DSPy component: test_dspy_fewshot.py)."""

from __future__ import annotations

import pytest

QUERY = "a gripping, funny film"


def _few_shot(selector):
    """The documented recipe: the selector's FewShotPromptTemplate."""
    from langchain_core.prompts import FewShotPromptTemplate

    prompt = selector.prompt_template()
    assert isinstance(prompt, FewShotPromptTemplate)
    return prompt


def test_langchain_selector_builds_udrs_own_prompt(real_retriever):
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    from udr.serving.langchain_selector import UDRExampleSelector

    selector = UDRExampleSelector(real_retriever, task="sst2", k=3)
    chosen = selector.select_examples({"input": QUERY})
    demos = real_retriever.retrieve(QUERY, task="sst2", k=3)
    assert chosen == [{"input": d.input, "output": d.output} for d in reversed(demos)]  # most similar last
    prompt = _few_shot(selector)
    assert prompt.format(input=QUERY) == real_retriever.prompt(QUERY, demos, task="sst2")


@pytest.mark.parametrize(
    "query", ["a gripping,\nfunny\tfilm", "Who invented the game Scrabble ?\tAnswer: Human .\nwhat"]
)
def test_langchain_prompt_writes_the_query_as_udr_retrieve_does(real_retriever, query):
    """A query with line breaks or tabs gives the prompt `udr retrieve --prompt` gives (one line), not
    extra lines that read as demonstrations."""
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    from udr.serving.langchain_selector import UDRExampleSelector

    selector = UDRExampleSelector(real_retriever, task="sst2", k=3)
    demos = real_retriever.retrieve(query, task="sst2", k=3)
    text = _few_shot(selector).format(input=query)
    assert text == real_retriever.prompt(query, demos, task="sst2") and len(text.splitlines()) == 4


@pytest.mark.parametrize("query", ["def f(x):\n    return x + 1", "a gripping,\nfunny\tfilm"])
def test_langchain_retrieves_for_the_query_udr_retrieve_retrieves_for(real_retriever, query, monkeypatch):
    """The selector retrieves for the query as given (multi-line included), as `udr retrieve --prompt`
    does; only the prompt writes it cleaned."""
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    from udr.serving.langchain_selector import UDRExampleSelector

    asked = []
    real = real_retriever.retrieve

    def spy(q, *args, **kwargs):
        asked.append(q)
        return real(q, *args, **kwargs)

    monkeypatch.setattr(real_retriever, "retrieve", spy)
    text = _few_shot(UDRExampleSelector(real_retriever, task="sst2", k=3)).format(input=query)
    assert asked == [query]
    assert text == real_retriever.prompt(query, real(query, task="sst2", k=3), task="sst2")


def test_langchain_selector_serves_added_examples(real_retriever):
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    from udr.errors import UdrError
    from udr.serving.langchain_selector import UDRExampleSelector

    own = [
        {"question": "How many rivers are in Spain?", "answer": "SELECT count(*) FROM river WHERE country = 'Spain'"},
        {"question": "List all singers.", "answer": "SELECT name FROM singer"},
        {"question": "How many lakes are in Canada?", "answer": "SELECT count(*) FROM lake WHERE country = 'Canada'"},
    ]
    selector = UDRExampleSelector(
        real_retriever,
        instruction="Translate to SQL: ",
        examples=own[:2],
        k=2,
        input_key="question",
        output_key="answer",
    )
    selector.add_example(own[2])
    chosen = selector.select_examples({"question": "How many lakes are in Finland?"})
    assert len(chosen) == 2 and chosen[-1] == own[2]  # the nearest last
    with pytest.raises(UdrError, match="non-empty string 'answer'"):
        selector.add_example({"question": "q"})


def test_langchain_prompt_keeps_braces_of_examples_and_query(real_retriever):
    """Code and JSON examples (the python_code task's pool has them) and a query with braces come out of a
    FewShotPromptTemplate unchanged, not as a KeyError."""
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    from udr.serving.langchain_selector import UDRExampleSelector

    own = [
        {"input": "a dict of sizes", "output": "sizes = {'size': 3, 'n': {}}"},
        {"input": "format a name", "output": "f'{name}!'"},
    ]
    selector = UDRExampleSelector(real_retriever, instruction="Write Python: ", examples=own, k=2)
    prompt = _few_shot(selector)
    query = "a set {1, 2} of sizes"
    text = prompt.format(input=query)
    assert "sizes = {'size': 3, 'n': {}}\n" in text and "f'{name}!'\n" in text and text.endswith(query + "\t")
    chosen = selector.select_examples({"input": query})
    expected = "".join(f"{e['input']}\t{e['output']}\n" for e in chosen) + f"{query}\t"
    assert text == expected


CARDS = [
    ("my card was declined at the shop", "declined"),
    ("the card payment did not go through", "declined"),
    ("I lost my card yesterday", "lost"),
    ("someone stole my wallet and card", "lost"),
    ("how do I raise my credit limit", "limit"),
    ("can I get a higher limit on my card", "limit"),
]


@pytest.fixture
def cards_csv(tmp_path):
    """An own pool as a user has one: a CSV whose columns are not udr's (text, intent), and a note column."""
    import csv

    path = tmp_path / "cards.csv"
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows([("text", "intent", "note"), *((t, i, "app") for t, i in CARDS)])
    return path


@pytest.mark.filterwarnings("ignore::udr.serving.evidence.UntrainedTaskWarning")
def test_langchain_selector_over_an_own_pool_file(real_retriever, cards_csv):
    """`pool=` a CSV with its instruction and columns: the selector chooses what `udr retrieve --pool` retrieves
    from it, and its prompt_template gives that pool's `udr retrieve --prompt` prompt; add_example adds a row."""
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    from udr.serving.langchain_selector import UDRExampleSelector

    columns = {"instruction": "Intent of the message: ", "input_column": "text", "target_column": "intent"}
    selector = UDRExampleSelector(real_retriever, pool=cards_csv, k=3, **columns)
    query = "my card got declined"
    name = real_retriever.add_pool(cards_csv, **columns)
    demos = real_retriever.retrieve(query, task=name, k=3)
    assert selector.select_examples({"input": query}) == [{"input": d.input, "output": d.output} for d in demos[::-1]]
    assert _few_shot(selector).format(input=query) == real_retriever.prompt(query, demos, task=name)
    added = {"input": "my card got declined at the cafe", "output": "declined"}
    selector.add_example(added)
    selector.k = len(CARDS) + 1
    chosen = selector.select_examples({"input": query})
    assert sorted(e["input"] for e in chosen) == sorted([t for t, _ in CARDS] + [added["input"]])


@pytest.mark.filterwarnings("ignore::udr.serving.evidence.UntrainedTaskWarning")
def test_langchain_selector_serves_a_pool_the_retriever_was_given(real_retriever, cards_csv, served, tmp_path):
    """`task=` the name `add_pool` (or `from_pool`: "own") gave an own pool: the selector retrieves from it and
    its prompt_template renders with it, not "unknown task 'own'"."""
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    from udr.serving.langchain_selector import UDRExampleSelector

    name = real_retriever.add_pool(
        cards_csv, instruction="Intent of the message: ", input_column="text", target_column="intent"
    )
    assert name == "own"
    selector = UDRExampleSelector(real_retriever, task=name, k=2)
    query = "I can't find my card"
    demos = real_retriever.retrieve(query, task=name, k=2)
    assert selector.select_examples({"input": query}) == [{"input": d.input, "output": d.output} for d in demos[::-1]]
    assert _few_shot(selector).format(input=query) == real_retriever.prompt(query, demos, task=name)


def test_langchain_pool_errors_are_one_line(real_retriever, cards_csv):
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    from udr.errors import UdrError
    from udr.serving.langchain_selector import UDRExampleSelector

    with pytest.raises(UdrError, match=r"missing field 'input' \(its columns: text, intent, note\)"):
        UDRExampleSelector(real_retriever, pool=cards_csv, instruction="Intent: ")
    with pytest.raises(UdrError, match="pool file not found: absent.csv"):  # before the instruction it lacks
        UDRExampleSelector(real_retriever, pool="absent.csv")
    with pytest.raises(UdrError, match="or the instruction of your pool= or examples="):
        UDRExampleSelector(real_retriever, pool=cards_csv, input_column="text", target_column="intent")
    with pytest.raises(UdrError, match="name the columns of pool=: give the pool too"):
        UDRExampleSelector(real_retriever, task="sst2", input_column="text")


@pytest.mark.filterwarnings("ignore::udr.serving.evidence.UntrainedTaskWarning")
def test_langchain_filter_selects_among_the_rows_that_pass(real_retriever, tmp_path):
    """`filter=` selects what an unfiltered selector over the passing rows selects (same rows, same order), and
    what `Retriever.retrieve(filter=)` retrieves; added examples' other keys are metadata; a filter leaving
    fewer than k rows returns them; a bad filter is one line."""
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    import csv

    from udr.errors import UdrError
    from udr.serving.langchain_selector import UDRExampleSelector
    from udr.util.notice import UdrNotice

    rows = [(text, intent, ("phone", "web")[i % 2], i // 3) for i, (text, intent) in enumerate(CARDS * 3)]
    rows = [(f"{text} ({n})", intent, channel, n) for text, intent, channel, n in rows]
    kept = [r for r in rows if r[2] == "web"]
    for name, chosen in (("all.csv", rows), ("kept.csv", kept)):
        with (tmp_path / name).open("w", newline="") as fh:
            csv.writer(fh).writerows([("text", "intent", "channel", "batch"), *chosen])
    columns = {"instruction": "Intent of the message: ", "input_column": "text", "target_column": "intent"}
    filtered = UDRExampleSelector(real_retriever, pool=tmp_path / "all.csv", k=4, filter={"channel": "web"}, **columns)
    plain = UDRExampleSelector(real_retriever, pool=tmp_path / "kept.csv", k=4, **columns)
    for query in ("my card got declined", "I need a bigger limit"):
        chosen = filtered.select_examples({"input": query})
        assert chosen == plain.select_examples({"input": query})
        assert {e["input"] for e in chosen} <= {r[0] for r in kept} and len(chosen) == 4
        name = real_retriever.add_pool(tmp_path / "all.csv", **columns, name="all")
        demos = real_retriever.retrieve(query, task=name, k=4, filter={"channel": "web"})
        assert chosen == [{"input": d.input, "output": d.output} for d in demos[::-1]]
    filtered.add_example({"input": "my card was declined online", "output": "declined", "channel": "app"})
    filtered.filter = {"channel": "app"}
    with pytest.warns(UdrNotice, match="leaves 1 of 19 rows"):
        assert filtered.select_examples({"input": "declined"}) == [
            {"input": "my card was declined online", "output": "declined"}
        ]
    with pytest.raises(UdrError, match="value of 'channel' must be a string, number, boolean or None"):
        UDRExampleSelector(real_retriever, pool=tmp_path / "all.csv", filter={"channel": {"web"}}, **columns)
    with pytest.raises(UdrError, match=r"unknown column 'country' in pool .*\(its metadata columns: channel, batch\)"):
        UDRExampleSelector(
            real_retriever, pool=tmp_path / "all.csv", filter={"country": "de"}, **columns
        ).select_examples({"input": "declined"})


@pytest.mark.filterwarnings("ignore::udr.serving.evidence.UntrainedTaskWarning")
def test_langchain_per_label_quota_over_an_own_pool_and_added_examples_embed_only_themselves(
    served, real_model, cards_csv, tmp_path, embedded_rows
):
    """`per_label=1` over `pool=` a CSV (its target column the labels): one example of each intent, as
    `Retriever.retrieve(per_label=1)` chooses them, where the plain top 3 repeats one; an added example embeds only
    itself; a filter with a quota selects within the passing rows."""
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    from collections import Counter

    from udr import Retriever
    from udr.serving.langchain_selector import UDRExampleSelector

    retriever = Retriever.load(real_model, root=served, cache_dir=tmp_path / "cache", encoder="udr")
    columns = {"instruction": "Intent of the message: ", "input_column": "text", "target_column": "intent"}
    quota = UDRExampleSelector(retriever, pool=cards_csv, k=3, per_label=1, **columns)
    name = retriever.add_pool(cards_csv, **columns)
    query = "my card got declined"
    chosen = quota.select_examples({"input": query})
    want = retriever.retrieve(query, task=name, k=3, per_label=1)
    assert chosen == [{"input": d.input, "output": d.output} for d in want[::-1]]
    assert sorted(e["output"] for e in chosen) == ["declined", "limit", "lost"]
    assert max(Counter(d.output for d in retriever.retrieve(query, task=name, k=3)).values()) > 1

    embedded_rows.clear()
    quota.add_example({"input": "my card was declined online", "output": "declined"})
    chosen = quota.select_examples({"input": query})
    assert embedded_rows == [1] and sorted(e["output"] for e in chosen) == ["declined", "limit", "lost"]

    both = UDRExampleSelector(retriever, pool=cards_csv, k=2, per_label=1, filter={"note": "app"}, **columns)
    within = retriever.retrieve(query, task=name, k=2, per_label=1, filter={"note": "app"})
    assert both.select_examples({"input": query}) == [{"input": d.input, "output": d.output} for d in within[::-1]]
    assert len({d.output for d in within}) == 2
