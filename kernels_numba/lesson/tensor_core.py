"""§37 — FlashAttention on tensor cores, lesson tier: one warp, ``mma.sync`` m16n8k16 fp16.

Menu (reach it with ``flashlesson.attention(q, k, v, method="flash_tc", tier="lesson")`` on
float16 inputs; the tuned kernel is ``kernels_numba/attention_tc.py``)::

    flash_tc_kernel(d, CAUSAL, PAD)   one warp per block, one block per 16-row Q block;
                                      K/V tiles of Bc = 16 keys loaded plainly into shared
                                      memory; S = Qi Kjᵀ and acc += P Vj as mma.sync; the
                                      online softmax (m, l, correction) on CUDA cores in
                                      natural logs (math.exp)                         §37, §19
    a_fragment, b_fragment_of_rows,   the fragments drawn below, read from float32
    b_fragment_of_cols (device)       tiles in shared memory
    load_row (device)                 a row of fp16 words → a float32 tile row (or zeros)
    online_softmax_quad (device)      §19–20 for a row spread over a quad's 4 lanes

What a tensor core changes (§37): a warp multiplies a 16×16 fp16 tile A by a 16×8 tile B in
one instruction, C += A·B in float32; the 32 lanes each hold a few elements of A, B and C
("fragments", drawn in ``kernels_numba/mma.py``). For lane = 4g + t (g = lane // 4, t = lane % 4):

    A (16×16): a0 = A[g, 2t:2t+2]   a1 = A[g+8, 2t:2t+2]   a2 = A[g, 2t+8:2t+10]   a3 = A[g+8, 2t+8:2t+10]
    B (16×8):  b0 = B[2t:2t+2, g]   b1 = B[2t+8:2t+10, g]          (each: two halves, packed)
    C (16×8):  c0, c1 = C[g, 2t], C[g, 2t+1]      c2, c3 = C[g+8, 2t], C[g+8, 2t+1]

So lane (g, t) owns rows g and g + 8 of S (and of O): the online softmax of a row is split
over the 4 lanes t = 0 … 3 of its group and combined with 2 shuffles (``lanes_max``,
``lanes_sum`` of §6 over groups of 4). The trick §37 points at: S's C fragment, two n-blocks
side by side, is exactly P's A fragment for the next product P Vj — P never leaves registers.

Everything else is the §32 loop in the lesson's names: m, l, acc per row; for each K/V tile
S = Qi Kjᵀ · scale, m_new = max(m, row_max(S)), correction = e^{m − m_new},
l = correction · l + row_sum(P), acc = correction · acc + P Vj; O = acc / l, LSE = m + ln l.

Arrays: q, k, v as uint32 words of two fp16 halves, [B·H, N, d/2]; o the same for O
[B·H, Nq, d/2]; lse float32 [B·H, Nq]; kpm uint8 [B, Nk] (PAD), heads = H. d a multiple of
16, ≤ 256 (three [16, d] float32 tiles of static shared memory: ≤ 48 KB). Grid (⌈Nq/16⌉, B·H),
32 threads. Keys past Nk and padded keys are loaded as zeros and get S = −inf (a select), so
their P = 0 meets a zero V row (no 0·NaN). Causal (bottom-right) masks by select too; a hidden
key *inside* the diagonal tile still enters P Vj with P = 0 — a NaN in its V row would reach
the row (the fast kernel's documented limit, docs/api.md).
"""

import math
from functools import lru_cache

from numba import cuda, float32

from ..mma import mma_f16, pack_f16, unpack_f16
from ..reductions import NEG_INF, ONE, ZERO, lanes_max, lanes_sum

Bc = 16     # keys per K/V tile: one k-step of P Vj's mma (A = P is 16 × 16)


# The fragments drawn above, read out of float32 tiles in shared memory (packed to fp16 pairs):
@cuda.jit(device=True)
def a_fragment(T, k0, g, t):
    """A = T[0:16, k0:k0+16]: lane (g, t)'s words a0, a1, a2, a3."""
    return (pack_f16(T[g, k0 + 2 * t], T[g, k0 + 2 * t + 1]),
            pack_f16(T[g + 8, k0 + 2 * t], T[g + 8, k0 + 2 * t + 1]),
            pack_f16(T[g, k0 + 2 * t + 8], T[g, k0 + 2 * t + 9]),
            pack_f16(T[g + 8, k0 + 2 * t + 8], T[g + 8, k0 + 2 * t + 9]))


@cuda.jit(device=True)
def b_fragment_of_rows(T, n0, k0, g, t):
    """B = T[n0:n0+8, k0:k0+16]ᵀ (B[k, n] = T[n0 + n, k0 + k]: K rows give Kjᵀ): b0, b1."""
    return (pack_f16(T[n0 + g, k0 + 2 * t], T[n0 + g, k0 + 2 * t + 1]),
            pack_f16(T[n0 + g, k0 + 2 * t + 8], T[n0 + g, k0 + 2 * t + 9]))


@cuda.jit(device=True)
def b_fragment_of_cols(T, n0, g, t):
    """B = T[0:16, n0:n0+8] (V rows as they are): b0, b1."""
    return (pack_f16(T[2 * t, n0 + g], T[2 * t + 1, n0 + g]),
            pack_f16(T[2 * t + 8, n0 + g], T[2 * t + 9, n0 + g]))


@cuda.jit(device=True)
def load_row(T, r, src, bh, row, live, lane):
    """T[r, :] = row ``row`` of src[bh] (fp16 pairs in uint32 words → float32; the warp's 32
    lanes share the words), or zeros where not ``live`` (past N, or a padded key)."""
    for w in range(lane, src.shape[2], 32):         # word w: columns 2w, 2w + 1
        lo = hi = ZERO
        if live:
            lo, hi = unpack_f16(src[bh, row, w])
        T[r, 2 * w], T[r, 2 * w + 1] = lo, hi


@cuda.jit(device=True)
def online_softmax_quad(S, h, m, l):
    """§19–20 for my row h (g + 8h) and one K/V tile, as ``lesson/attention.py``'s
    ``online_softmax``: the row's 16 scores sit 4 a lane in my quad (S[h, 0:4], −inf where
    masked), so its max and sum take 2 shuffles more (``lanes_max``, ``lanes_sum``). S[h]
    becomes P in place, m[h] and l[h] are updated; returns the correction for acc."""
    row_max = NEG_INF
    for e in range(4):
        row_max = max(row_max, S[h, e])
    new_m = max(m[h], lanes_max(row_max, 4))        # new_m = max(m, rowmax(S)) over the quad
    m_safe = ZERO if new_m == NEG_INF else new_m    # (no key seen yet: use 0)
    correction = math.exp(m[h] - m_safe)            # correction = e^{m − new_m}
    row_sum = ZERO
    for e in range(4):
        S[h, e] = math.exp(S[h, e] - m_safe)        # P = e^{S − new_m}
        row_sum += S[h, e]
    l[h] = correction * l[h] + lanes_sum(row_sum, 4)    # l = correction·l + rowsum(P)
    m[h] = new_m                                    # m = new_m
    return correction


@lru_cache(maxsize=None)
def flash_tc_kernel(d, CAUSAL, PAD):
    """O, LSE of one 16-row Q block per warp (one warp a block); d the head dimension."""
    NB = d // 8                                     # n-blocks of 8 columns of O

    @cuda.jit
    def flash_tc(q, k, v, o, lse, scale, heads, kpm):
        bh = cuda.blockIdx.y
        q0 = cuda.blockIdx.x * 16                   # rows q0 … q0 + 15: my warp's Q block
        lane = cuda.threadIdx.x
        g, t = lane // 4, lane % 4                  # I own rows g, g + 8; columns 2t, 2t + 1
        n_q, n_k = q.shape[1], k.shape[1]
        offset = n_k - n_q                          # §34: query i sees key j iff j ≤ i + offset

        Qi = cuda.shared.array((16, d), float32)    # the tiles, fp16 values held as float32
        Kj = cuda.shared.array((Bc, d), float32)
        Vj = cuda.shared.array((Bc, d), float32)
        for r in range(16):                         # load Qi (rows past Nq: zeros)
            load_row(Qi, r, q, bh, q0 + r, q0 + r < n_q, lane)

        m = cuda.local.array(2, float32)            # rows g, g + 8: running max
        l = cuda.local.array(2, float32)            # running sum (the whole row's)
        acc = cuda.local.array((NB, 4), float32)    # my C fragments of acc [16, d]
        S = cuda.local.array((2, 4), float32)       # my C fragments of S, then P [16, Bc]
        for h in range(2):
            m[h] = NEG_INF                          # m = −inf
            l[h] = ZERO                             # l = 0
        for nb in range(NB):
            for e in range(4):
                acc[nb, e] = ZERO                   # acc = 0

        last = min(n_k, q0 + 16 + offset) if CAUSAL else n_k   # §34: keys ≤ q0 + 15 + offset
        for k0 in range(0, last, Bc):               # for each K/V tile Kj, Vj:
            cuda.syncthreads()                      # wait: the warp is done with the last tile
            for r in range(Bc):                     # load Kj, Vj; hidden keys as zero rows
                key = k0 + r
                live = key < n_k and (not PAD or kpm[bh // heads, key] != 0)
                load_row(Kj, r, k, bh, key, live, lane)
                load_row(Vj, r, v, bh, key, live, lane)
            cuda.syncthreads()                      # wait: the tile is loaded

            for nb in range(2):                     # S = Qi Kjᵀ, keys 8·nb … 8·nb + 7
                c0 = c1 = c2 = c3 = ZERO
                for kk in range(0, d, 16):          # A = Qi[:, kk:kk+16], B = Kjᵀ (K rows)
                    a0, a1, a2, a3 = a_fragment(Qi, kk, g, t)
                    b0, b1 = b_fragment_of_rows(Kj, 8 * nb, kk, g, t)
                    c0, c1, c2, c3 = mma_f16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)
                S[0, 2 * nb], S[0, 2 * nb + 1], S[1, 2 * nb], S[1, 2 * nb + 1] = c0, c1, c2, c3

            for h in range(2):                      # my two rows: h = 0 row g, h = 1 row g + 8
                row = q0 + g + 8 * h
                for e in range(4):                  # my scores of the row: S[h, e] is key
                    key = k0 + 8 * (e // 2) + 2 * t + e % 2     # 8·(e // 2) + 2t + e % 2
                    hidden = key >= n_k or (CAUSAL and key > row + offset)
                    if PAD and key < n_k:
                        hidden = hidden or kpm[bh // heads, key] == 0
                    S[h, e] = NEG_INF if hidden else S[h, e] * scale    # S · scale, masked
                correction = online_softmax_quad(S, h, m, l)    # m, l; P = e^{S − new_m}
                for nb in range(NB):
                    acc[nb, 2 * h] *= correction                # acc = correction · acc …
                    acc[nb, 2 * h + 1] *= correction

            a0 = pack_f16(S[0, 0], S[0, 1])         # … + P Vj: S's C fragments are P's A
            a1 = pack_f16(S[1, 0], S[1, 1])         # fragment (keys 0–7: a0, a1; 8–15: a2, a3)
            a2 = pack_f16(S[0, 2], S[0, 3])
            a3 = pack_f16(S[1, 2], S[1, 3])
            for nb in range(NB):                    # B = Vj[:, 8·nb … 8·nb + 7]
                b0, b1 = b_fragment_of_cols(Vj, 8 * nb, g, t)
                acc[nb, 0], acc[nb, 1], acc[nb, 2], acc[nb, 3] = mma_f16(
                    a0, a1, a2, a3, b0, b1, acc[nb, 0], acc[nb, 1], acc[nb, 2], acc[nb, 3])

        for h in range(2):                          # O = acc / l, LSE = m + ln l
            row = q0 + g + 8 * h
            if row < n_q:
                inv = ZERO if l[h] == ZERO else ONE / l[h]      # l = 0: the row saw no key
                for nb in range(NB):
                    o[bh, row, 4 * nb + t] = pack_f16(acc[nb, 2 * h] * inv,
                                                      acc[nb, 2 * h + 1] * inv)
                if t == 0:
                    lse[bh, row] = NEG_INF if l[h] == ZERO else m[h] + math.log(l[h])

    return flash_tc
