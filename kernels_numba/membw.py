"""§26 — the memory hierarchy, measured: HBM, L2, shared memory and the register file.

The lesson's claim: registers > shared memory / L1 > L2 > HBM, in speed, and the reverse in
size, so FlashAttention spends on-chip work (recomputation, rescaling) to save HBM traffic
("trade compute for IO"). These kernels do nothing useful; each moves bytes through one level
as fast as it can, and each leaves a result that depends on every byte it touched (written to
global memory), so the compiler cannot drop the work. ``flashlesson.hierarchy`` launches them,
times them with CUDA events and turns the times into GB/s with the byte formulas below.

Menu (bytes counted: the formulas in ``flashlesson.hierarchy``)
| kernel              | level      | what each thread does                      | bytes counted     |
|---------------------|------------|--------------------------------------------|-------------------|
| ``fill_pattern``    | —          | x[i] = (i·key) mod 8, key odd: a known     | —                 |
|                     |            | checksum, 28 per 8 elements                |                   |
| ``copy_kernel``     | HBM        | grid-stride dst[i] = src[i], 16-byte       | 2 · 4 · n         |
|                     |            | vector loads and stores (``vector.py``)    |                   |
| ``read_kernel``     | HBM, or L2 | grid-stride sum of x, ``reps`` times, rep  | 4 · n · reps      |
|                     | if x fits  | r rotated by r·rot (mod n); one partial    |                   |
|                     |            | sum per thread written                     |                   |
| ``smem_kernel(T,K)``| shared     | ping-pong of two T·K-float tiles: B[i] =   | 12 · T·K · rounds |
|                     | memory     | (A[i] + A[i+1]) / 2, a barrier per round;  | per block (2      |
|                     |            | the tile written out at the end            | reads, 1 write)   |
| ``fma_kernel(CH)``  | registers  | CH independent chains a = a·b + c,         | 16 per FMA (3     |
|                     |            | ``iters`` times; the chains' sum written   | reads, 1 write)   |

Limits: float32; ``copy_kernel`` takes n a multiple of 4, ``read_kernel`` n a power of 2 ≥ 4
(the rotation is a mask) and rot a multiple of 4; ``smem_kernel`` needs T a multiple of 32
and T·K a power of 2 (2·T·K·4 bytes of static shared memory per block); the register "bandwidth"
is a view, not a wire: operands come from the register file at the rate the FMA units consume
them, which is what "registers are fastest" means in practice.

Why these shapes. HBM: a few GB streamed once, so neither L2 (50 MB on an H200) nor caching
helps; 16-byte accesses so the load/store units are not the limit. L2: the same read kernel on a
working set of a few MB, re-read ``reps`` times inside one launch (the rotation makes every rep
read different addresses per thread, so no rep can be reused from registers). Shared memory: a
barrier per round makes every read depend on other threads' writes, so each read must really go
to shared memory; consecutive threads touch consecutive words (no bank conflicts). Registers:
chains long enough that the FMA pipe, not latency, is the limit (CH ≥ 4 chains per thread).

How to run: ``flashlesson bench hierarchy`` (GPU); ``flashlesson section 26`` (GPU, or the
simulator where only the values are checked); ``pytest tests/test_hierarchy.py``.
"""

from functools import lru_cache

from numba import cuda, float32

from .reductions import ZERO
from .vector import load4, store4

HALF = float32(0.5)


@cuda.jit
def fill_pattern(x, key):
    """x[i] = (i · key) mod 8, key odd: every 8 consecutive i hold 0 … 7 once (sum 28)."""
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        x[i] = float32((i * key) & 7)


@cuda.jit
def copy_kernel(src, dst):
    """HBM: dst = src, four floats (16 bytes) per access; n = src.shape[0] a multiple of 4."""
    for i in range(4 * cuda.grid(1), src.shape[0], 4 * cuda.gridsize(1)):
        a0, a1, a2, a3 = load4(src, i)
        store4(dst, i, a0, a1, a2, a3)


@cuda.jit
def read_kernel(x, out, reps, rot):
    """HBM or L2: thread g sums x[(i + r·rot) & (n − 1)] over its grid-stride i (4 at a time)
    and r < reps, and writes the sum to out[g] (so every load counts). n = x.shape[0]: a power
    of 2 ≥ 4; rot a multiple of 4."""
    g = cuda.grid(1)
    mask = x.shape[0] - 1
    acc = ZERO
    for r in range(reps):
        shift = r * rot
        for i in range(4 * g, x.shape[0], 4 * cuda.gridsize(1)):
            a0, a1, a2, a3 = load4(x, (i + shift) & mask)
            acc += (a0 + a1) + (a2 + a3)
    out[g] = acc


@lru_cache(maxsize=None)
def smem_kernel(T, K):
    """Shared memory: block b copies x[b·S : (b+1)·S] (S = T·K) into tile A, then for
    ``rounds`` rounds computes B[i] = (A[i] + A[(i+1) mod S]) / 2 and swaps A and B; finally
    writes A back to out[b·S : (b+1)·S]. Thread t owns i = t + T·j (j < K). Per round and
    element: 2 shared reads + 1 shared write. Launch with T threads per block."""
    S = T * K
    MASK = S - 1
    TILE = 2 * S                # shared size: a named constant (Numba needs a literal)

    @cuda.jit
    def smem(x, out, rounds):
        t = cuda.threadIdx.x
        base = cuda.blockIdx.x * S
        tile = cuda.shared.array(TILE, float32)        # A = tile[src:], B = tile[dst:]
        for j in range(K):
            tile[t + T * j] = x[base + t + T * j]
        cuda.syncthreads()                          # wait: A is filled (neighbours read it)
        src = 0
        for _ in range(rounds):
            dst = S - src
            for j in range(K):
                i = t + T * j
                tile[dst + i] = (tile[src + i] + tile[src + ((i + 1) & MASK)]) * HALF
            cuda.syncthreads()                      # wait: B is complete before it is read
            src = dst                               # (and A is free to be overwritten next)
        for j in range(K):
            out[base + t + T * j] = tile[src + t + T * j]

    return smem


@lru_cache(maxsize=None)
def fma_kernel(CH):
    """Registers: thread g runs CH independent chains a_c ← a_c · b + c0 (c = 0 … CH − 1),
    ``iters`` times, starting from a_c = x[g] + c; writes Σ_c a_c to out[g]. The chains are
    independent so that CH multiply-adds are in flight per thread (a chain alone would wait the
    FMA latency, ~4 cycles, between steps)."""

    @cuda.jit
    def fma(x, out, iters, b, c0):
        g = cuda.grid(1)
        a = cuda.local.array(CH, float32)           # CH registers (the loops are unrolled)
        x0 = x[g]
        for c in range(CH):
            a[c] = x0 + float32(c)
        for _ in range(iters):
            for c in range(CH):
                a[c] = a[c] * b + c0                # one FMA: 3 register reads, 1 write
        s = ZERO
        for c in range(CH):
            s += a[c]
        out[g] = s

    return fma
