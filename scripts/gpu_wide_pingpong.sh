#!/usr/bin/env bash
# Issue 16 on the H200 (< 8 min): the GPU tests of the wide K/V tiles, PINGPONG and the 3xTF32
# backward's two-level sums, beside them the 3xTF32 accuracy test against torch over SEEDS and
# the tour's parts 3 and 4 (tests/test_tour.py, with their tracebacks); then, alone on the GPU,
# scripts/gpu_wgmma.py --wide --pingpong (the forward's candidates vs the default vs torch flash)
# and the 3xTF32 backward against torch efficient (bench_attention_tc_backward, two d = 64
# shapes). Logs under $OUT; the short tables come last.
#   device run: SEEDS="1 2 3 4" bash scripts/gpu_wide_pingpong.sh   (carry .whl)
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"        # wheels, PYTHONPATH, FLASHLESSON_DEVICE=gpu, $OUT
start=$(date +%s)
gpu_facts > "$OUT/gpu.txt" 2>&1
timeout 200 python3 -m pytest -q -rs --tb=short -p no:cacheprovider -n 8 \
  tests/test_attention_tc.py tests/test_hopper.py tests/test_attention_tc_backward.py \
  -k "wgmma or tf32 or hopper or wide or pingpong" > "$OUT/pytest.log" 2>&1 &
p_tests=$!
( for seed in ${SEEDS:-1 2 3 4}; do
    FLASHLESSON_SEED=$seed timeout 60 python3 -m pytest -q -s --tb=short -p no:cacheprovider \
      tests/test_tf32x3_accuracy.py -k torch_efficient 2>&1 | grep -E "O: |passed|failed|Error"
  done ) > "$OUT/tf32_seeds.log" 2>&1 &
p_seeds=$!
timeout 200 python3 -m pytest -q -rs --tb=short -p no:cacheprovider -n 2 tests/test_tour.py \
  -k "every_section and (3 or 4)" > "$OUT/pytest_tour.log" 2>&1
rc_tour=$?
wait $p_tests; rc_tests=$?
wait $p_seeds
left=$((440 - $(date +%s) + start))
timeout $((left - 70)) python3 scripts/gpu_wgmma.py --wide --pingpong --budget-s $((left - 110)) \
  --json "$OUT/bench_wgmma.json" > "$OUT/bench_wgmma.log" 2>&1
rc_bench=$?
timeout 65 python3 -c "from flashlesson import bench; bench.bench_attention_tc_backward(shapes=((4, 16, 1024, 64), (2, 16, 4096, 64)), causal_modes=(False, True))" > "$OUT/bench_tf32.log" 2>&1
rc_tf32=$?
cat "$OUT/gpu.txt"
tests_report pytest "$rc_tests" "$OUT/pytest.log"
tests_report tour "$rc_tour" "$OUT/pytest_tour.log"
echo "--- tf32 accuracy by seed"; cat "$OUT/tf32_seeds.log"
echo "--- tf32 bench rc=$rc_tf32"; grep -iE "tf32|efficient|Error" "$OUT/bench_tf32.log" | tail -12
bench_report "$rc_bench" "$OUT/bench_wgmma.log"
echo "rc: tests $rc_tests, tour $rc_tour, bench $rc_bench, tf32 bench $rc_tf32"   # (last)
echo "wall $(( $(date +%s) - start )) s"
