#!/bin/bash
# The 3xTF32 wgmma kernels on the H200 (issue 16, sessions 10–11): their tests, then the
# benchmark (scripts/gpu_wgmma_tf32.py; SWEEP=1: the other tiles too; LADDER=1: the forward's
# ladder). BACKWARD=1: the backward's tests and benchmark instead (--backward; LADDER=1: its
# ladder). Logs under $OUT.
source scripts/gpu_env.sh
gpu_facts > "$OUT/facts.log" 2>&1
if [ -n "$BACKWARD" ]; then
  # the float32 backward's tests (and flash_tc's, whose dQ sums changed in session 11) at the
  # seed that failed there, the benchmark, two more seeds of the d = 128 accuracy case, the ladder
  FLASHLESSON_SEED=${SEED:-20261211} python3 -m pytest -q -p no:cacheprovider -n 8 \
      tests/test_attention_wgmma_tf32_backward.py tests/test_tf32x3_accuracy.py \
      tests/test_attention_tc_backward.py tests/test_attention_wgmma_backward.py::test_refusals \
      > "$OUT/tests.log" 2>&1
  tests_report tests $? "$OUT/tests.log"
  python3 scripts/gpu_wgmma_tf32.py --backward --json "$OUT/bench_bwd.json" ${SWEEP:+--sweep} \
      > "$OUT/bench_bwd.log" 2>&1
  bench_report $? "$OUT/bench_bwd.log"
  for s in 1 2; do
    FLASHLESSON_SEED=$s python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_tf32x3_accuracy.py \
        -k "accurate" > "$OUT/seed$s.log" 2>&1
    tests_report "accuracy seed $s" $? "$OUT/seed$s.log"
  done
  if [ -n "$LADDER" ]; then
    python3 -m flashlesson bench ladder --only attention_wgmma_tf32_backward \
        --json "$OUT/ladder_bwd.json" > "$OUT/ladder_bwd.log" 2>&1
    echo "--- ladder rc=$?"; tail -8 "$OUT/ladder_bwd.log"
  fi
  exit
fi
python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_hopper.py tests/test_attention_tc.py \
    tests/test_tf32x3_accuracy.py -k "tf32" > "$OUT/tests.log" 2>&1
tests_report tests $? "$OUT/tests.log"
python3 scripts/gpu_wgmma_tf32.py --json "$OUT/bench.json" ${SWEEP:+--sweep} > "$OUT/bench.log" 2>&1
bench_report $? "$OUT/bench.log"
if [ -n "$LADDER" ]; then         # the kernel file's ladder (then locally: bench ladder --write)
  python3 -m flashlesson bench ladder --only attention_wgmma_tf32 --json "$OUT/ladder.json" \
      > "$OUT/ladder.log" 2>&1; echo "--- ladder rc=$?"; tail -8 "$OUT/ladder.log"
fi
