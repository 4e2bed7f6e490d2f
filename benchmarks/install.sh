#!/usr/bin/env bash
# Install size and cold `udr retrieve` time of the serving install (`pip install udr`) against the full
# pipeline install (`pip install 'udr[pipeline]'`), each in a fresh venv with the CPU torch wheel first.
# Usage: benchmarks/install.sh PROJECT_DIR   (a project with models/final, e.g. after `make run`)
# Prints a table; the cold time is the median of 3 runs of a new process (after one warm-up run).
set -euo pipefail
project=$(cd "${1:?give a project directory with models/final}" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
printf '| install | packages | site-packages (MiB) | install (s) | cold `udr retrieve` (s, median of 3) |\n'
printf '| --- | ---: | ---: | ---: | ---: |\n'
for kind in serving pipeline; do
  venv="$work/$kind"
  python3 -m venv "$venv"
  start=$(date +%s)
  "$venv/bin/pip" install -q --disable-pip-version-check torch==2.13.0 >/dev/null 2>&1
  target="$repo"; [ "$kind" = pipeline ] && target="$repo[pipeline]"
  "$venv/bin/pip" install -q --disable-pip-version-check "$target" >/dev/null 2>&1
  seconds=$(( $(date +%s) - start ))
  size=$(du -sm "$venv/lib/"python3*/site-packages | cut -f1)
  packages=$("$venv/bin/pip" list 2>/dev/null | tail -n +3 | wc -l)
  (cd "$project" && "$venv/bin/udr" retrieve "Who wrote the novel Dracula?" --task trec -k 3 --json >/dev/null) || { echo "udr retrieve failed in the $kind install" >&2; exit 1; }
  times=()
  for _ in 1 2 3; do
    s=$(date +%s.%N)
    (cd "$project" && "$venv/bin/udr" retrieve "Who wrote the novel Dracula?" --task trec -k 3 --json >/dev/null) || { echo "udr retrieve failed in the $kind install" >&2; exit 1; }
    times+=("$(echo "$(date +%s.%N) - $s" | bc)")
  done
  median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n 2p)
  printf '| %s | %s | %s | %s | %.2f |\n' "$kind" "$packages" "$size" "$seconds" "$median"
done
rm -rf "$work"
