"""`udr adapt`'s step record: the request's fingerprint, the steps a stopped run finished (skipped when it
resumes), another request refused in one line, `--restart`."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from udr.errors import UdrError
from udr.project.adapt import (
    STEPS_NAME,
    AdaptRequest,
    Plan,
    StepRecord,
    Steps,
    request_fingerprint,
    resumed_record,
)


@pytest.fixture
def request_(tmp_path):
    data = tmp_path / "rows.csv"
    data.write_text("text,label\na,x\nb,y\n")
    return AdaptRequest(name="mine", source=data, folder=tmp_path / "ws", queries=6)


def test_the_fingerprint_names_the_data_by_its_bytes_and_leaves_out_the_workspace(request_, tmp_path):
    fp = request_fingerprint(request_)
    assert fp["source"].startswith("sha256:") and fp["queries"] == "6" and "folder" not in fp
    assert "restart" not in fp
    moved = tmp_path / "elsewhere.csv"
    moved.write_bytes(request_.source.read_bytes())
    again = AdaptRequest(name="mine", source=moved, folder=tmp_path / "other", queries=6, restart=True)
    assert request_fingerprint(again) == fp  # the same rows, wherever they lie
    moved.write_text("text,label\na,x\nc,y\n")
    assert request_fingerprint(again)["source"] != fp["source"]


@pytest.mark.parametrize(
    ("option", "path", "what"), [("source", "none.csv", "does not exist"), ("test", ".", "is a folder")]
)
def test_a_data_file_that_is_not_there_is_one_line_naming_its_option(request_, tmp_path, option, path, what):
    request = AdaptRequest(**{**asdict(request_), option: tmp_path / path})
    with pytest.raises(UdrError, match=f"^--{'from' if option == 'source' else 'test'} .* {what}") as err:
        request_fingerprint(request)
    assert "\n" not in str(err.value)


def test_steps_are_recorded_as_they_finish_and_skipped_when_resumed(request_, tmp_path):
    folder = tmp_path / "ws"
    folder.mkdir()
    record = StepRecord(folder, request_fingerprint(request_))
    (folder / STEPS_NAME).write_text(record.text())
    said, ran = [], []
    steps = Steps(said.append, StepRecord.read(folder))
    steps.run("prepare", ran.append, "prepare")
    assert steps.kept("export", lambda: "exported to x") == "exported to x"
    with pytest.raises(RuntimeError):
        steps.run("train", lambda: (_ for _ in ()).throw(RuntimeError("killed")))
    done = json.loads((folder / STEPS_NAME).read_text())["done"]
    assert set(done) == {"prepare", "export"} and done["export"]["value"] == "exported to x"

    said.clear()
    resumed = Steps(said.append, resumed_record(folder, request_fingerprint(request_), False, "ws"))
    resumed.run("prepare", ran.append, "again")
    assert resumed.kept("export", lambda: "exported again") == "exported to x"
    resumed.run("train", ran.append, "train")
    assert ran == ["prepare", "train"]  # prepare and export were not run again
    assert said[:2] == ["prepare: done before, skipped", "export: done before, skipped"]
    assert set(resumed.seconds) == {"prepare", "export", "train"}


def test_another_request_is_refused_and_restart_starts_over(request_, tmp_path):
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / STEPS_NAME).write_text(StepRecord(folder, request_fingerprint(request_)).text())
    (folder / "params.yaml").write_text("seed: 1\n")
    other = request_fingerprint(AdaptRequest(name="mine", source=request_.source, folder=folder, queries=8))
    with pytest.raises(UdrError, match=r"another request \(--queries 6, not 8\).*--restart") as err:
        resumed_record(folder, other, False, "ws")
    assert len(str(err.value).splitlines()) == 1 and (folder / "params.yaml").is_file()
    assert resumed_record(folder, other, True, "ws") is None and not folder.exists()


def test_a_folder_no_adapt_run_made_is_never_resumed_nor_removed(request_, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    for restart in (False, True):
        with pytest.raises(UdrError, match="already exists and is no udr adapt run"):
            resumed_record(folder, request_fingerprint(request_), restart, "mine")
    assert (folder / "notes.txt").read_text() == "keep me"
    (folder / STEPS_NAME).write_text('{"request": {}, "done": {"prepare": {"seconds": "soon"}}}')
    with pytest.raises(UdrError, match="malformed udr adapt step record .*--restart"):
        resumed_record(folder, request_fingerprint(request_), False, "mine")
    assert resumed_record(folder, request_fingerprint(request_), True, "mine") is None and not folder.exists()


def test_a_recorded_plan_reads_back_as_the_plan():
    plan = Plan(6, 18, 2, 10, 13, ("recommended", "sbert", "bm25"), {"score": 1.0, "train": 2.0}, "cpu x")
    assert Plan.from_dict(json.loads(json.dumps(asdict(plan)))) == plan
    assert "an estimate, not a bound" in plan.describe()
