"""The feedback curve's pieces on made-up numbers (end to end through the CLI: tests/stages/test_evaluate.py)."""

from __future__ import annotations

import pytest

from udr.errors import UdrError
from udr.evaluation.bootstrap import Interval
from udr.experiments.curve import CurvePoint, CurveRow, curve_table, parse_points, write_curve_plot


def test_points_parse_and_bad_ones_are_named():
    assert parse_points(["UDR:512=udr512", " EPR frozen:16=epr "]) == [
        CurvePoint("UDR", 512, "udr512"),
        CurvePoint("EPR frozen", 16, "epr"),
    ]
    for specs, message in (
        (["udr512"], "bad point 'udr512'"),
        (["UDR:0=x"], "QUERIES > 0"),
        (["UDR:many=x"], "bad point"),
        (["UDR:16=a", "UDR:16=b"], "point UDR:16 is given twice"),
        ([], "no point given"),
    ):
        with pytest.raises(UdrError, match=message):
            parse_points(specs)


def _rows():
    return [
        CurveRow(CurvePoint("UDR", 512, "u512"), {"a": 60.0, "b": 40.0}, Interval(5.0, 1.0, 9.0)),
        CurveRow(CurvePoint("UDR", 16, "u16"), {"a": 50.0, "b": 40.0}, Interval(0.0, -3.0, 3.0)),
        CurveRow(CurvePoint("EPR", 16, "e16"), {"a": 44.0, "b": 42.0}, Interval(-2.0, -4.0, -0.5)),
    ]


def test_the_table_puts_the_baseline_first_then_each_recipe_by_queries_and_bolds_resolved_intervals():
    table = curve_table("bm25", {"a": 50.0, "b": 40.0}, _rows(), {"a": 120, "b": 40})
    lines = table.strip().splitlines()
    assert "a (n=120)" in lines[0] and "− bm25" in lines[0]
    body = [line.split("|")[1].strip() + ":" + line.split("|")[2].strip() for line in lines[2:]]
    assert body == ["bm25:", "EPR:16", "UDR:16", "UDR:512"]
    assert "**-2.0 [-4.0, -0.5]**" in lines[3]
    assert "+0.0 [-3.0, +3.0]" in lines[4] and "**" not in lines[4]
    assert "**+5.0 [+1.0, +9.0]**" in lines[5] and "| 50.0 |" in lines[5]


def test_the_plot_is_a_png(tmp_path):
    out = tmp_path / "curve.png"
    write_curve_plot("bm25", {"a": 50.0, "b": 40.0}, _rows(), "validation", out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["curve.png"]


def test_an_existing_folder_as_out_is_one_line(run_cli, tmp_path):
    from tests.conftest import REPO

    code, _, err = run_cli(["exp", "curve", "UDR:8=udr", "-o", str(tmp_path)], REPO)
    assert code == 1 and "is a directory: give a file path" in err and len(err.strip().splitlines()) == 1, err
