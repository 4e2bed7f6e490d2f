#!/usr/bin/env bash
# The default run's wall time on this CPU kind, stage by stage, as docs/performance.md keeps it one table per
# kind: a clean clone of this checkout's HEAD (uncommitted changes are not in it) beside the checkout, so
# that ../shared holds the task data for it as for the checkout; there `/usr/bin/time -v make run`, the
# install of a fresh .venv included, each output line stamped with the second it came
# (CLONE/make-run.log); then make_run_times.py's table. Run it alone on the machine, in the background: it
# takes as long as `make run` (docs/performance.md). TARGET=reproduce times `make reproduce` instead.
# TWICE=1 then commits that run's results in CLONE (its dvc.lock, metrics/, data/predictions/, README) and
# times `make run` again in a clean clone of that commit, CLONE-results: the run as the CPU kind that made
# the committed results sees it (docs/performance.md's two columns per kind).
#
#   nohup bash benchmarks/make_run.sh [CLONE=../udr-make-run] > make-run.md 2> make-run.err &
#   TWICE=1 nohup bash benchmarks/make_run.sh [CLONE] > make-run.md 2> make-run.err &
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
CLONE=${1:-$(dirname "$REPO")/udr-make-run}
TARGET=${TARGET:-run}
for dir in "$CLONE" $([ "${TWICE:-0}" = 1 ] && echo "$CLONE-results"); do
    if [ -e "$dir" ]; then
        echo "benchmarks/make_run.sh: error: $dir exists; give a new directory beside the checkout" >&2
        exit 1
    fi
done
[ -x /usr/bin/time ] || { echo "benchmarks/make_run.sh: error: /usr/bin/time is missing (apt install time)" >&2; exit 1; }
git clone -q "$REPO" "$CLONE"
source "$REPO/benchmarks/cpu_line.sh"
echo "# CPU: $(cpu_line); $(nproc) cores; commit $(git -C "$CLONE" rev-parse --short HEAD); make $TARGET"
echo
cd "$CLONE"
set +e
/usr/bin/time -v make "$TARGET" 2>&1 | while IFS= read -r line; do printf '%s %s\n' "$(date +%s)" "$line"; done > make-run.log
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ]; then
    echo "benchmarks/make_run.sh: error: make $TARGET failed (exit $status); its log: $CLONE/make-run.log" >&2
    exit 1
fi
"${PYTHON:-python3}" "$REPO/benchmarks/make_run_times.py" make-run.log
if [ "${TWICE:-0}" = 1 ]; then
    git add -u && git add metrics data/predictions
    git -c user.name=make_run.sh -c user.email=make_run.sh@localhost commit -q --allow-empty \
        -m "make $TARGET's results on $(cpu_line)"
    echo
    TWICE=0 bash "$CLONE/benchmarks/make_run.sh" "$CLONE-results"
fi
