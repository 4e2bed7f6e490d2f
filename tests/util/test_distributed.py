"""udr.util.distributed: an LM stage's precision, and the notice for bf16 on a CPU without bf16 kernels."""

from __future__ import annotations

import warnings

import pytest

from udr.util import distributed
from udr.util.distributed import resolve_lm_precision
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
def test_fp32_on_cpu_says_nothing(no_bf16_kernels, dtype):
    assert _notices(lambda: resolve_lm_precision("cpu", dtype, "evaluate")) == []
    assert resolve_lm_precision("cpu", dtype, "evaluate") == ("cpu", "fp32")


def test_bf16_on_a_cpu_with_bf16_kernels_says_nothing(monkeypatch):
    monkeypatch.setattr(distributed, "cpu_has_bf16_kernels", lambda: True)
    assert _notices(lambda: resolve_lm_precision("cpu", "bf16", "evaluate")) == []
    assert resolve_lm_precision("cpu", "bf16", "evaluate") == ("cpu", "bf16")


def test_the_kernel_check_answers_a_bool():
    assert isinstance(distributed.cpu_has_bf16_kernels(), bool)
