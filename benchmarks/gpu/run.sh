#!/usr/bin/env bash
# One run of udr's CUDA path on a lent GPU machine, from the kit that benchmarks/gpu/kit.py packs:
# install the kit's wheels beside the machine's own packages, the models and BM25 candidates, then
# scoring's throughput and MFU before and after (the padded engine against the packed one, on
# SmolLM2-135M and on a random 853M Llama), then the pipeline end to end on real weights (LM scoring
# and training under torchrun, the index, evaluation of UDR against BM25), then the evaluation
# forwards' throughput, then a markdown table. On CUDA a profile of each engine says where scoring's
# time goes.
# Every step is timed and bounded by what is left of --budget; a failing step is recorded and the run
# goes on with the steps that do not need it. What finished is written to --out ($OUT on the device):
# gpu-run.md (the table), steps.jsonl (one record per step), run.log (every step's output).
#
#   bash benchmarks/gpu/run.sh [--kit .gpukit] [--device cuda|cpu] [--budget 540] [--out DIR] [--work DIR]
set -uo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
KIT=$REPO/.gpukit
DEVICE=cuda
BUDGET=540
OUTDIR=${OUT:-$REPO/build/gpu-run}
WORK=${TMPDIR:-/tmp}/udr-gpu-run
PY=${PYTHON:-python3}
BENCH=1
while [[ $# -gt 0 ]]; do
    case $1 in
        --kit) KIT=$(cd "$2" && pwd); shift 2 ;;
        --device) DEVICE=$2; shift 2 ;;
        --budget) BUDGET=$2; shift 2 ;;
        --out) OUTDIR=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --no-bench) BENCH=0; shift ;;
        *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ $DEVICE == cuda || $DEVICE == cpu ]] || { echo "run.sh: --device is cuda or cpu, not $DEVICE" >&2; exit 2; }

START=$(date +%s)
DEADLINE=$((START + BUDGET))
mkdir -p "$OUTDIR" "$WORK/logs"
OUTDIR=$(cd "$OUTDIR" && pwd)
STEPS=$OUTDIR/steps.jsonl
: >"$STEPS"
: >"$OUTDIR/run.log"
cd "$REPO"

# record STEP STATUS SECONDS LOGFILE [TABLE]: one JSON line; the note is the log's last line (failures:
# its last three lines), the table the log itself when the step printed one.
record() {
    "$PY" - "$@" <<'EOF' >>"$STEPS"
import json, sys
step, status, seconds, log = sys.argv[1:5]
lines = [l for l in open(log, errors="replace").read().splitlines() if l.strip()] if log != "-" else []
keep = lines[-3:] if status == "failed" else lines[-1:]
rec = {"step": step, "status": status, "seconds": float(seconds), "note": " / ".join(keep)}
if len(sys.argv) > 5 and status == "ok":
    rec["table"] = "\n".join(lines)
print(json.dumps(rec))
EOF
}

# step NAME MIN_SECONDS [--cap SECONDS] [--table] CMD...: run CMD if MIN_SECONDS are left, bounded by
# the deadline (and by --cap: a benchmark must not eat the pipeline's time).
FAILED=()
step() {
    local name=$1 min=$2 table="" cap=$BUDGET
    shift 2
    if [[ ${1:-} == --cap ]]; then cap=$2; shift 2; fi
    if [[ ${1:-} == --table ]]; then table=1; shift; fi
    local log=$WORK/logs/$name.log left=$((DEADLINE - $(date +%s)))
    ((left > cap)) && left=$cap
    if ((left < min)); then
        echo "== $name: skipped ($left s left of the budget, needs $min)" | tee -a "$OUTDIR/run.log"
        echo "skipped: $left s left of the budget" >"$log"
        record "$name" skipped 0 "$log"
        return 1
    fi
    echo "== $name: $*" | tee -a "$OUTDIR/run.log"
    local t0 rc
    t0=$(date +%s.%N)
    timeout -k 10 "$left" "$@" >"$log" 2>&1
    rc=$?
    local dt
    dt=$("$PY" -c "import time,sys; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$t0")
    cat "$log" >>"$OUTDIR/run.log"
    if ((rc == 0)); then
        record "$name" ok "$dt" "$log" $table
        echo "== $name: ok in $dt s" | tee -a "$OUTDIR/run.log"
    else
        ((rc == 124)) && echo "timed out at the budget" >>"$log"
        record "$name" failed "$dt" "$log"
        FAILED+=("$name")
        echo "== $name: FAILED (exit $rc) after $dt s" | tee -a "$OUTDIR/run.log"
    fi
    return $rc
}
ok() { grep -q "\"step\": \"$1\", \"status\": \"ok\"" "$STEPS"; }

# ---------------------------------------------------------------- install
step unpack 5 "$PY" benchmarks/gpu/kit.py unpack --kit "$KIT" "$WORK" || { "$PY" benchmarks/gpu/kit.py table "$STEPS" "$OUTDIR/gpu-run.md"; exit 1; }
step install 5 "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile \
    --target "$WORK/site" "$WORK"/kit/wheels/*.whl
export PYTHONPATH=$WORK/site:$REPO HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
PROJECT=$WORK/project
rm -rf "$PROJECT" && cp -r "$WORK/kit/project" "$PROJECT"
P=$PROJECT/params.yaml
# Every stage on the device under test (`auto` would also pick the GPU there; explicit fails loudly).
"$PY" - "$P" "$DEVICE" <<'EOF'
import sys, yaml
path, device = sys.argv[1:]
params = yaml.safe_load(open(path))
for section in ("score", "train", "evaluate"):
    params[section]["device"] = device
open(path, "w").write(yaml.safe_dump(params, sort_keys=False))
EOF

if step imports 5 "$PY" - "$BUDGET" "$KIT" <<'EOF'; then
import json, platform, sys
import torch, transformers
import udr  # the kit's imports resolve
import bm25s, gguf, polars, pydantic  # noqa: F401
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({platform.processor() or platform.machine()})"
facts = {"gpu": gpu, "torch": torch.__version__, "transformers": transformers.__version__,
         "python": platform.python_version(), "budget_s": int(sys.argv[1]),
         "kit": json.load(open(sys.argv[2] + "/index.json"))["created"]}
print(json.dumps(facts))
EOF
    "$PY" -c "import json,sys; print(json.dumps({'step': 'facts', 'status': 'ok', 'facts': json.loads(open(sys.argv[1]).read().splitlines()[-1])}))" \
        "$WORK/logs/imports.log" >>"$STEPS"
fi

UDR=("$PY" -m udr.cli)
TORCHRUN=("$PY" -m torch.distributed.run --nproc_per_node=1 --standalone -m udr.cli)
small=$("$PY" -c "import json,sys; print(int(json.load(open(sys.argv[1]))['small']))" "$KIT/index.json")
# Scoring's before / after: PAIRS of each task's candidate pairs (the default kit has 1280 a task).
if ((small)); then ROWS=(--rows 4 --gen-rows 2); PAIRS=8; else ROWS=(--rows 0 --gen-rows 0); PAIRS=640; fi
TASKS=$("$PY" -c "import sys, yaml; print(','.join(yaml.safe_load(open(sys.argv[1]))['prepare']['tasks']))" "$P")

# ---------------------------------------------------------------- models, candidates
step models 30 "${UDR[@]}" models -p "$P"
step candidates 20 "${UDR[@]}" candidates -p "$P"

# ---------------------------------------------------------------- scoring before / after
# The padded engine (before) against the packed one (after) on the same pairs, same machine, bf16;
# first, so that the table survives a pipeline that runs out of budget. Each step is capped.
if ((BENCH)); then
    DT=(--dtype bf16)
    MFU=() BT=()
    [[ $DEVICE == cuda ]] && MFU=(--mfu) BT=(--batch-tokens 8192 --packed-tokens 32768)
    CMP=(--compare packed --tasks "$TASKS" --pairs-per-task "$PAIRS" --markdown)
    ok candidates && ok models && step bench-scoring 45 --cap 100 --table "$PY" benchmarks/scoring.py --project "$PROJECT" \
        --device "$DEVICE" "${DT[@]}" "${MFU[@]}" "${BT[@]}" "${CMP[@]}"
    [[ $DEVICE == cuda ]] && ok candidates && ok models && step bench-scoring-llama-1b 60 --cap 100 --table "$PY" benchmarks/scoring.py \
        --project "$PROJECT" --device cuda --dtype bf16 --mfu --random-llama-1b "${BT[@]}" "${CMP[@]}"
    # Where the time goes (busy share, launches, top kernels) for both engines and both models.
    [[ $DEVICE == cuda ]] && ok candidates && ok models && step profile-scoring 45 --cap 75 --table "$PY" \
        benchmarks/gpu/profile_scoring.py --project "$PROJECT" --device cuda --task sst2 --pairs 320 \
        --random-llama-1b --markdown
fi

# ---------------------------------------------------------------- the CUDA path end to end
# score.engine auto: the packed engine on CUDA; where it fails, the padded one, so the pipeline goes on.
step score-torchrun 60 "${TORCHRUN[@]}" score -r 0 -p "$P" ||
    step score-torchrun-padded 60 "${TORCHRUN[@]}" score -r 0 -p "$P" -S score.engine=padded
step train-torchrun 60 "${TORCHRUN[@]}" train -r 0 -p "$P"
step index 20 "${UDR[@]}" index -p "$P"
step evaluate-bm25 30 "${UDR[@]}" evaluate -m bm25 -p "$P"
step evaluate-udr 30 "${UDR[@]}" evaluate -m udr -p "$P"
ok evaluate-bm25 && ok evaluate-udr && step udr-vs-bm25 10 --table "${UDR[@]}" exp compare udr bm25 -p "$P"
ok train-torchrun && step train-summary 5 --table "$PY" - "$PROJECT" <<'EOF'
import json, sys
from pathlib import Path
s = json.loads((Path(sys.argv[1]) / "metrics/train/round0/summary.json").read_text())
keys = [k for k in s if not isinstance(s[k], (dict, list))]
print("| " + " | ".join(keys) + " |")
print("|" + " --- |" * len(keys))
print("| " + " | ".join(str(s[k]) for k in keys) + " |")
EOF

# ---------------------------------------------------------------- evaluation forwards: throughput and MFU
if ((BENCH)); then
    ok models && step bench-evaluation 45 --cap 90 --table "$PY" benchmarks/gpu/forwards.py --project "$PROJECT" \
        --device "$DEVICE" "${DT[@]}" "${ROWS[@]}" --markdown
fi

# ---------------------------------------------------------------- the table
"$PY" benchmarks/gpu/kit.py table "$STEPS" "$OUTDIR/gpu-run.md" >/dev/null
cat "$OUTDIR/gpu-run.md"
echo "wrote $OUTDIR/gpu-run.md ($(($(date +%s) - START)) s); failed: ${FAILED[*]:-none}" | tee -a "$OUTDIR/run.log"
((${#FAILED[@]} == 0))
