#!/usr/bin/env bash
# Issue 16, the forward's open question (< 4 min on the H200): where the wgmma forward's time
# goes, beside torch SDPA's flash kernel on the same inputs — Nsight Compute on one launch each
# (the second call; the first compiles), fp16, B1 H16 N8192 d128 and B2 H16 N4096 d64, not
# causal: the tensor pipe's share, shared-memory wavefronts and bank conflicts (the no-swizzle
# core-matrix layout), the warps' stall reasons, issue slots. The PINGPONG and wide-tile
# configurations measured no faster (docs/logs/gpu_wide_pingpong_h200.log). What it showed
# (2026-12-01, docs/logs/2026-12-01_ncu_wgmma_forward_h200.log): L2 at 88 % of its throughput against
# torch's 25 %, issue slots 34 % against 44 %; padding the tiles so the copies read whole
# lines left L2 where it was (docs/results.md, session 6). Logs under $OUT.
#   device run: bash scripts/gpu_ncu_wgmma.sh   (carry .whl; NCU_SHAPES="1,16,8192,128": these
#   B,H,N,d only; BWD=1: the backward instead — our dK/dV and dQ kernels of the second call
#   beside torch flash's fused one)
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"        # wheels, PYTHONPATH, FLASHLESSON_DEVICE=gpu, $OUT
start=$(date +%s)
gpu_facts > "$OUT/gpu.txt" 2>&1
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
  --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats
  --section InstructionStats --section Occupancy --section LaunchStats"
for shape in ${NCU_SHAPES:-1,16,8192,128 2,16,4096,64}; do set -- ${shape//,/ }
  if [ -n "${BWD:-}" ]; then whos=("flash_wgmma dkdv|dq_kernel 2" "torch flash_bwd_dq_dk_dv 1")
  else whos=("flash_wgmma flash_wgmma 1" "torch flash_fwd 1"); fi
  for who in "${whos[@]}"; do set -- ${shape//,/ } $who
    timeout 100 ncu --clock-control none -k "regex:$6" --launch-skip $7 --launch-count $7 \
      $SECTIONS \
      python3 scripts/profile_attention.py --b $1 --h $2 --n $3 --d $4 --dtype fp16 --method $5 \
      ${BWD:+--backward} > "$OUT/ncu_${5}_d$4.txt" 2>&1
    echo "rc=$? $5 d$4" >> "$OUT/ncu_rc.txt"
  done
done
cat "$OUT/gpu.txt"; cat "$OUT/ncu_rc.txt"
for f in "$OUT"/ncu_*_d*.txt; do
  echo "--- $(basename "$f")"
  grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Tensor|Shared|Bank|Stall|Warp Cycles Per Issued|Executed Ipc" "$f" | head -80
done
echo "wall $(( $(date +%s) - start )) s"
