"""`udr report` on the evaluated tiny project: summary, results table and shots plot."""

from __future__ import annotations

import json

import pytest

from tests.conftest import EVAL_METHODS as METHODS
from tests.conftest import EVAL_TASKS as TASKS
from tests.conftest import UNSEEN_TASK
from udr.paths import PER_TASK_METHODS


def test_report_table_summary_and_plot(evaluated):
    summary = json.loads((evaluated / "metrics" / "summary.json").read_text())
    assert set(summary["tasks"]) == set(METHODS)
    for method in METHODS:
        scores = [summary["tasks"][method][t]["graded"] for t in TASKS]
        assert summary["averages"][method]["all"] == pytest.approx(sum(scores) / 2)
    table = (evaluated / "metrics" / "results.md").read_text()
    assert "| task | kind | metric | n | random | bm25 | sbert | dr-target | epr | udr |" in table
    assert "exact_match / token_f1" in table and "average, all tasks" in table
    assert (evaluated / "metrics" / "plots" / "shots.png").stat().st_size > 1000
    csv = (evaluated / "metrics" / "plots" / "shots" / "sst2.csv").read_text().splitlines()
    assert csv[0] == "demos,bm25,udr" and len(csv) == 4


def test_report_compares_udr_with_every_baseline_from_the_predictions(evaluated):
    summary = json.loads((evaluated / "metrics" / "summary.json").read_text())
    versus = summary["udr_minus"]
    assert set(versus) == set(METHODS) - {"udr"}
    for baseline, entry in versus.items():
        for task in TASKS:
            iv = entry["tasks"][task]
            want = summary["tasks"]["udr"][task]["graded"] - summary["tasks"][baseline][task]["graded"]
            assert iv["difference"] == pytest.approx(want)
            assert iv["low"] <= iv["high"] and iv["resolved"] == (iv["low"] > 0 or iv["high"] < 0)
        mean = sum(entry["tasks"][t]["difference"] for t in TASKS) / len(TASKS)
        assert entry["all"]["difference"] == pytest.approx(mean)
    table = (evaluated / "metrics" / "results.md").read_text()
    assert "## UDR against each baseline" in table and "| task | n | udr - random | udr - bm25 |" in table


def test_unseen_task_gets_its_own_table_row_and_stays_out_of_the_averages(evaluated):
    summary = json.loads((evaluated / "metrics" / "summary.json").read_text())
    assert set(summary["tasks"]["udr"]) == set(TASKS)  # the main table: trained-on tasks only
    unseen = summary["unseen"]
    unseen_methods = [m for m in METHODS if m not in PER_TASK_METHODS]  # no per-task model of an unseen task
    assert set(unseen["tasks"]) == set(unseen_methods)
    for method in unseen_methods:
        result = json.loads((evaluated / "metrics" / method / f"{UNSEEN_TASK}.json").read_text())
        assert unseen["tasks"][method] == {
            UNSEEN_TASK: {"metric": "accuracy", "score": result["score"], "graded": result["score"], "n": 6}
        }
        assert unseen["averages"][method]["all"] == pytest.approx(result["score"])
    want = unseen["tasks"]["udr"][UNSEEN_TASK]["graded"] - unseen["tasks"]["bm25"][UNSEEN_TASK]["graded"]
    assert unseen["udr_minus"]["bm25"]["tasks"][UNSEEN_TASK]["difference"] == pytest.approx(want)
    table = (evaluated / "metrics" / "results.md").read_text()
    main, _, rest = table.partition("# Unseen tasks")
    assert f"| {UNSEEN_TASK} |" not in main
    row = next(line for line in rest.splitlines() if line.startswith(f"| {UNSEEN_TASK} | classification"))
    assert row.count("|") == 9  # task, kind, metric, n and the four methods with a retriever of it
    assert "## UDR against each baseline, unseen tasks" in rest and "**average, unseen tasks**" in rest
    # Never scored, never trained on: no candidates, no scores; but UDR's index has its pool.
    assert not (evaluated / "data" / "scores" / "round0" / f"{UNSEEN_TASK}.parquet").exists()
    assert not (evaluated / "data" / "candidates" / "round0" / f"{UNSEEN_TASK}.parquet").exists()
    assert any(UNSEEN_TASK in p.name for p in (evaluated / "models" / "final").rglob("*"))


def test_wilson_interval_matches_a_known_value_and_stays_in_range():
    from udr.evaluation.bootstrap import wilson_interval

    low, high = wilson_interval(0.8, 80)  # 64 / 80: Wilson, z = 1.96, gives [0.6995, 0.8730]
    assert (round(low, 4), round(high, 4)) == (0.6995, 0.8730)
    assert wilson_interval(1.0, 10)[1] == pytest.approx(1.0) and wilson_interval(0.0, 10)[0] == pytest.approx(0.0)
    assert wilson_interval(0.99, 5)[0] >= 0.0 and wilson_interval(0.99, 5)[1] <= 1.0
    assert wilson_interval(0.5, 0) == (0.0, 1.0)


def test_headline_is_flat_and_agrees_with_the_summary(evaluated):
    summary = json.loads((evaluated / "metrics/summary.json").read_text())
    head = json.loads((evaluated / "metrics/headline.json").read_text())
    assert all(isinstance(v, float) for v in head.values()) and len(head) <= 20
    for method, averages in summary["averages"].items():
        assert head[method] == round(averages["all"], 1)
    best = max(
        (m for m in summary["averages"] if m not in ("udr", "random")), key=lambda m: summary["averages"][m]["all"]
    )
    assert head["udr-best"] == round(summary["udr_minus"][best]["all"]["difference"], 1)
    assert head["udr-best_low"] <= head["udr-best"] <= head["udr-best_high"]
    assert head["unseen_udr"] == round(summary["unseen"]["averages"]["udr"]["all"], 1)


def test_headline_table_puts_this_run_beside_a_committed_experiment(evaluated, tmp_path):
    from udr.config import load_settings
    from udr.evaluation.headline import beside_columns, headline_markdown
    from udr.stages.report import run_column, score_reports

    summary = json.loads((evaluated / "metrics/summary.json").read_text())
    table = (evaluated / "metrics/headline.md").read_text()
    assert table.startswith("| | this run |") and "| udr − bm25 |" in table and "| **unseen tasks**" in table
    other = {**summary, "label": "larger test sets", "scored_queries_per_task": 1000, "epochs": 3}
    other["udr_minus"] = {"bm25": {"all": {"difference": 5.1, "low": 3.4, "high": 7.0, "resolved": True}}}
    (tmp_path / "other.json").write_text(json.dumps(other))
    settings = load_settings(evaluated / "params.yaml")
    this_run = run_column(settings, summary, score_reports(settings))
    columns = [this_run, *beside_columns(tmp_path, ["other.json", "missing.json"])]
    lines = headline_markdown(columns).splitlines()
    assert lines[0] == "| | this run | larger test sets |" and len(columns) == 2
    assert "| udr − bm25 | " in "\n".join(lines) and lines[-1].count("|") == 4
    row = next(line for line in lines if line.startswith("| udr − bm25 |"))
    assert row.endswith("| **+5.1 [+3.4, +7.0]** |")
    feedback = next(line for line in lines if line.startswith("| LM feedback"))
    assert f"| {settings.score.queries_per_task} (scored here) | 1000 |" in feedback


@pytest.mark.parametrize("text", ['{"label": ' + "[" * 100_000 + "]" * 100_000 + "}", "[1, 2]", '{"label": "x"'])
def test_a_beside_summary_that_does_not_parse_is_a_one_line_error(tmp_path, text):
    from udr.errors import UdrError
    from udr.evaluation.headline import beside_columns

    (tmp_path / "other.json").write_text(text)
    with pytest.raises(UdrError, match=r"^unreadable evaluate.beside summary .*other.json: ") as info:
        beside_columns(tmp_path, ["other.json"])
    assert "\n" not in str(info.value)


def test_results_that_do_not_parse_are_one_line_errors_in_the_report(evaluated, tmp_path, run_cli):
    import shutil

    project = tmp_path / "p"
    shutil.copytree(evaluated, project)
    (project / "metrics/bm25/sst2.json").write_text('{"metric": ' + "[" * 100_000 + "]" * 100_000 + "}")
    code, _, err = run_cli(["report"], project)
    assert code == 1 and "unreadable result" in err and "bm25/sst2.json" in err, err
    assert len(err.strip().splitlines()) == 1, err
