#!/usr/bin/env bash
# compute-sanitizer over every kernel family, on the GPU: racecheck (shared-memory hazards
# between threads of a block — the GPU side of the simulator's race mode,
# kernels_numba/sim/races.py) and memcheck (out-of-bounds and misaligned global/shared accesses).
# The workload is scripts/sanitize_launches.py: each kernel launched once on small shapes that
# cross tile edges (softmax methods, flash/fa1/db/naive forward with causal, padding, dropout,
# the backward, varlen, linear attention, the tensor-core kernels fp16/bf16/3xTF32, ASYNC and
# prefetching configs). Sanitized kernels run 10–100× slower: a few small launches only.
#   device run: bash scripts/gpu_sanitize.sh (carry .whl, see gpu_env.sh); logs under $OUT
#   env: SANITIZE_TOOLS (default "racecheck memcheck"), SANITIZE_ONLY (groups, comma-separated,
#        passed to --only), SANITIZE_TIMEOUT (seconds per tool, default 80)
# Exit status: 0 when every tool reports 0 errors and every launch is ok, 1 otherwise (2 when no
# compute-sanitizer is found).
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"        # wheels, PYTHONPATH, FLASHLESSON_DEVICE=gpu, $OUT
# Numba under the sanitizer: no debug build (NUMBA_CUDA_DEBUGINFO=1 would change the code being
# checked, and numba-cuda 0.30 has no environment switch for line info: reports name the
# kernel's mangled Python name, enough to find it); the driver's PTX JIT cache off, so every
# module is JIT-loaded, and instrumented, in this process.
export NUMBA_CUDA_DEBUGINFO=0 CUDA_CACHE_DISABLE=1

CS=$(command -v compute-sanitizer || true)
if [ -z "$CS" ]; then
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer \
           /usr/local/cuda*/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer; do
    [ -x "$c" ] && { CS=$c; break; }
  done
fi
if [ -z "$CS" ]; then
  # the pip wheel (nvidia-cuda-sanitizer-api) has no front end; say so instead of passing
  echo "gpu_sanitize: compute-sanitizer not found (PATH, /usr/local/cuda*/bin)" | tee "$OUT/sanitize.log"
  exit 2
fi
echo "compute-sanitizer: $CS ($("$CS" --version | tail -1))" | tee "$OUT/sanitize.log"

ONLY=()
[ -n "${SANITIZE_ONLY:-}" ] && ONLY=(--only "$SANITIZE_ONLY")
rc=0
for tool in ${SANITIZE_TOOLS:-racecheck memcheck}; do
  extra=()
  [ "$tool" = racecheck ] && extra=(--racecheck-report hazard)
  [ "$tool" = memcheck ] && extra=(--leak-check no)
  log="$OUT/sanitize_$tool.log"
  start=$(date +%s)
  # --error-exitcode: a hazard or bad access makes the run fail even if the script exits 0;
  # --target-processes all: Numba may start helpers; --print-limit keeps the log readable
  timeout "${SANITIZE_TIMEOUT:-80}" "$CS" --tool "$tool" "${extra[@]}" --error-exitcode 9 \
    --print-limit 30 --target-processes all \
    python3 scripts/sanitize_launches.py "${ONLY[@]}" > "$log" 2>&1
  code=$?
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|HAZARD|Invalid|launch\(es\) failed|all launches ok" "$log" | sort | uniq -c | head -12)
  echo "== $tool: exit $code in $(( $(date +%s) - start )) s" | tee -a "$OUT/sanitize.log"
  echo "$summary" | tee -a "$OUT/sanitize.log"
  if [ "$code" = 124 ]; then
    echo "   (timed out: set SANITIZE_TIMEOUT or SANITIZE_ONLY)" | tee -a "$OUT/sanitize.log"
  fi
  # errors: a nonzero exit (9: the sanitizer found something; 1: a launch failed), or a
  # summary that counts errors/hazards
  if [ "$code" != 0 ] || grep -qE "ERROR SUMMARY: [1-9]|[1-9][0-9]* hazards? displayed \([1-9]" "$log"; then
    rc=1
    grep -E "^=========" "$log" | head -40 | tee -a "$OUT/sanitize.log"
  fi
done
exit $rc
