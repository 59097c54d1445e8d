#!/usr/bin/env bash
# One call on the H200 (≈ 5 min) for what was written without a GPU: issue 14's call plans
# (flashlesson.calls, turned on here) and issue 16's staged 3xTF32 accumulation. Logs under $OUT.
#   device run: bash scripts/gpu_plans.sh   (carry .whl)
# 1. scripts/gpu_overhead_check.py: replays == first calls == Numba's call (bitwise), host µs per
#    call beside torch's, a CUDA-graph capture;  2. the tiny transformer (step time vs torch);
# 3. the tests of the launch layer, call plans, flashlesson.torch and 3xTF32 accuracy (GPU);
# 4. end to end beside kernel-only (softmax, attention --quick); 5. the 3xTF32 ladders' rows.
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"        # wheels, PYTHONPATH, FLASHLESSON_DEVICE=gpu, $OUT
start=$(date +%s)
step() {  # name, timeout, command…: run, log to $OUT/name.log, print rc and the log's tail
  local name=$1 t=$2; shift 2
  local t0=$(date +%s)
  timeout "$t" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "=== $name rc=$rc $(( $(date +%s) - t0 )) s"; tail -${TAIL:-14} "$OUT/$name.log"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%FT%TZ
step overhead 120 python3 scripts/gpu_overhead_check.py --json "$OUT/bench_overhead.json"
TAIL=5 step train 120 python3 examples/train_tiny_transformer.py
TAIL=6 step pytest 150 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_calls.py \
  tests/test_launch.py tests/test_torch.py tests/test_tf32x3_accuracy.py
TAIL=30 step bench_softmax 100 python3 -m flashlesson bench softmax --n 1024 32768 --method auto \
  --json "$OUT/bench_softmax.json"
TAIL=30 step bench_attention 150 python3 -m flashlesson bench attention --quick --json "$OUT/bench_attention.json"
TAIL=20 step ladder_tf32 100 python3 -m flashlesson bench ladder --only attention_tf32x3_backward \
  attention_tc --json "$OUT/ladder_tf32.json"
echo "wall $(( $(date +%s) - start )) s"
