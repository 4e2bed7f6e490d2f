"""torch.distributed when a stage is launched by torchrun (WORLD_SIZE > 1); a no-op otherwise.

gloo on CPU, NCCL on GPU. Stages split their work by `rank` and `world`, and meet at `barrier`.
"""

from __future__ import annotations

import os


def resolve_device_type(want: str, key: str) -> str:
    """ "cuda" or "cpu" for a device parameter (auto | cpu | cuda); `key` names it in errors."""
    import torch

    from udr.errors import UdrError

    if want == "cuda" and not torch.cuda.is_available():
        raise UdrError(f"bad parameter {key}: cuda requested but no CUDA device is available")
    return "cuda" if want == "cuda" or (want == "auto" and torch.cuda.is_available()) else "cpu"


def resolve_lm_precision(device: str, dtype: str, section: str) -> tuple[str, str]:
    """(device type, dtype) for an LM stage's `device` and `dtype` parameters: dtype auto means
    bf16 autocast on a GPU that supports it, fp32 otherwise."""
    import torch

    device_type = resolve_device_type(device, f"{section}.device")
    if dtype == "auto":
        dtype = "bf16" if device_type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    return device_type, dtype


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
