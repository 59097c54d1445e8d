#!/usr/bin/env bash
# One call on the H200: the test suite on the GPU, the attention sweep, the attention benchmark.
#   device run: bash scripts/gpu_attention.sh (carry .whl); logs under $OUT
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1 FLASHLESSON_DEVICE=gpu
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
rc=0
for step in "$@"; do
  case "$step" in
    tests) python3 -m pytest -q -p no:cacheprovider ${TESTS:-} 2>&1 | tee "$OUT/pytest.log" | tail -8 || true
           grep -q " failed" "$OUT/pytest.log" && rc=1 ;;
    tune) python3 scripts/tune_attention.py > "$OUT/tune_attention.log" 2>&1; tail -40 "$OUT/tune_attention.log" ;;
    bench) python3 -m flashlesson.cli bench attention --json "$OUT/bench_attention.json" > "$OUT/bench_attention.log" 2>&1 || rc=1
           tail -30 "$OUT/bench_attention.log" ;;
    quick) python3 -m flashlesson.cli bench attention --quick --json "$OUT/bench_attention.json" > "$OUT/bench_attention.log" 2>&1 || rc=1
           tail -12 "$OUT/bench_attention.log" ;;
  esac
done
exit $rc
