"""FlashAttention-1's loop order (lesson §41): K/V tiles outside, Q tiles inside, and O, m, l
going back to global memory after every K/V tile — next to FlashAttention-2's order
(``attention.flash_forward_kernel``: Q tile outside, K/V streamed, O written once).

Ladder (lesson tier to fast tier): from the lesson kernel to this file, step by step, at B2 H16
N2048 d64 float32 unless a step says otherwise; TFLOP/s = 4·B·H·N²·d / time (half when causal);
kernel-only CUDA-event medians; "× lesson" = the lesson kernel's time / the step's on the same
inputs. ``flashlesson bench ladder --only attention_fa1`` checks and times every step with a timed
call, ``--write`` puts its numbers here; a step without one is historical (no longer separable in
the code) and keeps the TFLOP/s recorded then.
| step | what changed                                 | measured                     | timed call                     |
|------|----------------------------------------------|------------------------------|--------------------------------|
| 0    | the lesson kernel                            | H200, 2026-12-01: 62 ms,     | method='flash_fa1',            |
|      | (``lesson/loop_order.py``'s ``flash_fa1``):  | 0.555 TFLOP/s                | tier='lesson'                  |
|      | FA1's order, one thread a row, a block per   |                              |                                |
|      | head                                         |                              |                                |
| 1    | this file, Algorithm 1 (one block per head), | H200, 2026-12-01: 11.1 ms,   | method='flash_fa1'             |
|      | the forward kernel's tiles and thread layout | 3.09 TFLOP/s, 5.57× lesson   |                                |
|      | (before: 2.6 TFLOP/s at B2 H16 N4096)        |                              |                                |
| 2    | the same loop on FA2's grid (a block per Q   | H200, 2026-12-01: 1.96 ms,   | loop_order.launch_fa1(…,       |
|      | tile, ``q_blocks`` = ⌈Nq/Br⌉): the gap to    | 17.6 TFLOP/s, 31.68× lesson  | q_blocks=⌈Nq/Br⌉)              |
|      | ``ref`` is the HBM round trips alone         |                              |                                |
|      | (before: 18.6 TFLOP/s)                       |                              |                                |
| ref  | FA2's order (``attention.py``'s ``flash``),  | H200, 2026-12-01: 1.13 ms,   | method='flash'                 |
|      | for comparison (before: 31.5 TFLOP/s at B2   | 30.5 TFLOP/s                 |                                |
|      | H16 N4096)                                   |                              |                                |

Menu
| kernel                                  | §  | what                                           |
|-----------------------------------------|----|------------------------------------------------|
| ``flash_fa1_kernel(D, Br, Bc, TR, TC,   | 41 | Algorithm 1 of the FlashAttention paper: per    |
|   CAUSAL, VEC, KU, PAD, DROPOUT)``      |    | K/V tile Kj, Vj loaded once; for every Q tile:  |
|                                         |    | Qi, Oi, mi, li read from HBM, updated, written  |
|                                         |    | back. Grid (QB, B·H): block (qb, bh) owns the Q |
|                                         |    | tiles qb, qb + QB, … of head bh                 |

Algorithm 1 (Dao et al. 2022, "FlashAttention", line numbers as in the paper), beside the code::

    2   O = 0, l = 0, m = −∞ in HBM                         ← the first loop below
    5   for each K/V tile j:                                 ← outer loop
    6       load Kj, Vj into SRAM                            ← once per j (per block)
    7       for each Q tile i:                               ← inner loop
    8           load Qi, Oi, li, mi from HBM                 ← every j: Q, O, l, m re-read
    9           S = Qi Kjᵀ · scale
    10          m̃ = rowmax(S), P̃ = exp(S − m̃), l̃ = rowsum(P̃)
    11          m_new = max(mi, m̃),  l_new = e^{mi − m_new} li + e^{m̃ − m_new} l̃
    12          Oi ← diag(l_new)⁻¹ (diag(li) e^{mi − m_new} Oi + e^{m̃ − m_new} P̃ Vj)  → HBM
    13          li ← l_new, mi ← m_new                       → HBM
    LSE = m + log l  (the paper's kernel returns m and l; this API returns the LSE: one more
                      read of m and l)

What it costs, against FlashAttention-2's order (``flashlesson.loop_order.fa1_attention_traffic``
counts it; ``tests/test_loop_order.py`` holds it to the counter): per head, Q is read Tc times
(Tc = ⌈Nk/Bc⌉ K/V tiles), O read Tc and written Tc + 1 times, m and l read Tc + 1 and written
Tc + 1 times — Θ(Nq·d·Nk/Bc) bytes where FA2 reads Q once and writes O once; K and V are read
once per block instead of once per Q tile, the one thing this order saves. Line 12 also
normalizes O at every step (divide by l_new, rescale by l_i): non-matmul work that FA2 moves out
of the loop (it keeps acc un-normalized and divides once at the end).

Races, and the choice made here. In Algorithm 1 different K/V tiles update the same rows of O, m
and l, so the K/V loop cannot be spread over blocks that run at the same time (that is split-KV,
§22: partial results merged afterwards, not this algorithm). Two race-free launches keep it:
(a) one launch per K/V tile (launches serialize), or (b) one block per head looping over the K/V
tiles itself, parallel over (batch, head) and the block's threads only — what the paper's CUDA
kernel did, and what FA2's "parallelize over the sequence length" fixes. This file does (b),
generalized by one runtime number: QB blocks per head, block qb owning the Q tiles qb, qb + QB,
…, so that no two blocks ever touch the same rows. QB = 1 (the default of ``attention(…,
method="flash_fa1")``) is Algorithm 1 exactly: B·H blocks, a fraction of the GPU's 132 SMs at
B·H = 16–32. QB = ⌈Nq/Br⌉ gives one Q tile per block, FA2's grid with FA1's traffic: the timing
difference from ``flash`` is then the HBM round trips alone (``scripts/bench_loop_order.py``
times both). Inside a block every element of O, m and l is read and written by one thread only
(a thread owns its rows and columns; for m and l the row's thread tc = 0, which shares them
with the row's other TC lanes by a shuffle), so no barrier is needed for them.

Thread layout and shared-memory layouts: the forward kernel's (see ``flash_steps.py``). Shared
memory: Qtᵀ [D][Br+4] | Kjᵀ [D][Bc+4] | Vj [Bc][D] | Pᵀ [Bc][Br+4] — Kj and Vj both stay for the
whole inner loop, so they do not share space as in ``flash_forward_kernel``.

Limits: as ``flash_forward_kernel`` (D a multiple of 4·TC, T a multiple of 32, …); the padded
layout only (q [B·H·Nq·d], k, v [B·H·Nk·d] flat float32), no VARLEN; m, l [B·H·Nq] float32
scratch in global memory (the caller allocates them; the kernel initializes them).

How to run: ``flashlesson.attention(q, k, v, method="flash_fa1")``, ``flashlesson section 41``,
``pytest tests/test_loop_order.py``, ``python3 scripts/bench_loop_order.py`` (GPU).
"""

import math
from functools import lru_cache

from numba import cuda, float32, int64

from .attention import first_q_tile, kv_tiles
from .flash_steps import keep_bits, p_store, pv_product, qk_product, score_mask
from .reductions import NEG_INF, ONE, ZERO, fast_exp, lanes_max, lanes_sum, safe_max, \
    safe_reciprocal
from .tiles import tile_loader


def fa1_smem_floats(D, Br, Bc):
    """Dynamic shared memory of the FA1 kernel, in float32 elements."""
    return D * (Br + 4) + D * (Bc + 4) + Bc * D + Bc * (Br + 4)


@lru_cache(maxsize=None)
def flash_fa1_kernel(D, Br, Bc, TR, TC, CAUSAL, VEC=False, KU=1, PAD=False, DROPOUT=False):
    """Algorithm 1 for head dimension ≤ D, Br × Bc tiles, TR × TC threads (compile-time)."""
    T = TR * TC
    RM = Br // TR                  # query rows per thread
    CN = Bc // TC                  # S columns per thread
    DN = D // TC                   # O columns per thread
    W = 4 * TC
    QS = Br + 4                    # row stride of Qᵀ and Pᵀ
    KS = Bc + 4                    # row stride of Kᵀ
    OFF_K = D * QS
    OFF_V = OFF_K + D * KS
    OFF_P = OFF_V + Bc * D
    END = OFF_P + Bc * QS
    assert END == fa1_smem_floats(D, Br, Bc)
    NB = max(DN, CN)
    assert T % 32 == 0 and 32 % TC == 0 and RM % 4 == 0 and CN % 4 == 0 and DN % 4 == 0
    assert RM * TR == Br and CN * TC == Bc and DN * TC == D
    assert D % KU == 0 and Bc % KU == 0
    load_Qt = tile_loader(Br, D, T, QS, True, VEC)      # Qiᵀ · scale
    load_Kt = tile_loader(Bc, D, T, KS, True, VEC)      # Kjᵀ
    load_V = tile_loader(Bc, D, T, D, False, VEC)       # Vj, row-major
    qk = qk_product(RM, CN, D, QS, KS, W, KU)           # S = Qi Kjᵀ · scale
    pv_guarded = pv_product(RM, DN, Bc, QS, D, W, KU, True)    # (tiles with hidden keys)
    pv = pv_product(RM, DN, Bc, QS, D, W, KU)           # P̃ Vj
    mask = score_mask(RM, CN, W, CAUSAL, PAD)
    bits = keep_bits(RM, CN, W)
    store_p = p_store(RM, CN, W, QS, DROPOUT)

    @cuda.jit
    def flash_fa1(q, k, v, o, lse, m_g, l_g, scale, d, n_q, n_k, heads, q_blocks, kpm,
                  seed_lo, seed_hi, threshold, inv_keep):
        """q, o [B·H·Nq·d], k, v [B·H·Nk·d], lse, m_g, l_g [B·H·Nq]: flat float32; q_blocks =
        QB, the grid's x; kpm uint8 [B, Nk] (PAD); seed_lo, seed_hi, threshold, inv_keep (DROPOUT,
        as flash_forward_kernel)."""
        qb = cuda.blockIdx.x                        # my share of the head's Q tiles
        bh = cuda.blockIdx.y                        # which (batch, head)
        tid = cuda.threadIdx.x
        tc = tid & (TC - 1)
        r0 = (tid // TC) * RM                       # my first row inside a Q tile
        b_idx = bh // heads
        q_base = bh * n_q * d                       # Q[row, c] = q[q_base + row·d + c]; O alike
        k_base = bh * n_k * d
        m_base = bh * n_q                           # m[row] = m_g[m_base + row]; l, LSE alike
        offset = n_k - n_q                          # §34: query i sees key j iff j ≤ i + offset
        n_qt = (n_q + Br - 1) // Br
        n_kv = kv_tiles(CAUSAL, 0, n_q, Bc, n_q, n_k)   # (causal: none past the last query's keys)

        smem = cuda.shared.array(0, float32)
        Qt = smem[:OFF_K]                           # Qᵀ: Qt[c·QS + r] = Q[q0 + r, c] · scale
        Kt = smem[OFF_K:OFF_V]                      # Kᵀ: Kt[c·KS + j] = K[k0 + j, c]
        Vj = smem[OFF_V:OFF_P]                      # V:  Vj[j·D + c] = V[k0 + j, c]
        Pt = smem[OFF_P:END]                        # Pᵀ: Pt[j·QS + r] = P̃[r, j]

        s = cuda.local.array((RM, CN), float32)     # S, then P̃
        pacc = cuda.local.array((RM, DN), float32)  # P̃ Vj, my part
        a = cuda.local.array(RM, float32)
        b = cuda.local.array(NB, float32)
        w_o = cuda.local.array(RM, float32)         # line 12: li e^{mi − m_new} / l_new
        w_p = cuda.local.array(RM, float32)         # line 12: e^{m̃ − m_new} / l_new
        m_new = cuda.local.array(RM, float32)
        l_new = cuda.local.array(RM, float32)
        zbits = cuda.local.array(RM, int64)         # §36: the keep bits of my P̃ entries

        # line 2: O = 0, l = 0, m = −inf in HBM — my elements of my Q tiles (the same thread
        # reads them back later, so no barrier is needed)
        for t in range(qb, n_qt, q_blocks):
            for i in range(RM):
                row = t * Br + r0 + i
                if row < n_q:
                    for c in range(DN):
                        col = W * (c // 4) + 4 * tc + (c & 3)
                        if col < d:
                            o[q_base + row * d + col] = ZERO
                    if tc == 0:
                        m_g[m_base + row] = NEG_INF
                        l_g[m_base + row] = ZERO

        for j in range(n_kv):                       # line 5: the outer loop, over K/V tiles
            k0 = j * Bc
            first = first_q_tile(CAUSAL, k0, Br, n_q, n_k)   # the first Q tile that sees k0
            start = first + (qb - first) % q_blocks     # my first Q tile from there
            if start >= n_qt:
                continue            # (the whole block skips the tile together: no barrier missed)
            cuda.syncthreads()                      # wait: the previous Kj, Vj are consumed
            load_Kt(k, k_base, d, k0, n_k, d, Kt, ONE)      # line 6: Kj, Vj → shared memory,
            load_V(v, k_base, d, k0, n_k, d, Vj, ONE)       # once for all my Q tiles

            for t in range(start, n_qt, q_blocks):  # line 7: the inner loop, over Q tiles
                q0 = t * Br
                cuda.syncthreads()                  # wait: the previous Qi and P̃ are consumed
                load_Qt(q, q_base, d, q0, n_q, d, Qt, scale)    # line 8: Qi, every time
                cuda.syncthreads()                  # wait: Qi (first time: Kj, Vj) is loaded

                qk(s, Qt, Kt, r0, tc, a, b)         # line 9: S = Qi Kjᵀ · scale
                if PAD or k0 + Bc > n_k or (CAUSAL and k0 + Bc - 1 > q0 + offset):
                    mask(s, q0 + r0, k0, tc, n_k, offset, kpm, b_idx)

                for i in range(RM):
                    row = q0 + r0 + i
                    tile_max = NEG_INF
                    for jj in range(CN):
                        tile_max = max(tile_max, s[i, jj])
                    m_t = lanes_max(tile_max, TC)   # line 10: m̃ = rowmax(S)
                    m_t_safe = safe_max(m_t)        # (0 when the row sees no key of this tile)
                    row_sum = ZERO
                    for jj in range(CN):
                        s[i, jj] = fast_exp(s[i, jj] - m_t_safe)    # P̃ = exp(S − m̃)
                        row_sum += s[i, jj]
                    l_t = lanes_sum(row_sum, TC)    # l̃ = rowsum(P̃)
                    # line 8: mi, li from HBM — read by the row's thread tc = 0, shared with
                    # its TC lanes (max with −inf, sum with 0: exact)
                    m_old = NEG_INF
                    l_old = ZERO
                    if tc == 0 and row < n_q:
                        m_old = m_g[m_base + row]
                        l_old = l_g[m_base + row]
                    m_old = lanes_max(m_old, TC)
                    l_old = lanes_sum(l_old, TC)
                    mn = max(m_old, m_t)            # line 11: m_new = max(mi, m̃)
                    mn_safe = safe_max(mn)
                    alpha = fast_exp(m_old - mn_safe)           # e^{mi − m_new}
                    beta = fast_exp(m_t - mn_safe)              # e^{m̃ − m_new}
                    ln = alpha * l_old + beta * l_t             # l_new
                    inv = safe_reciprocal(ln)       # (a row that saw no key yet: O stays 0)
                    w_o[i] = l_old * alpha * inv    # line 12's two weights
                    w_p[i] = beta * inv
                    m_new[i] = mn
                    l_new[i] = ln

                if DROPOUT:                         # §36: P̃ ∘ Z reaches V; l̃ took all of P̃
                    bits(zbits, seed_lo, seed_hi, bh, q0 + r0, k0, tc, threshold)
                store_p(Pt, s, zbits, r0, tc, inv_keep)         # P̃ᵀ → shared memory
                cuda.syncthreads()                  # wait: P̃ is in shared memory

                for i in range(RM):
                    for c in range(DN):
                        pacc[i, c] = ZERO
                if PAD or (CAUSAL and k0 + Bc - 1 > q0 + offset):
                    pv_guarded(pacc, Pt, Vj, r0, tc, a, b)   # a hidden key (padded, causal)
                else:                                       # adds nothing, even NaN/inf
                    pv(pacc, Pt, Vj, r0, tc, a, b)  # P̃ Vj

                for i in range(RM):
                    row = q0 + r0 + i
                    if row < n_q:
                        for c in range(DN):
                            col = W * (c // 4) + 4 * tc + (c & 3)
                            if col < d:             # line 8 (Oi) and line 12, → HBM
                                at = q_base + row * d + col
                                o[at] = w_o[i] * o[at] + w_p[i] * pacc[i, c]
                        if tc == 0:                 # line 13: li, mi → HBM
                            m_g[m_base + row] = m_new[i]
                            l_g[m_base + row] = l_new[i]

        # LSE = m + log l, from HBM (−inf for a row that saw no key); by the thread that wrote them
        for t in range(qb, n_qt, q_blocks):
            for i in range(RM):
                row = t * Br + r0 + i
                if row < n_q and tc == 0:
                    m_row = m_g[m_base + row]
                    l_row = l_g[m_base + row]
                    lse[m_base + row] = NEG_INF if l_row == ZERO else m_row + math.log(l_row)

    return flash_fa1
