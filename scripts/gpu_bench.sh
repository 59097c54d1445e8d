#!/usr/bin/env bash
# The benchmarks on the GPU machine, in one call of at most 10 minutes: `flashlesson bench
# softmax`, `bench attention` (--quick: the three main shapes; FULL=1 adds the N sweep and the
# N = 65536 check), `bench attention --backward` and `bench overhead`, each checked before it is
# timed, each with its JSON (--json) and log under $OUT: bench_softmax.json,
# bench_attention.json, bench_attention_backward.json, bench_overhead.json (the names of docs/'s
# saved runs, less the device). Each step runs under a time limit (CAP_<STEP> seconds, at most
# what is left of BUDGET), so the script ends within BUDGET even when a step does not; a step
# that reaches its limit writes no JSON. Each step's table, then a short table of the steps,
# come last.
#   device run: bash scripts/gpu_bench.sh   (carry .whl, see gpu_env.sh)
#   env: BUDGET (seconds for the whole script, default 570), FULL=1, STEPS (default
#        "softmax attention backward overhead"), CAP_SOFTMAX (200), CAP_ATTENTION (150),
#        CAP_BACKWARD (130), CAP_OVERHEAD (80)
# Exit status: 0 when every step exits 0, 1 otherwise.
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"        # wheels, PYTHONPATH, FLASHLESSON_DEVICE=gpu, $OUT
start=$(date +%s)
gpu_facts > "$OUT/gpu.txt" 2>&1
quick=--quick; [ "${FULL:-0}" = 1 ] && quick=

summary=()
rc_all=0
for step in ${STEPS:-softmax attention backward overhead}; do
  case "$step" in
    softmax)   name=bench_softmax;            cap=${CAP_SOFTMAX:-200};   args=(softmax) ;;
    attention) name=bench_attention;          cap=${CAP_ATTENTION:-150}; args=(attention $quick) ;;
    backward)  name=bench_attention_backward; cap=${CAP_BACKWARD:-130};  args=(attention --backward) ;;
    overhead)  name=bench_overhead;           cap=${CAP_OVERHEAD:-80};   args=(overhead) ;;
    *) echo "gpu_bench: unknown step $step (softmax, attention, backward, overhead)"; exit 2 ;;
  esac
  left=$(( ${BUDGET:-570} - $(date +%s) + start ))
  limit=$(( cap < left ? cap : left ))
  if [ "$limit" -lt 10 ]; then
    summary+=("$(printf '%-26s %-8s %6s  %s' "$name" skipped - "no time left")"); rc_all=1; continue
  fi
  t0=$(date +%s)
  timeout "$limit" python3 -m flashlesson bench "${args[@]}" --json "$OUT/$name.json" \
    > "$OUT/$name.log" 2>&1
  rc=$?
  [ "$rc" = 0 ] || rc_all=1
  what=$([ "$rc" = 124 ] && echo "time limit ($limit s)" || { [ -f "$OUT/$name.json" ] && echo "$OUT/$name.json" || echo "no JSON"; })
  summary+=("$(printf '%-26s %-8s %6s  %s' "$name" "rc=$rc" "$(( $(date +%s) - t0 ))" "$what")")
done

cat "$OUT/gpu.txt"
for step in ${STEPS:-softmax attention backward overhead}; do
  case "$step" in
    softmax) name=bench_softmax ;; attention) name=bench_attention ;;
    backward) name=bench_attention_backward ;; overhead) name=bench_overhead ;;
  esac
  [ -f "$OUT/$name.log" ] || continue
  echo "=== flashlesson ${name//_/ } (log: $OUT/$name.log)"
  grep -E "Error|Traceback|failed the correctness" "$OUT/$name.log" | head -5
  # the table the command prints last: after its last blank line
  awk 'BEGIN{n=0} /^$/{n=NR} {line[NR]=$0} END{for(i=n+1;i<=NR;i++) print line[i]}' \
    "$OUT/$name.log" | head -40
done
echo "=== steps"
printf '%-26s %-8s %6s  %s\n' step status s result
printf '%s\n' "${summary[@]}"
echo "wall $(( $(date +%s) - start )) s"
exit $rc_all
