#!/bin/bash
# Session 12's one H200 call (issue 16): the side-by-side backward (launch.launch_beside) checked
# and measured. (1) the tests it touches (the float32 pair: test_launch's case and (2)'s
# bitwise check), at seed 20261211; (2) scripts/diag13_streams.py: one
# stream against the fork, kernel-only, torch in the same process; (3) the launch layer's GPU
# check (call plans replayed bitwise, a captured step); (4) scripts/gpu_defaults.py: the fp16
# default calls kernel-only and end to end, in what is left of CAP (430) seconds (DEFAULT_SHAPES=0:
# the first shape only). Logs under $OUT; each step under its own timeout.
#   device run: bash scripts/gpu_session12.sh   (carry .whl)
source scripts/gpu_env.sh
gpu_facts > "$OUT/facts.log" 2>&1
start=$(date +%s)
FLASHLESSON_SEED=${SEED:-20261211} timeout 200 python3 -m pytest -q -p no:cacheprovider -n 8 \
    tests/test_launch.py tests/test_calls.py tests/test_attention_wgmma_backward.py \
    tests/test_edge_documented.py -k "not documented or attention_backward" \
    > "$OUT/tests.log" 2>&1
rc_tests=$?
timeout 100 python3 scripts/diag13_streams.py --json "$OUT/diag13.json" > "$OUT/diag13.log" 2>&1
rc_diag=$?
timeout 70 python3 scripts/gpu_overhead_check.py --json "$OUT/bench_overhead.json" \
    > "$OUT/overhead.log" 2>&1
rc_over=$?
left=$(( ${CAP:-430} - $(date +%s) + start ))        # (4) in what is left of CAP seconds
rc_def=skipped
if [ $left -gt 60 ]; then
  timeout $left python3 scripts/gpu_defaults.py --json "$OUT/defaults.json" ${DEFAULT_SHAPES:+--shapes $DEFAULT_SHAPES} \
      > "$OUT/defaults.log" 2>&1
  rc_def=$?
fi
head -2 "$OUT/facts.log"
tests_report tests $rc_tests "$OUT/tests.log"
echo "--- overhead check rc=$rc_over"; grep -E "^FAIL" "$OUT/overhead.log" | head; tail -2 "$OUT/overhead.log"
echo "--- defaults rc=$rc_def"; sed -n "/^shape /,\$p" "$OUT/defaults.log"
echo "--- diag13 rc=$rc_diag"; grep -E "Error|Traceback" "$OUT/diag13.log" | head -3
sed -n '/^B.*head 0/,$p' "$OUT/diag13.log"
echo "wall $(( $(date +%s) - start )) s"
