#!/usr/bin/env bash
# The default run's precision and engine choices measured on this CPU, alone on the machine: one command per
# CPU kind, whose tables docs/performance.md keeps one per kind. In order, each in one process (ratios within
# a table are measured in the same run):
#   1. the CPU's kind: its model name and the flags that decide bf16's speed (avx512_bf16, amx_bf16);
#   2. precision.py: prompt forwards and decode steps, fp32 against bf16 autocast (scoring's and evaluation's
#      forwards);
#   3. scoring.py --compare packed, in bf16 and then in fp32: the padded engine against the packed one on the
#      stage's own pairs (64 a task of sst2, comv, break and e2e);
#   4. training.py --compare dtype: UDR's training steps, train.dtype fp32 against bf16;
#   5. the same for the EPR baseline's steps (--epr: both encoders learn; DR-Target's are alike).
# PROJECT is a project whose default pipeline has run (its prepared data, round-0 candidates and scores,
# models/base); THREADS the torch threads (the default run's: 2).
#
#   bash benchmarks/cpu_kind.sh [PROJECT=.] [THREADS=2] > cpu-kind.md
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PROJECT=$(cd "${1:-.}" && pwd)
THREADS=${2:-2}
PY=${PYTHON:-$REPO/.venv/bin/python}
export OMP_NUM_THREADS=$THREADS HF_HUB_OFFLINE=1

source "$REPO/benchmarks/cpu_line.sh"
echo "# CPU: $(cpu_line); $THREADS threads"
echo
echo "## Forwards: fp32 against bf16 autocast"
"$PY" "$REPO/benchmarks/precision.py" --model "$PROJECT/models/base/lm" --markdown
for dtype in bf16 fp32; do
    echo
    echo "## Scoring: padded against packed, $dtype"
    "$PY" "$REPO/benchmarks/scoring.py" --project "$PROJECT" --compare packed --dtype "$dtype" --markdown 2>/dev/null
done
echo
echo "## Training: fp32 against bf16 autocast"
"$PY" "$REPO/benchmarks/training.py" --params "$PROJECT/params.yaml" --compare dtype --steps 8
echo
echo "## Training, the EPR baseline's steps: fp32 against bf16 autocast"
"$PY" "$REPO/benchmarks/training.py" --params "$PROJECT/params.yaml" --compare dtype --steps 8 --epr
