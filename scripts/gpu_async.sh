#!/usr/bin/env bash
# Issue 16 item 3 on the H200 (< 150 s): §42–43 on Hopper's machinery (method flash_async,
# kernels_numba/attention_async.py). 1) its tests on the GPU (the real cp.async.bulk, mbarriers,
# named barrier, setmaxnreg; outputs poisoned, masked keys holding NaN); 2) the attention_db
# ladder (lesson §42/§43, flash_db, producers=1, the two new steps, flash) checked and timed,
# JSON in $OUT/ladder_db.json (then, on any machine: flashlesson bench ladder --write --from F);
# 3) scripts/time_async.py: stages, tiles and consumer warpgroups, checked against flash, timed;
# the short table last. Logs under $OUT.
#   device run: bash scripts/gpu_async.sh   (carry .whl)
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"        # wheels, PYTHONPATH, FLASHLESSON_DEVICE=gpu, $OUT
start=$(date +%s)
gpu_facts > "$OUT/gpu.txt" 2>&1
timeout 45 python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_attention_async.py > "$OUT/pytest_async.log" 2>&1
rc_tests=$?
echo "--- tests rc=$rc_tests ($(( $(date +%s) - start )) s)"; grep -E "FAILED|ERROR|ptxas|passed|failed" "$OUT/pytest_async.log" | head -20
left=$((140 - $(date +%s) + start))
timeout $(( left > 95 ? 75 : left - 20 )) python3 -m flashlesson bench ladder --only attention_db --json "$OUT/ladder_db.json" > "$OUT/ladder_db.log" 2>&1
rc_ladder=$?
echo "--- ladder rc=$rc_ladder ($(( $(date +%s) - start )) s)"
left=$((145 - $(date +%s) + start))
timeout $(( left > 10 ? left : 10 )) python3 scripts/time_async.py --json "$OUT/time_async.json" > "$OUT/time_async.log" 2>&1
rc_sweep=$?
echo "--- sweep rc=$rc_sweep ($(( $(date +%s) - start )) s)"
cat "$OUT/gpu.txt"
echo "=== ladder attention_db (B2 H16 N4096 d64 fp32)"
grep -E "^attention_db\.py" "$OUT/ladder_db.log" | cut -c1-160 || grep -E "^attention_db |Error" "$OUT/ladder_db.log" | cut -c1-160
echo "=== flash_async variants"; tail -13 "$OUT/time_async.log"
echo "wall $(( $(date +%s) - start )) s"
[ "$rc_tests" = 0 ] && [ "$rc_ladder" = 0 ] && [ "$rc_sweep" = 0 ]
