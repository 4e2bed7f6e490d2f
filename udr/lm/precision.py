"""The numeric context of the LM's scoring and prediction forwards.

Imports of torch are inside the functions that use them, to keep the start of `udr` and of its commands light.
"""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def lm_forward_context(device_type: str, bf16: bool):
    """No autograd, and bf16 autocast on `device_type` when `bf16`.

    `no_grad` rather than `inference_mode`: autocast keeps the bf16 copy of a weight for the rest of
    its context only where grad mode is merely off. Under `inference_mode` it casts every weight
    again at every linear call (a bf16 decode step of SmolLM2, 8 rows, on an AVX2 CPU: 233 ms
    with inference_mode, 211 ms without; notebook/2026-11-benchmarks.md). The kept copy is the same cast, so
    the outputs keep their bits (tested).
    """
    import torch

    with torch.no_grad(), torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16):
        yield
