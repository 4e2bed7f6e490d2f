"""Weight interpolation of a trained bi-encoder with its initial one (WiSE-FT; Wortsman et al., "Robust
fine-tuning of zero-shot models", CVPR 2022): every weight becomes alpha * trained + (1 - alpha) * initial.
Alpha 1 is the trained model, 0 the initial one; in between, a model that keeps more of the base encoder's
generality on tasks no trained task resembles. Alpha is chosen on held-out families, never on test.
"""

from __future__ import annotations

import torch

from udr.errors import UdrError
from udr.retriever.encoder import BiEncoder


def interpolate(trained: BiEncoder, initial: BiEncoder, alpha: float) -> BiEncoder:
    """`trained` with each encoder's floating-point weights set to alpha * trained + (1 - alpha) * initial
    (E_q and E_d alike; a frozen E_d equals its initial weights, so it stays as it is). Both must have the
    same architecture; integer buffers (position ids) are kept from `trained`. Returns `trained`, changed."""
    if not 0.0 <= alpha <= 1.0:
        raise UdrError(f"bad interpolation alpha {alpha}: expected a number from 0 (initial) to 1 (trained)")
    pairs = [(trained.query_model, initial.query_model)]
    if trained.demo_model is not trained.query_model:
        pairs.append((trained.demo_model, initial.demo_model))
    for model, start in pairs:
        mine, theirs = model.state_dict(), start.state_dict()
        if mine.keys() != theirs.keys() or any(mine[k].shape != theirs[k].shape for k in mine):
            raise UdrError("cannot interpolate: the trained and the initial encoder have different architectures")
        with torch.no_grad():
            for key, value in mine.items():
                if value.is_floating_point():
                    value.copy_(alpha * value + (1.0 - alpha) * theirs[key].to(value.dtype))
    return trained
