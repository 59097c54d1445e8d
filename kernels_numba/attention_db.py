"""Double-buffered K/V tiles (lesson §42) and producer/consumer warps (§43) on FlashAttention-2's
loop order: ``attention.flash_forward_kernel`` with the next K/V tile on its way while the
current one is computed.

Ladder (lesson tier to fast tier): from the lesson kernel to this file, step by step, at B2 H16
N4096 d64 float32 unless a step says otherwise; TFLOP/s = 4·B·H·N²·d / time (half when causal);
kernel-only CUDA-event medians; "× lesson" = the lesson kernel's time / the step's on the same
inputs. ``flashlesson bench ladder --only attention_db`` checks and times every step with a timed
call, ``--write`` puts its numbers here; a step without one is historical (no longer separable in
the code) and keeps the TFLOP/s recorded then.
| step | what changed                                 | measured                     | timed call                     |
|------|----------------------------------------------|------------------------------|--------------------------------|
| 0    | the lesson kernel of §42                     | H200, 2026-12-01: 15.9 ms,   | method='flash_db',             |
|      | (``lesson/loop_order.py``'s                  | 8.63 TFLOP/s                 | tier='lesson'                  |
|      | ``flash_double_buffer``): one thread a row,  |                              |                                |
|      | the next tile's loads written straight into  |                              |                                |
|      | the other buffer                             |                              |                                |
| 0b   | the lesson kernel of §43                     | H200, 2026-12-01: 35.3 ms,   | loop_order.launch_db_lesson(…, |
|      | (``flash_producer_consumer``): one warp that | 3.9 TFLOP/s                  | producers=1)                   |
|      | only loads                                   |                              |                                |
| 1    | this file, producers = 0: the next K/V tile  | H200, 2026-12-01: 7.25 ms,   | method='flash_db'              |
|      | through registers, two buffers, one barrier  | 19 TFLOP/s, 2.20× lesson     |                                |
|      | a tile (before: 19.0 TFLOP/s, slower than    |                              |                                |
|      | flash: double the shared memory, fewer       |                              |                                |
|      | blocks per SM)                               |                              |                                |
| 2    | producers = 1: one warp only loads (§43),    | H200, 2026-12-01: 6.02 ms,   | loop_order.launch_db(…,        |
|      | against the lesson's §43 kernel (before:     | 22.8 TFLOP/s, 5.87× lesson   | producers=1)                   |
|      | 22.9 TFLOP/s)                                | (step 0b)                    |                                |
| 3    | §42 on Hopper's machinery                    | H200, 2026-12-01: 4.41 ms,   | method='flash_async'           |
|      | (``attention_async.py``, method              | 31.2 TFLOP/s, 3.62× lesson   |                                |
|      | ``flash_async``): K/V rows copied by the     |                              |                                |
|      | copy engine (cp.async.bulk) into two stages, |                              |                                |
|      | FULL/EMPTY mbarriers, warp 0 issues tile j+1 |                              |                                |
|      | before tile j is computed; no block barrier  |                              |                                |
|      | in the loop (Pᵀ stays within a warp); Bc =   |                              |                                |
|      | 32, so that two blocks share an SM (Bc = 64: |                              |                                |
|      | 21.6 TFLOP/s, one block)                     |                              |                                |
| 4    | §43 on Hopper's machinery (producers = 1): a | H200, 2026-12-01: 3.87 ms,   | loop_order.launch_async(…,     |
|      | producer warpgroup whose warp 0 only issues  | 35.5 TFLOP/s, 9.12× lesson   | producers=1)                   |
|      | the copies into two stages; two consumer     | (step 0b)                    |                                |
|      | warpgroups (Br = 256) meet on a named        |                              |                                |
|      | barrier; setmaxnreg 40 / 232 registers (one  |                              |                                |
|      | consumer warpgroup, 40 / 248: 27.0 TFLOP/s   |                              |                                |
|      | at 2–4 stages); against the lesson's §43     |                              |                                |
|      | kernel                                       |                              |                                |
| ref  | the single-buffered ``flash``                | H200, 2026-12-01: 4.37 ms,   | method='flash'                 |
|      | (``attention.py``), for comparison (before:  | 31.4 TFLOP/s                 |                                |
|      | 31.5 TFLOP/s)                                |                              |                                |

Menu
| kernel                                  | §  | what                                           |
|-----------------------------------------|----|------------------------------------------------|
| ``flash_db_kernel(D, Br, Bc, TR, TC,    | 42 | PRODUCERS = 0: every thread issues the global   |
|   CAUSAL, VEC, KU, PAD, DROPOUT,        |    | loads of tile j+1 into registers before it      |
|   PRODUCERS=0)``                        |    | computes on tile j, stores them into the other  |
|                                         |    | shared buffer after: one barrier per tile       |
|                                         | 43 | PRODUCERS = P > 0: P extra warps only load (tile |
|                                         |    | j+1, global → shared), the TR·TC consumer       |
|                                         |    | threads only compute (tile j)                   |

Why. In ``flash_forward_kernel`` a tile's loads and its products take turns: the block waits for
Kj (global → shared), computes S, waits for Vj, computes P Vj; while the loads are in flight the
FMA units idle, unless another block on the SM has work (occupancy). Hopper has hardware for the
overlap — cp.async / TMA copies global → shared in the background, mbarriers signal their
arrival — and FlashAttention-3 uses it with producer warps that only issue TMA copies. Numba's
own API has none of it (no cp.async, TMA, mbarrier, named barriers ``bar.sync id, count`` or
``setmaxnreg``), but all of it is reached through inline PTX: ``vector.cp_async16`` (the
tensor-core kernels' cp.async) and ``hopper.py`` (mbarriers, ``cp.async.bulk``, named barriers,
``setmaxnreg``). ``attention_async.py`` rebuilds §42 and §43 on those (ladder steps 3 and 4).
This file is the "before": what plain loads and ``cuda.syncthreads()`` allow:

§42 (PRODUCERS = 0), tile j, buffers b = j mod 2 (Kᵀ, V and Pᵀ are all double-buffered)::

    1  regs ← K[j+1]               global loads issued; they land while 2 computes
    2  S = Qi K[b]ᵀ, mask, online softmax (m, l, correction, acc·correction)
    3  Kᵀ[1−b] ← regs              (waits for the loads only now)
    4  Pᵀ[b] ← P
    5  regs ← V[j+1]               in flight while 7 computes
    6  cuda.syncthreads()          the tile's only barrier
    7  acc += Pᵀ[b]ᵀ V[b]
    8  V[1−b] ← regs

One barrier per tile is enough because every buffer is written in one barrier interval and read
in the next only, and written again two intervals later: Kᵀ[1−b] is stored (3, tile j) after
barrier j−1 — which the tile j−1 readers of that buffer (2, tile j−1) had passed — and read
(2, tile j+1) after barrier j; V[1−b] is stored (8, tile j) after barrier j, which every reader
of it (7, tile j−1) passed, and read after barrier j+1; Pᵀ[b] is written (4) before barrier j,
read (7) after it, and written next at tile j+2, after barrier j+1. ``flash_forward_kernel`` has
four barriers per tile (K and V share one buffer, P one). The price: the copy in flight holds
Bc·D/T floats per thread in registers, and shared memory grows from Qᵀ + Kᵀ/V + Pᵀ to Qᵀ + 2 Kᵀ +
2 V + 2 Pᵀ (fewer blocks per SM).

§43 (PRODUCERS = P): the same schedule, with the roles split by warp instead of by time::

    producer warps (32·P threads)          consumer warps (TR·TC threads)
    Kᵀ[1−b] ← K[j+1]  (global → shared)    S, softmax, Pᵀ[b] ← P      (steps 2, 4)
    ─────────────────── cuda.syncthreads() ───────────────────
    V[1−b] ← V[j+1]                        acc += P V[b]               (step 7)

The warp scheduler interleaves the producers' waits on memory with the consumers' FMAs, so the
consumers never wait for a load unless the producers fall behind. What this kernel does not
say (with ``cuda.syncthreads()`` alone it cannot): the barrier is the whole block's (no named
barrier for "consumers only", no mbarrier for "this buffer is full" / "empty"), so producers and
consumers march in lockstep, one tile per barrier; every warp gets the same registers (no
setmaxnreg to give the producers' to the consumers), so the producers' registers are wasted; and
the loads still pass through the producers' registers (no bulk copy). ``attention_async.py``
says all four, through ``hopper.py``'s inline PTX. ``examples/s43_warp_specialization.py`` shows the variant against the oracle and, on a
GPU, times it beside §42 and ``flash``.

Thread layout, shared-memory layouts, masks, dropout and outputs: as ``flash_forward_kernel``
(see ``flash_steps.py``); consumer thread (tr, tc) = ((tid − 32·P) // TC, (tid − 32·P) % TC).
Shared memory: Qtᵀ [D][Br+4] | Kᵀ ×2 [D][Bc+4] | V ×2 [Bc][D] | Pᵀ ×2 [Bc][Br+4].

Limits: as ``flash_forward_kernel``; TR·TC + 32·P ≤ 1024 threads; the padded layout only (no
VARLEN). How to run: ``flashlesson.attention(q, k, v, method="flash_db")``; the producer/consumer
form through ``flashlesson.loop_order.launch_db(…, producers=P)``; ``flashlesson section 42``,
``section 43``; ``pytest tests/test_loop_order.py``; ``python3 scripts/bench_loop_order.py``.
"""

from functools import lru_cache

from numba import cuda, float32, int64

from .attention import block_tile, kv_tiles
from .flash_steps import keep_bits, o_lse_store, online_softmax, p_store, pv_product, \
    qk_product, score_mask, tile_prefetcher
from .reductions import NEG_INF, ONE, ZERO
from .tiles import tile_loader


def db_smem_floats(D, Br, Bc):
    """Dynamic shared memory of the double-buffered kernel, in float32 elements."""
    return D * (Br + 4) + 2 * D * (Bc + 4) + 2 * Bc * D + 2 * Bc * (Br + 4)


@lru_cache(maxsize=None)
def flash_db_kernel(D, Br, Bc, TR, TC, CAUSAL, VEC=False, KU=1, PAD=False, DROPOUT=False,
                    PRODUCERS=0):
    """FA2's loop with K/V double-buffered, head dimension ≤ D, Br × Bc tiles, TR × TC compute
    threads, PRODUCERS loading warps (0: every thread loads and computes) — all compile-time."""
    TCOMP = TR * TC                # threads that compute
    TPROD = 32 * PRODUCERS         # threads that only load (§43)
    T = TCOMP + TPROD
    RM = Br // TR
    CN = Bc // TC
    DN = D // TC
    W = 4 * TC
    QS = Br + 4
    KS = Bc + 4
    KSZ = D * KS                   # one Kᵀ buffer
    VSZ = Bc * D                   # one V buffer
    PSZ = Bc * QS                  # one Pᵀ buffer
    OFF_K = D * QS
    OFF_V = OFF_K + 2 * KSZ
    OFF_P = OFF_V + 2 * VSZ
    assert OFF_P + 2 * PSZ == db_smem_floats(D, Br, Bc)
    NB = max(DN, CN)
    assert TCOMP % 32 == 0 and 32 % TC == 0 and RM % 4 == 0 and CN % 4 == 0 and DN % 4 == 0
    assert RM * TR == Br and CN * TC == Bc and DN * TC == D and T <= 1024
    assert D % KU == 0 and Bc % KU == 0
    load_Qt = tile_loader(Br, D, T, QS, True, VEC)          # all threads: Qiᵀ · scale
    load_Kt = tile_loader(Bc, D, T, KS, True, VEC)          # all threads: the first Kᵀ, V
    load_V = tile_loader(Bc, D, T, D, False, VEC)
    fetch_Kt, put_Kt, REGS = tile_prefetcher(Bc, D, T, KS, True, VEC)   # §42: every thread
    fetch_V, put_V, _ = tile_prefetcher(Bc, D, T, D, False, VEC)
    prod_Kt = tile_loader(Bc, D, max(TPROD, 32), KS, True, VEC, 8)     # §43: producer warps
    prod_V = tile_loader(Bc, D, max(TPROD, 32), D, False, VEC, 8)
    qk = qk_product(RM, CN, D, QS, KS, W, KU)
    pv_guarded = pv_product(RM, DN, Bc, QS, D, W, KU, True)    # (tiles with hidden keys)
    pv = pv_product(RM, DN, Bc, QS, D, W, KU)
    mask = score_mask(RM, CN, W, CAUSAL, PAD)
    softmax = online_softmax(RM, CN, DN, TC)
    bits = keep_bits(RM, CN, W)
    store_p = p_store(RM, CN, W, QS, DROPOUT)
    write_o = o_lse_store(RM, DN, W)

    @cuda.jit
    def flash_db(q, k, v, o, lse, scale, d, n_q, n_k, heads, kpm, seed_lo, seed_hi,
                 threshold, inv_keep):
        """q, o [B·H·Nq·d], k, v [B·H·Nk·d], lse [B·H·Nq]: flat float32; kpm, seed_lo, seed_hi,
        threshold, inv_keep as in flash_forward_kernel. Grid as flash_forward_kernel's."""
        bh, q0 = block_tile(CAUSAL, Br)             # (causal: heaviest Q tiles first, §34)
        tid = cuda.threadIdx.x
        ctid = tid - TPROD                          # my index among the computing threads
        producer = ctid < 0                         # (never, when PRODUCERS = 0)
        tc = ctid & (TC - 1)
        r0 = (ctid // TC) * RM
        b_idx = bh // heads
        q_base = bh * n_q * d
        k_base = bh * n_k * d
        offset = n_k - n_q                          # §34: query i sees key j iff j ≤ i + offset

        smem = cuda.shared.array(0, float32)
        Qt = smem[:OFF_K]                           # Qᵀ: Qt[c·QS + r] = Q[q0 + r, c] · scale

        m = cuda.local.array(RM, float32)           # running row max        (§32: m)
        l = cuda.local.array(RM, float32)           # running row sum        (§32: l)
        acc = cuda.local.array((RM, DN), float32)   # un-normalized output   (§32: acc)
        s = cuda.local.array((RM, CN), float32)
        a = cuda.local.array(RM, float32)
        b = cuda.local.array(NB, float32)
        zbits = cuda.local.array(RM, int64)
        regs = cuda.local.array(REGS, float32)      # §42: the next tile, in flight
        for i in range(RM):
            m[i] = NEG_INF
            l[i] = ZERO
            for c in range(DN):
                acc[i, c] = ZERO

        n_tiles = kv_tiles(CAUSAL, q0, Br, Bc, n_q, n_k)  # (causal: up to the diagonal, §34)

        # Qi, and tile 0 into buffers 0: by every thread, before the loop
        load_Qt(q, q_base, d, q0, n_q, d, Qt, scale)
        if n_tiles > 0:
            load_Kt(k, k_base, d, 0, n_k, d, smem[OFF_K:OFF_K + KSZ], ONE)
            load_V(v, k_base, d, 0, n_k, d, smem[OFF_V:OFF_V + VSZ], ONE)
        cuda.syncthreads()                          # wait: Qi, K[0], V[0] are in shared memory

        for j in range(n_tiles):
            k0 = j * Bc
            nb = j & 1                              # this tile's buffers; the next: 1 − nb
            more = j + 1 < n_tiles                  # (the same for the whole block)
            Kc = smem[OFF_K + nb * KSZ:OFF_K + (nb + 1) * KSZ]
            Kn = smem[OFF_K + (1 - nb) * KSZ:OFF_K + (2 - nb) * KSZ]
            Vc = smem[OFF_V + nb * VSZ:OFF_V + (nb + 1) * VSZ]
            Vn = smem[OFF_V + (1 - nb) * VSZ:OFF_V + (2 - nb) * VSZ]
            Pc = smem[OFF_P + nb * PSZ:OFF_P + (nb + 1) * PSZ]

            if PRODUCERS and producer:              # §43: K[j+1] → Kᵀ[1 − nb], and no compute
                if more:
                    prod_Kt(k, k_base, d, k0 + Bc, n_k, d, Kn, ONE)
            else:
                if PRODUCERS == 0 and more:         # §42 step 1: K[j+1]'s loads issued
                    fetch_Kt(k, k_base, d, k0 + Bc, n_k, d, regs)
                qk(s, Qt, Kc, r0, tc, a, b)         # S = Qi Kjᵀ · scale
                if PAD or k0 + Bc > n_k or (CAUSAL and k0 + Bc - 1 > q0 + offset):
                    mask(s, q0 + r0, k0, tc, n_k, offset, kpm, b_idx)
                softmax(s, m, l, acc)               # online softmax (§32)
                if DROPOUT:
                    bits(zbits, seed_lo, seed_hi, bh, q0 + r0, k0, tc, threshold)
                if PRODUCERS == 0 and more:         # §42 step 3: Kᵀ[1 − nb] ← K[j+1]
                    put_Kt(regs, Kn, ONE)
                store_p(Pc, s, zbits, r0, tc, inv_keep)         # Pᵀ[nb] ← P (∘ Z)
                if PRODUCERS == 0 and more:         # §42 step 5: V[j+1]'s loads issued
                    fetch_V(v, k_base, d, k0 + Bc, n_k, d, regs)
            cuda.syncthreads()                      # the tile's one barrier: Pᵀ[nb] stored,
                                                    # Kᵀ[1 − nb] loaded, reads of V[1 − nb] done

            if PRODUCERS and producer:              # §43: V[j+1] → V[1 − nb]
                if more:
                    prod_V(v, k_base, d, k0 + Bc, n_k, d, Vn, ONE)
            else:
                if PAD or (CAUSAL and k0 + Bc - 1 > q0 + offset):
                    pv_guarded(acc, Pc, Vc, r0, tc, a, b)    # a hidden key (padded, causal)
                else:                                       # adds nothing, even NaN/inf
                    pv(acc, Pc, Vc, r0, tc, a, b)   # … + P Vj
                if PRODUCERS == 0 and more:         # §42 step 8: V[1 − nb] ← V[j+1]
                    put_V(regs, Vn, ONE)

        # O = acc / l, LSE = m + log l: the only writes to global memory (§24)
        if not producer:
            write_o(o, lse, acc, m, l, q_base, bh * n_q, q0, r0, tc, n_q, d)

    return flash_db
