#!/usr/bin/env bash
# Host time per call with each binding of cuLaunchKernel (FLASHLESSON_LAUNCH_DRIVER), on the
# H200 (≈ 2 min): scripts/host_micro.py, then `flashlesson bench overhead` once per driver.
#   device run: bash scripts/gpu_host_drivers.sh   (carry .whl)
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1 FLASHLESSON_DEVICE=gpu
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 100 python3 scripts/host_micro.py > "$OUT/host_micro.log" 2>&1
grep -E "driver|Packed|cuda.core|step" "$OUT/host_micro.log"
for d in ctypes pydll bindings; do
  echo "--- FLASHLESSON_LAUNCH_DRIVER=$d"
  FLASHLESSON_LAUNCH_DRIVER=$d timeout 80 python3 -m flashlesson bench overhead \
    --json "$OUT/overhead_$d.json" 2>&1 | grep -E "µs|rror"
done
