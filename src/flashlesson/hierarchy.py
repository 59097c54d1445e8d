"""§26: the memory hierarchy measured — ``flashlesson bench hierarchy``.

The lesson's order, registers > shared memory / L1 > L2 > HBM, as GB/s from the small kernels of
``kernels_numba/membw.py``. Every figure is bytes (a formula below, from the launch parameters)
over a CUDA-event median (``flashlesson.bench.time_gpu``: launches enqueued behind a sleeping
kernel, so Python's launch overhead is not timed), and every kernel's output is checked first:

| level     | kernel              | bytes counted per launch        | check                       |
|-----------|---------------------|---------------------------------|-----------------------------|
| HBM       | ``copy_kernel``     | 2 · 4 · n (read src, write dst) | checksum of dst, exact      |
| HBM       | cuMemcpyDtoD        | 2 · 4 · n                       | (the driver's copy, beside) |
| HBM       | ``read_kernel``     | 4 · n (n ≫ L2)                  | Σ of partial sums, exact    |
| L2        | ``read_kernel``     | 4 · n · reps (4·n bytes ≪ L2)   | Σ, exact                    |
| shared    | ``smem_kernel(T,K)``| 12 · blocks · T·K · rounds      | = NumPy twin, bitwise       |
| registers | ``fma_kernel(CH)``  | 16 · threads · CH · iters       | ≈ closed form (float64)     |

The data of the HBM and L2 kernels is ``fill_pattern``: x[i] = (i·key) mod 8 with a random odd
key, so the sum of any 8 consecutive elements is 28 and every partial sum is an integer below
2^24: the checksums are exact in float32, whatever the order of the additions.

The functions ``copy``, ``read``, ``smem``, ``fma`` launch one kernel on given arrays (the GPU or
the simulator); their NumPy twins (``read_twin``, ``smem_twin``, ``fma_twin``) say what the result
must be. ``measure()`` (GPU only) runs the table above.
"""

import datetime

import numpy as np
from numba import cuda

from .kernels_numba import membw as KM

from . import device

FP32 = 4
THREADS = 256                    # threads per block, every kernel here (simulator: 32)
SMEM_K = 8                       # shared floats per thread per tile: a tile is T·K floats
FMA_CHAINS = 8                   # independent FMA chains per thread

# GPU sizes: HBM arrays of 1 GiB (copy: src and dst) and 2 GiB (read), 40× and 80× the H200's
# 50 MB L2; the L2 working set 8 MiB, re-read 256 times per launch (2 GiB read).
HBM_COPY_ELEMENTS = 2 ** 28
HBM_READ_ELEMENTS = 2 ** 29
L2_ELEMENTS = 2 ** 21
L2_REPS = 256
SMEM_ROUNDS = 2048
FMA_ITERS = 4096
FMA_B, FMA_C = np.float32(0.999), np.float32(0.25)     # a ← 0.999·a + 0.25: stays bounded


# ---------------------------------------------------------------------------------------------
# Bytes moved, by formula (what the GB/s figures divide by)
# ---------------------------------------------------------------------------------------------
def copy_bytes(n):
    """copy_kernel: n floats read and n written."""
    return 2 * FP32 * n


def read_bytes(n, reps=1):
    """read_kernel: n floats read per rep (the partial sums written are 1/… of it: ignored)."""
    return FP32 * n * reps


def smem_bytes(blocks, threads, k, rounds):
    """smem_kernel: per round and element 2 shared reads + 1 shared write of 4 bytes."""
    return 3 * FP32 * blocks * threads * k * rounds


def fma_bytes(threads_total, chains, iters):
    """fma_kernel: per multiply-add 3 register operands read + 1 written, 4 bytes each."""
    return 4 * FP32 * threads_total * chains * iters


def fma_flops(threads_total, chains, iters):
    return 2 * threads_total * chains * iters


# ---------------------------------------------------------------------------------------------
# Launchers (GPU or simulator) and their NumPy twins
# ---------------------------------------------------------------------------------------------
def threads_per_block():
    return 32 if device.SIMULATOR else THREADS


def default_blocks(per_sm=8):
    """Blocks for a grid-stride launch: per_sm per multiprocessor (1 in the simulator)."""
    if device.SIMULATOR:
        return 1
    return per_sm * cuda.get_current_device().MULTIPROCESSOR_COUNT


def fill(x, key):
    """x[i] = (i·key) mod 8 on the device (key odd)."""
    if key % 2 == 0:
        raise ValueError(f"key: must be odd (a permutation of 0 … 7 per 8 elements), got {key}")
    KM.fill_pattern[default_blocks(), threads_per_block()](x, key)


def pattern_sum(n, reps=1):
    """Σ of fill's pattern over n elements (n a multiple of 8), reps times."""
    return 28 * (n // 8) * reps


def copy(src, dst, blocks=None, threads=None):
    n = src.shape[0]
    if n % 4 or dst.shape != src.shape:
        raise ValueError(f"copy: n = {n} must be a multiple of 4 and dst of the same shape")
    KM.copy_kernel[blocks or default_blocks(), threads or threads_per_block()](src, dst)


def read(x, out, reps=1, rot=0, threads=None):
    """Launch read_kernel with one thread per element of ``out``; returns nothing (out holds
    the partial sums)."""
    n = x.shape[0]
    if n < 4 or n & (n - 1) or rot % 4:
        raise ValueError(f"read: n = {n} must be a power of 2 ≥ 4 and rot = {rot} a multiple "
                         "of 4")
    threads = threads or threads_per_block()
    if out.shape[0] % threads:
        raise ValueError(f"read: out has {out.shape[0]} elements, not a multiple of {threads}")
    KM.read_kernel[out.shape[0] // threads, threads](x, out, reps, rot)


def read_twin(x, grid_threads, reps=1, rot=0):
    """What read_kernel writes: out[g] = Σ_r Σ over g's quads of x[(i + r·rot) mod n], in
    float64."""
    x = np.asarray(x, np.float64)
    out = np.zeros(grid_threads)
    for r in range(reps):
        quads = np.roll(x, -r * rot).reshape(-1, 4).sum(axis=1)     # quad q: i = 4q …
        np.add.at(out, np.arange(quads.shape[0]) % grid_threads, quads)
    return out


def smem(x, out, rounds, threads=None, k=SMEM_K):
    threads = threads or threads_per_block()
    tile = threads * k
    if tile & (tile - 1) or threads % 32 or x.shape[0] % tile or out.shape != x.shape:
        raise ValueError(f"smem: T·K = {tile} must be a power of 2, T = {threads} a multiple "
                         f"of 32, and x ({x.shape[0]}) whole tiles; out like x")
    KM.smem_kernel(threads, k)[x.shape[0] // tile, threads](x, out, rounds)


def smem_twin(x, tile, rounds):
    """What smem_kernel writes, in float32 (the same operations, so bitwise equal): per tile,
    ``rounds`` times A ← (A + roll(A, −1)) / 2."""
    a = np.asarray(x, np.float32).reshape(-1, tile)
    for _ in range(rounds):
        a = (a + np.roll(a, -1, axis=1)) * np.float32(0.5)
    return a.reshape(-1)


def fma(x, out, iters, b=FMA_B, c=FMA_C, chains=FMA_CHAINS, threads=None):
    threads = threads or threads_per_block()
    if x.shape[0] % threads or out.shape != x.shape:
        raise ValueError(f"fma: x ({x.shape[0]}) must be whole blocks of {threads} threads; out "
                         "like x")
    KM.fma_kernel(chains)[x.shape[0] // threads, threads](x, out, iters, np.float32(b),
                                                          np.float32(c))


def fma_twin(x, iters, b=FMA_B, c=FMA_C, chains=FMA_CHAINS):
    """Closed form in float64: a_n = bⁿ a_0 + c (1 − bⁿ)/(1 − b), a_0 = x + chain; Σ over
    chains."""
    b, c = float(b), float(c)
    bn = b ** iters
    geo = iters if b == 1.0 else (1 - bn) / (1 - b)
    a0 = np.asarray(x, np.float64)[:, None] + np.arange(chains)
    return (bn * a0 + c * geo).sum(axis=1)


# ---------------------------------------------------------------------------------------------
# The measurement (GPU)
# ---------------------------------------------------------------------------------------------
def _row(level, kernel, working_set, nbytes, ms, check, note=""):
    return {"level": level, "kernel": kernel, "working set MiB": working_set / 2 ** 20,
            "GB moved": nbytes / 1e9, "ms": ms, "GB/s": nbytes / ms / 1e6, "check": check,
            "note": note}


def _fmt(row):
    return (f"{row['level']:9s} {row['kernel']:26s} {row['ms']:8.4f} ms {row['GB/s']:9.0f} GB/s"
            f"  check {row['check']}")


def measure(log=print, scale=1.0):
    """Check, then time each level (GPU only). Returns a dict: device, date, rows (one per
    kernel: level, GB/s, ms, bytes, check error) and the ordering checks.

    scale < 1 shrinks the HBM arrays (tests); the L2 set and the on-chip work stay the same.
    """
    from .bench import time_gpu
    device.gpu_only("flashlesson bench hierarchy")
    dev = cuda.get_current_device()
    sms = dev.MULTIPROCESSOR_COUNT
    rng = np.random.default_rng()
    key = int(rng.integers(0, 2 ** 20)) * 2 + 1
    rows = []
    T = THREADS
    grid_threads = default_blocks() * T

    # HBM: copy 1 GiB → 1 GiB (our kernel, then the driver's copy for comparison)
    n = max(2 ** 20, int(HBM_COPY_ELEMENTS * scale))
    src, dst = cuda.device_array(n, np.float32), cuda.device_array(n, np.float32)
    fill(src, key)
    dst[:] = np.nan
    copy(src, dst)
    part = cuda.device_array(grid_threads, np.float32)
    read(dst, part)
    err = abs(float(part.copy_to_host().astype(np.float64).sum()) - pattern_sum(n))
    ms = time_gpu(lambda: copy(src, dst))
    rows.append(_row("HBM", "copy_kernel", 2 * n * FP32, copy_bytes(n), ms, err,
                     "checksum of dst vs Σ of the pattern"))
    ms = time_gpu(lambda: dst.copy_to_device(src))
    rows.append(_row("HBM", "cuMemcpyDtoD", 2 * n * FP32, copy_bytes(n), ms, None,
                     "the driver's copy, for comparison"))
    log(_fmt(rows[-2]))
    log(_fmt(rows[-1]))
    src = dst = None                                # free 2 GiB before the next step

    # HBM: read 2 GiB once; L2: read 8 MiB 256 times per launch
    for level, n, reps in (("HBM", max(2 ** 20, int(HBM_READ_ELEMENTS * scale)), 1),
                           ("L2", L2_ELEMENTS, L2_REPS)):
        x = cuda.device_array(n, np.float32)
        fill(x, key)
        part[:] = np.nan
        rot = 4 * 1237 if reps > 1 else 0           # a different quad per thread each rep
        read(x, part, reps, rot)
        err = abs(float(part.copy_to_host().astype(np.float64).sum()) - pattern_sum(n, reps))
        ms = time_gpu(lambda: read(x, part, reps, rot))
        rows.append(_row(level, "read_kernel", n * FP32, read_bytes(n, reps), ms, err,
                         f"reps = {reps}; Σ of partial sums vs Σ of the pattern"))
        log(_fmt(rows[-1]))
        x = None

    # shared memory: one 2·T·K-float tile per block, 8 blocks per SM
    blocks = 8 * sms
    tile = T * SMEM_K
    xh = rng.standard_normal(blocks * tile).astype(np.float32)
    x, out = cuda.to_device(xh), cuda.device_array(blocks * tile, np.float32)
    out[:] = np.nan
    smem(x, out, SMEM_ROUNDS)
    few = 4 * tile                                  # the twin for the first 4 blocks
    err = float(np.max(np.abs(out[:few].copy_to_host() - smem_twin(xh[:few], tile,
                                                                   SMEM_ROUNDS))))
    ms = time_gpu(lambda: smem(x, out, SMEM_ROUNDS))
    rows.append(_row("shared", f"smem_kernel(T={T}, K={SMEM_K})", 2 * tile * FP32,
                     smem_bytes(blocks, T, SMEM_K, SMEM_ROUNDS), ms, err,
                     f"{SMEM_ROUNDS} rounds, working set per block; = NumPy twin (4 blocks)"))
    log(_fmt(rows[-1]))

    # registers: 8 FMA chains per thread
    nthreads = 32 * sms * T
    xh = rng.uniform(-1, 1, nthreads).astype(np.float32)
    x, out = cuda.to_device(xh), cuda.device_array(nthreads, np.float32)
    out[:] = np.nan
    fma(x, out, FMA_ITERS)
    want = fma_twin(xh[:4096], FMA_ITERS)
    err = float(np.max(np.abs(out[:4096].copy_to_host() - want) / np.abs(want)))
    ms = time_gpu(lambda: fma(x, out, FMA_ITERS))
    rows.append(_row("registers", f"fma_kernel(CH={FMA_CHAINS})", FMA_CHAINS * FP32 * T,
                     fma_bytes(nthreads, FMA_CHAINS, FMA_ITERS), ms, err,
                     f"{fma_flops(nthreads, FMA_CHAINS, FMA_ITERS) / ms / 1e9:.1f} TFLOP/s fp32; "
                     "working set per block; relative error vs closed form"))
    log(_fmt(rows[-1]))

    best = {}
    for r in rows:
        best[r["level"]] = max(best.get(r["level"], 0.0), r["GB/s"])
    ok = {"checks": all(r["check"] is None or r["check"] <= (1e-3 if r["level"] == "registers"
                                                             else 0.0) for r in rows),
          "shared > HBM": best["shared"] > best["HBM"],
          "registers > shared": best["registers"] > best["shared"],
          "L2 > HBM": best["L2"] > best["HBM"]}
    return {"device": dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name),
            "SMs": sms, "date": datetime.date.today().isoformat(), "rows": rows,
            "best GB/s": best, "ok": ok}


COLUMNS = ["level", "kernel", "working set MiB", "GB moved", "ms", "GB/s", "check", "note"]


def table(result, fmt="simple"):
    from tabulate import tabulate
    return tabulate([[r[c] for c in COLUMNS] for r in result["rows"]], headers=COLUMNS,
                    tablefmt=fmt, floatfmt=".4g")


__all__ = ["copy", "copy_bytes", "fill", "fma", "fma_bytes", "fma_flops", "fma_twin", "measure",
           "pattern_sum", "read", "read_bytes", "read_twin", "smem", "smem_bytes", "smem_twin",
           "table"]
