"""udr.stages.report names the machines its results were made on, from the files, and says when this
machine is another."""

from __future__ import annotations

from udr.util.machine import machine_note


def test_a_run_on_another_cpu_is_told_its_results_may_differ_in_the_last_bits():
    amd, intel = "AuthenticAMD family 25 model 17, AVX512", "GenuineIntel family 6 model 167, AVX512+AMX"
    assert machine_note([intel], intel) is None
    assert machine_note([], intel) is None  # results that name no machine: nothing to compare
    note = machine_note([amd], intel)
    assert note is not None and amd in note and intel in note and "last bits" in note
    assert "\n" not in note
    assert machine_note([amd, intel], intel) is not None  # made on two kinds: this one is not all of them
