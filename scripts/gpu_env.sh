# Sourced by the scripts/gpu_*.sh device runs (../shared/gpu/README.md): the carried wheels
# (.whl) installed into /tmp/site, the project on PYTHONPATH, the GPU required, $OUT (the folder
# whose files come back) made; ``gpu_facts`` prints the device, the time, the commit and
# ``flashlesson info``; ``tests_report`` and ``bench_report`` the closing lines of a pytest log
# and of a kernel-only benchmark's log.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 FLASHLESSON_DEVICE=gpu
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"

gpu_facts() {
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%FT%TZ
  git log --oneline -1 2>/dev/null; python3 -m flashlesson info
}

tests_report() {   # NAME RC LOG: the failures and the summary line of a pytest run
  echo "--- $1 rc=$2"; grep -E "^(FAILED|ERROR)" "$3" | head -20; grep -E "passed|failed" "$3" | tail -1
}

bench_report() {   # RC LOG: errors, then the table the script prints last (from "shape ")
  echo "--- bench rc=$1"; grep -E "Error|Traceback|warm-up|budget" "$2" | head -8
  sed -n '/^shape /,$p' "$2"
}
