#!/usr/bin/env bash
# The session's last H200 call (≈ 3.5 min): the tour part that failed on a timing check (§45)
# at the green run's seed, then scripts/gpu_overhead_check.py (replays bitwise, CUDA graph,
# host µs per call). Logs under $OUT.
#   device run: bash scripts/gpu_final.sh   (carry .whl)
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"        # wheels, PYTHONPATH, FLASHLESSON_DEVICE=gpu, $OUT
start=$(date +%s)
FLASHLESSON_SEED=6606 timeout 120 python3 -m pytest -q -p no:cacheprovider \
  "tests/test_tour.py::test_tour_passes_and_covers_every_section_with_an_example[3]" \
  tests/test_calls.py tests/test_launch.py > "$OUT/pytest.log" 2>&1
echo "--- pytest rc=$? ($(( $(date +%s) - start )) s)"; grep -E "^(FAILED|ERROR)|§45" "$OUT/pytest.log" | head; tail -1 "$OUT/pytest.log"
timeout 100 python3 scripts/gpu_overhead_check.py --json "$OUT/bench_overhead.json" > "$OUT/overhead.log" 2>&1
echo "--- overhead rc=$? ($(( $(date +%s) - start )) s)"; grep -E "FAIL|µs|failure" "$OUT/overhead.log"
