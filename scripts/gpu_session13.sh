#!/bin/bash
# Session 13's H200 calls (issue 16), a change checked and measured against the commit before:
# (1) the tests it touches, at seed 20261202 (TEST_FILES: which; TESTS=0: none); (2)
# scripts/diag13_streams.py on DIAG_SHAPES (indices into its CASES; 1, 2, 4: fp16 N4096 d64,
# N8192 d128, fp32 N4096 d64): each kernel alone, kernel-only, torch in the same process; (3)
# the same with BEFORE, a folder holding the commit before's kernels_numba (and flashlesson,
# where the change reaches it) put first on the path: the "before" on the same machine, minutes
# apart; (4) the launch layer's host-time check (OVER=0: none); (5) scripts/gpu_defaults.py in
# what is left of CAP (540) seconds. Logs under $OUT; each step under its own timeout (DIAG_S,
# OVER_S). Runs 1, 3, 4 of docs/logs/2026-12-02_causal_dq_packing_host_time_h200.log; session 12's gpu_session12.sh
# is this with SEED=20261211, its TEST_FILES, DIAG_SHAPES=0,1,2,3,4 (docs/logs/
# 2026-12-02_backward_side_stream_h200.log, run 3).
#   device run: BEFORE=s13_before bash scripts/gpu_session13.sh   (carry .whl)
source scripts/gpu_env.sh
gpu_facts > "$OUT/facts.log" 2>&1
start=$(date +%s)
rc_tests=skipped
if [ "${TESTS:-1}" = 1 ]; then    # TESTS=0: no tests (a later call, the code unchanged)
  FLASHLESSON_SEED=${SEED:-20261202} timeout 170 python3 -m pytest -q -p no:cacheprovider -n 8 \
      ${TEST_FILES:-tests/test_launch.py tests/test_attention_wgmma_backward.py \
      tests/test_attention_wgmma_tf32_backward.py tests/test_edge_documented.py} \
      -k "not documented or attention_backward" > "$OUT/tests.log" 2>&1
  rc_tests=$?
fi
timeout ${DIAG_S:-120} python3 scripts/diag13_streams.py --shapes ${DIAG_SHAPES:-1,2,4} \
    --json "$OUT/diag13.json" > "$OUT/diag13.log" 2>&1
rc_diag=$?
rc_before=skipped
if [ -n "${BEFORE:-}" ]; then
  PYTHONPATH=$PWD/$BEFORE:$PYTHONPATH timeout 120 python3 scripts/diag13_streams.py \
      --shapes ${DIAG_SHAPES:-1,2,4} --json "$OUT/diag13_before.json" > "$OUT/diag13_before.log" 2>&1
  rc_before=$?
fi
rc_over=skipped
if [ "${OVER:-1}" = 1 ]; then    # OVER=0: no host-time check
  timeout ${OVER_S:-120} python3 scripts/gpu_overhead_check.py --json "$OUT/bench_overhead.json" \
      > "$OUT/overhead.log" 2>&1
  rc_over=$?
fi
left=$(( ${CAP:-540} - $(date +%s) + start ))
rc_def=skipped
if [ $left -gt 60 ]; then
  timeout $left python3 scripts/gpu_defaults.py --json "$OUT/defaults.json" \
      ${DEFAULT_SHAPES:+--shapes $DEFAULT_SHAPES} > "$OUT/defaults.log" 2>&1
  rc_def=$?
fi
head -2 "$OUT/facts.log"
[ -f "$OUT/tests.log" ] && tests_report tests $rc_tests "$OUT/tests.log"
echo "--- overhead check rc=$rc_over"; grep -E "^FAIL" "$OUT/overhead.log" | head; tail -12 "$OUT/overhead.log"
echo "--- defaults rc=$rc_def"; sed -n "/^shape /,\$p" "$OUT/defaults.log"
for f in diag13 diag13_before; do
  [ -f "$OUT/$f.log" ] || continue
  echo "--- $f"; grep -E "Error|Traceback" "$OUT/$f.log" | head -3; sed -n '/^shape /,$p' "$OUT/$f.log"
done
echo "rc: diag $rc_diag before $rc_before; wall $(( $(date +%s) - start )) s"
