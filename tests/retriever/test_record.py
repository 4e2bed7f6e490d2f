"""udr.retriever.record and named runs: every trained model carries its record, `--out` / `--init` train a
model of one's own, a run from another params file never replaces the pipeline's models unasked, and the
model card of an export is written from the model's record (udr.serving.model_card)."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml


@pytest.fixture
def project(looped, tmp_path):
    """A private copy of the looped project, with a second params file training on break only."""
    root = tmp_path / "proj"
    shutil.copytree(looped, root)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["train"]["tasks"] = ["break"]
    params["train"]["later_rounds"] = {}
    (root / "params-news.yaml").write_text(yaml.safe_dump(params))
    return root


def _record(model_dir):
    return json.loads((model_dir / "udr_record.json").read_text())


def test_every_trained_model_records_what_it_learned_from(looped):
    from udr.retriever.record import rounds, trained_tasks

    r0, r1, final = (_record(looped / p) for p in ("models/rounds/round0", "models/rounds/round1", "models/final"))
    assert r0["method"] == "udr" and r0["round"] == 0 and r0["params_file"] == "params.yaml"
    assert r0["tasks"] == {"sst2": 8, "break": 8} and r0["init"] == {"base": r0["models"]["encoder"]}
    assert r0["score"]["queries_per_task"] == 8 and r0["candidates"]["k"] == 5 and r0["steps"] > 0
    assert r1["round"] == 1 and r1["init"] == r0  # a later round keeps the record of the one it continued
    assert [r["round"] for r in rounds(final)] == [0, 1] and trained_tasks(final) == {"sst2": 8, "break": 8}
    assert final["index"] == {"pools": {"sst2": 24, "break": 24}}


def test_another_params_file_cannot_replace_the_pipelines_models(project, run_cli):
    before = (project / "models/final/query/model.safetensors").read_bytes()
    for args in (["train", "-r", "0", "-p", "params-news.yaml"], ["index", "-p", "params-news.yaml"]):
        code, _, err = run_cli(args, project)
        assert code == 1 and "made from params.yaml, and this run reads params-news.yaml" in err, err
        assert "--out DIR" in err and len(err.strip().splitlines()) == 1
    assert (project / "models/final/query/model.safetensors").read_bytes() == before
    assert _record(project / "models/rounds/round0")["params_file"] == "params.yaml"


def test_a_named_run_trains_indexes_and_evaluates_beside_the_default(project, run_cli):
    final = project / "models/final"
    before = {p: p.read_bytes() for p in final.rglob("*") if p.is_file()}
    code, _, err = run_cli(["train", "-r", "0", "-p", "params-news.yaml", "--out", "models/news"], project)
    assert code == 0, err
    news = project / "models/news"
    record = _record(news)
    assert record["tasks"] == {"break": 8} and record["params_file"] == "params-news.yaml"
    assert (project / "metrics/train/runs/news/summary.json").is_file()  # beside the pipeline's logs, never theirs
    code, _, err = run_cli(["index", "-p", "params-news.yaml", "--model", "models/news", "-t", "break"], project)
    assert code == 1 and "run `udr index` (every task) first" in err
    code, out, err = run_cli(["index", "-p", "params-news.yaml", "--model", "models/news"], project)
    assert code == 0, err
    assert (news / "index/break.npy").is_file() and _record(news)["index"]["pools"] == {"sst2": 24, "break": 24}
    code, _, err = run_cli(["evaluate", "-m", "udr", "-t", "break", "--model", "models/news", "--limit", "2"], project)
    assert code == 0 and "over 2 test examples" in err, err
    assert {p: p.read_bytes() for p in final.rglob("*") if p.is_file()} == before  # the default model untouched


def test_init_continues_a_trained_model(project, run_cli):
    code, _, err = run_cli(
        ["train", "-r", "0", "-p", "params-news.yaml", "--out", "models/more", "--init", "models/final"], project
    )
    assert code == 0, err
    record = _record(project / "models/more")
    assert record["init"]["round"] == 1 and record["init"]["index"]["pools"]["sst2"] == 24
    code, _, err = run_cli(["train", "-r", "0", "--out", "models/x", "--init", "models/base/encoder"], project)
    assert code == 1 and "--init takes a trained udr bi-encoder directory" in err


def test_replace_overwrites_when_asked(project, run_cli):
    code, _, err = run_cli(["train", "-r", "0", "-p", "params-news.yaml", "--replace"], project)
    assert code == 0, err
    assert _record(project / "models/rounds/round0")["params_file"] == "params-news.yaml"


def test_the_card_describes_the_exported_model_not_the_project(project, run_cli, tmp_path):
    pytest.importorskip("sentence_transformers", reason="the sentence-transformers extra is not installed")
    code, _, err = run_cli(["train", "-r", "0", "-p", "params-news.yaml", "--out", "models/news"], project)
    assert code == 0, err
    code, _, err = run_cli(["export", str(tmp_path / "news-st"), "--model", "models/news"], project)
    assert code == 0, err
    card = (tmp_path / "news-st/README.md").read_text()
    assert "| break | trained on (8 scored queries) | generation |" in card
    assert "| sst2 | served, never trained on | classification |" in card  # the project's task, not trained on
    assert "No evaluation of this model was found" in card
    assert "from `params-news.yaml`" in card
    assert "E_d frozen" not in card  # the looped project trains both encoders
    frozen = ["-p", "params-news.yaml", "--out", "models/frozen", "-S", "train.freeze_demo_encoder=true"]
    code, _, err = run_cli(["train", "-r", "0", *frozen], project)
    assert code == 0, err
    code, _, err = run_cli(["export", str(tmp_path / "frozen-st"), "--model", "models/frozen"], project)
    assert code == 0, err
    assert "seed 42; E_d frozen (only E_q learned)." in (tmp_path / "frozen-st/README.md").read_text()


def test_train_and_index_refuse_a_folder_they_did_not_make(project, run_cli):
    """`--out models`, a folder of the user's files, and the project itself are one-line errors, every
    file untouched; a folder `udr train` made is still replaced."""
    mine = project / "mydocs"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")

    def tree():
        return sorted(str(p.relative_to(project)) for p in project.rglob("*") if ".partial" not in p.name)

    before = tree()
    for args, refused in [
        (["train", "-r", "0", "--out", "models"], "models holds other files and is not a udr bi-encoder"),
        (["train", "-r", "0", "--out", "mydocs"], "mydocs holds other files and is not a udr bi-encoder"),
        (["train", "-r", "0", "--out", "."], "it holds the current directory"),
        (["index", "--out", "models"], "models holds other files and is not a udr bi-encoder"),
        (["index", "--out", "mydocs"], "mydocs holds other files and is not a udr bi-encoder"),
        (["index", "--out", str(project)], "it holds the current directory"),
        (["index", "--model", "models/final", "--out", "models/base"], "is not a udr bi-encoder"),
    ]:
        code, _, err = run_cli(args, project)
        assert code == 1 and refused in err and len(err.strip().splitlines()) == 1, (args, err)
    assert tree() == before and (mine / "notes.txt").read_text() == "keep me"
    code, _, err = run_cli(["index", "--model", "models/rounds/round0", "--out", "models/final"], project)
    assert code == 0, err


def test_the_card_reads_evaluations_saved_under_a_name(project, run_cli):
    """`udr evaluate --model M --save-as NAME` is an evaluation of M: the model card lists it."""
    from udr.config import load_settings
    from udr.serving.model_card import model_card

    code, _, err = run_cli(["train", "-r", "0", "-p", "params-news.yaml", "--out", "models/news"], project)
    assert code == 0, err
    args = ["evaluate", "-m", "udr", "-t", "break", "--model", "models/news", "--save-as", "news"]
    code, _, err = run_cli(args, project)
    assert code == 0 and "(saved as news)" in err, err
    settings = load_settings(project / "params-news.yaml")
    card = model_card(settings, project / "models/news", "me/news")
    assert "No evaluation of this model was found" not in card
    assert "| break | news | " in card


def test_a_params_file_of_the_same_name_in_another_project_cannot_replace_a_model(project, run_cli, tmp_path):
    """The guard compares the project too: another directory's params.yaml does not replace a recorded
    model unasked; a project moved since (the model lies in it) still replaces its own."""
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(project / "params.yaml", other / "params.yaml")
    before = (project / "models/final/query/model.safetensors").read_bytes()
    for args in (
        ["train", "-r", "0", "-p", str(other / "params.yaml"), "--out", str(project / "models/final")],
        ["index", "-p", str(other / "params.yaml"), "--model", str(project / "models/final")],
    ):
        code, _, err = run_cli(args, tmp_path)
        made = _record(project / "models/final")["project"]  # relative to the model folder: no machine path
        assert not made.startswith("/") and (project / "models/final" / made).resolve() == project.resolve()
        assert code == 1 and "made from proj/params.yaml, and this run reads other/params.yaml" in err, err
        assert len(err.strip().splitlines()) == 1
    assert (project / "models/final/query/model.safetensors").read_bytes() == before
    from udr.config import load_settings
    from udr.retriever.record import check_replace

    settings = load_settings(project / "params.yaml")
    check_replace(project / "models/final", settings.params_file, settings.root, replace=False)  # moved: its own


def test_the_cards_snippets_quote_any_name(looped):
    """`--name` goes into the card's Python snippets as a string literal, quotes and line breaks included."""
    import re

    from udr.config import load_settings
    from udr.serving.model_card import model_card

    name = 'me/x")\nimport os  # "'
    card = model_card(load_settings(looped / "params.yaml"), looped / "models/final", name)
    for block in re.findall(r"```python\n(.*?)```", card, re.S):
        compile(block, "model card", "exec")  # no syntax error: the name stayed one literal
    assert "SentenceTransformer(" + json.dumps(name) + ")" in card and "\nimport os" not in card


def test_a_deeply_nested_or_malformed_record_is_one_line(tmp_path):
    from udr.errors import UdrError
    from udr.retriever.record import read_record, trained_tasks

    (tmp_path / "udr_record.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UdrError, match="unreadable model record"):
        read_record(tmp_path)
    with pytest.raises(UdrError, match=r"malformed model record: its tasks are 'sst2'"):
        trained_tasks({"method": "udr", "tasks": "sst2"})


def _tree(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_an_out_path_through_dotdot_is_resolved_before_anything_is_derived_from_it(project, run_cli):
    metrics = _tree(project / "metrics")
    for out in ("nosuch/..", "models/nosuch/../..", "metrics/train/.."):
        code, _, err = run_cli(["train", "-r", "0", "-p", "params-news.yaml", "--out", out], project)
        assert code == 1 and len(err.strip().splitlines()) == 1, err
        assert "nothing was written" in err or "holds other files" in err, err
    assert _tree(project / "metrics") == metrics  # no log folder removed, nothing written


@pytest.mark.parametrize("name", ["round0", "epr"])
def test_a_named_run_never_replaces_the_pipelines_own_training_log(project, run_cli, name):
    pipeline_log = project / "metrics/train" / name
    before = _tree(pipeline_log)
    code, _, err = run_cli(["train", "-r", "0", "-p", "params-news.yaml", "--out", f"elsewhere/{name}"], project)
    assert code == 0, err
    assert _tree(pipeline_log) == before
    assert (project / "metrics/train/runs" / name / "summary.json").is_file()


def test_two_model_folders_of_one_name_never_share_a_log(project, run_cli, tmp_path):
    """A named run's identity is its whole target: `--out ../x/run1` owns metrics/train/runs/run1, and
    `--out ../y/run1` is refused in one line, the first run's log as it was."""
    args = ["train", "-r", "0", "-p", "params-news.yaml", "--out"]
    code, _, err = run_cli([*args, str(tmp_path / "x" / "run1")], project)
    assert code == 0, err
    log = project / "metrics/train/runs/run1"
    assert (log / "model.txt").read_text().strip() == str((tmp_path / "x" / "run1").resolve())
    before = _tree(log)
    code, _, err = run_cli([*args, str(tmp_path / "y" / "run1")], project)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "training log of the model folder" in err and str(tmp_path / "x" / "run1") in err, err
    assert not (tmp_path / "y" / "run1").exists() and _tree(log) == before
    code, _, err = run_cli([*args, str(tmp_path / "x" / "run1")], project)  # the same target again: its own log
    assert code == 0, err
    assert (log / "model.txt").read_text().strip() == str((tmp_path / "x" / "run1").resolve())


def test_a_named_run_refused_before_training_claims_no_name(project, run_cli, tmp_path):
    """A named run that fails on its inputs (scores of another seed) leaves no log claiming its name: another
    model folder of that name trains afterwards."""
    args = ["train", "-r", "0", "-p", "params-news.yaml", "--out"]
    code, _, err = run_cli([*args, str(tmp_path / "x" / "run3"), "--set", "seed=43"], project)
    assert code == 1 and "seed" in err and len(err.strip().splitlines()) == 1, err
    assert not (project / "metrics/train/runs/run3").exists()
    code, _, err = run_cli([*args, str(tmp_path / "y" / "run3")], project)
    assert code == 0, err
    log = project / "metrics/train/runs/run3"
    assert (log / "model.txt").read_text().strip() == str((tmp_path / "y" / "run3").resolve())


@pytest.mark.parametrize("held", ["model", "log"])
def test_a_named_run_another_process_writes_is_refused_naming_its_pid(project, run_cli, tmp_path, held):
    from tests.locking import another_process_holding

    out = tmp_path / "run2"
    target = out if held == "model" else project / "metrics/train/runs/run2"
    with another_process_holding(target) as pid:
        code, _, err = run_cli(["train", "-r", "0", "-p", "params-news.yaml", "--out", str(out)], project)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert f"pid {pid}" in err and ("model folder" if held == "model" else "training log") in err, err
    assert not out.exists()
