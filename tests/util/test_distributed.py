"""udr.util.distributed: an LM stage's precision, and the warning for bf16 on a CPU without bf16 kernels."""

from __future__ import annotations

import pytest

from udr.util import distributed
from udr.util.distributed import resolve_lm_precision


@pytest.fixture
def no_bf16_kernels(monkeypatch):
    monkeypatch.setattr(distributed, "cpu_has_bf16_kernels", lambda: False)


def test_bf16_on_a_cpu_without_bf16_kernels_warns_naming_the_parameter(no_bf16_kernels, capsys):
    assert resolve_lm_precision("cpu", "bf16", "score") == ("cpu", "bf16")  # the setting is kept
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("udr: warning: score.dtype is bf16")
    assert "`score.dtype: fp32`" in err[0]


@pytest.mark.parametrize("dtype", ["fp32", "auto"])
def test_fp32_on_cpu_does_not_warn(no_bf16_kernels, capsys, dtype):
    assert resolve_lm_precision("cpu", dtype, "evaluate") == ("cpu", "fp32")
    assert capsys.readouterr().err == ""


def test_bf16_on_a_cpu_with_bf16_kernels_does_not_warn(monkeypatch, capsys):
    monkeypatch.setattr(distributed, "cpu_has_bf16_kernels", lambda: True)
    assert resolve_lm_precision("cpu", "bf16", "evaluate") == ("cpu", "bf16")
    assert capsys.readouterr().err == ""


def test_the_kernel_check_answers_a_bool():
    assert isinstance(distributed.cpu_has_bf16_kernels(), bool)
