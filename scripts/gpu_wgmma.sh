#!/usr/bin/env bash
# Issue 16, items 2–3, on the H200 (< 200 s): the Hopper helpers alone (tests/test_hopper.py:
# wgmma B N-major and A from registers, whose failure messages name the layout the hardware
# used; cp.async on an mbarrier), flash_wgmma against the oracle (tests/test_attention_tc.py -k
# wgmma), then the kernel-only benchmark of flash_wgmma's ladder variants vs flash_tc vs torch
# SDPA flash, checked against torch in the same run (scripts/gpu_wgmma.py). Logs under $OUT.
#   device run: bash scripts/gpu_wgmma.sh   (carry .whl; SWEEP=1: the benchmark's --sweep
#   configs too, and 400 s; LADDER=1: then the attention_wgmma ladder; OVERLAP=1: the benchmark
#   is --overlap instead — torch flash, the default and the OVERLAP configs — < 4 min in all;
#   CWG3=1: --cwg3 instead — the default and the CWG = 3 configs at d = 64, < 4 min in all;
#   WIDE=1: --wide instead — each head dim's default and the wide K/V tiles (Bc 176, 192) at
#   the three shapes, < 6 min in all)
#   PINGPONG=1: --pingpong instead — the default and the PINGPONG configs of each head dim, with
#   and without OVERLAP, at all three shapes, and 60 s more; SWIZZLE=1: --swizzle --tc instead —
#   each head dim's default (swizzled since session 7) beside the unswizzled block, the FA3
#   schedules with the swizzle, flash_tc and torch cuDNN, 40 s more; its tests,
#   tests/test_hopper.py's MN-major swizzle case and -k wgmma_swizzle, run in step 1)
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"        # wheels, PYTHONPATH, FLASHLESSON_DEVICE=gpu, $OUT
start=$(date +%s)
gpu_facts > "$OUT/gpu.txt" 2>&1
# 1. the helpers alone (a layout error shows here with its diagnosis) and flash_wgmma against
# the oracle: two pytest processes side by side (compilation is most of their time; the wgmma
# one 120 s since the wide-tile cases)
timeout 90 python3 -m pytest -q -rs --tb=short -p no:cacheprovider -n 6 tests/test_hopper.py \
  > "$OUT/pytest_hopper.log" 2>&1 &
p_hopper=$!
timeout 120 python3 -m pytest -q -rs --tb=short -p no:cacheprovider -n 8 tests/test_attention_tc.py \
  -k wgmma > "$OUT/pytest_wgmma.log" 2>&1 &
p_wgmma=$!
wait $p_hopper; rc_hopper=$?
wait $p_wgmma; rc_wgmma=$?
# 2. the benchmark alone on the GPU, with what is left of 195 s
left=$(( ${SWEEP:+200 +} ${OVERLAP:+20 +} ${CWG3:+20 +} ${WIDE:+120 +} ${PINGPONG:+60 +} ${SWIZZLE:+40 +} 195 - $(date +%s) + start))
timeout $left python3 scripts/gpu_wgmma.py ${SWEEP:+--sweep} ${OVERLAP:+--overlap} ${CWG3:+--cwg3} \
  ${WIDE:+--wide} ${PINGPONG:+--pingpong} ${SWIZZLE:+--swizzle --tc} --json "$OUT/bench_wgmma.json" \
  --budget-s $((left - 30)) > "$OUT/bench_wgmma.log" 2>&1
rc_bench=$?
# 3. LADDER=1: the ladder of attention_wgmma.py, checked and timed (--write --from F fills it)
rc_ladder=0
if [ -n "${LADDER:-}" ]; then
  timeout 100 python3 -m flashlesson bench ladder --only attention_wgmma \
    --json "$OUT/ladder_wgmma.json" > "$OUT/ladder_wgmma.log" 2>&1; rc_ladder=$?
fi
cat "$OUT/gpu.txt"
tests_report test_hopper.py "$rc_hopper" "$OUT/pytest_hopper.log"
grep -E "N-major B|RS \(" "$OUT/pytest_hopper.log" | head -8      # (a layout's diagnosis)
tests_report "test_attention_tc.py -k wgmma" "$rc_wgmma" "$OUT/pytest_wgmma.log"
bench_report "$rc_bench" "$OUT/bench_wgmma.log"
[ -n "${LADDER:-}" ] && { echo "--- ladder rc=$rc_ladder"; tail -8 "$OUT/ladder_wgmma.log"; }
echo "rc: test_hopper $rc_hopper, test_attention_tc -k wgmma $rc_wgmma, bench $rc_bench, ladder $rc_ladder"   # (last: a tail keeps it)
echo "wall $(( $(date +%s) - start )) s"
[ "$rc_hopper" = 0 ] && [ "$rc_wgmma" = 0 ] && [ "$rc_bench" = 0 ] && [ "$rc_ladder" = 0 ]
