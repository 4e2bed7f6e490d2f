"""The DSPy few-shot component against the real library (the `dspy` extra), on a real sentence encoder and
real prepared pools: each call's own demonstrations, from threads and tasks, around Predict and
ChainOfThought, and its state saved and loaded."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter

import pytest

dspy = pytest.importorskip("dspy", reason="the dspy extra is not installed")

from dspy.utils.callback import BaseCallback  # noqa: E402
from dspy.utils.dummies import DummyLM  # noqa: E402

from udr.errors import UdrError  # noqa: E402
from udr.serving.dspy_fewshot import UDRFewShot  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::udr.serving.evidence.UntrainedTaskWarning")

QUERY = "a gripping, funny film"
QUERIES = [QUERY, "a dull, lifeless mess of a movie", "the actors are superb in it", "the director's best work"]
SIGNATURE = "sentence -> sentiment"
FIELDS = {"input_field": "sentence", "output_field": "sentiment"}
MODULES = {"Predict": dspy.Predict, "ChainOfThought": dspy.ChainOfThought}


def _program(retriever, module=dspy.Predict, **kwargs):
    return UDRFewShot(module(SIGNATURE), retriever, **{"task": "sst2", "k": 3, **FIELDS, **kwargs})


def _answers(module) -> dict:
    """DummyLM's answer for each query (its dict mode: the answer whose key the prompt's last message holds)."""
    extra = {"reasoning": "It reads as a verdict."} if module is dspy.ChainOfThought else {}
    return {q: {**extra, "sentiment": f"verdict on {q}"} for q in QUERIES}


def _demos_shown(lm) -> dict[str, list[str]]:
    """{query: the texts of the demonstration turns of its prompt}, for every call the LM saw."""
    shown = {}
    for entry in lm.history:
        messages = entry["messages"]
        query = next(q for q in QUERIES if q in messages[-1]["content"])
        shown[query] = [m["content"] for m in messages[1:-1] if m["role"] == "user"]
    return shown


def _assert_own_demos(lm, retriever, k=3):
    """Each query's prompt carries exactly the demonstrations UDR retrieves for it, most similar last."""
    wanted = {q: [d.input for d in reversed(retriever.retrieve(q, task="sst2", k=k))] for q in QUERIES}
    assert len({tuple(w) for w in wanted.values()}) == len(QUERIES)  # the queries' demonstrations differ
    shown = _demos_shown(lm)
    assert set(shown) == set(QUERIES)
    for query, turns in shown.items():
        assert len(turns) == k and all(want in turn for want, turn in zip(wanted[query], turns)), query


class _AllSetBeforeAnyReads(BaseCallback):
    """Holds each call of a Predict at its start until every thread's call has started: a module that sets
    shared demos before calling its Predict has then set them all before any Predict reads them."""

    def __init__(self, parties: int):
        self.barrier = threading.Barrier(parties, timeout=10)

    def on_module_start(self, call_id, instance, inputs):
        if isinstance(instance, dspy.Predict):
            with contextlib.suppress(threading.BrokenBarrierError):  # fewer threads than parties: nothing to hold
                self.barrier.wait()


@pytest.mark.parametrize("kind", sorted(MODULES))
def test_evaluate_threads_each_get_their_own_demonstrations(real_retriever, kind):
    """`dspy.Evaluate(num_threads=4)` over four queries: each prompt carries the demonstrations retrieved for its
    own query, around Predict and ChainOfThought alike, and the wrapped module keeps no demos of any call."""
    module = MODULES[kind]
    program = _program(real_retriever, module)
    lm = DummyLM(_answers(module))
    devset = [dspy.Example(sentence=q, sentiment=f"verdict on {q}").with_inputs("sentence") for q in QUERIES]
    evaluate = dspy.Evaluate(
        devset=devset,
        metric=lambda example, pred, trace=None: example.sentiment == pred.sentiment,
        num_threads=4,
        display_progress=False,
        max_errors=0,
    )
    with dspy.context(lm=lm, callbacks=[_AllSetBeforeAnyReads(len(QUERIES))]):
        result = evaluate(program)
    assert result.score == 100.0
    _assert_own_demos(lm, real_retriever)
    assert all(p.demos == [] for p in program.predictor.predictors())


def test_concurrent_async_calls_each_get_their_own_demonstrations(real_retriever):
    """`acall` (aforward) from concurrent tasks, around a ChainOfThought: each prompt carries its own
    query's demonstrations."""
    program = _program(real_retriever, dspy.ChainOfThought)
    lm = DummyLM(_answers(dspy.ChainOfThought))

    async def run_all():
        with dspy.context(lm=lm):
            return await asyncio.gather(*(program.acall(sentence=q) for q in QUERIES))

    results = asyncio.run(run_all())
    assert [r.sentiment for r in results] == [f"verdict on {q}" for q in QUERIES]
    _assert_own_demos(lm, real_retriever)


def test_dspy_program_gets_udrs_demonstrations(real_retriever):
    program = _program(real_retriever)
    lm = DummyLM([{"sentiment": "It was great ."}])
    with dspy.context(lm=lm):
        result = program(sentence=QUERY)
    assert result.sentiment == "It was great ."
    demos = real_retriever.retrieve(QUERY, task="sst2", k=3)
    assert [d.sentence for d in program.demonstrations(QUERY)] == [d.input for d in reversed(demos)]
    sent = "\n".join(str(m["content"]) for m in lm.history[-1]["messages"])
    assert all(d.input in sent for d in demos)  # the LM saw every retrieved demonstration

    trainset = [dspy.Example(sentence=d.input, sentiment=d.output) for d in demos]
    own = _program(real_retriever, task=None, trainset=trainset, k=2)
    assert len(own.demonstrations(QUERY)) == 2


def test_json_state_round_trips_udrs_settings_and_the_trainset(real_retriever, tmp_path):
    """`save("program.json")` then `load` on a program built otherwise (the task's pool, k=5) gives back the
    trainset, k and fields: the same demonstrations; the model is named by path and fingerprint, not stored."""
    demos = real_retriever.retrieve(QUERY, task="sst2", k=6)
    trainset = [dspy.Example(sentence=d.input, sentiment=d.output) for d in demos]
    program = _program(real_retriever, task=None, trainset=trainset, k=2, instruction="Sentiment: ")
    path = tmp_path / "program.json"
    program.save(str(path))
    assert path.stat().st_size < 10_000  # settings and rows, no weights nor embeddings
    loaded = _program(real_retriever, k=5)
    loaded.load(str(path))
    assert (loaded.k, loaded.instruction, loaded.records) == (2, "Sentiment: ", program.records)
    assert loaded.demonstrations(QUERY) == program.demonstrations(QUERY)
    assert len(loaded.demonstrations(QUERY)) == 2


def test_json_state_of_another_model_or_program_is_a_one_line_error(real_retriever, served, tmp_path):
    from udr import Retriever

    path = tmp_path / "program.json"
    _program(real_retriever).save(str(path))
    other = Retriever.load(root=served, cache_dir=tmp_path / "cache")  # the served project's tiny model
    with pytest.raises(UdrError, match=r"saved with the model .*: build it with that model"):
        _program(other).load(str(path))
    dspy.Predict(SIGNATURE).save(str(tmp_path / "plain.json"))
    with pytest.raises(UdrError, match=r"the state has no 'udr' entry: it was saved from another program"):
        _program(real_retriever).load(str(tmp_path / "plain.json"))


def test_saved_program_loads_the_retriever_again_from_its_path(real_retriever, tmp_path):
    """`save(DIR, save_program=True)` pickles the program without the retriever; `dspy.load` loads the model
    again from its path and serves the same demonstrations, a ChainOfThought's included."""
    demos = real_retriever.retrieve(QUERY, task="sst2", k=4)
    trainset = [dspy.Example(sentence=d.input, sentiment=d.output) for d in demos]
    program = _program(real_retriever, dspy.ChainOfThought, task=None, trainset=trainset, k=2)
    program.save(str(tmp_path / "saved"), save_program=True)
    assert (tmp_path / "saved" / "program.pkl").stat().st_size < 100_000  # the model is 90 MB
    loaded = dspy.load(str(tmp_path / "saved"), allow_pickle=True)
    assert loaded.retriever is not real_retriever
    assert loaded.retriever.model_dir == real_retriever.model_dir.resolve()
    assert loaded.demonstrations(QUERY) == program.demonstrations(QUERY)
    copied = program.deepcopy()  # DSPy's optimizers copy programs: the retriever is shared, not reloaded
    assert copied.retriever is real_retriever and copied.predictor is not program.predictor


def test_dspy_field_names_the_signature_lacks_are_one_line_errors(real_retriever):
    with pytest.raises(UdrError, match=r"no input field 'question' \(its inputs: sentence\): pass input_field="):
        UDRFewShot(dspy.Predict(SIGNATURE), real_retriever, task="sst2")
    with pytest.raises(UdrError, match=r"no output field 'label' \(its outputs: sentiment\): pass output_field="):
        UDRFewShot(dspy.Predict(SIGNATURE), real_retriever, task="sst2", input_field="sentence", output_field="label")


def test_modules_that_cannot_take_a_calls_demos_are_one_line_errors(real_retriever):
    class TwoSteps(dspy.Module):
        def __init__(self):
            super().__init__()
            self.draft, self.check = dspy.Predict(SIGNATURE), dspy.Predict(SIGNATURE)

    class Fixed(dspy.Module):
        def __init__(self):
            super().__init__()
            self.step = dspy.Predict(SIGNATURE)

        def forward(self, sentence):
            return self.step(sentence=sentence)

    with pytest.raises(UdrError, match=r"TwoSteps has 2 Predict modules \(draft, check\)"):
        UDRFewShot(TwoSteps(), real_retriever, task="sst2", **FIELDS)
    with pytest.raises(UdrError, match=r"Fixed.forward takes no \*\*kwargs .* \(step\): wrap that Predict instead"):
        UDRFewShot(Fixed(), real_retriever, task="sst2", **FIELDS)
    with pytest.raises(UdrError, match="call it without demos="):
        _program(real_retriever)(sentence=QUERY, demos=[])


def _shown_turns(lm) -> dict[str, tuple[list[str], list[str]]]:
    """{query: (its prompt's demonstration inputs' turns, their answers' turns)}, for every call the LM saw."""
    shown = {}
    for entry in lm.history:
        messages = entry["messages"]
        query = next(q for q in QUERIES if q in messages[-1]["content"])
        demos = messages[1:-1]
        shown[query] = tuple([m["content"] for m in demos if m["role"] == role] for role in ("user", "assistant"))
    return shown


def _evaluate(program, lm) -> None:
    """Every query of QUERIES through `program` from four threads (`dspy.Evaluate`), the LM answering each."""
    devset = [dspy.Example(sentence=q, sentiment=f"verdict on {q}").with_inputs("sentence") for q in QUERIES]
    evaluate = dspy.Evaluate(
        devset=devset, metric=lambda *a, **kw: True, num_threads=4, display_progress=False, max_errors=0
    )
    with dspy.context(lm=lm):
        evaluate(program)


def test_the_prompts_demos_obey_the_filter_and_the_per_label_quota(real_retriever, tmp_path):
    """`filter=` over a trainset's other fields: each prompt (four threads) carries the demonstrations of a program
    over the passing examples alone, none of another channel, and the filter survives save and load. `per_label=2`,
    k=4: each prompt carries two demonstrations of each sst2 label, as `Retriever.retrieve(per_label=2)` chooses
    them, where plain top-4 retrieval gives one label three times. Both together, or a filter on a pool without
    metadata, stop the constructor with one line."""
    rows = real_retriever.retrieve(QUERY, task="sst2", k=16)
    trainset = [
        dspy.Example(sentence=d.input, sentiment=d.output, channel=("app", "web")[i % 2], batch=i // 4)
        for i, d in enumerate(rows)
    ]
    web = [e for e in trainset if e.channel == "web"]
    filtered = _program(real_retriever, task=None, trainset=trainset, filter={"channel": "web"})
    plain = _program(real_retriever, task=None, trainset=web)
    lm = DummyLM(_answers(dspy.Predict))
    _evaluate(filtered, lm)
    shown = _shown_turns(lm)
    assert set(shown) == set(QUERIES)
    for query, (inputs, _) in shown.items():
        want = [d.sentence for d in plain.demonstrations(query)]
        assert len(inputs) == 3 and all(text in turn for text, turn in zip(want, inputs)), query
        assert not any(e.sentence in turn for e in trainset if e.channel == "app" for turn in inputs), query
    path = tmp_path / "program.json"
    filtered.save(str(path))
    loaded = _program(real_retriever, task=None, trainset=trainset[:4])
    loaded.load(str(path))
    assert loaded.filter == {"channel": "web"} and loaded.records == filtered.records
    assert loaded.demonstrations(QUERY) == filtered.demonstrations(QUERY)
    records = [{"input": e.sentence, "target": e.sentiment, "channel": e.channel} for e in trainset]
    name = real_retriever.add_pool(records, instruction="Sentiment: ", name="rows")  # an own pool served by name
    served = _program(real_retriever, task=name, filter={"channel": "web"})
    got = [d.sentence for d in served.demonstrations(QUERY)]
    assert got == [d.input for d in reversed(real_retriever.retrieve(QUERY, name, k=3, filter={"channel": "web"}))]
    assert len(got) == 3 and set(got) <= {e.sentence for e in web}

    quota = _program(real_retriever, k=4, per_label=2)
    lm = DummyLM(_answers(dspy.Predict))
    _evaluate(quota, lm)
    labels = {d.output for d in rows}
    assert len(labels) == 2
    over_quota = 0
    for query, (inputs, answers) in _shown_turns(lm).items():
        want = real_retriever.retrieve(query, task="sst2", k=4, per_label=2)
        assert len(inputs) == 4 and all(d.input in turn for d, turn in zip(reversed(want), inputs)), query
        shown_labels = Counter(next(label for label in labels if label in turn) for turn in answers)
        assert shown_labels == dict.fromkeys(labels, 2), query
        plain_labels = Counter(d.output for d in real_retriever.retrieve(query, task="sst2", k=4))
        over_quota += max(plain_labels.values()) > 2
    assert over_quota  # the quota changed what a plain retrieval serves

    for options, message in (
        ({"filter": {"channel": "web"}}, r"unknown column 'channel' in pool 'sst2'"),
        ({"task": None, "trainset": trainset, "filter": {"channel": ["web"]}}, "must be a string, number"),
    ):
        with pytest.raises(UdrError, match=message) as err:
            _program(real_retriever, **options)
        assert "\n" not in str(err.value)
