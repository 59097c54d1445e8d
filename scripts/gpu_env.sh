# Sourced by the scripts/gpu_*.sh runs on the GPU machine, from the repository root: the wheels
# carried in .whl/ (packages the machine lacks; it has no network), if any, installed into
# /tmp/site (once: a script started by one that sourced this skips it); src/ on PYTHONPATH;
# the GPU required (FLASHLESSON_DEVICE=gpu); $OUT (the folder whose files come back; /tmp/out
# when unset) made. ``gpu_facts`` prints the device, the time, the checkout's last commit and
# ``flashlesson info``.
if [ -z "${FLASHLESSON_GPU_ENV:-}" ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 FLASHLESSON_DEVICE=gpu
export FLASHLESSON_GPU_ENV=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"

gpu_facts() {
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%FT%TZ
  git log --oneline -1 2>/dev/null; python3 -m flashlesson info
}
