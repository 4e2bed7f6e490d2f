"""Loading a resolved model directory (`udr models`): its record checked, safetensors only, fp32,
eval mode. Training, indexing and evaluation load models through here and need nothing of how a model
was resolved (:mod:`udr.lm.models`).

Imports of torch and transformers are inside the functions that use them, to keep `udr`'s start (the
CLI) light.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from udr.errors import UdrError
from udr.util.weights import load_weights

PROVENANCE_FILE = "udr_model.json"


def load_causal_lm(path: Path) -> tuple[Any, Any]:
    """Load a resolved causal LM directory as (model, tokenizer): fp32, safetensors only, eval mode."""
    from transformers import AutoModelForCausalLM

    return _load(Path(path), "lm", AutoModelForCausalLM)


def load_encoder(path: Path) -> tuple[Any, Any]:
    """Load a resolved encoder directory as (model, tokenizer) with `AutoModel`: fp32, safetensors only, eval mode."""
    from transformers import AutoModel

    return _load(Path(path), "encoder", AutoModel)


def read_provenance(path: Path) -> dict[str, Any] | None:
    """The `udr_model.json` provenance of a resolved model directory (what it was made from: spec, source,
    weight hashes; a trained retriever's own record is `udr_record.json`, :mod:`udr.retriever.record`),
    or None where it has none."""
    try:
        record = json.loads((path / PROVENANCE_FILE).read_text())
    except (OSError, ValueError, RecursionError):  # unreadable: the caller says to resolve it again
        return None
    return record if isinstance(record, dict) else None


def _load(path: Path, kind: str, auto_cls: Any) -> tuple[Any, Any]:
    import torch
    from transformers import AutoTokenizer

    record = read_provenance(path)
    if record is None or not (path / "config.json").is_file():
        raise UdrError(f"missing model at {path}: run `udr models` first")
    if record.get("kind") not in (None, kind):
        raise UdrError(
            f"model at {path} was resolved as kind {record.get('kind')!r}, not {kind!r}: run `udr models` first"
        )
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a per-load "Loading weights" bar is noise in stage logs

    rebuild = "resolve it again with `udr models --force`"
    model = load_weights(
        lambda: auto_cls.from_pretrained(path, use_safetensors=True, dtype=torch.float32, trust_remote_code=False),
        path,
        rebuild,
    )
    model.eval()
    tokenizer = load_weights(lambda: AutoTokenizer.from_pretrained(path, trust_remote_code=False), path, rebuild)
    return model, tokenizer
