"""§37 and §42–43 for float32 — 3xTF32 FlashAttention forward on Hopper's wgmma: each operand
split once, by a packing kernel, into tf32 "big" and "small" parts laid out as the tensor core
reads them; a producer warp brings tiles in by bulk copies; consumer warpgroups run the three
products of every k8 step as wgmmas, summed in stages and added on the CUDA cores.

Menu
| kernel                                        | what                                          |
|-----------------------------------------------|-----------------------------------------------|
| ``pack_kernel(D, R, C, TRANS, PAD)``          | float32 [BH, n, D] → tiles of big = tf32(x)   |
|                                               | and small = tf32(x − big), each tile as       |
|                                               | K-major core matrices (hopper.kmajor_index):  |
|                                               | Q and K by rows; V transposed (Vᵀ: its keys   |
|                                               | in the k slot, permuted within 8: ``PERM``);  |
|                                               | zeros past n and (PAD) for padded keys        |
| ``flash_wgmma_tf32_kernel(D, Bc, CWG, CAUSAL, | the forward on the packed tiles: S = Q Kᵀ as  |
|   PAD, FOLD, STAGES=2)``                      | SS wgmmas m64n{Bc}k8, O += P V as RS wgmmas   |
|                                               | m64n{D}k8 (P split in registers); a producer  |
|                                               | warp, a ring of STAGES stages on mbarriers    |

Ladder (lesson tier to fast tier): from the lesson kernel to this file, step by step, at B1 H16
N8192 d128 float32 unless a step says otherwise; TFLOP/s = 4·B·H·N²·d / time (half when causal);
kernel-only CUDA-event medians; "× lesson" = the lesson kernel's time / the step's on the same
inputs. ``flashlesson bench ladder --only attention_wgmma_tf32`` checks and times every step with a
timed call, ``--write`` puts its numbers here; a step without one is historical (no longer separable
in the code) and keeps the TFLOP/s recorded then.
| step | what changed                                 | measured                     | timed call                     |
|------|----------------------------------------------|------------------------------|--------------------------------|
| 0    | the float32 lesson kernel of §32             | H200, 2026-12-02: 92.9 ms,   | tier='lesson'                  |
|      | (``lesson/attention.py``, CUDA cores)        | 5.92 TFLOP/s                 |                                |
| 1    | 3xTF32 on mma.sync                           | H200, 2026-12-02: 28.4 ms,   | method='flash_tc'              |
|      | (``attention_tc.flash_tf32x3_kernel``):      | 19.3 TFLOP/s, 3.27× lesson   |                                |
|      | every warp splits its B operands again each  |                              |                                |
|      | k8 step; 255 registers and local memory at d |                              |                                |
|      | = 128                                        |                              |                                |
| 2    | this file: Q, K, V split once by the packing | H200, 2026-12-02: 11.1 ms,   | method='flash_wgmma',          |
|      | kernel into the layout shared memory holds,  | 49.5 TFLOP/s, 8.37× lesson   | config=WgmmaTf32Config(Bc=32,  |
|      | both products on wgmma (three a k8 step,     |                              | CWG=1, STAGES=1)               |
|      | summed every 32 of k), a producer warp's     |                              |                                |
|      | bulk copies, one stage: load, wait, compute  |                              |                                |
| 3    | §42: two stages, the next tile's bulk copies | H200, 2026-12-02: 7.8 ms,    | method='flash_wgmma'           |
|      | in flight during this tile's wgmmas: the     | 70.5 TFLOP/s, 11.91× lesson  |                                |
|      | default                                      |                              |                                |
|      | (``tc_methods.default_wgmma_tf32_config``)   |                              |                                |

Why packing first. wgmma reads tf32 operands K-major only (no imm-trans for tf32), so B = V of O +=
P V must lie transposed, which a copy of V's rows cannot do; and all three products of 3xTF32 need
the small parts, which every warp of the mma.sync kernel recomputes from the same K/V values. One
pass over Q, K and V (read 3·n·d floats, write twice that) writes each operand's big and small
parts in the exact bytes a shared-memory tile holds, so the kernel's copies are plain bulk copies
(``hopper.bulk_copy_g2s``: one instruction a tile, no per-thread address arithmetic, completing on
the stage's mbarrier) and its inner loop does no splitting but P's.

The products (per consumer warpgroup of 64 query rows, a K/V tile of Bc keys)::

    S = Σ_parts Sp,   Sp = Σ over 4 k8 steps of d:  Qs·Kbᵀ, then Qb·Ksᵀ, then Qb·Kbᵀ
                        (12 wgmmas from zero; one part per 32 of d: D/32 accumulators)
    mask, online softmax (attention_tc.online_softmax_tc: acc *= correction)
    P → big, small A fragments (attention_tc.split_keys_fragment)
    acc += Σ_parts Op,  Op = Σ over 4 k8 steps of keys: Ps·Vb, Pb·Vs, Pb·Vb   (Bc/32 parts)

Staged sums (as attention_tc.mma3, and as torch's CUTLASS kernels, which stage every 32 of k):
the tensor core cuts every addend to the grid of the largest and rounds its sum toward zero
(sim/mma.tf32_block_fma), so a long chain of wgmmas on one accumulator drifts with one sign.
Each part sums 12 wgmmas (the small products first, while the sum is small) and the parts
are added on the CUDA cores, to nearest; acc never goes through the tensor core.

P as A from registers. The accumulator of S gives lane t the columns 2t, 2t + 1 of each 8, and
the tf32 A fragment wants k = t and t + 4 there: so k = t takes key 2t and k = t + 4 key 2t + 1
(split_keys_fragment), and V's rows are packed in that order: column kk of a Vᵀ tile holds key
8·(kk // 8) + PERM[kk % 8], PERM = (0, 2, 4, 6, 1, 3, 5, 7). Σ_k is unchanged.

Shared memory (dynamic, ``tf32_smem_bytes``; words are float32): Q, CWG × [big 64·D | small
64·D] (warpgroup c's 64 rows, K-major: LBO = 16·64 bytes, SBO = 128), then STAGES stages of
[K big | K small | Vᵀ big | Vᵀ small], each Bc·D words (K: Bc rows of D; Vᵀ: D rows of Bc).
The defaults (tc_methods.default_wgmma_tf32_config), two stages and tiles of 32 keys: d = 64
two consumer warpgroups, 128 KB; d = 128 one, 192 KB. Barriers: FULL[s] (count 1: the
producer's expect_tx, then the bytes), EMPTY[s] (count: the consumer threads), QFULL (count 1).

Registers (``attention_wgmma.block_reg_cap``): one consumer warpgroup and the producer warp are
5 warps, 255 registers each — d = 128, Bc = 32: 223–231, no spills (ptxas 13.5 offline); d = 64,
Bc = 64: 247–255 and no spills offline, 255 and 72–80 bytes of local memory as compiled on the
H200 (numba-cuda's own toolchain there; 1.05–1.09× slower than the default). Two consumer
warpgroups are 9 warps, and an SM's registers are four sub-partitions' 16384 with a block's
warps dealt out among them: 168 each (at 224, which 65536 / 288 would allow, the H200 refuses
the launch); d = 64, Bc = 32 fits them (166–167, no spills), Bc = 64 spills 380 bytes and is
refused (WgmmaTf32Config.check).

Limits: float32, d = D = 64 or 128; Bc = 32 or 64 (a multiple of 32: O's parts); CWG = 1 or 2 (2
with Bc = 32); sm_90a. No dropout, no varlen; the backward is attention_wgmma_tf32_backward's.
Masked keys: scores −inf by select, K and V rows zero in the packed tiles (past Nk, PAD), so a
padded key's NaN never reaches an mma; causal-hidden keys as flash_tc (module attention_tc,
"Documented limit"). A row with no key: O = 0, LSE = −inf. The packed copies take 2× Q, K and
V's memory (plus the K/V tile padding) while the call runs. The simulator computes each wgmma at
issue (sim/hopper.py); its tf32 sums round as the tensor core's model does.

How to run: ``attention(q32, k32, v32, method="flash_wgmma")`` (float32 on Hopper),
``pytest tests/test_attention_tc.py -k wgmma_tf32``; on a Hopper GPU ``flashlesson bench ladder
--only attention_wgmma_tf32`` and ``flashlesson bench attention --tc``.
"""

from functools import lru_cache

from numba import cuda, float32, uint32, uint64

from .attention import block_tile, kv_tiles
from .attention_tc import LOG2E, finish_rows, fold_scale, mask_scores_tc, online_softmax_tc, \
    split_keys_fragment, store_floats, zeros
from .attention_wgmma import WARPGROUP, block_reg_cap, ring_slot, uniform_u32
from .hopper import WGMMA_TF32, WGMMA_TF32_RS, bulk_copy_g2s, fence_mbarrier_init, kmajor_desc, \
    mbar_arrive, mbar_arrive_expect_tx, mbar_init, mbar_try_wait_parity, shared_addr, \
    wgmma_commit_group, wgmma_fence, wgmma_fence_operand, wgmma_wait_group
from .mma import tf32
from .reductions import NEG_INF, ZERO
from .sim import gpu_options

BUILT = {}                  # (factory, *arguments) → kernel, for resource reports
PERM = (0, 2, 4, 6, 1, 3, 5, 7)     # Vᵀ column kk % 8 → key within its 8 (P's k order)
PART = 32                   # k of one staged sum (4 k8 steps)
STEPS = PART // 8           # k8 steps in a part


def tf32_smem_bytes(D, Bc, CWG, STAGES=2):
    """Dynamic shared memory: Q (big and small, 64·CWG rows) and STAGES × (K, Vᵀ, big and
    small), float32."""
    return 4 * (2 * 64 * CWG * D + STAGES * 4 * Bc * D)


@lru_cache(maxsize=None)
def pack_kernel(D, R, C, TRANS, PAD):
    """pack(x, out, n, kpm, heads, tiles): x [BH, n, D] float32 → out, flat, [BH, tiles, 2, R·C]:
    tile i's big part, then its small part, each R rows × C words as K-major core matrices
    (word (r, kw) at 4R·(kw // 4) + 32·(r // 8) + 4·(r % 8) + kw % 4: hopper.kmajor_index in
    words; LBO = 16·R bytes, SBO = 128). Not TRANS (Q, K): row r is token R·i + r, word kw its
    column (C = D). TRANS (V): row r is column r of V (R = D), word kw the key C·i + 8·(kw // 8)
    + PERM[kw % 8] (C = Bc). Zeros for tokens ≥ n and, PAD, keys whose kpm[b, key] is 0. One
    thread a word of a tile (grid: words of all tiles × BH)."""
    TW = R * C                      # words of one part of a tile
    RB = R // 8                     # row blocks of 8

    @cuda.jit
    def pack(x, out, n, kpm, heads, tiles):
        w = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x    # word of the head's tiles
        bh = cuda.blockIdx.y
        if w >= tiles * TW:
            return
        i = w // TW                 # tile
        e = w % TW                  # word in the part
        cm = e // 32                # core matrix: (kw // 4)·RB + r // 8
        r = (cm % RB) * 8 + (e % 32) // 4
        kw = (cm // RB) * 4 + e % 4
        if TRANS:
            tok = C * i + 8 * (kw // 8) + PERM[kw % 8]
            col = r
        else:
            tok = R * i + r
            col = kw
        val = ZERO
        if tok < n and (not PAD or kpm[bh // heads, tok] != 0):
            val = x[bh, tok, col]
        big = tf32(val)
        at = ((bh * tiles + i) * 2) * TW + e
        out[at] = big                               # big = tf32(x)
        out[at + TW] = tf32(val - big)              # small = tf32(x − big)

    BUILT[("pack_kernel", D, R, C, TRANS, PAD)] = pack
    return pack


@lru_cache(maxsize=None)
def fence_all(N, COUNT):
    """fence(a0, a1, a2, a3): wgmma_fence_operand on the first COUNT (1, 2 or 4) of four
    accumulators of N floats (the staged parts)."""

    @cuda.jit(device=True)
    def fence(a0, a1, a2, a3):
        wgmma_fence_operand(a0, N)
        if COUNT > 1:
            wgmma_fence_operand(a1, N)
        if COUNT > 2:
            wgmma_fence_operand(a2, N)
            wgmma_fence_operand(a3, N)
    return fence


@lru_cache(maxsize=None)
def summed(N, COUNT):
    """total(a0, a1, a2, a3): a0 = Σ of the first COUNT (1, 2 or 4) parts of N floats, to
    nearest, in order (S's parts over d)."""

    @cuda.jit(device=True)
    def total(a0, a1, a2, a3):
        for i in range(N):
            if COUNT > 2:
                a0[i] = ((a0[i] + a1[i]) + a2[i]) + a3[i]
            elif COUNT > 1:
                a0[i] = a0[i] + a1[i]
    return total


@lru_cache(maxsize=None)
def added(N, COUNT):
    """add(acc, a0, a1): acc += a0 (+ a1, COUNT = 2), N floats, to nearest (the key parts of
    a tile into O, dV, dK, dQ: acc never goes through the tensor core)."""

    @cuda.jit(device=True)
    def add(acc, a0, a1):
        for i in range(N):
            if COUNT > 1:
                acc[i] += a0[i] + a1[i]
            else:
                acc[i] += a0[i]
    return add


@lru_cache(maxsize=None)
def key_part(D, KS=STEPS):
    """part(acc, fb, fs, tb, ts, p): acc = part p (the tile's tokens 8·KS·p … 8·KS·p + 8·KS − 1:
    32 tokens, or 16 where the tile has only 16, KS = 2) of F X, 64 × D, as RS wgmmas
    m64n{D}k8 from zero: Fs·Xb, Fb·Xs, Fb·Xb — F in registers as A
    fragments (big fb, small fs: attention_tc.split_keys_fragment), X a tile packed transposed
    with its tokens in PERM's order (tb, ts: k8 step 0's descriptors of its big and small
    parts, D rows: a step 2·D units on). Issued, not committed. The forward's O += P V
    (X = Vᵀ), and attention_wgmma_tf32_backward's dV, dK, dQ parts."""
    mma = WGMMA_TF32_RS[D]

    @cuda.jit(device=True)
    def part(acc, fb, fs, tb, ts, p):
        for kk in range(KS):
            kc = KS * p + kk
            mma(acc, fs[4 * kc], fs[4 * kc + 1], fs[4 * kc + 2], fs[4 * kc + 3],
                tb + uint64(2 * D * kc), kk > 0)
        for kk in range(KS):
            kc = KS * p + kk
            mma(acc, fb[4 * kc], fb[4 * kc + 1], fb[4 * kc + 2], fb[4 * kc + 3],
                ts + uint64(2 * D * kc), True)
        for kk in range(KS):
            kc = KS * p + kk
            mma(acc, fb[4 * kc], fb[4 * kc + 1], fb[4 * kc + 2], fb[4 * kc + 3],
                tb + uint64(2 * D * kc), True)
    return part


@lru_cache(maxsize=None)
def key_product(D, COUNT, KS=STEPS):
    """issue(a0, a1, fb, fs, tb, ts): one commit group of key_part's wgmmas — a0 = part 0 of
    F X (the tile's tokens 0 … 31, or 0 … 15 with KS = 2) and, COUNT = 2, a1 = part 1 (32 …
    63) — after fencing a0, a1 (the adds of the tile before read them) and wgmma_fence (fb, fs
    just written). Issued and committed, not waited for. The forward's O, and
    attention_wgmma_tf32_backward's dV, dK, dQ parts."""
    part = key_part(D, KS)
    fence = fence_all(D // 2, COUNT)

    @cuda.jit(device=True)
    def issue(a0, a1, fb, fs, tb, ts):
        fence(a0, a1, a1, a1)
        wgmma_fence()
        part(a0, fb, fs, tb, ts, 0)
        if COUNT > 1:                       # (compile-time: 64 tokens a tile)
            part(a1, fb, fs, tb, ts, 1)
        wgmma_commit_group()
    return issue


@lru_cache(maxsize=None)
def flash_wgmma_tf32_kernel(D, Bc, CWG, CAUSAL, PAD, FOLD=True, STAGES=2):
    """float32 FlashAttention forward, 3xTF32 on wgmma, on pack_kernel's tiles (module menu).
    FOLD: scale·log2e > 0 (attention_tc.fold_scale)."""
    assert D in (64, 128) and Bc in (32, 64) and CWG in (1, 2) and STAGES >= 1
    mma_s = WGMMA_TF32[Bc]                  # S part: 64 × Bc, A = Q, B = K (shared memory)
    Br = 64 * CWG
    NC = WARPGROUP * CWG                    # consumer threads; the producer warp after them
    T = NC + 32
    QH = 64 * D                             # words of one part (big or small) of a warpgroup's Q
    QW = 2 * QH * CWG                       # words of the Q tile
    KW = Bc * D                             # words of one part of K (or Vᵀ) of a tile
    SW = 4 * KW                             # words of a stage: K big, K small, Vᵀ big, Vᵀ small
    FULL, EMPTY, QFULL = 0, STAGES, 2 * STAGES      # bars: FULL[s], EMPTY[s], QFULL
    NBARS = 2 * STAGES + 1
    SH, OH = Bc // 2, D // 2                # accumulator floats per thread: S, O
    NBS, NBO = Bc // 8, D // 8
    SP, OP = D // PART, Bc // PART          # staged parts of S (over d) and of O (over keys)
    assert SP <= 4 and OP <= 2
    update = online_softmax_tc(NBS, NBO)
    mask = mask_scores_tc(NBS, CAUSAL, PAD, 1, CLAMPED=True)
    scaled = fold_scale(SH, FOLD)
    o_parts = key_product(D, OP)            # O's parts: 64 × D, A = P (registers), B = Vᵀ
    fence_s, fence_o = fence_all(SH, SP), fence_all(OH, OP)
    sum_s, add_o = summed(SH, SP), added(OH, OP)
    clear_acc = zeros(OH)
    finish = finish_rows(NBO, store_floats)
    cap = block_reg_cap(T)

    @cuda.jit(device=True)
    def s_part(acc, qb, qs, kb, ksm, p):
        """acc = Sp, part p of S = Q Kᵀ (d = 32p … 32p + 31): the small products, then
        big·big; qb, qs, kb, ksm: k8 step 0's descriptors of Q's and K's parts (K-major, as
        hopper.kmajor_desc: step ks 32·rows·ks bytes on, added as 2·rows·ks 16-byte units).
        Issued, not committed; nothing waits."""
        for kk in range(STEPS):                     # Qs·Kbᵀ (acc from zero)
            ks = STEPS * p + kk
            mma_s(acc, qs + uint64(128 * ks), kb + uint64(2 * Bc * ks), kk > 0)
        for kk in range(STEPS):                     # Qb·Ksᵀ
            ks = STEPS * p + kk
            mma_s(acc, qb + uint64(128 * ks), ksm + uint64(2 * Bc * ks), True)
        for kk in range(STEPS):                     # Qb·Kbᵀ
            ks = STEPS * p + kk
            mma_s(acc, qb + uint64(128 * ks), kb + uint64(2 * Bc * ks), True)

    @cuda.jit(**gpu_options(max_registers=cap))
    def flash_wgmma_tf32(qp, kp, vp, o, lse, scale, n_q, n_k, heads, kpm, q_tiles, k_tiles):
        """qp, kp, vp: pack_kernel's tiles, flat float32 (Q: tiles of 64 rows, K: of Bc rows,
        Vᵀ: of Bc keys); o [BH, Nq, D] float32; lse [BH, Nq]; kpm uint8 [B, Nk] (PAD)."""
        bh, q0 = block_tile(CAUSAL, Br)
        tid = cuda.threadIdx.x
        smem = cuda.shared.array(0, float32)        # Q | stage 0 | stage 1 … (menu)
        bars = cuda.shared.array(NBARS, uint64)
        b_idx = bh // heads
        offset = n_k - n_q                          # §34: query i sees key j iff j ≤ i + offset
        n_tiles = kv_tiles(CAUSAL, q0, Br, Bc, n_q, n_k)
        if tid == 0:
            for s in range(STAGES):
                mbar_init(bars, FULL + s, 1)        # FULL[s]: the producer's expect_tx
                mbar_init(bars, EMPTY + s, NC)      # EMPTY[s]: every consumer thread
            mbar_init(bars, QFULL, 1)
            fence_mbarrier_init()
        cuda.syncthreads()                          # wait: the barriers are ready

        if tid >= NC:                               # the producer warp: lane 0 copies
            if tid == NC and n_tiles > 0:           # (no tile: no copy left in flight)
                mbar_arrive_expect_tx(bars, QFULL, 4 * QW)
                bulk_copy_g2s(smem, 0, qp, (bh * q_tiles + q0 // 64) * 2 * QH, 4 * QW,
                              bars, QFULL)          # Q: CWG tiles of 64 rows, both parts
                for i in range(n_tiles):
                    s, ph = ring_slot(i, STAGES)
                    if i >= STAGES:                 # wait: tile i − STAGES left stage s
                        mbar_try_wait_parity(bars, EMPTY + s, ph ^ uint32(1))
                    mbar_arrive_expect_tx(bars, FULL + s, 4 * SW)
                    at = QW + SW * s
                    src = (bh * k_tiles + i) * 2 * KW
                    bulk_copy_g2s(smem, at, kp, src, 8 * KW, bars, FULL + s)        # K
                    bulk_copy_g2s(smem, at + 2 * KW, vp, src, 8 * KW, bars, FULL + s)   # Vᵀ
            return

        cw = tid // WARPGROUP                       # consumer warpgroup: rows 64·cw …
        w = (tid % WARPGROUP) // 32
        g = (tid % 32) // 4
        t = tid % 4
        r_lo = q0 + 64 * cw + 16 * w + g            # my rows: r_lo, r_lo + 8
        scale2 = scale * LOG2E
        s0 = cuda.local.array(SH, float32)          # S's parts (s0 becomes S, then P)
        s1 = cuda.local.array(SH, float32)
        s2 = cuda.local.array(SH, float32)
        s3 = cuda.local.array(SH, float32)
        o0 = cuda.local.array(OH, float32)          # O's parts of this tile
        o1 = cuda.local.array(OH, float32)
        pb = cuda.local.array(SH, float32)          # P as A fragments: big, small
        ps = cuda.local.array(SH, float32)
        acc = cuda.local.array(OH, float32)         # un-normalized output (§32: acc)
        ml = cuda.local.array(4, float32)           # m of my 2 rows (base 2), l
        clear_acc(acc)
        ml[0] = NEG_INF
        ml[1] = NEG_INF
        ml[2] = ZERO
        ml[3] = ZERO
        q_addr = uniform_u32(shared_addr(smem, 2 * QH * cw))   # my warpgroup's Q (big)
        ring = uniform_u32(shared_addr(smem, QW))               # stage 0's K (big)
        qb = kmajor_desc(q_addr, 64, 0, False)      # Q big, Q small: k8 step 0
        qs = kmajor_desc(q_addr + uint32(4 * QH), 64, 0, False)
        if n_tiles > 0:
            mbar_try_wait_parity(bars, QFULL, 0)    # wait: Q has landed

        for j in range(n_tiles):
            s, ph = ring_slot(j, STAGES)
            mbar_try_wait_parity(bars, FULL + s, ph)    # wait: K_j, V_j have landed
            k_addr = uint32(ring + uint32(4 * SW) * s)
            kb = kmajor_desc(k_addr, Bc, 0, False)  # K big; its small part 4·KW bytes on
            ksm = kb + uint64(KW // 4)
            vb = kmajor_desc(k_addr + uint32(8 * KW), D, 0, False)     # Vᵀ big, small
            vs = vb + uint64(KW // 4)

            fence_s(s0, s1, s2, s3)
            wgmma_fence()                           # (s0 last read as P, before)
            s_part(s0, qb, qs, kb, ksm, 0)
            s_part(s1, qb, qs, kb, ksm, 1)
            if SP > 2:                              # (compile-time: d = 128)
                s_part(s2, qb, qs, kb, ksm, 2)
                s_part(s3, qb, qs, kb, ksm, 3)
            wgmma_commit_group()
            wgmma_wait_group(0)                     # wait: S's parts
            fence_s(s0, s1, s2, s3)
            sum_s(s0, s1, s2, s3)                   # S = Σ parts (to nearest)

            mult = scaled(s0, scale2)
            k0 = j * Bc
            if PAD or k0 + Bc > n_k or (CAUSAL and k0 + Bc - 1 > q0 + offset):
                mask(s0, k0, r_lo, 2 * t, n_k, offset, kpm, b_idx)
            update(s0, acc, ml, mult)               # m, l; P = 2^(S₂ − m); acc *= correction
            for kc in range(NBS):                   # P → big, small A fragments
                split_keys_fragment(s0, kc, pb, ps, 4 * kc)

            o_parts(o0, o1, pb, ps, vb, vs)        # group: O's parts = P Vj
            wgmma_wait_group(0)                     # wait: O's parts; stage s read
            fence_o(o0, o1, o1, o1)
            mbar_arrive(bars, EMPTY + s)            # EMPTY[s]: the stage may be refilled
            add_o(acc, o0, o1)                      # acc += Σ parts (to nearest)

        finish(o, lse, acc, ml, bh, r_lo, t, n_q)  # O = acc / l, LSE = m·ln2 + ln l

    BUILT[("flash_wgmma_tf32_kernel", D, Bc, CWG, STAGES, CAUSAL, PAD)
          + (() if FOLD else ("scale ≤ 0",))] = flash_wgmma_tf32
    return flash_wgmma_tf32
