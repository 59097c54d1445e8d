#!/usr/bin/env bash
# Issue 16, item 2 (second half), on the H200 (< 200 s): the wgmma backward (method
# "flash_wgmma" of attention_backward, kernels_numba/attention_wgmma_backward.py) against the
# float64 oracle and 2× torch SDPA's own error (tests/test_attention_wgmma_backward.py), then
# the kernel-only benchmark: flash_wgmma vs flash_tc vs torch SDPA flash backward, checked
# against torch's float64 autograd first, at B4 H16 N1024 d64, B2 H16 N4096 d64, B1 H16 N8192
# d128, causal and not; TFLOP/s = 10·B·H·N²·d / time (2.5 × the forward's 4·B·H·N²·d; half
# when causal) (scripts/gpu_wgmma_bwd.py). Logs under $OUT; the short table comes last.
#   device run: bash scripts/gpu_wgmma_bwd.sh   (carry .whl; SWEEP=1: the SWEEP configurations
#   too, 150 s more; FUSED=1: the FUSED variants too; SWIZZLE=1: the SWIZZLE variants too, the
#   128-byte swizzled tiles, 40 s more; AHEAD=1: AHEAD off and in both kernels, 60 s more)
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"        # wheels, PYTHONPATH, FLASHLESSON_DEVICE=gpu, $OUT
start=$(date +%s)
gpu_facts > "$OUT/gpu.txt" 2>&1
# 1. the benchmark's process starts compiling its kernels (small inputs) in the background …
rm -f "$OUT/tests.done"
timeout $(( ${SWEEP:+150 +} ${SWIZZLE:+40 +} ${AHEAD:+60 +} 180 )) python3 scripts/gpu_wgmma_bwd.py \
  ${SWEEP:+--sweep} ${FUSED:+--fused} ${SWIZZLE:+--swizzle} ${AHEAD:+--ahead} \
  --json "$OUT/bench_wgmma_bwd.json" --wait-for "$OUT/tests.done" \
  --budget-s $(( ${SWEEP:+150 +} ${SWIZZLE:+40 +} ${AHEAD:+60 +} 140 )) > "$OUT/bench_wgmma_bwd.log" 2>&1 &
p_bench=$!
# 2. … while the new tests run on the GPU (compilation is most of their time: 8 workers)
timeout 100 python3 -m pytest -q -rs --tb=short -p no:cacheprovider -n 8 \
  tests/test_attention_wgmma_backward.py > "$OUT/pytest_wgmma_bwd.log" 2>&1
rc_tests=$?
# 3. then the benchmark times, the GPU its own (it starts no new shape after 140 s)
touch "$OUT/tests.done"
wait $p_bench; rc_bench=$?
cat "$OUT/gpu.txt"
tests_report test_attention_wgmma_backward.py "$rc_tests" "$OUT/pytest_wgmma_bwd.log"
bench_report "$rc_bench" "$OUT/bench_wgmma_bwd.log"
echo "rc: tests $rc_tests, bench $rc_bench"   # (last: a tail keeps it)
echo "wall $(( $(date +%s) - start )) s"
[ "$rc_tests" = 0 ] && [ "$rc_bench" = 0 ]
