"""Loop order and overlap, the lesson tier (§41 FlashAttention-1's loop order, §42 double
buffering, §43 producer/consumer warps): three plain kernels beside ``attention.py``'s §32 one.

Read ``lesson/attention.py`` first: §32's pseudocode is already FlashAttention-2's order (Q tile
outside, K/V tiles streamed, O written once). The fast tier of these three ideas is
``kernels_numba/attention_fa1.py`` and ``attention_db.py`` (2-D thread layout, transposed tiles,
16-byte loads, registers as the staging buffer, padding and dropout).

Menu
| kernel                                     | §  | what                                        |
|--------------------------------------------|----|---------------------------------------------|
| ``flash_fa1(D, Br, Bc, CAUSAL)``           | 41 | FlashAttention-1's order (Dao et al. 2022,   |
|                                            |    | Algorithm 1), not the lesson's (§32 is FA2's): |
|                                            |    | one block per (batch·head); K/V tile outside, |
|                                            |    | every Q tile inside; O, m, l read from HBM and |
|                                            |    | written back for every K/V tile              |
| ``flash_double_buffer(D, Br, Bc, CAUSAL)`` | 42 | §32's loop with two K/V buffers: tile j+1's  |
|                                            |    | loads issued before tile j's products, one   |
|                                            |    | barrier a tile                               |
| ``flash_producer_consumer(D, Br, Bc, P,    | 43 | the same two buffers; P extra warps only     |
|   CAUSAL)``                                |    | load, the Br row threads only compute;       |
|                                            |    | ``cuda.syncthreads()`` is the only signal    |

Shared by all three: Br query rows, one thread a row (thread i owns row q0 + i of a Q tile);
Bc keys a K/V tile (any Bc ≥ 1); D = the head dimension (compile-time). Inputs q [BH, Nq, D],
k, v [BH, Nk, D] float32; outputs o [BH, Nq, D] and lse [BH, Nq] (natural log; −inf and O = 0
for a row that sees no key). CAUSAL is bottom-right: query row sees key iff key ≤ row + Nk − Nq.
A masked key contributes nothing even if its K/V row holds NaN: S is masked by select and a
P = 0 term is skipped. One compile-time flag a kernel (CAUSAL); no padding, no dropout (those
are §35–36, in ``attention.py``; the fast kernels here take them too).

How to run: ``flashlesson section 41`` (42, 43): this kernel, then the fast one, both against
the oracle; ``pytest tests/test_loop_order.py -k lesson``.
"""

import math
from functools import lru_cache

from numba import cuda, float32

from ..reductions import NEG_INF, ONE, ZERO
from .attention import online_softmax


@lru_cache(maxsize=None)
def flash_fa1(D, Br, Bc, CAUSAL=False):
    """§41, Algorithm 1 of FlashAttention (line numbers as in the paper beside the code): grid
    (B·H,), Br threads. m and l are [BH, Nq] float32 arrays in global memory (HBM), as there."""

    @cuda.jit
    def fa1(q, k, v, o, m_hbm, l_hbm, lse, scale):
        bh = cuda.blockIdx.x                        # one block per (batch, head)
        i = cuda.threadIdx.x                        # my row inside every Q tile
        n_q = q.shape[1]
        n_k = k.shape[1]
        offset = n_k - n_q                          # §34: row sees key iff key ≤ row + offset
        Kj = cuda.shared.array((Bc, D), float32)
        Vj = cuda.shared.array((Bc, D), float32)
        Qi = cuda.local.array(D, float32)           # my row of Qi, · scale
        Oi = cuda.local.array(D, float32)           # my row of Oi
        S = cuda.local.array(Bc, float32)           # my row of S, then of P̃
        for row in range(i, n_q, Br):               # 2: O = 0, l = 0, m = −inf in HBM
            for c in range(D):
                o[bh, row, c] = ZERO
            m_hbm[bh, row] = NEG_INF
            l_hbm[bh, row] = ZERO

        n_tiles = (n_k + Bc - 1) // Bc
        if CAUSAL:                                  # §34: no row sees a key past its last one
            n_tiles = min(n_tiles, (n_q - 1 + offset) // Bc + 1) if n_q - 1 + offset >= 0 else 0
        for j in range(n_tiles):                    # 5: for each K/V tile (outer loop)
            k0 = j * Bc
            cuda.syncthreads()                      # wait: everyone is done with the last Kj, Vj
            for e in range(i, Bc * D, Br):          # 6: Kj, Vj → SRAM (zeros past Nk)
                key = k0 + e // D
                Kj[e // D, e % D] = k[bh, key, e % D] if key < n_k else ZERO
                Vj[e // D, e % D] = v[bh, key, e % D] if key < n_k else ZERO
            cuda.syncthreads()                      # wait: Kj and Vj are loaded
            for q0 in range(0, n_q, Br):            # 7: for each Q tile (inner loop)
                row = q0 + i
                if row < n_q and not (CAUSAL and k0 > row + offset):   # (§34: tile all masked)
                    for c in range(D):              # 8: Qi, Oi, li, mi ← HBM (every j again)
                        Qi[c] = q[bh, row, c] * scale
                        Oi[c] = o[bh, row, c]
                    m = m_hbm[bh, row]
                    l = l_hbm[bh, row]
                    m_t = NEG_INF                   # 10: m̃ = rowmax(S)
                    for jj in range(Bc):
                        key = k0 + jj
                        s = ZERO
                        for c in range(D):
                            s += Qi[c] * Kj[jj, c]  # 9: S = Qi Kjᵀ · scale
                        if key >= n_k or (CAUSAL and key > row + offset):
                            s = NEG_INF             # past Nk, or above the diagonal (§34)
                        S[jj] = s
                        m_t = max(m_t, s)
                    l_t = ZERO
                    for jj in range(Bc):
                        S[jj] = math.exp(S[jj] - m_t)   # 10: P̃ = exp(S − m̃)
                        l_t += S[jj]                # 10: l̃ = rowsum(P̃)
                    m_new = max(m, m_t)             # 11: m_new = max(mi, m̃)
                    a = math.exp(m - m_new)         # 11: e^{mi − m_new} (0 on the first tile)
                    b = math.exp(m_t - m_new)       # 11: e^{m̃ − m_new}
                    l_new = a * l + b * l_t         # 11: l_new = e^{mi−m_new}·li + e^{m̃−m_new}·l̃
                    for c in range(D):
                        pv = ZERO
                        for jj in range(Bc):
                            if S[jj] != ZERO:       # a masked key adds nothing, even NaN
                                pv += S[jj] * Vj[jj, c]     # (P̃ Vj)[c]
                        # 12: Oi ← diag(l_new)⁻¹ (diag(li)·e^{mi−m_new}·Oi
                        #                          + e^{m̃−m_new}·P̃ Vj) → HBM
                        o[bh, row, c] = (l * a * Oi[c] + b * pv) / l_new
                    m_hbm[bh, row] = m_new          # 13: mi ← m_new, li ← l_new → HBM
                    l_hbm[bh, row] = l_new

        for row in range(i, n_q, Br):               # (my rows: written by me, no barrier)
            l = l_hbm[bh, row]
            lse[bh, row] = NEG_INF if l == ZERO else m_hbm[bh, row] + math.log(l)  # LSE = m + log l

    return fa1


@lru_cache(maxsize=None)
def flash_double_buffer(D, Br, Bc, CAUSAL=False):
    """§42: §32's loop (grid (Q tiles, B·H), Br threads) with Kj, Vj in two shared buffers:
    tile j+1 goes into buffer 1 − b while tile j (buffer b = j mod 2) is computed."""

    @cuda.jit
    def double_buffer(q, k, v, o, lse, scale):
        bh = cuda.blockIdx.y                        # which (batch, head)
        q0 = cuda.blockIdx.x * Br                   # first query row of this Q tile
        i = cuda.threadIdx.x                        # my row inside the tile
        row = q0 + i
        n_q = q.shape[1]
        n_k = k.shape[1]
        offset = n_k - n_q                          # §34: row sees key iff key ≤ row + offset
        mine = row < n_q                            # (threads past Nq load, compute nothing)
        Kj = cuda.shared.array((2, Bc, D), float32)     # two buffers: 4·Bc·D floats
        Vj = cuda.shared.array((2, Bc, D), float32)
        Qi = cuda.local.array(D, float32)           # my row of Qi, · scale
        S = cuda.local.array(Bc, float32)           # my row of S, then of P
        acc = cuda.local.array(D, float32)
        for c in range(D):
            Qi[c] = q[bh, row, c] * scale if mine else ZERO
            acc[c] = ZERO                           # acc = 0
        m = NEG_INF                                 # m = −inf
        l = ZERO                                    # l = 0
        n_tiles = (n_k + Bc - 1) // Bc
        if CAUSAL:                                  # §34: stop after the diagonal tile
            last_key = q0 + Br - 1 + offset
            n_tiles = min(n_tiles, last_key // Bc + 1) if last_key >= 0 else 0

        for e in range(i, Bc * D, Br):              # tile 0 → buffer 0 (zeros past Nk)
            key = e // D
            Kj[0, key, e % D] = k[bh, key, e % D] if key < n_k else ZERO
            Vj[0, key, e % D] = v[bh, key, e % D] if key < n_k else ZERO
        cuda.syncthreads()                          # wait: tile 0 is in buffer 0
        for j in range(n_tiles):
            b = j % 2                               # this tile's buffer; the next one: 1 − b
            k0 = j * Bc
            if j + 1 < n_tiles:                     # (the same for the whole block)
                for e in range(i, Bc * D, Br):      # §42: tile j+1 → buffer 1 − b, issued
                    key = k0 + Bc + e // D          # before tile j's products below
                    Kj[1 - b, e // D, e % D] = k[bh, key, e % D] if key < n_k else ZERO
                    Vj[1 - b, e // D, e % D] = v[bh, key, e % D] if key < n_k else ZERO
            if mine:
                for jj in range(Bc):
                    s = ZERO
                    for c in range(D):
                        s += Qi[c] * Kj[b, jj, c]   # S = Qi Kjᵀ · scale
                    if k0 + jj >= n_k or (CAUSAL and k0 + jj > row + offset):
                        s = NEG_INF                 # past Nk, or above the diagonal (§34)
                    S[jj] = s
                m, l, correction = online_softmax(S, m, l)  # §19–20, as attention.py's
                for c in range(D):
                    acc[c] *= correction            # acc = correction·acc …
                for jj in range(Bc):
                    if S[jj] != ZERO:               # a masked key adds nothing, even NaN
                        for c in range(D):
                            acc[c] += S[jj] * Vj[b, jj, c]  # … + P Vj
            cuda.syncthreads()                      # one barrier a tile: tile j+1 is in buffer
            #                                         1 − b, and nobody reads buffer b any more
            #                                         (tile j+2 goes there next)
        if mine:
            inv_l = ZERO if l == ZERO else ONE / l  # a row that saw no key: O = 0
            for c in range(D):
                o[bh, row, c] = acc[c] * inv_l      # O = acc / l
            lse[bh, row] = NEG_INF if l == ZERO else m + math.log(l)    # LSE = m + log l

    return double_buffer


@lru_cache(maxsize=None)
def flash_producer_consumer(D, Br, Bc, P, CAUSAL=False):
    """§43: §42's two buffers, with the roles split by warp: threads 0 … Br−1 (consumers) only
    compute, one row each; the P warps after them (producers, threads Br … Br+32P−1) only load.
    Grid (Q tiles, B·H), Br + 32·P threads; cuda.syncthreads() is the only signal."""

    @cuda.jit
    def producer_consumer(q, k, v, o, lse, scale):
        bh = cuda.blockIdx.y                        # which (batch, head)
        q0 = cuda.blockIdx.x * Br                   # first query row of this Q tile
        t = cuda.threadIdx.x
        producer = t >= Br                          # §43: my role, fixed for the whole kernel
        p = t - Br                                  # producer index 0 … 32·P − 1
        row = q0 + t
        n_q = q.shape[1]
        n_k = k.shape[1]
        offset = n_k - n_q                          # §34: row sees key iff key ≤ row + offset
        mine = not producer and row < n_q           # a consumer with a row to compute
        Kj = cuda.shared.array((2, Bc, D), float32)
        Vj = cuda.shared.array((2, Bc, D), float32)
        Qi = cuda.local.array(D, float32)           # my row of Qi, · scale
        S = cuda.local.array(Bc, float32)           # my row of S, then of P
        acc = cuda.local.array(D, float32)
        for c in range(D):
            Qi[c] = q[bh, row, c] * scale if mine else ZERO
            acc[c] = ZERO                           # acc = 0
        m = NEG_INF                                 # m = −inf
        l = ZERO                                    # l = 0
        n_tiles = (n_k + Bc - 1) // Bc
        if CAUSAL:                                  # §34: stop after the diagonal tile
            last_key = q0 + Br - 1 + offset
            n_tiles = min(n_tiles, last_key // Bc + 1) if last_key >= 0 else 0

        if producer:
            for e in range(p, Bc * D, 32 * P):      # producers: tile 0 → buffer 0
                key = e // D
                Kj[0, key, e % D] = k[bh, key, e % D] if key < n_k else ZERO
                Vj[0, key, e % D] = v[bh, key, e % D] if key < n_k else ZERO
        cuda.syncthreads()                          # wait: tile 0 is in buffer 0
        for j in range(n_tiles):
            b = j % 2                               # this tile's buffer; the next one: 1 − b
            k0 = j * Bc
            if producer and j + 1 < n_tiles:
                for e in range(p, Bc * D, 32 * P):  # producers: tile j+1 → buffer 1 − b …
                    key = k0 + Bc + e // D
                    Kj[1 - b, e // D, e % D] = k[bh, key, e % D] if key < n_k else ZERO
                    Vj[1 - b, e // D, e % D] = v[bh, key, e % D] if key < n_k else ZERO
            elif mine:                              # … while the consumers compute tile j
                for jj in range(Bc):
                    s = ZERO
                    for c in range(D):
                        s += Qi[c] * Kj[b, jj, c]   # S = Qi Kjᵀ · scale
                    if k0 + jj >= n_k or (CAUSAL and k0 + jj > row + offset):
                        s = NEG_INF                 # past Nk, or above the diagonal (§34)
                    S[jj] = s
                m, l, correction = online_softmax(S, m, l)  # §19–20, as attention.py's
                for c in range(D):
                    acc[c] *= correction            # acc = correction·acc …
                for jj in range(Bc):
                    if S[jj] != ZERO:               # a masked key adds nothing, even NaN
                        for c in range(D):
                            acc[c] += S[jj] * Vj[b, jj, c]  # … + P Vj
            cuda.syncthreads()                      # one barrier a tile, every thread (both
            #                                         roles): tile j+1 is in buffer 1 − b, and
            #                                         no consumer reads buffer b any more
        if mine:
            inv_l = ZERO if l == ZERO else ONE / l  # a row that saw no key: O = 0
            for c in range(D):
                o[bh, row, c] = acc[c] * inv_l      # O = acc / l
            lse[bh, row] = NEG_INF if l == ZERO else m + math.log(l)    # LSE = m + log l

    return producer_consumer
