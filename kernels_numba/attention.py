"""FlashAttention forward (lesson §23–24, §32, §34) and the merge of partial results (§21–22).

The fast tier. Read ``kernels_numba/lesson/attention.py`` first (§32 as one plain kernel, one
thread a query row); the ladder below goes from it to ``flash_forward_kernel``, fp32 on CUDA
cores.

Ladder (lesson tier to fast tier): from the lesson kernel to this file, step by step, at B4 H16
N1024 d64 float32 unless a step says otherwise; TFLOP/s = 4·B·H·N²·d / time (half when causal);
kernel-only CUDA-event medians; "× lesson" = the lesson kernel's time / the step's on the same
inputs. ``flashlesson bench ladder --only attention`` checks and times every step with a timed call,
``--write`` puts its numbers here; a step without one is historical (no longer separable in the
code) and keeps the TFLOP/s recorded then.
| step | what changed                                 | measured                     | timed call                     |
|------|----------------------------------------------|------------------------------|--------------------------------|
| 0    | the lesson kernel (``lesson/attention.py``): | H200, 2026-12-01: 2.5 ms,    | tier='lesson'                  |
|      | a thread a query row, Kj and Vj in shared    | 6.87 TFLOP/s                 |                                |
|      | memory, S and acc in local memory,           |                              |                                |
|      | ``math.exp``; Br 64, Bc 32                   |                              |                                |
| 1    | TR × TC threads, each RM rows × CN columns   | H200, 2026-12-01: 0.767 ms,  | config=FlashConfig(Br=64,      |
|      | of S in registers; Qiᵀ, Kjᵀ, Pᵀ transposed   | 22.4 TFLOP/s, 3.26× lesson   | Bc=64, TR=16, TC=8, KU=1,      |
|      | in shared memory, ``load4``; a row's max and |                              | GROUP=1)                       |
|      | sum by ``lanes_max``/``lanes_sum``;          |                              |                                |
|      | ``fast_exp``; tiles 64 × 64, one 16-byte     |                              |                                |
|      | load in flight at a time (GROUP = 1)         |                              |                                |
|      | (before: 14.8 TFLOP/s at B2 H16 N4096,       |                              |                                |
|      | Nsight: 45% of stalls on global loads)       |                              |                                |
| 2    | tile loads grouped: four 16-byte loads in    | H200, 2026-12-01: 0.717 ms,  | config=FlashConfig(Br=64,      |
|      | flight per thread before their stores        | 24 TFLOP/s, 3.49× lesson     | Bc=64, TR=16, TC=8, KU=1,      |
|      | (``tiles.py``, GROUP = 4) (before: 27        |                              | GROUP=4)                       |
|      | TFLOP/s at B2 H16 N4096)                     |                              |                                |
| 3    | the two inner products unrolled twice (KU =  | H200, 2026-12-01: 0.681 ms,  | config=FlashConfig(Br=64,      |
|      | 2) (before: 29 TFLOP/s at B2 H16 N4096)      | 25.2 TFLOP/s, 3.67× lesson   | Bc=64, TR=16, TC=8, KU=2,      |
|      |                                              |                              | GROUP=4)                       |
| 4    | tiles per head dimension from the sweep      | H200, 2026-12-01: 0.588 ms,  | the defaults                   |
|      | (``GPU_CONFIGS``; d = 64: Br 128, Bc 64, 8 × | 29.2 TFLOP/s, 4.25× lesson   |                                |
|      | 8 per thread, GROUP = 2): the default        |                              |                                |
|      | (before: B1 H16 N4096 28.9 vs 24.5 for (64,  |                              |                                |
|      | 64, 16, 8))                                  |                              |                                |
| 5    | causal (§34): the tiles past the diagonal    | H200, 2026-12-01: 0.342 ms,  | the defaults, causal=True      |
|      | skipped, the heaviest Q tile first on the    | 25.1 TFLOP/s, 6.32× lesson   |                                |
|      | grid (``block_tile``; the order itself is    |                              |                                |
|      | not switchable: before, causal / full time   |                              |                                |
|      | 0.64 → 0.51); against the lesson kernel,     |                              |                                |
|      | causal                                       |                              |                                |
| 6    | §35–36 flags (PAD, DROPOUT, VARLEN),         | historical: H200,            | ``flashlesson bench            |
|      | compiled out when unused                     | 2026-11-30: B4 H16 N1024 d64 | attention``                    |
|      |                                              | 29.4 vs 30.5 TFLOP/s before  |                                |
|      |                                              | (runs vary ±3%)              |                                |
| 7a   | (before step 7: step 4's tiles, 32 blocks    | H200, 2026-12-01: 0.0517 ms, | config=FlashConfig(Br=128,     |
|      | for 132 SMs) (at B1 H16 N256 d64)            | 5.19 TFLOP/s, 3.88× lesson   | Bc=64, TR=16, TC=8, KU=2,      |
|      |                                              |                              | GROUP=2)                       |
| 7    | 32-row tiles when the grid would leave ¾ of  | H200, 2026-12-01: 0.0455 ms, | the defaults                   |
|      | the SMs idle (``SMALL_GRID_CONFIGS``): the   | 5.9 TFLOP/s, 4.41× lesson    |                                |
|      | default here, 128 blocks (at B1 H16 N256     |                              |                                |
|      | d64)                                         |                              |                                |

Menu
| kernel                                   | §            | what                                      |
|------------------------------------------|--------------|-------------------------------------------|
| ``flash_forward_kernel(D, Br, Bc, TR, TC, CAUSAL)`` | 23–24, 32, 34 | one block per (Q tile, batch·head); Qi |
|                                          |              | stays in shared memory, K/V tiles stream  |
|                                          |              | through it; S, m, l, acc live in registers; |
|                                          |              | only O and LSE are written                |
| ``merge_attention_kernel``               | 21–22        | (O, LSE) of disjoint key sets → one (O, LSE) |
|                                          |              | (the combine step of split-KV / flash-decoding) |
| ``row_lse``                              | 19–20, 30    | LSE of each row of a stored S (naive path)  |
| ``pad_scores``, ``dropout_probs``        | 35, 36       | the naive path's padding mask on S and    |
|                                          |              | dropout on P (the flash kernel does both  |
|                                          |              | on its tiles: flags PAD, DROPOUT)         |

The forward kernel beside §32's pseudocode (``reference.flash_attention_tiled`` is the same
loop in NumPy, name for name)::

    for each K/V tile j (keys k0 … k0+Bc):           ← the loop below; causal: stops at the diagonal
        S = Qi Kjᵀ · scale                           ← "S = Qi @ Kj.T": RM×CN per thread
        [diagonal / last tile only: masked → −inf]   ← §34
        new_m = max(m, rowmax(S))                    ← lanes_max over the TC lanes of a row
        correction = exp(m − new_m)
        P = exp(S − new_m)
        l = correction·l + rowsum(P)                 ← lanes_sum over the TC lanes of a row
        acc = correction·acc + P Vj                  ← P goes through shared memory
        m = new_m
    O = acc / l;  LSE = m + log l

Thread layout. The block has T = TR·TC threads; thread (tr, tc) = (tid // TC, tid % TC) owns
  - query rows  tr·RM … tr·RM + RM − 1  (RM = Br/TR; the same rows for S and for O, so its m, l
                                         and acc never leave its registers),
  - S columns   W·h + 4·tc + e          (W = 4·TC, h < CN/4, e < 4; CN = Bc/TC),
  - O columns   W·h + 4·tc + e          (h < DN/4; DN = D/TC).
  Every operand comes from shared memory four floats at a time (``load4``: one 16-byte
  ``ld.shared.v4``), so the inner loops issue (RM + CN)/4 loads per RM·CN multiply-adds; with
  scalar loads the shared-memory pipe, not the FMA units, set the pace. The TC threads of a row
  are TC neighbouring lanes of one warp: a row's max and sum are a butterfly over TC lanes
  (``lanes_max``/``lanes_sum``, §6), with no shared memory.

Shared memory (dynamic, float32; tiles transposed so that a thread's four operands are adjacent):
  Qtᵀ [D][Br+4] (Qi · scale)  |  Kjᵀ [D][Bc+4], then Vj [Bc][D] in the same place  |  Pᵀ [Bc][Br+4]
  The +4 keeps rows 16-byte aligned and moves each row 4 banks over.

Limits: D = the head dimension rounded up to a multiple of 4·TC (columns past d are zeros);
T a multiple of 32; TC a power of 2 ≤ 32; Br a multiple of 4·TR, Bc a multiple of 4·TC.
Inputs are [BH, N, d] float32 arrays (batch and heads flattened, C-contiguous); outputs
O [BH, Nq, d] float32, LSE [BH, Nq] float32 (natural log; −inf and O = 0 for a row that sees no
key). Causal is aligned bottom-right: query i sees key j iff j ≤ i + Nk − Nq (flash-attn ≥ 2.1).

Masked keys contribute exactly nothing, even holding NaN/±inf (docs/api.md): scores masked by select
(s = −inf, never s + (−inf)); keys past Nk (in varlen the next sequence's) are loaded as
zeros, so P = 0 meets V = 0; the tiles that hold hidden keys — every tile with PAD, the causal
diagonal tiles — take the P Vj that skips P = 0 (``flash_steps.pv_product(GUARD)``); the
other tiles' inner loop is unchanged.

How to run: ``flashlesson section 32`` (the NumPy pseudocode and this kernel on the same
input), ``pytest tests/test_attention.py``, ``flashlesson bench attention``.
"""

import math
from functools import lru_cache

from numba import cuda, float32, int64

from .reductions import NEG_INF, ONE, ZERO, fast_exp, lanes_max, lanes_sum, safe_max, \
    safe_reciprocal, warp_merge_ml
from .flash_steps import pv_product
from .jit import pure_device
from .philox import dropout_words
from .tiles import tile_loader
from .vector import load4


@cuda.jit(device=True)
def block_tile(CAUSAL, Br):
    """(bh, q0) of this block: which (batch, head) and the first query row of its Q tile.
    Causal grids are (B·H, Q tiles), heaviest first: the last Q tiles see the most keys, so they
    start in the first wave and the short ones fill the tail (§34). Otherwise (Q tiles, B·H):
    a head's tiles run together (and share its K/V in L2)."""
    if CAUSAL:
        return cuda.blockIdx.x, (cuda.gridDim.y - 1 - cuda.blockIdx.y) * Br
    return cuda.blockIdx.y, cuda.blockIdx.x * Br


@pure_device
def kv_tiles(CAUSAL, q0, Br, Bc, n_q, n_k):
    """§34: how many K/V tiles of Bc keys the Q tile of rows q0 … q0 + Br − 1 visits — all of
    them, or (causal, query i sees key j iff j ≤ i + Nk − Nq) up to the one holding the last
    key its last row sees (none if even that row sees no key)."""
    n_tiles = (n_k + Bc - 1) // Bc
    if CAUSAL:
        last_key = q0 + Br - 1 + (n_k - n_q)        # the last key the tile's last row sees
        n_tiles = min(n_tiles, last_key // Bc + 1) if last_key >= 0 else 0
    return n_tiles


@pure_device
def first_q_tile(CAUSAL, k0, Br, n_q, n_k):
    """§34, seen from a K/V tile starting at key k0: the first Q tile of Br rows with a row that
    sees key k0 (0 unless causal; past the last tile when no query sees it)."""
    return max(k0 - (n_k - n_q), 0) // Br if CAUSAL else 0


@cuda.jit(device=True)
def attention_geometry(bh, heads, d, n_q, n_k, cu_q, cu_k, VARLEN):
    """Where head bh = b·H + h of q/k/v/o/lse lives in the flat arrays, and its lengths.

    Padded layout (q [B·H, Nq, d], lse [B·H, Nq]): rows of d floats, one head after another.
    VARLEN (§35) layout (q [total_q, H, d] packed, sequence b = rows cu_q[b] … cu_q[b+1] − 1;
    lse [total_q, H]): a head's rows are H·d floats apart. Returns
    (n_q, n_k, q_base, k_base, row_stride, lse_base, lse_stride): element (row, c) of the head's
    Q is q[q_base + row·row_stride + c] (K, V, O alike), its LSE lse[lse_base + row·lse_stride].
    """
    if VARLEN:
        b = bh // heads
        h = bh - b * heads
        q_start = cu_q[b]
        k_start = cu_k[b]
        return (cu_q[b + 1] - q_start, cu_k[b + 1] - k_start, (q_start * heads + h) * d,
                (k_start * heads + h) * d, heads * d, q_start * heads + h, heads)
    return n_q, n_k, bh * n_q * d, bh * n_k * d, d, bh * n_q, 1


def flash_smem_floats(D, Br, Bc):
    """Dynamic shared memory of the forward kernel, in float32 elements."""
    return D * (Br + 4) + max(D * (Bc + 4), Bc * D) + Bc * (Br + 4)


@lru_cache(maxsize=None)
def flash_forward_kernel(D, Br, Bc, TR, TC, CAUSAL, VEC=False, KU=1, GROUP=4, PAD=False,
                         DROPOUT=False, VARLEN=False):
    """§32's loop for head dimension ≤ D, Br × Bc tiles, TR × TC threads (all compile-time).
    VEC: q, k, v rows are 16-byte aligned (d % 4 == 0, aligned pointers): 16-byte tile loads.
    KU: the two products' inner loops unrolled KU times. GROUP: tile loads in flight per thread.
    PAD: key_padding_mask (§35). DROPOUT: §36's Philox keep-mask on P. VARLEN: packed
    sequences with cumulative offsets (§35)."""
    T = TR * TC
    RM = Br // TR                  # query rows per thread
    CN = Bc // TC                  # S columns per thread
    DN = D // TC                   # O columns per thread
    W = 4 * TC                     # a warp-row of TC threads covers W adjacent columns
    QS = Br + 4                    # row stride of Qᵀ and Pᵀ (16-byte aligned, banks shifted)
    KS = Bc + 4                    # row stride of Kᵀ
    OFF_KV = D * QS
    OFF_P = OFF_KV + max(D * KS, Bc * D)
    NB = max(DN, CN)               # operand registers for the two products
    assert T % 32 == 0 and 32 % TC == 0 and RM % 4 == 0 and CN % 4 == 0 and DN % 4 == 0
    assert RM * TR == Br and CN * TC == Bc and DN * TC == D
    assert D % KU == 0 and Bc % KU == 0
    load_Qt = tile_loader(Br, D, T, QS, True, VEC, GROUP)   # Qiᵀ · scale
    load_Kt = tile_loader(Bc, D, T, KS, True, VEC, GROUP)   # Kjᵀ
    load_V = tile_loader(Bc, D, T, D, False, VEC, GROUP)    # Vj, row-major

    pv = pv_product(RM, DN, Bc, QS, D, W, KU)                   # acc += P Vj
    pv_guarded = pv_product(RM, DN, Bc, QS, D, W, KU, True)     # … skipping P = 0

    @cuda.jit
    def flash_forward(q, k, v, o, lse, scale, d, n_q, n_k, heads, cu_q, cu_k, kpm,
                      seed_lo, seed_hi, threshold, inv_keep):
        """q, k, v, o, lse: flat float32 arrays (see ``attention_geometry`` for the layouts);
        kpm: uint8 [B, Nk] (PAD); seed_lo, seed_hi, threshold: uint32, inv_keep = 1/(1 − p)
        (DROPOUT); cu_q, cu_k: int32 [B + 1] (VARLEN; then n_q, n_k are unused)."""
        bh, q0 = block_tile(CAUSAL, Br)             # which (batch, head), first query row
        tid = cuda.threadIdx.x
        tr = tid // TC
        tc = tid & (TC - 1)                         # tid % TC, known ≥ 0
        r0 = tr * RM                                # my first row inside the tile
        b_idx = bh // heads                         # the batch row (VARLEN: the sequence)
        n_q, n_k, q_base, k_base, row_stride, lse_base, lse_stride = attention_geometry(
            bh, heads, d, n_q, n_k, cu_q, cu_k, VARLEN)
        if q0 >= n_q:
            return              # (VARLEN: a sequence shorter than the longest; the whole block
                                # leaves together, before any barrier)
        offset = n_k - n_q                          # §34: query i sees key j iff j ≤ i + offset

        smem = cuda.shared.array(0, float32)
        Qt = smem[:OFF_KV]                          # Qᵀ: Qt[c·QS + r] = Q[q0 + r, c] · scale
        KV = smem[OFF_KV:OFF_P]                     # Kᵀ: KV[c·KS + j]; later V: KV[j·D + c]
        Pt = smem[OFF_P:]                           # Pᵀ: Pt[j·QS + r]

        # Qi = Q[q0 : q0+Br] · scale, into shared memory once; zeros past Nq and past d
        load_Qt(q, q_base, row_stride, q0, n_q, d, Qt, scale)

        m = cuda.local.array(RM, float32)           # running row max        (§32: m)
        l = cuda.local.array(RM, float32)           # running row sum        (§32: l)
        acc = cuda.local.array((RM, DN), float32)   # un-normalized output   (§32: acc)
        s = cuda.local.array((RM, CN), float32)     # this tile's scores, then P
        a = cuda.local.array(RM, float32)
        b = cuda.local.array(NB, float32)
        zbits = cuda.local.array(RM, int64)         # §36: the keep bits of my P entries
        for i in range(RM):
            m[i] = NEG_INF
            l[i] = ZERO
            for c in range(DN):
                acc[i, c] = ZERO

        # how many K/V tiles this Q tile visits: all of them, or (causal) up to the diagonal
        n_tiles = kv_tiles(CAUSAL, q0, Br, Bc, n_q, n_k)

        # masked keys contribute nothing, even holding NaN/inf (docs/api.md): keys past Nk (varlen:
        # the next sequence's) are loaded as zeros; the tiles that hold hidden keys (PAD, the
        # causal diagonal) take the P Vj that skips P = 0 (guarded), the others the plain one
        for j in range(n_tiles):
            k0 = j * Bc
            cuda.syncthreads()                      # wait: the previous Vj and P are consumed
            load_Kt(k, k_base, row_stride, k0, n_k, d, KV, ONE)    # Kjᵀ → shared memory
                                                    # (zeros past Nk and past d)
            cuda.syncthreads()                      # wait: Kj (and, first time, Qi) is loaded

            # S = Qi Kjᵀ · scale: an RM × CN outer product per kk, operands four at a time
            for i in range(RM):
                for jj in range(CN):
                    s[i, jj] = ZERO
            for k2 in range(D // KU):
                for u in range(KU):                 # (unrolled: fewer loop instructions per FMA)
                    kk = k2 * KU + u
                    for h in range(RM // 4):
                        a[4 * h], a[4 * h + 1], a[4 * h + 2], a[4 * h + 3] = \
                            load4(Qt, kk * QS + r0 + 4 * h)
                    for h in range(CN // 4):
                        b[4 * h], b[4 * h + 1], b[4 * h + 2], b[4 * h + 3] = \
                            load4(KV, kk * KS + W * h + 4 * tc)
                    for i in range(RM):
                        for jj in range(CN):
                            s[i, jj] += a[i] * b[jj]

            # §34: only the last tile (keys past Nk) and, causal, the diagonal tiles need a mask;
            # §35: with a key padding mask, every tile
            if PAD or k0 + Bc > n_k or (CAUSAL and k0 + Bc - 1 > q0 + offset):
                for i in range(RM):
                    row = q0 + r0 + i
                    for jj in range(CN):
                        key = k0 + W * (jj // 4) + 4 * tc + (jj & 3)
                        if key >= n_k or (CAUSAL and key > row + offset):
                            s[i, jj] = NEG_INF
                        elif PAD and kpm[b_idx, key] == 0:     # a padding key takes no part
                            s[i, jj] = NEG_INF

            # online softmax (§32), one row at a time; the row's TC threads agree via shuffles
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

            if DROPOUT:
                # §36: which of my P entries survive, as bits (bit jj of zbits[i]): one Philox
                # call gives the words of four adjacent keys, and a thread's columns come in
                # fours. Applied below, as P goes to shared memory, after l took the whole P
                # (the softmax is of all scores; dropout only thins what reaches V).
                for i in range(RM):
                    row = q0 + r0 + i
                    bits = 0
                    for h in range(CN // 4):
                        jq = (k0 + W * h + 4 * tc) >> 2
                        w0, w1, w2, w3 = dropout_words(seed_lo, seed_hi, bh, row, jq)
                        bits |= ((1 if w0 >= threshold else 0) | (2 if w1 >= threshold else 0) |
                                 (4 if w2 >= threshold else 0) |
                                 (8 if w3 >= threshold else 0)) << (4 * h)
                    zbits[i] = bits

            cuda.syncthreads()                      # wait: every thread is done with Kj
            for i in range(RM):                     # Pᵀ → shared memory, for the P Vj product
                for jj in range(CN):
                    p_ij = s[i, jj]
                    if DROPOUT:                     # P ∘ Z, Z = keep / (1 − p)
                        p_ij = p_ij * inv_keep if (zbits[i] >> jj) & 1 else ZERO
                    Pt[(W * (jj // 4) + 4 * tc + (jj & 3)) * QS + r0 + i] = p_ij
            load_V(v, k_base, row_stride, k0, n_k, d, KV, ONE)     # Vj, where Kjᵀ was
            cuda.syncthreads()                      # wait: P and Vj are in shared memory

            if PAD or (CAUSAL and k0 + Bc - 1 > q0 + offset):
                pv_guarded(acc, Pt, KV, r0, tc, a, b)   # a hidden key adds nothing
            else:
                pv(acc, Pt, KV, r0, tc, a, b)       # … + P Vj, operands four at a time
                                                    # (no hidden key in this tile)

        # O = acc / l, LSE = m + log l: the only writes to global memory (§24)
        for i in range(RM):
            row = q0 + r0 + i
            if row < n_q:
                inv_l = safe_reciprocal(l[i])       # a row that saw no key: O = 0
                for c in range(DN):
                    col = W * (c // 4) + 4 * tc + (c & 3)
                    if col < d:
                        o[q_base + row * row_stride + col] = acc[i, c] * inv_l
                if tc == 0:
                    at = lse_base + row * lse_stride
                    lse[at] = NEG_INF if l[i] == ZERO else m[i] + math.log(l[i])

    return flash_forward


@cuda.jit
def merge_attention_kernel(o_parts, lse_parts, o, lse):
    """§22 on normalized results: lse = log Σ_p e^{lse_p}; o = Σ_p e^{lse_p − lse} o_p.

    o_parts [P, R, d], lse_parts [P, R] (R = rows: batch·head·query, flattened); one block per
    row, its threads over d. Parts with lse = −inf (no key in that part) weigh 0; if every
    part is −inf the row gets o = 0, lse = −inf.
    """
    row = cuda.blockIdx.x
    n_parts = o_parts.shape[0]
    d = o_parts.shape[2]
    m = NEG_INF
    for p in range(n_parts):
        m = max(m, lse_parts[p, row])               # the largest part: e^{lse_p − m} ≤ 1
    m_safe = safe_max(m)
    total = ZERO
    for p in range(n_parts):
        total += fast_exp(lse_parts[p, row] - m_safe)    # Σ_p e^{lse_p − m}
    inv_total = safe_reciprocal(total)
    for c in range(cuda.threadIdx.x, d, cuda.blockDim.x):
        out = ZERO
        for p in range(n_parts):
            w = fast_exp(lse_parts[p, row] - m_safe) * inv_total   # e^{lse_p − lse}
            if w != ZERO:                           # (skip: an empty part's o may be anything)
                out += w * o_parts[p, row, c]
        o[row, c] = out
    if cuda.threadIdx.x == 0:
        lse[row] = NEG_INF if total == ZERO else m_safe + math.log(total)


@cuda.jit
def pad_scores(s, kpm, heads):
    """§35 on the naive path's stored S [B·H, Nq, Nk]: S[bh, i, j] = −inf where key j of batch
    row b = bh // heads is padding (kpm[b, j] == 0). One thread per element, grid-stride."""
    n_q = s.shape[1]
    n_k = s.shape[2]
    total = s.shape[0] * n_q * n_k
    for e in range(cuda.grid(1), total, cuda.gridsize(1)):
        j = e % n_k
        bh = e // (n_q * n_k)
        if kpm[bh // heads, j] == 0:
            s[bh, (e // n_k) % n_q, j] = NEG_INF


@cuda.jit
def dropout_probs(p, seed_lo, seed_hi, threshold, inv_keep):
    """§36 on the naive path's stored P [B·H, Nq, Nk]: P ← P ∘ Z, Z = keep / (1 − p), the
    same keep-mask as the flash kernel (``dropout_words``): one thread per four keys of a row."""
    n_q = p.shape[1]
    n_k = p.shape[2]
    quads = (n_k + 3) // 4
    total = p.shape[0] * n_q * quads
    for e in range(cuda.grid(1), total, cuda.gridsize(1)):
        jq = e % quads
        i = (e // quads) % n_q
        bh = e // (quads * n_q)
        w0, w1, w2, w3 = dropout_words(seed_lo, seed_hi, bh, i, jq)
        j = 4 * jq
        p[bh, i, j] = p[bh, i, j] * inv_keep if w0 >= threshold else ZERO
        if j + 1 < n_k:
            p[bh, i, j + 1] = p[bh, i, j + 1] * inv_keep if w1 >= threshold else ZERO
        if j + 2 < n_k:
            p[bh, i, j + 2] = p[bh, i, j + 2] * inv_keep if w2 >= threshold else ZERO
        if j + 3 < n_k:
            p[bh, i, j + 3] = p[bh, i, j + 3] * inv_keep if w3 >= threshold else ZERO


@cuda.jit
def row_lse(s, lse):
    """LSE_i = log Σ_j e^{S_ij} of each row of s [R, N], one warp per row: each lane streams its
    columns with §20's update, the lanes merge their (m, l) with §19 (``warp_merge_ml``).
    A row of −inf gives −inf. The naive path's row statistic (§30 keeps it for the backward)."""
    row = (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) // 32
    lane = cuda.threadIdx.x & 31
    n = s.shape[1]
    m = NEG_INF
    l = ZERO
    if row < s.shape[0]:
        for j in range(lane, n, 32):
            x = s[row, j]
            if x != NEG_INF:
                new_m = max(m, x)                   # §20: m_{k+1} = max(m_k, x)
                l = l * fast_exp(m - new_m) + fast_exp(x - new_m)
                m = new_m
    m, l = warp_merge_ml(m, l)                      # §19 across the 32 lanes
    if row < s.shape[0] and lane == 0:
        lse[row] = NEG_INF if l == ZERO else m + math.log(l)
