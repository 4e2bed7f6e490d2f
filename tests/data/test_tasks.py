"""The task registry: every mirrored task normalises real rows; templates and verbalizers hold together."""

from __future__ import annotations

import pytest

from udr.data.sources import normalize_rows, read_jsonl
from udr.data.tasks import TASK_KINDS, BuiltinSource, Classification, MirrorSource, RowError, builtin_tasks, get_task
from udr.errors import UdrError

REGISTRY = builtin_tasks()

MIRRORED = [t for t in REGISTRY.values() if isinstance(t.source, MirrorSource)]


def test_every_mirror_folder_is_registered(data_dir):
    folders = {p.name for p in data_dir.iterdir() if p.is_dir()}
    registered = {t.source.folder for t in MIRRORED}
    assert folders <= registered, f"mirror tasks without a registry entry: {folders - registered}"
    assert "python_code" in REGISTRY and isinstance(REGISTRY["python_code"].source, BuiltinSource)


@pytest.mark.parametrize("task", MIRRORED, ids=lambda t: t.name)
def test_task_loads_real_rows(task, data_dir):
    for split_file in filter(None, (task.source.train, task.source.test)):
        path = data_dir / task.source.folder / f"{split_file}.jsonl"
        rows = normalize_rows(task, read_jsonl(path)[:20], str(path))
        assert len(rows) == 20
        for ex in rows.examples:
            assert ex.input.strip() and ex.target.strip()
            assert ex.target in ex.references
            if task.kind == "generation":
                assert ex.label == -1 and ex.choices == ()
            else:
                assert 0 <= ex.label < len(ex.choices) and ex.choices[ex.label] == ex.target
            line = task.render(ex.input, ex.target)
            assert "\n" not in line  # one demonstration per line in prompts


@pytest.mark.parametrize("task", REGISTRY.values(), ids=lambda t: t.name)
def test_registry_entries_are_complete(task):
    assert task.kind in TASK_KINDS
    assert task.instruction.strip() and task.metric
    assert "{input}" in task.template and "{answer}" in task.template
    if task.kind == "classification" and not task.source.describe().startswith("hub:"):
        norm = task.normalize
        assert len(norm.labels) == len(norm.verbalizers) == len(set(norm.verbalizers)) >= 2


def test_unknown_label_and_missing_field_are_row_errors():
    sst2 = get_task("sst2")
    with pytest.raises(RowError, match="unknown label 'meh'"):
        sst2.normalize({"text": "fine", "label": "meh"})
    with pytest.raises(RowError, match="missing field 'text'"):
        sst2.normalize({"label": "positive"})
    with pytest.raises(RowError, match="field 'text' is empty"):  # an empty CSV cell
        sst2.normalize({"text": None, "label": "positive"})
    with pytest.raises(RowError, match="missing field 'label'"):
        sst2.normalize({"text": "fine"})
    with pytest.raises(RowError, match="field 'label' is empty"):
        sst2.normalize({"text": "fine", "label": None})
    own = Classification((), ())  # labels read from the data: a list or mapping is no label
    for raw in (["positive", "negative"], {"a": 1}):
        with pytest.raises(RowError, match="field 'label' must be one value"):
            own({"text": "fine", "label": raw})
    with pytest.raises(RowError, match="choices"):
        get_task("copa").normalize({"question": "q", "asks_for": "cause", "choices": ["a"], "label": 0})
    with pytest.raises(RowError, match="label"):
        get_task("comv").normalize({"question": "q", "choices": ["a", "b"], "label": 2})


def test_a_missing_reference_in_a_list_is_dropped_and_none_left_is_a_row_error(data_dir):
    dart = get_task("dart")
    ex = dart.normalize({"input": "a : b : c", "targets": ["A is  b of c.", None, "  "]})
    assert ex.references == ("A is b of c.",) and ex.target == "A is b of c."
    for targets in ([None, ""], [], "not a list", ["ok", 3]):
        with pytest.raises(RowError, match="non-empty list of non-empty strings"):
            dart.normalize({"input": "a : b : c", "targets": targets})
    # The mirror's whole DART test split (a row's second reference is null) now normalises.
    path = data_dir / "dart" / "test.jsonl"
    rows = normalize_rows(dart, read_jsonl(path), str(path))
    assert len(rows) == 5097


def test_get_task_unknown():
    with pytest.raises(UdrError, match="unknown task 'nope'"):
        get_task("nope")


def test_code_input_is_one_line_but_keeps_structure():
    ex = get_task("python_code").normalize({"input": "def f(x):\n    return x\n", "target": "Identity."})
    assert ex.input == "def f(x):\\n    return x" and "\n" not in ex.input


def test_mirror_source_describe():
    assert "seeded split of validation" in MirrorSource("break", None, "validation").describe()
