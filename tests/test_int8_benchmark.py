"""benchmarks/int8.py: int8 schemes of the LM's decoder against bf16 autocast, speed and agreement."""

from __future__ import annotations

import pytest

from benchmarks.int8 import HEADERS, main, passes, table_rows, within_query_agreement


def test_agreement_is_within_each_query():
    keys = ["a"] * 4 + ["b"] * 3
    ref = [1.0, 2.0, 3.0, 4.0, 0.5, 0.2, 0.1]
    same = within_query_agreement(keys, ref, ref)
    assert same == {"spearman": 1.0, "top1": 1.0, "mad": 0.0}
    # query a reversed (rho -1, another top-1), query b shifted by a constant (rho 1, same top-1)
    other = [4.0, 3.0, 2.0, 1.0, 1.5, 1.2, 1.1]
    got = within_query_agreement(keys, ref, other)
    assert got["spearman"] == pytest.approx(0.0)  # the median of -1 and 1
    assert got["top1"] == 0.5
    assert got["mad"] == pytest.approx((3 + 1 + 1 + 3 + 1 + 1 + 1) / 7)


def test_the_table_and_the_bar():
    seconds = {"bf16": 10.0, "fast": 5.0, "sloppy": 4.0}
    agreement = {
        "bf16": {"spearman": 1.0, "top1": 1.0, "mad": 0.0},
        "fast": {"spearman": 0.99, "top1": 0.95, "mad": 0.01},
        "sloppy": {"spearman": 0.7, "top1": 0.5, "mad": 0.4},
    }
    rows = table_rows("scoring", seconds, 2000, agreement)
    assert [len(r) for r in rows] == [len(HEADERS)] * 3
    assert rows[1] == ["scoring", "fast", "2000", "5.0", "400", "2.00x", "0.990", "0.95", "0.010", "-"]
    assert table_rows("evaluation", {"bf16": 2.0}, 100, {"bf16": {"same": 1.0}})[0][-1] == "1.00"
    assert passes(seconds, agreement, "fast") and not passes(seconds, agreement, "sloppy")
    assert not passes({"bf16": 10.0, "fast": 7.0}, agreement, "fast")  # 1.43x: not fast enough


@pytest.mark.slow  # the evaluated project, three schemes over two tasks' pairs and prompts
def test_every_scheme_runs_on_the_tiny_project(evaluated, capsys):
    args = ["--project", str(evaluated), "--tasks", "sst2,break", "--queries", "2", "--calib-queries", "1"]
    schemes = "bf16,dyn-channel,smooth-channel"
    assert main([*args, "--rows", "2", "--gen-rows", "1", "--schemes", schemes, "--markdown"]) == 0
    lines = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    table = {(c[0].strip(), c[1].strip()): [x.strip() for x in c] for c in lines[1:]}
    assert set(table) == {(w, s) for w in ("scoring", "evaluation") for s in schemes.split(",")}
    assert table["scoring", "bf16"][5:9] == ["1.00x", "1.000", "1.00", "0.000"]
    assert table["scoring", "bf16"][2] == table["scoring", "dyn-channel"][2]  # the same pairs' tokens
    assert -1.0 <= float(table["scoring", "smooth-channel"][6]) <= 1.0
    assert table["evaluation", "bf16"][9] == "1.00"
