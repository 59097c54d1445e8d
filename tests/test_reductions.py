"""The shared device functions of kernels_numba/reductions.py (§6, §10, §19), each through a tiny
kernel, against NumPy. Outputs are NaN-poisoned before each launch.

A max is exact (compared with ==); a float32 sum of n terms is within
flashlesson.tolerance.sum_tol (S·λ·u·√n·Σ|x|: its error scales with Σ|x|, not with the
possibly cancelling sum); §19's merged l within merge_l_tol (per state, its path's
roundings and the shifts e^{m_p − m})."""

import numpy as np
import pytest
from conftest import by_device
from numba import cuda, float32

from flashlesson.tolerance import merge_l_tol, sum_tol
from flashlesson.kernels_numba import reductions as R
from flashlesson.reference import merge_ml as merge_ml_oracle


def _poisoned(shape):
    return cuda.to_device(np.full(shape, np.nan, np.float32))


@cuda.jit
def _warp_reduce_kernel(x, out):
    """out[:, 0..3] = warp_max, warp_sum (§6 tree + broadcast), warp_max_xor, warp_sum_xor."""
    i = cuda.grid(1)
    v = x[i]
    a = R.warp_max(v)
    b = R.warp_sum(v)
    c = R.warp_max_xor(v)
    d = R.warp_sum_xor(v)
    out[i, 0] = a
    out[i, 1] = b
    out[i, 2] = c
    out[i, 3] = d


def test_warp_reductions_every_lane_gets_the_result(rng):
    x = rng.standard_normal(64).astype(np.float32)        # two warps
    out = _poisoned((64, 4))
    _warp_reduce_kernel[1, 64](cuda.to_device(x), out)
    got = out.copy_to_host()
    for w in range(2):
        lanes = slice(32 * w, 32 * w + 32)
        assert np.all(got[lanes, 0] == x[lanes].max())
        assert np.all(got[lanes, 2] == x[lanes].max())
        want = x[lanes].astype(np.float64).sum()
        tol = sum_tol(np.abs(x[lanes]).astype(np.float64).sum(), 32)
        np.testing.assert_allclose(got[lanes, 1], want, rtol=0, atol=tol)
        np.testing.assert_allclose(got[lanes, 3], want, rtol=0, atol=tol)


def _lanes_kernel(G):
    @cuda.jit
    def k(x, out):
        i = cuda.grid(1)
        out[i, 0] = R.lanes_max(x[i], G)
        out[i, 1] = R.lanes_sum(x[i], G)
    return k


@pytest.mark.parametrize("G", [1, 2, 8, 16, 32])
def test_lane_group_reductions_stay_inside_their_group(G, rng):
    x = rng.standard_normal(32).astype(np.float32)
    out = _poisoned((32, 2))
    _lanes_kernel(G)[1, 32](cuda.to_device(x), out)
    got = out.copy_to_host()
    groups = x.reshape(-1, G)
    np.testing.assert_array_equal(got[:, 0], np.repeat(groups.max(1), G))
    tol = sum_tol(np.abs(groups).astype(np.float64).sum(1), G)
    assert np.all(np.abs(got[:, 1] - np.repeat(groups.astype(np.float64).sum(1), G))
                  <= np.repeat(tol, G))


@cuda.jit
def _block_reduce_kernel(x, out):
    scratch = cuda.shared.array(32, float32)
    i = cuda.grid(1)
    v = x[i]
    m = R.block_max(v, scratch)
    s = R.block_sum(v, scratch)     # scratch reused right away: block_max's last barrier allows it
    out[i, 0] = m
    out[i, 1] = s


@pytest.mark.parametrize("threads", by_device([32, 96, 128], [32, 96, 256, 1024]))
def test_block_reductions(threads, rng):
    """§10, two levels: warps, then the per-warp partials; every thread gets the block's value."""
    x = rng.standard_normal(2 * threads).astype(np.float32)
    out = _poisoned((2 * threads, 2))
    _block_reduce_kernel[2, threads](cuda.to_device(x), out)
    got = out.copy_to_host()
    for b in range(2):
        blk = slice(b * threads, (b + 1) * threads)
        assert np.all(got[blk, 0] == x[blk].max())
        np.testing.assert_allclose(got[blk, 1], x[blk].astype(np.float64).sum(), rtol=0,
                                   atol=sum_tol(np.abs(x[blk]).astype(np.float64).sum(),
                                                threads))


@cuda.jit
def _merge_kernel(ma, la, mb, lb, out):
    i = cuda.grid(1)
    if i < ma.size:
        m, l = R.merge_ml(ma[i], la[i], mb[i], lb[i])
        out[i, 0] = m
        out[i, 1] = l


def test_merge_ml_matches_oracle(rng):
    """§19, including empty states (−inf, 0) on either side and on both."""
    n = 40
    ma = (rng.standard_normal(n) * 5).astype(np.float32)
    mb = (rng.standard_normal(n) * 5).astype(np.float32)
    la = rng.uniform(1, 10, n).astype(np.float32)
    lb = rng.uniform(1, 10, n).astype(np.float32)
    ma[0], la[0] = -np.inf, 0
    mb[1], lb[1] = -np.inf, 0
    ma[2], la[2], mb[2], lb[2] = -np.inf, 0, -np.inf, 0
    out = _poisoned((n, 2))
    _merge_kernel[1, 64](*[cuda.to_device(a) for a in (ma, la, mb, lb)], out)
    got = out.copy_to_host()
    want_m, want_l = merge_ml_oracle(ma.astype(np.float64), la.astype(np.float64),
                                     mb.astype(np.float64), lb.astype(np.float64))
    np.testing.assert_array_equal(got[:, 0], want_m.astype(np.float32))
    tol = merge_l_tol(np.stack([ma, mb]), np.stack([la, lb]), depth=1)
    assert np.all(np.abs(got[:, 1] - want_l) <= tol)
    assert got[2, 0] == -np.inf and got[2, 1] == 0


@cuda.jit
def _block_merge_kernel(m_in, l_in, out):
    sm = cuda.shared.array(32, float32)
    sl = cuda.shared.array(32, float32)
    i = cuda.grid(1)
    m, l = R.block_merge_ml(m_in[i], l_in[i], sm, sl)
    out[i, 0] = m
    out[i, 1] = l


def test_block_merge_ml_equals_whole_row_state(rng):
    """§19 over a block: per-thread states of pieces of a row merge into the row's (m, l) —
    the row's max exactly; its l = Σ_t e^{m_t − m}·l_t of the float32 states the kernel got,
    within merge_l_tol for two levels of warp butterflies (depth 2·log₂32)."""
    threads = by_device(64, 256)
    pieces = rng.standard_normal((threads, 5)) * 4
    pieces[3] = -np.inf                                  # one thread saw only −inf: empty state
    m_t = pieces.max(1)
    safe = np.where(np.isfinite(m_t), m_t, 0)
    l_t = np.exp(pieces - safe[:, None]).sum(1)
    out = _poisoned((threads, 2))
    _block_merge_kernel[1, threads](cuda.to_device(m_t.astype(np.float32)),
                                    cuda.to_device(l_t.astype(np.float32)), out)
    got = out.copy_to_host()
    m32, l32 = (x.astype(np.float32).astype(np.float64) for x in (m_t, l_t))
    assert np.all(got[:, 0] == np.float32(pieces.max()))      # a max: exact
    want_l = np.sum(np.exp(np.where(np.isfinite(m32), m32 - m32.max(), -np.inf)) * l32)
    assert np.all(np.abs(got[:, 1] - want_l) <= merge_l_tol(m32, l32, depth=10))
