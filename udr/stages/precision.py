"""The `udr precision` stage: the device, precision and torch threads that each section computing with a model
(`score`, `train`, `evaluate`) resolves its `device`, `dtype` and `threads` to on this machine, one file per section
(data/precision/<section>.json).

`dtype: auto` resolves per CPU kind (:func:`udr.util.distributed.resolve_lm_precision`), so the same params
give bf16 on one machine and fp32 on another, and DVC cannot see it. DVC runs this stage every time
(`always_changed`), and the stages that compute in a section's precision depend on its file: where the
machine resolves as the outputs' did, the file's bytes are the same and nothing re-runs; where it resolves
otherwise, every such stage runs again, so one results table never mixes precisions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from udr.util.distributed import resolve_lm_precision, resolve_threads
from udr.util.files import json_text, write_text_atomic

if TYPE_CHECKING:
    from udr.config import Settings

# The settings sections with a `device` and a `dtype`: LM scoring, the retriever's training, the evaluation LM.
SECTIONS = ("score", "train", "evaluate")


def resolved_precisions(settings: Settings) -> dict[str, dict[str, str]]:
    """{section: {"device": cpu | cuda, "dtype": bf16 | fp32, "threads": N}} as this machine resolves the params
    (threads 0: this machine's core count, so a machine with another count re-runs the section's stages)."""
    resolved = {}
    for section in SECTIONS:
        cfg = getattr(settings, section)
        device_type, dtype = resolve_lm_precision(cfg.device, cfg.dtype, section)
        resolved[section] = {"device": device_type, "dtype": dtype, "threads": resolve_threads(cfg.threads)}
    return resolved


def run_precision(settings: Settings) -> dict[str, dict[str, str]]:
    """Write each section's resolution to data/precision/<section>.json where it differs from the file's
    (beside, then renamed); returns them."""
    resolved = resolved_precisions(settings)
    for section, facts in resolved.items():
        path, text = settings.paths.precision(section), json_text(facts, sort_keys=True)
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, text)
    return resolved
