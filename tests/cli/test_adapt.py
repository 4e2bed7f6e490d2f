"""`udr adapt` end to end on tiny models: a project that has run its pipeline, then a labelled CSV with its
own column names and a separate test file, to a recommendation table and an exported retriever, with the
project's pipeline left as it was."""

from __future__ import annotations

import csv
import json

import pytest

from tests.conftest import write_csv_task, write_params
from tests.tiny_models import save_tiny_encoder, save_tiny_lm
from udr.errors import UdrError


def write_user_csv(path, data_dir, lines: slice) -> None:
    """Rows of the mirror's subjectivity data under a user's own column names."""
    rows = (data_dir / "subj" / "train.jsonl").read_text().splitlines()[lines][:50]
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["utterance", "kind", "id"])
        for i, line in enumerate(rows):
            row = json.loads(line)
            writer.writerow([row["text"], row["label"], i])


@pytest.mark.slow
def test_adapt_takes_a_csv_and_a_test_file_to_a_recommendation_and_an_export_and_resumes(run_cli, tmp_path, data_dir):
    from udr.lm.models import resolve_model

    root = tmp_path / "project"
    root.mkdir()
    write_csv_task(root / "data" / "tasks", data_dir, "reviews", rows=40)
    write_params(
        root,
        {"reviews": {"max_train": 24, "max_test": 6}},
        data_dir,
        candidates={"k": 3},
        score={"queries_per_task": 6, "batch_tokens": 2048, "dtype": "fp32"},
        encoder={"max_query_length": 48, "max_demo_length": 64},
        train={"batch_size": 3, "micro_batch": 3, "epochs_first": 1, "warmup_steps": 0, "candidates_per_query": 3},
        mine={"k": 3, "batch_size": 8},
        evaluate={"context": 300, "max_demos": 2, "batch_tokens": 1024, "shots_tasks": [], "dtype": "fp32"},
    )
    resolve_model(str(save_tiny_lm(tmp_path / "tiny-lm")), root / "models" / "base" / "lm", kind="lm")
    resolve_model(str(save_tiny_encoder(tmp_path / "tiny-enc")), root / "models" / "base" / "encoder", kind="encoder")

    def udr(*args: str) -> tuple[str, str]:
        code, out, err = run_cli(list(args), root)
        assert code == 0, f"udr {' '.join(args)}: {err}"
        return out, err

    def one_line_error(args: list[str]) -> str:
        run_cli([], root)  # what came before is not this command's
        code, _, err = run_cli(args, root)
        assert code == 1 and len(err.strip().splitlines()) == 1, err
        return err

    assert "make run" in one_line_error(["adapt", "opinion", "--from", str(tmp_path / "none.csv")])  # no rates yet
    for stage in (["prepare"], ["candidates"], ["score"], ["train"]):
        udr(*stage)
    for method in ("random", "bm25", "sbert"):
        udr("evaluate", "--method", method)
    # no trained UDR to compare and start from: refused before anything is written
    assert "this project has no models/final" in one_line_error(["adapt", "opinion", "--from", str(tmp_path / "x")])
    udr("index")
    before = {p: p.read_bytes() for p in (root / "metrics").rglob("*") if p.is_file()}

    write_user_csv(tmp_path / "mine.csv", data_dir, slice(0, None, 160))
    write_user_csv(tmp_path / "mine-test.csv", data_dir, slice(1, None, 641))
    args = ["adapt", "opinion", "--from", str(tmp_path / "mine.csv"), "--test", str(tmp_path / "mine-test.csv")]
    args += ["--input", "utterance", "--label", "kind", "--validation", "10", "--queries", "6", "--max-train", "30"]
    # targets and rows checked before anything is written: no workspace, so the same command later runs
    from tests.locking import another_process_holding

    for bad, message in (
        (["--export", "/proc/self/x"], "cannot write export target /proc/self/x"),
        (["--export", str(tmp_path / ("n" * 300))], "longer than the file system allows"),
        (["--validation", "50"], "--validation 50"),
        (["--test", str(tmp_path / "mine.csv")], "holds the rows of --from"),
        (["--input", "kind"], "--input and --label are both column 'kind'"),
    ):
        assert message in one_line_error([*args, *bad]), bad
    with another_process_holding(root / "workspaces" / "opinion") as pid:
        assert f"pid {pid}" in one_line_error(args)
    assert not (root / "workspaces").exists()
    out, err = udr(*args, "--export", str(tmp_path / "winner"))

    assert "plan: score 6 queries (18 pairs)" in err and "minutes" in err, err
    assert "opinion: the pool keeps a seeded 30 of its 40 train rows (--max-train 30)" in err, err
    ws = root / "workspaces" / "opinion"
    report = json.loads((ws / "metrics" / "adapt.json").read_text())
    methods = [row["method"] for row in report["validation"]]
    # no per-task EPR of a new task; label-aware selection on top of SBERT and the adapted UDR (labels here)
    assert methods == ["random", "bm25", "sbert", "udr", "adapted", "sbert-labels", "adapted-labels"]
    labelled = {row["method"]: row for row in report["validation"]}
    assert all(0 <= labelled[m]["label_share"] <= 1 for m in ("sbert-labels", "adapted-labels"))
    assert "evaluate 7 retrievers on 10 validation rows" in err, err
    assert all(row["n"] == 10 for row in report["validation"])
    sbert_row = next(row for row in report["validation"] if row["method"] == "sbert")
    assert sbert_row["versus_sbert"] is None
    assert all(
        row["versus_sbert"]["low"] <= row["versus_sbert"]["high"]
        for row in report["validation"]
        if row is not sbert_row
    )
    choice = report["choice"]["method"]
    assert choice in methods and choice != "random"
    tested = [row["method"] for row in report["test"]]
    assert tested[0] == choice and {"sbert", "bm25"} <= set(tested) and all(r["n"] == 13 for r in report["test"])
    assert "Recommended" in out and (ws / "metrics" / "adapt.md").is_file()
    assert set(report["seconds"]) >= {"prepare", "score", "train", "validate adapted", f"test {choice}", "export"}
    if choice != "bm25":
        assert (tmp_path / "winner").is_dir() and any((tmp_path / "winner").iterdir())
    if choice != "bm25":  # the winner carries the task's pool, SBERT's too
        assert "pool of opinion" in report["export"]
    # In the project, the task by name is served as the run recommended (its --export recorded), said in one note.
    out, err = udr("retrieve", "a quiet film about grief", "-t", "opinion", "-k", "2", "--json")
    assert len(out.splitlines()) == 2 and err.count("udr: note: serving opinion with ") == 1, err
    # a trained winner is exported with the task's pool: the export serves the task by name
    from udr.config import load_settings
    from udr.project.adapt import export_winner

    line = export_winner(load_settings(ws / "params.yaml"), "opinion", "adapted", tmp_path / "adapted-export")
    assert "pool of opinion" in line
    query = ["retrieve", "a quiet film about grief", "-t", "opinion", "--model", str(tmp_path / "adapted-export")]
    out, _ = udr(*query, "-k", "2", "--json")
    assert len([json.loads(row) for row in out.splitlines()]) == 2
    # the project's own pipeline is as it was
    assert {p: p.read_bytes() for p in (root / "metrics").rglob("*") if p.is_file()} == before

    # The same command again: every step done, skipped; the same outcome, nothing recomputed.
    out, err = udr(*args, "--export", str(tmp_path / "winner"))
    assert "resuming" in err and "train: done before, skipped" in err and "export: done before, skipped" in err
    assert json.loads((ws / "metrics" / "adapt.json").read_text())["choice"] == report["choice"]

    # A run stopped in a middle step (validating UDR), run again, finishes with the same recommendation.
    import udr.workflows.adapt as adapt_workflow

    stopped = [*args, "--dir", str(tmp_path / "stopped")]
    real = adapt_workflow.evaluate_candidate

    def killed(settings, task, method, split, **kw):
        if (method, split) == ("udr", "validation"):
            raise UdrError("simulated kill")
        return real(settings, task, method, split, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(adapt_workflow, "evaluate_candidate", killed)
        code, _, err = run_cli(stopped, root)
        assert code == 1 and err.strip().splitlines()[-1] == "udr: error: simulated kill", err
    steps = json.loads((tmp_path / "stopped" / "adapt-steps.json").read_text())["done"]
    assert "validate sbert" in steps and "validate udr" not in steps and "export" not in steps
    adapted = tmp_path / "stopped" / "models" / "adapted" / "udr_record.json"
    trained_at = adapted.stat().st_mtime_ns
    assert "holds a udr adapt run of another request (--queries 6, not 7)" in one_line_error(
        [*stopped, "--queries", "7"]
    )
    out, err = udr(*stopped)
    assert "resuming" in err and "score: done before, skipped" in err and "validate udr: done in" in err, err
    assert adapted.stat().st_mtime_ns == trained_at  # the adapted model was not trained again
    resumed = json.loads((tmp_path / "stopped" / "metrics" / "adapt.json").read_text())
    assert resumed["choice"] == report["choice"]
    assert [(r["method"], r["score"]) for r in resumed["validation"]] == [
        (r["method"], r["score"]) for r in report["validation"]
    ]
    assert resumed["test"] == report["test"]
    assert set(resumed["seconds"]) == set(report["seconds"])

    def refuse(*_, **__):
        raise UdrError("stop")

    # --restart starts over: the run there removed, the new request's record written (stopped again at once).
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(adapt_workflow, "evaluate_candidate", killed)
        mp.setattr("udr.stages.prepare.run_prepare", refuse)
        code, _, err = run_cli([*stopped, "--queries", "7", "--restart"], root)
        assert code == 1 and err.strip().splitlines()[-1] == "udr: error: stop", err
    record = json.loads((tmp_path / "stopped" / "adapt-steps.json").read_text())
    assert record["request"]["queries"] == "7" and record["done"] == {}
    assert not (tmp_path / "stopped" / "models" / "adapted").exists()


INSTRUCTION_HINT = "give the text UDR and the LM read before each input, or leave it out"


@pytest.mark.parametrize("instruction", ["", "   "])
def test_a_blank_instruction_is_refused_by_the_request_before_anything_is_written(
    run_cli, tmp_path, data_dir, instruction
):
    """A blank --instruction is an error, not the default instruction."""
    from udr.project.adapt import AdaptRequest

    with pytest.raises(UdrError, match=f"^--instruction {instruction!r} is blank: {INSTRUCTION_HINT}$"):
        AdaptRequest(name="opinion", source="rows.csv", folder=tmp_path / "ws", instruction=instruction)
    root = tmp_path / "project"
    root.mkdir()
    write_params(root, {"sst2": {}}, data_dir)
    rows = tmp_path / "rows.csv"
    write_user_csv(rows, data_dir, slice(0, 40))
    code, _, err = run_cli(["adapt", "opinion", "--from", str(rows), "--instruction", instruction], root)
    assert code == 1 and err == f"udr: error: --instruction {instruction!r} is blank: {INSTRUCTION_HINT}\n", err
    assert not (root / "workspaces").exists()
