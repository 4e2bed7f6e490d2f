"""Bad input to the Python API (udr.Retriever, RetrieveRequest, the LangChain selector, the DSPy module): each is a
one-line UdrError naming the argument, before any model, tokenizer, faiss or JSON call meets it; and a call that
fails leaves what was served as it was."""

from __future__ import annotations

import json

import pytest

from udr.errors import UdrError

pytestmark = pytest.mark.filterwarnings("ignore::udr.serving.evidence.UntrainedTaskWarning")

ROWS = [
    {"input": "my card was declined at the till", "target": "declined", "channel": "shop"},
    {"input": "the app refused my payment", "target": "declined", "channel": "app"},
    {"input": "I lost my card on the train", "target": "lost", "channel": "app"},
]


@pytest.fixture
def retriever(served, tmp_path):
    from udr import Retriever

    return Retriever.load(root=served, cache_dir=tmp_path / "cache", batch_size=4)


def _one_line(call, message: str) -> None:
    with pytest.raises(UdrError, match=message) as info:
        call()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"path": 123}, "model: expected a path, got int"),
        ({"path": b"models/final"}, "model: expected a path, got bytes"),
        ({"root": 5}, "root: expected a path, got int"),
        ({"cache_dir": 5}, "cache_dir: expected a path, got int"),
        ({"batch_size": 0}, "batch_size: expected at least 1"),
        ({"batch_size": "8"}, "batch_size: expected a whole number .*got '8'"),
        ({"batch_size": 2.5}, "batch_size: expected a whole number .*got 2.5"),
    ],
)
def test_load_refuses_options_of_the_wrong_type_or_range(served, options, message):
    from udr import Retriever

    options = {"root": served, **options}
    _one_line(lambda: Retriever.load(options.pop("path", None), **options), message)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda r: r.retrieve("a film\ud800", task="sst2", k=2),
            r"query: not valid Unicode .*'\\ud800' at character 7",
        ),
        (
            lambda r: r.add_pool([ROWS[0], {"input": "lost \udc80", "target": "lost"}], instruction="Intent: "),
            r"records:2: malformed row for task own: its input: not valid Unicode",
        ),
        (lambda r: r.add_pool(ROWS, instruction="Intent\ud800: "), "instruction: not valid Unicode"),
    ],
)
def test_a_lone_surrogate_is_refused_before_any_encoder_reads_it(retriever, call, message):
    _one_line(lambda: call(retriever), message)


def test_a_lone_surrogate_escaped_in_a_pool_file_names_its_line(retriever, tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"input": "fine", "target": "a"}\n{"input": "bad \\ud800", "target": "b"}\n')
    _one_line(lambda: retriever.add_pool(path, instruction="I: "), rf"{path}:2: malformed row .*not valid Unicode")


def test_a_query_of_zero_width_characters_only_is_empty(retriever):
    """Zero-width spaces and joiners, or a byte-order mark, are no text to find demonstrations for."""
    _one_line(lambda: retriever.retrieve("\u200b\u200d\ufeff ", task="sst2", k=1), "empty query")
    assert len(retriever.retrieve("a\u200bfilm", task="sst2", k=1)) == 1


@pytest.mark.parametrize(
    ("queries", "message"),
    [
        ({"a film": 1}, "queries: expected a list of strings, got dict"),
        ({"a film", "a mess"}, "queries: expected a list of strings, got set"),
        (None, "queries: expected a list of strings, got NoneType"),
        (5, "queries: expected a list of strings, got int"),
    ],
)
def test_retrieve_batch_takes_a_sequence_of_queries(retriever, queries, message):
    _one_line(lambda: retriever.retrieve_batch(queries, task="sst2", k=1), message)


def test_a_task_is_named_by_a_string(retriever):
    _one_line(lambda: retriever.retrieve("a film", task=["sst2"], k=1), "task: expected a task's name .*got list")


@pytest.mark.parametrize(
    ("query", "demos", "message"),
    [
        (None, "retrieved", "query: expected a string, got NoneType"),
        ("  ", "retrieved", "empty query"),
        ("a film", None, "demonstrations: expected a list of Demonstrations, got NoneType"),
        ("a film", "one", "demonstrations: expected a list of Demonstrations, got Demonstration"),
        ("a film", [{"input": "a", "output": "b"}], r"demonstrations\[0\]: expected a Demonstration"),
        ("a film", "no text", r"demonstrations\[0\]: expected a Demonstration with text input and output"),
    ],
)
def test_prompt_checks_its_query_and_demonstrations(retriever, query, demos, message):
    from udr import Demonstration

    retrieved = retriever.retrieve("a film", task="sst2", k=2)
    demos = {"retrieved": retrieved, "one": retrieved[0], "no text": [Demonstration(0, None, None, 1.0)]}.get(
        demos if isinstance(demos, str) else "", demos
    )
    _one_line(lambda: retriever.prompt(query, demos, task="sst2"), message)


@pytest.mark.parametrize(
    ("records", "options", "message"),
    [
        (None, {}, "records: expected a file path or a list of dicts, got NoneType"),
        (5, {}, "records: expected a file path or a list of dicts, got int"),
        (b"rows.jsonl", {}, "records: expected a file path or a list of dicts, got bytes"),
        (ROWS[0], {}, "records: expected a file path or a list of dicts, got dict"),
        (ROWS, {"instruction": 5}, "instruction: expected a string, got int"),
        (ROWS, {"instruction": b"I: "}, "instruction: expected a string, got bytes"),
        (ROWS, {"name": ""}, "name: expected a non-empty string to call the pool by"),
        (ROWS, {"name": 5}, "name: expected a non-empty string to call the pool by, got 5"),
        (ROWS, {"name": ["x"]}, "name: expected a non-empty string"),
        (ROWS, {"name": "sst2"}, "name 'sst2' is a task's: your pool would replace its pool here"),
    ],
)
def test_add_pool_refuses_bad_records_names_and_instructions(retriever, records, options, message):
    options = {"instruction": "Intent: ", **options}
    _one_line(lambda: retriever.add_pool(records, **options), message)


def test_a_pool_named_after_a_served_task_keeps_that_task_served(retriever):
    """An own pool of intents called "sst2" would be served as sst2's; read as sst2 (task=), it replaces it."""
    with pytest.raises(UdrError):
        retriever.add_pool(ROWS, instruction="Intent: ", name="sst2")
    assert {d.output for d in retriever.retrieve("a film", task="sst2", k=3)} <= {"It was great .", "It was terrible ."}
    reviews = [{"text": "a fine film", "label": "positive"}, {"text": "a dull film", "label": "negative"}]
    assert retriever.add_pool(reviews, task="sst2", name="sst2") == "sst2"
    assert {d.input for d in retriever.retrieve("a film", task="sst2", k=2)} == {"a fine film", "a dull film"}


def test_a_filter_over_a_value_no_json_writes_names_the_row(retriever):
    name = retriever.add_pool([{**ROWS[0], "tags": {"a"}}, ROWS[1]], instruction="Intent: ")
    _one_line(
        lambda: retriever.retrieve("refused", task=name, k=1, filter={"tags": "a"}),
        "filter: pool 'own' row 0's value in column 'tags' is of type set",
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"k": 0}, "k out of range: asked for 0 demonstrations"),
        ({"k": -3}, "k out of range: asked for -3 demonstrations"),
        ({"k": 2.5}, "k: expected a whole number of demonstrations, got 2.5"),
        ({"k": None}, "k: expected a whole number of demonstrations, got None"),
        ({"task": 5}, "--task: expected a name"),
        ({"model": 5}, "--model: expected a path, got int"),
        ({"pool": 5, "instruction": "I: "}, "--pool: expected a path, got int"),
        ({"pool": "rows.csv", "instruction": ""}, "instruction .* is blank"),
        ({"pool": "rows.csv", "instruction": 5}, "instruction: expected a string, got int"),
        ({"pool": "rows.csv", "input_column": 5}, "--input-column: expected a name"),
        ({"pool": "rows.csv", "where": (5,)}, "--where: expected COLUMN=VALUE clauses"),
        ({"pool": "rows.csv", "where": "lang=en"}, "--where: expected COLUMN=VALUE clauses"),
        ({"search": "fuzzy"}, "bad search 'fuzzy'"),
        ({"device": "gpu"}, "bad device 'gpu'"),
        ({"query": "a film\ud800"}, "query: not valid Unicode"),
    ],
)
def test_a_request_refuses_bad_options_before_the_model_loads(options, message):
    from udr.serving.request import RetrieveRequest

    _one_line(lambda: RetrieveRequest(**{"query": "a film", **options}), message)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"k": 0}, "k out of range: asked for 0"),
        ({"k": 31}, "k out of range: asked for 31 .* pool of 30"),
        ({"k": 3, "per_label": 1}, "per-label quota 1 over the 2 labels of pool sst2 gives at most 2"),
    ],
)
def test_an_empty_batch_checks_k_and_the_quota_against_the_pool(retriever, options, message):
    """What UDRFewShot and the LangChain selector build on: their k is refused when they are made."""
    _one_line(lambda: retriever.retrieve_batch([], task="sst2", **options), message)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda r, S: S(None, task="sst2"), "UDRExampleSelector needs a udr.Retriever .*got a NoneType"),
        (lambda r, S: S("models/final", task="sst2"), "UDRExampleSelector needs a udr.Retriever .*got a str"),
        (lambda r, S: S(r, task="sst2", k=None), "k: expected a whole number of demonstrations, got None"),
        (lambda r, S: S(r, task="sst2", k=0), "k out of range: asked for 0 examples"),
        (lambda r, S: S(r, task="sst2", k=31), "k out of range: asked for 31 .* pool of 30"),
        (lambda r, S: S(r, task="sst2", input_key=""), "input_key: expected a prompt variable's name"),
        (lambda r, S: S(r, task="sst2", input_key="x", output_key="x"), "input_key and output_key are both 'x'"),
        (lambda r, S: S(r, task="sst2").add_example(None), "example: expected a dict"),
        (lambda r, S: S(r, examples=["a film"], instruction="I: "), "example: expected a dict"),
        (lambda r, S: S(r, task="sst2").select_examples("a film"), "input_variables: expected a dict with 'input'"),
    ],
)
def test_the_langchain_selector_refuses_bad_arguments_in_one_line(retriever, make, message):
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    from udr.serving.langchain_selector import UDRExampleSelector

    _one_line(lambda: make(retriever, UDRExampleSelector), message)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda r, F, p: F(p, None, task="sst2"), "UDRFewShot needs a udr.Retriever or a model's path"),
        (lambda r, F, p: F(p, r, task="sst2", k=0), "k out of range: asked for 0"),
        (lambda r, F, p: F(p, r, task="sst2", k=31), "k out of range: asked for 31 .* pool of 30"),
        (lambda r, F, p: F(p, r, trainset=5), "trainset: expected a list of dspy.Examples, got int"),
        (lambda r, F, p: F(p, r, trainset=[{"question": "q", "answer": "a"}]), "trainset example 0: expected a dspy"),
    ],
)
def test_the_dspy_module_refuses_bad_arguments_when_it_is_made(retriever, make, message):
    dspy = pytest.importorskip("dspy", reason="the dspy extra is not installed")
    from udr.serving.dspy_fewshot import UDRFewShot

    _one_line(lambda: make(retriever, UDRFewShot, dspy.Predict("question -> answer")), message)


@pytest.mark.parametrize(("setting", "value"), [("k", 31), ("task", "nosuch")])
def test_a_dspy_state_that_fails_to_load_leaves_the_module_as_it_was(retriever, tmp_path, setting, value):
    dspy = pytest.importorskip("dspy", reason="the dspy extra is not installed")
    from udr.serving.dspy_fewshot import UDRFewShot

    program = UDRFewShot(dspy.Predict("question -> answer"), retriever, task="sst2", k=3)
    before = [d.question for d in program.demonstrations("a film")]
    path = tmp_path / "state.json"
    program.save(str(path))
    state = json.loads(path.read_text())
    state["udr"][setting] = value
    path.write_text(json.dumps(state))
    with pytest.raises(UdrError):
        program.load(str(path))
    assert (program.task, program.k) == ("sst2", 3)
    assert [d.question for d in program.demonstrations("a film")] == before


def test_a_dspy_trainset_state_that_fails_to_load_serves_the_old_trainset_again(retriever, tmp_path):
    """The failed state's trainset was added under the module's pool name: the module's own is served again."""
    dspy = pytest.importorskip("dspy", reason="the dspy extra is not installed")
    from udr.serving.dspy_fewshot import UDRFewShot

    trainset = [dspy.Example(question=r["input"], answer=r["target"]).with_inputs("question") for r in ROWS]
    program = UDRFewShot(dspy.Predict("question -> answer"), retriever, trainset=trainset, k=2)
    path = tmp_path / "state.json"
    program.save(str(path))
    state = json.loads(path.read_text())
    state["udr"]["trainset"] = [{"input": "something else", "target": "x"}]  # one row: k=2 does not fit
    path.write_text(json.dumps(state))
    with pytest.raises(UdrError, match="k out of range"):
        program.load(str(path))
    assert {d.question for d in program.demonstrations("my card")} <= {r["input"] for r in ROWS}


def test_a_retrieval_reads_a_pools_shape_with_the_pool(retriever):
    """An own pool in the generation shape, whose outputs are its labels, is searched by label in that shape
    whatever the name's other records say: the shape is served with the pool, so a retrieval that meets a pool
    another thread is replacing reads one pool with its own shape."""
    name = retriever.add_pool(ROWS, instruction="Reason of the message: ", name="cards")
    retriever._read_as[name] = "sst2"  # the record of a pool being swapped in, read before its served pool
    found = retriever.retrieve_batch(["my card was refused"], task=name, k=2, per_label=1)
    assert sorted(d.output for d in found[0]) == ["declined", "lost"]
