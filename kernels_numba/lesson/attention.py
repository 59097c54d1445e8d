"""FlashAttention forward, the lesson tier (§23–24, §32, §34 causal skipping, §35 key padding,
§36 dropout, §33's trace): §32's pseudocode as one plain kernel.

Read this before ``kernels_numba/attention.py`` (the fast tier: the same loop with a 2-D
thread layout, transposed tiles, 16-byte loads and 12 compile-time switches).

§14's naive attention needs no lesson kernel of its own: it is GEMM + softmax, and both are
already lesson-tier — ``kernels_numba/gemm.py``'s ``matmul_kernel`` (S = QKᵀ·scale, O = PV) and
``lesson/softmax.py``'s row kernels (P = softmax(S)); ``attention(method="naive",
tier="lesson")`` runs that path with the lesson's softmax.

Menu
| kernel                                      | §                 | what                             |
|---------------------------------------------|-------------------|----------------------------------|
| ``flash_forward(D, Br, Bc, CAUSAL, PAD, DROPOUT)`` | 23–24, 32–36 | one block per (Q tile, batch·head), |
|                                             |                   | thread i owns query row q0 + i   |
| ``online_softmax(S, m, l)`` (device)        | 19–20             | my row's (m, l) meets one tile's |
|                                             |                   | scores: new_m, P, l, correction  |
|                                             |                   | (also ``loop_order.py``'s)       |

The kernel beside §32 (``reference.flash_attention_tiled`` is the same loop in NumPy)::

    Qi → registers (my row)                      m = −inf, l = 0, acc = 0
    for j in tiles this Q tile visits:           §34 causal: stop after the diagonal tile
        Kj, Vj → shared memory                   (zeros past Nk)
        S = Qi Kjᵀ · scale                       masked keys: S = −inf (§34 causal, §35 pad)
        new_m = max(m, rowmax(S))
        P = exp(S − new_m);  correction = exp(m − new_m)
        l = correction·l + rowsum(P)             ← the whole P (dropout comes after)
        acc = correction·acc + (P∘Z) Vj          §36: Z = keep / (1 − p), from Philox
        m = new_m                                [trace: (m, l) of my row after tile j]
    O = acc / l;  LSE = m + log l

Tiles: D = the head dimension d (compile-time), Br query rows = Br threads (any Br ≥ 1, up to
1024), Bc keys per tile (any Bc ≥ 1: §33 runs Bc = 2). Shared memory 2·Bc·D float32 (static);
each thread keeps its row of Qi, its S row (Bc) and acc (D) in local memory. Three compile-time
flags: CAUSAL, PAD, DROPOUT.

Inputs q [BH, Nq, d], k and v [BH, Nk, d] float32 (batch·heads flattened); outputs o [BH, Nq, d]
and lse [BH, Nq] (natural log; −inf and O = 0 for a row that sees no key). Causal is bottom-
right: query i sees key j iff j ≤ i + Nk − Nq. kpm uint8 [B, Nk] (1 = the key takes part),
batch row b = bh // heads. Dropout: element (i, j) of head bh is kept iff its Philox word
(``philox.dropout_keep``) is ≥ threshold — the same mask as the fast kernels and
``reference.philox.dropout_keep_mask``. trace float32 [BH, Nq, n_tiles, 2] (or a dummy with
n_tiles = 0): (m, l) of each row after each K/V tile it visits.

A masked key contributes nothing, even if its K or V row holds NaN/inf: S is masked by select
(never S + (−inf)), and a term with P = 0 is skipped in acc (0·NaN would be NaN).

How to run: ``flashlesson section 33`` (this kernel with the lesson's tiles, its (m, l) after
each tile beside the oracle's); ``pytest tests/test_attention.py -k lesson``.
"""

import math
from functools import lru_cache

from numba import cuda, float32

from ..philox import dropout_keep
from ..reductions import NEG_INF, ONE, ZERO


@cuda.jit(device=True)
def online_softmax(S, m, l):
    """§19–20 for my row and one K/V tile: the state (m, l) meets the tile's scores S (−inf
    where masked). S becomes P = exp(S − new_m) in place; returns (new_m, new_l, correction),
    the caller rescales acc by the correction. Shared by the lesson's flash kernels (here and
    ``loop_order.py``); a row that has seen no key yet keeps m = −inf, l = 0, P = 0."""
    row_max = NEG_INF
    for jj in range(S.shape[0]):
        row_max = max(row_max, S[jj])               # rowmax(S)
    new_m = max(m, row_max)                         # new_m = max(m, rowmax(S))
    m_safe = ZERO if new_m == NEG_INF else new_m    # (no key seen yet: use 0)
    correction = math.exp(m - m_safe)               # correction = exp(m − new_m)
    row_sum = ZERO
    for jj in range(S.shape[0]):
        S[jj] = math.exp(S[jj] - m_safe)            # P = exp(S − new_m)
        row_sum += S[jj]
    return new_m, correction * l + row_sum, correction  # l = correction·l + rowsum(P)


@lru_cache(maxsize=None)
def flash_forward(D, Br, Bc, CAUSAL=False, PAD=False, DROPOUT=False):
    """§32 for head dimension D, Q tiles of Br rows (Br threads), K/V tiles of Bc keys."""

    @cuda.jit
    def flash(q, k, v, o, lse, scale, heads, kpm, seed_lo, seed_hi, threshold, inv_keep,
              trace):
        bh = cuda.blockIdx.y                        # which (batch, head)
        q0 = cuda.blockIdx.x * Br                   # first query row of this Q tile
        i = cuda.threadIdx.x                        # my row inside the tile
        row = q0 + i
        n_q = q.shape[1]
        n_k = k.shape[1]
        offset = n_k - n_q                          # §34: query row sees key iff key ≤ row + offset
        mine = row < n_q                            # (threads past Nq load tiles, compute nothing)
        Kj = cuda.shared.array((Bc, D), float32)
        Vj = cuda.shared.array((Bc, D), float32)
        Qi = cuda.local.array(D, float32)           # my row of Qi, · scale
        S = cuda.local.array(Bc, float32)           # my row of S, then of P
        acc = cuda.local.array(D, float32)
        for c in range(D):
            Qi[c] = q[bh, row, c] * scale if mine else ZERO
            acc[c] = ZERO                           # acc = 0
        m = NEG_INF                                 # m = −inf
        l = ZERO                                    # l = 0

        n_tiles = (n_k + Bc - 1) // Bc
        if CAUSAL:                                  # §34: stop after the tile holding the last
            last_key = q0 + Br - 1 + offset         # key this tile's last row sees
            n_tiles = min(n_tiles, last_key // Bc + 1) if last_key >= 0 else 0

        for j in range(n_tiles):                    # for each K/V tile Kj, Vj
            k0 = j * Bc
            cuda.syncthreads()                      # wait: everyone is done with the last Kj, Vj
            for e in range(i, Bc * D, Br):          # Kj, Vj → shared memory (zeros past Nk)
                key = k0 + e // D
                Kj[e // D, e % D] = k[bh, key, e % D] if key < n_k else ZERO
                Vj[e // D, e % D] = v[bh, key, e % D] if key < n_k else ZERO
            cuda.syncthreads()                      # wait: Kj and Vj are loaded
            if mine:
                for jj in range(Bc):
                    key = k0 + jj
                    s = ZERO
                    for c in range(D):
                        s += Qi[c] * Kj[jj, c]      # S = Qi Kjᵀ · scale
                    if key >= n_k or (CAUSAL and key > row + offset):
                        s = NEG_INF                 # §34: past Nk, or above the diagonal
                    if PAD and key < n_k and kpm[bh // heads, key] == 0:
                        s = NEG_INF                 # §35: a padding key
                    S[jj] = s
                m, l, correction = online_softmax(S, m, l)  # new_m; P = exp(S − new_m);
                #                                     l = correction·l + rowsum(P); m = new_m
                for c in range(D):
                    acc[c] *= correction            # acc = correction·acc …
                for jj in range(Bc):
                    p = S[jj]
                    if DROPOUT and not dropout_keep(seed_lo, seed_hi, bh, row, k0 + jj,
                                                    threshold):
                        p = ZERO                    # §36: P∘Z, Z = 0 (dropped) …
                    elif DROPOUT:
                        p = p * inv_keep            # … or 1/(1 − p) (kept)
                    if p != ZERO:                   # a masked key adds nothing, even NaN
                        for c in range(D):
                            acc[c] += p * Vj[jj, c]     # … + (P∘Z) Vj
                if j < trace.shape[2]:
                    trace[bh, row, j, 0] = m        # §33: my (m, l) after tile j
                    trace[bh, row, j, 1] = l

        if mine:
            inv_l = ZERO if l == ZERO else ONE / l  # a row that saw no key: O = 0
            for c in range(D):
                o[bh, row, c] = acc[c] * inv_l      # O = acc / l
            lse[bh, row] = NEG_INF if l == ZERO else m + math.log(l)    # LSE = m + log l

    return flash
