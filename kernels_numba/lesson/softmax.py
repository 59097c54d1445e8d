"""Softmax, the lesson tier (§3, §6–7, §8, §9–10, §11, §18–20): one plain kernel per idea.

Read these before ``kernels_numba/softmax.py`` (the fast tier: the same ideas, tuned). Each
kernel reads top to bottom in the lesson's names, the formula beside the line. Shared device
functions are only the reductions and the merge the lesson itself names: §6 ``warp_max``/
``warp_sum`` (the shuffle-down tree and its broadcast), §10 ``block_max``/``block_sum`` (warp →
shared memory → warp), §19 ``block_merge_ml``, all from ``kernels_numba/reductions.py``.
e^x is plain ``math.exp`` (float32 on the GPU); no tuning knob beyond the values per thread K.

Menu (launchers: ``flashlesson.softmax(x, method=…, tier="lesson")``)
| kernel                          | §      | one row per … | the idea                                 | N        |
|---------------------------------|--------|---------------|------------------------------------------|----------|
| ``row_max``, ``row_sum_exp``,   | 3      | block, three  | m, then l = Σ e^{x−m}, then p = e^{x−m}/l; | any      |
| ``normalize``                   |        | launches      | m and l through global memory            |          |
| ``softmax_warp``                | 6–7    | warp          | lane i holds x_i; §6 tree + broadcast    | ≤ 32     |
| ``softmax_warp_multi(K)``       | 8      | warp          | lane t holds x_t, x_{t+32}, … (K values) | ≤ 32·K   |
| ``softmax_block(K)``            | 9–10   | block of T    | thread t holds x_t, x_{t+T}, … (K values)| ≤ K·T    |
|                                 |        |               | in registers; §10 two-level reduction    |          |
| ``softmax_block_smem``          | 11     | block         | the row kept in shared memory (N floats) | ≤ smem   |
| ``softmax_block_reread``        | 11     | block         | nothing kept: x read again in each pass  | any      |
| ``softmax_online``              | 18–20  | block         | one pass of (m, l) per thread (§20), the | any      |
|                                 |        |               | threads' states merged by §19, then p    |          |
(§11's three answers to "where does the row live between the passes": registers =
``softmax_block(K)``, shared memory = ``softmax_block_smem``, nowhere = ``softmax_block_reread``.)

Semantics (as the fast tier): the max is subtracted first (§2); a row of −inf gives zeros (the
safe max is 0 there, so e^{x−m} = e^{−inf} = 0, and 1/l is taken as 0 for l = 0); a NaN anywhere
makes the row NaN. Blocks are a multiple of 32 threads (the warp functions use every lane).

How to run: ``flashlesson section 9`` (each softmax example runs this tier first, then the
fast one); ``pytest tests/test_softmax.py -k lesson``.
"""

import math
from functools import lru_cache

from numba import cuda, float32

from ..jit import gpu_options
from ..reductions import (NEG_INF, ONE, WARP, ZERO, block_max, block_merge_ml, block_sum,
                          warp_max, warp_sum)


# ---------------------------------------------------------------------------------------------
# §3: three passes, three launches; m and l are handed over through global memory.
# ---------------------------------------------------------------------------------------------
@cuda.jit
def row_max(x, m_out):
    """§3 pass 1: m = max_j x_j (one block per row)."""
    row = cuda.blockIdx.x
    scratch = cuda.shared.array(WARP, float32)
    m = NEG_INF
    for j in range(cuda.threadIdx.x, x.shape[1], cuda.blockDim.x):
        m = max(m, float32(x[row, j]))              # thread-local max
    m = block_max(m, scratch)                       # §10: over the block
    if cuda.threadIdx.x == 0:
        m_out[row] = m                              # → global memory


@cuda.jit
def row_sum_exp(x, m_in, l_out):
    """§3 pass 2: l = Σ_j e^{x_j − m} (x read a second time)."""
    row = cuda.blockIdx.x
    scratch = cuda.shared.array(WARP, float32)
    m = m_in[row]
    m = ZERO if m == NEG_INF else m                 # §2: safe max for an all −inf row
    l = ZERO
    for j in range(cuda.threadIdx.x, x.shape[1], cuda.blockDim.x):
        l += math.exp(float32(x[row, j]) - m)       # e^{x_j − m}
    l = block_sum(l, scratch)                       # §10
    if cuda.threadIdx.x == 0:
        l_out[row] = l


@cuda.jit
def normalize(x, m_in, l_in, y):
    """§3 pass 3: p_j = e^{x_j − m} / l (x read a third time, y written)."""
    row = cuda.blockIdx.x
    m = m_in[row]
    m = ZERO if m == NEG_INF else m
    l = l_in[row]
    inv_l = ZERO if l == ZERO else ONE / l          # an empty row: zeros
    for j in range(cuda.threadIdx.x, x.shape[1], cuda.blockDim.x):
        y[row, j] = math.exp(float32(x[row, j]) - m) * inv_l


# ---------------------------------------------------------------------------------------------
# §6–7: one warp per row, N ≤ 32, lane i holds x_i. Registers and shuffles only.
# ---------------------------------------------------------------------------------------------
@cuda.jit
def softmax_warp(x, y):
    n_rows, N = x.shape
    lane = cuda.threadIdx.x % WARP
    row = (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) // WARP
    mine = row < n_rows and lane < N
    v = float32(x[row, lane]) if mine else NEG_INF  # step 1: lane i holds x_i (−inf: no data)
    m = warp_max(v)                                 # step 2: §6 m = max_i x_i (tree, broadcast)
    m = ZERO if m == NEG_INF else m                 # §2: safe max
    e = math.exp(v - m) if mine else ZERO           # step 3: e^{x_i − m}
    l = warp_sum(e)                                 # step 4: §6 l = Σ_i e^{x_i − m}
    if mine:
        y[row, lane] = e * (ZERO if l == ZERO else ONE / l)   # step 5: p_i = e^{x_i − m} / l


# ---------------------------------------------------------------------------------------------
# §8: one warp per row for N > 32. Lane t holds x_t, x_{t+32}, x_{t+64}, … (K values) in
# registers from the load to the write: x is read once.
# ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def softmax_warp_multi(K):
    """The §8 kernel for rows of N ≤ 32·K (K compile-time: the registers a lane holds)."""

    @cuda.jit
    def warp_multi(x, y):
        n_rows, N = x.shape
        lane = cuda.threadIdx.x % WARP
        row = (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) // WARP
        v = cuda.local.array(K, float32)            # my K values of the row
        m = NEG_INF
        for k in range(K):
            j = lane + k * WARP                     # §8: lane t holds t, t+32, t+64, …
            v[k] = float32(x[row, j]) if row < n_rows and j < N else NEG_INF
            m = max(m, v[k])                        # my local max
        m = warp_max(m)                             # §6: m = max over the row
        m = ZERO if m == NEG_INF else m             # §2: safe max
        l = ZERO
        for k in range(K):
            v[k] = math.exp(v[k] - m)               # e^{x_j − m}, kept for the write
            l += v[k]
        l = warp_sum(l)                             # §6: l = Σ_j e^{x_j − m}
        inv_l = ZERO if l == ZERO else ONE / l
        for k in range(K):
            j = lane + k * WARP
            if row < n_rows and j < N:
                y[row, j] = v[k] * inv_l            # p_j = e^{x_j − m} / l

    return warp_multi


# ---------------------------------------------------------------------------------------------
# §9–10: one block per row (T threads). Thread t holds x_t, x_{t+T}, … (K values) in registers;
# the max and the sum go through §10's two-level reduction. x is read once. (§11: "registers".)
# ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def softmax_block(K):
    """The §9 kernel for rows of N ≤ K·T (T = threads per block, a multiple of 32).
    (At most 64 registers a thread: else a block of 1024 threads could not launch.)"""

    @cuda.jit(**gpu_options(max_registers=64))
    def block(x, y):
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        T = cuda.blockDim.x
        N = x.shape[1]
        scratch = cuda.shared.array(WARP, float32)  # one partial per warp (§10)
        v = cuda.local.array(K, float32)
        m = NEG_INF
        for k in range(K):
            j = tid + k * T                         # §9: thread t holds t, t+T, t+2T, …
            v[k] = float32(x[row, j]) if j < N else NEG_INF
            m = max(m, v[k])                        # thread-local max
        m = block_max(m, scratch)                   # §10: warp shuffle → shared → warp shuffle
        m = ZERO if m == NEG_INF else m             # §2: safe max
        l = ZERO
        for k in range(K):
            v[k] = math.exp(v[k] - m)               # e^{x_j − m}
            l += v[k]
        l = block_sum(l, scratch)                   # §10: l = Σ_j e^{x_j − m}
        inv_l = ZERO if l == ZERO else ONE / l
        for k in range(K):
            j = tid + k * T
            if j < N:
                y[row, j] = v[k] * inv_l            # p_j = e^{x_j − m} / l

    return block


# ---------------------------------------------------------------------------------------------
# §11, shared memory: the row is cached in dynamic shared memory (N floats, sized at launch).
# Each thread reads back only the elements it stored itself, so the cache needs no barrier of
# its own; the barriers are the reductions'.
# ---------------------------------------------------------------------------------------------
@cuda.jit
def softmax_block_smem(x, y):
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    T = cuda.blockDim.x
    N = x.shape[1]
    cache = cuda.shared.array(0, float32)           # the row: N floats (dynamic)
    scratch = cuda.shared.array(WARP, float32)
    m = NEG_INF
    for j in range(tid, N, T):
        cache[j] = float32(x[row, j])               # the only read of x
        m = max(m, cache[j])
    m = block_max(m, scratch)                       # §10
    m = ZERO if m == NEG_INF else m                 # §2: safe max
    l = ZERO
    for j in range(tid, N, T):
        cache[j] = math.exp(cache[j] - m)           # e^{x_j − m}, kept in shared memory
        l += cache[j]
    l = block_sum(l, scratch)                       # §10
    inv_l = ZERO if l == ZERO else ONE / l
    for j in range(tid, N, T):
        y[row, j] = cache[j] * inv_l                # p_j = e^{x_j − m} / l


# ---------------------------------------------------------------------------------------------
# §11, re-read: nothing kept; each pass reads the row from global memory again (any N).
# ---------------------------------------------------------------------------------------------
@cuda.jit
def softmax_block_reread(x, y):
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    T = cuda.blockDim.x
    N = x.shape[1]
    scratch = cuda.shared.array(WARP, float32)
    m = NEG_INF
    for j in range(tid, N, T):                      # read 1: m = max_j x_j
        m = max(m, float32(x[row, j]))
    m = block_max(m, scratch)                       # §10
    m = ZERO if m == NEG_INF else m                 # §2: safe max
    l = ZERO
    for j in range(tid, N, T):                      # read 2: l = Σ_j e^{x_j − m}
        l += math.exp(float32(x[row, j]) - m)
    l = block_sum(l, scratch)                       # §10
    inv_l = ZERO if l == ZERO else ONE / l
    for j in range(tid, N, T):                      # read 3: p_j = e^{x_j − m} / l
        y[row, j] = math.exp(float32(x[row, j]) - m) * inv_l


# ---------------------------------------------------------------------------------------------
# §18–20: online softmax. Each thread streams its elements once keeping (m, l) (§20); the
# threads' states are merged with §19 (warp, then block); a second read writes p.
# ---------------------------------------------------------------------------------------------
@cuda.jit
def softmax_online(x, y):
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    T = cuda.blockDim.x
    N = x.shape[1]
    scratch_m = cuda.shared.array(WARP, float32)
    scratch_l = cuda.shared.array(WARP, float32)
    m = NEG_INF                                     # §18: the empty state (m, l) = (−inf, 0)
    l = ZERO
    for j in range(tid, N, T):                      # read 1: one pass
        xj = float32(x[row, j])
        if xj != NEG_INF:                           # e^{−inf} = 0 adds nothing: skip
            new_m = max(m, xj)                      # §20: m' = max(m, x_j)
            correction = math.exp(m - new_m)        # e^{m − m'} (0 while m = −inf)
            l = correction * l + math.exp(xj - new_m)   # §20: l' = e^{m−m'}·l + e^{x_j−m'}
            m = new_m
    m, l = block_merge_ml(m, l, scratch_m, scratch_l)   # §19: l = e^{m_A−m}·l_A + e^{m_B−m}·l_B
    m = ZERO if m == NEG_INF else m                 # §2: safe max
    inv_l = ZERO if l == ZERO else ONE / l
    for j in range(tid, N, T):                      # read 2: p_j = e^{x_j − m} / l
        y[row, j] = math.exp(float32(x[row, j]) - m) * inv_l
