"""udr.util.distributed: a stage's precision (auto: the CPU kind's faster one), and the notice for bf16
on a CPU without bf16 kernels."""

from __future__ import annotations

import warnings

import pytest

from udr.util import distributed
from udr.util.distributed import resolve_lm_precision
from udr.util.machine import cpu_prefers_bf16
from udr.util.notice import UdrNotice


@pytest.fixture
def no_bf16_kernels(monkeypatch):
    monkeypatch.setattr(distributed, "cpu_has_bf16_kernels", lambda: False)


def test_bf16_on_a_cpu_without_bf16_kernels_notices_naming_the_parameter(no_bf16_kernels, capsys):
    with pytest.warns(UdrNotice) as caught:
        assert resolve_lm_precision("cpu", "bf16", "score") == ("cpu", "bf16")  # the setting is kept
    assert len(caught) == 1 and str(caught[0].message).startswith("score.dtype is bf16")
    assert "`score.dtype: fp32`" in str(caught[0].message)
    assert capsys.readouterr().err == ""  # from Python a warning, not a print


def _notices(call) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [str(w.message) for w in caught if issubclass(w.category, UdrNotice)]


@pytest.mark.parametrize("dtype", ["fp32", "auto"])
def test_fp32_on_cpu_says_nothing(no_bf16_kernels, monkeypatch, dtype):
    monkeypatch.setattr(distributed, "cpu_prefers_bf16", lambda: False)
    assert _notices(lambda: resolve_lm_precision("cpu", dtype, "evaluate")) == []
    assert resolve_lm_precision("cpu", dtype, "evaluate") == ("cpu", "fp32")


@pytest.mark.parametrize("prefers, expected", [(True, "bf16"), (False, "fp32")])
def test_auto_on_cpu_follows_the_cpu_kinds_faster_precision(monkeypatch, prefers, expected):
    monkeypatch.setattr(distributed, "cpu_prefers_bf16", lambda: prefers)
    assert resolve_lm_precision("cpu", "auto", "train") == ("cpu", expected)
    assert resolve_lm_precision("cpu", "fp32", "train") == ("cpu", "fp32")  # a set precision is kept


AMX = {"vendor_id": "GenuineIntel", "flags": "avx512f avx512_bf16 amx_bf16 amx_tile"}
INTEL_NO_AMX = {"vendor_id": "GenuineIntel", "flags": "avx512f avx512_bf16"}
AMD_BF16 = {"vendor_id": "AuthenticAMD", "flags": "avx512f avx512_bf16"}
AMD_AVX2 = {"vendor_id": "AuthenticAMD", "flags": "avx2 fma"}


@pytest.mark.parametrize(
    "info, expected",
    [(AMX, True), (AMD_BF16, True), (INTEL_NO_AMX, False), (AMD_AVX2, False), ({}, False)],
    ids=["intel-amx", "amd-avx512-bf16", "intel-avx512-bf16-no-amx", "amd-avx2", "no-cpuinfo"],
)
def test_the_cpu_rule_picks_bf16_where_it_was_measured_faster(info, expected):
    assert cpu_prefers_bf16(info) is expected


def test_bf16_on_a_cpu_with_bf16_kernels_says_nothing(monkeypatch):
    monkeypatch.setattr(distributed, "cpu_has_bf16_kernels", lambda: True)
    assert _notices(lambda: resolve_lm_precision("cpu", "bf16", "evaluate")) == []
    assert resolve_lm_precision("cpu", "bf16", "evaluate") == ("cpu", "bf16")


def test_the_kernel_check_answers_a_bool():
    assert isinstance(distributed.cpu_has_bf16_kernels(), bool)


def test_threads_are_the_parameter_or_the_cores_shared_among_processes(monkeypatch):
    import torch

    monkeypatch.setattr(distributed.os, "cpu_count", lambda: 8)
    assert distributed.resolve_threads(3) == 3 and distributed.resolve_threads(3, world=4) == 3
    assert distributed.resolve_threads(0) == 8 and distributed.resolve_threads(0, world=3) == 2
    assert distributed.resolve_threads(0, world=16) == 1
    before = torch.get_num_threads()
    try:
        assert distributed.use_threads(1) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
