"""Shared device functions: warp and block reductions, and the (m, l) merge.

Lesson §6 (warp shuffle), §10 (two-level block reduction), §19 (merging two softmax states).
Written once here; every softmax and attention kernel of the project calls these.

Menu
- ``warp_max(v)`` / ``warp_sum(v)`` — §6 exactly as the lesson draws it: a ``shfl_down_sync``
  tree (offsets 16, 8, 4, 2, 1) leaves the result in lane 0, then ``shfl_sync`` broadcasts
  lane 0's value to the whole warp. 5 + 1 shuffles.
- ``warp_max_xor(v)`` / ``warp_sum_xor(v)`` — the butterfly form: ``shfl_xor_sync`` with the
  same offsets leaves the result in *every* lane, so no broadcast is needed. 5 shuffles. The
  fast kernels use this one. ``lanes_max(v, G)`` / ``lanes_sum(v, G)`` do the same inside
  aligned groups of G lanes (several short rows per warp).
- ``block_max(v, scratch)`` / ``block_sum(v, scratch)`` — §10: thread value → warp shuffle →
  lane 0 of each warp writes ``scratch[warp]`` → barrier → the ≤ 32 partials are reduced by
  shuffle again. Every thread gets the result.
- ``fast_exp(x)`` — e^x as ``__expf`` on the GPU (see its comment for why not fastmath=True).
- ``merge_ml(m_a, l_a, m_b, l_b)`` — §19: m = max(m_a, m_b); l = e^{m_a−m} l_a + e^{m_b−m} l_b.
- ``warp_merge_ml(m, l)`` / ``block_merge_ml(m, l, scratch_m, scratch_l)`` — §19 applied
  across a warp (butterfly) and across a block (two levels, like §10).

Limits
- Every lane of the warp must call a warp function together (mask 0xffffffff): launch blocks
  whose size is a multiple of 32, and never return early before a reduction; threads with no
  data contribute the neutral element (−inf for max, 0 for sum, (−inf, 0) for merges).
- ``scratch`` arrays are shared memory of at least 32 float32 elements, declared by the
  kernel (``cuda.shared.array(32, float32)``). The block functions contain barriers, so every
  thread of the block must call them, the same number of times.
- Values are float32; the neutral elements below are float32 constants so that no float64
  arithmetic sneaks in (a bare ``-math.inf`` literal would be typed float64 by Numba).

How to run: these are device functions; tests/test_softmax_kernels.py runs them through the
softmax kernels, on the GPU or in the simulator (``NUMBA_ENABLE_CUDASIM=1``).
"""


import numpy as np
from numba import cuda
from numba.cuda import libdevice

from .jit import pure_device
from .sim import helper_chooser

helper = helper_chooser("reductions")   # fast_exp: libdevice on the GPU, a twin in the simulator

FULL_MASK = 0xFFFFFFFF          # all 32 lanes take part in the shuffle
WARP = 32
NEG_INF = np.float32(-np.inf)   # neutral element of max (float32, see Limits)
ZERO = np.float32(0.0)          # neutral element of sum
ONE = np.float32(1.0)


# ---------------------------------------------------------------------------------------------
# §6: warp reductions
# ---------------------------------------------------------------------------------------------
@cuda.jit(device=True)
def warp_max(v):
    """§6: max over the 32 lanes of a warp; the tree of the lesson, then a broadcast."""
    offset = 16
    while offset > 0:
        # lane i takes lane i+offset's value; lanes past 31 get their own back (harmless for max)
        v = max(v, cuda.shfl_down_sync(FULL_MASK, v, offset))
        offset //= 2
    return cuda.shfl_sync(FULL_MASK, v, 0)          # only lane 0 holds the full max: broadcast it


@cuda.jit(device=True)
def warp_sum(v):
    """§6: sum over the 32 lanes of a warp; the tree of the lesson, then a broadcast."""
    offset = 16
    while offset > 0:
        # lanes whose partner is past lane 31 add their own value again, but only lane 0's
        # result is kept, and lane 0's partners are always in range
        v += cuda.shfl_down_sync(FULL_MASK, v, offset)
        offset //= 2
    return cuda.shfl_sync(FULL_MASK, v, 0)


@cuda.jit(device=True)
def lanes_max(v, G):
    """Butterfly max over aligned groups of G lanes (G = 32: the whole warp; G a power of 2).

    Partners are lane XOR offset with offset < G, so a group never exchanges with another:
    after log2(G) exchanges every lane holds its group's max.
    """
    offset = G // 2
    while offset > 0:
        v = max(v, cuda.shfl_xor_sync(FULL_MASK, v, offset))   # partner = lane XOR offset
        offset //= 2
    return v


@cuda.jit(device=True)
def lanes_sum(v, G):
    """Butterfly sum over aligned groups of G lanes; every lane gets its group's sum."""
    offset = G // 2
    while offset > 0:
        v += cuda.shfl_xor_sync(FULL_MASK, v, offset)
        offset //= 2
    return v


@cuda.jit(device=True)
def warp_max_xor(v):
    """Butterfly max: after 5 exchanges every lane holds the max of all 32."""
    return lanes_max(v, WARP)


@cuda.jit(device=True)
def warp_sum_xor(v):
    """Butterfly sum: after 5 exchanges every lane holds the sum of all 32."""
    return lanes_sum(v, WARP)


# ---------------------------------------------------------------------------------------------
# §10: two-level block reductions through shared memory
# ---------------------------------------------------------------------------------------------
@cuda.jit(device=True)
def block_max(v, scratch):
    """§10: max over the whole block; every thread gets it. Contains two barriers."""
    lane = cuda.threadIdx.x % WARP
    warp = cuda.threadIdx.x // WARP
    n_warps = (cuda.blockDim.x + WARP - 1) // WARP
    v = warp_max_xor(v)                              # level 1: inside each warp
    if lane == 0:
        scratch[warp] = v                            # one partial per warp
    cuda.syncthreads()                               # wait: every warp's partial is in scratch
    v = scratch[lane] if lane < n_warps else NEG_INF
    # level 2: the lesson lets warp 0 reduce the partials and broadcast through shared memory;
    # letting every warp reduce them (the same 5 shuffles) gives the same value everywhere
    # and saves the broadcast barrier.
    v = warp_max_xor(v)
    cuda.syncthreads()                               # wait: all reads of scratch are done before
    return v                                         # the caller may reuse it


@cuda.jit(device=True)
def block_sum(v, scratch):
    """§10: sum over the whole block; every thread gets it. Contains two barriers."""
    lane = cuda.threadIdx.x % WARP
    warp = cuda.threadIdx.x // WARP
    n_warps = (cuda.blockDim.x + WARP - 1) // WARP
    v = warp_sum_xor(v)                              # level 1: inside each warp
    if lane == 0:
        scratch[warp] = v
    cuda.syncthreads()                               # wait: every warp's partial is in scratch
    v = scratch[lane] if lane < n_warps else ZERO
    v = warp_sum_xor(v)                              # level 2, in every warp (see block_max)
    cuda.syncthreads()                               # wait: scratch may be reused after this
    return v


# ---------------------------------------------------------------------------------------------
# e^x in float32, the fast way: __expf = ex2.approx(x·log2 e), two instructions instead of the
# ~14 of the correctly rounded expf (relative error ≈ 2^-21 near 0, growing with |x|; e^{-inf}
# is exactly 0). Numba's ``fastmath=True`` would give the same exp but also the nnan/ninf
# flags, which would let the compiler drop the kernels' tests against −inf; so it is called
# by name. The simulator has no libdevice: there its twin (kernels_numba/sim/reductions.py,
# chosen by ``helper``) is NumPy's float32 exp.
# ---------------------------------------------------------------------------------------------
@helper
@cuda.jit(device=True)
def fast_exp(x):
    """e^x as __expf (ex2.approx)."""
    return libdevice.fast_expf(x)


# ---------------------------------------------------------------------------------------------
# §19: merging two (m, l) softmax states
# ---------------------------------------------------------------------------------------------
@pure_device
def merge_ml(m_a, l_a, m_b, l_b):
    """§19: m = max(m_a, m_b); l = e^{m_a−m} l_a + e^{m_b−m} l_b.

    An empty state is (−inf, 0). Two empty states stay empty: without the test,
    e^{−inf − (−inf)} = e^{NaN} would poison l. (l_a + l_b rather than 0 there, so that a
    NaN carried in l survives even when ``max`` dropped the NaN from m.)
    """
    m = max(m_a, m_b)
    if m == NEG_INF:
        return NEG_INF, l_a + l_b
    l = fast_exp(m_a - m) * l_a + fast_exp(m_b - m) * l_b   # §19
    return m, l


@cuda.jit(device=True)
def warp_merge_ml(m, l):
    """§19 across a warp: butterfly exchange of (m, l) pairs; every lane gets the warp's state."""
    offset = 16
    while offset > 0:
        m_other = cuda.shfl_xor_sync(FULL_MASK, m, offset)
        l_other = cuda.shfl_xor_sync(FULL_MASK, l, offset)
        m, l = merge_ml(m, l, m_other, l_other)
        offset //= 2
    return m, l


@cuda.jit(device=True)
def block_merge_ml(m, l, scratch_m, scratch_l):
    """§19 across a block, in two levels like §10; every thread gets the block's (m, l)."""
    lane = cuda.threadIdx.x % WARP
    warp = cuda.threadIdx.x // WARP
    n_warps = (cuda.blockDim.x + WARP - 1) // WARP
    m, l = warp_merge_ml(m, l)                       # level 1: inside each warp
    if lane == 0:
        scratch_m[warp] = m
        scratch_l[warp] = l
    cuda.syncthreads()                               # wait: every warp's (m, l) is in scratch
    if lane < n_warps:
        m = scratch_m[lane]
        l = scratch_l[lane]
    else:
        m = NEG_INF                                  # empty state: neutral for the merge
        l = ZERO
    m, l = warp_merge_ml(m, l)                       # level 2, in every warp
    cuda.syncthreads()                               # wait: scratch may be reused after this
    return m, l


@pure_device
def safe_max(m):
    """The max to subtract: 0 for an all −inf row, so e^{x−m} = e^{−inf} = 0, never e^{NaN}."""
    return ZERO if m == NEG_INF else m


@pure_device
def safe_reciprocal(l):
    """1/l, and 0 for an empty row (l = 0) so the row's output is zeros; NaN stays NaN."""
    return ZERO if l == ZERO else ONE / l
