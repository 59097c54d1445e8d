"""Occupancy from a kernel's resources (§38, §47): how many blocks of it fit on one SM.

A block needs its threads, its registers (registers per thread × threads, allocated per warp)
and its shared memory (static + dynamic, plus 1 KB the driver reserves per block) all at once
on one SM; the SM holds as many blocks as the scarcest of the four allows:

    blocks = min(32,                                    # blocks per SM
                 2048 // threads,                       # threads per SM
                 (65536 // regs_per_warp) // warps,     # registers: regs_per_warp =
                                                        #   ceil(32·regs / 256)·256
                 228 KB // (smem + 1 KB))               # shared memory, in 128-byte units

These are the H200's (sm_90) limits, the rules of NVIDIA's occupancy calculator; without a GPU
the registers are unknown (``regs=None``) and the model says what threads and shared memory
alone allow. Occupancy = resident warps / 64.
"""

from dataclasses import dataclass

KiB = 1024


@dataclass(frozen=True)
class SMLimits:
    """Per-SM limits (defaults: H200, sm_90)."""
    name: str = "H200 (sm_90)"
    regs: int = 65536                 # 32-bit registers per SM
    reg_unit: int = 256               # registers are allocated per warp in units of 256
    max_regs_per_thread: int = 255
    smem: int = 228 * KiB             # shared memory per SM
    smem_per_block: int = 227 * KiB   # most one block may opt in to
    smem_reserved: int = 1 * KiB      # reserved by the driver per resident block
    smem_unit: int = 128              # allocation granularity
    threads: int = 2048               # threads per SM
    blocks: int = 32                  # blocks per SM
    warp: int = 32


H200 = SMLimits()


def _round_up(x, unit):
    return -(-x // unit) * unit


def blocks_per_sm(threads, smem_bytes, regs=None, limits=H200):
    """Resident blocks per SM for a block of ``threads`` threads using ``smem_bytes`` of shared
    memory (static + dynamic) and ``regs`` registers per thread (None: unknown, not a limit).

    Returns a dict: ``blocks``, ``limited by`` (the scarcest resource: "threads", "registers",
    "shared memory", "blocks"), the blocks each resource alone allows (``by threads``,
    ``by registers`` — None when regs is None —, ``by shared memory``, ``by blocks``),
    ``warps`` resident and ``occupancy`` (resident warps / the SM's most). A block that cannot
    run at all (too many threads, registers or shared memory) gives 0 blocks.
    """
    if threads < 1 or smem_bytes < 0 or (regs is not None and regs < 0):
        raise ValueError(f"threads = {threads}, smem_bytes = {smem_bytes}, regs = {regs}: "
                         "expected threads ≥ 1 and no negative amounts")
    warps = -(-threads // limits.warp)
    by = {"blocks": limits.blocks, "threads": limits.threads // (warps * limits.warp)}
    smem = _round_up(smem_bytes, limits.smem_unit) + limits.smem_reserved
    by["shared memory"] = 0 if smem_bytes > limits.smem_per_block else limits.smem // smem
    by["registers"] = None
    if regs is not None:
        per_warp = _round_up(max(regs, 1) * limits.warp, limits.reg_unit)
        by["registers"] = 0 if regs > limits.max_regs_per_thread else \
            (limits.regs // per_warp) // warps
    # ties go to the first named: the resource the reader is asked about (§38) before the caps
    order = ("registers", "shared memory", "threads", "blocks")
    known = [(by[k], k) for k in order if by[k] is not None]
    blocks, limiter = min(known, key=lambda item: item[0])
    max_warps = limits.threads // limits.warp
    return {"blocks": blocks, "limited by": limiter,
            **{f"by {k}": by[k] for k in order},
            "warps": blocks * warps, "occupancy": blocks * warps / max_warps}


__all__ = ["H200", "SMLimits", "blocks_per_sm"]
