"""udr.project.saved_evaluations in a workspace: `udr report` takes the runs saved with `udr evaluate --save-as`
as methods of its tables, with their paired intervals against every method; a macro-F1 task shows accuracy's
paired interval beside it; `udr exp compare --metric` chooses the metric compared. The evaluations are
written here as `udr evaluate` writes them (a result and its predictions), so no model runs."""

from __future__ import annotations

import json

import polars as pl
import pytest

from tests.conftest import write_params

TASK = "opinions"
# How many of the test rows each evaluation answers right (the rest get the other label).
RIGHT = {"random": 2, "bm25": 4, "sbert": 5, "epr": 5, "udr": 6, "udr-mine": 7}


def _evaluation(ws, name: str, right: int, metric: str = "macro_f1", saved: bool = False) -> dict:
    """Write `name`'s result and predictions of the workspace's test split, its first `right` rows right."""
    from udr.data.prepare import read_prepared
    from udr.evaluation.metrics import metric_result

    rows = read_prepared(ws, TASK, "test").to_dicts()
    predictions = [
        r["target"] if i < right else next(c for c in r["choices"] if c != r["target"]) for i, r in enumerate(rows)
    ]
    result = {"method": name, "task": TASK, "kind": "classification", **metric_result(metric, predictions, rows)}
    result.update({"total_seconds": 1.0, **({"saved_as": name} if saved else {})})
    (ws / "metrics" / name).mkdir(parents=True, exist_ok=True)
    (ws / "metrics" / name / f"{TASK}.json").write_text(json.dumps(result))
    (ws / "data" / "predictions" / name).mkdir(parents=True, exist_ok=True)
    frame = pl.DataFrame({"id": [r["id"] for r in rows], "prediction": predictions})
    frame.write_parquet(ws / "data" / "predictions" / name / f"{TASK}.parquet")
    return result


@pytest.fixture
def workspace(tmp_path, data_dir, run_cli):
    """A workspace of `udr init-task` (a macro-F1 task over 40 real reviews, 8 test rows) prepared, with
    every method's evaluation and one named run, `udr-mine`, saved."""
    root = tmp_path / "project"
    root.mkdir()
    write_params(root, {"sst2": {"max_train": 20, "max_test": 6}}, data_dir, evaluate={"dtype": "fp32"})
    lines = (data_dir / "cr" / "train.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines[:12] + lines[-28:]]  # imbalanced: macro-F1 is not accuracy
    csv = tmp_path / "reviews.csv"
    pl.DataFrame({"review": [r["text"] for r in rows], "sentiment": [r["label"] for r in rows]}).write_csv(csv)
    args = ["init-task", TASK, "--from", str(csv), "--label", "sentiment", "--metric", "macro_f1"]
    assert run_cli(args, root)[0] == 0
    ws = (root / "workspaces" / TASK).resolve()
    code, _, err = run_cli(["prepare"], ws)
    assert code == 0, err
    results = {m: _evaluation(ws, m, right, saved=m == "udr-mine") for m, right in RIGHT.items()}
    return ws, results


def test_a_workspace_report_has_its_named_runs_against_every_method(workspace, run_cli):
    ws, results = workspace
    (ws / "metrics" / "notes").mkdir()  # a folder of metrics/ that is no named run
    (ws / "metrics" / "notes" / f"{TASK}.json").write_text("{}")
    code, out, err = run_cli(["report"], ws)
    assert code == 0, err
    assert "| task | kind | metric | n | random | bm25 | sbert | epr | udr | udr-mine |" in out
    assert "## udr-mine against each method" in out
    assert (
        "| task | n | udr-mine - random | udr-mine - bm25 | udr-mine - sbert | udr-mine - epr | udr-mine - udr |" in out
    )
    summary = json.loads((ws / "metrics" / "summary.json").read_text())
    named = summary["named"]["udr-mine"]
    assert set(named["minus"]) == {"random", "bm25", "sbert", "epr", "udr"}
    for method, versus in named["minus"].items():
        want = results["udr-mine"]["graded"]["score"] - results[method]["graded"]["score"]
        iv = versus["tasks"][TASK]
        assert iv["difference"] == pytest.approx(want) and iv["low"] <= iv["difference"] <= iv["high"]
    # The pipeline's own numbers are the methods' alone: the headline has no named run as a baseline.
    assert set(summary["averages"]) == {"random", "bm25", "sbert", "epr", "udr"} and "notes" not in out
    assert "udr-mine" not in (ws / "metrics" / "headline.json").read_text()

    (ws / "dvc.yaml").write_text("stages: {}\n")  # a DVC pipeline's report reads its methods alone
    code, out, err = run_cli(["report"], ws)
    assert code == 0 and "udr-mine" not in out, err


def test_accuracy_is_shown_beside_macro_f1_with_its_paired_interval(workspace, run_cli):
    ws, results = workspace
    code, out, err = run_cli(["report"], ws)
    assert code == 0, err
    accuracy = {m: r["details"]["accuracy"] for m, r in results.items()}
    assert accuracy["udr"] != results["udr"]["score"]  # macro-F1 is not accuracy here
    row = next(line for line in out.splitlines() if line.startswith(f"| {TASK} (accuracy) | classification"))
    assert f"{accuracy['udr']:.1f}" in row and f"**{accuracy['udr-mine']:.1f}**" in row
    summary = json.loads((ws / "metrics" / "summary.json").read_text())
    versus = summary["udr_minus"]["bm25"]
    assert versus["accuracy"][TASK]["difference"] == pytest.approx(accuracy["udr"] - accuracy["bm25"])
    assert versus["tasks"][TASK]["difference"] == pytest.approx(results["udr"]["score"] - results["bm25"]["score"])
    assert summary["tasks"]["udr"][TASK]["accuracy"] == accuracy["udr"]
    assert sum(line.startswith(f"| {TASK} (accuracy) | 8 |") for line in out.splitlines()) == 2  # udr's, udr-mine's

    code, out, err = run_cli(["exp", "compare", "udr-mine", "bm25", "--json"], ws)
    assert code == 0, err
    entry = json.loads(out)[TASK]
    assert entry["metric"] == "macro_f1"
    assert entry["difference"] == pytest.approx(results["udr-mine"]["score"] - results["bm25"]["score"])
    assert entry["accuracy"]["difference"] == pytest.approx(accuracy["udr-mine"] - accuracy["bm25"])
    assert entry["accuracy"]["low"] <= entry["accuracy"]["difference"] <= entry["accuracy"]["high"]
    code, out, err = run_cli(["exp", "compare", "udr-mine", "bm25"], ws)
    assert code == 0 and f"| {TASK} | 8 |" in out and f"| {TASK} (accuracy) | 8 |" in out, err


def test_exp_compare_metric_chooses_what_is_compared(workspace, run_cli):
    ws, results = workspace
    accuracy = {m: r["details"]["accuracy"] for m, r in results.items()}
    code, out, err = run_cli(["exp", "compare", "udr-mine", "bm25", "--metric", "accuracy", "--json"], ws)
    assert code == 0, err
    table = json.loads(out)
    assert table[TASK]["metric"] == "accuracy" and "accuracy" not in table[TASK]
    assert table[TASK]["difference"] == pytest.approx(accuracy["udr-mine"] - accuracy["bm25"])
    assert table["average"]["difference"] == pytest.approx(accuracy["udr-mine"] - accuracy["bm25"])
    code, out, err = run_cli(["exp", "compare", "udr-mine", "bm25", "--metric", "accuracy"], ws)
    assert code == 0 and f"| {TASK} (accuracy) | 8 | {accuracy['udr-mine']:.1f} |" in out, err
    code, own, _ = run_cli(["exp", "compare", "udr-mine", "bm25", "--metric", "macro_f1"], ws)
    assert code == 0 and own == run_cli(["exp", "compare", "udr-mine", "bm25"], ws)[1]

    # Two evaluations saved with different metrics compare by one named metric.
    _evaluation(ws, "plain", 3, metric="accuracy", saved=True)
    code, _, err = run_cli(["exp", "compare", "udr-mine", "plain"], ws)
    assert code == 1 and "was scored with different metrics" in err
    code, out, err = run_cli(["exp", "compare", "udr-mine", "plain", "--metric", "accuracy", "--json"], ws)
    assert code == 0 and json.loads(out)[TASK]["difference"] == pytest.approx(accuracy["udr-mine"] - 100 * 3 / 8)

    code, out, err = run_cli(["exp", "compare", "udr-mine", "bm25", "--metric", "bleu"], ws)
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"unknown --metric 'bleu' for {TASK} (available: macro_f1, accuracy" in err


def test_predictions_beside_an_older_result_are_a_one_line_error(workspace, run_cli):
    """An evaluation killed between its two writes leaves its new predictions beside the old result: every
    comparison that pairs them (`udr exp compare`, `udr report`) refuses it in one line naming the file, and
    writes nothing."""
    ws, _ = workspace
    older = (ws / "metrics" / "udr-mine" / f"{TASK}.json").read_text()
    _evaluation(ws, "udr-mine", RIGHT["udr-mine"] - 2, saved=True)  # the new evaluation's predictions...
    (ws / "metrics" / "udr-mine" / f"{TASK}.json").write_text(older)  # ...beside the older result
    for args in (["exp", "compare", "udr-mine", "bm25"], ["report"]):
        code, out, err = run_cli(args, ws)
        errors = [line for line in err.splitlines() if not line.startswith("udr: note:")]
        assert code == 1 and out == "" and len(errors) == 1, (args, err)
        assert f"data/predictions/udr-mine/{TASK}.parquet give a graded score of" in err, err
        assert f"evaluate udr-mine on {TASK} (test) again" in err, err
    assert not (ws / "metrics" / "results.md").exists()
