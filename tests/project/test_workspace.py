"""udr.project.workspace (`udr init-task`): a user's own task in a folder of its own, whose runs leave the
project's pipeline untouched."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest
import yaml

from tests.conftest import write_params


@pytest.fixture
def project(tmp_path, data_dir):
    """A project (params.yaml over sst2) and a user's CSV outside it (columns review, sentiment, source)."""
    root = tmp_path / "project"
    root.mkdir()
    write_params(root, {"sst2": {"max_train": 20, "max_test": 6}}, data_dir, evaluate={"dtype": "fp32"})
    lines = (data_dir / "cr" / "train.jsonl").read_text().splitlines()  # negative reviews first
    rows = [json.loads(line) for line in lines[:20] + lines[-20:]]
    csv = tmp_path / "mine" / "reviews.csv"
    csv.parent.mkdir()
    pl.DataFrame({"review": [r["text"] for r in rows], "sentiment": [r["label"] for r in rows]}).write_csv(csv)
    return root, csv


def test_init_task_writes_a_workspace_that_loads(project, run_cli):
    from udr.config import load_settings

    root, csv = project
    code, out, err = run_cli(
        ["init-task", "opinions", "--from", str(csv), "--label", "sentiment", "--metric", "macro_f1"], root
    )
    assert code == 0, err
    ws = root / "workspaces" / "opinions"
    assert "task opinions: 40 rows, input 'review', label 'sentiment' (2 labels)" in err
    settings = load_settings(ws / "params.yaml")
    assert settings.root == ws.resolve() and settings.task_names() == ["opinions"]
    assert (
        settings.evaluate.unseen_tasks == {} and settings.data_dir() == load_settings(root / "params.yaml").data_dir()
    )
    # No shipped feedback for a new task: its own scoring budget, nothing beside its results.
    assert (settings.score.queries_per_task, settings.score.reuse_shipped, settings.train.epochs_first) == (
        256,
        False,
        3,
    )
    assert settings.evaluate.beside == []
    task = settings.task("opinions")
    assert (task.metric, task.kind, task.declared_in) == ("macro_f1", "classification", "data/tasks/opinions.yaml")
    assert (ws / "data" / "tasks" / "opinions.csv").read_bytes() == csv.read_bytes()
    assert (ws / "models" / "base").resolve() == (root / "models" / "base").resolve()
    assert not list(root.glob("data/*")) and not (root / "metrics").exists()  # the project is as it was


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input", "body"], "--input: no column 'body' in"),
        ([], "give --label COLUMN: none of"),
        (["--label", "sentiment", "--metric", "bleu"], "metric: bleu cannot score a classification task"),
    ],
)
def test_init_task_errors_are_one_line_and_write_nothing(project, run_cli, args, message):
    root, csv = project
    code, _, err = run_cli(["init-task", "opinions", "--from", str(csv), *args], root)
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (root / "workspaces" / "opinions").exists() and not list((root / "workspaces").glob(".*"))


def test_init_task_refuses_a_known_task_or_an_existing_folder(project, run_cli):
    root, csv = project
    code, _, err = run_cli(["init-task", "sst2", "--from", str(csv), "--label", "sentiment"], root)
    assert code == 1 and "task 'sst2' already exists" in err
    (root / "here").mkdir()
    code, _, err = run_cli(["init-task", "x", "--from", str(csv), "--label", "sentiment", "--dir", "here"], root)
    assert code == 1 and "here already exists" in err


def test_a_workspace_run_writes_its_results_in_the_workspace(project, run_cli, tmp_path):
    """Prepare and evaluate in the workspace: data, predictions and metrics land there, with the task's own
    metric and an interval; nothing appears in the project's data/ or metrics/."""
    from tests.tiny_models import save_tiny_lm
    from udr.lm.models import resolve_model

    root, csv = project
    resolve_model(str(save_tiny_lm(tmp_path / "tiny-lm")), root / "models" / "base" / "lm", kind="lm")
    code, _, err = run_cli(
        [
            "init-task",
            "opinions",
            "--from",
            str(csv),
            "--label",
            "sentiment",
            "--metric",
            "macro_f1",
            "--max-test",
            "5",
        ],
        root,
    )
    assert code == 0, err
    ws = root / "workspaces" / "opinions"
    raw = yaml.safe_load((ws / "params.yaml").read_text())
    raw["evaluate"].update({"context": 400, "max_demos": 2, "batch_tokens": 1024})
    (ws / "params.yaml").write_text(yaml.safe_dump(raw))
    for args in (["prepare"], ["evaluate", "-m", "bm25"]):
        code, out, err = run_cli(args, ws)
        assert code == 0, err
    result = json.loads((ws / "metrics" / "bm25" / "opinions.json").read_text())
    assert result["metric"] == "macro_f1" and result["n"] == 5 and result["interval"]["method"] == "bootstrap"
    assert "bm25 on opinions: macro_f1" in err and "accuracy" in json.dumps(result["details"])
    assert (ws / "data" / "predictions" / "bm25" / "opinions.parquet").is_file()
    assert not (root / "metrics").exists() and not (root / "data" / "prepared").exists()


def test_init_task_takes_a_test_file_that_prepare_uses_as_the_test_split(project, run_cli):
    """`--test FILE` (the same columns) is the declaration's data.test: `udr prepare` in the workspace takes
    its rows as the test split (split "given") instead of carving prepare.test_fraction off --from."""
    root, csv = project
    rows = pl.read_csv(csv)
    train, test = csv.with_name("train.csv"), csv.with_name("test.jsonl")  # the formats may differ
    rows[4:36].write_csv(train)
    rows.filter(pl.int_range(pl.len()).is_in([0, 1, 2, 3, 36, 37, 38, 39])).write_ndjson(test)
    args = ["init-task", "opinions", "--from", str(train), "--test", str(test), "--label", "sentiment"]
    code, _, err = run_cli([*args, "--max-test", "100"], root)
    assert code == 0, err
    assert "task opinions: 32 rows + 8 test rows" in err
    ws = root / "workspaces" / "opinions"
    declared = yaml.safe_load((ws / "data" / "tasks" / "opinions.yaml").read_text())["opinions"]
    assert declared["data"] == {"train": "opinions.csv", "test": "opinions-test.jsonl"}
    assert (ws / "data" / "tasks" / "opinions-test.jsonl").read_bytes() == test.read_bytes()
    code, _, err = run_cli(["prepare"], ws)
    assert code == 0, err
    meta = json.loads((ws / "data" / "prepared" / "opinions" / "meta.json").read_text())
    assert meta["split"] == "given" and meta["files"] == {"train": "opinions.csv", "test": "opinions-test.jsonl"}
    assert (meta["counts"]["train"]["kept"], meta["counts"]["test"]["kept"]) == (32, 8)


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"review": "text", "stars": "negative"}, "--test: no column 'sentiment' (--label) in"),
        ({"review": "text", "sentiment": "neutral"}, "--test: label(s) 'neutral' of"),
    ],
)
def test_a_test_file_that_does_not_fit_is_a_one_line_error(project, run_cli, tmp_path, columns, message):
    root, csv = project
    test = tmp_path / "test.csv"
    pl.DataFrame({k: [v] for k, v in columns.items()}).write_csv(test)
    code, _, err = run_cli(["init-task", "x", "--from", str(csv), "--test", str(test), "--label", "sentiment"], root)
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (root / "workspaces" / "x").exists()


def test_workspace_paths_keep_a_linked_data_folder_as_named(project, run_cli, tmp_path, data_dir):
    """The data mirror through a symbolic link: a mirror beside the project is written as the absolute path
    through the link (never climbing out of the project to the link's target), one inside the project
    relative to the workspace; the model links are relative to the workspace, the project's paths as named."""
    from udr.config import load_settings

    root, csv = project
    root = root.resolve()
    (tmp_path / "far" / "away").mkdir(parents=True)
    (tmp_path / "far" / "away" / "mirror").symlink_to(data_dir)
    (tmp_path / "shared").symlink_to(tmp_path / "far" / "away")  # the project's ../shared is a link
    (root / "data").mkdir()
    (root / "data" / "mirror").symlink_to(tmp_path / "far" / "away" / "mirror")
    for source, wanted in (
        ("../shared/mirror", str(root.parent / "shared" / "mirror")),
        ("data/mirror", "../../data/mirror"),
    ):
        raw = yaml.safe_load((root / "params.yaml").read_text())
        raw["data"]["source_dir"] = source
        (root / "params.yaml").write_text(yaml.safe_dump(raw))
        name = source.split("/")[0].strip(".") or "up"
        code, _, err = run_cli(["init-task", f"t{name}", "--from", str(csv), "--label", "sentiment"], root)
        assert code == 0, err
        ws = root / "workspaces" / f"t{name}"
        assert yaml.safe_load((ws / "params.yaml").read_text())["data"]["source_dir"] == wanted
        assert load_settings(ws / "params.yaml").data_dir() == data_dir.resolve()
        assert os.readlink(ws / "models" / "final") == "../../../models/final"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input", "sentiment", "--label", "sentiment"], "--input and --label are both column 'sentiment'"),
        (["--label", "sentiment", "--test", "SAME"], "holds the rows of --from"),
        (["--label", "sentiment", "--test", "COPY"], "holds the rows of --from"),
        (["--label", "sentiment", "--max-train", "1"], "--max-train 1: the demonstration pool needs 2 rows"),
        (["--label", "sentiment", "--from", "ONE_INPUT"], "holds 1 distinct value"),
        (["--label", "sentiment", "--from", "FOLDER"], "mine is a folder, not a data file (use .jsonl, .csv, "),
        (["--label", "sentiment", "--test", "FOLDER.csv"], "rows.csv is a folder, not a data file (use .jsonl, "),
    ],
)
def test_what_the_files_alone_decide_is_refused_before_anything_is_written(project, run_cli, tmp_path, args, message):
    root, csv = project
    copy = tmp_path / "copy.csv"
    copy.write_bytes(csv.read_bytes())
    one = tmp_path / "one.csv"
    pl.read_csv(csv).with_columns(pl.lit("the same review").alias("review")).write_csv(one)
    (tmp_path / "rows.csv").mkdir()
    files = {"SAME": str(csv), "COPY": str(copy), "ONE_INPUT": str(one)}
    files |= {"FOLDER": str(csv.parent), "FOLDER.csv": str(tmp_path / "rows.csv")}
    args = [files.get(a, a) for a in args]
    code, _, err = run_cli(["init-task", "opinions", "--from", str(csv), *args], root)
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (root / "workspaces").exists()


def test_validation_rows_that_leave_no_pool_are_refused_before_anything_is_written(project, run_cli):
    from udr.config import load_settings
    from udr.errors import UdrError
    from udr.project.workspace import WorkspaceRequest, init_workspace

    root, csv = project
    settings = load_settings(root / "params.yaml")
    folder = root / "workspaces" / "opinions"

    def request(validation: int) -> WorkspaceRequest:
        return WorkspaceRequest("opinions", csv, folder, label_column="sentiment", validation=validation)

    with pytest.raises(UdrError, match=r"--validation 31: .* has 32 train rows.* --validation 30 or less"):
        init_workspace(settings, request(31))  # 40 rows, 8 carved for test
    assert not (root / "workspaces").exists()
    init_workspace(settings, request(30))  # the most `udr prepare` takes
    code, _, err = run_cli(["prepare"], folder)
    assert code == 0, err


def test_a_workspace_another_process_writes_is_refused_naming_its_pid(project, run_cli):
    from tests.locking import another_process_holding

    root, csv = project
    with another_process_holding(root / "workspaces" / "opinions") as pid:
        code, _, err = run_cli(["init-task", "opinions", "--from", str(csv), "--label", "sentiment"], root)
    assert code == 1 and f"pid {pid}" in err and "workspace" in err and len(err.strip().splitlines()) == 1, err
    assert not (root / "workspaces").exists()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "my task"}, "bad task name 'my task': 1-64 letters"),
        ({"name": "x" * 65}, "bad task name"),
        ({"max_train": 1}, "--max-train 1: the demonstration pool needs 2 rows or more"),
        ({"max_test": 0}, "--max-test 0: keep 1 test row or more"),
        ({"validation": 0}, "--validation 0: carve 1 row or more"),
        ({"instruction": ""}, "--instruction '' is blank: give the text UDR and the LM read before each input"),
        ({"instruction": " \t"}, "--instruction ' \\t' is blank"),
    ],
)
def test_a_workspace_request_with_a_bad_value_is_one_line(tmp_path, fields, message):
    from udr.errors import UdrError
    from udr.project.workspace import WorkspaceRequest

    with pytest.raises(UdrError) as refused:
        WorkspaceRequest(**{"name": "opinions", "source": "rows.csv", "folder": tmp_path / "ws", **fields})
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "ws").exists()


def test_a_workspace_request_holds_paths_and_the_tasks_caps():
    from udr.project.workspace import WorkspaceRequest

    request = WorkspaceRequest("opinions", "rows.csv", "ws", test="test.csv", max_train=50, max_test=9)
    assert (request.source, request.folder, request.test) == (Path("rows.csv"), Path("ws"), Path("test.csv"))
    assert request.caps == {"max_train": 50, "max_test": 9}
    assert WorkspaceRequest("opinions", "rows.csv", "ws", validation=30).caps["validation"] == 30


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ("sentiment", "reviews.csv:7: malformed row for task opinions: field 'sentiment' is empty"),
        ("review", "reviews.csv:7: malformed row for task opinions: field 'review' is empty"),
    ],
)
def test_a_row_with_an_empty_cell_is_refused_naming_its_line_before_anything_is_written(
    project, run_cli, column, message
):
    """Every row is read as `udr prepare` reads it, not only the first: an empty label is no label 'None'."""
    root, csv = project
    rows = pl.read_csv(csv)
    empty = pl.when(pl.int_range(pl.len()) == 5).then(None).otherwise(pl.col(column))
    rows.with_columns(empty.alias(column)).write_csv(csv)  # the 6th row, line 7
    code, _, err = run_cli(["init-task", "opinions", "--from", str(csv), "--label", "sentiment"], root)
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (root / "workspaces").exists()


@pytest.mark.parametrize("where", ["--from", "--test"])
def test_a_jsonl_row_without_the_label_is_refused_naming_its_file_and_line(project, run_cli, tmp_path, where):
    root, csv = project
    rows = pl.read_csv(csv).to_dicts()
    del rows[2]["sentiment"]  # the third row: line 3
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    files = ["--from", str(bad)] if where == "--from" else ["--from", str(csv), "--test", str(bad)]
    code, _, err = run_cli(["init-task", "opinions", *files, "--label", "sentiment"], root)
    assert code == 1 and "bad.jsonl:3: malformed row for task opinions: missing field 'sentiment'" in err, err
    assert len(err.strip().splitlines()) == 1 and not (root / "workspaces").exists()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"review,sentiment\ngood,1\nbad, really,0\n", "bad.csv:3: malformed row: 3 cells, the header has 2"),
        (b"review,sentiment\ngood,1\nb\xe9d,0\n", "bad.csv:3: malformed row: not valid UTF-8"),
        ("review,sentiment\ngood,1\nbad,0\n".encode("utf-16"), "bad.csv: not UTF-8 text: it looks like UTF-16"),
    ],
    ids=["extra-cell", "latin-1", "utf-16"],
)
def test_a_csv_polars_cannot_read_is_one_line_naming_where(project, run_cli, tmp_path, data, message):
    root, _ = project
    bad = tmp_path / "bad.csv"
    bad.write_bytes(data)
    code, _, err = run_cli(["init-task", "opinions", "--from", str(bad), "--label", "sentiment"], root)
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1 and "\x00" not in err, err
    assert not (root / "workspaces").exists()
