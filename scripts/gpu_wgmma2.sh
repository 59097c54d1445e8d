#!/usr/bin/env bash
# Second H200 call for flash_wgmma (≈ 4 min): its tests and the launch layer's, the kernel-only
# benchmark with --sweep (d = 64 configs), its ladder, and `bench overhead`. Logs under $OUT.
#   device run: bash scripts/gpu_wgmma2.sh   (carry .whl)
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1 FLASHLESSON_DEVICE=gpu
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
timeout 100 python3 -m pytest -q -rs --tb=short -p no:cacheprovider -n 8 tests/test_launch.py \
  tests/test_attention_tc.py -k "wgmma or launch or thread or fast" > "$OUT/pytest.log" 2>&1
echo "--- pytest rc=$?"; grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head; tail -1 "$OUT/pytest.log"
timeout 200 python3 scripts/gpu_wgmma.py --sweep --shapes 0,1,2 --json "$OUT/bench_wgmma.json" \
  --budget-s 150 > "$OUT/bench_wgmma.log" 2>&1
echo "--- bench rc=$?"; sed -n '/^shape /,$p' "$OUT/bench_wgmma.log"
timeout 100 python3 -m flashlesson bench ladder --only attention_wgmma --json "$OUT/ladder_wgmma.json" \
  > "$OUT/ladder_wgmma.log" 2>&1; echo "--- ladder rc=$?"; tail -8 "$OUT/ladder_wgmma.log"
timeout 60 python3 -m flashlesson bench overhead --json "$OUT/bench_overhead.json" 2>&1 | grep -E "µs|rror"
echo "wall $(( $(date +%s) - start )) s"
