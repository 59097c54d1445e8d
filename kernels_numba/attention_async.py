"""§42 (double buffering) and §43 (producer/consumer warps) on Hopper's own machinery: K/V tiles
copied global → shared by the copy engine (``cp.async.bulk``), their arrival and their release
signalled by mbarriers, consumer-only syncs on a named barrier, registers moved from the
producers to the consumers with ``setmaxnreg`` — the same FlashAttention-2 forward as
``attention.flash_forward_kernel`` (fp32, CUDA cores), and what ``attention_db.py`` could only
approximate with plain loads and ``cuda.syncthreads()``.

Why a file of its own (not more flags of ``attention_db.flash_db_kernel``): the K tile's layout
in shared memory changes (rows as they are in HBM, not Kᵀ: the copy engine copies bytes, it does
not transpose), and so does the S = Qi Kjᵀ product that reads it; the loop's synchronisation is
another protocol (mbarrier phases instead of one barrier a tile). Flags for both inside
``flash_db_kernel`` would make two kernels share one body and a reader separate them again.
The primitives are ``kernels_numba/hopper.py``'s inline-PTX helpers (Numba's API has none of
them), with their simulator twins in ``kernels_numba/sim/hopper.py``.

Menu
| kernel                                  | §  | what                                            |
|-----------------------------------------|----|-------------------------------------------------|
| ``flash_async_kernel(D, Br, Bc, TR, TC, | 42 | PRODUCERS = 0: TR·TC threads that all compute;   |
|   CAUSAL, KU, PAD, DROPOUT,             |    | warp 0 also issues the bulk copies of tile j +   |
|   PRODUCERS=0, STAGES=2)``              |    | STAGES − 1 before tile j is computed; STAGES-deep |
|                                         |    | ring (2: double buffering), FULL/EMPTY mbarriers |
|                                         | 43 | PRODUCERS = 1: one producer warpgroup (128       |
|                                         |    | threads, ``setmaxnreg_dec``) of which warp 0     |
|                                         |    | only issues copies, up to STAGES tiles ahead;    |
|                                         |    | TR·TC consumer threads (whole warpgroups,        |
|                                         |    | ``setmaxnreg_inc``) only compute                 |

The ring, tile j in stage s = j mod STAGES (phase n = j div STAGES of that stage's mbarriers)::

    issuer (§42: warp 0 of the consumers; §43: warp 0 of the producer warpgroup)
        wait EMPTY[s] parity (n − 1) & 1      (j ≥ STAGES: tile j − STAGES has been released)
        lane 0: arrive.expect_tx(FULL[s], 2 · rows · 4d bytes)
        lanes:  one cp.async.bulk per K row (and per V row; when d = D, V's rows are
                contiguous on both sides: one copy of the whole tile) → stage s,
                each completing its bytes on FULL[s]
    consumers, every warp
        wait FULL[s] parity n & 1             (the bytes of tile j have landed)
        S = Qi Kjᵀ, mask, online softmax, Pᵀ → shared memory (its warp's rows only)
        syncwarp; acc += P Vj; syncwarp
        lane 0: arrive(EMPTY[s])              (count: the consumer warps; stage s may be refilled)

§42's warp 0 issues tile j + STAGES − 1 at the top of tile j: with two stages, tile j + 1 is in
flight while tile j is computed, and the EMPTY wait only holds warp 0 until every warp released
tile j − 1. §43's producer warp runs ahead on its own, as far as the ring allows; the consumers
never issue a load (Q excepted, once). Neither has a ``cuda.syncthreads()`` in its K/V loop
(``flash_forward_kernel`` has four, ``flash_db_kernel`` one): a row's P is produced and consumed
by the TC lanes of one warp (thread (tr, tc) owns query rows tr·RM … and every key column of
them lies with tr's TC lanes), so Pᵀ needs only ``cuda.syncwarp()``; the stages need only their
mbarriers. The one block-wide barrier is at the start (the mbarriers initialised, and in §42
Qi loaded). In §43 the consumers load Qi alone and meet on the named barrier ``Q_READY``
(``bar_sync(Q_READY, TR·TC)``): the producer warp is already copying the first tiles meanwhile.

Shared memory (dynamic, one allocation; float32 offsets; every piece 16-byte aligned)::

    mbarriers: FULL[0 … S−1], EMPTY[0 … S−1] (uint64, 128 bytes reserved)
    Qiᵀ  [D][Br + 4]                         (Qi · scale, as flash_forward_kernel's)
    K    S × [Bc][D + 4]                     row-major rows as in HBM; key r of the tile in
                                             slot (r mod 4)·Bc/4 + r div 4 (below)
    V    S × [Bc][D]                         row-major, key r in row r
    Pᵀ   [Bc][Br + 4]                        one buffer: each warp rewrites only its own rows

The K rows' slots. Thread tc's S columns are W·h + 4·tc + e (e < 4, W = 4·TC, as in every
forward kernel here: the mask, the softmax and dropout's bits are flash_steps' own). S = Qi Kjᵀ
reads K along the head dimension, 16 bytes (4 of d) a load, so a thread reads key rows 4·tc + e:
with rows in key order, lanes tc and tc + 2 would be 8 rows = 8·(D + 4)·4 bytes apart, an odd
multiple of 128 when D % 8 == 0 (lanes 0, 2, 4, 6 of a quarter-warp on the same banks: a 4-way
conflict). The copy engine puts a row wherever it is told, so key
r goes to slot (r mod 4)·Bc/4 + r div 4: for one (h, e) the TC lanes read slots c + tc,
consecutive rows (D + 4)·4 bytes apart — 16-byte offsets of odd count: no conflict.

Masked keys contribute exactly nothing (docs/api.md), as in ``flash_forward_kernel``, by other means:
the copies stop at key Nk (rows = min(Bc, Nk − k0)), so the last tile's rows past Nk hold
whatever a stage held before (an earlier tile's keys, even NaN ones, or never-written memory).
They are masked by select (s = −inf) and, like padded and causally hidden keys, pass through the
P Vj that skips P = 0 (``pv_product(GUARD)``): every tile with such keys — the last when Nk is not
a multiple of Bc, every tile with PAD, the causal diagonal — takes it. K's columns d … D − 1 (D
rounded up to 4·TC) meet Qi's zeros there, so they are zeroed once by the issuing warp before
its first copy (never written again: the copies write d floats a row); V's columns past d feed
only O columns that are never written out.

Register budgets (§43). ``setmaxnreg`` acts per warpgroup and ptxas honours it only under a
register cap, so the kernel is compiled with ``max_registers = REG_CAP`` (ptxas then gives it
exactly REG_CAP a thread) and 128·PRODUCER_REGS + TR·TC·CONSUMER_REGS = (128 + TR·TC)·REG_CAP:
the block's pool is conserved (an ``inc`` beyond it would wait for ever). Chosen with ptxas
(CUDA 13.0, d = 64, no GPU needed; spills in bytes a thread): one consumer warpgroup (128 × 64
tiles) 40 / 248 under a cap of 144 — 32 bytes, against 172 at 24 / 232 under 128 (the
producer's loop does not fit in 24 registers; §42's kernel, 255 registers and no cap, spills
48); two (256 × 64 tiles) 40 / 232 under 168 — 96 bytes, against 140 at FlashAttention-3's
24 / 240.

Limits: d % 4 == 0 and 16-byte aligned q, k, v (the bulk copy moves 16-byte multiples between
16-byte aligned addresses; the launcher refuses other d, naming them); head dimension ≤ D; TC a
power of 2 ≤ 32 and D % (4·TC) == 0 as in ``flash_forward_kernel``; §43: TR·TC = 128 or 256;
STAGES 2 … 4, as shared memory allows; the padded layout only (no VARLEN); sm_90a on a GPU
(``cp.async.bulk``, ``setmaxnreg``). Outputs as ``flash_forward_kernel``'s (O, LSE; −inf and
O = 0 for a row that sees no key); causal aligned bottom-right.

How to run: ``flashlesson.attention(q, k, v, method="flash_async")`` (§42);
``flashlesson.loop_order.launch_async(…, producers=1, stages=S)`` (§43);
``flashlesson section 42``, ``section 43``; ``pytest tests/test_attention_async.py``; on a Hopper
GPU ``flashlesson bench ladder --only attention_db`` and ``python3 scripts/bench_loop_order.py``.
"""

from functools import lru_cache

from numba import cuda, float32, int64, uint64

from .attention import block_tile, kv_tiles
from .flash_steps import keep_bits, o_lse_store, online_softmax, p_store, pv_product, \
    score_mask
from .hopper import bar_sync, bulk_copy_g2s, fence_mbarrier_init, mbar_arrive, \
    mbar_arrive_expect_tx, mbar_init, mbar_try_wait_parity, setmaxnreg_dec, setmaxnreg_inc
from .jit import gpu_options, pure_device
from .reductions import NEG_INF, ZERO
from .vector import load4

BAR_FLOATS = 32                 # the mbarriers' space at the start of shared memory (128 bytes)
Q_READY = 1                     # §43's named barrier: the consumers' Qi is in shared memory
WARPGROUP = 128
# §43's register budgets per consumer warpgroup count: (producer, consumer, the kernel's cap)
REGISTER_SPLITS = {1: (40, 248, 144), 2: (40, 232, 168)}


def async_smem_floats(D, Br, Bc, STAGES):
    """Dynamic shared memory of ``flash_async_kernel``, in float32 elements."""
    return BAR_FLOATS + D * (Br + 4) + STAGES * (Bc * (D + 4) + Bc * D) + Bc * (Br + 4)


def register_split(consumers):
    """(PRODUCER_REGS, CONSUMER_REGS, REG_CAP) for ``consumers`` consumer threads (§43)."""
    if consumers % WARPGROUP or consumers // WARPGROUP not in REGISTER_SPLITS:
        raise ValueError(f"§43: TR·TC = {consumers} consumer threads must be 128 or 256 (one "
                         "or two whole warpgroups: setmaxnreg acts per warpgroup)")
    return REGISTER_SPLITS[consumers // WARPGROUP]


@lru_cache(maxsize=None)
def q_loader(Br, D, T, QS):
    """Qiᵀ · scale into shared memory by T threads whose index is ``t`` (0 … T − 1: in §43
    the consumers' own index, which ``tiles.tile_loader``'s ``cuda.threadIdx.x`` is not):
    16-byte loads (d % 4 == 0), zeros past Nq and past d."""
    ITERS = -(-(Br * D // 4) // T)

    @pure_device
    def load(q, q_base, d, q0, n_q, smem, q_off, scale, t):
        for it in range(ITERS):
            e = it * T + t
            if e < Br * D // 4:
                r = e % Br                          # consecutive threads: consecutive rows
                c = 4 * (e // Br)
                x0 = x1 = x2 = x3 = ZERO
                if q0 + r < n_q and c < d:
                    x0, x1, x2, x3 = load4(q, q_base + (q0 + r) * d + c)
                smem[q_off + c * QS + r] = x0 * scale
                smem[q_off + (c + 1) * QS + r] = x1 * scale
                smem[q_off + (c + 2) * QS + r] = x2 * scale
                smem[q_off + (c + 3) * QS + r] = x3 * scale

    return load


@lru_cache(maxsize=None)
def qk_rows(RM, CN, D, QS, KS, TC, Bc):
    """S = Qi Kjᵀ with K in row-major slots (the menu): per 4 columns of d, my RM rows of Qiᵀ
    (4·RM floats) and, per S column, one 16-byte load of its key's row."""
    BC4 = Bc // 4

    @pure_device
    def qk(s, smem, q_off, k_off, r0, tc, a):
        for i in range(RM):
            for jj in range(CN):
                s[i, jj] = ZERO
        for c4 in range(D // 4):
            for u in range(4):
                for h in range(RM // 4):
                    a[u * RM + 4 * h], a[u * RM + 4 * h + 1], a[u * RM + 4 * h + 2], \
                        a[u * RM + 4 * h + 3] = load4(smem, q_off + (4 * c4 + u) * QS + r0 + 4 * h)
            for jj in range(CN):
                slot = (jj & 3) * BC4 + TC * (jj >> 2) + tc     # key W·(jj//4) + 4·tc + (jj&3)
                b0, b1, b2, b3 = load4(smem, k_off + slot * KS + 4 * c4)
                for i in range(RM):                 # S[i, j] += Σ_u Q[i, 4c4+u] · K[j, 4c4+u]
                    s[i, jj] += a[i] * b0
                    s[i, jj] += a[RM + i] * b1
                    s[i, jj] += a[2 * RM + i] * b2
                    s[i, jj] += a[3 * RM + i] * b3

    return qk


@lru_cache(maxsize=None)
def flash_async_kernel(D, Br, Bc, TR, TC, CAUSAL, KU=1, PAD=False, DROPOUT=False, PRODUCERS=0,
                       STAGES=2):
    """FA2's forward with K/V in a STAGES-deep ring filled by bulk copies: PRODUCERS = 0 (§42)
    or 1 (§43, a producer warpgroup); all arguments compile-time (see the menu)."""
    TCOMP = TR * TC                 # threads that compute
    TPROD = WARPGROUP * PRODUCERS   # §43: the producer warpgroup
    RM = Br // TR
    CN = Bc // TC
    DN = D // TC
    W = 4 * TC
    QS = Br + 4
    KS = D + 4                      # K row stride: 16-byte rows, (D+4)/4 odd (menu)
    KSZ = Bc * KS
    VSZ = Bc * D
    OFF_Q = BAR_FLOATS
    OFF_K = OFF_Q + D * QS
    OFF_V = OFF_K + STAGES * KSZ
    OFF_P = OFF_V + STAGES * VSZ
    assert OFF_P + Bc * QS == async_smem_floats(D, Br, Bc, STAGES)
    NB = max(DN, CN)
    NA = 4 * RM                     # Qiᵀ operands: 4 columns of d × my RM rows
    CWARPS = TCOMP // 32            # consumer warps: EMPTY's arrival count
    assert TCOMP % 32 == 0 and 32 % TC == 0 and RM % 4 == 0 and CN % 4 == 0 and DN % 4 == 0
    assert RM * TR == Br and CN * TC == Bc and DN * TC == D and Bc % 4 == 0
    assert 2 <= STAGES <= 4 and PRODUCERS in (0, 1) and 4 * STAGES <= BAR_FLOATS
    assert TCOMP + TPROD <= 1024 and D % KU == 0 and Bc % KU == 0
    if PRODUCERS:
        PREGS, CREGS, REG_CAP = register_split(TCOMP)
        options = gpu_options(max_registers=REG_CAP)
    else:
        PREGS = CREGS = 0
        options = {}
    load_q = q_loader(Br, D, TCOMP, QS)
    qk = qk_rows(RM, CN, D, QS, KS, TC, Bc)
    pv = pv_product(RM, DN, Bc, QS, D, W, KU)
    pv_guarded = pv_product(RM, DN, Bc, QS, D, W, KU, True)
    mask = score_mask(RM, CN, W, CAUSAL, PAD)
    softmax = online_softmax(RM, CN, DN, TC)
    bits = keep_bits(RM, CN, W)
    store_p = p_store(RM, CN, W, QS, DROPOUT)
    write_o = o_lse_store(RM, DN, W)

    @cuda.jit(device=True)
    def zero_k_pads(smem, d, lane):
        """K's columns d … D − 1 of every slot of every stage (they meet Qi's zeros)."""
        for r in range(lane, STAGES * Bc, 32):
            for c in range(d, D):
                smem[OFF_K + r * KS + c] = ZERO

    @cuda.jit(device=True)
    def issue(k, v, k_base, d, k0, n_k, smem, bars, st, lane):
        """Tile k0 … k0 + rows − 1 → stage st by one warp: lane 0 arms FULL[st] with the bytes,
        each lane copies its rows (one bulk copy per K row; V's rows too, unless d = D: then
        the tile is contiguous in HBM and in the stage, and lane 0 copies it at once)."""
        rows = min(Bc, n_k - k0)
        row_bytes = 4 * d
        if lane == 0:
            mbar_arrive_expect_tx(bars, st, 2 * rows * row_bytes)   # FULL[st]: + bytes, arrive
            if d == D:
                bulk_copy_g2s(smem, OFF_V + st * VSZ, v, k_base + k0 * d, rows * row_bytes,
                              bars, st)
        for r in range(lane, rows, 32):
            src = k_base + (k0 + r) * d
            slot = (r & 3) * (Bc // 4) + (r >> 2)
            bulk_copy_g2s(smem, OFF_K + st * KSZ + slot * KS, k, src, row_bytes, bars, st)
            if d < D:
                bulk_copy_g2s(smem, OFF_V + st * VSZ + r * D, v, src, row_bytes, bars, st)

    @cuda.jit(**options)
    def flash_async(q, k, v, o, lse, scale, d, n_q, n_k, heads, kpm, seed_lo, seed_hi,
                    threshold, inv_keep):
        """q, o [B·H·Nq·d], k, v [B·H·Nk·d], lse [B·H·Nq]: flat float32 (as flash_db_kernel's);
        block: TR·TC threads (§42) or 128 + TR·TC (§43); grid as flash_forward_kernel's."""
        bh, q0 = block_tile(CAUSAL, Br)             # (causal: heaviest Q tiles first, §34)
        tid = cuda.threadIdx.x
        lane = tid & 31
        ctid = tid - TPROD                          # my index among the computing threads
        tc = ctid & (TC - 1)
        r0 = (ctid // TC) * RM
        b_idx = bh // heads
        q_base = bh * n_q * d
        k_base = bh * n_k * d
        offset = n_k - n_q                          # §34: query i sees key j iff j ≤ i + offset
        smem = cuda.shared.array(0, float32)
        bars = cuda.shared.array(0, uint64)         # the same memory: FULL[s] = bars[s],
                                                    # EMPTY[s] = bars[STAGES + s]
        n_tiles = kv_tiles(CAUSAL, q0, Br, Bc, n_q, n_k)  # (causal: up to the diagonal, §34)

        if tid == 0:
            for s_ in range(STAGES):
                mbar_init(bars, s_, 1)              # FULL: the issuer's expect_tx arrival
                mbar_init(bars, STAGES + s_, CWARPS)    # EMPTY: one arrival per consumer warp
            fence_mbarrier_init()                   # (visible to the copy engine too)
        if PRODUCERS == 0:
            load_q(q, q_base, d, q0, n_q, smem, OFF_Q, scale, tid)
        cuda.syncthreads()                          # wait: the mbarriers are initialised
                                                    # (§42: and Qi is in shared memory)

        if PRODUCERS:                               # §43 (compile-time)
            if tid < TPROD:                         # the producer warpgroup
                setmaxnreg_dec(PREGS)               # (its registers go to the consumers)
                if tid < 32:                        # warp 0 issues, warps 1–3 have left
                    if d < D:
                        zero_k_pads(smem, d, lane)
                        cuda.syncwarp()             # the zeros before lane 0's arrive
                    for j in range(n_tiles):
                        st = j % STAGES
                        if j >= STAGES:             # wait: tile j − STAGES released stage st
                            mbar_try_wait_parity(bars, STAGES + st, ((j // STAGES) - 1) & 1)
                        issue(k, v, k_base, d, j * Bc, n_k, smem, bars, st, lane)
                return
            setmaxnreg_inc(CREGS)
            load_q(q, q_base, d, q0, n_q, smem, OFF_Q, scale, ctid)
            bar_sync(Q_READY, TCOMP)                # wait: Qi is in shared memory (consumers
                                                    # only: the producer is copying already)
        elif tid < 32:                              # §42: warp 0 also issues; tiles 0 …
            if d < D:                               # STAGES − 2 before the loop
                zero_k_pads(smem, d, lane)
                cuda.syncwarp()                     # the zeros before lane 0's arrive
            for j in range(min(STAGES - 1, n_tiles)):
                issue(k, v, k_base, d, j * Bc, n_k, smem, bars, j, lane)

        m = cuda.local.array(RM, float32)           # running row max        (§32: m)
        l = cuda.local.array(RM, float32)           # running row sum        (§32: l)
        acc = cuda.local.array((RM, DN), float32)   # un-normalized output   (§32: acc)
        s = cuda.local.array((RM, CN), float32)
        a = cuda.local.array(NA, float32)
        b = cuda.local.array(NB, float32)
        zbits = cuda.local.array(RM, int64)
        for i in range(RM):
            m[i] = NEG_INF
            l[i] = ZERO
            for c in range(DN):
                acc[i, c] = ZERO
        Pt = smem[OFF_P:OFF_P + Bc * QS]

        for j in range(n_tiles):
            k0 = j * Bc
            st = j % STAGES
            if PRODUCERS == 0 and tid < 32:         # §42: tile j + STAGES − 1 → the stage
                jn = j + STAGES - 1                 # tile j − 1 used, once it is released
                if jn < n_tiles:
                    sn = jn % STAGES
                    if jn >= STAGES:
                        mbar_try_wait_parity(bars, STAGES + sn, ((jn // STAGES) - 1) & 1)
                    issue(k, v, k_base, d, jn * Bc, n_k, smem, bars, sn, lane)
            mbar_try_wait_parity(bars, st, (j // STAGES) & 1)  # wait: tile j has landed
            qk(s, smem, OFF_Q, OFF_K + st * KSZ, r0, tc, a)    # S = Qi Kjᵀ · scale
            hidden = PAD or k0 + Bc > n_k or (CAUSAL and k0 + Bc - 1 > q0 + offset)
            if hidden:                              # keys past Nk (stale rows), padded, causal
                mask(s, q0 + r0, k0, tc, n_k, offset, kpm, b_idx)
            softmax(s, m, l, acc)                   # online softmax (§32)
            if DROPOUT:
                bits(zbits, seed_lo, seed_hi, bh, q0 + r0, k0, tc, threshold)
            store_p(Pt, s, zbits, r0, tc, inv_keep)     # Pᵀ ← P (∘ Z): my warp's rows
            cuda.syncwarp()                         # wait: the warp's Pᵀ rows are written
            Vj = smem[OFF_V + st * VSZ:OFF_V + (st + 1) * VSZ]
            if hidden:
                pv_guarded(acc, Pt, Vj, r0, tc, a, b)   # P = 0 skipped: a hidden key adds
            else:                                       # nothing, even NaN/inf (or stale)
                pv(acc, Pt, Vj, r0, tc, a, b)       # acc += P Vj
            cuda.syncwarp()                         # wait: the warp has read Pᵀ and stage st
            if lane == 0:
                mbar_arrive(bars, STAGES + st)      # EMPTY[st]: this warp is done with it

        # O = acc / l, LSE = m + log l: the only writes to global memory (§24)
        write_o(o, lse, acc, m, l, q_base, bh * n_q, q0, r0, tc, n_q, d)

    return flash_async
