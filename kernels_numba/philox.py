"""Philox4x32-10 and the dropout keep-mask (lesson §36), as device functions and one kernel.

Dropout in attention drops each probability P_ij with probability p and scales the kept ones by
1/(1 − p). The backward pass must drop the very same elements, yet FlashAttention never stores P
(nor a mask of its size). So the mask is recomputed wherever it is needed from a counter-based
generator: a pure function of (seed, b, h, i, j), independent of the tile, the block, the launch
shape and the kernel. ``reference/philox.py`` is its NumPy twin (bit for bit).

Menu
| function                                  | what                                              |
|-------------------------------------------|---------------------------------------------------|
| ``philox4x32_10(c0, c1, c2, c3, k0, k1)`` | Random123's Philox4x32-10: 10 rounds of           |
|                                           | (c0,c1,c2,c3) → (hi(M1·c2)^c1^k0, lo(M1·c2),      |
|                                           |                  hi(M0·c0)^c3^k1, lo(M0·c0)),     |
|                                           | key += (W0, W1) between rounds; 4 uint32 words    |
| ``dropout_words(k0, k1, bh, i, jq)``      | the 4 words of columns 4·jq … 4·jq+3 of row i of  |
|                                           | head bh: Philox(counter = (jq, i, bh, 0), key)    |
| ``dropout_word(k0, k1, bh, i, j)``        | word (j mod 4) of ``dropout_words(…, j div 4)``   |
| ``dropout_keep(k0, k1, bh, i, j, threshold)`` | keep element (i, j)? r ≥ threshold            |
| ``dropout_mask_kernel(k0, k1, threshold, heads, out)`` | out[b, h, i, j] = keep (uint8 0/1);  |
|                                           | one Philox call per thread fills 4 adjacent j     |
| ``philox_rows_kernel(c, k, out)``         | out[t] = Philox4x32-10(c[t], k[t]), a thread a row |
|                                           | (the known-answer vectors on the device)          |

The mask, in full: key = (seed mod 2^32, seed div 2^32); counter = (j div 4, i, b·H + h, 0);
r = word (j mod 4) of Philox4x32-10(counter, key); keep iff r ≥ threshold = floor(p · 2^32),
so P(keep) = 1 − p (up to 2^-32). ``flashlesson.dropout`` turns (seed, p) into (k0, k1,
threshold).

Arguments (what an attention kernel passes): k0, k1 and threshold as ``np.uint32`` kernel
arguments (``flashlesson.dropout.kernel_args(seed, p)`` makes them; threshold ≤ 2^32 − 1 for
p < 1, and p = 0 gives threshold 0: everything kept). bh, i, j: any non-negative integers (the
thread's int32/int64 indices are fine). Every argument is cast to unsigned on entry and all the
arithmetic stays unsigned, masked to 32 bits: Numba types int64 ⊕ uint64 as float64, so
one signed operand would put float conversions into the rounds. The Philox state is kept in
uint32 variables and each 32 × 32 → 64-bit product widens both factors, which compiles to
``mul.wide.u32`` (checked: the PTX of the 10 unrolled rounds is integer only — mul.wide.u32,
mul.lo, xor, shr, add — with the key bumps folded into constants; 18 registers for a KAT kernel).

Per element costs one Philox call (10 rounds: 2 wide multiplies, a few XORs each) for
``dropout_keep``; a thread that owns 4 adjacent columns starting at a multiple of 4 (the
forward kernel's layout: column W·h + 4·tc + e) should call ``dropout_words`` once for all 4.

Limits: i < 2^32, j < 2^34, bh < 2^32. The kernel: out is [B, H, Nq, Nk] uint8 (C-contiguous),
block (TX, TY) threads over (quads of j, rows i), grid (⌈⌈Nk/4⌉/TX⌉, gy, gz) with any gy, gz ≥ 1
(rows and heads are grid-stride loops, so the 65535 limit of grid y and z does not bound Nq or
B·H).

In the simulator these are plain Python on NumPy uint32/uint64 scalars (``pure_device``: no
per-call lock); products stay below 2^64 and sums below 2^33, and every value is masked to 32
bits before it becomes a uint32, so nothing wraps or warns.

How to run: ``flashlesson.dropout_keep_mask(seed, batch, heads, nq, nk, p)``;
``pytest tests/test_philox.py`` (known answers, kernel == twin, keep fractions).
"""

import numpy as np
from numba import cuda

from .jit import pure_device

M0 = np.uint64(0xD2511F53)      # multipliers of the two S-boxes
M1 = np.uint64(0xCD9E8D57)
W0 = np.uint64(0x9E3779B9)      # Weyl key increments: golden ratio, √3 − 1 (32-bit fractions)
W1 = np.uint64(0xBB67AE85)
MASK32 = np.uint64(0xFFFFFFFF)
SHIFT32 = np.uint64(32)
TWO = np.uint64(2)
THREE = np.uint64(3)
ZERO64 = np.uint64(0)
ONE64 = np.uint64(1)


@pure_device
def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 of counter (c0, c1, c2, c3) under key (k0, k1): 4 uint32 words."""
    # The state lives in uint32 variables; each product widens both factors from 32 bits
    # (a zero-extension the compiler turns into one mul.wide.u32), and every result is masked
    # back to 32 bits before it is narrowed (exact in the simulator's NumPy scalars too).
    c0 = np.uint32(np.uint64(c0) & MASK32)
    c1 = np.uint32(np.uint64(c1) & MASK32)
    c2 = np.uint32(np.uint64(c2) & MASK32)
    c3 = np.uint32(np.uint64(c3) & MASK32)
    k0 = np.uint32(np.uint64(k0) & MASK32)
    k1 = np.uint32(np.uint64(k1) & MASK32)
    for r in range(10):
        if r > 0:                   # bump the key before rounds 2 … 10: k += (W0, W1) mod 2^32
            k0 = np.uint32((np.uint64(k0) + W0) & MASK32)
            k1 = np.uint32((np.uint64(k1) + W1) & MASK32)
        p0 = M0 * np.uint64(c0)     # 32 × 32 → 64 bits: hi = p >> 32, lo = p mod 2^32
        p1 = M1 * np.uint64(c2)
        c0, c1, c2, c3 = (np.uint32((p1 >> SHIFT32) ^ np.uint64(c1) ^ np.uint64(k0)),
                          np.uint32(p1 & MASK32),
                          np.uint32((p0 >> SHIFT32) ^ np.uint64(c3) ^ np.uint64(k1)),
                          np.uint32(p0 & MASK32))
    return c0, c1, c2, c3


@pure_device
def dropout_words(k0, k1, bh, i, jq):
    """§36: the random words of columns 4·jq … 4·jq + 3 of row i of head bh = b·H + h."""
    return philox4x32_10(jq, i, bh, ZERO64, k0, k1)


@pure_device
def dropout_word(k0, k1, bh, i, j):
    """§36: the random word r of element (i, j) of head bh: word (j mod 4) of Philox(j div 4)."""
    j = np.uint64(j)
    r0, r1, r2, r3 = dropout_words(k0, k1, bh, i, j >> TWO)
    e = j & THREE
    if e == ZERO64:
        return r0
    if e == ONE64:
        return r1
    if e == TWO:
        return r2
    return r3


@pure_device
def dropout_keep(k0, k1, bh, i, j, threshold):
    """§36: is element (i, j) of head bh kept? r ≥ threshold = floor(p · 2^32)."""
    return np.uint64(dropout_word(k0, k1, bh, i, j)) >= np.uint64(threshold)


@cuda.jit
def philox_rows_kernel(c, k, out):
    """out[t] = Philox4x32-10(counter c[t], key k[t]) for uint32 c [n, 4], k [n, 2], out [n, 4]:
    the device function alone, one thread a row (Random123's known-answer vectors, §36)."""
    t = cuda.grid(1)
    if t < c.shape[0]:
        r0, r1, r2, r3 = philox4x32_10(c[t, 0], c[t, 1], c[t, 2], c[t, 3], k[t, 0], k[t, 1])
        out[t, 0] = r0
        out[t, 1] = r1
        out[t, 2] = r2
        out[t, 3] = r3


@cuda.jit
def dropout_mask_kernel(k0, k1, threshold, heads, out):
    """out[b, h, i, j] = 1 if kept else 0, for out [B, H, Nq, Nk] uint8.

    Thread (x, y) of the grid takes quad jq = x (columns 4·jq … 4·jq + 3) of rows
    i = y, y + grid_y, … of heads bh = z, z + grid_z, …: one Philox call, four elements.
    """
    nq = out.shape[2]
    nk = out.shape[3]
    jq = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    j = 4 * jq
    if j >= nk:
        return                      # no barrier below: early exit is safe
    t = np.uint64(threshold)
    bh = cuda.blockIdx.z
    while bh < out.shape[0] * heads:
        b = bh // heads
        h = bh - b * heads
        i = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        while i < nq:
            r0, r1, r2, r3 = dropout_words(k0, k1, bh, i, jq)
            out[b, h, i, j] = np.uint64(r0) >= t
            if j + 1 < nk:          # the last quad of a row may be partial
                out[b, h, i, j + 1] = np.uint64(r1) >= t
            if j + 2 < nk:
                out[b, h, i, j + 2] = np.uint64(r2) >= t
            if j + 3 < nk:
                out[b, h, i, j + 3] = np.uint64(r3) >= t
            i += cuda.gridDim.y * cuda.blockDim.y
        bh += cuda.gridDim.z
