#!/bin/bash
# The 3xTF32 wgmma forward on the H200 (issue 16, session 10): its tests, then the benchmark
# (scripts/gpu_wgmma_tf32.py; SWEEP=1: the other tiles too; LADDER=1: its ladder). Logs
# under $OUT.
source scripts/gpu_env.sh
gpu_facts > "$OUT/facts.log" 2>&1
python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_hopper.py tests/test_attention_tc.py \
    tests/test_tf32x3_accuracy.py -k "tf32" > "$OUT/tests.log" 2>&1
tests_report tests $? "$OUT/tests.log"
python3 scripts/gpu_wgmma_tf32.py --json "$OUT/bench.json" ${SWEEP:+--sweep} > "$OUT/bench.log" 2>&1
bench_report $? "$OUT/bench.log"
if [ -n "$LADDER" ]; then         # the kernel file's ladder (then locally: bench ladder --write)
  python3 -m flashlesson bench ladder --only attention_wgmma_tf32 --json "$OUT/ladder.json" \
      > "$OUT/ladder.log" 2>&1; echo "--- ladder rc=$?"; tail -8 "$OUT/ladder.log"
fi
