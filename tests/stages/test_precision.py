"""The `udr precision` stage: one file per section with the device, precision and threads its params resolve to on
this machine, and the committed files are what the kind the committed results were made on writes."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO
from udr.config import load_settings
from udr.stages.precision import SECTIONS, run_precision
from udr.util import distributed


@pytest.fixture
def settings(tmp_path):
    (tmp_path / "params.yaml").write_text((REPO / "params.yaml").read_text())
    return load_settings(tmp_path / "params.yaml")


@pytest.fixture
def bf16_kernels(monkeypatch):
    monkeypatch.setattr(distributed, "cpu_has_bf16_kernels", lambda: True)  # no slow-bf16 notice


def _files(settings) -> dict[str, dict]:
    return {s: json.loads(settings.paths.precision(s).read_text()) for s in SECTIONS}


@pytest.mark.parametrize("prefers, dtype", [(True, "bf16"), (False, "fp32")])
def test_auto_is_written_as_the_cpu_kind_resolves_it(settings, bf16_kernels, monkeypatch, prefers, dtype):
    monkeypatch.setattr(distributed, "cpu_prefers_bf16", lambda: prefers)
    resolved = run_precision(settings)
    assert resolved == {s: {"device": "cpu", "dtype": dtype, "threads": 1} for s in SECTIONS}
    assert _files(settings) == resolved


def test_a_kind_resolving_otherwise_changes_the_files_bytes_and_only_a_sections_own(
    settings, bf16_kernels, monkeypatch
):
    paths = settings.paths

    def written(overrides: list[str]) -> dict[str, bytes]:
        run_precision(load_settings(settings.root / "params.yaml", overrides))
        return {s: paths.precision(s).read_bytes() for s in SECTIONS}

    monkeypatch.setattr(distributed, "cpu_prefers_bf16", lambda: True)
    bf16 = written([])
    assert written([]) == bf16  # the same kind: the same bytes
    monkeypatch.setattr(distributed, "cpu_prefers_bf16", lambda: False)
    fp32 = written([])
    assert all(fp32[s] != bf16[s] for s in SECTIONS)
    # a set precision is kept whatever the kind, and changes its own section's file only
    assert written(["train.dtype=bf16"]) == {**fp32, "train": bf16["train"]}


def test_threads_are_written_and_zero_is_this_machines_core_count(settings, bf16_kernels, monkeypatch):
    monkeypatch.setattr(distributed.os, "cpu_count", lambda: 6)
    resolved = run_precision(load_settings(settings.root / "params.yaml", ["train.threads=0", "score.threads=3"]))
    assert {s: facts["threads"] for s, facts in resolved.items()} == {"score": 3, "train": 6, "evaluate": 1}


def test_the_committed_files_are_the_committed_results_kinds(settings, bf16_kernels, monkeypatch):
    """The committed results were made in bf16 on a CPU (an Intel Xeon with AMX, where `dtype: auto` is bf16)
    with one thread a stage: dvc.lock's entries of data/precision/ must be what the stage writes there with
    params.yaml, else a `dvc repro` on that kind would re-run every evaluation."""
    monkeypatch.setattr(distributed, "cpu_prefers_bf16", lambda: True)
    run_precision(settings)
    for section in SECTIONS:
        committed = REPO / "data" / "precision" / f"{section}.json"
        assert settings.paths.precision(section).read_bytes() == committed.read_bytes(), section


def test_the_command_prints_each_sections_resolution_and_refuses_a_bad_dtype(settings, bf16_kernels, run_cli):
    code, _, err = run_cli(["precision", "-S", "evaluate.dtype=fp32", "-S", "train.dtype=bf16"], settings.root)
    assert code == 0 and "evaluate: fp32 on cpu" in err and "train: bf16 on cpu" in err  # messages: stderr
    assert _files(settings)["evaluate"] == {"device": "cpu", "dtype": "fp32", "threads": 1}
    before = settings.paths.precision("evaluate").read_bytes()
    code, _, err = run_cli(["precision", "-S", "evaluate.dtype=fp16"], settings.root)
    assert code != 0 and "evaluate.dtype" in err and len(err.strip().splitlines()) == 1
    assert settings.paths.precision("evaluate").read_bytes() == before  # nothing written
