#!/usr/bin/env bash
# Issue 16's closing H200 call (≈ 7 min): the GPU tests of what this session changed — the wgmma
# forward (CWG = 3 the d = 64 default, OVERLAP), the wgmma backward (the non-causal fp16/bf16
# default, FUSED), the semaphore helpers, and the suites whose fp16 calls now take those
# defaults (edge cases, documented results, masked non-finite keys, the tensor-core backward,
# torch autograd) — then scripts/gpu_defaults.py: the default calls against torch SDPA flash,
# kernel-only and end to end, same process. Logs under $OUT; the short table comes last.
#   device run: bash scripts/gpu_issue16.sh   (carry .whl)
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"        # wheels, PYTHONPATH, FLASHLESSON_DEVICE=gpu, $OUT
start=$(date +%s)
gpu_facts > "$OUT/gpu.txt" 2>&1
timeout 300 python3 -m pytest -q -rs --tb=short -p no:cacheprovider -n 12 \
  tests/test_attention_wgmma_backward.py tests/test_hopper.py tests/test_edge_cases.py \
  tests/test_edge_documented.py tests/test_masked_nonfinite.py tests/test_attention_tc.py \
  tests/test_attention_tc_backward.py tests/test_torch.py > "$OUT/pytest.log" 2>&1
rc_tests=$?
timeout 170 python3 scripts/gpu_defaults.py --json "$OUT/bench_defaults.json" \
  > "$OUT/bench_defaults.log" 2>&1
rc_bench=$?
cat "$OUT/gpu.txt"
tests_report pytest "$rc_tests" "$OUT/pytest.log"
bench_report "$rc_bench" "$OUT/bench_defaults.log"
echo "rc: tests $rc_tests, bench $rc_bench"   # (last: a tail keeps it)
echo "wall $(( $(date +%s) - start )) s"
[ "$rc_tests" = 0 ] && [ "$rc_bench" = 0 ]
