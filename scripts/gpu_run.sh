#!/usr/bin/env bash
# One call on the H200 (see ../shared/gpu/README.md): install the carried wheels, then run the
# test suite on the GPU and the softmax benchmark, logs under $OUT.
#   device run: bash scripts/gpu_run.sh [tests|bench|all] (carry .whl)
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"        # wheels, PYTHONPATH, FLASHLESSON_DEVICE=gpu, $OUT
what=${1:-all}; shift || true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -m flashlesson.cli info | tee -a "$OUT/gpu.txt"
rc=0
if [ "$what" = tests ] || [ "$what" = all ]; then
  python3 -m pytest -q -x -p no:cacheprovider "$@" 2>&1 | tee "$OUT/pytest.log" | tail -15; rc=${PIPESTATUS[0]}
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  python3 -m flashlesson.cli bench softmax --json "$OUT/bench_softmax.json" "$@" > "$OUT/bench_softmax.log" 2>&1 || rc=1
  tail -120 "$OUT/bench_softmax.log"
fi
exit $rc
