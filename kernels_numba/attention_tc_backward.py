"""§30 + §37 — FlashAttention backward on tensor cores (fp16 / bf16 in, fp32 accumulation).

Menu
| kernel                                               | what                                    |
|------------------------------------------------------|-----------------------------------------|
| ``tc_bwd_preprocess(BF16, LSE2, CLEAR, VEC)``        | D_i = Σ_c dO_ic·O_ic (one thread a row) |
|                                                      | (LSE2: and LSE_i·log2e, for wgmma; VEC: |
|                                                      | 16-byte loads)                          |
| ``flash_tc_bwd_dkdv_kernel(D, Bq, WARPS, CAUSAL,     | one block per 16·WARPS keys, Q tiles    |
|   PAD, BF16, ASYNC)``                                | streamed: dV += Pᵀ dO, dK += dSᵀ Q       |
| ``flash_tc_bwd_dq_kernel(D, Bk, WARPS, CAUSAL,       | one block per 16·WARPS queries, K/V     |
|   PAD, BF16, ASYNC)``                                | tiles streamed: dQ += dS K              |

Ladder (lesson tier to fast tier): from the lesson kernel to this file, step by step, at B4 H16
N1024 d64 float16 unless a step says otherwise; TFLOP/s = 10·B·H·N²·d / time (2.5 × the forward's);
kernel-only CUDA-event medians; "× lesson" = the lesson kernel's time / the step's on the same
inputs. ``flashlesson bench ladder --only attention_tc_backward`` checks and times every step with a
timed call, ``--write`` puts its numbers here; a step without one is historical (no longer separable
in the code) and keeps the TFLOP/s recorded then.
| step | what changed                                 | measured                     | timed call                     |
|------|----------------------------------------------|------------------------------|--------------------------------|
| 0    | the lesson kernels of §30 on CUDA cores, on  | H200, 2026-12-02: 5.67 ms,   | tier='lesson'                  |
|      | float32 inputs of the same shape (there is   | 7.57 TFLOP/s                 |                                |
|      | no lesson tensor-core backward) (float32)    |                              |                                |
| 1    | D, dK/dV on the transposed problem, dQ, all  | H200, 2026-12-02: 0.44 ms,   | config=TcBwdConfig(Bq=64,      |
|      | on ``mma.sync``, tiles through registers, 4  | 97.7 TFLOP/s, 12.90× lesson  | KV_WARPS=4, Bk=64, Q_WARPS=4,  |
|      | warps (before: 0.32× / 0.29× SDPA flash      |                              | KV_ASYNC=False, Q_ASYNC=False) |
|      | backward, docs/results.md)                   |                              |                                |
| 2    | ASYNC loads (cp.async stages, ldmatrix), 8   | historical: H200,            | the defaults (then flash_tc)   |
|      | warps: the default (before: 0.62–0.84× SDPA  | 2026-12-01: 0.311 ms, 138    | before step 3                  |
|      | flash backward; 166.9 TFLOP/s at B2 H16      | TFLOP/s, 18.20× lesson       |                                |
|      | N4096 d64, 0.63×,                            |                              |                                |
|      | docs/bench_attention_tc_backward_h200.json). |                              |                                |
|      | Base-2 exponentials (``mma.ex2``) in both    |                              |                                |
|      | steps as run today                           |                              |                                |
| 3    | the backward's first launch (D_i = Σ_c       | H200, 2026-12-02: 0.284 ms,  | method='flash_tc'              |
|      | dO_ic·O_ic, a thread a row) reads its rows   | 151 TFLOP/s, 19.97× lesson   |                                |
|      | 16 bytes a load instead of a word (VEC; the  |                              |                                |
|      | same sums in the same order, the same bits): |                              |                                |
|      | 0.020 → 0.007 ms at this shape on the wgmma  |                              |                                |
|      | backward's form of it (H200, 2026-12-02,     |                              |                                |
|      | docs/results.md): the method's default (the  |                              |                                |
|      | default method on Hopper is ``flash_wgmma``; |                              |                                |
|      | this file's steps name theirs)               |                              |                                |

The same three kernels as the CUDA-core backward (kernels_numba/attention_backward.py): S and P
recomputed from Q, K and the forward's LSE (nothing N × N stored), no atomics (every gradient
element is summed by one block in a fixed order: bitwise the same from run to run). Every
product is an m16n8k16 mma (kernels_numba/mma.py); the element-wise steps run on the CUDA cores
on the accumulator layout (lane 4g + t: rows g, g + 8; columns 2t, 2t + 1 of each 8).

The dK/dV kernel works on the transposed problem, keys as rows, so that Pᵀ and dSᵀ come out of
their mmas already as the A operands of dV and dK::

    for each Q tile i (queries q0 … q0 + Bq − 1):     K, V rows of the block: A fragments in registers
        Sᵀ  = K Qiᵀ                     B = Qi rows (shared)
        Pᵀ  = exp(Sᵀ·scale − LSE_i)     per column (query); masked → 0 (as 2^(Sᵀ·scale·log2e −
                                        LSE_i·log2e): one FFMA and one ex2, mma.ex2)
        dPᵀ = V dOiᵀ                    B = dOi rows (shared)
        dSᵀ = Pᵀ ∘ (dPᵀ − D_i)
        dV += Pᵀ dOi                    B = dOiᵀ (shared, transposed)
        dK += dSᵀ Qi                    B = Qiᵀ (shared, transposed)
    dK ·= scale

The dQ kernel, queries as rows::

    for each K/V tile j:                Q, dO rows of the block: A fragments in registers
        S = Qi Kjᵀ;  P = exp(S·scale − LSE) (by ex2, as above);  dP = dOi Vjᵀ;  dS = P∘(dP − D)
        dQ += dS Kj                     B = Kjᵀ (shared, transposed)
    dQ ·= scale

Shared tiles come from ``attention_tc.kv_loader_tc``: rows as they are (B of a product over d)
and transposed into key/query pairs (B of a product over keys/queries). Single-buffered: two
barriers per tile.

ASYNC: only rows in shared memory, two stages by ``cp.async`` (the next tile's rows, LSE and D
in flight while this one is computed; one barrier a tile); the transposed operands are read by
``ldmatrix.trans`` from the rows, and the block's own rows (K and V in the dK/dV kernel, Q
and dO in the dQ kernel) stay in shared memory, their A fragments read by ``ldmatrix`` at each
use instead of held in registers (the defaults on the H200: docs/results.md, "Tensor
cores"). Causal grids run their heaviest blocks first (lane_rows). Limits: any head dim d in
1 … 256, run as D = d rounded up to a multiple of 16 with zeros in columns d … D − 1 on chip
and nothing written there (attention_tc.head_io: Q, K, V, dO zero-padded give dK = dSᵀ Q and
dQ = dS K zero there, and D_i sums the true d); no dropout, no varlen (the fp32 backward has
them). Inputs/outputs [BH, N, d/2] uint32 words of two halves (d % 8 ≠ 0: [BH, N, d] uint16
halves, loaded one by one); LSE and D [BH, Nq] float32.

Masked keys (docs/api.md; attention_tc's menu): with PAD, padded keys' K and V rows are zeros on chip —
the dQ kernel's streamed tiles (both loader forms), the dK/dV kernel's own rows (A fragments or
cp.async rows, once per block) — so no NaN of theirs enters a product, and the dK/dV kernel writes
dk = dv = 0 for them (their rows of Pᵀ, dSᵀ there are not 0 — ds_transposed with KILL False — but
reach only their own dK, dV rows, which clear_padded overwrites). The dQ kernel's element step sets
dS = 0 where it masks a score. The causal diagonal limit of the forward holds for dQ = dS K too.

How to run: ``pytest tests/test_attention_tc_backward.py``; ``flashlesson bench attention --tc
--backward`` (GPU).
"""

from functools import lru_cache

from numba import cuda, float32, int32, uint32

from .attention import block_tile, first_q_tile, kv_tiles
from .attention_backward import POS_INF, lse_or_inf
from .attention_tc import BUILT, LOG2E, head_io, kv_loader_tc, ldsm_products_a, \
    pack_accumulators, padded_head_dim, products_for, rows_async, tc_shapes, zeros
from .jit import pure_device
from .mma import ex2, pack_bf16, pack_f16, unpack_bf16, unpack_f16
from .reductions import NEG_INF, ZERO
from .vector import cp_async4, cp_async_wait_all, load1, load4


def tc_bwd_smem_bytes(D, B, WARPS, ASYNC=False):
    """Two tiles, each rows + transposed (+ two float rows of B for the dK/dV kernel); ASYNC:
    two stages of two row tiles and the two float rows (rows only: ldmatrix.trans reads the
    transposes), then the block's own two row tiles (16·WARPS rows each: K and V, or Q and
    dO), read by ldmatrix instead of held in registers."""
    KS, VS = tc_shapes(D, B)
    if ASYNC:
        return (2 * (2 * B * KS + 2 * B) + 2 * 16 * WARPS * KS) * 4
    return 2 * (B * KS + D * VS) * 4 + 2 * B * 4


@lru_cache(maxsize=None)
def tc_bwd_preprocess(BF16, LSE2=False, CLEAR=False, VEC=False):
    """D[r] = Σ_c dO[r, c]·O[r, c] over rows r of o, do [R, d/2] (words) or [R, d] (uint16
    halves: d % 8 ≠ 0, attention_tc.head_io), d [R] float32. LSE2 (the wgmma backward,
    attention_wgmma_backward.py): also lse2[r] = lse2_of(lse[r]) (lse, lse2 [R] float32), the
    base-2 offset its kernels read, converted once a row here instead of once a tile there.
    CLEAR (with LSE2: the wgmma backward with dQ fused): also acc[:] = 0 and sem[:] = 0 (flat
    float32 and int32 arrays: its dQ accumulator and its turns), in the same launch.

    One thread a row, so a warp's load touches 32 rows: 32 separate pieces of memory a load.
    VEC (words, a row a multiple of four words on a 16-byte boundary): four words (eight
    halves) a load, a quarter of the loads for the same bytes, the words summed in the same
    order (the same bits): 0.095 → 0.030 ms at B1 H16 N8192 d128, 0.020 → 0.007 at B4 H16 N1024
    d64 (H200, 2026-12-02, docs/results.md)."""
    assert LSE2 or not CLEAR
    unpack = unpack_bf16 if BF16 else unpack_f16

    @cuda.jit(device=True)
    def add_word(total, ow, gw):
        o0, o1 = unpack(uint32(ow))         # (a half as a word: its high half 0)
        g0, g1 = unpack(uint32(gw))
        return total + (g0 * o0 + g1 * o1)      # D_i = Σ_c dO_ic O_ic

    @cuda.jit(device=True)
    def rows(o, do, dvec, lse, lse2):
        row = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        while row < o.shape[0]:
            total = ZERO
            if VEC:                             # (compile time; the same words, in order)
                base = row * o.shape[1]
                for c in range(0, o.shape[1], 4):
                    o0, o1, o2, o3 = load4(o, base + c)
                    g0, g1, g2, g3 = load4(do, base + c)
                    total = add_word(add_word(add_word(add_word(total, o0, g0), o1, g1),
                                              o2, g2), o3, g3)
            else:
                for c in range(o.shape[1]):
                    total = add_word(total, o[row, c], do[row, c])
            dvec[row] = total
            if LSE2:
                lse2[row] = lse2_of(lse[row], True)     # LSE·log2e, +inf for −inf
            row += cuda.gridDim.x * cuda.blockDim.x

    if not LSE2:
        @cuda.jit
        def preprocess(o, do, dvec):
            rows(o, do, dvec, dvec, dvec)       # (lse, lse2 unused)
        return preprocess

    if not CLEAR:
        @cuda.jit
        def preprocess_lse2(o, do, dvec, lse, lse2):
            rows(o, do, dvec, lse, lse2)
        return preprocess_lse2

    @cuda.jit
    def preprocess_clear(o, do, dvec, lse, lse2, acc, sem):
        rows(o, do, dvec, lse, lse2)
        first = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        step = cuda.gridDim.x * cuda.blockDim.x
        for e in range(first, acc.shape[0], step):     # (coalesced: consecutive threads,
            acc[e] = ZERO                               #  consecutive floats)
        for e in range(first, sem.shape[0], step):
            sem[e] = 0
    return preprocess_clear


@pure_device
def lse2_of(lse, live):
    """The exponent's offset in base 2: LSE·log2e, so that P = 2^(S·scale·log2e − LSE·log2e)
    is one FFMA and one ex2 (FlashAttention-2's trick); +inf (P = 0) for a query that sees no
    key or lies past Nq (live False), as attention_backward.lse_or_inf says."""
    return lse_or_inf(lse, live) * LOG2E


@cuda.jit(device=True)
def lane_row_stats(lse, dvec, bh, r_lo, n_q, stats, NAT=False, LSE2=False):
    """The dQ kernels' two rows r_lo, r_lo + 8 (attention_backward.row_stats in base 2):
    stats = [LSE·log2e (lse2_of) of each — NAT: LSE itself, lse_or_inf; LSE2: lse holds
    lse2_of(LSE) already — D of each (0 past Nq)]."""
    for half in range(2):
        row = r_lo + 8 * half
        live = row < n_q
        x = lse[bh, row] if live else NEG_INF
        if LSE2:
            stats[half] = x if live else POS_INF
        else:
            stats[half] = lse_or_inf(x, live) if NAT else lse2_of(x, live)
        stats[2 + half] = dvec[bh, row] if live else ZERO


@cuda.jit(device=True)
def lane_rows(B, CAUSAL, KEYS):
    """Who am I, in a backward kernel of B = 16·WARPS rows (keys or queries) per block: (bh,
    r0 = the block's first row, tid, g, t, lo = my first row r0 + 16·warp + g; the other is
    lo + 8), g and t as in the accumulator layout (kernels_numba/mma.py). Causal grids are
    (B·H, row blocks), heaviest first as in the forward (attention.block_tile, §34): the dQ
    kernel's last query blocks see the most keys, the dK/dV kernel's (KEYS) first key blocks
    see the most queries."""
    if CAUSAL and KEYS:
        bh, r0 = cuda.blockIdx.x, cuda.blockIdx.y * B
    else:
        bh, r0 = block_tile(CAUSAL, B)
    tid = cuda.threadIdx.x
    g = (tid % 32) // 4
    return bh, r0, tid, g, tid % 4, r0 + 16 * (tid // 32) + g


@cuda.jit(device=True)
def padded_keys(kpm, b_idx, key_lo, n_k):
    """§35: whether keys key_lo and key_lo + 8 are padded (their dk = dv = 0)."""
    return (key_lo < n_k and kpm[b_idx, key_lo] == 0,
            key_lo + 8 < n_k and kpm[b_idx, key_lo + 8] == 0)


@cuda.jit(device=True)
def exponent(s, scale, scale2, lse, NAT):
    """The exponent of P = 2^x, x = (S·scale − LSE)·log2e, from an accumulator s and the row's
    LSE term (NAT: LSE, else LSE·log2e, lse2_of). Default: s·scale2 − LSE·log2e, one FFMA
    (FlashAttention-2's trick), whose two terms carry the roundings of scale·log2e and
    LSE·log2e — about u·|S·scale·log2e| each, an absolute error of P near 1 of some 1e-6. NAT
    (the 3xTF32 kernels): fma(s, scale, −LSE)·log2e, the difference taken before the
    change of base, so that x ≈ 0 where P ≈ 1 carries only its own rounding (one FMUL more)."""
    if NAT:
        return cuda.fma(s, scale, -lse) * LOG2E
    return s * scale2 - lse


@lru_cache(maxsize=None)
def ds_transposed(NBQ, Bq, CAUSAL, PAD, NAT=False, KILL=True, LSE2=False):
    """§30 on the dK/dV kernel's Sᵀ, dPᵀ accumulators (rows: the lane's keys key_lo, key_lo + 8;
    columns: queries q0 + 8nb + 2t (+1)), in place: Pᵀ and dSᵀ. LSE_i and D_i of the tile's
    queries are at fsm[fl …] and fsm[fl + Bq …].

    Per element only P = 2^(Sᵀ·scale·log2e − LSE·log2e) and dS = P ∘ (dP − D): a query that
    sees no key or lies past Nq has LSE·log2e = +inf (lse2_of, once per column), a key past Nk
    or padded gets P = 0 (two flags per lane; KILL), and the causal test (§34) runs only in
    lanes whose keys reach above this tile's diagonal.

    A full tile costs the four per-element instructions (FFMA, ex2, FADD, FMUL) and a few per
    column; ptxas 13.5, a full tile of the wgmma dK/dV kernel at d = 128, Bq = 64 (32 elements
    a thread): 508 SASS instructions before the shortcuts below, 248 after, 208 with KILL
    False (2026-12-02). Each shortcut is exact:
    - LSE_i, D_i are read by ``vector.load1`` at a 32-bit offset, not fsm[fl + c0]: the same
      element (shared-memory offsets are ≥ 0 and small) without Numba's 64-bit index and its
      negative-index fix-up per load, so ptxas pairs the columns 2t, 2t + 1 in one 8-byte load;
    - the test "query q0 + c0 < Nq" runs only on a partial tile (q0 + Bq > Nq: the last one,
      a branch the whole block takes alike); on a full tile every query is there, and
      lse_or_inf's live = True changes nothing;
    - LSE = −inf stays tested on every tile (LSE2: once a row, in the preprocess, instead):
      the forward writes it for any row whose scores are
      all −inf — with CAUSAL or PAD a row that sees no key, but also, unmasked, a row whose
      q·k overflow float32 (bf16 and float32 inputs reach 3.4e38) or meet an infinite input;
      untested, P = 2^(S·… + inf) would be NaN there instead of 0;
    - KILL False skips the kill flags: a key's row of Pᵀ and dSᵀ reaches only its own rows of
      dV = Pᵀ dO and dK = dSᵀ Q (row r of a product is row r of A times B), and those are
      never written for a key past Nk (write_rows) and overwritten with 0 for a padded key
      (clear_padded, after the loop) — whatever P was, NaN included. A caller whose Pᵀ or dSᵀ
      go anywhere else (the wgmma kernel's FUSED dQ = dS K) keeps KILL.
    - the causal tests sit in one branch of their own (step 3), taken by the lanes at the
      diagonal: written in the per-element loop they become selects that every tile runs.
    NAT: the 3xTF32 kernels' exponent (see ``exponent``; their LSE without the log2e). LSE2:
    fsm holds lse2_of(LSE) already (tc_bwd_preprocess(…, LSE2): the wgmma kernel; at d = 128
    the conversion was 48 of a tile's 450 SASS instructions, 2026-12-02)."""
    probs, grads = ds_transposed_steps(NBQ, Bq, CAUSAL, PAD, NAT, KILL, LSE2)

    @cuda.jit(device=True)
    def step(st, dpt, fsm, fl, key_lo, q0, n_q, n_k, offset, pad_lo, pad_hi, t, scale):
        probs(st, fsm, fl, key_lo, q0, n_q, n_k, offset, pad_lo, pad_hi, t, scale)
        grads(st, dpt, fsm, fl, t)
    return step


@lru_cache(maxsize=None)
def ds_transposed_steps(NBQ, Bq, CAUSAL, PAD, NAT=False, KILL=True, LSE2=False):
    """ds_transposed as two steps (its steps 1–3 and 4), for a caller whose dPᵀ is still being
    computed while it takes Pᵀ (the wgmma dK/dV kernel: Pᵀ needs Sᵀ only):
    probs(st, fsm, fl, key_lo, q0, n_q, n_k, offset, pad_lo, pad_hi, t, scale): Sᵀ → Pᵀ in st;
    grads(st, dpt, fsm, fl, t): dPᵀ → dSᵀ = Pᵀ∘(dPᵀ − D) in dpt. Together the same
    arithmetic, in the same order, as ds_transposed."""
    assert not (NAT and LSE2)
    NC = 2 * NBQ                            # my columns: 8nb + 2t + u, u = 0, 1

    @cuda.jit(device=True)
    def probs(st, fsm, fl, key_lo, q0, n_q, n_k, offset, pad_lo, pad_hi, t, scale):
        scale2 = scale * LOG2E
        at = int32(fl) + int32(2 * t)       # my LSE_i at fsm[at + 8nb + u], D_i Bq further on
        full = q0 + Bq <= n_q               # (uniform) every column a query < Nq
        kill_lo = KILL and (key_lo >= n_k or pad_lo)
        kill_hi = KILL and (key_lo + 8 >= n_k or pad_hi)
        diag = CAUSAL and key_lo + 8 > q0 + offset          # some key > some query + offset
        # causal: key_lo + 8h > q0 + 8nb + 2t + u + offset (row half h, column u) ⟺
        # rel > 8nb + u − 8h, rel = key_lo − q0 − offset − 2t; used only where diag (so
        # rel ≥ −13) and compared with constants < Bq, min(rel, Bq) keeps every answer and
        # fits 32 bits (one compare an element, not two)
        rel = int32(min(key_lo - q0 - offset - 2 * t, Bq))

        lse = cuda.local.array(NC, float32)     # 1, per column: LSE·log2e (NAT: LSE), with
        for nb in range(NBQ):                   # +inf for −inf (lse_or_inf's test)
            for u in range(2):
                x = load1(fsm, at + 8 * nb + u)
                lse[2 * nb + u] = x if LSE2 else lse_or_inf(x, True) if NAT else \
                    lse2_of(x, True)
        if not full:                            # the last tile: +inf past Nq too (as
            for nb in range(NBQ):               # lse_or_inf's live False)
                for u in range(2):
                    if q0 + 8 * nb + 2 * t + u >= n_q:
                        lse[2 * nb + u] = POS_INF

        for nb in range(NBQ):                   # 2, per element: the exponent, into st
            for e in range(4):
                st[4 * nb + e] = exponent(st[4 * nb + e], scale, scale2, lse[2 * nb + e % 2],
                                          NAT)      # (S·scale − LSE)·log2e
        if CAUSAL and diag:                     # 3: one branch around all the causal tests
            for nb in range(NBQ):
                for e in range(4):
                    if rel > 8 * nb + e % 2 - 8 * (e // 2):     # key > query + offset
                        st[4 * nb + e] = NEG_INF                    # above the diagonal
        for i in range(4 * NBQ):                # 4a: Pᵀ
            p = ex2(st[i])
            if KILL and (kill_lo if (i % 4) < 2 else kill_hi):
                p = ZERO                                            # a key past Nk or padded
            st[i] = p

    @cuda.jit(device=True)
    def grads(st, dpt, fsm, fl, t):
        at = int32(fl) + int32(2 * t)           # (as in probs)
        for nb in range(NBQ):                   # 4b: dSᵀ
            d0 = load1(fsm, at + Bq + 8 * nb)   # D of my two columns
            d1 = load1(fsm, at + Bq + 8 * nb + 1)
            for e in range(4):
                i = 4 * nb + e
                dpt[i] = st[i] * (dpt[i] - (d0 if e % 2 == 0 else d1))      # dSᵀ = Pᵀ∘(dPᵀ − D)
    return probs, grads


@lru_cache(maxsize=None)
def ds_rows(NBK, CAUSAL, PAD, NAT=False):
    """§30 on the dQ kernel's S, dP accumulators (rows: the lane's queries r_lo, r_lo + 8, with
    LSE·log2e and D in stats[0, 1] and stats[2, 3] (row_stats); columns: keys k0 + 8nb + 2t
    (+1)), in place: P and dS. The masks (keys past Nk, §34 causal, §35 padding) set the
    exponent (S·scale − LSE)·log2e to −inf (P = 0): with padding on every tile, otherwise only
    on the last one and, causal, on those reaching above the diagonal of the lane's rows. There
    dP is set to 0 too, so dS = 0 exactly even where a hidden key's V row holds NaN/inf (padded
    keys' rows are zeros already, from the loaders)."""
    Bk = 8 * NBK
    hidden = key_hidden(CAUSAL, PAD)

    @cuda.jit(device=True)
    def step(s, dp, stats, r_lo, k0, n_k, offset, kpm, b_idx, t, scale):
        scale2 = scale * LOG2E
        edge = k0 + Bk > n_k or (CAUSAL and k0 + Bk - 1 > r_lo + offset)
        for nb in range(NBK):
            for e in range(4):
                half = e // 2
                i = 4 * nb + e
                x = exponent(s[i], scale, scale2, stats[half], NAT)  # (S·scale − LSE)·log2e
                if PAD or edge:
                    if hidden(k0 + 8 * nb + 2 * t + e % 2, r_lo + 8 * half, n_k, offset, kpm,
                              b_idx):
                        x = NEG_INF
                        dp[i] = ZERO                # dS = 0, not 0·(NaN − D) (a hidden V row)
                p = ex2(x)                                          # P
                s[i] = p
                dp[i] = p * (dp[i] - stats[2 + half])               # dS = P ∘ (dP − D)
    return step


@lru_cache(maxsize=None)
def key_hidden(CAUSAL, PAD):
    """hidden(key, row, n_k, offset, kpm, b_idx): whether key is masked for query row — past
    Nk, above the diagonal (§34: key > row + offset), padded (§35)."""

    @cuda.jit(device=True)
    def hidden(key, row, n_k, offset, kpm, b_idx):
        return key >= n_k or (CAUSAL and key > row + offset) or (PAD and kpm[b_idx, key] == 0)
    return hidden


@lru_cache(maxsize=None)
def ds_rows_steps(NBK, CAUSAL, PAD, NAT=False, APART=True):
    """ds_rows as two steps, for a caller whose dP is still being computed while it takes P
    (the wgmma dQ kernels): probs(s, stats, r_lo, k0, n_k, offset, kpm, b_idx, t, scale): S → P
    in s; grads(s, dp, stats, r_lo, k0, n_k, offset, kpm, b_idx, t): dP → dS in dp (masked: 0).
    The same dS as ds_rows, whose one pass flash_tc's dQ kernel keeps (with the second test,
    255 registers and spills at d = 128 there; ptxas 13.5).

    APART: the mask tests (keys past Nk, §34, §35) on a path of their own, one branch a tile
    around all of them (hide), in grads only: P feeds nothing but dS, so a hidden key's P may
    be anything (inf, NaN) once its dS is set to 0. Without APART (as ds_rows) each element
    carries its tests, in probs (P = 0) and again in grads, under a branch on the tile's edge;
    ptxas turns those into predicated instructions on every tile — causal, the fp16 wgmma dQ
    kernel runs 0.45 ms at B2 H16 N4096 d64 and 1.40 at B1 H16 N8192 d128 without APART, 0.32
    and 1.13 with it (not masking P: 7 % fewer instructions than masking P too, no faster);
    not causal, the same (H200, 2026-12-02, docs/results.md). The 3xTF32 dQ kernel keeps the
    tests per element (APART=False): with APART (masking P too) it ran 1.12× slower not
    causal, 1.02× causal."""
    Bk = 8 * NBK
    hidden = key_hidden(CAUSAL, PAD)

    @cuda.jit(device=True)
    def hide(x, r_lo, k0, n_k, offset, kpm, b_idx, t):
        """x[i] = 0 where element i's key is hidden from its row (every test, one tile)."""
        for nb in range(NBK):
            for e in range(4):
                if hidden(k0 + 8 * nb + 2 * t + e % 2, r_lo + 8 * (e // 2), n_k, offset, kpm,
                          b_idx):
                    x[4 * nb + e] = ZERO

    @cuda.jit(device=True)
    def probs(s, stats, r_lo, k0, n_k, offset, kpm, b_idx, t, scale):
        scale2 = scale * LOG2E
        if APART:                       # (compile time) P unmasked: it feeds only dS, which
                                        #  grads masks
            for i in range(4 * NBK):
                s[i] = ex2(exponent(s[i], scale, scale2, stats[(i % 4) // 2], NAT))   # P
        else:
            edge = PAD or k0 + Bk > n_k or (CAUSAL and k0 + Bk - 1 > r_lo + offset)
            for nb in range(NBK):
                for e in range(4):
                    i = 4 * nb + e
                    x = exponent(s[i], scale, scale2, stats[e // 2], NAT)
                    if edge:
                        if hidden(k0 + 8 * nb + 2 * t + e % 2, r_lo + 8 * (e // 2), n_k,
                                  offset, kpm, b_idx):
                            x = NEG_INF
                    s[i] = ex2(x)                                   # P

    @cuda.jit(device=True)
    def grads(s, dp, stats, r_lo, k0, n_k, offset, kpm, b_idx, t):
        edge = PAD or k0 + Bk > n_k or (CAUSAL and k0 + Bk - 1 > r_lo + offset)
        if APART:                       # (compile time)
            for i in range(4 * NBK):
                dp[i] = s[i] * (dp[i] - stats[2 + (i % 4) // 2])    # dS = P ∘ (dP − D)
            if edge:                    # one branch around every test: dS = 0, not P·(dP − D)
                hide(dp, r_lo, k0, n_k, offset, kpm, b_idx, t)  # (P, dP any value, NaN too)
        else:
            for nb in range(NBK):
                for e in range(4):
                    i = 4 * nb + e
                    ds = s[i] * (dp[i] - stats[2 + e // 2])
                    if edge:
                        if hidden(k0 + 8 * nb + 2 * t + e % 2, r_lo + 8 * (e // 2), n_k,
                                  offset, kpm, b_idx):
                            ds = ZERO
                    dp[i] = ds
    return probs, grads


@lru_cache(maxsize=None)
def clear_padded(N, ODD):
    """§35: zero the entries of rows r_lo (pad_lo) and r_lo + 8 (pad_hi) in N groups of four of
    an m16 layout: the A fragments of padded keys' K/V rows (ODD: words 0, 2 of each four are
    row r_lo, 1, 3 row r_lo + 8) or accumulators (0, 1: r_lo; 2, 3: r_lo + 8). Once per
    block, outside the tile loop."""

    @cuda.jit(device=True)
    def clear(x, pad_lo, pad_hi):
        for i in range(4 * N):
            hi = (i & 1) if ODD else (i & 2)
            if (pad_hi if hi else pad_lo):
                x[i] = 0
    return clear


@lru_cache(maxsize=None)
def a_fragments(KC, d=None):
    """A fragments (m16 × k16 words) of rows r_lo, r_lo + 8 of x[bh] (zeros past n, and in
    columns ≥ d: attention_tc.head_io)."""
    D = 16 * KC
    _, _, word, _ = head_io(D, D if d is None else d)

    @cuda.jit(device=True)
    def load(x, bh, r_lo, n, t, frag):
        for kc in range(KC):
            for r in range(4):
                row = r_lo + 8 * (r & 1)
                frag[4 * kc + r] = word(x, bh, row, 8 * kc + 4 * (r >> 1) + t) if row < n else 0
    return load


@lru_cache(maxsize=None)
def products(KC, NB, BF16, ASYNC, A_SMEM=False):
    """acc = A · B over d, B = rows 8nb + g of a row-major shared tile (words at
    off + (8nb + g)·KS + t; ASYNC: by ldmatrix): S = Q Kᵀ and its kin, from zero. A: the
    fragments a (registers), or with A_SMEM the warp's 16 rows at word a of smem (the ASYNC
    kernels keep their block's own rows there)."""
    run = ldsm_products_a(NB, KC, BF16) if A_SMEM else products_for(NB, KC, 1, BF16, ASYNC,
                                                                    False)

    clear = zeros(4 * NB)

    @cuda.jit(device=True)
    def fresh(a, smem, off, KS, g, t, acc):
        clear(acc)
        run(a, smem, off, KS, g, t, acc)
    return fresh


@lru_cache(maxsize=None)
def accumulate(KC2, NBO, NB, BF16, ASYNC):
    """acc += A · B over the tile's keys/queries: A = the accumulators p (NB 8-column blocks,
    packed to 16-bit pairs into pa), B = rows 8nb + g of a transposed shared tile (words at
    off + (8nb + g)·VS + t; ASYNC: the row tile itself, by ldmatrix.trans)."""
    to_a = pack_accumulators(KC2, 1, NB, BF16)
    run = products_for(NBO, KC2, 1, BF16, ASYNC, True)

    @cuda.jit(device=True)
    def acc_tile(p, pa, smem, off, VS, g, t, acc):
        to_a(p, pa)
        run(pa, smem, off, VS, g, t, acc)
    return acc_tile


@lru_cache(maxsize=None)
def write_rows(NBO, BF16, F32=False, d=None):
    """out[bh, row, 4nb + t] = the packed pair of acc for rows r_lo, r_lo + 8 (< n), · factor
    (F32, the 3xTF32 kernels: out[bh, row, 8nb + 2t (+1)] = the two floats); fp16/bf16 rows of
    d halves: columns ≥ d not written (attention_tc.head_io)."""
    pack = pack_bf16 if BF16 else pack_f16
    D = 8 * NBO
    _, _, _, put_word = head_io(D, D if (F32 or d is None) else d)

    @cuda.jit(device=True)
    def write(out, bh, r_lo, n, t, acc, factor):
        for half in range(2):
            row = r_lo + 8 * half
            if row < n:
                for nb in range(NBO):
                    lo = acc[4 * nb + 2 * half] * factor
                    hi = acc[4 * nb + 2 * half + 1] * factor
                    if F32:
                        out[bh, row, 8 * nb + 2 * t] = lo
                        out[bh, row, 8 * nb + 2 * t + 1] = hi
                    else:
                        put_word(out, bh, row, 4 * nb + t, pack(lo, hi))
    return write


@lru_cache(maxsize=None)
def flash_tc_bwd_dkdv_kernel(D, Bq, WARPS, CAUSAL, PAD, BF16, ASYNC=False, d=None):
    """dK, dV: one block per 16·WARPS keys; see the module menu. ASYNC: Q/dO rows and LSE/D
    of the next tile travel by cp.async during this one (two stages, one barrier a tile), and
    the transposed operands are read by ldmatrix.trans from the rows; the block's K and V
    rows stay in shared memory (A fragments by ldmatrix) instead of registers. d: the true
    head dimension (D = padded_head_dim(d); None: d = D), as in flash_tc_kernel."""
    d = D if d is None else d
    assert D == padded_head_dim(d)
    Bk = 16 * WARPS                 # keys per block (rows of the transposed problem)
    T = 32 * WARPS
    KC = D // 16                    # k16 steps over d
    NBQ = Bq // 8                   # 8-column blocks over the Q tile
    KC2 = Bq // 16                  # k16 steps over the Q tile
    NBO = D // 8                    # 8-column blocks over d
    FR, SQ, AO, PA = 4 * KC, 4 * NBQ, 4 * NBO, 4 * KC2
    KS, VS = tc_shapes(D, Bq)
    ROWS = Bq * KS                  # words of a row-major tile; its transposed copy follows
    STAGE = ROWS + D * VS
    FLOATS = 2 * STAGE              # where LSE_i and D_i start (as float32, same memory)
    DO_AT, QT_AT, DOT_AT, BT = STAGE, ROWS, STAGE + ROWS, VS     # dO rows, Qᵀ, dOᵀ, their stride
    if ASYNC:                       # a stage: [Qi rows | dOi rows | LSE_i | D_i], two stages
        FLOATS = 2 * ROWS
        STAGE = FLOATS + 2 * Bq
        DO_AT, QT_AT, DOT_AT, BT = ROWS, 0, ROWS, KS
    K_AT = 2 * STAGE                # ASYNC: the block's K rows, then its V rows
    V_AT = K_AT + Bk * KS
    fetch, put, REGS = kv_loader_tc(D, Bq, T, True, False, d)
    rows = rows_async(D, Bq, T, False, d)
    block_rows = rows_async(D, Bk, T, PAD, d)   # the block's K, V rows: padded keys' zeros
    frags = a_fragments(KC, d)
    unpad_a, unpad_acc = clear_padded(KC, True), clear_padded(NBO, False)
    prod = products(KC, NBQ, BF16, ASYNC)
    prod_a = products(KC, NBQ, BF16, True, True)
    acc_tile = accumulate(KC2, NBO, NBQ, BF16, ASYNC)
    write = write_rows(NBO, BF16, False, d)
    clear_o = zeros(AO)
    ds_t = ds_transposed(NBQ, Bq, CAUSAL, PAD, KILL=False)  # (Pᵀ, dSᵀ reach only their
                                                            #  keys' dV, dK rows: see there)

    @cuda.jit(device=True)
    def issue(q, do, lse, dvec, bh, n_q, q0, smem, fsm, at, tid, kpm):
        """ASYNC: start tile q0's Qi, dOi rows and LSE_i, D_i (0 past Nq) into the stage at."""
        rows(q, bh, n_q, q0, smem, at, tid, kpm, 0)     # (queries: no mask read)
        rows(do, bh, n_q, q0, smem, at + ROWS, tid, kpm, 0)
        for it in range((2 * Bq + T - 1) // T):
            r = it * T + tid
            if r < 2 * Bq:
                i = r % Bq
                ok = q0 + i < n_q
                src = bh * n_q + q0 + i if ok else 0
                if r < Bq:
                    cp_async4(fsm, at + FLOATS + i, lse, src, ok)
                else:
                    cp_async4(fsm, at + FLOATS + Bq + i, dvec, src, ok)

    @cuda.jit
    def dkdv(q, k, v, do, lse, dvec, dk, dv, scale, n_q, n_k, heads, kpm):
        bh, k0, tid, g, t, key_lo = lane_rows(Bk, CAUSAL, True)     # my keys: key_lo, + 8
        offset = n_k - n_q                      # §34: query i sees key j iff j ≤ i + offset
        smem = cuda.shared.array(0, uint32)     # [Qi rows | Qiᵀ | dOi rows | dOiᵀ | LSE_i, D_i]
        fsm = cuda.shared.array(0, float32)     # (the same memory, seen as float32; ASYNC:
                                                #  two stages of [Qi | dOi | LSE_i | D_i], then
                                                #  the block's K rows and V rows)
        mine = 16 * (tid // 32) * KS            # ASYNC: my warp's 16 rows in those

        ka = cuda.local.array(FR, uint32)       # A of Sᵀ = K Qᵀ: my K rows
        va = cuda.local.array(FR, uint32)       # A of dPᵀ = V dOᵀ: my V rows
        pad_lo = pad_hi = False                 # §35: a padded key gets dk = dv = 0, and its
        if PAD:                                 # K, V rows are zeros on chip (so Sᵀ, dPᵀ and
            pad_lo, pad_hi = padded_keys(kpm, bh // heads, key_lo, n_k)     # dSᵀ rows are 0)
        if not ASYNC:                           # (ASYNC: read from shared memory instead)
            frags(k, bh, key_lo, n_k, t, ka)
            frags(v, bh, key_lo, n_k, t, va)
            if PAD:
                unpad_a(ka, pad_lo, pad_hi)
                unpad_a(va, pad_lo, pad_hi)
        st = cuda.local.array(SQ, float32)      # Sᵀ, then Pᵀ
        dpt = cuda.local.array(SQ, float32)     # dPᵀ, then dSᵀ
        dk_acc = cuda.local.array(AO, float32)
        dv_acc = cuda.local.array(AO, float32)
        w = cuda.local.array(REGS, uint32)
        pa = cuda.local.array(PA, uint32)       # Pᵀ or dSᵀ as A fragments
        clear_o(dk_acc)
        clear_o(dv_acc)

        first = first_q_tile(CAUSAL, k0, Bq, n_q, n_k)  # (causal: earlier Q tiles see none
                                                        #  of this block's keys)
        n_tiles = (n_q + Bq - 1) // Bq
        if ASYNC and first < n_tiles:           # (the K, V rows land with the first tile)
            block_rows(k, bh, n_k, k0, smem, K_AT, tid, kpm, bh // heads)
            block_rows(v, bh, n_k, k0, smem, V_AT, tid, kpm, bh // heads)
            issue(q, do, lse, dvec, bh, n_q, first * Bq, smem, fsm, 0, tid, kpm)
        for j in range(first, n_tiles):
            q0 = j * Bq
            at = 0                              # this tile's stage
            if ASYNC:
                at = ((j - first) & 1) * STAGE
                cp_async_wait_all()             # my copies of tile j have landed
                cuda.syncthreads()              # wait: everyone's have, and every warp is
                                                # done with tile j − 1's stage
                if j + 1 < n_tiles:             # tile j + 1 → the other stage, in flight
                    issue(q, do, lse, dvec, bh, n_q, q0 + Bq, smem, fsm, STAGE - at, tid, kpm)
            else:
                cuda.syncthreads()              # wait: every warp is done with the last tile
                fetch(q, q, bh, n_q, q0, tid, w, kpm, 0)    # Qi rows and Qiᵀ (no mask)
                put(w, smem, 0, ROWS, tid)
                fetch(do, do, bh, n_q, q0, tid, w, kpm, 0)  # dOi rows and dOiᵀ
                put(w, smem, STAGE, STAGE + ROWS, tid)
                for it in range((Bq + T - 1) // T):     # LSE_i, D_i (−inf/0 past Nq)
                    r = it * T + tid
                    if r < Bq:
                        fsm[FLOATS + r] = lse[bh, q0 + r] if q0 + r < n_q else NEG_INF
                        fsm[FLOATS + Bq + r] = dvec[bh, q0 + r] if q0 + r < n_q else ZERO
                cuda.syncthreads()              # wait: the tiles are in shared memory

            if ASYNC:
                prod_a(K_AT + mine, smem, at, KS, g, t, st)             # Sᵀ = K Qiᵀ
                prod_a(V_AT + mine, smem, at + DO_AT, KS, g, t, dpt)    # dPᵀ = V dOiᵀ
            else:
                prod(ka, smem, at, KS, g, t, st)                        # Sᵀ = K Qiᵀ
                prod(va, smem, at + DO_AT, KS, g, t, dpt)               # dPᵀ = V dOiᵀ
            ds_t(st, dpt, fsm, at + FLOATS, key_lo, q0, n_q, n_k, offset, pad_lo, pad_hi, t,
                 scale)                         # Pᵀ, dSᵀ = Pᵀ∘(dPᵀ − D)
            acc_tile(st, pa, smem, at + DOT_AT, BT, g, t, dv_acc)     # dV += Pᵀ dOi
            acc_tile(dpt, pa, smem, at + QT_AT, BT, g, t, dk_acc)     # dK += dSᵀ Qi

        if PAD:                                 # a padded key: dk = dv = 0, written
            unpad_acc(dv_acc, pad_lo, pad_hi)
            unpad_acc(dk_acc, pad_lo, pad_hi)
        write(dv, bh, key_lo, n_k, t, dv_acc, float32(1.0))
        write(dk, bh, key_lo, n_k, t, dk_acc, scale)              # dK = scale · Σ dSᵀ Q

    BUILT[("flash_tc_bwd_dkdv_kernel", D, Bq, WARPS, CAUSAL, PAD, BF16, ASYNC)
          + ((d,) if d != D else ())] = dkdv
    return dkdv


@lru_cache(maxsize=None)
def flash_tc_bwd_dq_kernel(D, Bk, WARPS, CAUSAL, PAD, BF16, ASYNC=False, d=None):
    """dQ: one block per 16·WARPS queries; see the module menu. ASYNC: as in the dK/dV kernel
    (K/V rows by cp.async, two stages; Kᵀ read by ldmatrix.trans; the block's Q and dO rows
    in shared memory, not registers). d: the true head dimension, as in the dK/dV kernel."""
    d = D if d is None else d
    assert D == padded_head_dim(d)
    Bq = 16 * WARPS
    T = 32 * WARPS
    KC = D // 16
    NBK = Bk // 8
    KC2 = Bk // 16
    NBO = D // 8
    FR, SK, AO, PA = 4 * KC, 4 * NBK, 4 * NBO, 4 * KC2
    KS, VS = tc_shapes(D, Bk)
    ROWS = Bk * KS
    STAGE = ROWS + D * VS               # [Kj rows | Kjᵀ] then [Vj rows]
    V_AT, KT_AT, BT = STAGE, ROWS, VS   # Vj rows, Kjᵀ, its stride
    if ASYNC:                           # a stage: [Kj rows | Vj rows], two stages
        STAGE = 2 * ROWS
        V_AT, KT_AT, BT = ROWS, 0, KS
    Q_AT = 2 * STAGE                    # ASYNC: the block's Q rows, then its dO rows
    DO_AT = Q_AT + Bq * KS
    fetch_kt, put_kt, REGS = kv_loader_tc(D, Bk, T, True, PAD, d)   # (PAD: padded keys' zeros)
    fetch_v, put_v, _ = kv_loader_tc(D, Bk, T, False, PAD, d)
    rows = rows_async(D, Bk, T, PAD, d)
    block_rows = rows_async(D, Bq, T, False, d)
    frags = a_fragments(KC, d)
    prod = products(KC, NBK, BF16, ASYNC)
    prod_a = products(KC, NBK, BF16, True, True)
    acc_tile = accumulate(KC2, NBO, NBK, BF16, ASYNC)
    write = write_rows(NBO, BF16, False, d)
    clear_o = zeros(AO)
    ds = ds_rows(NBK, CAUSAL, PAD)

    @cuda.jit
    def dq_kernel(q, k, v, do, lse, dvec, dq, scale, n_q, n_k, heads, kpm):
        bh, q0, tid, g, t, r_lo = lane_rows(Bq, CAUSAL, False)    # my rows: r_lo, r_lo + 8
        offset = n_k - n_q
        smem = cuda.shared.array(0, uint32)     # [Kj rows | Kjᵀ | Vj rows]; ASYNC: two stages
                                                # of [Kj rows | Vj rows], then the block's Q
                                                # rows and dO rows
        mine = 16 * (tid // 32) * KS            # ASYNC: my warp's 16 rows in those

        qa = cuda.local.array(FR, uint32)       # A of S = Q Kᵀ
        da = cuda.local.array(FR, uint32)       # A of dP = dO Vᵀ
        if not ASYNC:                           # (ASYNC: read from shared memory instead)
            frags(q, bh, r_lo, n_q, t, qa)
            frags(do, bh, r_lo, n_q, t, da)
        s = cuda.local.array(SK, float32)       # S, then P
        dp = cuda.local.array(SK, float32)      # dP, then dS
        dq_acc = cuda.local.array(AO, float32)
        w = cuda.local.array(REGS, uint32)
        pa = cuda.local.array(PA, uint32)       # dS as A fragments
        stats = cuda.local.array(4, float32)    # LSE·log2e and D of my two rows
        lane_row_stats(lse, dvec, bh, r_lo, n_q, stats)
        clear_o(dq_acc)

        b_idx = bh // heads                     # (PAD: the mask's batch row)
        n_tiles = kv_tiles(CAUSAL, q0, Bq, Bk, n_q, n_k)
        if ASYNC and n_tiles > 0:               # (the Q, dO rows land with the first tile)
            block_rows(q, bh, n_q, q0, smem, Q_AT, tid, kpm, b_idx)
            block_rows(do, bh, n_q, q0, smem, DO_AT, tid, kpm, b_idx)
            rows(k, bh, n_k, 0, smem, 0, tid, kpm, b_idx)
            rows(v, bh, n_k, 0, smem, ROWS, tid, kpm, b_idx)
        for j in range(n_tiles):
            k0 = j * Bk
            at = 0                              # this tile's stage
            if ASYNC:
                at = (j & 1) * STAGE
                cp_async_wait_all()             # my copies of tile j have landed
                cuda.syncthreads()              # wait: everyone's have, and every warp is
                                                # done with tile j − 1's stage
                if j + 1 < n_tiles:             # tile j + 1 → the other stage, in flight
                    rows(k, bh, n_k, k0 + Bk, smem, STAGE - at, tid, kpm, b_idx)
                    rows(v, bh, n_k, k0 + Bk, smem, STAGE - at + ROWS, tid, kpm, b_idx)
            else:
                cuda.syncthreads()              # wait: every warp is done with the last tile
                fetch_kt(k, k, bh, n_k, k0, tid, w, kpm, b_idx)     # Kj rows and Kjᵀ
                put_kt(w, smem, 0, ROWS, tid)
                fetch_v(v, v, bh, n_k, k0, tid, w, kpm, b_idx)      # Vj rows
                put_v(w, smem, STAGE, STAGE, tid)
                cuda.syncthreads()              # wait: the tiles are in shared memory

            if ASYNC:
                prod_a(Q_AT + mine, smem, at, KS, g, t, s)              # S = Qi Kjᵀ
                prod_a(DO_AT + mine, smem, at + V_AT, KS, g, t, dp)     # dP = dOi Vjᵀ
            else:
                prod(qa, smem, at, KS, g, t, s)                         # S = Qi Kjᵀ
                prod(da, smem, at + V_AT, KS, g, t, dp)                 # dP = dOi Vjᵀ
            ds(s, dp, stats, r_lo, k0, n_k, offset, kpm, b_idx, t,
               scale)                           # P, dS = P ∘ (dP − D)
            acc_tile(dp, pa, smem, at + KT_AT, BT, g, t, dq_acc)  # dQ += dS Kj

        write(dq, bh, r_lo, n_q, t, dq_acc, scale)        # dQ = scale · Σ dS K

    BUILT[("flash_tc_bwd_dq_kernel", D, Bk, WARPS, CAUSAL, PAD, BF16, ASYNC)
          + ((d,) if d != D else ())] = dq_kernel
    return dq_kernel
