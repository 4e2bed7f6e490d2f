"""udr.lm.precision: under bf16, each weight is cast once per context (not once per call), and the
forwards keep their bits."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.tiny_models import tiny_llama
from udr.lm.precision import lm_forward_context


class WeightCasts(TorchDispatchMode):
    """Counts fp32 -> bf16 copies of tensors shaped like one of `shapes`."""

    def __init__(self, shapes):
        super().__init__()
        self.shapes, self.count = set(shapes), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # inference mode dispatches the composite `to`, grad mode its `_to_copy`
        is_cast = func in (torch.ops.aten._to_copy.default, torch.ops.aten.to.dtype)
        if is_cast and args[0].dtype == torch.float32 and out.dtype == torch.bfloat16:
            self.count += tuple(args[0].shape) in self.shapes
        return out


def _two_forwards(model, context):
    ids = torch.tensor([[5, 9, 11, 3, 7, 2]])
    with context:
        return [model(input_ids=ids).logits for _ in range(2)]


def test_each_linear_weight_is_cast_once_per_context():
    model = tiny_llama(seed=1)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    shapes = {tuple(m.weight.shape) for m in linears}
    with WeightCasts(shapes) as cached:
        _two_forwards(model, lm_forward_context("cpu", bf16=True))
    with WeightCasts(shapes) as uncached, torch.inference_mode():  # inference_mode: a cast at every call
        _two_forwards(model, torch.autocast("cpu", dtype=torch.bfloat16))
    assert cached.count == len(linears)
    assert uncached.count == 2 * len(linears)


def test_outputs_are_bitwise_those_of_autocast_in_inference_mode():
    model = tiny_llama(seed=2)
    got = _two_forwards(model, lm_forward_context("cpu", bf16=True))
    with torch.inference_mode():
        want = _two_forwards(model, torch.autocast("cpu", dtype=torch.bfloat16))
    assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_fp32_is_left_alone():
    model = tiny_llama(seed=2)
    with lm_forward_context("cpu", bf16=False):
        assert not torch.is_autocast_enabled("cpu") and not torch.is_grad_enabled()
        logits = model(input_ids=torch.tensor([[1, 2, 3]])).logits
    assert logits.dtype == torch.float32
