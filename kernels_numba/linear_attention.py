"""§45 — linear attention, O(N·d²): φ(x) = elu(x) + 1, O = φ(Q)(φ(K)ᵀV) / φ(Q)(φ(K)ᵀ1).

A different model from softmax attention (``reference/linear_attention.py`` says why and is the
oracle): no N × N matrix exists even on paper, because φ(K)ᵀV is d × dv. The trick that makes
the kernels short: append a column of ones to V, so that z = φ(K)ᵀ1 is just column d of
KV' = φ(K)ᵀ[V | 1] and the denominator φ(Q)·z is column d of φ(Q)·KV'.

Menu (launchers, validation and the defaults: ``flashlesson.linear_methods``)
| kernel                             | grid            | what                                  |
|------------------------------------|-----------------|---------------------------------------|
| ``linear_state_kernel(D,C,G,BN)``  | (splits, B·H)   | partial KV' of a split of the keys:   |
|                                    |                 | part[bh, s] = φ(K_s)ᵀ[V_s | 1]        |
| ``sum_partials``                   | grid-stride     | state[bh] = Σ_s part[bh, s] (split-K: |
|                                    |                 | a plain sum, no rescaling — §44)      |
| ``linear_out_kernel(D,C,G,BQ)``    | (q blocks, B·H) | O = φ(Q)·KV'[:, :d] / φ(Q)·KV'[:, d]  |
|                                    |                 | on Q tiles of BQ rows, grid-stride    |
| ``linear_causal_kernel(D,C,G,BN)`` | B·H             | causal: a block walks its sequence,   |
|                                    |                 | adds key i + Nk − Nq to the state,    |
|                                    |                 | then answers query i (prefix sums)    |
(blocks of C·G threads, except ``sum_partials``)
Their shared steps, device functions (inlined): ``phi_tile`` (a φ tile into shared memory),
``add_keys`` (KV' += φ(K)ᵀ[V | 1]), ``finish_rows`` (the groups' partials summed, num / den).

Thread layout (every kernel): thread t owns column c = t mod C of KV' (c < d: column c of V;
c = d: the ones column, z; c > d: idle columns, zero) and rows a = g + G·i (g = t div C,
i < D/G) — D/G values of KV' in registers. C is d + 1 rounded up to 32 (whole warps), D is d
rounded up to 8; rows a ≥ d of the φ tiles are zeros, so no inner loop needs a guard. A row of
φ(Q)·KV' is a sum over all D rows, split over the G groups: each group writes its partial
into shared memory (``red``) and, after a barrier, the sums are finished and divided (the
two-level reduction of §10, in shared memory).

Costs per (b, h): φ(K)ᵀ[V | 1] is Nk·D·C multiply-adds, φ(Q)·KV' Nq·D·C: O(N·d²) against
softmax attention's O(Nq·Nk·d). The causal kernel is one block per (b, h) walking its N
positions in order (tiles of BN, three barriers per tile): simple, exact, but at B·H ≪ the
number of SMs most of the GPU idles — the chunked form (per chunk: a local quadratic part plus
the prefix state of earlier chunks) is how fast implementations parallelize it; not here.

Limits: float32; d ≤ 128 (KV' is D/G registers per thread); N ≥ 1; inputs contiguous
[B·H, N, d]. The ones column makes every denominator ≥ the smallest φ(q)·φ(k) > 0, except
a causal query that sees no key (Nq > Nk), which gets O = 0.

How to run: ``pytest tests/test_linear_attention.py``; ``flashlesson section 45``.
"""

from functools import lru_cache

from numba import cuda, float32

from .jit import gpu_options, pure_device
from .reductions import ONE, ZERO, fast_exp


@pure_device
def elu1(x):
    """φ(x) = elu(x) + 1: x + 1 for x > 0, e^x otherwise (> 0 everywhere)."""
    return x + ONE if x > ZERO else fast_exp(x)


@cuda.jit
def sum_partials(part, state):
    """state[bh, e] = Σ_s part[bh, s, e]: the key splits' KV' added (any order would do)."""
    splits, width = part.shape[1], part.shape[2]
    for idx in range(cuda.grid(1), state.shape[0] * width, cuda.gridsize(1)):
        bh = idx // width
        e = idx - bh * width
        acc = ZERO
        for s in range(splits):
            acc += part[bh, s, e]
        state[bh, e] = acc


@lru_cache(maxsize=None)
def phi_tile(ROWS, D, T):
    """``load(x, bh, row0, end, d, dst, t)``: dst[r·D + a] = φ(x[bh, row0 + r, a]) for
    r < ROWS, a < D (zero where row0 + r ≥ end or a ≥ d), the T threads of the block in turn."""

    @pure_device
    def load(x, bh, row0, end, d, dst, t):
        for e in range(t, ROWS * D, T):
            r = e // D
            a = e - r * D
            dst[e] = elu1(x[bh, row0 + r, a]) if row0 + r < end and a < d else ZERO

    return load


@lru_cache(maxsize=None)
def add_keys(D, G, R):
    """``add(s, phik, v, bh, j0, n, g, c, d)``: my rows of KV' += φ(k_j)ᵀ [v_j | 1] for the
    first n keys of the φ(K) tile (keys j0 …); column c of [v_j | 1] is V's column c, the ones
    column (c = d: z), or 0 (an idle column)."""

    @pure_device
    def add(s, phik, v, bh, j0, n, g, c, d):
        for r in range(n):
            vc = v[bh, j0 + r, c] if c < d else (ONE if c == d else ZERO)
            for i in range(R):
                s[i] += phik[r * D + g + G * i] * vc     # KV'[a, c] += φ(k_j)[a] · v'_j[c]

    return add


@lru_cache(maxsize=None)
def finish_rows(ROWS, C, G, T):
    """``finish(red, o, bh, q0, nq, d, t)``: o[bh, q0 + r, cc] = Σ_g red[g][r][cc] / Σ_g
    red[g][r][d] (num = φ(q_i)·KV[:, cc], den = φ(q_i)·z), the groups' partials summed — the
    second level of the reduction; rows past nq and idle columns are skipped."""

    @pure_device
    def finish(red, o, bh, q0, nq, d, t):
        for e in range(t, ROWS * C, T):
            r = e // C
            cc = e - r * C
            if cc < d and q0 + r < nq:
                num = ZERO
                den = ZERO
                for gg in range(G):
                    num += red[(gg * ROWS + r) * C + cc]     # φ(q_i)·KV[:, cc]
                    den += red[(gg * ROWS + r) * C + d]      # φ(q_i)·z
                o[bh, q0 + r, cc] = num / den

    return finish


def regs_cap(T):
    """Registers per thread that let a block of T threads launch (65536 per SM; a multiple of
    8). Without the cap, d = 128 (C·G = 640 threads) compiled to more registers than an SM has
    and the launch failed with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES on the H200."""
    return min(255, 65536 // T // 8 * 8)


@lru_cache(maxsize=None)
def linear_state_kernel(D, C, G, BN):
    """part[bh, s, a·C + c] = Σ_{j in split s} φ(k_j)[a] · [v_j | 1][c]; keys of split s:
    s·per … min((s+1)·per, Nk) − 1. Grid (splits, B·H), C·G threads."""
    R = D // G                   # rows of KV' per thread
    T = C * G
    BN_D = BN * D                # shared sizes: named constants (Numba needs literals)
    load_phi = phi_tile(BN, D, T)
    add = add_keys(D, G, R)

    @cuda.jit(**gpu_options(max_registers=regs_cap(T)))
    def state(k, v, part, d, nk, per):
        bh = cuda.blockIdx.y
        t = cuda.threadIdx.x
        g = t // C
        c = t - g * C
        phik = cuda.shared.array(BN_D, float32)    # φ(K) tile [BN][D], rows ≥ d zero
        s = cuda.local.array(R, float32)              # KV'[g + G·i, c], i < R
        for i in range(R):
            s[i] = ZERO
        lo = cuda.blockIdx.x * per
        hi = min(lo + per, nk)
        for j0 in range(lo, hi, BN):
            load_phi(k, bh, j0, hi, d, phik, t)      # φ(K) tile, zeros past hi and past d
            cuda.syncthreads()                       # wait: the φ(K) tile is in shared memory
            add(s, phik, v, bh, j0, min(BN, hi - j0), g, c, d)  # KV' += φ(K_tile)ᵀ [V_tile | 1]
            cuda.syncthreads()                       # wait: all are done with the tile before
        for i in range(R):                           # it is overwritten
            part[bh, cuda.blockIdx.x, (g + G * i) * C + c] = s[i]

    return state


@lru_cache(maxsize=None)
def linear_out_kernel(D, C, G, BQ):
    """o[bh, i] = φ(q_i)·KV'[:, :d] / φ(q_i)·KV'[:, d] from state [B·H, D·C]. Grid (q blocks,
    B·H), C·G threads; block x handles Q tiles x, x + gridDim.x, …"""
    R = D // G
    T = C * G
    BQ_D, G_BQ_C = BQ * D, G * BQ * C   # shared sizes: named constants (Numba needs literals)
    load_phi = phi_tile(BQ, D, T)
    finish = finish_rows(BQ, C, G, T)

    @cuda.jit(**gpu_options(max_registers=regs_cap(T)))
    def out(q, state, o, d, nq):
        bh = cuda.blockIdx.y
        t = cuda.threadIdx.x
        g = t // C
        c = t - g * C
        phiq = cuda.shared.array(BQ_D, float32)    # φ(Q) tile [BQ][D]
        red = cuda.shared.array(G_BQ_C, float32)  # [G][BQ][C]: each group's partial sums
        s = cuda.local.array(R, float32)
        for i in range(R):
            s[i] = state[bh, (g + G * i) * C + c]    # this thread's rows of KV', read once
        for q0 in range(cuda.blockIdx.x * BQ, nq, cuda.gridDim.x * BQ):
            load_phi(q, bh, q0, nq, d, phiq, t)      # φ(Q) tile, zeros past nq and past d
            cuda.syncthreads()                       # wait: the φ(Q) tile is in shared memory
            for r in range(BQ):
                x = ZERO
                for i in range(R):
                    x += phiq[r * D + g + G * i] * s[i]      # Σ over this group's rows a
                red[(g * BQ + r) * C + c] = x
            cuda.syncthreads()                       # wait: every group's partials are in red
            finish(red, o, bh, q0, nq, d, t)         # O = num / den, the groups' partials summed
            cuda.syncthreads()                       # wait: phiq and red are free again

    return out


@lru_cache(maxsize=None)
def linear_causal_kernel(D, C, G, BN):
    """Causal: query i sees keys j ≤ i + Nk − Nq. One block per (b, h) (grid B·H), C·G
    threads: first the keys every query sees (Nk > Nq), zeros for the queries that see none
    (Nq > Nk), then query i and key i + Nk − Nq in lockstep, BN of them per tile."""
    R = D // G
    T = C * G
    BN_D, G_BN_C = BN * D, G * BN * C   # shared sizes: named constants (Numba needs literals)
    load_phi = phi_tile(BN, D, T)
    add = add_keys(D, G, R)
    finish = finish_rows(BN, C, G, T)

    @cuda.jit(**gpu_options(max_registers=regs_cap(T)))
    def causal(q, k, v, o, d, nq, nk):
        bh = cuda.blockIdx.x
        t = cuda.threadIdx.x
        g = t // C
        c = t - g * C
        off = nk - nq                                # query i sees keys j ≤ i + off
        phik = cuda.shared.array(BN_D, float32)
        phiq = cuda.shared.array(BN_D, float32)
        red = cuda.shared.array(G_BN_C, float32)
        s = cuda.local.array(R, float32)
        for i in range(R):
            s[i] = ZERO
        pre = max(off, 0)                            # keys 0 … off − 1: seen by every query
        for j0 in range(0, pre, BN):
            load_phi(k, bh, j0, pre, d, phik, t)
            cuda.syncthreads()                       # wait: the φ(K) tile is in shared memory
            add(s, phik, v, bh, j0, min(BN, pre - j0), g, c, d)
            cuda.syncthreads()                       # wait: done with the tile
        first = max(-off, 0)                         # queries 0 … first − 1 see no key: O = 0
        for e in range(t, first * d, T):
            o[bh, e // d, e - (e // d) * d] = ZERO
        for i0 in range(first, nq, BN):
            for e in range(t, BN * D, T):
                r = e // D
                a = e - r * D
                inside = i0 + r < nq and a < d
                phik[e] = elu1(k[bh, i0 + r + off, a]) if inside else ZERO
                phiq[e] = elu1(q[bh, i0 + r, a]) if inside else ZERO
            cuda.syncthreads()                       # wait: φ(K) and φ(Q) tiles are loaded
            for r in range(BN):
                vc = v[bh, i0 + r + off, c] if c < d and i0 + r < nq else \
                    (ONE if c == d else ZERO)
                x = ZERO
                for i in range(R):
                    s[i] += phik[r * D + g + G * i] * vc     # add key i + off to the state
                    x += phiq[r * D + g + G * i] * s[i]      # then answer query i from it
                red[(g * BN + r) * C + c] = x
            cuda.syncthreads()                       # wait: every group's partials are in red
            finish(red, o, bh, i0, nq, d, t)
            cuda.syncthreads()                       # wait: the tiles and red are free again

    return causal
