#!/usr/bin/env bash
# One call on the H200: any of the steps below, in order (tests, tuning sweeps, benchmarks, the
# training example, section examples, an Nsight Compute profile).
#   device run: bash scripts/gpu_attention.sh (carry .whl); logs under $OUT
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"        # wheels, PYTHONPATH, FLASHLESSON_DEVICE=gpu, $OUT
rc=0
for step in "$@"; do
  case "$step" in
    tests) python3 -m pytest -q -p no:cacheprovider ${TESTS:-} 2>&1 | tee "$OUT/pytest.log" | tail -8 || true
           grep -q " failed" "$OUT/pytest.log" && rc=1 ;;
    tune) python3 scripts/tune_attention.py ${TUNE_ARGS:-} > "$OUT/tune_attention.log" 2>&1; tail -40 "$OUT/tune_attention.log" ;;
    bench) python3 -m flashlesson.cli bench attention --json "$OUT/bench_attention.json" > "$OUT/bench_attention.log" 2>&1 || rc=1
           tail -30 "$OUT/bench_attention.log" ;;
    train) python3 examples/train_tiny_transformer.py > "$OUT/2026-11-30_train_tiny_transformer_h200.log" 2>&1 || rc=1
           tail -16 "$OUT/2026-11-30_train_tiny_transformer_h200.log" ;;
    sections) python3 -m flashlesson.cli section ${SECTIONS:-30 31 35 36} > "$OUT/sections.log" 2>&1 || rc=1
           grep -E "checks|FAIL|fail" "$OUT/sections.log" | tail -8 ;;
    tunebwd) python3 scripts/tune_backward.py ${TUNEBWD_ARGS:-} > "$OUT/tune_backward.log" 2>&1; tail -14 "$OUT/tune_backward.log" ;;
    bwd) python3 -m flashlesson.cli bench attention --backward --json "$OUT/bench_attention_backward.json" > "$OUT/bench_attention_backward.log" 2>&1 || rc=1
           tail -12 "$OUT/bench_attention_backward.log" ;;
    sweeps) python3 scripts/bench_sweeps.py --out "$OUT" > "$OUT/bench_sweeps.log" 2>&1 || rc=1
           tail -70 "$OUT/bench_sweeps.log" ;;
    tc) python3 -m flashlesson.cli bench attention --tc --json "$OUT/bench_attention_tc.json" > "$OUT/bench_attention_tc.log" 2>&1 || rc=1
           grep -E "kernel=|sdpa .*: " "$OUT/bench_attention_tc.log" | cut -c1-200 | head -20; tail -9 "$OUT/bench_attention_tc.log" ;;
    tcbwd) python3 -m flashlesson.cli bench attention --tc --backward --json "$OUT/bench_attention_tc_backward.json" > "$OUT/bench_attention_tc_backward.log" 2>&1 || rc=1
           grep -E "kernel=.*bwd|sdpa .*: " "$OUT/bench_attention_tc_backward.log" | cut -c1-220 | head -12; tail -9 "$OUT/bench_attention_tc_backward.log" ;;
    tunetc) python3 scripts/tune_tc.py ${TUNETC_ARGS:-} > "$OUT/tune_tc.log" 2>&1; tail -14 "$OUT/tune_tc.log" ;;
    tunetcbwd) python3 scripts/tune_tc_bwd.py ${TUNETC_ARGS:-} > "$OUT/tune_tc_bwd.log" 2>&1; tail -16 "$OUT/tune_tc_bwd.log" ;;
    ladder) python3 -m flashlesson.cli bench ladder --json "$OUT/ladder.json" > "$OUT/ladder.log" 2>&1 || rc=1
           tail -45 "$OUT/ladder.log" ;;
    quick) python3 -m flashlesson.cli bench attention --quick --json "$OUT/bench_attention.json" > "$OUT/bench_attention.log" 2>&1 || rc=1
           tail -12 "$OUT/bench_attention.log" ;;
    ncu) for shape in "2 16 4096 64" "1 16 8192 128"; do set -- $shape
           ncu --clock-control none -k regex:flash_forward --launch-skip 1 --launch-count 1 \
             --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
             --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section Occupancy \
             --section LaunchStats --section SchedulerStats --section InstructionStats \
             python3 scripts/profile_attention.py --b $1 --h $2 --n $3 --d $4 > "$OUT/ncu_d$4.txt" 2>&1
           grep -E "Duration|Registers|Achieved Occupancy|Issue Slots Busy|FMA|Bank|Stall|Warp Cycles" "$OUT/ncu_d$4.txt" | head -30
         done ;;
  esac
done
exit $rc
