"""udr's own JSON files read back through their schemas (udr.util.schemas): a file that is damaged,
mistyped or of an older udr is read (an older file lacks only optional fields) or refused in one line
naming the file and the field, by every command that reads it: `udr adapt`'s rates, `udr report`,
`udr rounds`, the index and the model record. A property test feeds each reader truncated, mistyped,
missing-field and deeply nested variants of a valid file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO
from udr.errors import UdrError

TASK = "trec"
MACHINE = "cpu x"
SCORE = {
    **{"task": TASK, "round": 0, "queries": 4, "pairs": 40, "reused": 0, "scored": 40, "tokens": 4000},
    **{"padding_fraction": 0.1, "seconds": 2.0, "pairs_per_s": 20.0, "tokens_per_s": 2000.0, "world_size": 1},
    **{"device": "cpu", "dtype": "bf16", "top1_score_mean": -1.5, "machine": MACHINE, "shipped": None},
}
TRAIN = {
    **{"round": 0, "steps": 10, "queries": {TASK: 4}, "task_probabilities": {TASK: 1.0}},
    **{"loss_start": 2.0, "loss_end": 1.0, "seconds": 5.0, "world_size": 1, "device": "cpu"},
}
RESULT = {
    **{"task": TASK, "kind": "classification", "family": "question", "metric": "accuracy", "n": 10},
    **{"score": 50.0, "graded": {"name": "accuracy", "score": 50.0}, "seconds": 3.0, "prompt_tokens_mean": 100.0},
    "machine": MACHINE,
}
RECORD = {
    **{"method": "udr", "round": 1, "params_file": "params.yaml", "project": "../..", "seed": 1, "steps": 3},
    **{"models": {"lm": "lm", "encoder": "enc"}, "tasks": {TASK: 4}, "loss": {"start": 2.0, "end": 1.0}},
    "init": {"method": "udr", "round": 0, "tasks": {"sst2": 5}, "init": {"base": "enc"}},
}


@pytest.fixture
def project(tmp_path) -> Path:
    """A project with one task whose stages wrote their reports: scoring, training, the methods' results."""
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    paths = _settings(tmp_path).paths
    _write(paths.score_report(0, TASK), SCORE)
    _write(paths.train_log("round0") / "summary.json", TRAIN)
    from udr.config import METHODS

    for method in METHODS:
        _write(paths.method_metrics(method, TASK), {**RESULT, "method": method})
    return tmp_path


def _settings(root: Path):
    from udr.config import load_settings

    one_task = [f"prepare.tasks={{{TASK}: {{max_train: 100, max_test: 10}}}}", "evaluate.unseen_tasks={}"]
    return load_settings(root / "params.yaml", one_task)


def _write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))


def _rates(root: Path):
    from udr.project.adapt import recorded_rates

    return recorded_rates(_settings(root))


def _report(root: Path):
    from udr.evaluation.tables import kind_averages, results_markdown
    from udr.stages.report import _load_results, score_reports

    settings = _settings(root)
    results = _load_results(settings)
    score_reports(settings)
    return results_markdown(results, kind_averages(results))


def _rounds(root: Path):
    from udr.project.rounds import rounds_table

    return rounds_table(_settings(root))


def _one_line(err: pytest.ExceptionInfo, path: Path) -> str:
    text = str(err.value)
    assert "\n" not in text and str(path) in text, text
    return text


# ---------------------------------------------------------------- the crashes, one by one


def test_the_valid_files_read(project):
    rates = _rates(project)
    assert rates.train_seconds_per_step == 0.5 and rates.score_tokens_per_s == 2000.0 and rates.machine == MACHINE
    assert "| trec |" in _report(project)
    assert _rounds(project)[0]["pairs"] == 40


@pytest.mark.parametrize(
    "which, data, field",
    [
        ("train", {k: v for k, v in TRAIN.items() if k != "seconds"}, "required field 'seconds' is missing"),
        ("train", [TRAIN], "<top level>"),
        ("score", {**SCORE, "tokens": "many"}, "field 'tokens': Input should be a valid integer (got 'many')"),
        ("result", {**RESULT, "method": "bm25", "n": "80"}, "field 'n': Input should be a valid integer (got '80')"),
    ],
)
def test_adapts_rates_name_the_file_and_its_bad_field(project, which, data, field):
    paths = _settings(project).paths
    path = {
        "train": paths.train_log("round0") / "summary.json",
        "score": paths.score_report(0, TASK),
        "result": paths.method_metrics("bm25", TASK),
    }[which]
    _write(path, data)
    with pytest.raises(UdrError, match=r"^unreadable (training summary|score report|result) ") as err:
        _rates(project)
    assert field in _one_line(err, path)


def test_report_refuses_a_result_whose_score_is_text(project):
    path = _settings(project).paths.method_metrics("udr", TASK)
    _write(path, {**RESULT, "score": "high"})
    with pytest.raises(UdrError, match=r"^malformed result .*udr/trec.json: field 'score': ") as err:
        _report(project)
    _one_line(err, path)


def test_rounds_reads_an_older_score_report_holding_the_task_alone(project):
    _write(_settings(project).paths.score_report(0, TASK), {"task": TASK})
    row = _rounds(project)[0]
    assert row["task"] == TASK and row["pairs"] is None and row["score_seconds"] is None


def test_report_refuses_a_metrics_folder_it_cannot_write_before_reading_anything(project, monkeypatch):
    """A read-only metrics/ (simulated: the tests may run as root, whom permission bits do not stop) is
    one line before any result is read, a missing one included."""
    import tempfile

    from udr.stages.report import run_report

    metrics = project / "metrics"
    (metrics / "udr" / f"{TASK}.json").unlink()
    real = tempfile.mkstemp

    def read_only(*args, dir=None, **kwargs):
        if dir is not None and Path(dir) == metrics:
            raise PermissionError(13, "Permission denied")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with pytest.raises(UdrError, match=r"^cannot write udr report's output .*summary.json: .*metrics is not writable"):
        run_report(_settings(project))


def test_the_index_metadata_and_the_model_record_name_their_bad_field(tmp_path):
    from udr.retriever.index import load_embeddings, save_embeddings
    from udr.retriever.record import read_record

    index = tmp_path / "trec.npy"
    save_embeddings(index, np.ones((2, 3), dtype=np.float32), {"ids": [0, 1]})
    assert load_embeddings(index)[1] == {"ids": [0, 1]}
    meta = tmp_path / "trec.npy.json"
    _write(meta, {k: v for k, v in json.loads(meta.read_text()).items() if k != "shape"})
    with pytest.raises(UdrError, match=r"^unreadable index metadata .*: required field 'shape' is missing"):
        load_embeddings(index)
    _write(tmp_path / "model" / "udr_record.json", {**RECORD, "init": {**RECORD["init"], "init": "enc"}})
    with pytest.raises(UdrError, match=r"^unreadable model record .*: field 'init.init': ") as err:
        read_record(tmp_path / "model")
    _one_line(err, tmp_path / "model" / "udr_record.json")


def test_a_model_record_whose_tasks_are_null_names_no_task_of_its_own(tmp_path):
    """The record's schema allows `"tasks": null` (a record that names none): read, it trains the tasks of
    the rounds before it, and is no error without its file's name (found by the property test below)."""
    from udr.retriever.record import read_record, trained_tasks

    _write(tmp_path / "model" / "udr_record.json", {**RECORD, "tasks": None})
    record = read_record(tmp_path / "model")
    assert trained_tasks(record) == trained_tasks({k: v for k, v in record.items() if k != "tasks"} | {"tasks": {}})


# ---------------------------------------------------------------- every reader, any damage


def _record(root: Path):
    from udr.retriever.record import read_record, rounds, trained_tasks

    record = read_record(root / "model")
    return trained_tasks(record), rounds(record)


def _index(root: Path):
    from udr.retriever.index import load_embeddings

    return load_embeddings(root / "index" / "trec.npy")


def _manifest(root: Path):
    from udr.feedback.scores_file import read_manifest

    return read_manifest(root / "data/scores/round0/trec.parquet", 0, TASK)


def _valid_manifest() -> dict:
    from udr.feedback.scores_file import inputs_hash

    inputs = {"task": TASK, "round": 0, "lm": "lm"}
    return {
        **{"task": TASK, "round": 0, "seed": 42, "queries": [3, 1], "pairs": 4, "inputs": inputs},
        **{"inputs_hash": inputs_hash(inputs), "sha256": "0" * 64, "machine": MACHINE, "taken_from": None},
    }


def _index_meta(root: Path) -> dict:
    from udr.retriever.index import embeddings_sha256

    emb = np.ones((2, 3), dtype=np.float32)
    return {"shape": [2, 3], "dtype": emb.dtype.str, "sha256": embeddings_sha256(emb), "meta": {"ids": [0, 1]}}


# (name, the file under the project, its valid content, the readers that must survive any variant of it)
READERS = {
    "score report": ("metrics/score/round0/trec.json", SCORE, (_rates, _report, _rounds)),
    "training summary": ("metrics/train/round0/summary.json", TRAIN, (_rates, _rounds)),
    "result": ("metrics/bm25/trec.json", {**RESULT, "method": "bm25"}, (_rates, _report)),
    "model record": ("model/udr_record.json", RECORD, (_record,)),
    "index metadata": ("index/trec.npy.json", None, (_index,)),
    "scores manifest": ("data/scores/round0/trec.json", None, (_manifest,)),
}


def _valid(name: str):
    made = {"index metadata": lambda: _index_meta(Path()), "scores manifest": _valid_manifest}
    return made[name]() if name in made else READERS[name][1]


def _paths(value, prefix=()) -> list[tuple]:
    """The key paths of every value inside a JSON object (nested objects' too)."""
    out = []
    if isinstance(value, dict):
        for key, inner in value.items():
            out.append((*prefix, key))
            out += _paths(inner, (*prefix, key))
    return out


def _set(value, path: tuple, new, drop: bool = False):
    """A copy of `value` with the value at `path` replaced by `new` (or dropped)."""
    if not path:
        return new
    head, *rest = path
    copy = dict(value)
    if drop and not rest:
        copy.pop(head)
    else:
        copy[head] = _set(value[head], tuple(rest), new, drop)
    return copy


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def variants(draw, name: str) -> tuple[str, str]:
    """(kind, text): a damaged copy of a valid file: truncated, a field's value of any JSON type, a field
    dropped, or the value buried in deep nesting."""
    valid = _valid(name)
    text = json.dumps(valid)
    kind = draw(st.sampled_from(["truncated", "mistyped", "missing", "nested"]))
    paths = _paths(valid)
    if kind == "truncated":
        return kind, text[: draw(st.integers(0, len(text) - 1))]
    if kind == "nested":
        depth = draw(st.sampled_from([50, 5_000, 200_000]))
        return kind, "[" * depth + text + "]" * depth
    path = draw(st.sampled_from(paths))
    if kind == "missing":
        return kind, json.dumps(_set(valid, path, None, drop=True))
    return kind, json.dumps(_set(valid, path, draw(JSON_VALUES)))


def _prepared(root: Path, name: str) -> Path:
    """`root` as a project whose files are all valid; the path of the reader `name`'s file."""
    if not (root / "params.yaml").is_file():
        shutil.copy(REPO / "params.yaml", root / "params.yaml")
        paths = _settings(root).paths
        from udr.config import METHODS
        from udr.retriever.index import save_embeddings

        _write(paths.score_report(0, TASK), SCORE)
        _write(paths.train_log("round0") / "summary.json", TRAIN)
        for method in METHODS:
            _write(paths.method_metrics(method, TASK), {**RESULT, "method": method})
        _write(root / "model" / "udr_record.json", RECORD)
        save_embeddings(root / "index" / "trec.npy", np.ones((2, 3), dtype=np.float32), {"ids": [0, 1]})
    for other, (relative, _, _) in READERS.items():
        _write(root / relative, _valid(other))
    return root / READERS[name][0]


@pytest.mark.parametrize("name", list(READERS))
def test_every_reader_reads_a_damaged_file_or_names_it_in_one_line(tmp_path_factory, name):
    root = tmp_path_factory.mktemp("damaged")

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(variants(name))
    def check(variant):
        kind, text = variant
        path = _prepared(root, name)
        path.write_text(text)
        for reader in READERS[name][2]:
            try:
                reader(root)
            except UdrError as exc:
                message = str(exc)
                named = str(path) in message or str(path.with_suffix("")) in message  # the metadata's index
                # A report without the field that says it scored anything is one of a run that scored nothing.
                named |= kind == "missing" and message.startswith("udr adapt estimates its time from this project")
                assert "\n" not in message and named, (kind, reader.__name__, message)
            else:  # only a variant that is still a file of this kind reads
                assert kind in ("mistyped", "missing"), (kind, reader.__name__, text[:200])

    check()


def test_the_cli_names_a_damaged_file_in_one_line_with_a_non_zero_exit(project, run_cli):
    """`udr rounds` on a score report whose pairs are text, and on one cut short."""
    path = _settings(project).paths.score_report(0, TASK)
    for text in (json.dumps({**SCORE, "pairs": "many"}), json.dumps(SCORE)[:30]):
        path.write_text(text)
        code, _, err = run_cli(
            ["rounds", "-S", f"prepare.tasks={{{TASK}: {{max_train: 100}}}}", "-S", "evaluate.unseen_tasks={}"],
            project,
        )
        assert code == 1 and len(err.strip().splitlines()) == 1, err
        assert "score/round0/trec.json" in err and "Traceback" not in err
