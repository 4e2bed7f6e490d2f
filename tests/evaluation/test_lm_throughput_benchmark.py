"""benchmarks/lm_throughput.py on the tiny evaluated project: every workload row, both precisions."""

from __future__ import annotations

import pytest

from benchmarks.lm_throughput import flops_per_token, main
from tests.conftest import markdown_table
from tests.tiny_models import tiny_llama


def test_the_table_has_every_workload_and_shares_of_the_matrix_rate(evaluated, capsys):
    args = ["--params", str(evaluated / "params.yaml"), "--repeats", "1", "--shapes", "2x16", "--markdown"]
    args += ["--score-tasks", "sst2,break", "--pool-tasks", "sst2", "--pool-candidates", "3"]
    args += ["--eval-tasks", "sst2,break", "--rows", "3", "--gen-rows", "2"]
    assert main(args) == 0  # fp32 pool scores with shared prefixes on and off agree, else exit 1
    out = capsys.readouterr().out
    assert "CPU: " in out and "matrix-product rate: fp32" in out
    table = markdown_table(out)
    names = list(table)
    assert names[0].startswith("matrix products") and table[names[0]][4] == table[names[0]][7] == "100%"
    assert "decoder forward 2 x 16" in table
    assert any(n.startswith("scoring: sst2") for n in names) and any(n.startswith("scoring: break") for n in names)
    pool = [n for n in names if n.startswith("scoring a pool: sst2")]
    assert [n.endswith("off") for n in pool] == [True, False]
    assert table[pool[0]][1] == table[pool[1]][1]  # the same pairs' tokens, shared or not
    assert any(n.startswith("label prediction: sst2 (3 prompts)") for n in names)
    assert any(n.startswith("generation: break (2 prompts)") for n in names)
    for cells in table.values():
        assert int(cells[1]) > 0
        for share in (cells[4], cells[7]):
            assert share.endswith("%") and float(share[:-1]) >= 0  # a tiny model's share may round to 0.0%


def test_flops_per_token_counts_the_decoder_projections():
    model = tiny_llama()
    c = model.config
    per_layer = 2 * c.hidden_size * c.hidden_size + 2 * c.hidden_size * (
        c.hidden_size // 2
    )  # q, o; k, v (2 of 4 heads)
    per_layer += 3 * c.hidden_size * c.intermediate_size
    assert flops_per_token(model.get_decoder()) == pytest.approx(2 * c.num_hidden_layers * per_layer)


def test_bad_arguments_are_a_usage_error():
    with pytest.raises(SystemExit) as exc:
        main(["--repeats", "0"])
    assert exc.value.code == 2
