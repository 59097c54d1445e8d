"""FlashAttention backward (lesson §30–31), with §34 causal, §35 key padding and packed
variable-length sequences, and §36 dropout.

Ladder (lesson tier to fast tier): from the lesson kernel to this file, step by step, at B4 H16
N1024 d64 float32 unless a step says otherwise; TFLOP/s = 10·B·H·N²·d / time (2.5 × the forward's);
kernel-only CUDA-event medians; "× lesson" = the lesson kernel's time / the step's on the same
inputs. ``flashlesson bench ladder --only attention_backward`` checks and times every step with a
timed call, ``--write`` puts its numbers here; a step without one is historical (no longer separable
in the code) and keeps the TFLOP/s recorded then.
| step | what changed                                 | measured                     | timed call                     |
|------|----------------------------------------------|------------------------------|--------------------------------|
| 0    | the lesson kernels (``lesson/backward.py``,  | H200, 2026-12-01: 5.66 ms,   | tier='lesson'                  |
|      | §30): a thread a key (dK/dV) or a query      | 7.58 TFLOP/s                 |                                |
|      | (dQ), its rows in local memory, one tile in  |                              |                                |
|      | shared memory                                |                              |                                |
| 1    | TR × TC threads share a tile, S and dP as    | H200, 2026-12-01: 3.61 ms,   | config=BwdConfig(Bc=64, Br=64, |
|      | register blocks (4 along d per load), Kj, Vj | 11.9 TFLOP/s, 1.57× lesson   | TR=16, TC=8, dq_Br=64,         |
|      | and Qi, dOi in padded shared tiles; the      |                              | dq_Bc=64, dq_TR=16, dq_TC=8)   |
|      | first tiles (64, 64, 16, 8) for both kernels |                              |                                |
|      | (before: 12.5 TFLOP/s vs 4.4 for the naive   |                              |                                |
|      | §31,                                         |                              |                                |
|      | docs/bench_attention_backward_h200.json,     |                              |                                |
|      | 2026-11-30)                                  |                              |                                |
| 2    | tiles per head dimension from a sweep        | H200, 2026-12-01: 3.44 ms,   | the defaults                   |
|      | (``BWD_GPU_CONFIGS``; d = 64: (128, 64, 32,  | 12.5 TFLOP/s, 1.65× lesson   |                                |
|      | 8) both kernels): the default (before: B1    |                              |                                |
|      | H16 N4096 12.7 vs 12.1 for step 1's tiles)   |                              |                                |

Menu
| kernel                                   | §         | what                                    |
|------------------------------------------|-----------|-----------------------------------------|
| ``bwd_preprocess``                       | 30        | D_i = rowsum(dO ∘ O)_i, a thread a row  |
|                                          |           | (any layout of rows: padded or packed)  |
| ``flash_bwd_dkdv_kernel(D, Bc, Br, TR,   | 30, 34–36 | one block per (K/V tile, batch·head):   |
|   TC, CAUSAL, PAD, DROPOUT, VEC,         |           | Kj, Vj stay in shared memory, dKj, dVj  |
|   VARLEN)``                              |           | in registers; Q, dO, LSE, D tiles       |
|                                          |           | stream through; S and P recomputed      |
| ``flash_bwd_dq_kernel(D, Br, Bc, TR,     | 30, 34–36 | one block per (Q tile, batch·head):     |
|   TC, CAUSAL, PAD, DROPOUT, VEC,         |           | Qi, dOi stay, dQi in registers; K/V     |
|   VARLEN)``                              |           | tiles stream through; S, P recomputed   |
| ``naive_probs_kernel(PAD)``              | 31        | a stored S → a stored P = e^{S − LSE}   |
|                                          |           | (in place): the matrix §30 never keeps  |
| ``naive_ds_kernel(DROPOUT)``             | 31        | over stored P and dP: dS = P∘(dP∘Z − D) |
|                                          |           | (in dP's place), P∘Z (in P's place)     |

The two flash kernels' common steps are device functions, written once (factories, cached and
specialized at compile time like ``tiles.tile_loader``: each closes over a thread's tile shape):
``thread_place`` (block and thread → bh, the tile's first row, tc, r0), ``row_products``
(S = A Bᵀ, dP likewise: contracting over d), ``causal_mask`` (§34 on S), ``transposed_store``
(P∘Z, dS into shared memory), ``rows_accumulator`` (dV, dK, dQ += Xᵀ Y: contracting over the
tile's rows), ``rows_writer`` (gradient rows to global memory); and plain ones: ``row_stats``
(LSE, D of a query row), ``dropout_z`` (§36: Z of 4 keys of a query).

§31's naive backward is ``gemm.matmul_kernel`` (S = QKᵀ·scale, dP = dO Vᵀ, dV = (P∘Z)ᵀ dO,
dQ = dS K·scale, dK = dSᵀ Q·scale: five launches, ``TRANS_A`` for the two transposed products)
around the two element-wise kernels: P and dP/dS are [B·H, Nq, Nk] arrays in HBM.

The backward beside §30 (``reference.attention_backward_intermediates`` is the same algebra on
whole matrices)::

    D = rowsum(dO ∘ O)                                  ← bwd_preprocess
    for each K/V tile j (one block of the dK/dV kernel):
        dKj = dVj = 0
        for each Q tile i (causal: from the first query that sees key k0 on):
            S  = Qi Kjᵀ · scale                         ← recomputed, never read back
            P  = exp(S − LSE_i)        [masked → 0]     ← the forward's P, from its saved LSE
            dVj += (P∘Z)ᵀ dOi
            dP = (dOi Vjᵀ) ∘ Z
            dS = P ∘ (dP − D_i)
            dKj += dSᵀ Qi · scale
    for each Q tile i (one block of the dQ kernel):
        dQi = 0
        for each K/V tile j (causal: up to the diagonal):
            S, P, dP, dS as above
            dQi += dS Kj · scale

Z = keep/(1 − p) under dropout (§36: regenerated from (seed, b·H + h, i, j) by Philox, never
stored), Z = 1 without. Why two kernels: FlashAttention-2 computes dQ inside the dK/dV loop and
adds each tile's dS Kj into dQ with atomics, whose order, and so whose rounding, changes from
run to run. Here every gradient element is summed by one thread in a fixed order, and the
gradients are bitwise identical from run to run; the price is that the dQ kernel recomputes S
and dP a second time: 7 matmuls of Nq·Nk·d multiply-adds instead of FlashAttention-2's 5
(1.4× the FLOPs, ``reference.attention_backward_flops`` counts 5).

Thread layout (both kernels, as the forward's): T = TR·TC threads; thread (tr, tc) owns the
block's rows tr·RM … tr·RM + RM − 1 (RM = rows/TR: keys for dK/dV, queries for dQ) and the
columns W·h + 4·tc + e (W = 4·TC, e < 4) of S (CN per thread) and of its gradient rows (DN =
D/TC per thread). Its rows of the gradient, and their accumulators, never leave its registers;
no cross-thread reduction is needed, because the row statistics (LSE, D) come from the forward.

Every tile is row-major in shared memory with a padded row stride (D + 4), loaded by
``tiles.tile_loader``. The products that contract over d (S = Q Kᵀ, dP = dO Vᵀ:
``row_products``) take both operands four at a time *along d* (``load4`` of a row: rows · 4
values, then one ``load4`` per column, 4·RM·CN multiply-adds per (RM + CN) loads); the products
that contract over the tile's rows (dV, dK, dQ: ``rows_accumulator``) take them four at a time
along the output rows and columns, as the forward's P V. So one copy of each tile serves both
kinds of product. The summation order of S is the forward kernel's (kk = 0, 1, 2, … one
multiply-add at a time, on Q · scale): with the LSE that kernel saved, P = e^{S − LSE} is
rebuilt from the very S it exponentiated, so the error of P is that of LSE alone — which
matters when scores are large (|S| ~ 1000: a few float32 ulps of S are ~1e-4, see the outlier
test).

Shared memory (dynamic, float32):
  dK/dV:  Kj, Vj [Bc][D+4]  |  Qi·scale, dOi [Br][D+4]  |  P∘Z, dS [Br][Bc+4]  |  LSE, D [Br]
  dQ:     Qi·scale, dOi [Br][D+4]  |  Kj, Vj [Bc][D+4]  |  dSᵀ [Bc][Br+4]  |  key mask [Bc]
  (+4: rows stay 16-byte aligned and move 4 banks over.)

Masks (bottom-right causal as the forward: query i sees key j iff j ≤ i + Nk − Nq). A row that
sees no key has LSE = −inf; the kernels use +inf in its place, so P = e^{S − ∞} = 0 and its dQ,
and its share of dK and dV, are exactly 0 (never e^{−inf + inf} = NaN). Rows past Nq get the
same +inf; keys past Nk are masked to −inf in the dQ kernel (in the dK/dV kernel they only touch
their own, unwritten, rows). Padded keys (PAD: ``kpm`` uint8 [B, Nk], 0 = padded, indexed with
b = bh // H) are −inf in S, so a padded key gets dK = dV = 0.

Dropout (DROPOUT): ``kernels_numba.philox.dropout_words`` gives the words of 4 adjacent keys of
one query in one Philox call — the thread's keys come in such aligned quads in both kernels
(dK/dV: RM consecutive rows from a multiple of 4; dQ: columns 4·tc + e) — so each call serves
4 elements; element (i, j) is kept iff its word ≥ threshold, as ``philox.dropout_keep``.

Packed variable-length sequences (VARLEN, §35): q, do, dq [total_q, H, d], k, v, dk, dv
[total_k, H, d], lse and D [total_q, H]; sequence b is rows cu_q[b] … cu_q[b+1] − 1 (int32
offsets, cu_k likewise). Block (·, bh = b·H + h) finds its head's rows, their stride (H·d) and
its sequence's lengths n_q,b, n_k,b with the forward's ``attention.attention_geometry``, so
both passes address the arrays the same way; from there the kernels are the padded ones with
Nq = n_q,b and Nk = n_k,b: causal bottom-right per sequence (offset n_k,b − n_q,b), dropout
counters (b·H + h, i, j) with i, j positions inside the sequence (the forward's). The grids are
sized by the longest sequence; a block whose tile starts past its sequence's length returns at
once, the whole block together, before any barrier. An empty sequence gives what the padded
kernels give: n_q,b = 0, every K/V block visits no Q tile and writes dk = dv = 0; n_k,b = 0,
every row's LSE is −inf and dq = 0. ``bwd_preprocess`` needs no flag: both layouts are rows
of d floats in the order of LSE's entries.

Limits: D = d rounded up to a multiple of 4·TC (columns past d are zeros); T a multiple of 32;
TC a power of 2 ≤ 32; the block's rows a multiple of 4·TR, the streamed tile a multiple of 4·TC.
Arguments as the forward kernel's: flat float32 arrays (padded: head bh = b·H + h of a
[B·H, N, d] array starts at bh·N·d, rows d floats apart) — q, do [B·H·Nq·d], k, v [B·H·Nk·d],
lse and D [B·H·Nq] — then scale, d, Nq, Nk, H, cu_q, cu_k (VARLEN; then Nq, Nk are unused),
kpm, seed_lo, seed_hi, threshold, inv_keep = 1/(1 − p). Outputs dq [B·H·Nq·d], dk, dv
[B·H·Nk·d], flat too: every element written. Grids: (⌈Nk/Bc⌉, B·H) for dK/dV, (⌈Nq/Br⌉, B·H)
for dQ (VARLEN: Nk, Nq = the longest sequence's).

How to run: ``flashlesson.attention_backward(do, q, k, v, o, lse, method="flash" | "naive")``,
``flashlesson.varlen_attention_backward(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, ...)``;
``pytest tests/test_attention_backward.py tests/test_varlen_backward.py``.

Masked keys contribute exactly nothing, even holding NaN/±inf (docs/api.md): keys past Nk are
loaded as zeros; scores are masked by select; with CAUSAL or PAD, dS is selected to 0 where
P = 0 (a NaN dP of a hidden key's V row stays out), and the dQ kernel accumulates dS Kj skipping
dS = 0 on the tiles with hidden keys only (PAD: all; causal: the diagonal ones;
``rows_accumulator(GUARD)``). The naive path selects dS = 0 where P = 0 and its dQ = dS K GEMM
skips zeros under a mask.
"""

from functools import lru_cache

import numpy as np
from numba import cuda, float32, float64

from .attention import attention_geometry, first_q_tile, kv_tiles
from .jit import pure_device
from .philox import dropout_keep, dropout_words
from .reductions import NEG_INF, ONE, ZERO, fast_exp
from .tiles import tile_loader
from .vector import load4, store4

POS_INF = np.float32(np.inf)   # a row's LSE when it sees no key: P = e^{S − ∞} = 0


def dkdv_smem_floats(D, Bc, Br):
    """Dynamic shared memory of the dK/dV kernel, in float32 elements."""
    return 2 * Bc * (D + 4) + 2 * Br * (D + 4) + 2 * Br * (Bc + 4) + 2 * Br


def dq_smem_floats(D, Br, Bc):
    """Dynamic shared memory of the dQ kernel, in float32 elements."""
    return 2 * Br * (D + 4) + 2 * Bc * (D + 4) + Bc * (Br + 4) + Bc


@cuda.jit(device=True)
def d_row(o, do, row):
    """§30's D_i = Σ_c dO_ic · O_ic of row ``row`` of o, do [R, d], summed in float64 (exact
    products) and rounded once to float32 (bwd_preprocess says why)."""
    total = float64(0.0)
    for c in range(o.shape[1]):
        total += float64(do[row, c]) * float64(o[row, c])
    return float32(total)


@cuda.jit(device=True)
def d_row4(o, do, row):
    """``d_row`` read 16 bytes a load (rows of d % 4 == 0 floats on 16-byte boundaries): the
    same products summed in the same order, so the same bits. A thread a row touches a
    different row in every lane, so each load of a warp is 32 separate pieces of memory; four
    floats a load make that a quarter as many requests (the 3xTF32 wgmma backward's
    ``stats_kernel``)."""
    total = float64(0.0)
    base = row * o.shape[1]
    for c in range(0, o.shape[1], 4):
        o0, o1, o2, o3 = load4(o, base + c)
        g0, g1, g2, g3 = load4(do, base + c)
        total += float64(g0) * float64(o0)     # D_i = Σ_c dO_ic O_ic, columns c … c + 3
        total += float64(g1) * float64(o1)
        total += float64(g2) * float64(o2)
        total += float64(g3) * float64(o3)
    return float32(total)


@cuda.jit
def bwd_preprocess(o, do, dvec):
    """§30: D_i = Σ_c dO_ic · O_ic for o, do [R, d] (R = B·H·Nq rows, or total_q·H packed:
    either way row r's D lands where its LSE is), dvec [R]. Summed in float64 and rounded once
    (``d_row``):
    dS = P∘(dP − D) cancels in causal rows that see few keys (D ≈ dP there), and a float32 sum
    of d terms gives 3xTF32's dq at B1 H1 N2048 d128 causal 2.7× torch efficient's error (H200,
    2026-12-02); a NumPy emulation of that case (scripts/tf32x3_error.py's arithmetic)
    puts 1.23e-6 of its 2.87e-6 on D's float32 sum and 9e-8 on a float64 one.

    One thread per row, threads striding over the rows (any R, any grid). D is O(R·d) work
    against the O(R·Nk·d) of the main kernels, so the plainest layout does. (A warp per row
    with a §6 butterfly would read coalesced, but costs 5 shuffles a row — and in the simulator
    each simulated shuffle takes milliseconds: 85% of a small backward's run time.)
    With dropout O is the dropped output (P∘Z) V, and D_i = Σ_j P_ij dP_ij still holds."""
    row = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    while row < o.shape[0]:
        dvec[row] = d_row(o, do, row)               # D_i = Σ_c dO_ic O_ic
        row += cuda.gridDim.x * cuda.blockDim.x


# ---------------------------------------------------------------------------------------------
# The steps both flash kernels take, as device functions. Those that loop over a thread's part
# of a tile come from lru_cached factories (as ``tiles.tile_loader``) that close over its shape,
# so every loop count is a compile-time constant: the loops unroll as they did written out in
# the kernels, and the local arrays they fill (S, dP, the accumulators) stay in registers.
# Thread (tr, tc) owns rows r0 … r0 + RM − 1 of the block's tile (r0 = tr·RM) and the columns
# W·(jj // 4) + 4·tc + (jj & 3) (jj < CN of S; c < DN of a gradient row). All but
# ``thread_place`` use no ``cuda.*`` (``pure_device``: plain Python in the simulator).
# ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def thread_place(ROWS, RM, TC):
    """→ ``place()``: where this thread works, in a grid (tiles, B·H) of blocks of tiles of
    ROWS rows (keys for dK/dV, queries for dQ). Returns bh (the block's batch·head), x0 =
    blockIdx.x·ROWS (its tile's first row), tid, and thread (tr, tc) = (tid // TC, tid % TC)'s
    tc and r0 = tr·RM (its first row inside the tile)."""

    @cuda.jit(device=True)
    def place():
        tid = cuda.threadIdx.x
        tc = tid & (TC - 1)                         # tid % TC, known ≥ 0
        return cuda.blockIdx.y, cuda.blockIdx.x * ROWS, tid, tc, (tid // TC) * RM

    return place


@lru_cache(maxsize=None)
def row_products(RM, CN, D, DS, W):
    """→ ``products(out, A, B, r0, tc, a4)``: out[i, jj] = Σ_{c < D} A[r0 + i, c] ·
    B[W·(jj // 4) + 4·tc + (jj & 3), c], A and B tiles stored [rows][DS] (X[r, c] = X[r·DS + c]):
    my RM rows of A against my CN rows of B, a product A Bᵀ that contracts over d (S = Qi Kjᵀ,
    dP = dOi Vjᵀ; in the dK/dV kernel their transposes). Both operands four at a time along d
    (``load4`` of a row, a4: RM × 4 scratch); each out[i, jj] summed c = 0, 1, 2, … one
    multiply-add at a time: the forward kernel's order."""

    @pure_device
    def products(out, A, B, r0, tc, a4):
        for i in range(RM):
            for jj in range(CN):
                out[i, jj] = ZERO
        for kk in range(0, D, 4):
            for i in range(RM):
                a4[i, 0], a4[i, 1], a4[i, 2], a4[i, 3] = load4(A, (r0 + i) * DS + kk)
            for jj in range(CN):
                b0, b1, b2, b3 = load4(B, (W * (jj // 4) + 4 * tc + (jj & 3)) * DS + kk)
                for i in range(RM):
                    out[i, jj] += a4[i, 0] * b0
                    out[i, jj] += a4[i, 1] * b1
                    out[i, jj] += a4[i, 2] * b2
                    out[i, jj] += a4[i, 3] * b3

    return products


@lru_cache(maxsize=None)
def rows_accumulator(RM, DN, PS, DS, W, GUARD=False):
    """→ ``accumulate(acc, X, Y, n, r0, tc, a, b)``: acc[i, c] += Σ_{r < n} X[r, r0 + i] ·
    Y[r, W·(c // 4) + 4·tc + (c & 3)], X stored [r][PS], Y [r][DS]: a product Xᵀ Y that
    contracts over n rows of the streamed tile (dVj += (P∘Z)ᵀ dOi, dKj += dSᵀ Qi; dQi += dS Kj
    from dSᵀ). Operands four at a time along i and c (a: RM, b: DN scratch), as the forward's
    P V. GUARD (dQ's causal diagonal tiles only): a term with X = 0 is skipped, so a key hidden
    from row i adds nothing to it even if its Y row holds NaN/inf (0 · NaN = NaN)."""

    @pure_device
    def accumulate(acc, X, Y, n, r0, tc, a, b):
        for r in range(n):
            for g in range(RM // 4):
                a[4 * g], a[4 * g + 1], a[4 * g + 2], a[4 * g + 3] = \
                    load4(X, r * PS + r0 + 4 * g)
            for h in range(DN // 4):
                b[4 * h], b[4 * h + 1], b[4 * h + 2], b[4 * h + 3] = \
                    load4(Y, r * DS + W * h + 4 * tc)
            for i in range(RM):
                if not GUARD or a[i] != 0.0:        # (compile-time off outside the diagonal)
                    for c in range(DN):
                        acc[i, c] += a[i] * b[c]

    return accumulate


@lru_cache(maxsize=None)
def transposed_store(RM, CN, PS, W):
    """→ ``store_t(r0, tc, dst, x, dst2=None, x2=None)``: dst[(W·(jj // 4) + 4·tc + (jj & 3))·PS
    + r0 + i] = x[i, jj], my RM × CN part of a tile into shared memory transposed (X of
    ``rows_accumulator``), 4 of my rows a 16-byte store; dst2 ← x2 alike, when given (P∘Z and
    dS: one pass, as ``rows_writer``)."""

    @pure_device
    def store_t(r0, tc, dst, x, dst2=None, x2=None):
        for jj in range(CN):
            col = W * (jj // 4) + 4 * tc + (jj & 3)
            for g in range(RM // 4):
                store4(dst, col * PS + r0 + 4 * g, x[4 * g, jj], x[4 * g + 1, jj],
                       x[4 * g + 2, jj], x[4 * g + 3, jj])
                if dst2 is not None:
                    store4(dst2, col * PS + r0 + 4 * g, x2[4 * g, jj], x2[4 * g + 1, jj],
                           x2[4 * g + 2, jj], x2[4 * g + 3, jj])

    return store_t


@lru_cache(maxsize=None)
def causal_mask(RM, CN, W, KEY_ROWS):
    """→ ``mask(s, row0, col0, tc, offset)``: §34, s[i, jj] = −inf where key > query + offset
    (bottom-right: the query does not see the key), for row row0 + i and column col0 +
    W·(jj // 4) + 4·tc + (jj & 3). KEY_ROWS: the rows are keys and the columns queries (dK/dV's
    S = Kj Qiᵀ); else rows are queries (dQ's S = Qi Kjᵀ)."""

    @pure_device
    def mask(s, row0, col0, tc, offset):
        for i in range(RM):
            for jj in range(CN):
                col = col0 + W * (jj // 4) + 4 * tc + (jj & 3)
                key = row0 + i if KEY_ROWS else col
                query = col if KEY_ROWS else row0 + i
                if key > query + offset:
                    s[i, jj] = NEG_INF

    return mask


@lru_cache(maxsize=None)
def rows_writer(RM, DN, W):
    """→ ``write(base, row_stride, row0, n, d, tc, scale, out, acc, out2=None, acc2=None)``:
    out[base + row·row_stride + col] = acc[i, c] · scale for my rows row = row0 + i < n and my
    columns col = W·(c // 4) + 4·tc + (c & 3) < d: a thread's gradient rows to global memory;
    out2 ← acc2 · scale at the same places too, when given (dK and dV: one pass, one address
    computation for both)."""

    @pure_device
    def write(base, row_stride, row0, n, d, tc, scale, out, acc, out2=None, acc2=None):
        for i in range(RM):
            row = row0 + i
            if row < n:
                for c in range(DN):
                    col = W * (c // 4) + 4 * tc + (c & 3)
                    if col < d:
                        out[base + row * row_stride + col] = acc[i, c] * scale
                        if out2 is not None:
                            out2[base + row * row_stride + col] = acc2[i, c] * scale

    return write


@pure_device
def lse_or_inf(x, live):
    """The LSE a backward subtracts, P = e^{S − LSE}: +inf for a row that sees no key (saved
    −inf) or that is not there (live False: past n_q), so that its P = e^{S − ∞} = 0 with no
    test per element."""
    return POS_INF if x == NEG_INF or not live else x


@pure_device
def row_stats(lse, dvec, lse_base, lse_stride, row, n_q):
    """(LSE, D) of query row: LSE as lse_or_inf gives it, D = 0 past n_q."""
    live = row < n_q
    return (lse_or_inf(lse[lse_base + row * lse_stride] if live else NEG_INF, live),
            dvec[lse_base + row * lse_stride] if live else ZERO)


@pure_device
def dropout_z(seed_lo, seed_hi, bh, row, quad, threshold, inv_keep):
    """§36: Z of keys 4·quad … 4·quad + 3 of query row, from one Philox call: inv_keep =
    1/(1 − p) where the key's word ≥ threshold (kept, as ``philox.dropout_keep``), else 0."""
    w0, w1, w2, w3 = dropout_words(seed_lo, seed_hi, bh, row, quad)
    return (inv_keep if w0 >= threshold else ZERO, inv_keep if w1 >= threshold else ZERO,
            inv_keep if w2 >= threshold else ZERO, inv_keep if w3 >= threshold else ZERO)


@lru_cache(maxsize=None)
def flash_bwd_dkdv_kernel(D, Bc, Br, TR, TC, CAUSAL, PAD, DROPOUT, VEC=False, VARLEN=False):
    """dK, dV of one K/V tile of Bc keys per block, Q tiles of Br queries streamed; TR × TC
    threads; head dimension ≤ D (all compile-time). VEC: 16-byte global tile loads. VARLEN:
    packed sequences with cumulative offsets (§35)."""
    T = TR * TC
    RM = Bc // TR                  # keys (rows) per thread
    CN = Br // TC                  # queries (S columns) per thread
    DN = D // TC                   # dK, dV columns per thread
    W = 4 * TC                     # a warp-row of TC threads covers W adjacent columns
    DS = D + 4                     # row stride of the [rows][D] tiles
    PS = Bc + 4                    # row stride of P∘Z and dS, stored [query][key]
    OFF_V = Bc * DS
    OFF_Q = 2 * Bc * DS
    OFF_DO = OFF_Q + Br * DS
    OFF_PZ = OFF_DO + Br * DS
    OFF_DS = OFF_PZ + Br * PS
    OFF_L = OFF_DS + Br * PS
    OFF_D = OFF_L + Br
    END = OFF_D + Br
    assert END == dkdv_smem_floats(D, Bc, Br)
    assert T % 32 == 0 and 32 % TC == 0 and RM % 4 == 0 and CN % 4 == 0 and DN % 4 == 0
    assert RM * TR == Bc and CN * TC == Br and DN * TC == D
    place = thread_place(Bc, RM, TC)                        # a tile of keys per block
    load_rows_k = tile_loader(Bc, D, T, DS, False, VEC)     # Kj or Vj, row-major
    load_rows_q = tile_loader(Br, D, T, DS, False, VEC)     # Qi · scale or dOi, row-major
    products = row_products(RM, CN, D, DS, W)               # S = Kj Qiᵀ, dP = Vj dOiᵀ
    mask_causal = causal_mask(RM, CN, W, True)              # rows are keys
    store_t = transposed_store(RM, CN, PS, W)               # P∘Z, dS → [query][key]
    accumulate = rows_accumulator(RM, DN, PS, DS, W)        # dVj += (P∘Z)ᵀ dOi, dKj += dSᵀ Qi
    write = rows_writer(RM, DN, W)                          # dKj, dVj → dk, dv

    @cuda.jit
    def flash_bwd_dkdv(q, k, v, do, lse, dvec, dk, dv, scale, d, n_q, n_k, heads, cu_q, cu_k,
                       kpm, seed_lo, seed_hi, threshold, inv_keep):
        """Flat float32 arrays: q, do [B·H·Nq·d], k, v, dk, dv [B·H·Nk·d], lse, dvec [B·H·Nq]
        (VARLEN: [total, H, d] and [total_q, H], see ``attention_geometry``); cu_q, cu_k int32
        [B + 1] (VARLEN); kpm uint8 [B, Nk] (PAD); seed_lo, seed_hi, threshold uint32 and
        inv_keep = 1/(1 − p) (DROPOUT)."""
        bh, k0, tid, tc, r0 = place()               # (batch·head, first key), my rows k0 + r0 …
        b_idx = bh // heads                         # the batch row (VARLEN: the sequence)
        # head bh: Q[row, c] = q[q_base + row·row_stride + c], K[key, c] = k[k_base + …],
        # LSE[row] = lse[lse_base + row·lse_stride] (D alike): the forward's addressing
        n_q, n_k, q_base, k_base, row_stride, lse_base, lse_stride = attention_geometry(
            bh, heads, d, n_q, n_k, cu_q, cu_k, VARLEN)
        if k0 >= n_k:
            return              # (VARLEN: a sequence shorter than the longest; the whole block
                                # leaves together, before any barrier)
        offset = n_k - n_q                          # §34: query i sees key j iff j ≤ i + offset

        smem = cuda.shared.array(0, float32)
        Kj = smem[:OFF_V]                           # Kj[r·DS + c] = K[k0 + r, c]
        Vj = smem[OFF_V:OFF_Q]                      # Vj[r·DS + c] = V[k0 + r, c]
        Qi = smem[OFF_Q:OFF_DO]                     # Qi[r·DS + c] = Q[q0 + r, c] · scale
        dOi = smem[OFF_DO:OFF_PZ]                   # dOi[r·DS + c] = dO[q0 + r, c]
        PZ = smem[OFF_PZ:OFF_DS]                    # PZ[r·PS + j] = (P∘Z)[q0 + r, k0 + j]
        dS = smem[OFF_DS:OFF_L]                     # dS[r·PS + j] = dS[q0 + r, k0 + j]
        Li = smem[OFF_L:OFF_D]                      # LSE of the tile's queries (+inf: no key)
        Di = smem[OFF_D:END]                        # D of the tile's queries

        # Kj, Vj: into shared memory once, for the whole loop (zeros past Nk and past d)
        load_rows_k(k, k_base, row_stride, k0, n_k, d, Kj, ONE)
        load_rows_k(v, k_base, row_stride, k0, n_k, d, Vj, ONE)

        dk_acc = cuda.local.array((RM, DN), float32)    # dKj, my rows: Σ over Q tiles
        dv_acc = cuda.local.array((RM, DN), float32)    # dVj, my rows
        s = cuda.local.array((RM, CN), float32)         # S, then P∘Z
        dp = cuda.local.array((RM, CN), float32)        # dP, then dS
        a4 = cuda.local.array((RM, 4), float32)         # my rows, 4 of d at a time
        a = cuda.local.array(RM, float32)
        b = cuda.local.array(DN, float32)
        lc = cuda.local.array(CN, float32)              # LSE of my columns (queries)
        dc = cuda.local.array(CN, float32)              # D of my columns
        z = cuda.local.array(4, float32)                # dropout: Z of 4 keys of one query
        for i in range(RM):
            for c in range(DN):
                dk_acc[i, c] = ZERO
                dv_acc[i, c] = ZERO
        for e in range(4):
            z[e] = ONE

        # which Q tiles see this K/V tile: all of them, or (causal) from the first query that
        # sees key k0, i = k0 − offset, on; none at all when that query is past Nq
        first = first_q_tile(CAUSAL, k0, Br, n_q, n_k)
        n_tiles = (n_q + Br - 1) // Br

        for t in range(first, n_tiles):
            q0 = t * Br
            cuda.syncthreads()                      # wait: the previous Qi, dOi, P∘Z, dS are used
            load_rows_q(q, q_base, row_stride, q0, n_q, d, Qi, scale)
            load_rows_q(do, q_base, row_stride, q0, n_q, d, dOi, ONE)
            for r in range(tid, Br, T):             # (no key, or no row: LSE = +inf, P = 0)
                Li[r], Di[r] = row_stats(lse, dvec, lse_base, lse_stride, q0 + r, n_q)
            cuda.syncthreads()                      # wait: Qi, dOi, LSE, D (first time: Kj, Vj)

            # S = Kj Qiᵀ (Q scaled) and dP = Vj dOiᵀ: RM × CN each, d four at a time
            products(s, Kj, Qi, r0, tc, a4)
            products(dp, Vj, dOi, r0, tc, a4)

            # §35: a padded key is in no score; §34: on the diagonal tiles, keys after the query
            if PAD:
                for i in range(RM):
                    key = k0 + r0 + i
                    if key >= n_k or kpm[b_idx, key] == 0:
                        for jj in range(CN):
                            s[i, jj] = NEG_INF
            if CAUSAL and k0 + Bc - 1 > q0 + offset:
                mask_causal(s, k0 + r0, q0, tc, offset)     # rows: keys, columns: queries

            # P = exp(S − LSE); P∘Z (for dV) and dS = P ∘ (dP∘Z − D) (for dK), in place
            for h in range(CN // 4):
                lc[4 * h], lc[4 * h + 1], lc[4 * h + 2], lc[4 * h + 3] = load4(Li, W * h + 4 * tc)
                dc[4 * h], dc[4 * h + 1], dc[4 * h + 2], dc[4 * h + 3] = load4(Di, W * h + 4 * tc)
            for jj in range(CN):
                row = q0 + W * (jj // 4) + 4 * tc + (jj & 3)
                for g in range(RM // 4):            # keys 4g … 4g + 3 of my rows: one quad
                    if DROPOUT:                     # §36: Z of these 4 keys, one Philox call
                        z[0], z[1], z[2], z[3] = dropout_z(seed_lo, seed_hi, bh, row,
                                                           (k0 + r0 + 4 * g) >> 2, threshold,
                                                           inv_keep)
                    for e in range(4):
                        i = 4 * g + e
                        p = fast_exp(s[i, jj] - lc[jj])             # P = exp(S − LSE)
                        s[i, jj] = p * z[e]                         # P∘Z
                        dp[i, jj] = p * (dp[i, jj] * z[e] - dc[jj])  # dS = P ∘ (dP∘Z − D)
                        if (CAUSAL or PAD) and p == ZERO:   # hidden: dS = 0 even if dP is
                            dp[i, jj] = ZERO        # NaN (a NaN/inf V row; a select)
            store_t(r0, tc, PZ, s, dS, dp)          # P∘Z, dS → [query][key], 4 keys a store
            cuda.syncthreads()                      # wait: the tile's P∘Z and dS are stored

            n_rows = min(Br, n_q - q0)              # (queries past Nq add zeros: skip them)
            accumulate(dv_acc, PZ, dOi, n_rows, r0, tc, a, b)   # dVj += (P∘Z)ᵀ dOi
            accumulate(dk_acc, dS, Qi, n_rows, r0, tc, a, b)    # dKj += dSᵀ (Qi · scale)

        # dKj, dVj: the only writes to global memory (zeros if no query sees the tile)
        write(k_base, row_stride, k0 + r0, n_k, d, tc, ONE, dk, dk_acc, dv, dv_acc)

    return flash_bwd_dkdv


@lru_cache(maxsize=None)
def flash_bwd_dq_kernel(D, Br, Bc, TR, TC, CAUSAL, PAD, DROPOUT, VEC=False, VARLEN=False):
    """dQ of one Q tile of Br queries per block, K/V tiles of Bc keys streamed; TR × TC
    threads; head dimension ≤ D (all compile-time). VEC: 16-byte global tile loads. VARLEN:
    packed sequences with cumulative offsets (§35)."""
    T = TR * TC
    RM = Br // TR                  # queries (rows) per thread
    CN = Bc // TC                  # keys (S columns) per thread
    DN = D // TC                   # dQ columns per thread
    W = 4 * TC
    DS = D + 4                     # row stride of the [rows][D] tiles
    PS = Br + 4                    # row stride of dSᵀ, stored [key][query]
    OFF_DO = Br * DS
    OFF_K = 2 * Br * DS
    OFF_V = OFF_K + Bc * DS
    OFF_DS = OFF_V + Bc * DS
    OFF_M = OFF_DS + Bc * PS
    END = OFF_M + Bc
    assert END == dq_smem_floats(D, Br, Bc)
    assert T % 32 == 0 and 32 % TC == 0 and RM % 4 == 0 and CN % 4 == 0 and DN % 4 == 0
    assert RM * TR == Br and CN * TC == Bc and DN * TC == D
    place = thread_place(Br, RM, TC)                        # a tile of queries per block
    load_rows_q = tile_loader(Br, D, T, DS, False, VEC)     # Qi · scale or dOi, row-major
    load_rows_k = tile_loader(Bc, D, T, DS, False, VEC)     # Kj or Vj, row-major
    products = row_products(RM, CN, D, DS, W)               # S = Qi Kjᵀ, dP = dOi Vjᵀ
    mask_causal = causal_mask(RM, CN, W, False)             # rows are queries
    store_t = transposed_store(RM, CN, PS, W)               # dS → dSᵀ [key][query]
    accumulate = rows_accumulator(RM, DN, PS, DS, W)        # dQi += dS Kj
    accumulate_guarded = rows_accumulator(RM, DN, PS, DS, W, True)  # (diagonal tiles)
    write = rows_writer(RM, DN, W)                          # dQi → dq

    @cuda.jit
    def flash_bwd_dq(q, k, v, do, lse, dvec, dq, scale, d, n_q, n_k, heads, cu_q, cu_k, kpm,
                     seed_lo, seed_hi, threshold, inv_keep):
        """As the dK/dV kernel's arguments; dq flat, q's layout."""
        bh, q0, tid, tc, r0 = place()               # (batch·head, first query), my rows q0 + r0 …
        b_idx = bh // heads                         # the batch row (VARLEN: the sequence)
        # head bh: as in the dK/dV kernel (the forward's addressing)
        n_q, n_k, q_base, k_base, row_stride, lse_base, lse_stride = attention_geometry(
            bh, heads, d, n_q, n_k, cu_q, cu_k, VARLEN)
        if q0 >= n_q:
            return              # (VARLEN: a sequence shorter than the longest; the whole block
                                # leaves together, before any barrier)
        offset = n_k - n_q                          # §34: query i sees key j iff j ≤ i + offset

        smem = cuda.shared.array(0, float32)
        Qi = smem[:OFF_DO]                          # Qi[r·DS + c] = Q[q0 + r, c] · scale
        dOi = smem[OFF_DO:OFF_K]                    # dOi[r·DS + c] = dO[q0 + r, c]
        Kj = smem[OFF_K:OFF_V]                      # Kj[j·DS + c] = K[k0 + j, c]
        Vj = smem[OFF_V:OFF_DS]                     # Vj[j·DS + c] = V[k0 + j, c]
        dSt = smem[OFF_DS:OFF_M]                    # dSᵀ: dSt[j·PS + r] = dS[q0 + r, k0 + j]
        Mj = smem[OFF_M:END]                        # 0, or −inf for a key past Nk or padded

        # Qi · scale and dOi: into shared memory once (zeros past Nq and past d)
        load_rows_q(q, q_base, row_stride, q0, n_q, d, Qi, scale)
        load_rows_q(do, q_base, row_stride, q0, n_q, d, dOi, ONE)

        acc = cuda.local.array((RM, DN), float32)   # dQi / scale, my rows
        s = cuda.local.array((RM, CN), float32)     # S, then P
        dp = cuda.local.array((RM, CN), float32)    # dP, then dS
        a4 = cuda.local.array((RM, 4), float32)     # my rows, 4 of d at a time
        a = cuda.local.array(RM, float32)
        b = cuda.local.array(DN, float32)
        lr = cuda.local.array(RM, float32)          # LSE of my rows (+inf: the row sees no key)
        dr = cuda.local.array(RM, float32)          # D of my rows
        mc = cuda.local.array(CN, float32)          # key mask of my columns
        z = cuda.local.array(4, float32)            # dropout: Z of 4 keys of one query
        for i in range(RM):
            lr[i], dr[i] = row_stats(lse, dvec, lse_base, lse_stride, q0 + r0 + i, n_q)
            for c in range(DN):
                acc[i, c] = ZERO
        for e in range(4):
            z[e] = ONE

        # how many K/V tiles this Q tile visits: all of them, or (causal) up to the diagonal
        n_tiles = kv_tiles(CAUSAL, q0, Br, Bc, n_q, n_k)
        # hidden keys add nothing even holding NaN/inf (docs/api.md): keys past Nk are loaded as
        # zeros; the tiles with hidden keys (PAD, the causal diagonal) take the dS Kj that
        # skips dS = 0 (guarded), the others the plain one

        for j in range(n_tiles):
            k0 = j * Bc
            cuda.syncthreads()                      # wait: the previous Kj and dS are used
            load_rows_k(k, k_base, row_stride, k0, n_k, d, Kj, ONE)
            load_rows_k(v, k_base, row_stride, k0, n_k, d, Vj, ONE)
            for r in range(tid, Bc, T):             # §35: padded keys, and keys past Nk, are −inf
                key = k0 + r
                ok = key < n_k
                if PAD and ok:
                    ok = kpm[b_idx, key] != 0
                Mj[r] = ZERO if ok else NEG_INF
            cuda.syncthreads()                      # wait: Kj, Vj, the mask (first: Qi, dOi)

            # S = Qi Kjᵀ (Q scaled) and dP = dOi Vjᵀ: RM × CN each, d four at a time
            products(s, Qi, Kj, r0, tc, a4)
            products(dp, dOi, Vj, r0, tc, a4)

            # masks: keys past Nk and padded keys (§35) on the tiles that have them; §34 the
            # diagonal tiles (as in the forward: the other tiles need no test)
            if PAD or k0 + Bc > n_k:
                for h in range(CN // 4):
                    mc[4 * h], mc[4 * h + 1], mc[4 * h + 2], mc[4 * h + 3] = \
                        load4(Mj, W * h + 4 * tc)
                for i in range(RM):
                    for jj in range(CN):            # a select, not S + (−inf): NaN + (−inf)
                        if mc[jj] != ZERO:          # would stay NaN (a NaN/inf K row)
                            s[i, jj] = NEG_INF
            if CAUSAL and k0 + Bc - 1 > q0 + offset:
                mask_causal(s, q0 + r0, k0, tc, offset)     # rows: queries, columns: keys

            # P = exp(S − LSE), dS = P ∘ (dP∘Z − D), in place
            for i in range(RM):
                row = q0 + r0 + i
                for h in range(CN // 4):            # keys W·h + 4·tc + e, e < 4: one quad
                    if DROPOUT:                     # §36: Z of these 4 keys, one Philox call
                        z[0], z[1], z[2], z[3] = dropout_z(seed_lo, seed_hi, bh, row,
                                                           (k0 + W * h + 4 * tc) >> 2,
                                                           threshold, inv_keep)
                    for e in range(4):
                        jj = 4 * h + e
                        p = fast_exp(s[i, jj] - lr[i])              # P = exp(S − LSE)
                        dp[i, jj] = p * (dp[i, jj] * z[e] - dr[i])  # dS = P ∘ (dP∘Z − D)
                        if (CAUSAL or PAD) and p == ZERO:   # hidden: dS = 0 even if dP is
                            dp[i, jj] = ZERO        # NaN (a NaN/inf V row; a select)
            store_t(r0, tc, dSt, dp)                # dSᵀ → shared memory, 4 queries a store
            cuda.syncthreads()                      # wait: the tile's dS is stored

            n_keys = min(Bc, n_k - k0)              # (keys past Nk add zeros: skip them)
            if PAD or (CAUSAL and k0 + Bc - 1 > q0 + offset):
                accumulate_guarded(acc, dSt, Kj, n_keys, r0, tc, a, b)  # hidden keys: nothing
            else:
                accumulate(acc, dSt, Kj, n_keys, r0, tc, a, b)  # dQi += dS Kj

        # dQi = acc · scale: the only write to global memory (zeros for a row that sees no key)
        write(q_base, row_stride, q0 + r0, n_q, d, tc, scale, dq, acc)

    return flash_bwd_dq


# ---------------------------------------------------------------------------------------------
# §31: the naive backward's element-wise kernels, over [B·H, Nq, Nk] matrices in global memory.
# Grid-stride loops over the flattened matrix (any size); one element per thread per step.
# ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def naive_probs_kernel(PAD):
    """P = exp(S − LSE), written over S (s [BH, Nq, Nk], lse [BH, Nq]); padded keys (§35,
    kpm uint8 [B, Nk], b = bh // heads) and rows with LSE = −inf give P = 0. Causal keys are
    already −inf in S (the GEMM wrote them)."""

    @cuda.jit
    def naive_probs(s, lse, kpm, heads):
        n_q = s.shape[1]
        n_k = s.shape[2]
        total = s.shape[0] * n_q * n_k
        e = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        while e < total:
            row = e // n_k                          # (bh, i) flattened
            j = e - row * n_k
            bh = row // n_q
            i = row - bh * n_q
            x = lse[bh, i]
            p = fast_exp(s[bh, i, j] - lse_or_inf(x, True))             # P = e^{S − LSE}
            if PAD:
                if kpm[bh // heads, j] == 0:
                    p = ZERO
            s[bh, i, j] = p
            e += cuda.gridDim.x * cuda.blockDim.x

    return naive_probs


@lru_cache(maxsize=None)
def naive_ds_kernel(DROPOUT):
    """dS = P ∘ (dP∘Z − D), written over dP; with DROPOUT also P∘Z, written over P (the
    operand of dV = (P∘Z)ᵀ dO). p, dp [BH, Nq, Nk], dvec [BH, Nq]."""

    @cuda.jit
    def naive_ds(p, dp, dvec, seed_lo, seed_hi, threshold, inv_keep):
        n_q = p.shape[1]
        n_k = p.shape[2]
        total = p.shape[0] * n_q * n_k
        e = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        while e < total:
            row = e // n_k
            j = e - row * n_k
            bh = row // n_q
            i = row - bh * n_q
            pij = p[bh, i, j]
            z = ONE
            if DROPOUT:                             # §36: Z regenerated, not stored
                z = inv_keep if dropout_keep(seed_lo, seed_hi, bh, i, j, threshold) else ZERO
                p[bh, i, j] = pij * z               # P∘Z
            ds = pij * (dp[bh, i, j] * z - dvec[bh, i])     # dS = P ∘ (dP∘Z − D)
            dp[bh, i, j] = ZERO if pij == ZERO else ds      # hidden (P = 0): 0, even if dP
            e += cuda.gridDim.x * cuda.blockDim.x           # is NaN (a NaN/inf V row)

    return naive_ds
