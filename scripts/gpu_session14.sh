#!/bin/bash
# Session 14's H200 call (issue 16): the float32 (3xTF32) wgmma backward at d = 128. (1) Its
# tests at seed SEED (20261203): tests/test_attention_wgmma_tf32_backward.py and the wgmma
# backward's accuracy against torch efficient (TESTS=0: none); (2) scripts/gpu_wgmma_tf32.py
# --backward on BWD_SHAPES (SHAPES, default 3: B1 H16 N8192 d128; SWEEP=1: the other
# configurations too), kernel-only and end to end, torch in the same process; (3) DIAG=1:
# scripts/diag13_streams.py on its case 5 (float32 B1 H16 N8192 d128): each kernel of the
# default call alone, kernel-only. Logs under $OUT.
# Runs 1–3 of docs/logs/2026-12-02_tf32_backward_d128_cudnn_h200.log (run 3 with TESTS=0 DIAG=1, then
# scripts/gpu_green.sh on half of the suite with BUDGET).
#   device run: bash scripts/gpu_session14.sh   (carry .whl)
source scripts/gpu_env.sh
gpu_facts > "$OUT/facts.log" 2>&1
start=$(date +%s)
rc_tests=skipped
if [ "${TESTS:-1}" = 1 ]; then
  FLASHLESSON_SEED=${SEED:-20261203} timeout ${TESTS_S:-300} python3 -m pytest -q \
      -p no:cacheprovider -n 8 tests/test_attention_wgmma_tf32_backward.py \
      tests/test_tf32x3_accuracy.py > "$OUT/tests.log" 2>&1
  rc_tests=$?
fi
timeout ${BENCH_S:-240} python3 scripts/gpu_wgmma_tf32.py --backward --shapes ${SHAPES:-3} \
    ${SWEEP:+--sweep} --json "$OUT/bwd.json" > "$OUT/bwd.log" 2>&1
rc_bench=$?
rc_diag=skipped
if [ -n "${DIAG:-}" ]; then
  timeout ${DIAG_S:-150} python3 scripts/diag13_streams.py --shapes 5 --json "$OUT/diag.json" \
      > "$OUT/diag.log" 2>&1
  rc_diag=$?
fi
head -2 "$OUT/facts.log"
[ -f "$OUT/tests.log" ] && tests_report tests $rc_tests "$OUT/tests.log"
echo "--- backward rc=$rc_bench"; grep -E "Error|Traceback" "$OUT/bwd.log" | head -3
sed -n '/^shape /,$p' "$OUT/bwd.log"
if [ -f "$OUT/diag.log" ]; then
  echo "--- diag rc=$rc_diag"; grep -E "Error|Traceback" "$OUT/diag.log" | head -3
  sed -n '/^shape /,$p' "$OUT/diag.log"
fi
echo "wall $(( $(date +%s) - start )) s"
