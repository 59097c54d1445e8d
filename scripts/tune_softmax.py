"""Sweep the launch shapes of the register-cached softmax kernels on the GPU (§5, §8, §9).

The ``auto`` rules and default shapes in ``flashlesson.softmax_methods`` come from this sweep:
for each N and dtype, every (K values per lane, R rows per warp, warps per block) of the §8 kernel
and every (K, T threads) of the §9 kernel are checked, timed, and reported with their registers
and local memory, next to torch.softmax in the same process.

    python scripts/tune_softmax.py [--n 32 64 ...] [--dtype float32 float16]
"""

import argparse

import numpy as np
from numba import cuda
from tabulate import tabulate

import flashlesson  # noqa: F401 - chooses the device
from flashlesson.bench import softmax_bytes, time_gpu
from flashlesson.kernels_numba import softmax as K
from flashlesson.reference import softmax_stable


def resources(kernel, dtype):
    """(registers per thread, local memory bytes per thread) of the overload for ``dtype``."""
    regs = kernel.get_regs_per_thread()
    lmem = kernel.get_local_mem_per_thread()
    for sig in regs:
        if str(sig[0].dtype) == dtype:
            return regs[sig], lmem[sig]
    return -1, -1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, nargs="+", default=[2 ** i for i in range(5, 16)])
    p.add_argument("--dtype", nargs="+", default=["float32", "float16"])
    p.add_argument("--elements", type=int, default=2 ** 26)
    a = p.parse_args()
    import torch
    rng = np.random.default_rng(1)
    best = []
    for dt in a.dtype:
        for n in a.n:
            rows = a.elements // n
            xh = (rng.standard_normal((rows, n)) * 3).astype(dt)
            x = cuda.to_device(xh)
            y = cuda.device_array_like(x)
            nbytes = softmax_bytes(rows, n, np.dtype(dt).itemsize)
            tx = torch.as_tensor(x, device="cuda")
            ty = torch.empty_like(tx)
            t_ms = time_gpu(lambda: torch.softmax(tx, -1, out=ty), samples=7)
            want = softmax_stable(xh[:16].astype(np.float64))
            cands = []
            if n <= 1024:
                for g in (4, 8, 16, 32):
                    k = 1
                    while g * k < n:
                        k *= 2
                    if k > 32 or (g > 4 and g * k > n and g // 2 * k >= n):
                        continue          # K too large, or a smaller G would hold the row
                    for r in (1, 2, 4, 8):
                        if k * r > 32:
                            continue
                        rows_per_block = 4 * (32 // g) * r
                        cands.append((f"warp_multi K{k} R{r} G{g}", K.warp_multi_kernel(k, r, g),
                                      -(-rows // rows_per_block), 128))
            if n >= 512:
                for t in (128, 256, 512, 1024):
                    k = 1
                    while k * t < n:
                        k *= 2
                    if k > 32 or k * t > 2 * n:
                        continue
                    cands.append((f"block K{k} T{t}", K.block_kernel(k, t), rows, t))
            if n >= 4096:
                for t in (256, 512, 1024):
                    cands.append((f"online T{t}", K.softmax_online, rows, t))
                    cands.append((f"block_reread T{t}", K.softmax_block_reread, rows, t))
            for name, kern, grid, block in cands:
                y[:] = np.nan
                try:
                    kern[grid, block](x, y)
                    cuda.synchronize()
                except Exception as exc:  # noqa: BLE001 - reported
                    print(dt, n, name, "FAILED", str(exc)[:120])
                    continue
                err = float(np.max(np.abs(y[:16].copy_to_host().astype(np.float64) - want)))
                ms = time_gpu(lambda: kern[grid, block](x, y), samples=7)
                regs, lmem = resources(kern, dt)
                gbs = nbytes / ms / 1e6
                print(f"{dt} N={n} {name:26s} {gbs:6.0f} GB/s  torch {nbytes / t_ms / 1e6:6.0f}"
                      f"  ratio {t_ms / ms:.2f} regs {regs} lmem {lmem} err {err:.1e}", flush=True)
                best.append([dt, n, name, gbs, nbytes / t_ms / 1e6, t_ms / ms, regs, lmem, err])
            del x, y, tx, ty
    rows_out = []
    for dt in a.dtype:
        for n in a.n:
            cand = [b for b in best if b[0] == dt and b[1] == n and b[8] < 1e-3]
            if cand:
                rows_out.append(max(cand, key=lambda b: b[3]))
    print(tabulate(rows_out, headers=["dtype", "N", "best", "GB/s", "torch", "ratio", "regs",
                                      "lmem", "err"], floatfmt=".3g"))


if __name__ == "__main__":
    main()
