"""udr.data.declarations: tasks declared as data (schema, files, registries) and reading a user's files."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest
import yaml

from tests.conftest import REPO, write_csv_task, write_params
from udr.data.declarations import builtin_registry, parse_declarations, project_registry
from udr.data.sources import load_task
from udr.data.tasks import Classification, FileSource, MirrorSource
from udr.errors import UdrError

REVIEWS = {
    "kind": "classification",
    "instruction": "Sentiment of the review: ",
    "data": {"train": "reviews.csv"},
    "input": "review",
    "label": "sentiment",
    "verbalizers": {"neg": "It was terrible .", "pos": "It was great ."},
}


def _declare(fields: dict, tmp_path, name: str = "reviews"):
    return parse_declarations({name: fields}, tmp_path, "test.yaml")[name]


def test_builtin_tasks_are_declared_in_the_same_format():
    registry = builtin_registry()
    assert len(registry) >= 36 and all(t.declared_in == "built-in" for t in registry.values())
    sst2 = registry["sst2"]
    assert sst2.normalize == Classification(
        ("negative", "positive"), ("It was terrible .", "It was great ."), "{text}", "label"
    )
    assert sst2.source == MirrorSource("sst2", "train", "test")
    assert registry["break"].source == MirrorSource("break", None, "validation")
    assert registry["e2e"].group_test_references and registry["break"].metric == "exact_match"


def test_a_declared_task_chooses_its_metric(tmp_path):
    assert _declare({**REVIEWS, "metric": "macro_f1"}, tmp_path).metric == "macro_f1"
    assert _declare({**REVIEWS, "metric": "accuracy"}, tmp_path).metric == "accuracy"


def test_a_declaration_builds_a_task_from_local_files(tmp_path):
    task = _declare(REVIEWS, tmp_path)
    assert (task.kind, task.family, task.metric, task.declared_in) == (
        "classification",
        "classification",
        "accuracy",
        "test.yaml",
    )
    assert task.source == FileSource("reviews.csv", None, str(tmp_path))
    ex = task.normalize({"review": "  works  great ", "sentiment": "pos"})
    assert (ex.input, ex.target, ex.label, ex.choices) == (
        "works great",
        "It was great .",
        1,
        task.normalize.verbalizers,
    )
    assert task.render(ex.input, ex.target) == "works great\tIt was great ."


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"metric": "f1"}, r"'reviews' \(test.yaml\): metric: .*unknown metric 'f1'"),
        (
            {"metric": "bleu"},
            r"'reviews' \(test.yaml\): metric: bleu cannot score a classification task "
            r"\(its metrics: accuracy, macro_f1\)",
        ),
        ({"colour": "red"}, r"'reviews' \(test.yaml\): colour: unknown field"),
        ({"kind": "regression"}, r"kind: "),
        ({"target": "summary"}, r"target is not a field of a classification task"),
        ({"verbalizers": {"neg": "bad"}}, r"verbalizers: give at least 2 labels"),
        ({"verbalizers": {"neg": "same", "pos": "same"}}, r"two labels have the same text"),
        ({"template": "{answer} {input}"}, r"put \{input\} before \{answer\}"),
        ({"template": "{input} {answer} {extra}"}, r"must use \{input\} and \{answer\} and nothing else"),
        ({"data": {"test": "t.csv"}}, r"data: .*need a train file"),
        ({"data": {"mirror": "sst2", "hub": "a/b"}}, r"one of mirror, hub and builder"),
        *(
            ({"data": {"builder": b}}, r"unknown builder .*only udr's own builders may be named")
            for b in ("os:getcwd", "sys:exit", "this:x", "no_such_module:f", "justtext", "x" * 500)
        ),
        ({"instruction": ""}, r"instruction: "),
        ({"instruction": " \t "}, r"instruction: .*blank: give the text UDR and the LM read before each input"),
        *(
            ({"input": value}, rf"input: .*column '{re.escape(col)}' cannot be read in a format.*rename the column")
            for value, col in [("review.text", "review.text"), ("{0}", "0"), ("{text[0]} x", "text[0]")]
        ),
    ],
)
def test_bad_declaration_is_one_line_naming_task_and_field(tmp_path, change, message):
    with pytest.raises(UdrError, match=message) as info:
        _declare({**REVIEWS, **change}, tmp_path)
    assert "\n" not in str(info.value)


def test_bad_task_name_and_duplicate_declarations(tmp_path):
    with pytest.raises(UdrError, match="task name '../x' must be"):
        parse_declarations({"../x": REVIEWS}, tmp_path, "test.yaml")
    with pytest.raises(UdrError, match=r"task name 'xxx.*\.\.\. must be 1-64 letters") as info:
        parse_declarations({"x" * 300: REVIEWS}, tmp_path, "test.yaml")
    assert len(str(info.value)) < 200
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({"reviews": REVIEWS}))
    with pytest.raises(UdrError, match=r"task 'reviews' is declared twice: in .*a.yaml and in params.yaml tasks"):
        project_registry(tmp_path, {"reviews": REVIEWS}, tmp_path)
    with pytest.raises(UdrError, match="task 'sst2' is declared twice: in built-in and in"):
        project_registry(None, {"sst2": REVIEWS}, tmp_path)


def _write_reviews(path, rows):
    frame = pl.DataFrame(rows)
    if path.suffix == ".csv":
        frame.write_csv(path)
    elif path.suffix == ".tsv":
        frame.write_csv(path, separator="\t")
    elif path.suffix == ".parquet":
        frame.write_parquet(path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))


ROWS = [{"review": f"review number {i}", "sentiment": ("neg", "pos")[i % 2]} for i in range(10)]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".tsv", ".parquet"])
def test_every_file_format_gives_the_same_examples(tmp_path, suffix):
    _write_reviews(tmp_path / f"train{suffix}", ROWS)
    _write_reviews(tmp_path / f"test{suffix}", ROWS[:4])
    task = _declare({**REVIEWS, "data": {"train": f"train{suffix}", "test": f"test{suffix}"}}, tmp_path)
    loaded = load_task(task, tmp_path / "no-mirror", seed=1, test_fraction=0.2)
    assert [e.input for e in loaded.train.examples] == [r["review"] for r in ROWS]
    assert [e.label for e in loaded.test.examples] == [0, 1, 0, 1]
    assert loaded.provenance["files"] == {"train": f"train{suffix}", "test": f"test{suffix}"}
    # Ids are stable per row, the same in every format: its 0-based position among the file's data rows.
    assert loaded.train.ids == list(range(10))


def test_without_a_test_file_both_splits_are_carved(tmp_path):
    _write_reviews(tmp_path / "reviews.csv", ROWS)
    loaded = load_task(_declare(REVIEWS, tmp_path), tmp_path, seed=1, test_fraction=0.2)
    assert (len(loaded.train), len(loaded.test)) == (8, 2) and loaded.provenance["split"] == "seeded"
    assert set(loaded.train.ids).isdisjoint(loaded.test.ids)


def test_bad_data_is_one_line_naming_task_field_and_place(tmp_path):
    _write_reviews(tmp_path / "reviews.csv", ROWS)
    with pytest.raises(UdrError, match=r"task reviews: input: unknown column 'text' in .*reviews.csv \(its columns: "):
        load_task(_declare({**REVIEWS, "input": "{text}"}, tmp_path), tmp_path, seed=1, test_fraction=0.2)
    _write_reviews(tmp_path / "bad.csv", [*ROWS, {"review": "meh", "sentiment": "neutral"}])
    with pytest.raises(UdrError, match=r"bad.csv:12: malformed row for task reviews: field 'sentiment': unknown label"):
        load_task(_declare({**REVIEWS, "data": {"train": "bad.csv"}}, tmp_path), tmp_path, seed=1, test_fraction=0.2)
    (tmp_path / "empty.csv").write_text("review,sentiment\n")
    with pytest.raises(UdrError, match=r"task reviews: data.train: the split is empty \(no rows in .*empty.csv\)"):
        load_task(_declare({**REVIEWS, "data": {"train": "empty.csv"}}, tmp_path), tmp_path, seed=1, test_fraction=0.2)
    with pytest.raises(UdrError, match=r"task reviews: data file .*x.xlsx: unsupported format '.xlsx'"):
        load_task(_declare({**REVIEWS, "data": {"train": "x.xlsx"}}, tmp_path), tmp_path, seed=1, test_fraction=0.2)
    with pytest.raises(UdrError, match=r"task reviews: data file not found: .*nope.csv"):
        load_task(_declare({**REVIEWS, "data": {"train": "nope.csv"}}, tmp_path), tmp_path, seed=1, test_fraction=0.2)


def test_labels_without_verbalizers_are_read_from_train(tmp_path):
    rows = [{"q": f"question {i}", "topic": ("sport", "art", "food")[i % 3]} for i in range(9)]
    _write_reviews(tmp_path / "train.csv", rows)
    _write_reviews(tmp_path / "test.csv", rows[:3])
    fields = {"kind": "classification", "instruction": "Topic: ", "input": "q", "label": "topic"}
    task = _declare({**fields, "data": {"train": "train.csv", "test": "test.csv"}}, tmp_path)
    loaded = load_task(task, tmp_path, seed=1, test_fraction=0.2)
    first = loaded.test.examples[0]
    assert first.choices == ("art", "food", "sport") and (first.target, first.label) == ("sport", 2)
    _write_reviews(tmp_path / "odd.csv", [{"q": "x", "topic": "music"}])
    task = _declare({**fields, "data": {"train": "train.csv", "test": "odd.csv"}}, tmp_path)
    with pytest.raises(UdrError, match=r"task reviews: label: test label\(s\) 'music' never occur in train"):
        load_task(task, tmp_path, seed=1, test_fraction=0.2)


def test_multiple_choice_from_option_columns_and_generation_with_reference_lists(tmp_path):
    task = _declare(
        {
            "kind": "multiple_choice",
            "instruction": "Pick: ",
            "data": {"train": "mc.csv"},
            "input": "{premise} A: {choice0} B: {choice1}",
            "choices": ["a", "b"],
            "label": "answer",
        },
        tmp_path,
    )
    ex = task.normalize({"premise": "rain", "a": "wet", "b": "dry", "answer": "0"})  # CSV cells are text
    assert (ex.input, ex.target, ex.choices) == ("rain A: wet B: dry", "wet", ("wet", "dry"))
    gen = _declare(
        {"kind": "generation", "instruction": "Say: ", "data": {"train": "g.parquet"}, "target": "answers"},
        tmp_path,
    )
    ex = gen.normalize({"input": "hi", "answers": ["hello", "hey"]})
    assert (ex.target, ex.references, gen.metric) == ("hello", ("hello", "hey"), "bleu")


def test_project_settings_know_declared_and_unseen_tasks(tmp_path, data_dir):
    from udr.config import load_settings

    write_csv_task(tmp_path / "data" / "tasks", data_dir, "reviews")
    inline = {"short": {**REVIEWS, "data": {"train": "data/tasks/reviews.csv"}, "input": "review"}}
    params = write_params(tmp_path, {"reviews": {}}, data_dir, evaluate={"unseen_tasks": {"cr": {}}})
    params.write_text(params.read_text() + yaml.safe_dump({"tasks": inline}))  # the inline section
    settings = load_settings(params)
    assert settings.task("reviews").declared_in.endswith("reviews.yaml") and settings.task("short").kind
    assert settings.task("reviews").source.path("reviews.csv").is_file()
    assert settings.prepared_task_names() == ["reviews", "cr"] and settings.evaluation_tasks() == ["reviews", "cr"]
    assert settings.training_tasks() == ["reviews"]
    both = write_params(tmp_path, {"cr": {}}, data_dir, evaluate={"unseen_tasks": {"cr": {}}})
    with pytest.raises(UdrError, match="evaluate.unseen_tasks: cr also in prepare.tasks"):
        load_settings(both)
    unknown = write_params(tmp_path, {"sst2": {}}, data_dir, evaluate={"unseen_tasks": {"mine": {}}})
    with pytest.raises(UdrError, match="unknown task 'mine'; known tasks: .*reviews"):
        load_settings(unknown)


@pytest.mark.slow
def test_the_built_in_declarations_ship_in_the_wheel(tmp_path):
    """A non-editable install reads builtin_tasks.yaml from the package: the wheel must carry it."""
    import subprocess
    import sys
    import zipfile

    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("udr-*.whl")
    assert "udr/data/builtin_tasks.yaml" in zipfile.ZipFile(wheel).namelist()


@pytest.mark.parametrize("template", ["{input}{input:>300000000}\t{answer}", "{input!r}\t{answer}"])
def test_a_template_with_a_format_spec_is_refused(tmp_path, template):
    """A format spec could pad a prompt to any length (a model folder's tasks.json too): plain fields only."""
    with pytest.raises(UdrError, match=r"template: bad format .* has a format spec or conversion"):
        _declare({**REVIEWS, "template": template}, tmp_path)
    with pytest.raises(UdrError, match="has a format spec or conversion"):
        _declare({**REVIEWS, "input": "{review:>99999999}"}, tmp_path)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("template", "{input}" * 50 + "\t{answer}", "appears more than once"),
        ("template", "x" * 2000 + "{input}\t{answer}", "characters of fixed text"),
        ("input", "{review} {review} {review}", "appears more than once"),
        ("instruction", "y" * 5000, "at most 1000 characters"),
    ],
)
def test_a_declaration_cannot_multiply_a_texts_length(tmp_path, field, value, message):
    """A repeated field or a huge fixed text would make a prompt of any size from a short query (a crafted
    model folder's tasks.json goes through the same check): each field once, fixed text bounded."""
    with pytest.raises(UdrError, match=message) as err:
        _declare({**REVIEWS, field: value}, tmp_path)
    assert len(str(err.value)) < 400 and "\n" not in str(err.value)


def test_an_unknown_task_error_quotes_a_bounded_number_of_names():
    from udr.config import settings_from_mapping

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["train"]["tasks"] = [f"task{i}-" + "x" * 1000 for i in range(10_000)]
    with pytest.raises(UdrError, match=r"bad parameter train.tasks: .*\(9988 more\) not in prepare.tasks") as err:
        settings_from_mapping(params, REPO).training_tasks()
    assert len(str(err.value)) < 1000
