#!/usr/bin/env bash
# A short H200 call (≈ 2 min): the 3xTF32 accuracy tests against torch (errors printed), the
# host-time breakdown (scripts/host_micro.py) and the tiny transformer. Logs under $OUT.
#   device run: bash scripts/gpu_probe.sh   (carry .whl)
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"        # wheels, PYTHONPATH, FLASHLESSON_DEVICE=gpu, $OUT
timeout 150 python3 -m pytest -q -s -p no:cacheprovider -k torch_efficient tests/test_tf32x3_accuracy.py 2>&1 | grep -E "vs torch|passed|failed|Error" | tail -20
timeout 100 python3 examples/train_tiny_transformer.py 2>&1 | tail -3
timeout 150 python3 scripts/host_micro.py > "$OUT/host_micro.log" 2>&1; tail -60 "$OUT/host_micro.log"
