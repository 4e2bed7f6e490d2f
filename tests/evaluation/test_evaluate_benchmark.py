"""benchmarks/evaluate.py on the tiny evaluated project: udr's evaluation against the plain reference."""

from __future__ import annotations

import pytest

from benchmarks.evaluate import main
from tests.conftest import markdown_table


def _table(capsys) -> dict[str, list[str]]:
    return markdown_table(capsys.readouterr().out)


def test_every_test_row_with_zero_rows_and_the_same_predictions(evaluated, capsys):
    code = main(["--project", str(evaluated), "--tasks", "sst2,break", "--rows", "0", "--gen-rows", "0", "--markdown"])
    assert code == 0  # fp32: a differing prediction would exit 1
    table = _table(capsys)
    assert table["sst2"][2] == "6" and table["sst2"][-1] == "6/6"  # max_test 6: every test row
    assert table["break"][2] == "6" and table["break"][-1] == "6/6"
    assert table["total"][2] == "12"
    assert float(table["total"][4]) > 0 and table["total"][9].endswith("x")


def test_rows_caps_the_workload(evaluated, capsys):
    assert main(["--project", str(evaluated), "--tasks", "sst2", "--rows", "2", "--markdown"]) == 0
    assert _table(capsys)["sst2"][2] == "2"


def test_negative_rows_are_an_error(evaluated, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--project", str(evaluated), "--rows", "-1"])
    assert exc.value.code == 2
    assert "--rows and --gen-rows must be >= 0" in capsys.readouterr().err
