"""udr.experiments.tables: reading `dvc exp show --json`, the comparison and the analyses' Markdown tables."""

from __future__ import annotations

from udr.experiments.analyses import ABLATIONS, ablation_experiments
from udr.experiments.tables import comparison, experiment_rows, markdown_table, results_table, transfer_table

SHOW = [  # the shape of `dvc exp show --json` (DVC 3)
    {
        "rev": "workspace",
        "name": None,
        "data": {
            "params": {"params.yaml": {"data": {"train": {"lr": 5e-5, "loss": "paper"}, "seed": 42}}},
            "metrics": {"metrics/summary.json": {"data": {"averages": {"udr": {"all": 44.0, "generation": 28.4}}}}},
        },
        "experiments": None,
    },
    {
        "rev": "741dd0f1234",
        "name": "main",
        "data": {
            "params": {"params.yaml": {"data": {"train": {"lr": 5e-5, "loss": "paper"}, "seed": 42}}},
            "metrics": {"metrics/summary.json": {"data": {"averages": {"udr": {"all": 44.0}}}}},
        },
        "experiments": [
            {
                "name": "abl-published-loss",
                "revs": [
                    {
                        "rev": "abc",
                        "name": "abl-published-loss",
                        "data": {
                            "params": {
                                "params.yaml": {"data": {"train": {"lr": 5e-5, "loss": "published"}, "seed": 42}}
                            },
                            "metrics": {"metrics/summary.json": {"data": {"averages": {"udr": {"all": 41.5}}}}},
                        },
                    }
                ],
            }
        ],
    },
]


def test_comparison_shows_the_params_that_differ_and_the_chosen_metrics():
    rows = experiment_rows(SHOW)
    assert [r[0] for r in rows] == ["workspace", "main", "abl-published-loss"]
    header, cells = comparison(rows, None, ["averages.udr.all", "averages.udr.generation"])
    assert header == ["experiment", "changed params", "udr.all", "udr.gen"]
    assert cells[1] == ["main", "-", "44.0", "-"]
    assert cells[2] == ["abl-published-loss", "train.loss=published", "41.5", "-"]
    header, cells = comparison(rows, ["train.loss", "seed"], None)
    assert header[:3] == ["experiment", "train.loss", "seed"] and cells[2][1:3] == ["published", "42"]
    table = markdown_table(header, cells)
    assert table.splitlines()[0].startswith("| experiment | train.loss | seed | udr.all | udr.cls |")
    assert len(table.splitlines()) == 5


def test_results_table_deltas_and_rows_not_run():
    exps = ABLATIONS[:2]
    text = results_table({"sst2": 70.0, "e2e": 30.0}, {exps[0].name: {"sst2": 60.0, "e2e": 30.0}}, exps, "default")
    lines = text.splitlines()
    assert lines[2] == "| default | 70.0 | 30.0 | 50.0 |  |"
    assert lines[3].endswith("| 60.0 | 30.0 | 45.0 | -5.0 |")
    assert "not run" in lines[4]


def test_results_table_merges_the_single_task_rows():
    exps = ablation_experiments(["sst2", "e2e"])
    assert [e.name for e in exps[:3]] == ["abl-three-rounds", "abl-single-task-sst2", "abl-single-task-e2e"]
    results = {"abl-single-task-sst2": {"sst2": 65.0}}
    partial = results_table({"sst2": 70.0, "e2e": 30.0}, results, exps, "default").splitlines()
    assert len(partial) == 2 + 1 + len(ABLATIONS) + 1  # header, baseline, ablations, one single-task row
    assert partial[4].endswith("| 65.0 | not run |  |  |")
    results["abl-single-task-e2e"] = {"e2e": 20.0}
    full = results_table({"sst2": 70.0, "e2e": 30.0}, results, exps, "default").splitlines()
    assert full[4].endswith("| 65.0 | 20.0 | 42.5 | -7.5 |")


def test_results_table_shows_each_rows_interval_where_given():
    from udr.evaluation.bootstrap import Interval

    exps = ABLATIONS[:2]
    results = {e.name: {"sst2": 60.0, "e2e": 30.0} for e in exps}
    intervals = {exps[0].name: Interval(-5.0, -9.0, -1.0)}  # the second row has none: its plain delta
    lines = results_table({"sst2": 70.0, "e2e": 30.0}, results, exps, "default", intervals).splitlines()
    assert lines[0].endswith("| average | Δ average [95% CI] |")
    assert lines[3].endswith("| 45.0 | **-5.0 [-9.0, -1.0]** |")
    assert lines[4].endswith("| 45.0 | -5.0 |")


def test_transfer_table():
    lines = transfer_table(
        [("lm-a", "udr", {"sst2": 60.0, "e2e": 20.0}), ("lm-b", "udr", None)], ["sst2", "e2e"]
    ).splitlines()
    assert lines[0] == "| inference LM | method | sst2 | e2e | average |"
    assert lines[2] == "| lm-a | udr | 60.0 | 20.0 | 40.0 |" and "not run" in lines[3]


def test_transfer_table_with_intervals_against_bm25():
    from udr.evaluation.bootstrap import Interval

    rows = [("lm-a", "bm25", {"e2e": 30.0}), ("lm-a", "udr", {"e2e": 32.0}), ("lm-b", "udr", None)]
    lines = transfer_table(rows, ["e2e"], {("lm-a", "udr"): Interval(2.0, -1.0, 5.0)}).splitlines()
    assert lines[0] == "| inference LM | method | e2e | average | − bm25 [95% CI] |"
    assert lines[2] == "| lm-a | bm25 | 30.0 | 30.0 |  |"
    assert lines[3] == "| lm-a | udr | 32.0 | 32.0 | +2.0 [-1.0, +5.0] |"
    assert lines[4] == "| lm-b | udr | not run |  |  |"


def test_the_metrics_udr_exp_show_reads_are_declared_to_dvc():
    """`dvc exp show --json` carries only the top-level `metrics:` files of dvc.yaml; `udr exp show` and the
    analyses look their keys up there, in the committed summary's layout."""
    import json

    import yaml

    from tests.conftest import REPO
    from udr.experiments.tables import DEFAULT_METRICS, lookup

    declared = yaml.safe_load((REPO / "dvc.yaml").read_text())["metrics"]
    assert "metrics/summary.json" in declared and declared[0] == "metrics/headline.json"
    summary = json.loads((REPO / "metrics/summary.json").read_text())
    assert all(isinstance(lookup(summary, key), float) for key in DEFAULT_METRICS)
