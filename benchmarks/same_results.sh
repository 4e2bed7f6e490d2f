#!/usr/bin/env bash
# Does a code change leave the results as they were? Runs one small pipeline (sst2 and e2e, 200-row pools,
# 16 scored queries per task, 24 / 6 test rows; the default recipe otherwise) with revision A and with
# revision B of this repository, each in a clone of its own under WORK, on this machine, and compares what
# they wrote byte for byte: prepared data, candidates, scores, the trained UDR and EPR weights, the index
# embeddings, the training log and every method's predictions, then the scores in the result files.
# Compare runs on one machine only: bf16 results differ between CPU kinds.
#
#   bash benchmarks/same_results.sh REV_A [REV_B=HEAD] [WORK=${TMPDIR:-/tmp}/udr-same-results]
#   bash benchmarks/same_results.sh --compare WORK     # compare two finished runs (WORK/a, WORK/b) again
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
COMPARE_ONLY=0
if [[ $1 == --compare ]]; then COMPARE_ONLY=1 WORK=$2; else
    A=$(git -C "$REPO" rev-parse "$1") B=$(git -C "$REPO" rev-parse "${2:-HEAD}") WORK=${3:-${TMPDIR:-/tmp}/udr-same-results}
fi
PY=${PYTHON:-$REPO/.venv/bin/python}
DATA=${UDR_DATA_DIR:-$(cd "$REPO/.." && pwd)/shared/data}
mkdir -p "$WORK"
((COMPARE_ONLY)) || "$PY" - "$REPO/params.yaml" "$WORK/params-small.yaml" "$DATA" <<'PYEOF'
import sys, yaml
src, dst, data = sys.argv[1:]
p = yaml.safe_load(open(src))
p["data"]["source_dir"] = data
p["prepare"]["tasks"] = {"sst2": {"max_train": 200, "max_test": 24, "validation": 0},
                         "e2e": {"max_train": 200, "max_test": 6, "validation": 0}}
p["evaluate"]["unseen_tasks"] = {}
p["evaluate"]["shots_tasks"] = []
p["score"]["queries_per_task"] = 16
open(dst, "w").write(yaml.safe_dump(p, sort_keys=False))
PYEOF
run() {  # side revision
    local dir=$WORK/$1
    rm -rf "$dir" && git clone -q "$REPO" "$dir" && git -C "$dir" checkout -q "$2"
    cp "$WORK/params-small.yaml" "$dir/params-small.yaml"
    (
        cd "$dir" && export PYTHONPATH=$dir UDR_DATA_DIR=$DATA HF_HUB_OFFLINE=1
        for cmd in prepare models candidates "score -r 0" "train -r 0" index "train --epr" \
            "evaluate -m bm25" "evaluate -m udr" "evaluate -m epr"; do
            # shellcheck disable=SC2086
            "$PY" -m udr.cli $cmd -p params-small.yaml 2>&1 | tail -1
        done
    ) >"$dir.log"
}
((COMPARE_ONLY)) || { run a "$A" & run b "$B" & wait; }
cd "$WORK/a"
same=0 differ=0
for f in $(find data/prepared data/candidates data/scores models/rounds models/epr models/final metrics/train \
    data/predictions/bm25 data/predictions/udr data/predictions/epr -type f \
    \( -name "*.parquet" -o -name "*.safetensors" -o -name "*.npy" -o -name "*.tsv" \) -newer "$WORK/params-small.yaml" | sort); do
    if cmp -s "$f" "$WORK/b/$f"; then same=$((same + 1)); else differ=$((differ + 1)); echo "differs: $f"; fi
done
"$PY" - "$WORK" <<'PYEOF'
import json, sys
from pathlib import Path
work = Path(sys.argv[1])
for m in ("bm25", "udr", "epr"):
    for t in ("sst2", "e2e"):
        a, b = (json.loads((work / s / "metrics" / m / f"{t}.json").read_text())["score"] for s in "ab")
        print(f"{m} {t}: {a} | {b} | {'same' if a == b else 'DIFFERENT'}")
PYEOF
echo "$same files the same, $differ different"
((differ == 0))
