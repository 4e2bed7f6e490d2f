"""Does a change to the training code leave every recipe's model as it was? Trains a few steps of each
training recipe (UDR frozen / trained / shared E_d, GradCache, distillation, the published loss and
sampling, cosine, fp32 without length chunks, EPR, and round 1 of three of them) on a tiny project, and
prints the sha256 of each output: every safetensors file, the record, the summary without its seconds,
the loss logs. Run it with two checkouts and compare the printouts (same machine):

    python benchmarks/training_identity.py --code A > a.txt
    python benchmarks/training_identity.py --code B > b.txt && diff a.txt b.txt

The project (tests.conftest.scoring_project with the retriever tests' loop settings: round-0 scores, a
round-0 model, round-1 mined candidates and scores) is built once under --project by the first checkout
given and reused. Each variant runs `python -m udr.cli train` in a subprocess (2 threads) into
models/ids/<variant>. A sitecustomize in the project seeds torch when each process starts, so that the
weights the base model lacks (BERT's pooler, randomly initialised on load and read by no pooling) are the
same in every run and whole files can be compared.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--code", type=Path, default=REPO, help="the checkout whose udr trains (default: this one)")
ap.add_argument("--project", type=Path, default=REPO / "build" / "training-identity", help="the tiny project")
args = ap.parse_args()
CODE, PROJ, PY = args.code.resolve(), args.project.resolve(), sys.executable
SEED = PROJ.parent / f"{PROJ.name}-seed"
ENV = {
    **os.environ,
    "PYTHONPATH": f"{CODE}:{SEED}",  # SEED's sitecustomize seeds torch at start-up
    "OMP_NUM_THREADS": "2",
    "MKL_NUM_THREADS": "2",
    "UDR_PROGRESS_SECONDS": "off",
}

VARIANTS = {
    "udr-default-frozen": ["-r", "0", "-S", "train.freeze_demo_encoder=true"],
    "udr-unfrozen": ["-r", "0"],
    "udr-shared": ["-r", "0", "-S", "train.shared_encoder=true"],
    "udr-gradcache": ["-r", "0", "-S", "train.grad_cache=true", "-S", "train.micro_batch=1"],
    "udr-distill-frozen": ["-r", "0", "-S", "train.freeze_demo_encoder=true", "-S", "train.loss=distill"],
    "udr-distill-unfrozen": ["-r", "0", "-S", "train.loss=distill"],
    "udr-distill-gradcache": [
        "-r",
        "0",
        "-S",
        "train.loss=distill",
        "-S",
        "train.grad_cache=true",
        "-S",
        "train.micro_batch=1",
    ],
    "udr-published": ["-r", "0", "-S", "train.loss=published", "-S", "train.sampling=published"],
    "udr-cosine-frozen": ["-r", "0", "-S", "train.freeze_demo_encoder=true", "-S", "encoder.similarity=cosine"],
    "udr-fp32-chunk0": ["-r", "0", "-S", "train.dtype=fp32", "-S", "train.length_chunk=0"],
    "epr": ["--epr"],
    "round1-frozen": ["-r", "1", "-S", "train.freeze_demo_encoder=true"],
    "round1-unfrozen": ["-r", "1"],
    "round1-shared": ["-r", "1", "-S", "train.shared_encoder=true"],
}


def udr(*args: str) -> None:
    proc = subprocess.run([PY, "-m", "udr.cli", *args], cwd=PROJ, env=ENV, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"udr {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def build() -> None:
    SEED.mkdir(parents=True, exist_ok=True)
    (SEED / "sitecustomize.py").write_text("import torch\n\ntorch.manual_seed(0)\n")
    code = f"""
import sys
sys.path.insert(0, {str(CODE)!r})
from pathlib import Path
from tests.conftest import DATA_DIR, scoring_project
from tests.retriever.conftest import LOOP_TASKS
from tests.tiny_models import save_tiny_encoder
from udr.lm.models import resolve_model
root = Path({str(PROJ)!r})
root.mkdir(parents=True, exist_ok=True)
scoring_project(
    root, LOOP_TASKS, DATA_DIR, max_train=24, max_test=4, k=5,
    score={{"queries_per_task": 8, "shard_pairs": 16, "batch_tokens": 2048, "dtype": "fp32"}},
    lm_src="tiny-lm", encoder={{"max_query_length": 64, "max_demo_length": 96}},
    train={{"later_rounds": {{"round1": "round0"}}, "batch_size": 4, "micro_batch": 2, "epochs_first": 2,
           "epochs_later": 1, "warmup_steps": 1, "lr": 1e-3, "checkpoint_seconds": 0, "candidates_per_query": 4,
           "freeze_demo_encoder": False}},
    mine={{"k": 4, "batch_size": 8}},
)
resolve_model(str(save_tiny_encoder(root / "tiny-enc")), root / "models/base/encoder", kind="encoder")
"""
    subprocess.run([PY, "-c", code], env=ENV, check=True)
    for args in (["score", "-r", "0"], ["train", "-r", "0"], ["mine", "-r", "1"], ["score", "-r", "1"]):
        udr(*args)
    (PROJ / ".built").write_text("ok")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def main() -> None:
    if not (PROJ / ".built").is_file():
        build()
    where = subprocess.run(
        [PY, "-c", "import udr; print(udr.__file__)"], cwd=PROJ, env=ENV, capture_output=True, text=True
    )
    print(f"# code: {where.stdout.strip()}", file=sys.stderr)
    for name, args in VARIANTS.items():
        out = PROJ / "models/ids" / name
        udr("train", *args, "--out", str(out), "--replace")
        log = PROJ / "metrics/train" / name
        for f in sorted(out.rglob("*.safetensors")):
            print(f"{name} {f.relative_to(out)} {sha(f.read_bytes())}")
        print(f"{name} udr_record.json {sha((out / 'udr_record.json').read_bytes())}")
        summary = {k: v for k, v in json.loads((log / "summary.json").read_text()).items() if k != "seconds"}
        print(f"{name} summary {json.dumps(summary, sort_keys=True)}")
        for f in sorted((log / "plots").rglob("*.tsv")):
            print(f"{name} {f.name} {sha(f.read_bytes())}")
        print(f"{name} metrics.json {sha((log / 'metrics.json').read_bytes())}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
