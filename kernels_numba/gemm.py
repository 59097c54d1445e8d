"""Batched matrix products for naive attention (lesson §14) and the GEMM of §44.

Menu
| kernel                               | what                                                       |
|--------------------------------------|------------------------------------------------------------|
| ``matmul_kernel(TRANS_B, CAUSAL,     | C[z] = scale · op(A[z]) @ op(B[z]), op = ᵀ where TRANS_A / |
|   TRANS_A=False, SKIP_ZERO_A=False)``| TRANS_B; CAUSAL: C_ij = −inf where j > i + offset (§34's   |
|                                      | mask, bottom-right aligned, by select); SKIP_ZERO_A: terms |
|                                      | with A = 0 skipped (masked keys add nothing, even NaN/inf) |

§14's naive attention is three launches over global memory: S = QKᵀ·scale with this kernel
(TRANS_B, CAUSAL as asked), P = softmax(S) with the softmax kernels (``softmax.py``, reused),
O = PV with this kernel again. S and P are [B·H, Nq, Nk] arrays in HBM: the traffic and memory
FlashAttention removes. §31's naive backward uses it five times (``attention_backward.py``),
TRANS_A for dV = (P∘Z)ᵀ dO and dK = dSᵀ Q · scale.

Tiling (the classic shared-memory GEMM): a block computes a BM × BN tile of C with TY·TX
threads; thread (ty, tx) owns rows ty + TY·i and columns tx + TX·j (i < BM/TY, j < BN/TX); the
K dimension goes by BK = 16 through shared memory. Defaults: 64 × 64 tiles, 16 × 16 threads
(4 × 4 outputs each); the simulator uses 16 × 16 tiles and 8 × 8 threads. Tiles are stored [row][k] with a padded stride (BK + 1) so that
threads reading different rows at the same k hit different banks. Any M, N, K (guards at the
edges). float32 in and out.

How to run: ``pytest tests/test_attention.py -k naive``; ``flashlesson section 14``.
"""

from functools import lru_cache

from numba import cuda, float32

from .reductions import NEG_INF, ZERO

BK = 16
KS = BK + 1             # padded stride of the shared tiles


@lru_cache(maxsize=None)
def matmul_kernel(TRANS_B, CAUSAL, BM=64, BN=64, TY=16, TX=16, TRANS_A=False, SKIP_ZERO_A=False):
    """C = scale · op(A) @ op(B): a [Z, M, K] or, TRANS_A, [Z, K, M]; b [Z, K, N] or, TRANS_B,
    [Z, N, K]; c [Z, M, N]. Launch with grid (ceil(N/BN), ceil(M/BM), Z) and TY·TX threads.
    SKIP_ZERO_A (O = P V and dQ = dS K under a mask): a term with A = 0 is skipped, so a masked
    key (P = 0, dS = 0) adds nothing even if its row of B holds NaN/inf (0 · NaN = NaN)."""
    TM = BM // TY           # rows per thread
    TN = BN // TX           # columns per thread
    A_SIZE = BM * KS        # shared array sizes must be plain constants for Numba
    B_SIZE = BN * KS

    @cuda.jit
    def matmul(a, b, c, scale, offset):
        z = cuda.blockIdx.z
        m0 = cuda.blockIdx.y * BM
        n0 = cuda.blockIdx.x * BN
        tid = cuda.threadIdx.x
        ty = tid // TX
        tx = tid & (TX - 1)
        M = c.shape[1]
        K = a.shape[1] if TRANS_A else a.shape[2]
        N = c.shape[2]
        As = cuda.shared.array(A_SIZE, float32)     # A tile, [BM][BK] padded
        Bs = cuda.shared.array(B_SIZE, float32)     # op(B) tile as [BN][BK] padded
        acc = cuda.local.array((TM, TN), float32)
        av = cuda.local.array(TM, float32)
        bv = cuda.local.array(TN, float32)
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = ZERO
        for k0 in range(0, K, BK):
            for e in range(tid, BM * BK, TY * TX):  # op(A)[m0:m0+BM, k0:k0+BK]
                if TRANS_A:
                    kk = e // BM                    # a is [K, M]: read along m (coalesced)
                    r = e - kk * BM
                    ok = m0 + r < M and k0 + kk < K
                    As[r * KS + kk] = a[z, k0 + kk, m0 + r] if ok else ZERO
                else:
                    r = e // BK
                    kk = e - r * BK
                    ok = m0 + r < M and k0 + kk < K
                    As[r * KS + kk] = a[z, m0 + r, k0 + kk] if ok else ZERO
            for e in range(tid, BN * BK, TY * TX):  # op(B)[k0:k0+BK, n0:n0+BN], stored by column
                if TRANS_B:
                    col = e // BK                   # b is [N, K]: read along k (coalesced)
                    kk = e - col * BK
                    ok = n0 + col < N and k0 + kk < K
                    Bs[col * KS + kk] = b[z, n0 + col, k0 + kk] if ok else ZERO
                else:
                    kk = e // BN                    # b is [K, N]: read along n (coalesced)
                    col = e - kk * BN
                    ok = n0 + col < N and k0 + kk < K
                    Bs[col * KS + kk] = b[z, k0 + kk, n0 + col] if ok else ZERO
            cuda.syncthreads()                      # wait: both tiles are in shared memory
            for kk in range(BK):
                for i in range(TM):
                    av[i] = As[(ty + TY * i) * KS + kk]
                for j in range(TN):
                    bv[j] = Bs[(tx + TX * j) * KS + kk]
                for i in range(TM):
                    if not SKIP_ZERO_A or av[i] != ZERO:    # (compile-time off by default)
                        for j in range(TN):
                            acc[i, j] += av[i] * bv[j]
            cuda.syncthreads()                      # wait: everyone is done with these tiles
        for i in range(TM):
            row = m0 + ty + TY * i
            for j in range(TN):
                col = n0 + tx + TX * j
                if row < M and col < N:
                    if CAUSAL and col > row + offset:
                        c[z, row, col] = NEG_INF    # §34: key j is after query i
                    else:
                        c[z, row, col] = acc[i, j] * scale

    return matmul
