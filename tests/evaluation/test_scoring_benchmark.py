"""benchmarks/scoring.py on the tiny evaluated project: udr's scorer against the published code's route."""

from __future__ import annotations

from benchmarks.scoring import main
from tests.conftest import markdown_table


def test_both_scorers_agree_and_the_table_has_every_task(evaluated, capsys):
    # fp32: scores differing by 1e-3 or more exit with an error instead of a table
    assert main(["--project", str(evaluated), "--tasks", "sst2,break", "--pairs-per-task", "5", "--markdown"]) == 0
    table = markdown_table(capsys.readouterr().out)
    assert set(table) == {"sst2", "break", "total"}
    assert table["sst2"][1] == "classification" and table["break"][1] == "generation"
    assert table["sst2"][2] == table["break"][2] == "5" and table["total"][2] == "10"
    assert table["total"][10].endswith("x") and float(table["total"][10][:-1]) > 0
    assert float(table["total"][13]) < 1e-3  # max abs diff of the scores


def test_the_gpu_model_and_peak_run_on_a_cpu():
    """The pieces of `--device cuda --random-llama-1b --mfu` that need no GPU: the model's shape (built
    on the meta device, no memory) and the peak measurement (tiny matrices)."""
    import torch

    from benchmarks.scoring import peak_bf16_flops, random_llama_1b

    model = random_llama_1b("meta")
    assert round(sum(p.numel() for p in model.parameters()) / 1e6) == 853  # as benchmarks/README.md says
    assert model.config.num_key_value_heads == 8 and not model.config.tie_word_embeddings
    assert peak_bf16_flops(torch.device("cpu"), n=32, reps=2) > 0


def test_the_padded_engine_against_the_packed_one(evaluated, capsys):
    """`--compare packed` (the GPU kit's before / after): both engines on every candidate pair, their
    tokens/s and ratio, and scores that agree (fp32: under 1e-3, else exit 1)."""
    args = ["--project", str(evaluated), "--tasks", "sst2,break", "--pairs-per-task", "0", "--compare", "packed"]
    assert main([*args, "--batch-tokens", "512", "--packed-tokens", "1024", "--markdown"]) == 0
    out = capsys.readouterr().out
    table = markdown_table(out)
    assert set(table) == {"sst2", "break", "total"}
    assert int(table["total"][2]) == int(table["sst2"][2]) + int(table["break"][2]) > 10
    assert table["total"][8].endswith("x") and float(table["total"][8][:-1]) > 0
    assert float(table["total"][11]) < 1e-3  # max abs diff of the two engines' scores
    assert table["total"][10] == "0.0%"  # the packed engine pads nothing on a CPU (dense masks)
    assert "packed: rows of 1024 tokens, sdpa attention" in out


def test_the_profile_of_each_engine_on_a_cpu(evaluated, capsys):
    """benchmarks/gpu/profile_scoring.py on a CPU: one row per engine, every pair profiled, no device
    events (so no busy share), and the host operators that took the most time."""
    from benchmarks.gpu.profile_scoring import main as profile

    args = ["--project", str(evaluated), "--device", "cpu", "--task", "sst2", "--pairs", "6"]
    assert profile([*args, "--batch-tokens", "512", "--packed-tokens", "1024", "--markdown"]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| project LM")]
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
    assert [c[1] for c in cells] == ["padded", "packed (sdpa)"]
    assert all(c[2] == "6" and float(c[4]) > 0 and c[6] == "-" for c in cells)
    assert all(c[11].startswith("host: aten::") for c in cells)
