"""torch.distributed when a stage is launched by torchrun (WORLD_SIZE > 1); a no-op otherwise.

gloo on CPU, NCCL on GPU. Stages split their work by `rank` and `world`, and meet at `barrier`.

Imports of torch are inside the functions that use them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

import os

from udr.errors import UdrError
from udr.util.machine import cpu_prefers_bf16
from udr.util.notice import notice


def resolve_device_type(want: str, key: str) -> str:
    """ "cuda" or "cpu" for a device parameter (auto | cpu | cuda); `key` names it in errors."""
    import torch

    if want == "cuda" and not torch.cuda.is_available():
        raise UdrError(f"bad parameter {key}: cuda requested but no CUDA device is available")
    return "cuda" if want == "cuda" or (want == "auto" and torch.cuda.is_available()) else "cpu"


def resolve_threads(threads: int, world: int = 1) -> int:
    """The torch threads a stage process computes with for a section's `threads` parameter: the number, or
    (0) one per core shared among the `world` processes of a torchrun launch."""
    return threads if threads > 0 else max(1, (os.cpu_count() or 1) // world)


def use_threads(threads: int, world: int = 1) -> int:
    """Set torch's intra-op threads for this process as `threads` resolves (:func:`resolve_threads`); returns
    the number. Results' last bits depend on it (a sum split among threads adds up in another order)."""
    import torch

    resolved = resolve_threads(threads, world)
    torch.set_num_threads(resolved)
    return resolved


def resolve_lm_precision(device: str, dtype: str, section: str) -> tuple[str, str]:
    """(device type, dtype) for a stage's `device` and `dtype` parameters: dtype auto means bf16 autocast
    on a GPU that supports it or on a CPU where it is the faster precision
    (:func:`udr.util.machine.cpu_prefers_bf16`), fp32 otherwise. bf16 on a CPU without native bf16
    products gets a notice (:func:`slow_cpu_bf16_warning`, :mod:`udr.util.notice`)."""
    import torch

    device_type = resolve_device_type(device, f"{section}.device")
    if dtype == "auto":
        fast = torch.cuda.is_bf16_supported() if device_type == "cuda" else cpu_prefers_bf16()
        dtype = "bf16" if fast else "fp32"
    if device_type == "cpu" and dtype == "bf16" and not cpu_has_bf16_kernels():
        notice(slow_cpu_bf16_warning(section))
    return device_type, dtype


def cpu_has_bf16_kernels() -> bool:
    """Whether torch runs bf16 matrix products on this CPU with oneDNN's bf16 kernels (AVX-512 or
    AMX). Without them (an AVX2-only CPU) torch falls back to a generic bf16 GEMM."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch without oneDNN, or without this private op
        return False


def slow_cpu_bf16_warning(section: str) -> str:
    """The one-line notice for bf16 autocast on a CPU without bf16 kernels."""
    return (
        f"{section}.dtype is bf16 but this CPU has no bf16 matrix kernels (AVX-512/AMX): "
        f"bf16 autocast runs several times slower than fp32 here, and its scores may differ in the last "
        f"bits from a CPU that has them; `{section}.dtype: fp32` is faster here (other scores)"
    )


class Distributed:
    def __init__(self, device_type: str):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if self.world > 1:
            import torch.distributed as dist

            if not dist.is_initialized():
                dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
            self._dist = dist

    def barrier(self) -> None:
        if self.world > 1:
            self._dist.barrier()

    def sum_gradients(self, params) -> None:
        """Sum each parameter's gradient over the processes (data parallel)."""
        if self.world > 1:
            for p in params:
                if p.grad is not None:
                    self._dist.all_reduce(p.grad)

    def sum_scalar(self, value: float) -> float:
        if self.world == 1:
            return value
        import torch

        t = torch.tensor([value], dtype=torch.float64)
        self._dist.all_reduce(t)
        return float(t[0])

    def close(self) -> None:
        if self.world > 1 and self._dist.is_initialized():
            self._dist.destroy_process_group()
