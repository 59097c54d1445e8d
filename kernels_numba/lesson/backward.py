"""§30 — the FlashAttention backward, lesson tier: three plain kernels, read top to bottom.

Menu (reach them with ``flashlesson.attention_backward(..., tier="lesson")``; the NumPy twin,
line for line, is ``reference.flash_attention_backward_tiled``)::

    D_kernel                       D_i = Σ_c dO_ic O_ic, one thread per row            §30
    dkdv_kernel(d, Br, Bc, CAUSAL, PAD)
                                   one block per K/V tile, one thread per key of it; the
                                   Q tiles stream through: Sᵀ, Pᵀ recomputed from Q, K and
                                   the saved LSE; dVj += Pᵀ dOi, dPᵀ = Vj dOiᵀ,
                                   dSᵀ = Pᵀ ∘ (dPᵀ − D), dKj += dSᵀ Qi · scale             §30, §34–35
    dq_kernel(d, Br, Bc, CAUSAL, PAD)
                                   one block per Q tile, one thread per query of it; the
                                   K/V tiles stream through: S, P, dP, dS again, and
                                   dQi += dS Kj · scale                                     §30, §34–35

The formulas (per (batch, head); §30, see ``reference/attention_backward.py``)::

    P  = exp(S − LSE)       S = Q Kᵀ · scale, LSE the forward's saved row statistic
    dV = Pᵀ dO              dP = dO Vᵀ              D = rowsum(dO ∘ O) = rowsum(P ∘ dP)
    dS = P ∘ (dP − D)       dQ = dS K · scale       dK = dSᵀ Q · scale

Why two kernels: dK and dV of a key sum over all queries, dQ of a query over all keys. A block
that owns a K/V tile can sum dKj and dVj alone (its thread of key j loops over every query); dQ
would need atomics across blocks (FlashAttention-2 does that). Here dQ gets its own pass, which
recomputes S and dP once more and stays deterministic.

Compile-time arguments: d the head dimension (the length of every row a thread keeps), Br the
queries of a Q tile, Bc the keys of a K/V tile (any sizes ≥ 1, e.g. §33's Bc = 2; the block
has Bc threads in the dK/dV kernel, Br in the dQ kernel), CAUSAL (§34, bottom-right: query i
sees key j iff j ≤ i + Nk − Nq), PAD (§35: ``kpm`` uint8 [B, Nk], 0 = padded key).

Masked pairs contribute nothing, even if the key's K or V row holds NaN or inf: they are
skipped (a select, never S + (−inf)), so P = 0 there and its terms are simply not added. A
padded key gets dk = dv = 0; a query that sees no key gets dq = 0.

Arrays: float32 q, do, o, dq [B·H, Nq, d]; k, v, dk, dv [B·H, Nk, d]; lse, D [B·H, Nq];
kpm uint8 [B, Nk] (a [1, 1] dummy without PAD); heads = H (batch b = bh // H).
Grids: dK/dV (⌈Nk/Bc⌉, B·H) × Bc threads; dQ (⌈Nq/Br⌉, B·H) × Br threads; D a thread a row.
Simple first: one thread does a whole row of work with plain float32 ``math.exp``; the fast
tier (``kernels_numba/attention_backward.py``) says step by step what it changed and bought.
"""

import math
from functools import lru_cache

from numba import cuda, float32

from ..reductions import ZERO


@cuda.jit
def D_kernel(o, do, D):
    """§30: D_i = Σ_c dO_ic O_ic for rows o, do [R, d] → D [R] (R = B·H·Nq), a thread a row."""
    i = cuda.grid(1)
    if i < o.shape[0]:
        total = ZERO
        for c in range(o.shape[1]):
            total += do[i, c] * o[i, c]             # D_i = Σ_c dO_ic O_ic
        D[i] = total


@lru_cache(maxsize=None)
def dkdv_kernel(d, Br, Bc, CAUSAL, PAD):
    """dK, dV of one K/V tile per block; the thread of key j keeps its rows of Kj, Vj, dKj, dVj."""

    @cuda.jit
    def dkdv(q, k, v, do, lse, D, dk, dv, scale, heads, kpm):
        bh = cuda.blockIdx.y                        # (batch, head)
        k0 = cuda.blockIdx.x * Bc                   # this block's K/V tile: keys k0 … k0 + Bc − 1
        jj = cuda.threadIdx.x
        key = k0 + jj                               # my key j
        n_q, n_k = q.shape[1], k.shape[1]
        offset = n_k - n_q                          # §34: query i sees key j iff j ≤ i + offset
        mine = key < n_k                            # a key of the tile (the last tile is shorter)
        if PAD and mine:
            mine = kpm[bh // heads, key] != 0       # §35: a padded key gets dk = dv = 0

        Qi = cuda.shared.array((Br, d), float32)    # the Q tile, shared by the block's keys
        dOi = cuda.shared.array((Br, d), float32)
        LSE_i = cuda.shared.array(Br, float32)
        D_i = cuda.shared.array(Br, float32)
        Kj = cuda.local.array(d, float32)           # my row of Kj, Vj, dKj, dVj
        Vj = cuda.local.array(d, float32)
        dKj = cuda.local.array(d, float32)
        dVj = cuda.local.array(d, float32)
        for c in range(d):
            Kj[c] = k[bh, key, c] if mine else ZERO
            Vj[c] = v[bh, key, c] if mine else ZERO
            dKj[c] = ZERO                           # dKj = 0
            dVj[c] = ZERO                           # dVj = 0

        # §34: the Q tiles before the first query that sees key k0 see none of the tile's keys
        first = max(k0 - offset, 0) // Br if CAUSAL else 0
        for q0 in range(first * Br, n_q, Br):       # for each Q tile Qi (rows q0 … q0 + Br − 1):
            cuda.syncthreads()                      # wait: every key is done with the last Qi
            for r in range(jj, Br, Bc):             # load Qi, dOi, LSE_i, D_i together
                i = min(q0 + r, n_q - 1)            # (rows past Nq: a copy, never used)
                LSE_i[r] = lse[bh, i]
                D_i[r] = D[bh, i]
                for c in range(d):
                    Qi[r, c] = q[bh, i, c]
                    dOi[r, c] = do[bh, i, c]
            cuda.syncthreads()                      # wait: the Q tile is loaded
            if mine:
                for r in range(min(Br, n_q - q0)):  # each query i of the tile
                    if CAUSAL and key > q0 + r + offset:
                        continue                    # §34: hidden pair, P = 0: adds nothing
                    ST = ZERO                       # Sᵀ[j, i] = Kj · Qi · scale
                    dPT = ZERO                      # dPᵀ[j, i] = Vj · dOi
                    for c in range(d):
                        ST += Kj[c] * Qi[r, c]
                        dPT += Vj[c] * dOi[r, c]
                    ST *= scale
                    PT = math.exp(ST - LSE_i[r])    # Pᵀ = exp(Sᵀ − LSE_i): the forward's P
                    dST = PT * (dPT - D_i[r])       # dSᵀ = Pᵀ ∘ (dPᵀ − D_i)
                    for c in range(d):
                        dVj[c] += PT * dOi[r, c]            # dVj += Pᵀ dOi
                        dKj[c] += dST * Qi[r, c] * scale    # dKj += dSᵀ Qi · scale

        if key < n_k:                               # write dKj, dVj (a padded key: zeros)
            for c in range(d):
                dk[bh, key, c] = dKj[c]
                dv[bh, key, c] = dVj[c]

    return dkdv


@lru_cache(maxsize=None)
def dq_kernel(d, Br, Bc, CAUSAL, PAD):
    """dQ of one Q tile per block; the thread of query i keeps its rows of Qi, dOi, dQi."""

    @cuda.jit
    def dq_(q, k, v, do, lse, D, dq, scale, heads, kpm):
        bh = cuda.blockIdx.y                        # (batch, head)
        q0 = cuda.blockIdx.x * Br                   # this block's Q tile: queries q0 … q0 + Br − 1
        r = cuda.threadIdx.x
        i = q0 + r                                  # my query i
        n_q, n_k = q.shape[1], k.shape[1]
        offset = n_k - n_q                          # §34: query i sees key j iff j ≤ i + offset
        mine = i < n_q

        Kj = cuda.shared.array((Bc, d), float32)    # the K/V tile, shared by the block's queries
        Vj = cuda.shared.array((Bc, d), float32)
        Qi = cuda.local.array(d, float32)           # my row of Qi, dOi, dQi
        dOi = cuda.local.array(d, float32)
        dQi = cuda.local.array(d, float32)
        for c in range(d):
            Qi[c] = q[bh, i, c] if mine else ZERO
            dOi[c] = do[bh, i, c] if mine else ZERO
            dQi[c] = ZERO                           # dQi = 0
        LSE_i = lse[bh, i] if mine else ZERO
        D_i = D[bh, i] if mine else ZERO

        # §34: the tile's last query sees keys up to q0 + Br − 1 + offset; no tile after that
        last = min(n_k, q0 + Br + offset) if CAUSAL else n_k
        for k0 in range(0, last, Bc):               # for each K/V tile Kj, Vj (keys k0 …):
            cuda.syncthreads()                      # wait: every query is done with the last Kj
            for jj in range(r, Bc, Br):             # load Kj, Vj together
                key = min(k0 + jj, n_k - 1)         # (keys past Nk: a copy, never used)
                for c in range(d):
                    Kj[jj, c] = k[bh, key, c]
                    Vj[jj, c] = v[bh, key, c]
            cuda.syncthreads()                      # wait: the K/V tile is loaded
            if mine:
                for jj in range(min(Bc, n_k - k0)):     # each key j of the tile
                    key = k0 + jj
                    if CAUSAL and key > i + offset:
                        continue                    # §34: hidden, P = 0: adds nothing
                    if PAD and kpm[bh // heads, key] == 0:
                        continue                    # §35: a padded key, P = 0: adds nothing
                    S = ZERO                        # S = Qi · Kj · scale
                    dP = ZERO                       # dP = dOi · Vj
                    for c in range(d):
                        S += Qi[c] * Kj[jj, c]
                        dP += dOi[c] * Vj[jj, c]
                    S *= scale
                    P = math.exp(S - LSE_i)         # P = exp(S − LSE_i)
                    dS = P * (dP - D_i)             # dS = P ∘ (dP − D_i)
                    for c in range(d):
                        dQi[c] += dS * Kj[jj, c]    # dQi += dS Kj  (· scale at the write)

        if mine:                                    # write dQi · scale
            for c in range(d):
                dq[bh, i, c] = dQi[c] * scale

    return dq_
