"""udr.serving.evidence: serving an own pool, or a task the model was not trained on, says so once per
retriever and pool name (an UntrainedTaskWarning; `udr retrieve`: one `udr: note:` line on stderr), with
the model's trained tasks from its record and what the project measured on unseen tasks from its summary;
the results are those of a retriever that says nothing."""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import warnings

import pytest

from udr.serving.evidence import UntrainedTaskWarning, model_training

QUERY = "a gripping, funny film"
ROWS = [
    {"input": f"name[Cafe {i}], food[{f}]", "target": f"Cafe {i} serves {f} food."}
    for i, f in enumerate(["Thai", "French", "Indian", "Italian"])
]
INSTRUCTION = "Describe the table in natural language. Table: "
# Two rounds: the model was trained on sst2 in round 1, on break in round 0.
RECORD = {
    "method": "udr",
    "round": 1,
    "tasks": {"sst2": 6},
    "init": {"method": "udr", "round": 0, "tasks": {"break": 5}, "init": {"base": "tiny"}},
}
# What `udr report` writes: the trained-on tasks' comparison at the top (not what the note quotes), the
# unseen tasks' under "unseen".
SUMMARY = {
    "averages": {"udr": {"all": 99.9}, "sbert": {"all": 11.1}},
    "udr_minus": {"sbert": {"tasks": {}, "all": {"difference": 88.8, "low": 80.0, "high": 95.0, "resolved": True}}},
    "unseen": {
        "tasks": {
            "udr": {
                "cr": {"metric": "accuracy", "score": 50.0, "graded": 50.0, "n": 40},
                "subj": {"metric": "accuracy", "score": 60.7, "graded": 60.7, "n": 80},
            },
            "sbert": {
                "cr": {"metric": "accuracy", "score": 55.0, "graded": 55.0, "n": 40},
                "subj": {"metric": "accuracy", "score": 62.9, "graded": 62.9, "n": 80},
            },
        },
        "averages": {"udr": {"classification": 57.14, "all": 57.14}, "sbert": {"all": 60.24}, "bm25": {"all": 50.2}},
        "udr_minus": {
            "bm25": {"tasks": {}, "all": {"difference": 6.94, "low": 1.0, "high": 12.0, "resolved": True}},
            "sbert": {"tasks": {}, "all": {"difference": -3.11, "low": -7.04, "high": 0.83, "resolved": False}},
        },
    },
}
MEASURED = "UDR 57.1 vs SBERT 60.2 (difference -3.1 [-7.0, +0.8], n = 120, metrics/summary.json)"


@pytest.fixture
def project(served, tmp_path):
    """A private copy of the served project whose final model has a record (trained on sst2 and break) and
    whose summary has unseen tasks."""
    root = tmp_path / "project"
    shutil.copytree(served, root)
    (root / "models/final/udr_record.json").write_text(json.dumps(RECORD))
    (root / "metrics").mkdir(exist_ok=True)
    (root / "metrics/summary.json").write_text(json.dumps(SUMMARY))
    return root


@contextlib.contextmanager
def notes():
    """The messages of the UntrainedTaskWarnings raised inside, under Python's default filters (which show a
    warning of one text and line once per module)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("default")
        said: list[str] = []
        yield said
        said += [str(w.message) for w in caught if issubclass(w.category, UntrainedTaskWarning)]


def _load(root, tmp_path, model=None):
    from udr import Retriever

    return Retriever.load(model, root=root, cache_dir=tmp_path / "cache", batch_size=4)


def _results(demos):
    return [(d.pool_id, d.input, d.output, round(d.similarity, 4)) for d in demos]


def measured_model(root, fingerprint: str = "0123456789abcdef") -> None:
    """The project's UDR results on its unseen tasks (cr, subj) say they measured the model `fingerprint`
    (by default another model than the served one)."""
    (root / "metrics/udr").mkdir(parents=True, exist_ok=True)
    for task in ("cr", "subj"):
        (root / f"metrics/udr/{task}.json").write_text(json.dumps({"model": fingerprint}))


def test_an_own_pool_is_noted_once_per_name_with_the_trained_tasks_and_the_projects_numbers(
    project, served, tmp_path, monkeypatch
):
    monkeypatch.chdir(project)
    with notes() as said:
        retriever = _load(project, tmp_path)
        name = retriever.add_pool(ROWS, instruction=INSTRUCTION)
        first = retriever.retrieve("name[Cafe 9], food[Thai]", k=3)
        again = retriever.retrieve_batch(["name[Cafe 8], food[French]", "name[Cafe 7]"], k=2)
    assert len(said) == 1, said
    note = said[0]
    assert "\n" not in note and len(note) < 600
    assert note.startswith("this model was trained on sst2, break; 'own' is not one of them.")
    assert f"On tasks never trained on (cr, subj), the project measured {MEASURED}." in note
    assert "99.9" not in note and "88.8" not in note  # the trained-on tasks' numbers are not the unseen ones
    assert "udr init-task" in note and "udr evaluate -m sbert" in note and "udr exp compare udr sbert" in note
    # The note is information only: the results are those of a retriever whose model says nothing.
    with notes() as quiet:
        plain = _load(served, tmp_path)
        plain.add_pool(ROWS, instruction=INSTRUCTION, name=name)
        assert _results(plain.retrieve("name[Cafe 9], food[Thai]", k=3)) == _results(first)
        assert [_results(d) for d in plain.retrieve_batch(["name[Cafe 8], food[French]", "name[Cafe 7]"], k=2)] == [
            _results(d) for d in again
        ]
    assert len(quiet) == 1 and "unknown" in quiet[0]
    # Another name: its own note; another retriever: its own notes, once each.
    with notes() as said:
        retriever.add_pool(ROWS[:2], instruction=INSTRUCTION, name="menus")
        retriever.retrieve("x", task="menus", k=1)
        retriever.retrieve("x", task="own", k=1)
        for _ in range(2):
            other = _load(project, tmp_path)
            other.add_pool(ROWS, instruction=INSTRUCTION)
            other.retrieve("y", k=1)
            other.retrieve("z", k=1)
    assert len(said) == 3 and "'menus' is not one of them" in said[0]
    assert all("'own' is not one of them" in s for s in said[1:])


def test_a_trained_task_gets_no_note_and_an_untrained_one_does(project, served, tmp_path):
    (project / "models/final/udr_record.json").write_text(json.dumps({**RECORD, "init": {"base": "tiny"}}))
    with notes() as said:
        retriever = _load(project, tmp_path)
        trained = retriever.retrieve(QUERY, task="sst2", k=3)
        assert said == []
        untrained = retriever.retrieve("what is the capital of france", task="break", k=3)
        retriever.retrieve("how many rivers", task="break", k=3)
        retriever.retrieve(QUERY, task="sst2", k=3)
        # An own pool in a trained task's shape is that task.
        reviews = [{"text": "a delight", "label": "positive"}, {"text": "a slog", "label": "negative"}]
        retriever.add_pool(reviews, task="sst2")
        retriever.retrieve(QUERY, task="sst2", k=1)
    assert len(said) == 1 and said[0].startswith("this model was trained on sst2; 'break' is not one of them.")
    plain = _load(served, tmp_path)
    assert _results(plain.retrieve(QUERY, task="sst2", k=3)) == _results(trained)
    assert _results(plain.retrieve("what is the capital of france", task="break", k=3)) == _results(untrained)


def test_the_cli_prints_one_note_line_and_keeps_stdout(project, served, run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("UDR_CACHE_DIR", str(tmp_path / "cache"))
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    args = ["retrieve", "name[Cafe 9], food[Thai]", "--pool", str(pool), "--instruction", INSTRUCTION, "-k", "3"]
    code, out, err = run_cli([*args, "--json"], project)
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("udr: note: this model was trained on sst2, break; 'own' is")
    assert MEASURED in lines[0]
    assert [json.loads(line)["rank"] for line in out.splitlines()] == [1, 2, 3]
    code, plain, err = run_cli([*args, "--json"], served)  # a model without a record: the same results
    assert code == 0 and plain == out
    assert [line for line in err.splitlines() if line.strip()][0].startswith(
        "udr: note: this model's training tasks are unknown"
    )
    # A batch says it once too, before its lines; a trained task says nothing.
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"query": "name[Cafe 1]"}\n{"query": "name[Cafe 2]"}\n')
    batch = ["retrieve", "--input", str(queries), "--pool", str(pool), "--instruction", "I: ", "-k", "2"]
    code, out, err = run_cli(batch, project)
    assert code == 0 and len(out.splitlines()) == 2
    assert err.count("udr: note: ") == 1
    code, out, err = run_cli(["retrieve", QUERY, "-t", "sst2", "-k", "2", "--json"], project)
    assert code == 0 and "udr: note" not in err and len(out.splitlines()) == 2


def test_without_a_project_summary_the_note_names_the_trained_tasks_and_the_check(project, tmp_path):
    (project / "metrics/summary.json").unlink()
    with notes() as said:
        (tmp_path / "elsewhere").mkdir()
        retriever = _load(tmp_path / "elsewhere", tmp_path, model=project / "models/final")  # no project at root
        retriever.add_pool(ROWS, instruction=INSTRUCTION, name="menus")
        retriever.retrieve("x", k=1)
        in_project = _load(project, tmp_path)  # a project, with no summary
        in_project.add_pool(ROWS, instruction=INSTRUCTION)
        in_project.retrieve("x", k=1)
    assert len(said) == 2
    for note in said:
        assert note.startswith("this model was trained on sst2, break;")
        assert "measured" not in note and "Check on your data: udr adapt NAME --from FILE" in note
        assert "It is served with this UDR model." in note


def test_a_broken_summary_leaves_its_numbers_out_and_retrieval_goes_on(project, tmp_path):
    (project / "metrics/summary.json").write_text('{"unseen": {"averages": ')
    with notes() as said:
        retriever = _load(project, tmp_path)
        retriever.add_pool(ROWS, instruction=INSTRUCTION)
        assert len(retriever.retrieve("x", k=2)) == 2
    assert len(said) == 1 and "measured" not in said[0] and "sst2, break" in said[0]


def test_the_note_says_when_the_project_measured_another_model(project, tmp_path):
    from udr.retriever.index import model_fingerprint

    measured_model(project)
    with notes() as said:
        retriever = _load(project, tmp_path)
        retriever.add_pool(ROWS, instruction=INSTRUCTION)
        retriever.retrieve("x", k=1)
    assert len(said) == 1 and "the project measured its UDR model, not this one: UDR 57.1 vs SBERT 60.2" in said[0]
    measured_model(project, model_fingerprint(project / "models/final"))
    with notes() as said:
        retriever = _load(project, tmp_path)
        retriever.add_pool(ROWS, instruction=INSTRUCTION)
        retriever.retrieve("x", k=1)
    assert len(said) == 1 and "not this one" not in said[0] and "the project measured UDR 57.1" in said[0]


def test_a_model_without_a_record_says_its_training_is_unknown(served, tmp_path):
    with notes() as said:
        retriever = _load(served, tmp_path)
        retriever.retrieve(QUERY, task="sst2", k=2)  # a pipeline task of an unrecorded model: nothing to say
        assert said == []
        retriever.add_pool(ROWS, instruction=INSTRUCTION)
        retriever.retrieve("x", k=1)
        retriever.retrieve("y", k=1)
    assert len(said) == 1
    assert said[0].startswith(
        "this model's training tasks are unknown (no udr_record.json in its folder), so 'own' may be a task"
    )
    assert "Check on your data: udr adapt" in said[0] and "udr init-task" in said[0]


def test_one_note_however_many_threads_retrieve_at_once(project, tmp_path):
    retriever = _load(project, tmp_path)
    retriever.add_pool(ROWS, instruction=INSTRUCTION)
    start = threading.Barrier(6)

    def run():
        start.wait()
        for _ in range(3):
            retriever.retrieve("name[Cafe 9]", k=2)

    with notes() as said:
        threads = [threading.Thread(target=run) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(said) == 1


def test_an_export_without_a_record_reads_its_model_card(project, tmp_path):
    """The card `udr export` writes names every task trained on; an export without record or such a card
    is unknown."""
    from udr.config import load_settings
    from udr.serving.model_card import model_card

    model = project / "models/final"
    train = {"loss": "rank", "loss_lambda": 0.5, "candidates_per_query": 4, "batch_size": 4, "lr": 1e-3}
    run = {"params_file": "params.yaml", "seed": 1, "steps": 3, "loss": {"start": 2.0, "end": 1.0}, "train": train}
    record = {
        **run,
        **RECORD,
        "models": {"lm": "tiny-lm", "encoder": "tiny"},
        "candidates": {"k": 4},
        "init": {**run, **RECORD["init"], "models": {"lm": "tiny-lm", "encoder": "tiny"}},
    }
    (model / "udr_record.json").write_text(json.dumps(record))
    card = model_card(load_settings(project / "params.yaml"), model, "me/udr")
    export = tmp_path / "export"
    export.mkdir()
    (export / "udr_export.json").write_text("{}")
    (export / "README.md").write_text(card)
    assert model_training(export).tasks == ("sst2", "break")
    (export / "README.md").write_text("# A model card that names no training\n")
    training = model_training(export)
    assert training.tasks is None and "export" in training.unknown
    assert model_training(model).tasks == ("sst2", "break")
    (model / "udr_record.json").write_text("{not json")
    assert model_training(model).tasks is None and "unreadable" in model_training(model).unknown
