#!/usr/bin/env bash
# The full-feedback experiment on test (issue 44, item 1): UDR trained on the whole pool's committed LM
# feedback (1000 scored queries per task, data/feedback/round0/, nothing re-scored)
# against EPR on the same scores, BM25, SBERT and random, on test sets of 300 rows per classification /
# multiple-choice task, 100 per generation task and 300 per unseen task.
#
#   metrics/feedback/test-q1000/run.sh        (after `make install`)
#
# Everything but the committed results lives in a project of its own, $WORK (build/test-q1000: its own
# params.yaml, data/, models/, metrics/), so the default pipeline's data/, models/ and metrics/ are never
# touched. The udr code is the committed code of $REV (git archive into $WORK/code, put first on
# PYTHONPATH), so edits in the working tree do not leak into a run. Resumable: run it again and it
# skips every finished job (done markers in $WORK/done; `udr train` resumes from its checkpoints;
# evaluations resume per task). At the end the results, predictions and `udr exp compare` intervals
# are copied to metrics/feedback/test-q1000/ and results.md is written from them.
#
# Settings: the default params.yaml (frozen E_d, rank loss, lambda 0.2, K = 10, round 0, 3 epochs,
# bf16) with score.queries_per_task=1000 and the larger test caps; the both-encoders recipe adds
# train.freeze_demo_encoder=false (BOTH=1). Nothing here was chosen on test.
#
# Environment: WORKERS (parallel jobs, default 3: the two trainings and one evaluation stream), THREADS
# (torch threads per job, default 1), TRAIN_THREADS (per training job, default THREADS), NICE (default 5), BOTH (1: also train and evaluate both
# encoders, ~3x EPR's training time; default 0), REV (default HEAD), WORK, ONLY (setup|jobs|report).
set -euo pipefail
{ # the whole script is read before it runs, so editing this file cannot change a running run

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
OUT="$REPO/metrics/feedback/test-q1000"
WORK="${WORK:-$REPO/build/test-q1000}"
REV="${REV:-HEAD}"
PY="${PY:-$REPO/.venv/bin/python}"
WORKERS="${WORKERS:-3}"
THREADS="${THREADS:-1}"
TRAIN_THREADS="${TRAIN_THREADS:-$THREADS}"
NICE="${NICE:-5}"
BOTH="${BOTH:-0}"
SCORES="$REPO/data/feedback/round0"
SEEN=(sst2 trec comv break e2e python_code)
UNSEEN=(cr subj)

mkdir -p "$WORK/logs" "$WORK/done" "$WORK/failed" "$WORK/claims"
cd "$WORK"
export PYTHONPATH="$WORK/code" OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" PYTHONUNBUFFERED=1
udr() { nice -n "$NICE" "$PY" -m udr.cli "$@" -p "$WORK/params.yaml"; }
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$WORK/logs/run.log"; }

setup() {
  local rev
  rev="$(git -C "$REPO" rev-parse "$REV")"
  if [[ "$(cat code/REV 2>/dev/null)" != "$rev" ]]; then
    rm -rf code && mkdir code && git -C "$REPO" archive "$rev" udr | tar -x -C code && echo "$rev" > code/REV
  fi
  log "setup: udr code of $rev"
  # The default params with the whole pool's feedback and the larger test caps; the data mirror absolute.
  "$PY" - "$REPO" <<'EOF'
import sys, yaml
from pathlib import Path
repo = Path(sys.argv[1])
p = yaml.safe_load((repo / "params.yaml").read_text())
p["data"]["source_dir"] = str((repo / p["data"]["source_dir"]).resolve())
for t, c in p["prepare"]["tasks"].items():
    c["max_test"] = 300 if t in ("sst2", "trec", "comv") else 100
for t, c in p["evaluate"]["unseen_tasks"].items():
    c["max_test"] = 300
p["score"]["queries_per_task"] = 1000
p["evaluate"]["shots_tasks"] = []  # the shots plot's extra evaluations are not this experiment's
Path("params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
EOF
  mkdir -p data/tasks
  if [[ ! -f done/setup ]]; then
    udr prepare > logs/prepare.log 2>&1
    udr models > logs/models.log 2>&1
    udr candidates > logs/candidates.log 2>&1
    mkdir -p data/scores/round0
    for t in "${SEEN[@]}"; do
      cp "$SCORES/$t.parquet" "$SCORES/$t.json" data/scores/round0/
    done
  fi
  # The committed scores must cover every pair: fail loudly rather than score for hours.
  "$PY" - <<'EOF'
import sys
from udr.config import load_settings
from udr.feedback.score import load_work, reuse_earlier_run
s = load_settings("params.yaml")
todo = 0
for t in s.task_names():
    w = reuse_earlier_run(s, load_work(s, t, 0), s.paths.scores(0, t))
    print(f"{t}: {len(w.queries)} scored queries, {len(w.reused)} pairs reused, {len(w.todo)} to score")
    todo += len(w.todo)
if todo:
    sys.exit(f"{todo} pairs are not in the committed scores: refusing to score them (data or LM differ)")
EOF
  udr score --round 0 > logs/score.log 2>&1
  touch done/setup
}

# ---- jobs: NAME, its dependency, its command (functions below)
train_job() {  # train_job NAME [udr train args...]: train round 0 into models/NAME, then index it in place
  local name="$1"; shift
  OMP_NUM_THREADS="$TRAIN_THREADS" MKL_NUM_THREADS="$TRAIN_THREADS" \
    udr train --round 0 --out "models/$name" "$@" >> "logs/train-$name.log" 2>&1 || return 1
  OMP_NUM_THREADS="$TRAIN_THREADS" MKL_NUM_THREADS="$TRAIN_THREADS" \
    udr index --model "models/$name" >> "logs/index-$name.log" 2>&1 || return 1
}
eval_job() {  # eval_job NAME METHOD MODEL(or -) TASKS...: baselines and EPR (models/epr) under their
  # method's name, as the pipeline writes them (metrics/<method>/); UDR's models saved as NAME
  local name="$1" method="$2" model="$3"; shift 3
  local args=(-m "$method")
  [[ "$name" != "$method" ]] && args+=(--save-as "$name")
  [[ "$model" != - ]] && args+=(--model "models/$model")
  for t in "$@"; do
    [[ -f "metrics/$name/$t.json" ]] && continue
    udr evaluate "${args[@]}" -t "$t" >> "logs/eval-$name.log" 2>&1 || return 1
  done
}

JOBS=(train-udr-frozen train-epr)
[[ "$BOTH" == 1 ]] && JOBS+=(train-udr-both)
for g in seen unseen; do
  JOBS+=("eval-bm25-$g" "eval-udr-frozen-$g" "eval-epr-$g" "eval-sbert-$g" "eval-random-$g")
  [[ "$BOTH" == 1 ]] && JOBS+=("eval-udr-both-$g")
done

dep_of() {
  case "$1" in
    eval-udr-frozen-*) echo train-udr-frozen ;;
    eval-udr-both-*) echo train-udr-both ;;
    eval-epr-*) echo train-epr ;;
    *) echo setup ;;
  esac
}
run_job() {
  case "$1" in
    train-udr-frozen) train_job udr-frozen ;;
    train-udr-both) train_job udr-both -S train.freeze_demo_encoder=false ;;
    train-epr) train_job epr --epr ;;
    eval-*)
      local rest="${1#eval-}" group="${1##*-}" name method model
      name="${rest%-*}"
      case "$name" in
        udr-*) method=udr; model="$name" ;;
        epr) method=epr; model=- ;;
        *) method="$name"; model=- ;;
      esac
      if [[ "$group" == seen ]]; then eval_job "$name" "$method" "$model" "${SEEN[@]}"
      else eval_job "$name" "$method" "$model" "${UNSEEN[@]}"; fi ;;
  esac
}

worker() {  # take the first unclaimed job whose dependency is done, until none is left
  local id="$1"
  while true; do
    local took="" waiting=0
    for job in "${JOBS[@]}"; do
      [[ -f "done/$job" || -f "failed/$job" ]] && continue
      local dep; dep="$(dep_of "$job")"
      if [[ -f "failed/$dep" ]]; then continue; fi
      if [[ ! -f "done/$dep" ]]; then waiting=1; continue; fi
      if mkdir "claims/$job" 2>/dev/null; then took="$job"; break; fi
    done
    if [[ -z "$took" ]]; then
      # Done when no job is claimed or waiting on one that can still finish.
      if [[ "$waiting" == 0 ]] && [[ -z "$(ls claims)" ]]; then return 0; fi
      if [[ "$waiting" == 0 ]]; then return 0; fi
      sleep 20; continue
    fi
    local t0=$SECONDS
    log "worker $id: $took"
    if run_job "$took"; then
      touch "done/$took"; log "worker $id: $took done in $((SECONDS - t0)) s"
    else
      touch "failed/$took"; log "worker $id: $took FAILED after $((SECONDS - t0)) s (logs/)"
    fi
    rmdir "claims/$took"
  done
}

jobs_all() {
  rm -rf claims failed && mkdir claims failed  # claims and failures of an earlier, stopped run
  local pids=()
  for i in $(seq 1 "$WORKERS"); do worker "$i" & pids+=($!); sleep 2; done
  for p in "${pids[@]}"; do wait "$p"; done
}

report() {
  mkdir -p "$OUT"
  local names=() n
  for n in udr-frozen udr-both epr bm25 sbert random; do [[ -d "metrics/$n" ]] && names+=("$n"); done
  for n in "${names[@]}"; do
    mkdir -p "$OUT/$n"
    cp metrics/"$n"/*.json "$OUT/$n/"
    cp data/predictions/"$n"/*.parquet "$OUT/$n/"
  done
  for n in udr-frozen epr udr-both; do  # finished trainings' last losses
    if [[ -f "done/train-$n" ]]; then cp "metrics/train/$n/metrics.json" "$OUT/train-$n.json"; fi
  done
  local a b g tasks
  for a in udr-frozen udr-both; do
    for b in epr bm25 sbert random udr-frozen; do
      [[ "$a" == "$b" ]] && continue
      for g in seen unseen; do
        if [[ "$g" == seen ]]; then tasks=("${SEEN[@]}"); else tasks=("${UNSEEN[@]}"); fi
        local targs=() ok=1 t
        for t in "${tasks[@]}"; do
          [[ -f "metrics/$a/$t.json" && -f "metrics/$b/$t.json" ]] || ok=0
          targs+=(-t "$t")
        done
        [[ "$ok" == 1 ]] || continue
        udr exp compare "$a" "$b" "${targs[@]}" --json > "$OUT/compare-$a-$b-$g.json"
      done
    done
  done
  # The params as run, the data mirror relative to the repository (no machine's path in a committed file).
  "$PY" - "$REPO" "$OUT/params.yaml" <<'EOF'
import os, sys, yaml
from pathlib import Path
p = yaml.safe_load(Path("params.yaml").read_text())
p["data"]["source_dir"] = os.path.relpath(p["data"]["source_dir"], sys.argv[1])
head = "# The params of this run's project (build/test-q1000, run.sh); data.source_dir relative to the repository.\n"
Path(sys.argv[2]).write_text(head + yaml.safe_dump(p, sort_keys=False))
EOF
  cp code/REV "$OUT/CODE_REV"
  "$PY" "$OUT/write_results.py" "$OUT" "$WORK"
  log "report: $OUT/results.md"
}

start=$SECONDS
case "${ONLY:-all}" in
  setup) setup ;;
  jobs) jobs_all ;;
  report) report ;;
  all) setup; jobs_all; report ;;
esac
log "run.sh ${ONLY:-all}: $((SECONDS - start)) s wall"
exit
}
