"""§37 — FlashAttention forward on tensor cores: QKᵀ and PV on ``mma.sync``, softmax on CUDA cores.

Menu
| kernel                                            | what                                         |
|---------------------------------------------------|----------------------------------------------|
| ``flash_tc_kernel(D, Bc, WARPS, CAUSAL, PAD, BF16, | fp16 or bf16 Q, K, V (fp32 accumulation):  |
|   MT, PF, ASYNC, d, FOLD)``                       | S = Q Kᵀ and O += P V as m16n8k16 mmas;       |
|                                                   | MT row blocks per warp, PF register prefetch, |
|                                                   | ASYNC cp.async tiles + ldmatrix fragments;    |
|                                                   | FOLD (scale > 0): scale·log2e inside the      |
|                                                   | softmax's FFMAs (``fold_scale``)              |
| ``flash_tf32x3_kernel(D, Bc, WARPS, CAUSAL, PAD)``| float32 Q, K, V on tensor cores with 3xTF32: |
|                                                   | x = big + small, a·b ≈ big·big + big·small +  |
|                                                   | small·big (m16n8k8 tf32), each k8 step summed |
|                                                   | from zero, added on the CUDA cores (mma3):    |
|                                                   | fp32 accuracy                                 |

Ladder (lesson tier to fast tier): from the lesson kernel to this file, step by step, at B4 H16
N1024 d64 float16 unless a step says otherwise; TFLOP/s = 4·B·H·N²·d / time (half when causal);
kernel-only CUDA-event medians; "× lesson" = the lesson kernel's time / the step's on the same
inputs. ``flashlesson bench ladder --only attention_tc`` checks and times every step with a timed
call, ``--write`` puts its numbers here; a step without one is historical (no longer separable in
the code) and keeps the TFLOP/s recorded then.
| step | what changed                                 | measured                     | timed call                     |
|------|----------------------------------------------|------------------------------|--------------------------------|
| 0    | the lesson kernel                            | H200, 2026-12-01: 3.13 ms,   | method='flash_tc',             |
|      | (``lesson/tensor_core.py``, §37): one warp   | 5.48 TFLOP/s                 | tier='lesson'                  |
|      | per 16 rows, K/V tiles of 16 keys loaded     |                              |                                |
|      | plainly, natural-log softmax, l per row      |                              |                                |
| 1    | several warps a block (4), fragments         | H200, 2026-12-01: 0.102 ms,  | method='flash_tc',             |
|      | straight from words, MT = 2 row blocks per   | 169 TFLOP/s, 30.79× lesson   | config=TcConfig(Bc=64,         |
|      | warp, tiles through registers (before: 0.59× |                              | WARPS=4, MT=2, PF=False,       |
|      | torch SDPA flash at B2 H16 N4096,            |                              | ASYNC=False)                   |
|      | 2026-11-30)                                  |                              |                                |
| 2    | ASYNC: cp.async K/V stages, ldmatrix         | H200, 2026-12-01: 0.0773 ms, | method='flash_tc',             |
|      | fragments (before: 0.74×)                    | 222 TFLOP/s, 40.53× lesson   | config=TcConfig(Bc=64,         |
|      |                                              |                              | WARPS=4, MT=2, PF=False,       |
|      |                                              |                              | ASYNC=True)                    |
| 3    | 8 warps: the default (``default_tc_config``) | H200, 2026-12-01: 0.0765 ms, | method='flash_tc'              |
|      | (before: 0.80×)                              | 225 TFLOP/s, 40.96× lesson   |                                |
| 4    | base-2 exponentials (``mma.ex2``, log2e      | historical: H200,            | ``flashlesson bench attention  |
|      | folded into the scale), 32-bit shared        | 2026-11-30: 0.90× SDPA flash | --tc``                         |
|      | addresses: in steps 1–3 as run today, not    | at B2 H16 N4096 d64          |                                |
|      | switchable                                   | (0.77–0.99× over the sizes)  |                                |
| tf32 | float32 inputs on the tensor cores, 3xTF32   | H200, 2026-12-01: 0.725 ms,  | method='flash_tc'              |
|      | (``flash_tf32x3_kernel``: three tf32 mmas a  | 23.7 TFLOP/s, 3.45× lesson   |                                |
|      | product, each k8 step summed from zero and   | (step 0f)                    |                                |
|      | added on the CUDA cores: the staged          |                              |                                |
|      | accumulation), against the float32 lesson    |                              |                                |
|      | kernel of §32 (before the staging: 30.3      |                              |                                |
|      | TFLOP/s, 3–94× torch efficient's error)      |                              |                                |
|      | (float32)                                    |                              |                                |
| 0f   | (the lesson kernel of step tf32:             | H200, 2026-12-01: 2.5 ms,    | tier='lesson'                  |
|      | ``lesson/attention.py``, CUDA cores)         | 6.86 TFLOP/s                 |                                |
|      | (float32)                                    |                              |                                |

The same loop as ``flash_forward_kernel`` (kernels_numba/attention.py, §32), with the two
products moved to the tensor cores (§37)::

    for each K/V tile j:
        S = Qi Kjᵀ                  ← mma: A = Q fragment (registers), B = K rows (shared memory)
        masked → −inf               ← CUDA cores, from here …
        new_m = max(m, rowmax(S)·c) ← c = scale·log2e; a row's 4 lanes (one quad) agree with 2
                                      shuffles
        correction = 2^(m − new_m)  ← base 2: one ex2 each (mma.ex2), = e^(·) of the lesson's
        P = 2^(S·c − new_m)         ← one FFMA and one ex2 an entry (c ≤ 0: S·c first, c = 1;
        l = correction·l + rowsum(P)  fold_scale)                m, S in natural units
        acc = correction·acc        ← … to here
        acc += P Vj                 ← mma: A = P straight from S's accumulators, B = Vᵀ (shared)
    O = acc / l;  LSE = m·ln2 + ln l

Who holds what. A block is WARPS warps; warp w owns query rows q0 + 16w … q0 + 16w + 15 (Br =
16·WARPS). In the m16n8 accumulator layout (kernels_numba/mma.py) lane 4g + t holds rows g and
g + 8 of the warp's 16, columns 2t, 2t + 1 of every 8-column block: so m, l, S, P and acc of a
row live in the 4 lanes of one quad, and a row max is two ``shfl_xor`` (§6). l stays a per-lane
partial sum until the end (the correction is the same for the quad's 4 lanes).

Memory. Q fragments are loaded once into registers (4·D/16 words per lane). Per K/V tile, K is
copied to shared memory as it is (rows of D/2 words: b0 of Kᵀ's fragment is one word of a K
row) and V transposed (Vᵀ[c][key pair]: the fragment of B = V needs two keys' halves of one
column in one word; ``pair_lo``/``pair_hi`` regroup them). Row strides are padded by 4 words,
which puts the 8 rows a fragment load touches in 8 different bank groups. fp16/bf16 operands
arrive as uint32 words (two halves), so every copy is 16-byte ``load4``/``store4``; O is
written the same way, LSE as float32.

ASYNC (§42 on tensor cores). K and V rows go to shared memory by ``cp.async`` (vector.py), the
next tile's while this one is computed, with no registers held for them; B fragments come from
the rows by ``ldmatrix`` (mma.py): K's as they are, V's through ``.trans``, so no Vᵀ copy is
made. One barrier a tile: wait for my copies, barrier, start the next tile's, compute.

Limits: fp16/bf16 any head dim d in 1 … 256: the kernel's compile-time D is d rounded up to a
multiple of 16 (``padded_head_dim``), the true d a compile-time bound (``head_io``): columns
d … D − 1 are loaded as zeros (so they add 0 to S = Q Kᵀ, and acc's are 0) and never written.
Rows travel as 16-byte pieces when d % 8 == 0 (a piece past the row: cp.async's zero-fill form,
or zeros without a load), else half by half (a row start is then only 2-byte aligned: 8 loads
a piece, no cp.async — the ASYNC kernel's copies are then plain loads and stores). d = D
compiles to the plain loop (no head_io bounds). The mmas run over D: d/D of their work is
useful (d = 111: 112, 99 %; d = 40: 48, 83 %). 3xTF32: D = d, a multiple of 8. Bc a multiple
of 16; a full-warp instruction, so every warp runs every tile even past Nq (its rows are just
not written). Inputs [BH, N, d/2] uint32 (fp16/bf16 pairs; d % 8 ≠ 0: [BH, N, d] uint16
halves) or [BH, N, D] float32 (3xTF32); outputs O in the input's format, LSE [BH, Nq] float32
(−inf and O = 0 for a row that sees no key). Causal is aligned bottom-right (query i sees key
j iff j ≤ i + Nk − Nq), like the CUDA-core kernel. No dropout, no varlen here (the CUDA-core
kernel has them).

Masked keys (docs/api.md, "Masked keys contribute exactly nothing"): the scores are masked by
select (S = −inf), and keys past Nk and (PAD) padded keys are zeros on chip — the loaders
(``kv_loader_tc``, ``rows_async`` by cp.async's zero-fill form, ``rows_f32``) read the key's
mask byte and do not issue its load — so P = 0 meets V = 0 and their K/V rows never reach an
mma. Documented limit, causal diagonal tiles: P·V (and the backward's dQ = dS K) are mma
instructions over the whole K/V tile, where a 0 in P times a NaN/inf in V is NaN inside the
instruction. A NaN/inf in the K/V rows of a key J hidden by causal from rows i < J can make O
(dq) of those rows non-finite when their Q tile (Br rows) visits J's tile; LSE and every other
row stay exact (tests/test_masked_nonfinite.py, ``test_tensor_cores_causal_limit``). torch's
flash kernels multiply P·V on the tensor cores the same way. The float32 CUDA-core kernels are
exact in every case.

How to run: ``flashlesson section 37``, ``pytest tests/test_attention_tc.py``,
``flashlesson bench attention --dtype float16``.
"""

import math
from functools import lru_cache

from numba import cuda, float32, uint16, uint32

from .attention import block_tile, kv_tiles
from .mma import ex2, ldsm_x4, ldsm_x4_trans, mma_bf16, mma_f16, mma_tf32, pack_bf16, \
    pack_f16, pair_hi, pair_lo, tf32
from .reductions import NEG_INF, ZERO, lanes_max, lanes_sum, safe_max, safe_reciprocal
from .vector import cp_async16, cp_async_wait_all, load1, load4, store1, store4

QUAD = 4        # lanes sharing a row in the accumulator layout
LOG2E = float32(1.4426950408889634)     # log2 e: e^x = 2^(x·log2e), one ex2 (mma.ex2)
LN2 = float32(0.6931471805599453)       # ln 2: back from base 2 (LSE = m·ln2 + ln l)
POS_INF, NAN = float32(math.inf), float32(math.nan)     # (online_softmax_tc: an overflowed row)
BUILT = {}      # (factory, *arguments) → kernel: every kernel built, for resource reports


def tc_shapes(D, Bc):
    """Shared-memory row strides (words) of the K and Vᵀ tiles (fp16/bf16 kernel)."""
    return D // 2 + 4, Bc // 2 + 4


def tc_smem_bytes(D, Bc, TF32, ASYNC=False):
    """Dynamic shared memory of one block: the K tile and the V tile (Vᵀ for fp16/bf16; V
    rows with ASYNC, read through ldmatrix.trans)."""
    if TF32:
        return 2 * 2 * Bc * (D + 4) * 4       # two stages of (K, V)
    KS, VS = tc_shapes(D, Bc)
    if ASYNC:
        return 2 * 2 * Bc * KS * 4            # two stages of (K rows, V rows)
    return 2 * (Bc * KS + D * VS) * 4         # two stages (ping-pong)


def padded_head_dim(d):
    """D: the head dimension d rounded up to a multiple of 16, the kernels' compile-time width
    (k16 steps of S = Q Kᵀ, 8-column blocks of O). Columns d … D − 1 are zeros on chip and never
    written out (``head_io``)."""
    return -(-d // 16) * 16


def word_rows(d):
    """Whether rows of d halves travel as uint32 words, 16 bytes a piece (d % 8 == 0: then every
    row starts 16-byte aligned) — or else as uint16 halves, one load per half (``head_io``)."""
    return d % 8 == 0


@lru_cache(maxsize=None)
def head_io(D, d):
    """Global memory ↔ chip for rows of d halves, held on chip as D/2 words (D =
    padded_head_dim(d)): zeros in for columns ≥ d, nothing out for them. Chosen at compile
    time:

    words  (word_rows(d)): x is uint32 [.., d/2]; a 16-byte piece (words c … c + 3) lies all
           inside the row or all past it (d/2 is a multiple of 4), so a piece past it is four
           zero words, not loaded (cp.async: the zero-fill form). d = D: no test at all — the
           same code as a kernel of head dimension D.
    halves (d % 8 ≠ 0, a row start is only 2-byte aligned): x is uint16 [.., d]; a piece is 8
           loads of one half, each past d a zero, packed into words; no cp.async (its sizes are
           4, 8, 16 bytes, aligned), so ``piece_async`` loads and stores to shared memory at
           once — the cost of a misaligned d: 8 loads where one would do, and no copy in flight
           behind the products.

    piece(x, rf, c) → 4 words c … c + 3 of flat row rf (= bh·N + row);
    piece_async(smem, di, x, rf, c, ok) → smem[di … di + 3] = that piece (zeros if not ok),
           by cp.async (words) once the thread waits, or at once (halves);
    word(x, bh, row, wi) → word wi of row (columns 2wi, 2wi + 1; zeros past d);
    put_word(o, bh, row, wi, w) → writes columns 2wi, 2wi + 1 of row where < d."""
    DT = d
    FULL = d == D
    if word_rows(d):
        DWT = d // 2                # the global row's words

        @cuda.jit(device=True)
        def piece(x, rf, c):
            if FULL or c < DWT:
                return load4(x, rf * DWT + c)
            return uint32(0), uint32(0), uint32(0), uint32(0)

        @cuda.jit(device=True)
        def piece_async(smem, di, x, rf, c, ok):
            live = ok and (FULL or c < DWT)
            cp_async16(smem, di, x, rf * DWT + c if live else 0, live)

        @cuda.jit(device=True)
        def word(x, bh, row, wi):
            return x[bh, row, wi] if FULL or wi < DWT else uint32(0)

        @cuda.jit(device=True)
        def put_word(o, bh, row, wi, w):
            if FULL or wi < DWT:
                o[bh, row, wi] = w
        return piece, piece_async, word, put_word

    @cuda.jit(device=True)
    def half_pair(x, at, col):
        """The word of halves x[at + col], x[at + col + 1] (flat; zeros at columns ≥ d)."""
        lo = uint32(load1(x, at + col)) if col < DT else uint32(0)
        hi = uint32(load1(x, at + col + 1)) if col + 1 < DT else uint32(0)
        return uint32(lo | (hi << uint32(16)))

    @cuda.jit(device=True)
    def piece(x, rf, c):
        at = rf * DT
        return (half_pair(x, at, 2 * c), half_pair(x, at, 2 * c + 2),
                half_pair(x, at, 2 * c + 4), half_pair(x, at, 2 * c + 6))

    @cuda.jit(device=True)
    def piece_async(smem, di, x, rf, c, ok):
        w0 = w1 = w2 = w3 = uint32(0)
        if ok:
            w0, w1, w2, w3 = piece(x, rf, c)
        store4(smem, di, w0, w1, w2, w3)

    @cuda.jit(device=True)
    def word(x, bh, row, wi):
        return half_pair(x, (bh * x.shape[1] + row) * DT, 2 * wi)

    @cuda.jit(device=True)
    def put_word(o, bh, row, wi, w):
        col = 2 * wi
        if col < DT:
            o[bh, row, col] = uint16(w & uint32(0xFFFF))
        if col + 1 < DT:
            o[bh, row, col + 1] = uint16(w >> uint32(16))
    return piece, piece_async, word, put_word


@lru_cache(maxsize=None)
def zeros(N):
    """clear(acc): acc[0 … N − 1] = 0 (N ≤ 32 · 4: a loop LLVM unrolls, so the array stays in
    registers)."""
    @cuda.jit(device=True)
    def clear(acc):
        for i in range(N):
            acc[i] = ZERO
    return clear


@lru_cache(maxsize=None)
def scale_row_tc(NBO):
    """acc = correction·acc on the lane's row (mt, half): elements 2·half, 2·half + 1 of each 4
    in acc block mt (online_softmax_tc's rescale, and rescale_tc's)."""

    @cuda.jit(device=True)
    def scale(acc, mt, half, correction):
        for nb in range(NBO):
            i = 4 * (mt * NBO + nb) + 2 * half
            acc[i] *= correction                                  # acc = correction·acc
            acc[i + 1] *= correction
    return scale


@lru_cache(maxsize=None)
def online_softmax_tc(NBS, NBO, MT=1, DEFER=False):
    """The CUDA-core part of one K/V tile, on the accumulator layout: masked S → P in place,
    m/l/acc of the lane's 2·MT rows updated (DEFER: acc left alone, each row's correction kept
    in ml[4·MT + r] for ``rescale_tc`` to apply later — FlashAttention-3's overlap, where acc
    is still being written by the previous tile's P·V when the softmax runs). In base 2
    (FlashAttention-2's trick): S₂ = Q Kᵀ·scale·log2e and m with it (m₂ = m·log2e), so each
    exponential is one ex2 (2^(S₂ − m₂) = e^(Q Kᵀ·scale − m)), and LSE = m₂·ln2 + ln l at the
    end. S arrives as S₂ = S·mult (mult = scale·log2e, ``fold_scale``: the multiply folded into
    the exponent's subtraction, one FFMA per entry instead of FMUL and FADD, and into the row
    maximum, max(S)·mult — true for mult > 0 only; a row whose S·mult overflows float32 gets
    NaN, as it did unfolded, rather than the exact product's −inf and a silent O = 0), or
    already scaled (mult = 1). Row (mt, half) = rows g + 16·mt + 8·half of the warp's 16·MT:
    elements 2·half, 2·half + 1 of each 4 in S block mt (s[4·(mt·NBS + nb) + …]) and in acc
    block mt; ml = [m of the 2·MT rows …, l of the 2·MT rows …]."""
    scale_row = scale_row_tc(NBO)

    @cuda.jit(device=True)
    def update(s, acc, ml, mult):
        for mt in range(MT):
            for half in range(2):
                r = 2 * mt + half
                row_max = NEG_INF
                for nb in range(NBS):
                    i = 4 * (mt * NBS + nb) + 2 * half
                    row_max = max(row_max, max(s[i], s[i + 1]))
                new_m = max(ml[r], lanes_max(row_max, QUAD) * mult)   # new_m = max(m, rowmax(S₂))
                m_safe = safe_max(new_m)                          # (0 while the row saw no key)
                if new_m == POS_INF:                              # S·mult overflowed: NaN, as
                    m_safe = NAN                                  # S₂ − new_m gives unfolded
                correction = ex2(ml[r] - m_safe)                  # correction = 2^(m − new_m)
                row_sum = ZERO
                for nb in range(NBS):
                    for e in range(2):
                        i = 4 * (mt * NBS + nb) + 2 * half + e
                        s[i] = ex2(s[i] * mult - m_safe)          # P = 2^(S₂ − new_m)
                        row_sum += s[i]
                ml[2 * MT + r] = correction * ml[2 * MT + r] + row_sum  # l = correction·l + …
                if DEFER:                                         # (l: this lane's part of it)
                    ml[4 * MT + r] = correction                   # (compile-time branch)
                else:
                    scale_row(acc, mt, half, correction)          # acc = correction·acc …
                ml[r] = new_m
    return update


@lru_cache(maxsize=None)
def rescale_tc(NBO, MT=1):
    """acc = correction·acc for the lane's 2·MT rows, the corrections that
    ``online_softmax_tc(…, DEFER=True)`` left in ml[4·MT + r]."""
    scale_row = scale_row_tc(NBO)

    @cuda.jit(device=True)
    def rescale(acc, ml):
        for mt in range(MT):
            for half in range(2):
                scale_row(acc, mt, half, ml[4 * MT + 2 * mt + half])
    return rescale


@cuda.jit(device=True)
def store_floats(o, bh, row, nb, t, x0, x1):
    """finish_rows' store for float32 O [BH, Nq, D]: columns 8nb + 2t, + 1 of a row."""
    o[bh, row, 8 * nb + 2 * t] = x0
    o[bh, row, 8 * nb + 2 * t + 1] = x1


@lru_cache(maxsize=None)
def store_words(put_word, pack):
    """finish_rows' store for O as uint32 words of two halves (head_io's put_word; pack:
    pack_f16 or pack_bf16): the word 4nb + t of a row, columns 8nb + 2t, + 1."""

    @cuda.jit(device=True)
    def store(o, bh, row, nb, t, x0, x1):
        put_word(o, bh, row, 4 * nb + t, pack(x0, x1))      # (columns < d only)
    return store


@lru_cache(maxsize=None)
def finish_rows(NBO, store, MT=1):
    """The forward kernels' last step, on the accumulator layout: O = acc / l and LSE = m·ln2 +
    ln l for the lane's 2·MT rows (ml as online_softmax_tc keeps it: m of the rows, then l; l
    is the quad's four partial sums, added first); a row that saw no key gets O = 0 and LSE =
    −inf, and rows ≥ n_q are not written. store(o, bh, row, nb, t, x0, x1) writes O's columns
    8nb + 2t, + 1 of a row (store_floats, store_words)."""

    @cuda.jit(device=True)
    def finish(o, lse, acc, ml, bh, r_lo, t, n_q):
        for mt in range(MT):
            for half in range(2):
                r = 2 * mt + half
                row = r_lo + 16 * mt + 8 * half
                l_row = lanes_sum(ml[2 * MT + r], QUAD)
                if row < n_q:
                    inv_l = safe_reciprocal(l_row)  # a row that saw no key: O = 0
                    for nb in range(NBO):
                        y = 4 * (mt * NBO + nb) + 2 * half
                        store(o, bh, row, nb, t, acc[y] * inv_l, acc[y + 1] * inv_l)
                    if t == 0:
                        lse[bh, row] = NEG_INF if l_row == ZERO else \
                            ml[r] * LN2 + math.log(l_row)       # LSE = m·ln2 + ln l
    return finish


def folds(scale):
    """FOLD, the kernels' compile-time choice for this scale: scale·log2e > 0 in float32."""
    return bool(float32(scale) * LOG2E > 0)


@lru_cache(maxsize=None)
def fold_scale(N, FOLD):
    """fold(s, scale2) → the multiplier online_softmax_tc applies to the N entries of S.
    FOLD (scale·log2e > 0, ``folds``): scale2 itself — S stays unscaled, the multiply rides in
    the exponent's FFMA. Else S·scale2 here, entry by entry, and 1: max(S·c) is not max(S)·c
    for c ≤ 0, and a masked −inf times 0 is NaN. Compile-time, not a test of scale2 in the
    kernel: LLVM turned that branch into S·(1 or scale2), the FMULs back on every entry."""

    @cuda.jit(device=True)
    def fold(s, scale2):
        if FOLD:                                    # (compile-time)
            return scale2
        for i in range(N):
            s[i] *= scale2                          # S = Qi Kjᵀ · scale · log2e
        return float32(1.0)
    return fold


@lru_cache(maxsize=None)
def mask_scores_tc(NBS, CAUSAL, PAD, MT=1, CLAMPED=False):
    """S entries of keys past Nk, above the causal diagonal (§34) or padded (§35) → −inf.
    r_lo: the lane's first row (g of the warp's first m16 block). CLAMPED (attention_wgmma):
    PAD's mask byte read in the one test of the entry, at a clamped key (always in bounds)
    rather than in a branch of its own. flash_wgmma with PAD (ptxas 13.5): its consumers use
    188 registers, not 211, at d = 128, Bc = 128; spill 0–8 bytes, not 8–176, at d = 64,
    Bc = 128, CWG = 3, and 0, not 92, at d = 128, Bc = 176; and at Bc = 192 (NBS = 24) the
    branch made LLVM leave the loop rolled, S in local memory. flash_tc keeps the branch, as
    it was timed (CLAMPED there: 80 bytes of spills → 0 at d = 64, MT = 2, causal, but
    0 → 72 at d = 128)."""

    @cuda.jit(device=True)
    def mask(s, k0, r_lo, g_t2, n_k, offset, kpm, b_idx):
        for mt in range(MT):
            for nb in range(NBS):
                for e in range(4):
                    key = k0 + 8 * nb + g_t2 + (e & 1)
                    row = r_lo + 16 * mt + 8 * (e >> 1)
                    if key >= n_k or (CAUSAL and key > row + offset) or \
                            (PAD and CLAMPED and kpm[b_idx, min(key, n_k - 1)] == 0):
                        s[4 * (mt * NBS + nb) + e] = NEG_INF
                    elif PAD and not CLAMPED and kpm[b_idx, key] == 0:
                        s[4 * (mt * NBS + nb) + e] = NEG_INF
    return mask


@lru_cache(maxsize=None)
def block_products(NB, KC, MT, BF16):
    """acc += A · B on the tensor cores, for MT row blocks at once: for each 8-column block nb
    and k16 step kc, B = the two words at off + (8nb + g)·STRIDE + 8kc + t (+ 4) of a shared
    tile — read once, used by the MT mmas — and A = frag[4(mt·KC + kc) …]; acc[4(mt·NB + nb) …]
    accumulates. S = Q Kᵀ (B: K rows), O += P V (B: Vᵀ rows) and the backward's five products
    are all this loop."""
    mma = mma_bf16 if BF16 else mma_f16

    @cuda.jit(device=True)
    def run(frag, smem, off, STRIDE, g, t, acc):
        for nb in range(NB):
            at = off + (8 * nb + g) * STRIDE + t
            for kc in range(KC):
                b0 = load1(smem, at + 8 * kc)
                b1 = load1(smem, at + 8 * kc + 4)
                for mt in range(MT):
                    x = 4 * (mt * KC + kc)
                    y = 4 * (mt * NB + nb)
                    acc[y], acc[y + 1], acc[y + 2], acc[y + 3] = mma(
                        frag[x], frag[x + 1], frag[x + 2], frag[x + 3], b0, b1,
                        acc[y], acc[y + 1], acc[y + 2], acc[y + 3])
    return run


@lru_cache(maxsize=None)
def two_blocks(BF16):
    """acc[y … y+3] += A·B(b0, b1) and acc[y+4 … y+7] += A·B(b2, b3): one A fragment, the two
    8-column blocks of one ``ldsm_x4``."""
    mma = mma_bf16 if BF16 else mma_f16

    @cuda.jit(device=True)
    def run(a0, a1, a2, a3, b0, b1, b2, b3, acc, y):
        acc[y], acc[y + 1], acc[y + 2], acc[y + 3] = mma(
            a0, a1, a2, a3, b0, b1, acc[y], acc[y + 1], acc[y + 2], acc[y + 3])
        acc[y + 4], acc[y + 5], acc[y + 6], acc[y + 7] = mma(
            a0, a1, a2, a3, b2, b3, acc[y + 4], acc[y + 5], acc[y + 6], acc[y + 7])
    return run


@lru_cache(maxsize=None)
def ldsm_products(NB, KC, MT, BF16, TRANS):
    """``block_products`` with its B fragments fetched by ldmatrix (mma.py): one ``ldsm_x4``
    gives b0, b1 of two 8-column blocks nb, nb + 1 at one k16 step — four mmas' worth per
    instruction (MT = 2) instead of two loads per mma. The tile holds rows only:

    TRANS False — B = (tile rows)ᵀ, a product over d (S = Q Kᵀ: K rows): lane 8m + r points at
        row 8(nb + m // 2) + r, words 8kc + 4(m % 2) … + 3;
    TRANS True  — B = the tile rows, a product over the tile's rows (O += P V: V rows):
        ldsm_x4_trans, lane 8m + r points at row 16kc + 8(m % 2) + r, words 4(nb + m // 2) …

    so no transposed copy is ever written (``kv_loader_tc`` writes Vᵀ with prmt instead)."""
    pair = two_blocks(BF16)
    ldsm = ldsm_x4_trans if TRANS else ldsm_x4

    @cuda.jit(device=True)
    def run(frag, smem, off, STRIDE, g, t, acc):
        lane = 4 * g + t
        m = lane // 8
        r = lane % 8
        if TRANS:
            base = off + (8 * (m % 2) + r) * STRIDE + 4 * (m // 2)
        else:
            base = off + (8 * (m // 2) + r) * STRIDE + 4 * (m % 2)
        for nb2 in range(NB // 2):
            for kc in range(KC):
                if TRANS:
                    at = base + 16 * kc * STRIDE + 8 * nb2
                else:
                    at = base + 16 * nb2 * STRIDE + 8 * kc
                b0, b1, b2, b3 = ldsm(smem, at)     # (b0, b1): block 2nb2; (b2, b3): 2nb2 + 1
                for mt in range(MT):
                    x = 4 * (mt * KC + kc)
                    pair(frag[x], frag[x + 1], frag[x + 2], frag[x + 3], b0, b1, b2, b3, acc,
                         4 * (mt * NB + 2 * nb2))
    return run


@lru_cache(maxsize=None)
def ldsm_products_a(NB, KC, BF16):
    """acc += A · Bᵀ over d with both operands in shared memory as rows (the backward's S = Q Kᵀ
    and kin, when the block's own 16 rows per warp live in shared memory instead of
    registers): per k16 step one ``ldsm_x4`` gives the A fragment of the warp's 16 rows at a_off
    (lane 8m + r → row 8(m % 2) + r, words 8kc + 4(m // 2): a0, a1, a2, a3 in the order of
    mma.py's table), then one per two 8-column blocks of B as in ``ldsm_products``. Called as
    ``block_products`` is, with a_off where that takes the A fragments."""
    pair = two_blocks(BF16)

    @cuda.jit(device=True)
    def run(a_off, smem, b_off, STRIDE, g, t, acc):
        lane = 4 * g + t
        m = lane // 8
        r = lane % 8
        a_at = a_off + (8 * (m % 2) + r) * STRIDE + 4 * (m // 2)
        b_at = b_off + (8 * (m // 2) + r) * STRIDE + 4 * (m % 2)
        for kc in range(KC):
            a0, a1, a2, a3 = ldsm_x4(smem, a_at + 8 * kc)
            for nb2 in range(NB // 2):
                b0, b1, b2, b3 = ldsm_x4(smem, b_at + 16 * nb2 * STRIDE + 8 * kc)
                pair(a0, a1, a2, a3, b0, b1, b2, b3, acc, 8 * nb2)
    return run


def products_for(NB, KC, MT, BF16, ASYNC, TRANS):
    """The products loop of a kernel: ldmatrix from rows (ASYNC) or 32-bit loads from rows /
    the transposed copy (TRANS: the copy, kv_loader_tc's Vᵀ)."""
    return ldsm_products(NB, KC, MT, BF16, TRANS) if ASYNC else block_products(NB, KC, MT, BF16)


@lru_cache(maxsize=None)
def rows_async(D, B, T, PAD=False, d=None):
    """Start copying rows r0 … r0 + B − 1 of x[bh] (d halves a row; ``head_io``) to smem[off +
    row·(D/2 + 4) + word] with cp.async, 16 bytes a piece, zeros past n (so 0·NaN cannot reach
    an accumulator) and in columns d … D − 1; the thread's ``cp_async_wait_all`` and a barrier
    land them. PAD (K and V rows): a key whose key_padding_mask kpm[b, key] is 0 is zeros too —
    cp.async's zero-fill form (src-size 0), the same instruction with no global read, decided
    when the copy is issued (one mask byte per piece); overwriting after the wait would cost a
    second pass over the tile and a barrier before it. (d % 8 ≠ 0: plain loads and stores,
    head_io.)"""
    DW = D // 2
    KS = DW + 4
    ITEMS = B * (DW // 4)
    IT = (ITEMS + T - 1) // T
    _, piece_async, _, _ = head_io(D, D if d is None else d)

    @cuda.jit(device=True)
    def issue(x, bh, n, r0, smem, off, tid, kpm, b_idx):
        for it in range(IT):
            item = it * T + tid
            if item < ITEMS:
                r = item // (DW // 4)
                c = (item % (DW // 4)) * 4
                ok = r0 + r < n and (not PAD or kpm[b_idx, r0 + r] != 0)
                piece_async(smem, off + r * KS + c, x, (bh * n) + r0 + r, c, ok)
    return issue


@lru_cache(maxsize=None)
def pack_accumulators(KC2, MT, NB, BF16):
    """P's accumulators (MT row blocks of NB 8-column blocks) → A fragments of 16-bit pairs:
    two 8-column blocks make one k16 step (c0,c1 → a0, c2,c3 → a1 of block 2kc; a2, a3 of
    block 2kc + 1), so P never leaves the registers (§37)."""
    pack = pack_bf16 if BF16 else pack_f16

    @cuda.jit(device=True)
    def run(s, pa):
        for mt in range(MT):
            for kc in range(KC2):
                x = 4 * (mt * NB + 2 * kc)
                y = 4 * (mt * KC2 + kc)
                pa[y] = pack(s[x], s[x + 1])
                pa[y + 1] = pack(s[x + 2], s[x + 3])
                pa[y + 2] = pack(s[x + 4], s[x + 5])
                pa[y + 3] = pack(s[x + 6], s[x + 7])
    return run


@lru_cache(maxsize=None)
def kv_loader_tc(D, Bc, T, WITH_V=True, PAD=False, d=None):
    """Copy K/V tile rows k0 … k0 + Bc − 1 of head bh (uint32 words) to shared memory: K as
    it is, V transposed into key pairs (``pair_lo``/``pair_hi``); zeros past Nk (P is 0 there,
    but 0·NaN would still poison acc) and, PAD, for keys whose kpm[b_idx, key] is 0 (the
    load is not issued: one mask byte read per piece instead). In two halves, so the global
    reads can be issued before the current tile's products and stored after them (``fetch`` →
    registers, ``put`` → shared memory): ``fetch`` returns this thread's KI + 2·VI groups of
    four words. Rows of d halves (``head_io``): zeros in columns d … D − 1."""
    DW = D // 2
    KS, VS = tc_shapes(D, Bc)
    piece, _, _, _ = head_io(D, D if d is None else d)
    K_ITEMS = Bc * (DW // 4)        # 16-byte pieces of a K tile
    V_ITEMS = (Bc // 2) * (DW // 4)  # (key pair, 4 words) pieces of a V tile
    KI = (K_ITEMS + T - 1) // T     # pieces per thread
    VI = (V_ITEMS + T - 1) // T if WITH_V else 0   # (WITH_V False: the K part only)
    REGS = 4 * (KI + 2 * VI)

    @cuda.jit(device=True)
    def fetch(k, v, bh, n_k, k0, tid, w, kpm, b_idx):
        """w[…] = this thread's K and V words of the tile at k0 (zeros past Nk; PAD: and for
        padded keys)."""
        for it in range(KI):
            item = it * T + tid
            r = item // (DW // 4)
            c = (item % (DW // 4)) * 4
            w0 = w1 = w2 = w3 = uint32(0)
            if item < K_ITEMS and k0 + r < n_k and (not PAD or kpm[b_idx, k0 + r] != 0):
                w0, w1, w2, w3 = piece(k, (bh * n_k) + k0 + r, c)
            w[4 * it], w[4 * it + 1], w[4 * it + 2], w[4 * it + 3] = w0, w1, w2, w3
        for it in range(VI):
            item = it * T + tid
            kp = item % (Bc // 2)               # key pair: keys 2kp, 2kp + 1
            c = (item // (Bc // 2)) * 4         # words c … c+3 = columns 2c … 2c+7
            for e in range(2):
                w0 = w1 = w2 = w3 = uint32(0)
                key = k0 + 2 * kp + e
                if item < V_ITEMS and key < n_k and (not PAD or kpm[b_idx, key] != 0):
                    w0, w1, w2, w3 = piece(v, (bh * n_k) + key, c)
                at = 4 * KI + 8 * it + 4 * e
                w[at], w[at + 1], w[at + 2], w[at + 3] = w0, w1, w2, w3

    @cuda.jit(device=True)
    def put(w, smem, kof, vof, tid):
        """K words → smem[kof + key·KS + word]; V words → Vᵀ, smem[vof + c·VS + key pair]."""
        for it in range(KI):
            item = it * T + tid
            if item < K_ITEMS:
                r = item // (DW // 4)
                c = (item % (DW // 4)) * 4
                store4(smem, kof + r * KS + c, w[4 * it], w[4 * it + 1], w[4 * it + 2],
                       w[4 * it + 3])
        for it in range(VI):
            item = it * T + tid
            if item < V_ITEMS:
                kp = item % (Bc // 2)
                c = (item // (Bc // 2)) * 4
                at = vof + 2 * c * VS + kp      # Vᵀ[2c][kp] = (V[2kp][2c], V[2kp+1][2c])
                x = 4 * KI + 8 * it             # w[x + e] = V[2kp][c + e], w[x + 4 + e] = …
                for e in range(4):              # … V[2kp + 1][c + e] (words of two halves)
                    store1(smem, at + 2 * e * VS, pair_lo(w[x + e], w[x + 4 + e]))
                    store1(smem, at + (2 * e + 1) * VS, pair_hi(w[x + e], w[x + 4 + e]))

    return fetch, put, REGS


@lru_cache(maxsize=None)
def flash_tc_kernel(D, Bc, WARPS, CAUSAL, PAD, BF16, MT=1, PF=False, ASYNC=False, d=None,
                    FOLD=True):
    """fp16 (BF16=False) or bf16 FlashAttention forward; see the module menu.

    MT: m16 row blocks per warp (Br = 16·MT·WARPS): every K/V fragment read from shared
    memory feeds MT mmas instead of one. PF: prefetch — the next tile's global reads go to
    registers before this tile's products and to shared memory after them, so their latency
    hides behind the mmas (costs 4·(KI + 2·VI) registers). ASYNC: the next tile's K and V
    rows travel by cp.async while this tile is computed (no registers held), and the B
    fragments come from the rows by ldmatrix (V's through .trans): no Vᵀ copy, no prmt.
    d: the true head dimension (D = padded_head_dim(d); None: d = D) — columns d … D − 1 are
    zeros on chip and not written (``head_io``). FOLD: scale·log2e > 0 (``fold_scale``)."""
    d = D if d is None else d
    Br = 16 * MT * WARPS
    T = 32 * WARPS
    KC = D // 16                    # k-steps of S = Q Kᵀ (k16 each)
    NBS = Bc // 8                   # 8-column blocks of S
    KC2 = Bc // 16                  # k-steps of P V
    NBO = D // 8                    # 8-column blocks of O
    QA, SN, AN, ML = 4 * KC * MT, 4 * NBS * MT, 4 * NBO * MT, 4 * MT   # registers per lane
    PA = 4 * KC2 * MT
    KS, VS = tc_shapes(D, Bc)
    K_WORDS = Bc * KS               # words of the K tile; the Vᵀ tile follows
    STAGE = K_WORDS + D * VS        # words of one stage (K and Vᵀ); two stages, ping-pong
    V_STRIDE = VS                   # row stride of the V operand's tile: Vᵀ rows …
    if ASYNC:
        STAGE = 2 * K_WORDS         # … or, ASYNC, V rows like K's
        V_STRIDE = KS
    assert D == padded_head_dim(d) and Bc % 16 == 0 and not (PF and ASYNC)
    pack = pack_bf16 if BF16 else pack_f16
    update = online_softmax_tc(NBS, NBO, MT)
    scaled = fold_scale(SN, FOLD)
    mask = mask_scores_tc(NBS, CAUSAL, PAD, MT)
    fetch, put, REGS = kv_loader_tc(D, Bc, T, True, PAD, d)
    rows = rows_async(D, Bc, T, PAD, d)
    _, _, word, put_word = head_io(D, d)
    finish = finish_rows(NBO, store_words(put_word, pack), MT)
    qk = products_for(NBS, KC, MT, BF16, ASYNC, False)
    pv = products_for(NBO, KC2, MT, BF16, ASYNC, True)
    to_a = pack_accumulators(KC2, MT, NBS, BF16)
    clear_acc, clear_s = zeros(AN), zeros(SN)

    @cuda.jit
    def flash_tc(q, k, v, o, lse, scale, n_q, n_k, heads, kpm):
        """q [BH, Nq, d/2], k, v [BH, Nk, d/2], o [BH, Nq, d/2]: uint32 words of two halves
        (d % 8 ≠ 0: [.., d] uint16 halves, head_io); lse [BH, Nq] float32; kpm uint8 [B, Nk]
        (PAD)."""
        bh, q0 = block_tile(CAUSAL, Br)             # (causal: heaviest Q tiles first, §34)
        tid = cuda.threadIdx.x
        warp = tid // 32
        lane = tid % 32
        g = lane // 4                               # row group: rows g and g + 8 of each m16
        t = lane % 4                                # column pair 2t, 2t + 1 of each 8
        r_lo = q0 + 16 * MT * warp + g              # my first row; the others: + 8, + 16, …
        offset = n_k - n_q                          # §34: query i sees key j iff j ≤ i + offset
        scale2 = scale * LOG2E                      # S in base 2 (online_softmax_tc)

        # dynamic, tc_smem_bytes(D, Bc, False, ASYNC): two stages of [K tile: sK[key·KS +
        # word] | Vᵀ tile: sVt[c·VS + key pair] (ASYNC: V rows, sVt[key·KS + word])]; tile j
        # in stage j % 2
        smem = cuda.shared.array(0, uint32)

        # Q fragments (A of S = Q Kᵀ), once: qa[4(mt·KC + kc) + r] = word r of the table in
        # mma.py for k-step kc of row block mt
        qa = cuda.local.array(QA, uint32)
        for mt in range(MT):
            for kc in range(KC):
                for r in range(4):
                    row = r_lo + 16 * mt + 8 * (r & 1)
                    qa[4 * (mt * KC + kc) + r] = \
                        word(q, bh, row, 8 * kc + 4 * (r >> 1) + t) if row < n_q else 0

        s = cuda.local.array(SN, float32)           # S, then P, of this tile (accumulators)
        acc = cuda.local.array(AN, float32)         # un-normalized output   (§32: acc)
        ml = cuda.local.array(ML, float32)          # m of my 2·MT rows (base 2: m·log2e),
                                                    # then l (§32: m, l)
        w = cuda.local.array(REGS, uint32)          # the next tile's words, in flight
        pa = cuda.local.array(PA, uint32)           # P as A fragments (16-bit pairs)
        clear_acc(acc)
        for r in range(2 * MT):
            ml[r] = NEG_INF
            ml[2 * MT + r] = ZERO

        b_idx = bh // heads                         # (PAD: the mask's batch row)
        n_tiles = kv_tiles(CAUSAL, q0, Br, Bc, n_q, n_k)
        if n_tiles > 0 and ASYNC:
            rows(k, bh, n_k, 0, smem, 0, tid, kpm, b_idx)
            rows(v, bh, n_k, 0, smem, K_WORDS, tid, kpm, b_idx)
        elif n_tiles > 0:
            fetch(k, v, bh, n_k, 0, tid, w, kpm, b_idx)
            put(w, smem, 0, K_WORDS, tid)
        for j in range(n_tiles):
            k0 = j * Bc
            if ASYNC:
                cp_async_wait_all()                 # my copies of tile j have landed
            cuda.syncthreads()                      # wait: tile j is in stage j % 2, and every
                                                    # warp is done with tile j − 1's stage
            nxt = ((j + 1) & 1) * STAGE             # tile j + 1 → the other stage
            more = j + 1 < n_tiles                  # (the same for the whole block)
            if more and ASYNC:                      # in flight during this tile's work
                rows(k, bh, n_k, k0 + Bc, smem, nxt, tid, kpm, b_idx)
                rows(v, bh, n_k, k0 + Bc, smem, nxt + K_WORDS, tid, kpm, b_idx)
            elif more:
                fetch(k, v, bh, n_k, k0 + Bc, tid, w, kpm, b_idx)
                if not PF:                          # PF: stored after the products instead
                    put(w, smem, nxt, nxt + K_WORDS, tid)
            sK = (j & 1) * STAGE                    # this tile's K …
            sVt = sK + K_WORDS                      # … and Vᵀ, as offsets into smem

            # S = Qi Kjᵀ on the tensor cores: each B fragment (two words of K row 8nb + g)
            # is read once and used by the MT row blocks
            clear_s(s)
            qk(qa, smem, sK, KS, g, t, s)           # S = Qi Kjᵀ
            mult = scaled(s, scale2)                # (scale·log2e: in the softmax's FFMAs)
            if PAD or k0 + Bc > n_k or (CAUSAL and k0 + Bc - 1 > q0 + offset):
                mask(s, k0, r_lo, 2 * t, n_k, offset, kpm, b_idx)
            update(s, acc, ml, mult)                # online softmax on the CUDA cores (§32)

            # acc += P Vj: P's accumulators are the A fragments (two 8-column blocks = k16),
            # packed to 16-bit pairs once
            to_a(s, pa)
            pv(pa, smem, sVt, V_STRIDE, g, t, acc)  # acc += P Vj (B: Vᵀ rows, or V rows)
            if PF and more:
                put(w, smem, nxt, nxt + K_WORDS, tid)   # the prefetched tile, now in place

        finish(o, lse, acc, ml, bh, r_lo, t, n_q)  # O = acc / l, LSE = m·ln2 + ln l

    BUILT[("flash_tc_kernel", D, Bc, WARPS, CAUSAL, PAD, BF16, MT, PF, ASYNC)
          + ((d,) if d != D else ()) + (() if FOLD else ("scale ≤ 0",))] = flash_tc
    return flash_tc


# --- 3xTF32 pieces (float32 operands on tensor cores), shared with the 3xTF32 backward --------
@cuda.jit(device=True)
def mma3(A0, A1, A2, A3, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """C += A·B over one k8 step with 3xTF32: A given split (big A0…A3, small a0…a3), B split
    here; big·big + big·small + small·big (small·small dropped), the small terms first.

    Staged accumulation: the three mmas sum from zero and the k8 step's sum is added to C on
    the CUDA cores (to nearest: 4 FADDs). The tensor core cuts every addend to the grid of the
    largest and rounds its sum toward zero (sim/mma.tf32_block_fma); the three mmas straight
    into C would take up to an ulp of C each, all with one sign, 3·N/8 times over N keys: O
    2.9e-6 off at N = 1024, d = 64 on the H200, torch 6.8e-7 (docs/results.md), growing with
    N. torch's 3xTF32 kernels stage too (CUTLASS OpMultiplyAddFastF32, every 32
    of k: mem_eff_attention/gemm/custom_mma_multistage.h, mma_from_smem.h); the emulation in
    scripts/tf32x3_error.py gives each choice's error."""
    B0, B1 = tf32(b0), tf32(b1)
    d0, d1, d2, d3 = mma_tf32(a0, a1, a2, a3, B0, B1, ZERO, ZERO, ZERO, ZERO)    # small·big
    d0, d1, d2, d3 = mma_tf32(A0, A1, A2, A3, tf32(b0 - B0), tf32(b1 - B1),
                              d0, d1, d2, d3)                                    # big·small
    d0, d1, d2, d3 = mma_tf32(A0, A1, A2, A3, B0, B1, d0, d1, d2, d3)            # big·big
    return c0 + d0, c1 + d1, c2 + d2, c3 + d3                  # C += this step (CUDA cores)


@cuda.jit(device=True)
def split(x, big, small, i):
    """big[i] = tf32(x), small[i] = tf32(x − big[i])."""
    b = tf32(x)
    big[i] = b
    small[i] = tf32(x - b)


@cuda.jit(device=True)
def split_keys_fragment(p, kc, big, small, at):
    """3xTF32's A fragment of k8 step kc over the tile's rows (tf32_by_keys): P's accumulator
    entries of 8-column block kc, split into big[at … at + 3] and small[at … at + 3]. Lane t's
    P(g, 2t), P(g, 2t + 1) serve as k = t and k = t + 4 (B gives rows 2t and 2t + 1 for them)."""
    split(p[4 * kc], big, small, at)            # a0 = P(g, 2t)      as k = t
    split(p[4 * kc + 2], big, small, at + 1)    # a1 = P(g + 8, 2t)  as k = t
    split(p[4 * kc + 1], big, small, at + 2)    # a2 = P(g, 2t + 1)  as k = t + 4
    split(p[4 * kc + 3], big, small, at + 3)    # a3 = P(g + 8, 2t + 1)


@lru_cache(maxsize=None)
def rows_f32(D, B, T, PAD=False):
    """float32 rows r0 … r0 + B − 1 of x[bh] and of y[bh] ([BH, N, D] each: K and V, or Q and
    dO) → smem[x_at + row·(D + 4) + c] and smem[y_at + …], 16-byte loads and stores, zeros
    past n and, PAD (K and V), for keys whose kpm[b_idx, key] is 0 (not loaded: one mask byte
    per piece instead); both loads of a piece are issued before either store."""
    KS = D + 4
    ITEMS = B * (D // 4)

    @cuda.jit(device=True)
    def load(x, y, bh, n, r0, smem, x_at, y_at, tid, kpm, b_idx):
        for it in range((ITEMS + T - 1) // T):
            item = it * T + tid
            if item < ITEMS:
                r = item // (D // 4)
                c = (item % (D // 4)) * 4
                x0 = x1 = x2 = x3 = y0 = y1 = y2 = y3 = ZERO
                if r0 + r < n and (not PAD or kpm[b_idx, r0 + r] != 0):
                    x0, x1, x2, x3 = load4(x, ((bh * n) + r0 + r) * D + c)
                    y0, y1, y2, y3 = load4(y, ((bh * n) + r0 + r) * D + c)
                store4(smem, x_at + r * KS + c, x0, x1, x2, x3)
                store4(smem, y_at + r * KS + c, y0, y1, y2, y3)
    return load


@lru_cache(maxsize=None)
def tf32_by_rows(NB, KC):
    """acc += A · Bᵀ over d with 3xTF32, both from shared float32 rows (stride KS): A = the
    warp's 16 rows at a_off (a0 = A[g, 8kc + t], a1 = A[g + 8, …], a2, a3 at + 4), B = rows
    8nb + g at b_off (b0 = B[8nb + g, 8kc + t], b1 at + 4). pa, ps: 4 floats each of the
    caller's, for one k8 step of A split (big, small)."""

    @cuda.jit(device=True)
    def run(a_off, smem, b_off, KS, g, t, acc, pa, ps):
        for kc in range(KC):
            for r in range(4):
                split(load1(smem, a_off + (g + 8 * (r & 1)) * KS + 8 * kc + 4 * (r >> 1) + t),
                      pa, ps, r)
            for nb in range(NB):
                at = b_off + (8 * nb + g) * KS + 8 * kc + t
                acc[4 * nb], acc[4 * nb + 1], acc[4 * nb + 2], acc[4 * nb + 3] = mma3(
                    pa[0], pa[1], pa[2], pa[3], ps[0], ps[1], ps[2], ps[3],
                    load1(smem, at), load1(smem, at + 4),
                    acc[4 * nb], acc[4 * nb + 1], acc[4 * nb + 2], acc[4 * nb + 3])
    return run


@lru_cache(maxsize=None)
def tf32_by_keys(NB, KC2):
    """acc += P · B with 3xTF32 over the tile's rows (keys or queries): P = accumulators (KC2
    8-column blocks), B = shared float32 rows (stride KS) at off. k8 per 8-column block of P:
    lane t's P(g, 2t), P(g, 2t + 1) serve as k = t and k = t + 4, so B gives rows 2t and
    2t + 1 for them — Σ_k unchanged. pa, ps: the caller's 4 + 4 floats, as above."""

    @cuda.jit(device=True)
    def run(p, smem, off, KS, g, t, acc, pa, ps):
        for kc in range(KC2):
            split_keys_fragment(p, kc, pa, ps, 0)   # (k permuted: see there)
            at = off + (8 * kc + 2 * t) * KS + g
            for nb in range(NB):
                acc[4 * nb], acc[4 * nb + 1], acc[4 * nb + 2], acc[4 * nb + 3] = mma3(
                    pa[0], pa[1], pa[2], pa[3], ps[0], ps[1], ps[2], ps[3],
                    load1(smem, at + 8 * nb), load1(smem, at + KS + 8 * nb),
                    acc[4 * nb], acc[4 * nb + 1], acc[4 * nb + 2], acc[4 * nb + 3])
    return run


def tf32x3_tiles(D, B, WARPS):
    """The 3xTF32 kernels' sizes (forward and backward): (16·WARPS rows of the block, T
    threads, KS = the row stride of a shared float32 tile (D + 4), NB = 8-column blocks and
    k8 steps over the streamed tile of B rows, NBO = the same over d, then the registers per
    lane of a B-wide and a d-wide accumulator: 4·NB, 4·NBO)."""
    NB, NBO = B // 8, D // 8
    return 16 * WARPS, 32 * WARPS, D + 4, NB, NBO, 4 * NB, 4 * NBO


@lru_cache(maxsize=None)
def flash_tf32x3_kernel(D, Bc, WARPS, CAUSAL, PAD):
    """float32 FlashAttention forward on tensor cores, 3xTF32 (see the module menu).

    Each operand x is split into big = tf32(x) and small = tf32(x − big); a product a·b is
    big_a·big_b + big_a·small_b + small_a·big_b (the small·small term, ~2⁻²² relative, is
    dropped): three m16n8k8 mmas instead of one, summed from zero and added to S or acc on the
    CUDA cores a k8 step at a time (``mma3``: the tensor core rounds each mma toward zero, so
    mmas straight into acc would drift as N), and float32-level accuracy. Operands come
    from shared memory as float32 (no packing); P's accumulator layout maps onto the tf32 A fragment
    with its k index permuted (lane t holds keys 2t, 2t+1, taken as k = t and t + 4), and the
    B rows of V are read in the same permuted order, so Σ_k is unchanged.
    """
    # NBS 8-column blocks of S = k8 steps of P V; NBO 8-column blocks of O = k8 steps of S;
    # registers per lane: S (SN), acc and the Q fragments (AN); KS: row stride of K, V tiles
    Br, T, KS, NBS, NBO, SN, AN = tf32x3_tiles(D, Bc, WARPS)
    KC, QA = NBO, AN                # k8 steps of S over d; registers of the Q fragments
    TILE = Bc * KS                  # floats per shared tile; the V tile follows
    assert D % 8 == 0 and Bc % 16 == 0
    update = online_softmax_tc(NBS, NBO)
    mask = mask_scores_tc(NBS, CAUSAL, PAD)
    rows = rows_f32(D, Bc, T, PAD)
    pv = tf32_by_keys(NBO, NBS)
    clear_acc = zeros(AN)
    clear_s = zeros(SN)
    finish = finish_rows(NBO, store_floats)

    @cuda.jit
    def flash_tf32x3(q, k, v, o, lse, scale, n_q, n_k, heads, kpm):
        """q [BH, Nq, D], k, v [BH, Nk, D], o [BH, Nq, D] float32 (D = d); lse [BH, Nq]."""
        bh, q0 = block_tile(CAUSAL, Br)
        tid = cuda.threadIdx.x
        warp = tid // 32
        lane = tid % 32
        g = lane // 4
        t = lane % 4
        r_lo = q0 + 16 * warp + g
        offset = n_k - n_q
        scale2 = scale * LOG2E

        # dynamic, tc_smem_bytes(D, Bc, True): two stages of [K tile | V tile], rows as they
        # are (row stride KS); tile j in stage j % 2
        smem = cuda.shared.array(0, float32)

        qa = cuda.local.array(QA, float32)          # A of S = Q Kᵀ (m16n8k8 layout), split
        for kc in range(KC):                        # into big + small a k8 step at a time
            for r in range(4):                      # (holding both would double these)
                row = r_lo + 8 * (r & 1)
                qa[4 * kc + r] = q[bh, row, 8 * kc + 4 * (r >> 1) + t] if row < n_q else ZERO
        pa = cuda.local.array(4, float32)           # one k8 step of A (Q or P), split
        ps = cuda.local.array(4, float32)

        s = cuda.local.array(SN, float32)
        acc = cuda.local.array(AN, float32)
        ml = cuda.local.array(4, float32)
        clear_acc(acc)
        ml[0] = NEG_INF
        ml[1] = NEG_INF
        ml[2] = ZERO
        ml[3] = ZERO

        b_idx = bh // heads                         # (PAD: the mask's batch row)
        n_tiles = kv_tiles(CAUSAL, q0, Br, Bc, n_q, n_k)
        if n_tiles > 0:
            rows(k, v, bh, n_k, 0, smem, 0, TILE, tid, kpm, b_idx)
        for j in range(n_tiles):
            k0 = j * Bc
            cuda.syncthreads()                      # wait: tile j is in stage j % 2, and every
                                                    # warp is done with tile j − 1's stage
            if j + 1 < n_tiles:                     # (the same for the whole block)
                nxt = ((j + 1) & 1) * 2 * TILE
                rows(k, v, bh, n_k, k0 + Bc, smem, nxt, nxt + TILE, tid, kpm, b_idx)
            sK = (j & 1) * 2 * TILE                 # offsets of this tile's K and V in smem
            sV = sK + TILE

            clear_s(s)                              # S = Qi Kjᵀ, a k8 step of Q split at
            for kc in range(KC):                    # a time (b0 = K[8nb + g][8kc + t])
                for r in range(4):
                    split(qa[4 * kc + r], pa, ps, r)
                for nb in range(NBS):
                    at = sK + (8 * nb + g) * KS + 8 * kc + t
                    s[4 * nb], s[4 * nb + 1], s[4 * nb + 2], s[4 * nb + 3] = mma3(
                        pa[0], pa[1], pa[2], pa[3], ps[0], ps[1], ps[2], ps[3],
                        load1(smem, at), load1(smem, at + 4),
                        s[4 * nb], s[4 * nb + 1], s[4 * nb + 2], s[4 * nb + 3])
            for i in range(SN):
                s[i] *= scale2                      # S = Qi Kjᵀ · scale · log2e
            if PAD or k0 + Bc > n_k or (CAUSAL and k0 + Bc - 1 > q0 + offset):
                mask(s, k0, r_lo, 2 * t, n_k, offset, kpm, b_idx)
            update(s, acc, ml, float32(1.0))        # (S scaled above: mult = 1)

            pv(s, smem, sV, KS, g, t, acc, pa, ps)  # acc += P Vj (3xTF32, k permuted)

        finish(o, lse, acc, ml, bh, r_lo, t, n_q)  # O = acc / l, LSE = m·ln2 + ln l

    BUILT[("flash_tf32x3_kernel", D, Bc, WARPS, CAUSAL, PAD)] = flash_tf32x3
    return flash_tf32x3
