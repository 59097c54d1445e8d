"""Softmax kernels, lesson §1–§11 and §18–§20: one kernel (or kernel family) per method.

The fast tier. Read ``kernels_numba/lesson/softmax.py`` first (the same ideas, plain).

Ladder (lesson tier to fast tier): from the lesson kernel to this file, step by step, at [65536,
1024] float32 unless a step says otherwise; GB/s = one read + one write of x / time; kernel-only
CUDA-event medians; "× lesson" = the lesson kernel's time / the step's on the same inputs.
``flashlesson bench ladder --only softmax`` checks and times every step with a timed call,
``--write`` puts its numbers here; a step without one is historical (no longer separable in the
code) and keeps the GB/s recorded then.
| step | what changed                                 | measured                     | timed call                     |
|------|----------------------------------------------|------------------------------|--------------------------------|
| 0    | the lesson kernel of §8 (what ``auto`` runs  | H200, 2026-12-01: 0.153 ms,  | method='warp_multi',           |
|      | at N = 1024): ``softmax_warp_multi(32)``, a  | 3508 GB/s (84% of copy)      | tier='lesson'                  |
|      | warp a row, ``math.exp``, ``%``/``//``       |                              |                                |
|      | indices                                      |                              |                                |
| 1    | the project's first fast version (per-method | historical: H200,            | (no script left;               |
|      | launch shapes)                               | 2026-11-30: N = 1024: 3300   | docs/results.md)               |
|      |                                              | GB/s fp32, 1685 GB/s fp16    |                                |
| 2    | ``fast_exp`` (``__expf``) instead of the     | H200, 2026-12-01: 0.133 ms,  | method='warp_multi'            |
|      | rounded expf, lane indices as masks (``tid & | 4047 GB/s (97% of copy),     |                                |
|      | 31``), the row's max and sum by butterfly    | 1.15× lesson                 |                                |
|      | (``lanes_max``): ``warp_multi_kernel(32, 1,  |                              |                                |
|      | 32)``, at N = 1024 the lesson's layout (G =  |                              |                                |
|      | 32 lanes a row, K = 32 values a lane), so    |                              |                                |
|      | the gain is these changes alone (before:     |                              |                                |
|      | "together these halved the instructions per  |                              |                                |
|      | element", docs/results.md)                   |                              |                                |
| 3    | §8 with G < 32 lanes a row below N = 256     | H200, 2026-12-01: 0.13 ms,   | method='warp_multi'            |
|      | (8–16 values a lane, 4–8 loads in flight), R | 4120 GB/s (99% of copy),     |                                |
|      | rounds of rows for fp16:                     | 1.34× lesson                 |                                |
|      | ``warp_multi_shape`` gives G = 16 at N = 128 |                              |                                |
|      | (before: N = 32, ``warp_multi`` 4175 GB/s vs |                              |                                |
|      | the one-per-lane §6 ``warp`` 1675,           |                              |                                |
|      | 2026-11-30) (at [524288, 128])               |                              |                                |
| 4    | §9 blocks of 128–512 threads, 16 (fp32) / 32 | H200, 2026-12-01: 0.133 ms,  | method='block'                 |
|      | (fp16) values a thread (``block_shape``):    | 4024 GB/s (97% of copy),     |                                |
|      | ``block_kernel(16, 256)`` at N = 4096,       | 1.33× lesson (step 0b)       |                                |
|      | against the lesson's ``softmax_block(16)``   |                              |                                |
|      | (before, after steps 1–4: N = 1024 4072 GB/s |                              |                                |
|      | fp32, 97% of copy; N = 4096 ``block`` 4048,  |                              |                                |
|      | 2026-11-30) (at [16384, 4096])               |                              |                                |
| 0b   | (the lesson kernel of step 4: §9's           | H200, 2026-12-01: 0.177 ms,  | method='block', tier='lesson'  |
|      | ``softmax_block(K)``, K = ⌈N/T⌉) (at [16384, | 3033 GB/s (73% of copy)      |                                |
|      | 4096])                                       |                              |                                |
(§11's ranking, H200 2026-11-30, fp32 N = 4096, ``docs/bench_softmax_h200.json``, GB/s of ideal
traffic, copy = 4199: registers 4047, shared memory 1618, re-read 1393, online 1524, three passes
1038 GB/s.)

Every kernel computes softmax over the last axis of ``x`` [rows, N] into ``y`` [rows, N]
(float32 or float16 arrays; arithmetic is float32 throughout). Shared reductions come from
``reductions.py`` (§6, §10, §19); nothing is re-implemented here.

Menu (launchers, limits and the ``auto`` choice live in ``flashlesson.softmax_methods``)
| kernel                         | §      | grid / block                      | global traffic per row   | N      |
|--------------------------------|--------|-----------------------------------|--------------------------|--------|
| ``softmax_naive``              | 1      | a block per row                   | 2 reads + 1 write        | any    |
| ``row_max`` → ``row_sum_exp``  | 3      | three launches, a block per row,  | 3 reads + 1 write, plus  | any    |
|   → ``normalize``              |        | m and l kept in global memory     | m, l written and re-read |        |
| ``softmax_warp``               | 6–7    | a warp per row, lane i holds x_i  | 1 read + 1 write         | ≤ 32   |
| ``warp_multi_kernel(K, R, G)`` | 8      | G lanes per row (32: the lesson), | 1 read + 1 write         | ≤ G·K  |
|                                |        | lane t holds t, t+G, … (K each);  |                          |        |
|                                |        | (32/G)·R rows per warp            |                          |        |
| ``block_kernel(K, T)``         | 9–10   | a block per row, thread t holds   | 1 read + 1 write         | ≤ K·T  |
|                                |        | t, t+T, … (K each) in registers   |                          |        |
| ``softmax_block_smem``         | 9–11   | a block per row, row in shared    | 1 read + 1 write         | ≤ smem |
|                                |        | memory (dynamic, N·4 bytes)       |                          |        |
| ``softmax_block_reread``       | 11     | a block per row, re-reads x       | 3 reads + 1 write        | any    |
| ``softmax_online``             | 18–20  | a block per row, (m, l) streamed  | 2 reads + 1 write        | any    |
|                                |        | per thread, merged by §19         |                          |        |
(T = threads per block, a multiple of 32; K, R, G are compile-time constants of the kernel.)
e^x is ``fast_exp`` (``__expf``, see reductions.py). Lane and group indices are written with
masks and shifts (``tid & 31`` rather than ``tid % 32``): the compiler then knows they are ≥ 0
and drops Python's negative-index wraparound from every load, about half the instructions of
the short-row kernels.

Semantics shared by all but ``naive``: the max is subtracted first (§2), so 1000, 999, 998
give the exact finite answer; a row of all −inf gives zeros (``safe_max``/``safe_reciprocal``);
a NaN anywhere in a row makes the whole row NaN (it reaches l through e^{NaN}).

How to run: ``flashlesson section 8`` (or ``python examples/s08_warp_multi.py``) on a GPU or,
without one, in Numba's CUDA simulator; ``pytest tests/test_softmax.py``.
"""

from functools import lru_cache

from numba import cuda, float32

from .jit import gpu_options

from .reductions import (
    NEG_INF,
    WARP,
    ZERO,
    block_max,
    block_merge_ml,
    block_sum,
    fast_exp,
    safe_max,
    safe_reciprocal,
    warp_max,
    lanes_max,
    lanes_sum,
    warp_sum,
)


# ---------------------------------------------------------------------------------------------
# §1: the naive formula, e^x / Σ e^x, without subtracting the max. Overflows on purpose.
# ---------------------------------------------------------------------------------------------
@cuda.jit
def softmax_naive(x, y):
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    T = cuda.blockDim.x
    N = x.shape[1]
    scratch = cuda.shared.array(WARP, float32)
    l = ZERO
    for j in range(tid, N, T):
        l += fast_exp(float32(x[row, j]))           # §1: e^{1000} = inf in float32
    l = block_sum(l, scratch)                       # Σ_j e^{x_j}  (inf if any term overflowed)
    for j in range(tid, N, T):
        y[row, j] = fast_exp(float32(x[row, j])) / l   # inf / inf = NaN: the failure of §1


# ---------------------------------------------------------------------------------------------
# §3: three passes, three launches. m and l go through global memory between them.
# ---------------------------------------------------------------------------------------------
@cuda.jit
def row_max(x, m_out):
    """§3 pass 1: m = max_j x_j."""
    row = cuda.blockIdx.x
    scratch = cuda.shared.array(WARP, float32)
    m = NEG_INF
    for j in range(cuda.threadIdx.x, x.shape[1], cuda.blockDim.x):
        m = max(m, float32(x[row, j]))
    m = block_max(m, scratch)
    if cuda.threadIdx.x == 0:
        m_out[row] = m


@cuda.jit
def row_sum_exp(x, m_in, l_out):
    """§3 pass 2: l = Σ_j e^{x_j − m} (reads x again)."""
    row = cuda.blockIdx.x
    scratch = cuda.shared.array(WARP, float32)
    m = safe_max(m_in[row])
    l = ZERO
    for j in range(cuda.threadIdx.x, x.shape[1], cuda.blockDim.x):
        l += fast_exp(float32(x[row, j]) - m)
    l = block_sum(l, scratch)
    if cuda.threadIdx.x == 0:
        l_out[row] = l


@cuda.jit
def normalize(x, m_in, l_in, y):
    """§3 pass 3: p_j = e^{x_j − m} / l (reads x a third time, writes y)."""
    row = cuda.blockIdx.x
    m = safe_max(m_in[row])
    inv_l = safe_reciprocal(l_in[row])
    for j in range(cuda.threadIdx.x, x.shape[1], cuda.blockDim.x):
        y[row, j] = fast_exp(float32(x[row, j]) - m) * inv_l


# ---------------------------------------------------------------------------------------------
# §6–7: one warp per row, N ≤ 32, one element per lane, registers only (no shared memory,
# no barrier).
# ---------------------------------------------------------------------------------------------
@cuda.jit
def softmax_warp(x, y):
    n_rows, N = x.shape
    lane = cuda.threadIdx.x & (WARP - 1)            # threadIdx.x % 32, known ≥ 0
    row = (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) >> 5   # // 32
    mine = row < n_rows and lane < N                # lanes past N (or past the last row) hold −inf
    v = float32(x[row, lane]) if mine else NEG_INF  # step 1: lane i holds x_i
    m = warp_max(v)                                 # step 2: shfl_down tree, broadcast from lane 0
    e = fast_exp(v - safe_max(m)) if mine else ZERO  # step 3: e^{x_i − m}
    l = warp_sum(e)                                 # step 4: Σ e^{x_j − m}, same tree
    if mine:
        y[row, lane] = e * safe_reciprocal(l)       # step 5: p_i = e^{x_i − m} / l


# ---------------------------------------------------------------------------------------------
# §8: one warp per row for N > 32. Lane t holds x_t, x_{t+32}, x_{t+64}, … (K values), kept
# in registers between the max, the sum and the write: x is read once.
# Two knobs beyond the lesson, both for short rows, where one 4-byte load per lane cannot keep
# enough bytes in flight to fill HBM:
#   G lanes per row (G = 32 is the lesson's layout): with G < 32 a warp holds 32/G rows side by
#     side, lane t of a group holds x_t, x_{t+G}, …, and the butterfly stops at offset G/2;
#   R rounds of rows per warp: all R·K loads of a lane are issued before any arithmetic.
# ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def warp_multi_kernel(K, R=1, G=WARP):
    """The §8 kernel: rows of N ≤ G·K elements; a warp does (32/G)·R rows (compile-time)."""
    ROWS_PER_ROUND = WARP // G

    @cuda.jit
    def softmax_warp_multi(x, y):
        n_rows, N = x.shape
        lane = cuda.threadIdx.x & (WARP - 1)        # threadIdx.x % 32, known ≥ 0
        t = lane & (G - 1)                          # lane % G: my place in my row's lane group
        warp = (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) >> 5   # // 32
        first_row = warp * R * ROWS_PER_ROUND + lane // G
        v = cuda.local.array((R, K), float32)       # the rows' values, in registers when unrolled
        for r in range(R):                          # load everything first: R·K loads in flight
            row = first_row + r * ROWS_PER_ROUND
            for k in range(K):
                j = t + k * G                       # coalesced: a group reads G neighbours
                v[r, k] = float32(x[row, j]) if row < n_rows and j < N else NEG_INF
        for r in range(R):
            m = NEG_INF
            for k in range(K):
                m = max(m, v[r, k])                 # local max over this lane's K values
            m = safe_max(lanes_max(m, G))           # m = max over the row (butterfly in the group)
            l = ZERO
            for k in range(K):
                v[r, k] = fast_exp(v[r, k] - m)     # e^{x_j − m}, kept for the write
                l += v[r, k]
            inv_l = safe_reciprocal(lanes_sum(l, G))  # 1 / Σ_j e^{x_j − m}
            row = first_row + r * ROWS_PER_ROUND
            for k in range(K):
                j = t + k * G
                if row < n_rows and j < N:
                    y[row, j] = v[r, k] * inv_l

    return softmax_warp_multi


# ---------------------------------------------------------------------------------------------
# §9–10: one block per row. Thread t holds x_t, x_{t+T}, … (K values) in registers; the max
# and the sum go through the two-level reduction of §10. x is read once.
# ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def block_kernel(K, T):
    """The §9 kernel for rows of N ≤ K·T elements: launch it with T threads per block.

    K and T are compile-time constants (T a power of 2): j = tid + k·T then has constant
    strides, and ``tid & (T - 1)`` (= tid) tells the compiler j ≥ 0. At most 64 registers per
    thread, so that a block of 1024 threads can launch (65536 registers per SM); K = 32 values
    per thread still fit.
    """

    @cuda.jit(**gpu_options(max_registers=64))
    def softmax_block(x, y):
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x & (T - 1)            # = threadIdx.x (blockDim.x == T), known ≥ 0
        N = x.shape[1]
        scratch = cuda.shared.array(WARP, float32)
        v = cuda.local.array(K, float32)
        m = NEG_INF
        for k in range(K):
            j = tid + k * T                         # coalesced across the block
            v[k] = float32(x[row, j]) if j < N else NEG_INF
            m = max(m, v[k])                        # thread-local max
        m = safe_max(block_max(m, scratch))         # §10: warp shuffle → shared → warp shuffle
        l = ZERO
        for k in range(K):
            v[k] = fast_exp(v[k] - m)
            l += v[k]
        inv_l = safe_reciprocal(block_sum(l, scratch))
        for k in range(K):
            j = tid + k * T
            if j < N:
                y[row, j] = v[k] * inv_l

    return softmax_block


# ---------------------------------------------------------------------------------------------
# §9–11: one block per row, the row cached in shared memory. Its size is known only at launch,
# so it is dynamic shared memory (N·4 bytes, at most 48 KB without opting in). Each thread
# touches only the elements it loaded itself, so no barrier is needed around the cache: the
# barriers are the reductions' own.
# ---------------------------------------------------------------------------------------------
@cuda.jit
def softmax_block_smem(x, y):
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    T = cuda.blockDim.x
    N = x.shape[1]
    cache = cuda.shared.array(0, float32)           # dynamic: N float32, sized by the launch
    scratch = cuda.shared.array(WARP, float32)
    m = NEG_INF
    for j in range(tid, N, T):
        cache[j] = float32(x[row, j])               # the only read of x
        m = max(m, cache[j])
    m = safe_max(block_max(m, scratch))
    l = ZERO
    for j in range(tid, N, T):
        cache[j] = fast_exp(cache[j] - m)
        l += cache[j]
    inv_l = safe_reciprocal(block_sum(l, scratch))
    for j in range(tid, N, T):
        y[row, j] = cache[j] * inv_l


# ---------------------------------------------------------------------------------------------
# §11: one block per row, any N, nothing cached: the row is read from global memory in each of
# the three passes (the lesson's "re-read" option; later passes may hit in L2).
# ---------------------------------------------------------------------------------------------
@cuda.jit
def softmax_block_reread(x, y):
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    T = cuda.blockDim.x
    N = x.shape[1]
    scratch = cuda.shared.array(WARP, float32)
    m = NEG_INF
    for j in range(tid, N, T):                      # read 1: max
        m = max(m, float32(x[row, j]))
    m = safe_max(block_max(m, scratch))
    l = ZERO
    for j in range(tid, N, T):                      # read 2: Σ e^{x_j − m}
        l += fast_exp(float32(x[row, j]) - m)
    inv_l = safe_reciprocal(block_sum(l, scratch))
    for j in range(tid, N, T):                      # read 3: normalize and write
        y[row, j] = fast_exp(float32(x[row, j]) - m) * inv_l


# ---------------------------------------------------------------------------------------------
# §18–20: online softmax. Each thread streams its elements once, keeping (m, l) with the
# element-wise update of §20; the per-thread states are merged with §19 (warp, then block);
# a second read normalizes. 2 reads instead of 3, any N, nothing cached.
# ---------------------------------------------------------------------------------------------
@cuda.jit
def softmax_online(x, y):
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    T = cuda.blockDim.x
    N = x.shape[1]
    scratch_m = cuda.shared.array(WARP, float32)
    scratch_l = cuda.shared.array(WARP, float32)
    m = NEG_INF
    l = ZERO
    for j in range(tid, N, T):
        xj = float32(x[row, j])
        if xj != NEG_INF:                           # a −inf element adds e^{−inf} = 0: skip it
            new_m = max(m, xj)                      # §20: m_{k+1} = max(m_k, x_{k+1})
            correction = fast_exp(m - new_m)        # e^{m_k − m_{k+1}} (0 for the first element)
            l = l * correction + fast_exp(xj - new_m)  # §20: l_{k+1} = e^{m_k−m_{k+1}} l_k + e^{x−m_{k+1}}
            m = new_m                               # (a NaN x makes l NaN, and l keeps it)
    m, l = block_merge_ml(m, l, scratch_m, scratch_l)   # §19 across lanes, then warps
    m = safe_max(m)
    inv_l = safe_reciprocal(l)
    for j in range(tid, N, T):                      # read 2: normalize and write
        y[row, j] = fast_exp(float32(x[row, j]) - m) * inv_l
