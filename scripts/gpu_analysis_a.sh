#!/usr/bin/env bash
# One call on the H200 for §26, §44, §45 (issue 5): the three sections' examples (checked, with
# their GPU tables: bandwidth per memory level, linear vs flash timing), the memory-hierarchy
# bench as JSON, and the tests of §26 and §45 with GPU shapes. Expects PYTHONPATH with
# numba-cuda and the checkout (src/ and the root), as scripts/gpu_run.sh sets it. Steps run in
# order of importance, each cut at its limit and all within BUDGET seconds (default 115).
#   bash scripts/gpu_analysis_a.sh          logs and JSON under $OUT (default /tmp/out)
set -uo pipefail
export PYTHONUNBUFFERED=1 FLASHLESSON_DEVICE=gpu
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=${BUDGET:-115}
rc=0
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } \
  > "$OUT/gpu.txt" 2>&1
step() {  # step NAME SECONDS COMMAND...: run it, log to $OUT/NAME.log, show its tail
  local name=$1 limit=$2; shift 2
  local left=$((BUDGET - SECONDS))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -le 5 ]; then echo "== $name: skipped (budget spent)"; rc=1; return; fi
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; local status=$?
  echo "== $name: exit $status in $((SECONDS - t0)) s (limit $limit s)"
  tail -"${TAIL:-25}" "$OUT/$name.log"
  [ $status -eq 0 ] || rc=1
}
TAIL=45 step sections 65 python3 -m flashlesson.cli section 26 44 45
TAIL=14 step bench_hierarchy 25 \
  python3 -m flashlesson.cli bench hierarchy --json "$OUT/bench_hierarchy.json"
TAIL=14 step pytest 45 python3 -m pytest -q -p no:cacheprovider --durations=8 \
  tests/test_hierarchy.py tests/test_linear_attention.py
echo "total $SECONDS s"
exit $rc
