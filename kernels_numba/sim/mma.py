"""Simulator twins of ``kernels_numba/mma.py``'s inline-PTX helpers (§37's tensor-core menu).

Each mma and ldmatrix helper is a warp rendezvous (``warp.warp_collective``): all 32 lanes hand
in their fragments, the 16×8 product (or the four 8×8 matrices) is computed in NumPy, each lane
gets its own part back, in the fragment layout drawn in ``kernels_numba/mma.py``. A lane that
skips it is reported, never a hang. The fp16/bf16 products accumulate in float64 and round once
to float32 (the tensor core's own accumulation differs at the ulp level). The tf32 mma adds as
the tensor core does (``tf32_block_fma``: every addend cut to the grid of the largest one, the
sum rounded toward zero), since that is what decides 3xTF32's accuracy. The packing and
conversion helpers are per lane: NumPy's float16, bf16 round-to-nearest-even, tf32 ``cvt.rna``,
``ex2.approx.ftz``.

Chosen by ``kernels_numba/sim/__init__.py`` (``helper_chooser``): each name here replaces the
GPU helper of the same name when the simulator is on.
"""

import numpy as np

from .warp import warp_collective

FULL = 0xFFFFFFFF


def _u32(x):
    return np.uint32(int(x) & FULL)


def _halves(word, dtype):
    """(low, high) of one 32-bit register of two halves, as float64."""
    bits = np.array([int(word) & 0xFFFF, (int(word) >> 16) & 0xFFFF], np.uint16)
    if dtype == "f16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _tf32_value(x):
    """The value the tensor core reads from a float32 register: low 13 bits dropped."""
    bits = np.array([x], np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return float(bits.view(np.float32)[0])


TF32_GUARD_BITS = 2     # extra alignment bits of the tf32 block FMA (Hopper: tf32_block_fma)


def tf32_block_fma(a, b, c):
    """D = A·B + C for tf32 A [M, 8], B [8, N] and float32 C [M, N], each element summed as
    Hopper's tensor core sums it — Khattak & Mikaitis, "Accurate Models of NVIDIA Tensor Cores"
    (arXiv 2512.07004; their MATLAB models, github.com/north-numerical-computing/MATLAB-tensor-
    core, models/H100TC.m and B200TC.m for tf32: fma = 8, neab = 2, frmode = 'rz'):
      - the 8 products are exact (11-bit significands);
      - the 8 products and c are aligned to the exponent E of the largest of them and each is
        cut toward zero to the grid 2^(E − 23 − 2) (two guard bits, no sticky bit);
      - their sum is rounded toward zero to float32.
    Not IEEE: each mma rounds toward zero, about an ulp of the result with one sign, so an
    accumulator that collects many mmas drifts as their number, not its square root (the
    3xTF32 kernels add each k8 step's mmas to the accumulator on the CUDA cores instead:
    ``attention_tc.mma3``). Their refinement of one more guard bit when the leading product's
    significand is ≥ 2 is left out. Returns float32 [M, N]; NaN and inf propagate."""
    with np.errstate(invalid="ignore", over="ignore"):
        terms = np.concatenate([np.asarray(a, np.float64)[:, :, None] *
                                np.asarray(b, np.float64)[None, :, :],
                                np.asarray(c, np.float64)[:, None, :]], axis=1)
        _, e = np.frexp(np.max(np.abs(terms), axis=1))     # largest = f·2^e, f in [0.5, 1)
        inv_grid = np.ldexp(1.0, 24 + TF32_GUARD_BITS - e)   # 1 / 2^(E − 23 − 2), E = e − 1
        exact = np.trunc(terms * inv_grid[:, None, :]).sum(axis=1) / inv_grid
        d = exact.astype(np.float32)                        # to nearest, then toward zero:
        over = np.abs(d.astype(np.float64)) > np.abs(exact)
    d[over] = np.nextafter(d[over], np.float32(0))
    return d


def _product(A, B, payloads):
    D = A @ B
    out = []
    for lane, p in enumerate(payloads):
        g, t = divmod(lane, 4)
        c = p[6:]
        out.append((np.float32(D[g, 2 * t] + float(c[0])),
                    np.float32(D[g, 2 * t + 1] + float(c[1])),
                    np.float32(D[g + 8, 2 * t] + float(c[2])),
                    np.float32(D[g + 8, 2 * t + 1] + float(c[3]))))
    return out


def _m16n8k16(dtype):
    def compute(payloads):
        A, B = np.zeros((16, 16)), np.zeros((16, 8))
        for lane, p in enumerate(payloads):
            g, t = divmod(lane, 4)
            A[g, 2 * t:2 * t + 2] = _halves(p[0], dtype)
            A[g + 8, 2 * t:2 * t + 2] = _halves(p[1], dtype)
            A[g, 2 * t + 8:2 * t + 10] = _halves(p[2], dtype)
            A[g + 8, 2 * t + 8:2 * t + 10] = _halves(p[3], dtype)
            B[2 * t:2 * t + 2, g] = _halves(p[4], dtype)
            B[2 * t + 8:2 * t + 10, g] = _halves(p[5], dtype)
        return _product(A, B, payloads)
    return compute


def _m16n8k8_tf32(payloads):
    A, B, C = np.zeros((16, 8)), np.zeros((8, 8)), np.zeros((16, 8))
    for lane, p in enumerate(payloads):
        g, t = divmod(lane, 4)
        A[g, t], A[g + 8, t] = _tf32_value(p[0]), _tf32_value(p[1])
        A[g, t + 4], A[g + 8, t + 4] = _tf32_value(p[2]), _tf32_value(p[3])
        B[t, g], B[t + 4, g] = _tf32_value(p[4]), _tf32_value(p[5])
        C[g, 2 * t:2 * t + 2] = float(p[6]), float(p[7])
        C[g + 8, 2 * t:2 * t + 2] = float(p[8]), float(p[9])
    D = tf32_block_fma(A, B, C)
    return [(D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1])
            for g, t in (divmod(lane, 4) for lane in range(len(payloads)))]


_F16, _BF16 = _m16n8k16("f16"), _m16n8k16("bf16")


def mma_f16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    return warp_collective("mma_f16", _F16, (a0, a1, a2, a3, b0, b1, c0, c1, c2, c3))


def mma_bf16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    return warp_collective("mma_bf16", _BF16,
                                   (a0, a1, a2, a3, b0, b1, c0, c1, c2, c3))


def mma_tf32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    return warp_collective("mma_tf32", _m16n8k8_tf32,
                                   (a0, a1, a2, a3, b0, b1, c0, c1, c2, c3))


def pack_f16(lo, hi):
    h = np.array([lo, hi], np.float32).astype(np.float16).view(np.uint16)
    return _u32(int(h[0]) | (int(h[1]) << 16))


def _bf16_bits(x):
    b = int(np.array([x], np.float32).view(np.uint32)[0])
    if (b & 0x7F800000) == 0x7F800000 and (b & 0x7FFFFF):
        return (b >> 16) | 0x40  # NaN stays a (quiet) NaN
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF  # round to nearest even


def pack_bf16(lo, hi):
    return _u32(_bf16_bits(lo) | (_bf16_bits(hi) << 16))


def tf32(x):
    b = int(np.array([x], np.float32).view(np.uint32)[0])
    if (b & 0x7F800000) != 0x7F800000:
        b = (b + 0x1000) & 0xFFFFE000  # cvt.rna: nearest, ties away from zero
    return np.array([b & FULL], np.uint32).view(np.float32)[0]


def ex2(x):
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.exp2(np.float32(x))
    return np.float32(0) if r < np.finfo(np.float32).tiny else r   # .ftz


def pair_lo(a, b):
    return _u32((int(a) & 0xFFFF) | ((int(b) & 0xFFFF) << 16))


def unpack_f16(w):
    lo, hi = _halves(w, "f16")
    return np.float32(lo), np.float32(hi)


def unpack_bf16(w):
    lo, hi = _halves(w, "bf16")
    return np.float32(lo), np.float32(hi)


def pair_hi(a, b):
    return _u32(((int(a) >> 16) & 0xFFFF) | (int(b) & 0xFFFF0000))


def _ldsm(trans):
    def compute(payloads):
        mats = []
        for m in range(4):                  # matrix m: rows from lanes 8m … 8m + 7
            rows = []
            for r in range(8):
                smem, i = payloads[8 * m + r]
                flat = smem.reshape(-1) if smem.ndim > 1 else smem
                if i < 0 or i % 4 or i + 4 > flat.size:
                    raise IndexError(f"ldsm: lane {8 * m + r}: row start {i} is not a "
                                     f"16-byte aligned word index inside the array")
                rows.append(np.ascontiguousarray(flat[i:i + 4]).view(np.uint16))
            mats.append(np.array(rows))     # 8 × 8 halves
        out = []
        for lane in range(32):
            g, t = divmod(lane, 4)
            if trans:                       # rows 2t, 2t + 1 of column g
                out.append(tuple(_u32(int(M[2 * t, g]) | (int(M[2 * t + 1, g]) << 16))
                                 for M in mats))
            else:                           # row g, columns 2t, 2t + 1
                out.append(tuple(_u32(int(M[g, 2 * t]) | (int(M[g, 2 * t + 1]) << 16))
                                 for M in mats))
        return out
    return compute


_LDSM, _LDSM_T = _ldsm(False), _ldsm(True)


def ldsm_x4(smem, i):
    return warp_collective("ldsm_x4", _LDSM, (smem, int(i)))


def ldsm_x4_trans(smem, i):
    return warp_collective("ldsm_x4_trans", _LDSM_T, (smem, int(i)))
