#!/usr/bin/env bash
# On the GPU machine, from the kit (after the stash calls): is the CUDA path deterministic, and does
# torchrun with one process give what one plain process gives? Scores 32 queries per task of the kit's
# project and trains round 0 on them three times: a and b as one process each, c under
# `torchrun --nproc_per_node=1` (NCCL); compares the score files and the trained weights byte for byte,
# and prints the largest score difference where they differ.
#
#   bash benchmarks/gpu/twice.sh [--kit .gpukit] [--work ${TMPDIR:-/tmp}/udr-twice]
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
KIT=$REPO/.gpukit WORK=${TMPDIR:-/tmp}/udr-twice PY=${PYTHON:-python3}
while [[ $# -gt 0 ]]; do
    case $1 in
        --kit) KIT=$(cd "$2" && pwd); shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        *) echo "twice.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
cd "$REPO"
rm -rf "$WORK" && mkdir -p "$WORK"
"$PY" benchmarks/gpu/kit.py unpack --kit "$KIT" "$WORK"
"$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --target "$WORK/site" "$WORK"/kit/wheels/*.whl
export PYTHONPATH=$WORK/site:$REPO HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 UDR_PROGRESS_SECONDS=off
P=$WORK/kit/project
sed -i 's/^  queries_per_task: .*/  queries_per_task: 32/' "$P/params.yaml"
"$PY" -m udr.cli models -p "$P/params.yaml" 2>&1 | tail -1
"$PY" -m udr.cli candidates -p "$P/params.yaml" 2>&1 | tail -1
for side in a b c; do cp -r "$P" "$WORK/$side"; done
for side in a b; do
    "$PY" -m udr.cli score -r 0 -p "$WORK/$side/params.yaml" 2>&1 | tail -1
    "$PY" -m udr.cli train -r 0 -p "$WORK/$side/params.yaml" 2>&1 | tail -1
done
for cmd in "score -r 0" "train -r 0"; do
    # shellcheck disable=SC2086
    "$PY" -m torch.distributed.run --nproc_per_node=1 --standalone -m udr.cli $cmd -p "$WORK/c/params.yaml" 2>&1 | tail -1
done
"$PY" - "$WORK" <<'PYEOF'
import filecmp, sys
from pathlib import Path
import polars as pl
work = Path(sys.argv[1])
print("| file | a = b (two runs) | a = c (torchrun, 1 process) |")
print("| --- | --- | --- |")
files = sorted((work / "a").glob("data/scores/round0/*.parquet")) + sorted((work / "a").glob("models/rounds/round0/*/model.safetensors"))
for f in files:
    rel = f.relative_to(work / "a")
    cells = []
    for other in ("b", "c"):
        g = work / other / rel
        if filecmp.cmp(f, g, shallow=False):
            cells.append("identical")
        elif f.suffix == ".parquet":
            d = (pl.read_parquet(f)["score"] - pl.read_parquet(g)["score"]).abs().max()
            cells.append(f"differs (max score diff {d:.3g})")
        else:
            cells.append("differs")
    print(f"| {rel} | {cells[0]} | {cells[1]} |")
PYEOF
