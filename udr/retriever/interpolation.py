"""Weight interpolation of a trained bi-encoder with its initial one (WiSE-FT; Wortsman et al., "Robust
fine-tuning of zero-shot models", CVPR 2022): every weight becomes alpha * trained + (1 - alpha) * initial.
Alpha 1 is the trained model, 0 the initial one; in between, a model that keeps more of the base encoder's
generality on tasks no trained task resembles. Alpha is chosen on held-out families, never on test.

:func:`interpolate` mixes two loaded bi-encoders; :func:`write_interpolation` (`udr interpolate`) writes the
mix of a trained model folder and its initial encoder (by default the base encoder it was trained from) as
a model folder of its own, which `udr index --model`, `udr evaluate --model` and serving read like any.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors import safe_open

from udr.errors import UdrError
from udr.lm.loading import PROVENANCE_FILE, read_provenance
from udr.retriever.encoder import MADE, SETTINGS_NAME, BiEncoder
from udr.retriever.index import model_fingerprint
from udr.retriever.record import read_record, rebase_project, write_record, writing_model
from udr.util.files import building_dir, file_sha256


def interpolate(trained: BiEncoder, initial: BiEncoder, alpha: float) -> BiEncoder:
    """`trained` with each encoder's floating-point weights set to alpha * trained + (1 - alpha) * initial
    (E_q and E_d alike; a frozen E_d equals its initial weights, so it stays as it is). Both must have the
    same architecture; integer buffers (position ids), and weights equal in both, are kept from `trained` as
    they are (bit for bit). Returns `trained`, changed."""
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
                if value.is_floating_point() and not torch.equal(value, theirs[key].to(value.dtype)):
                    value.copy_(alpha * value + (1.0 - alpha) * theirs[key].to(value.dtype))
    return trained


def _base_spec(model_dir: Path, trained: BiEncoder, record: dict) -> str:
    """The base encoder a trained model started from, as its record (its first training's init) or else its
    settings name it."""
    init = record
    while isinstance(init, dict) and isinstance(init.get("init"), dict):
        init = init["init"]
    spec = init.get("base") if isinstance(init, dict) else None
    spec = spec or trained.settings.base
    if not spec:
        raise UdrError(f"{model_dir} names no base encoder: give --initial DIR")
    return str(spec)


def default_initial(model_dir: Path, trained: BiEncoder, record: dict, base_dir: Path, base_spec: str) -> Path:
    """The initial encoder of a trained model by default: the project's base encoder `base_dir`
    (models/base/encoder, resolved from `base_spec`, the params' models.encoder, as training's round 0 reads
    it), which must be the one the model was trained from (the spec its record names)."""
    spec = _base_spec(model_dir, trained, record)
    if spec != base_spec:
        raise UdrError(
            f"{model_dir} was trained from {spec}, and this project's base encoder is {base_spec}: give --initial DIR"
        )
    if not (base_dir / PROVENANCE_FILE).is_file():
        raise UdrError(f"missing base encoder {base_dir}: run `udr models`, or give --initial DIR")
    return base_dir


def _keep_unstored(start: BiEncoder, trained: BiEncoder, base_dir: Path) -> BiEncoder:
    """`start` (read from the base encoder at `base_dir`) with the weights its files lack (transformers
    initialises them at random on every load, e.g. a BERT pooler, which CLS or mean pooling never reads)
    set to `trained`'s, so that they are kept as trained and the interpolation is the same at every run."""
    stored: set[str] = set()
    for path in sorted(Path(base_dir).glob("*.safetensors")):
        with safe_open(str(path), "pt") as handle:
            stored.update(handle.keys())
    pairs = [(start.query_model, trained.query_model)]
    if start.demo_model is not start.query_model:
        pairs.append((start.demo_model, trained.demo_model))
    with torch.no_grad():
        for model, theirs in pairs:
            other = theirs.state_dict()
            for key, value in model.state_dict().items():
                if (
                    key in other
                    and other[key].shape == value.shape
                    and not any(name == key or name.endswith("." + key) for name in stored)
                ):
                    value.copy_(other[key])
    return start


def _source(path: Path, out: Path) -> dict:
    """One source of an interpolation as its record names it: the folder (relative to the new model's) and
    its fingerprint (a bi-encoder's) or its provenance (a resolved base encoder's spec and weights)."""
    where = os.path.relpath(Path(path).resolve(), Path(out).resolve())
    if (Path(path) / SETTINGS_NAME).is_file():
        return {"path": where, "model": model_fingerprint(path)}
    provenance = read_provenance(path) or {}
    weights = {p.name: file_sha256(p) for p in sorted(Path(path).glob("*.safetensors"))}
    return {"path": where, "base": provenance.get("spec"), "weights_sha256": weights}


def write_interpolation(
    model: Path,
    alpha: float,
    out: Path,
    *,
    initial: Path | None,
    base_dir: Path,
    base_spec: str,
    params_file: str,
    root: Path,
    replace: bool = False,
) -> Path:
    """`udr interpolate`: the trained bi-encoder at `model` interpolated with `initial` (a udr bi-encoder
    folder, e.g. round 0's model, or a resolved base encoder; None: the project's base encoder `base_dir`,
    resolved from `base_spec`, which `model` must have been trained from, :func:`default_initial`), written
    to `out` (built beside it, then swapped in; a folder recorded from another params file than
    `params_file` of the project at `root` is not replaced unless `replace`). Its record is `model`'s (what
    it was trained on and how; no index: `udr index --model` adds one) with ``interpolation``: alpha and
    both sources (folders relative to `out`, fingerprints). Returns `out`, resolved."""
    model, out = Path(model), Path(out)
    if not (model / SETTINGS_NAME).is_file():
        raise UdrError(f"missing model {model}: give a trained udr bi-encoder directory")
    if not (isinstance(alpha, int | float) and 0.0 <= alpha <= 1.0):
        raise UdrError(f"bad interpolation alpha {alpha}: expected a number from 0 (initial) to 1 (trained)")
    record = read_record(model)
    if record is None:
        raise UdrError(f"{model} has no udr_record.json: only a model `udr train` made can be interpolated")
    with writing_model(out, params_file, root, replace) as out:  # locked for the run, then checked
        if out == model.resolve():
            raise UdrError(f"--out {model} is the model itself: give another directory")
        trained, initial = interpolated_encoder(model, record, alpha, initial, base_dir, base_spec)
        mixed = {k: v for k, v in rebase_project(record, model, out).items() if k != "index"}
        mixed["interpolation"] = interpolation_record(alpha, model, initial, out)
        with building_dir(out, (SETTINGS_NAME,), MADE) as tmp:
            trained.save(tmp)
            write_record(tmp, mixed)
    return out


def interpolated_encoder(
    model: Path, record: dict, alpha: float, initial: Path | None, base_dir: Path, base_spec: str
) -> tuple[BiEncoder, Path]:
    """(the bi-encoder at `model`, whose record is `record`, interpolated in memory with `initial` at `alpha`,
    the initial folder used): `initial` None takes the base encoder the model was trained from
    (:func:`default_initial`)."""
    trained = BiEncoder.load(model)
    if initial is None:
        initial = default_initial(model, trained, record, Path(base_dir), base_spec)
    initial = Path(initial)
    if (initial / SETTINGS_NAME).is_file():
        start = BiEncoder.load(initial)
    elif (initial / PROVENANCE_FILE).is_file():
        start = _keep_unstored(BiEncoder.from_base(initial, trained.settings), trained, initial)
    else:
        raise UdrError(f"missing model {initial}: --initial takes a udr bi-encoder or a resolved base encoder")
    interpolate(trained, start, float(alpha))
    return trained, initial


def interpolation_record(alpha: float, trained: Path, initial: Path, out: Path) -> dict:
    """What an interpolated model's record says of it: alpha and both sources, folders relative to `out`."""
    return {"alpha": float(alpha), "trained": _source(trained, out), "initial": _source(initial, out)}
