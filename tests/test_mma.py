"""§37: the tensor-core helpers of kernels_numba/mma.py, each alone against NumPy (one warp, one
instruction, operands in the fragment layout drawn in mma.py). Same tests on the GPU (real
mma.sync) and in the simulator (its warp-collective twin)."""

import numpy as np
import pytest
from conftest import SIM

import flashlesson  # noqa: F401 - picks the device first
from flashlesson.tc_methods import BFloat16
from numba import cuda, uint32

from flashlesson.kernels_numba import mma
from flashlesson.kernels_numba.vector import cp_async4, cp_async16, cp_async_wait_all


def _bf16(x):
    return BFloat16.from_float32(x).to_float32().astype(np.float64)


def _tf32(x):
    """cvt.rna.tf32.f32: 10 mantissa bits, nearest with ties away from zero."""
    b = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return (((b + 0x1000) & 0xFFFFE000).astype(np.uint32)).view(np.float32)


@pytest.mark.parametrize("bf16", [False, True])
def test_mma_m16n8k16(rng, bf16):
    a = rng.standard_normal((16, 16)).astype(np.float32)
    b = rng.standard_normal((16, 8)).astype(np.float32)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    a[3, 5], b[7, 2] = 1000.0, -999.0          # outliers: a wrong lane or register shows
    d = np.full((16, 8), np.nan, np.float32)
    (mma.mma_bf16_kernel if bf16 else mma.mma_f16_kernel)[1, 32](a, b, c, d)
    r = _bf16 if bf16 else (lambda x: x.astype(np.float16).astype(np.float64))
    want = r(a) @ r(b) + c                     # exact products of the rounded inputs, fp32 sum
    np.testing.assert_allclose(d, want, rtol=1e-5, atol=1e-3)


def test_mma_tf32(rng):
    a = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    d = np.full((16, 8), np.nan, np.float32)
    mma.mma_tf32_kernel[1, 32](a, b, c, d)
    want = _tf32(a).astype(np.float64) @ _tf32(b).astype(np.float64) + c
    np.testing.assert_allclose(d, want, rtol=1e-5, atol=1e-5)
    # and tf32 really is coarser than float32: the unrounded product differs visibly
    assert np.abs(d - (a.astype(np.float64) @ b + c)).max() > 1e-5


def test_packing_helpers(rng):
    x = rng.standard_normal(64).astype(np.float32) * 100
    x[:4] = [1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11, np.inf, -0.0]   # ties to even, inf, −0
    n = 32
    f16, bf16, lo, hi = (np.zeros(n, np.uint32) for _ in range(4))
    t32 = np.full(2 * n, np.nan, np.float32)
    mma.pack_kernel[1, 32](x, f16, bf16, lo, hi, t32)
    want16 = x.astype(np.float16).view(np.uint16).astype(np.uint32)
    np.testing.assert_array_equal(f16, want16[0::2] | (want16[1::2] << 16))
    wantb = BFloat16.from_float32(x).bits.astype(np.uint32)
    np.testing.assert_array_equal(bf16, wantb[0::2] | (wantb[1::2] << 16))
    np.testing.assert_array_equal(lo, (f16 & 0xFFFF) | ((bf16 & 0xFFFF) << 16))
    np.testing.assert_array_equal(hi, (f16 >> 16) | (bf16 & 0xFFFF0000))
    np.testing.assert_array_equal(t32.view(np.uint32), _tf32(x).view(np.uint32))


def test_ex2(rng):
    """ex2.approx.ftz.f32: 2^x to ~2 ulp; −inf → 0, +inf → inf, results below float32's
    smallest normal (2^−126) flushed to 0."""
    x = rng.uniform(-30, 30, 64).astype(np.float32)
    x[:8] = [-np.inf, np.inf, 0.0, -100.0, -126.5, -140.0, 1.0, 127.5]
    y = np.full_like(x, np.nan)
    mma.ex2_kernel[2, 32](x, y)
    want = np.exp2(x.astype(np.float64))
    want[want < 2.0 ** -126] = 0.0
    assert y[0] == 0.0 and y[1] == np.inf and y[4] == 0.0 and y[5] == 0.0
    np.testing.assert_allclose(y, want, rtol=4e-7, atol=0)


@pytest.mark.skipif(not SIM, reason="the simulator's own check (on a GPU it would hang)")
def test_simulator_reports_a_partial_warp():
    from flashlesson.kernels_numba.sim.warp import WarpOpError
    a = np.zeros((16, 16), np.float32)
    b, c, d = (np.zeros((16, 8), np.float32) for _ in range(3))
    with pytest.raises(WarpOpError, match="all 32 lanes"):
        mma.mma_f16_kernel[1, 16](a, b, c, d)


def test_ldmatrix_x4(rng):
    """ldsm_x4 / ldsm_x4_trans: lane 4g + t gets (row g, columns 2t, 2t + 1) of each of the four
    8 × 8 matrices, or with .trans (rows 2t, 2t + 1, column g); the low half first."""
    halves = rng.integers(0, 2 ** 16, (32, 8)).astype(np.uint16)   # matrix m: rows 8m … 8m+7
    src = np.ascontiguousarray(halves).view(np.uint32)              # [32, 4] words
    out, out_t = (np.zeros((32, 4), np.uint32) for _ in range(2))
    mma.ldsm_kernel[1, 32](src, out, out_t)
    M = halves.astype(np.uint32).reshape(4, 8, 8)
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    for m in range(4):
        np.testing.assert_array_equal(out[:, m], M[m, g, 2 * t] | (M[m, g, 2 * t + 1] << 16))
        np.testing.assert_array_equal(out_t[:, m], M[m, 2 * t, g] | (M[m, 2 * t + 1, g] << 16))


# --- cp.async (kernels_numba/vector.py): global → shared, zero-fill, wait --------------------
@cuda.jit
def _cp_async_kernel(src, n_rows, out, early):
    """src [R, 4] words; thread r copies row r (zeros for r ≥ n_rows) with cp_async16 and
    word 0 of it again with cp_async4 into a second buffer; early = what the buffer held before
    the wait (the simulator lands copies only at the wait)."""
    buf = cuda.shared.array(64 * 4, uint32)
    one = cuda.shared.array(64, uint32)
    r = cuda.threadIdx.x
    buf[4 * r] = 7
    one[r] = 7
    cuda.syncthreads()                  # wait: the old contents are everywhere
    ok = r < n_rows
    cp_async16(buf, 4 * r, src, 4 * r if ok else 0, ok)
    cp_async4(one, r, src, 4 * r + 1 if ok else 0, ok)
    if SIM:
        early[r] = buf[4 * r]           # (on the GPU a race: not read there)
    cp_async_wait_all()
    cuda.syncthreads()                  # wait: every thread's copies are visible
    for c in range(4):
        out[r, c] = buf[4 * ((r + 1) % 64) + c]     # a neighbour's row: needs the barrier
    out[r, 4] = one[(r + 1) % 64]


def test_cp_async(rng):
    src = rng.integers(0, 2 ** 32, (64, 4), dtype=np.uint64).astype(np.uint32)
    n_rows = 50
    out = np.full((64, 5), 0xDEAD, np.uint32)
    early = np.zeros(64, np.uint32)
    _cp_async_kernel[1, 64](src, n_rows, out, early)
    want = np.where(np.arange(64)[:, None] < n_rows, src, 0)
    nxt = np.roll(np.arange(64), -1)
    np.testing.assert_array_equal(out[:, :4], want[nxt])
    np.testing.assert_array_equal(out[:, 4], want[nxt, 1])
    if SIM:                                    # the simulator held the copies back until the
        assert np.all(early == 7)              # wait: a kernel that forgets it fails its test
