"""Fingerprints of every training recipe on a tiny project: the sha256 of each trained model's weight files,
its per-step losses, and the round-0 scores' sha256, as JSON. Run it on two versions of the code (set
PYTHONPATH to each checkout) and compare the files: a refactor of the recipes, losses or scoring engines must
leave every fingerprint byte-identical.

    PYTHONPATH=OLD python benchmarks/recipe_fingerprints.py old.json
    PYTHONPATH=NEW python benchmarks/recipe_fingerprints.py new.json
    cmp old.json new.json

The project is the tests' tiny two-task one (tests.conftest's `loop_project`: real sst2 and break rows, a
tiny LM and a tiny BERT, fp32 on the CPU); each recipe trains round 0 for its few steps from the base encoder.
UDR_DATA_DIR names the real data mirror.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

# Each recipe: the train / encoder overrides, whether it is the EPR baseline, and steps after which a first
# run stops (then a second run resumes from its checkpoint).
RECIPES = {
    "paper": ((), False, None),
    "published": (("train.loss=published",), False, None),
    "distill": (("train.loss=distill",), False, None),
    "anchored": (("train.loss=anchored", "train.anchor_top=2", "train.loss_lambda=0.5"), False, None),
    "anchored-frozen": (("train.loss=anchored", "train.anchor_top=2", "train.freeze_demo_encoder=true"), False, None),
    "anchored-resumed": (("train.loss=anchored", "train.anchor_top=2", "train.checkpoint_seconds=0"), False, 2),
    "paper-frozen": (("train.freeze_demo_encoder=true",), False, None),
    "published-gradcache-cosine": (
        ("train.loss=published", "train.grad_cache=true", "encoder.similarity=cosine"),
        False,
        None,
    ),
    "epr": ((), True, None),
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_project(root: Path, data_dir: Path) -> Path:
    from tests.conftest import LOOP_TASKS, run_udr, scoring_project
    from tests.tiny_models import save_tiny_encoder
    from udr.lm.models import resolve_model

    root.mkdir(parents=True)
    scoring_project(
        root,
        LOOP_TASKS,
        data_dir,
        max_train=24,
        max_test=4,
        k=5,
        score={"queries_per_task": 8, "shard_pairs": 16, "batch_tokens": 2048, "dtype": "fp32"},
        lm_src="tiny-lm",
        encoder={"max_query_length": 64, "max_demo_length": 96},
        train={
            "later_rounds": {},
            "batch_size": 4,
            "micro_batch": 2,
            "epochs_first": 2,
            "warmup_steps": 1,
            "lr": 1e-3,
            "checkpoint_seconds": 120,
            "candidates_per_query": 4,
            "freeze_demo_encoder": False,
        },
        mine={"k": 4, "batch_size": 8},
    )
    resolve_model(str(save_tiny_encoder(root / "tiny-enc")), root / "models" / "base" / "encoder", kind="encoder")
    os.environ.pop("UDR_DATA_DIR", None)
    run_udr(root, "score", "-r", "0")
    return root


def train(root: Path, name: str, overrides, epr: bool, stop_after) -> dict:
    from udr.config import load_settings
    from udr.project.training import run_train
    from udr.retriever.recipes import epr_train_settings

    settings = load_settings(root / "params.yaml", list(overrides))
    if epr:
        settings = settings.model_copy(update={"train": epr_train_settings(settings.train)})
    out, log_dir = root / "models" / name, root / "logs" / name
    method = "epr" if epr else "udr"
    kw = dict(init=root / "models/base/encoder", out=out, log_dir=log_dir, progress=False, method=method)
    if stop_after is not None:
        assert run_train(settings, 0, stop_after_steps=stop_after, **kw) is None
    summary = run_train(settings, 0, **kw)
    losses = {}
    for key in ("loss", "rank", "in_batch"):
        rows = (log_dir / "plots/metrics/train" / f"{key}.tsv").read_text().splitlines()[1:]
        losses[key] = [r.split("\t")[1] for r in rows]
    weights = {p.relative_to(out).as_posix(): sha256(p) for p in sorted(out.rglob("*.safetensors"))}
    return {"steps": summary.steps, "weights": weights, "losses": losses}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the JSON file to write")
    ap.add_argument("--only", nargs="*", choices=sorted(RECIPES), help="these recipes only")
    args = ap.parse_args()
    import udr

    print(f"udr from {udr.__file__}", file=sys.stderr)
    data_dir = Path(os.environ.get("UDR_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
    with tempfile.TemporaryDirectory() as tmp:
        root = build_project(Path(tmp) / "proj", data_dir.resolve())
        result = {"scores": {p.name: sha256(p) for p in sorted((root / "data/scores/round0").glob("*.parquet"))}}
        for name in args.only or RECIPES:
            result[name] = train(root, name, *RECIPES[name])
            print(name, json.dumps(result[name]["weights"]), file=sys.stderr)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
