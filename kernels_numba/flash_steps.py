"""The steps of the forward kernel's loop (§32), as device functions, for the §41–43 variants.

``attention.flash_forward_kernel`` writes these steps out inline, on purpose: §32's example
(``examples/s32_pseudocode_and_kernel.py``) finds the pseudocode's lines in its source. The loop-order and buffering
variants (``attention_fa1.py``: §41, FlashAttention-1's loop order; ``attention_db.py``:
§42 double-buffered K/V, §43 producer/consumer warps) take the same steps in other orders, on the
same thread layout and the same shared-memory layouts, so their timings differ by the loop order
or the buffering and not by how a product is written. The steps are written once here (Numba
inlines device functions: the kernels compile as if the steps were written out in them).

Thread layout (as ``flash_forward_kernel``): thread (tr, tc) of a T = TR·TC block owns query rows
r0 … r0 + RM − 1 of the Q tile (r0 = tr·RM, RM = Br/TR), S columns W·(jj // 4) + 4·tc + (jj & 3)
(jj < CN = Bc/TC, W = 4·TC) and O columns W·(c // 4) + 4·tc + (c & 3) (c < DN = D/TC).
Shared-memory layouts: Qtᵀ [D][QS] (QS = Br + 4, holds Qi · scale), Kjᵀ [D][KS] (KS = Bc + 4),
Vj [Bc][D] row-major, Pᵀ [Bc][QS].

Menu (factories, cached: each closes over the compile-time shape, so every loop count is a
constant, the loops unroll and the local arrays they fill stay in registers)
- ``tile_product(RM, CN, K, AS, BS, W, KU)`` → ``product(c, At, B, r0, tc, a, b)``: C += Aᵀ B,
  my RM × CN part, operands four at a time (``load4``); the two below are this product
- ``qk_product(RM, CN, D, QS, KS, W, KU)`` → ``qk(s, Qt, Kt, r0, tc, a, b)``:
  s = Qi Kjᵀ · scale, my RM × CN part                                          (§32: S = Qi Kjᵀ)
- ``pv_product(RM, DN, Bc, QS, D, W, KU)`` → ``pv(acc, Pt, V, r0, tc, a, b)``: acc += P Vj
- ``online_softmax(RM, CN, DN, TC)`` → ``update(s, m, l, acc)``: §32's m, l, correction·acc,
  and s → P = exp(S − new_m); a row's TC lanes agree via shuffles
- ``pv_product(…, GUARD)``: P Vj; GUARD skips P = 0 (the tiles that mix seen and unseen keys)
- ``score_mask(RM, CN, W, CAUSAL, PAD)`` → ``mask(s, row0, k0, tc, n_k, offset, kpm, b_idx)``:
  −inf for keys past Nk, (CAUSAL) keys after the query (§34), (PAD) padding keys (§35)
- ``keep_bits(RM, CN, W)`` → ``bits(zbits, seed_lo, seed_hi, bh, row0, k0, tc, threshold)``:
  §36, which of my P entries dropout keeps, as bits
- ``p_store(RM, CN, W, QS, DROPOUT)`` → ``store(Pt, s, zbits, r0, tc, inv_keep)``: Pᵀ (∘ Z) into
  shared memory for the P Vj product
- ``o_lse_store(RM, DN, W)`` → ``store(o, lse, acc, m, l, q_base, lse_base, q0, r0, tc, n_q,
  d)``: O = acc / l and LSE = m + log l of my rows, the loop's only global writes (§24)
- ``tile_prefetcher(ROWS, D, T, STRIDE, TRANSPOSE, VEC)`` → (``fetch``, ``put``, REGS): the two
  halves of ``tiles.tile_loader``, apart: ``fetch(src, base, row_stride, row0, n, d, regs)``
  issues a thread's global loads of a tile into ``regs`` (REGS floats, registers) and
  ``put(regs, dst, scale)`` stores them into shared memory later — with compute in between
  (§42: Numba has no cp.async, so the copy in flight lives in registers).
All but ``tile_prefetcher`` use no ``cuda.*`` (``pure_device``: plain Python in the simulator).
"""

import math
from functools import lru_cache

from numba import cuda

from .jit import pure_device
from .philox import dropout_words
from .reductions import NEG_INF, ZERO, fast_exp, lanes_max, lanes_sum, safe_max, \
    safe_reciprocal
from .vector import load4, store4


@lru_cache(maxsize=None)
def tile_product(RM, CN, K, AS, BS, W, KU, GUARD=False):
    """C += Aᵀ B, my RM × CN part: C[i, jj] += Σ_kk At[kk·AS + r0 + i] · B[kk·BS + col(jj)],
    col(jj) = W·(jj // 4) + 4·tc + (jj & 3); an outer product per kk, operands four at a time
    (``load4``). Both products of the loop: S = Qi Kjᵀ (At = Qtᵀ, B = Kjᵀ, K = D) and P Vj
    (At = Pᵀ, B = Vj, K = Bc). GUARD (P Vj on the tiles that mix seen and unseen keys only): a
    row's term with At = 0 is skipped, so a key the row does not see adds nothing even if its V
    row holds NaN/inf (0 · NaN = NaN; the masking rule, docs/api.md)."""

    @pure_device
    def product(c, At, B, r0, tc, a, b):
        for k2 in range(K // KU):
            for u in range(KU):                     # (unrolled: fewer loop instructions per FMA)
                kk = k2 * KU + u
                for h in range(RM // 4):
                    a[4 * h], a[4 * h + 1], a[4 * h + 2], a[4 * h + 3] = \
                        load4(At, kk * AS + r0 + 4 * h)
                for h in range(CN // 4):
                    b[4 * h], b[4 * h + 1], b[4 * h + 2], b[4 * h + 3] = \
                        load4(B, kk * BS + W * h + 4 * tc)
                for i in range(RM):
                    if not GUARD or a[i] != ZERO:   # (compile-time off unless guarded)
                        for jj in range(CN):
                            c[i, jj] += a[i] * b[jj]    # C[i, j] += At[kk, i] · B[kk, j]

    return product


@lru_cache(maxsize=None)
def qk_product(RM, CN, D, QS, KS, W, KU):
    """S = Qi Kjᵀ (Q already scaled): s zeroed, then ``tile_product`` over the D columns."""
    product = tile_product(RM, CN, D, QS, KS, W, KU)

    @pure_device
    def qk(s, Qt, Kt, r0, tc, a, b):
        for i in range(RM):
            for jj in range(CN):
                s[i, jj] = ZERO
        product(s, Qt, Kt, r0, tc, a, b)            # S[i, j] += Qt[kk, i] · Kt[kk, j]

    return qk


def pv_product(RM, DN, Bc, QS, D, W, KU, GUARD=False):
    """acc += P Vj over the Bc keys of the tile (P from Pᵀ): ``tile_product`` over Bc; GUARD:
    terms with P = 0 skipped (a hidden key adds nothing, even holding NaN/inf)."""
    return tile_product(RM, DN, Bc, QS, D, W, KU, GUARD)    # acc[i, c] += P[i, j] · V[j, c]


@lru_cache(maxsize=None)
def online_softmax(RM, CN, DN, TC):
    """§32's online softmax on my RM rows of the tile: m, l, acc rescaled, s → P = exp(S − m).
    The TC threads of a row agree on its max and sum through shuffles (``lanes_max``,
    ``lanes_sum``)."""

    @pure_device
    def update(s, m, l, acc):
        for i in range(RM):
            row_max = NEG_INF
            for jj in range(CN):
                row_max = max(row_max, s[i, jj])
            new_m = max(m[i], lanes_max(row_max, TC))    # new_m = max(m, rowmax(S))
            m_safe = safe_max(new_m)                     # (0 while the row saw no key)
            correction = fast_exp(m[i] - m_safe)         # correction = exp(m − new_m)
            row_sum = ZERO
            for jj in range(CN):
                s[i, jj] = fast_exp(s[i, jj] - m_safe)   # P = exp(S − new_m)
                row_sum += s[i, jj]
            l[i] = correction * l[i] + lanes_sum(row_sum, TC)   # l = correction·l + rowsum(P)
            for c in range(DN):
                acc[i, c] *= correction                  # acc = correction·acc …
            m[i] = new_m

    return update


@lru_cache(maxsize=None)
def score_mask(RM, CN, W, CAUSAL, PAD):
    """s[i, jj] = −inf where key k0 + col is past n_k, (CAUSAL) after query row0 + i + offset,
    or (PAD) a padding key of batch row b_idx (kpm[b_idx, key] == 0)."""

    @pure_device
    def mask(s, row0, k0, tc, n_k, offset, kpm, b_idx):
        for i in range(RM):
            row = row0 + i
            for jj in range(CN):
                key = k0 + W * (jj // 4) + 4 * tc + (jj & 3)
                if key >= n_k or (CAUSAL and key > row + offset):
                    s[i, jj] = NEG_INF
                elif PAD and kpm[b_idx, key] == 0:  # §35: a padding key takes no part
                    s[i, jj] = NEG_INF

    return mask


@lru_cache(maxsize=None)
def keep_bits(RM, CN, W):
    """§36: bit jj of zbits[i] = whether dropout keeps my entry (row0 + i, column jj): one
    Philox call gives the words of four adjacent keys, and a thread's columns come in fours."""

    @pure_device
    def bits(zbits, seed_lo, seed_hi, bh, row0, k0, tc, threshold):
        for i in range(RM):
            acc_bits = 0
            for h in range(CN // 4):
                jq = (k0 + W * h + 4 * tc) >> 2
                w0, w1, w2, w3 = dropout_words(seed_lo, seed_hi, bh, row0 + i, jq)
                acc_bits |= ((1 if w0 >= threshold else 0) | (2 if w1 >= threshold else 0) |
                             (4 if w2 >= threshold else 0) |
                             (8 if w3 >= threshold else 0)) << (4 * h)
            zbits[i] = acc_bits

    return bits


@lru_cache(maxsize=None)
def p_store(RM, CN, W, QS, DROPOUT):
    """Pᵀ → shared memory: Pt[col·QS + r0 + i] = P[i, jj] (∘ Z = keep / (1 − p) with DROPOUT)."""

    @pure_device
    def store(Pt, s, zbits, r0, tc, inv_keep):
        for i in range(RM):
            for jj in range(CN):
                p_ij = s[i, jj]
                if DROPOUT:
                    p_ij = p_ij * inv_keep if (zbits[i] >> jj) & 1 else ZERO
                Pt[(W * (jj // 4) + 4 * tc + (jj & 3)) * QS + r0 + i] = p_ij

    return store


@lru_cache(maxsize=None)
def o_lse_store(RM, DN, W):
    """The end of the loop (§24): O = acc / l and LSE = m + log l, the only writes to global
    memory — o[q_base + row·d + col], lse[lse_base + row] for my rows below n_q (a row that saw
    no key: O = 0, LSE = −inf)."""

    @pure_device
    def store(o, lse, acc, m, l, q_base, lse_base, q0, r0, tc, n_q, d):
        for i in range(RM):
            row = q0 + r0 + i
            if row < n_q:
                inv_l = safe_reciprocal(l[i])
                for c in range(DN):
                    col = W * (c // 4) + 4 * tc + (c & 3)
                    if col < d:
                        o[q_base + row * d + col] = acc[i, c] * inv_l
                if tc == 0:
                    lse[lse_base + row] = NEG_INF if l[i] == ZERO else m[i] + math.log(l[i])

    return store


@lru_cache(maxsize=None)
def tile_prefetcher(ROWS, D, T, STRIDE, TRANSPOSE, VEC):
    """``tiles.tile_loader`` cut in two: ``fetch`` (global → registers) and ``put`` (registers →
    shared memory), with the same split of the tile over the T threads. Returns (fetch, put,
    REGS): the caller holds ``cuda.local.array(REGS, float32)`` between the two calls."""
    D4 = D // 4                        # 16-byte pieces per row
    TOTAL = ROWS * D4                  # 16-byte pieces per tile
    ITERS = -(-TOTAL // T)             # per thread
    REGS = 4 * ITERS                   # floats in flight per thread
    assert D % 4 == 0

    @cuda.jit(device=True)
    def split(e):
        """Piece e of the tile → (row, first column) inside the tile (tile_loader's split)."""
        if TRANSPOSE:                       # consecutive threads: consecutive rows
            return e % ROWS, 4 * (e // ROWS)
        return e // D4, 4 * (e % D4)        # consecutive threads: consecutive columns

    @cuda.jit(device=True)
    def fetch(src, base, row_stride, row0, n, d, regs):
        tid = cuda.threadIdx.x
        for it in range(ITERS):
            e = it * T + tid
            r, c = split(e)
            row = row0 + r
            for u in range(4):
                regs[4 * it + u] = ZERO             # zeros past n and past d
            if e < TOTAL and row < n:
                if VEC:
                    if c < d:
                        regs[4 * it], regs[4 * it + 1], regs[4 * it + 2], regs[4 * it + 3] = \
                            load4(src, base + row * row_stride + c)
                else:
                    for u in range(4):
                        if c + u < d:
                            regs[4 * it + u] = src[base + row * row_stride + c + u]

    @cuda.jit(device=True)
    def put(regs, dst, scale):
        tid = cuda.threadIdx.x
        for it in range(ITERS):
            e = it * T + tid
            if e < TOTAL:
                r, c = split(e)
                if TRANSPOSE:
                    for u in range(4):
                        dst[(c + u) * STRIDE + r] = regs[4 * it + u] * scale
                else:
                    store4(dst, r * STRIDE + c, regs[4 * it] * scale, regs[4 * it + 1] * scale,
                           regs[4 * it + 2] * scale, regs[4 * it + 3] * scale)

    return fetch, put, REGS
