#!/usr/bin/env bash
# A follow-up H200 call after scripts/gpu_green.sh: the tests it named (failed or unfinished)
# again, alone, with their tracebacks (--tb=short, -s prints what they report), and the tour's
# sections it did not reach, each with its own output. Logs under $OUT.
#   device run: TESTS="tests/a.py::x tests/b.py::y" SECTIONS="41 42" bash scripts/gpu_rerun.sh
#   (carry .whl; SEEDS="1 2 3": the tests once per FLASHLESSON_SEED; BENCH="script args": then
#   that benchmark, its table last)
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"        # wheels, PYTHONPATH, FLASHLESSON_DEVICE=gpu, $OUT
start=$(date +%s)
gpu_facts > "$OUT/gpu.txt" 2>&1
rc_tests=skipped
if [ -n "${TESTS:-}" ]; then               # (beside the tour: the tests time nothing)
  ( rc=0; for seed in ${SEEDS:-$RANDOM}; do
      FLASHLESSON_SEED=$seed timeout ${TESTS_S:-240} python3 -m pytest -q -s -rs --tb=short \
        -p no:cacheprovider -n ${WORKERS:-4} $TESTS > "$OUT/pytest_$seed.log" 2>&1 || rc=1
    done; exit $rc ) &
  p_tests=$!
fi
rc_tour=skipped
if [ -n "${SECTIONS:-}" ]; then
  timeout ${TOUR_S:-240} python3 -c "import sys; from flashlesson import tour; \
sys.exit(tour.run_tour(sections=[int(s) for s in '$SECTIONS'.split()], verbose=True))" \
    > "$OUT/tour.log" 2>&1
  rc_tour=$?
fi
[ -n "${TESTS:-}" ] && { wait $p_tests; rc_tests=$?; }
rc_bench=skipped
if [ -n "${BENCH:-}" ]; then
  timeout ${BENCH_S:-200} python3 $BENCH > "$OUT/bench.log" 2>&1
  rc_bench=$?
fi
cat "$OUT/gpu.txt"
for f in "$OUT"/pytest_*.log; do [ -f "$f" ] && tests_report "$(basename "$f" .log)" - "$f"; done
if [ -f "$OUT/tour.log" ]; then
  echo "--- tour rc=$rc_tour"; grep -E "FAIL|Traceback|Error" "$OUT/tour.log" | head -20
  tail -4 "$OUT/tour.log"
fi
[ -f "$OUT/bench.log" ] && bench_report "$rc_bench" "$OUT/bench.log"
echo "rc: tests $rc_tests, tour $rc_tour, bench $rc_bench"   # (last: a tail keeps it)
echo "wall $(( $(date +%s) - start )) s"
