"""What kind of machine computed a number: recorded with LM scores, whose last bits depend on it.

Imports of torch are inside the functions that use them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

import platform
from pathlib import Path


def machine_kind(device_type: str = "cpu") -> str:
    """One line naming the device's kind: the GPU's name, or the CPU's vendor, family and model with the
    matrix-kernel level torch uses on it (e.g. ``AuthenticAMD family 25 model 17, AVX512``)."""
    import torch

    if device_type == "cuda" and torch.cuda.is_available():
        return f"cuda {torch.cuda.get_device_name()}"
    info = _cpuinfo()
    parts = [info.get("vendor_id", platform.processor() or platform.machine())]
    parts += [f"{label} {info[key]}" for key, label in (("cpu family", "family"), ("model", "model")) if key in info]
    amx = "+AMX" if "amx_bf16" in _flags(info) else ""
    return f"{' '.join(parts)}, {torch.backends.cpu.get_cpu_capability()}{amx}"


def cpu_prefers_bf16(info: dict[str, str] | None = None) -> bool:
    """Whether bf16 autocast is the faster precision on this CPU (`info`: /proc/cpuinfo's first processor), as
    measured per CPU kind (docs/performance.md): yes with AMX tiles (``amx_bf16``), or on an AMD CPU with
    AVX-512 BF16 (1.6x fp32 on an EPYC); no elsewhere, an Intel CPU whose AVX-512 BF16 shows no AMX included
    (fp32 1.64x bf16 there). A static rule on the CPU's flags, never a timing, so `dtype: auto` resolves
    the same on every machine of a kind and its results stay deterministic there."""
    info = _cpuinfo() if info is None else info
    flags = _flags(info)
    return "amx_bf16" in flags or (info.get("vendor_id") == "AuthenticAMD" and "avx512_bf16" in flags)


def _flags(info: dict[str, str]) -> set[str]:
    """The CPU's feature flags in /proc/cpuinfo's fields `info`."""
    return set(info.get("flags", "").split())


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ({} where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def result_machines(results: dict[str, dict[str, dict]], reports: dict) -> list[str]:
    """The machines the results were computed on, from the files: each evaluation result's `machine` and
    each round-0 score report's (sorted; results written before evaluations recorded it name none)."""
    found = {r["machine"] for by_task in results.values() for r in by_task.values() if r.get("machine")}
    found |= {report.machine for report in reports.values() if report.machine}
    return sorted(found)


def machine_note(machines: list[str], here: str) -> str | None:
    """A one-line note where this machine is not the one the results were made on (bf16 results differ in
    their last bits between CPU kinds), else None."""
    if not machines or machines == [here]:
        return None
    return (
        f"these results were made on {'; '.join(machines)}; this machine is {here}: a run here may "
        "differ from them in the last bits (docs/reproducibility.md)"
    )
