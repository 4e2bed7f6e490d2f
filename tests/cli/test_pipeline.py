"""The `udr` CLI: commands listed, errors are one line with a non-zero exit, and an end-to-end
prepare + candidates run on two real tasks with small caps."""

from __future__ import annotations

import polars as pl

from tests.conftest import write_params


def _one_line_error(code: int, err: str, *needles: str) -> None:
    assert code != 0
    lines = [l for l in err.strip().splitlines() if l.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("udr: error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_help_lists_commands(run_cli, tmp_path):
    code, out, _ = run_cli(["--help"], tmp_path)
    assert code == 0
    for command in ("tasks", "prepare", "models", "candidates"):
        assert command in out


def test_tasks_table_shows_mirrored_tasks_available(run_cli, tmp_path, data_dir, capsys):
    write_params(tmp_path, {"sst2": {}}, data_dir)
    code, out, _ = run_cli(["tasks"], tmp_path)
    assert code == 0
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 3}
    for folder in data_dir.iterdir():
        if folder.is_dir():
            assert "yes" in rows[folder.name].split("│")[7], rows[folder.name]
    assert rows["sst2"].split("│")[6].strip() == "built-in" and rows["sst2"].split("│")[8].strip() == "trained"
    assert "yes (built)" in rows["python_code"]
    assert "hub only" in rows["mnli"]


def test_tasks_refuses_a_params_file_given_that_is_missing(run_cli, tmp_path):
    code, out, err = run_cli(["tasks", "-p", "nosuch.yaml"], tmp_path)
    _one_line_error(code, err, "params file not found: nosuch.yaml")
    assert out == ""
    code, out, err = run_cli(["tasks"], tmp_path)  # no params.yaml here, none given: the registry alone
    assert code == 0 and "note: params file not found: params.yaml" in err and "sst2" in out


def test_unknown_task(run_cli, tmp_path, data_dir):
    write_params(tmp_path, {"sst2": {}}, data_dir)
    code, _, err = run_cli(["prepare", "--task", "nosuchtask"], tmp_path)
    _one_line_error(code, err, "unknown task 'nosuchtask'", "sst2")


def test_unknown_task_in_params(run_cli, tmp_path, data_dir):
    write_params(tmp_path, {"sst2": {}, "nosuchtask": {}}, data_dir)
    code, _, err = run_cli(["prepare"], tmp_path)
    _one_line_error(code, err, "unknown task 'nosuchtask'")


def test_bad_param(run_cli, tmp_path, data_dir):
    write_params(tmp_path, {"sst2": {}}, data_dir)
    code, _, err = run_cli(["prepare", "--set", "prepare.tasks.sst2.max_train=-5"], tmp_path)
    _one_line_error(code, err, "bad parameter prepare.tasks.sst2.max_train")
    code, _, err = run_cli(["candidates", "-S", "candidates.kk=3"], tmp_path)
    _one_line_error(code, err, "bad parameter candidates.kk", "unknown key")


def test_missing_data_directory(run_cli, tmp_path, monkeypatch):
    monkeypatch.delenv("UDR_DATA_DIR", raising=False)
    write_params(tmp_path, {"sst2": {}}, tmp_path / "no-data-here")
    code, _, err = run_cli(["prepare"], tmp_path)
    _one_line_error(code, err, "data directory not found", "no-data-here")
    assert not (tmp_path / "data").exists()


def test_malformed_row(run_cli, tmp_path):
    mirror = tmp_path / "mirror" / "trec"
    mirror.mkdir(parents=True)
    (mirror / "train.jsonl").write_text('{"text": "Who?", "label": "HUM"}\n{"text": "What?", "label": 7}\n')
    (mirror / "test.jsonl").write_text('{"text": "Where?", "label": "LOC"}\n')
    write_params(tmp_path, {"trec": {}}, tmp_path / "mirror")
    code, _, err = run_cli(["prepare"], tmp_path)
    _one_line_error(code, err, "trec/train.jsonl:2: malformed row", "unknown label 7")
    assert not (tmp_path / "data" / "prepared" / "trec").exists()


def test_candidates_without_prepared_data(run_cli, tmp_path, data_dir):
    write_params(tmp_path, {"sst2": {}}, data_dir)
    code, _, err = run_cli(["candidates"], tmp_path)
    _one_line_error(code, err, "missing prepared data", "udr prepare --task sst2")


def test_models_unknown_role(run_cli, tmp_path, data_dir):
    write_params(tmp_path, {"sst2": {}}, data_dir)
    code, _, err = run_cli(["models", "--role", "critic"], tmp_path)
    _one_line_error(code, err, "unknown model role 'critic'")


def test_end_to_end_prepare_and_candidates_two_real_tasks(run_cli, tmp_path, data_dir):
    write_params(
        tmp_path,
        {"trec": {"max_train": 40, "max_test": 12}, "break": {"max_train": 30, "max_test": 8}},
        data_dir,
        candidates={"k": 5, "field": "paper"},
    )
    code, _, err = run_cli(["prepare"], tmp_path)
    assert code == 0, err
    code, _, err = run_cli(["candidates"], tmp_path)
    assert code == 0, err
    for task, n_train, n_test in (("trec", 40, 12), ("break", 30, 8)):
        train = pl.read_parquet(tmp_path / f"data/prepared/{task}/train.parquet")
        test = pl.read_parquet(tmp_path / f"data/prepared/{task}/test.parquet")
        assert (len(train), len(test)) == (n_train, n_test)
        cands = pl.read_parquet(tmp_path / f"data/candidates/round0/{task}.parquet")
        assert len(cands) == n_train * 5
        assert set(cands["query_id"]) == set(train["id"]) and set(cands["candidate_id"]) <= set(train["id"])
        assert (cands["query_id"] != cands["candidate_id"]).all()
    # an override changes only what it names
    code, _, err = run_cli(["prepare", "-t", "trec", "-S", "prepare.tasks.trec.max_train=20"], tmp_path)
    assert code == 0, err
    assert len(pl.read_parquet(tmp_path / "data/prepared/trec/train.parquet")) == 20
    assert len(pl.read_parquet(tmp_path / "data/prepared/break/train.parquet")) == 30


def test_ctrl_c_exits_130_with_a_message(run_cli, tmp_path, data_dir, monkeypatch):
    import udr.cli.pipeline

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    write_params(tmp_path, {"sst2": {}}, data_dir)
    monkeypatch.setattr(udr.cli.pipeline, "load", interrupted)
    code, _, err = run_cli(["prepare"], tmp_path)
    assert code == 130 and err.strip() == "udr: interrupted"
