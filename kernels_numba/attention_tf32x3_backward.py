"""§30 + §37 — FlashAttention backward on tensor cores for float32 inputs: 3xTF32.

Menu
| kernel                                                 | what                                  |
|--------------------------------------------------------|---------------------------------------|
| ``flash_tf32x3_bwd_dkdv_kernel(D, Bq, WARPS, CAUSAL,   | one block per 16·WARPS keys, Q tiles  |
|   PAD)``                                               | streamed: dV += Pᵀ dO, dK += dSᵀ Q     |
| ``flash_tf32x3_bwd_dq_kernel(D, Bk, WARPS, CAUSAL,     | one block per 16·WARPS queries, K/V   |
|   PAD)``                                               | tiles streamed: dQ += dS K            |

Ladder (lesson tier to fast tier): from the lesson kernel to this file, step by step, at B4 H16
N1024 d64 float32 unless a step says otherwise; TFLOP/s = 10·B·H·N²·d / time (2.5 × the forward's);
kernel-only CUDA-event medians; "× lesson" = the lesson kernel's time / the step's on the same
inputs. ``flashlesson bench ladder --only attention_tf32x3_backward`` checks and times every step
with a timed call, ``--write`` puts its numbers here; a step without one is historical (no longer
separable in the code) and keeps the TFLOP/s recorded then.
| step | what changed                                 | measured                     | timed call                     |
|------|----------------------------------------------|------------------------------|--------------------------------|
| 0    | the lesson kernels of §30 on CUDA cores      | H200, 2026-12-01: 5.68 ms,   | tier='lesson'                  |
|      | (``lesson/backward.py``)                     | 7.56 TFLOP/s                 |                                |
| 1    | this file: the tensor-core backward with     | H200, 2026-12-01: 2.2 ms,    | method='flash_tc'              |
|      | three tf32 mmas a product (3xTF32) (before:  | 19.6 TFLOP/s, 2.59× lesson   |                                |
|      | 23.7 TFLOP/s at this shape, 0.71× SDPA       |                              |                                |
|      | efficient fp32,                              |                              |                                |
|      | docs/bench_attention_tc_backward_h200.json,  |                              |                                |
|      | 2026-11-30), its products staged as the      |                              |                                |
|      | forward's (before the staging: 23.6 TFLOP/s, |                              |                                |
|      | 12–100× torch efficient's error)             |                              |                                |

(D_i = Σ_c dO_ic·O_ic comes from the CUDA-core backward's ``bwd_preprocess``: float32 O, dO.)

The fp16/bf16 tensor-core backward (kernels_numba/attention_tc_backward.py) with float32
operands: every product is three m16n8k8 tf32 mmas (big·big + big·small + small·big, each
operand x = big + small with big = tf32(x): ``attention_tc.mma3``), each k8 step's three summed
from zero and added to the accumulator on the CUDA cores, which keeps float32-level accuracy —
torch's fp32 "efficient" backend computes the same way (CUTLASS's 3xTF32 with staged
accumulation). Without the staging the tensor core's rounding toward zero at every mma piles up
over the Nq queries of dV, dK and the Nk keys of dQ (12–100× torch's error, H200, 2026-12-01,
docs/results.md). The loops, the masks and the element step (``ds_transposed``, ``ds_rows``:
P = exp(S·scale − LSE) as 2^((S·scale − LSE)·log2e) by ``mma.ex2``, dS = P ∘ (dP − D)) are
those of the fp16 kernels, with one change: the exponent is fma(S, scale, −LSE)·log2e, the
difference taken before the change of base (NAT, ``attention_tc_backward.exponent``: P near 1,
in causal rows that see few keys, then carries float32's rounding of x ≈ 0, not that of
LSE·log2e — with the one-FFMA exponent the H200 measured dK and dV of causal cases at 1.0–1.4×
torch efficient's error, and once over 2×). What else differs is the operand format:

- products over d (Sᵀ = K Qᵀ, dPᵀ = V dOᵀ; S = Q Kᵀ, dP = dO Vᵀ): ``tf32_by_rows``, A from the
  block's own rows and B from the streamed tile's rows, both float32 in shared memory;
- products over the tile (dV += Pᵀ dO, dK += dSᵀ Q; dQ += dS K): ``tf32_by_keys``, A = the
  accumulators with their k index permuted (lane t's columns 2t, 2t + 1 as k = t, t + 4), B
  the tile's rows read in the same order — no transposed copy.

Two-level sums (``tf32_by_keys_blocks``): the dK/dV kernel adds each k8 step of a Q tile into a
partial sum of its own and the partial into dV or dK once a tile, so dV and dK take Nq/Bq
roundings of their own size instead of Nq/8. The product runs a block of 8 columns at a time,
the tile's k8 steps inner, each block's sum in 4 floats (and the tile's P or dS split once):
ptxas 13.5, 168–170 registers at d = 64 (Bq = 32), 255 at d = 128 (Bq = 16), no spills (one
level: 171, and 255 with 240 bytes of spills; a d-wide partial: 250 registers, the same bits).
Why: a NumPy model of the accumulation (exact products, each step's mma sum cut toward zero,
float32 adds: ``scripts/tf32x3_error.py --accumulation``) gives, over 8 draws of B1 H1 N4096
d64 causal, dV errors of 2.3–4.8e-6 with one level, 1.4–2.4e-6 with torch's staging and with
the per-tile partial (0.7–1.1e-6 with a partial over 128 queries, but two persistent partials
spill); on the H200 (2026-12-01, docs/results.md) that case measured up
to 2.2–2.9× torch efficient's dV error with one level, 0.88–1.18× with two. At d = 128 (B1
H1 N2048 causal) the model at full size puts one level's worst element at key 3, column 122
(|dV| 2.27): 4.3–4.7e-6, of which 4.4e-6 the float32 adds of 256 k8 steps into an accumulator
of ulp 2.4e-7 (a 4σ draw of an unbiased random walk; P's own error there 1–3e-7, everywhere
≤ 8e-7), against 1.7–2.4e-6 with the per-tile partial. Two levels alone leave the larger
causal heads behind torch: 3.4× its error at B2 H16 N4096 d80 and 5.2× at B1 H16 N8192 d128
(H200, 2026-12-01, docs/results.md) — hence the order below.

Q tiles last to first. In a causal head the queries just below a key's diagonal see few keys,
so their P is near 1 and they make most of dV and dK; the thousands of queries further down
each add a little. Taken diagonal first, dV is large after a few tiles and every later add
rounds at its size; taken from the last tile back, dV stays small until the diagonal's tiles
come last. The same NumPy model (dV alone, Bq = 16, d = 128, causal; ``scripts/tf32x3_error.py
--accumulation --d 128 --tile 16``), max |error|, diagonal first → last tile first (torch's
staging): N = 2048 ``--seed 0`` 1.27e-6 → 5.8e-7 (1.50e-6), ``--seed 1`` 3.45e-6 → 7.1e-7
(1.81e-6); N = 4096 ``--seed 12`` 2.10e-6 → 4.1e-7 (1.67e-6). Not causal, no query is special
and the order changes nothing. Measured (H200, 2026-12-02, ``flashlesson bench attention --tc
--backward --quick``, docs/logs/2026-12-02_swizzle_default_calls_h200.log): max error 0.36–0.73× torch
efficient's causal at the three main shapes (0.42× at B1 H16 N8192 d128, 5.2× diagonal first),
1.03–1.35× not causal — within 2× everywhere. ptxas 13.5: 180 and 174 registers at d = 64
(170, 168 diagonal first), 255 at d = 128 with no spill without a causal mask and 8 bytes
causal (two local loads a tile; a negative-step range, a while loop, or the tile's row
computed from the last one spill 8–16 bytes).

Shared memory (float32, rows padded to D + 4): the block's two row tiles (K, V or Q, dO), the
streamed tile's two (Q, dO or K, V), and LSE_i, D_i for the dK/dV kernel. Single-buffered, two
barriers a tile, plain 16-byte loads. No atomics: bitwise the same from run to run.
Limits: D a multiple of 8, at most 256 (above d = 128 the kernels spill registers); no dropout,
no varlen.
Inputs q, k, v, do [BH, N, D] float32; LSE, D [BH, Nq] float32; outputs float32.

How to run: ``pytest tests/test_attention_tc_backward.py -k tf32``;
``attention_backward(..., method="flash_tc")`` on float32 inputs.
"""

from functools import lru_cache

from numba import cuda, float32

from .attention import first_q_tile, kv_tiles
from .attention_tc import BUILT, mma3, rows_f32, split_keys_fragment, tf32_by_keys, tf32_by_rows, \
    tf32x3_tiles
from .attention_tc_backward import clear_padded, ds_rows, ds_transposed, lane_row_stats, \
    lane_rows, padded_keys, write_rows, zeros
from .reductions import NEG_INF, ZERO
from .vector import load1


def tf32x3_bwd_smem_bytes(D, B, WARPS):
    """The block's two row tiles (16·WARPS rows), the tile's two (B rows), 2·B floats."""
    return (2 * 16 * WARPS * (D + 4) + 2 * B * (D + 4) + 2 * B) * 4


def parts(D, B, WARPS, PAD_BLOCK, PAD_TILE):
    """The device functions both kernels build, for a block of 16·WARPS rows (its own K, V or
    Q, dO) and streamed tiles of B rows: (block_rows, rows: loaders of two row tiles, the one
    holding K and V with PAD_… zeroing padded keys' rows (rows_f32); by_rows:
    products over d, S-like; by_keys: products over the tile, into d-wide accumulators;
    clear_s, clear_o: zero a B-wide or d-wide accumulator; write: the gradient rows)."""
    R, T, _, NB, NBO, S, AO = tf32x3_tiles(D, B, WARPS)
    return (rows_f32(D, R, T, PAD_BLOCK), rows_f32(D, B, T, PAD_TILE), tf32_by_rows(NB, NBO),
            tf32_by_keys(NBO, NB), zeros(S), zeros(AO), write_rows(NBO, False, True))


@lru_cache(maxsize=None)
def tf32_by_keys_blocks(NB, KC2):
    """acc += P · B as ``attention_tc.tf32_by_keys`` (the same fragments, k permuted the same
    way), summed in two levels: the 8-column blocks of acc outer, the tile's KC2 k8 steps
    inner, each block's steps added from zero into 4 floats of their own and those into acc
    once — bitwise tf32_by_keys into a d-wide partial zeroed per tile and then added to acc
    (tests/test_attention_tc_backward.py), for 4 floats instead of 4·NB. P's fragments are
    split once, into fa (big) and fs (small), 4·KC2 floats each (the caller's)."""

    @cuda.jit(device=True)
    def run(p, smem, off, KS, g, t, acc, fa, fs):
        for kc in range(KC2):
            split_keys_fragment(p, kc, fa, fs, 4 * kc)  # step kc's A fragment, once a tile
        for nb in range(NB):
            c0 = c1 = c2 = c3 = ZERO                    # this block's sum over the tile
            for kc in range(KC2):
                at = off + (8 * kc + 2 * t) * KS + g + 8 * nb
                c0, c1, c2, c3 = mma3(
                    fa[4 * kc], fa[4 * kc + 1], fa[4 * kc + 2], fa[4 * kc + 3],
                    fs[4 * kc], fs[4 * kc + 1], fs[4 * kc + 2], fs[4 * kc + 3],
                    load1(smem, at), load1(smem, at + KS), c0, c1, c2, c3)
            acc[4 * nb] += c0
            acc[4 * nb + 1] += c1
            acc[4 * nb + 2] += c2
            acc[4 * nb + 3] += c3
    return run


@lru_cache(maxsize=None)
def flash_tf32x3_bwd_dkdv_kernel(D, Bq, WARPS, CAUSAL, PAD):
    """dK, dV for float32 inputs, 3xTF32; see the module menu."""
    # Bk keys per block (rows of the transposed problem); NBQ 8-column blocks and k8 steps
    # over the Q tile, NBO over d; SQ, AO registers per lane (array sizes: named constants)
    Bk, T, KS, NBQ, NBO, SQ, AO = tf32x3_tiles(D, Bq, WARPS)
    K_AT, V_AT = 0, Bk * KS         # shared: the block's K rows, V rows, …
    Q_AT = 2 * Bk * KS              # … the tile's Qi rows, dOi rows, LSE_i, D_i
    DO_AT = Q_AT + Bq * KS
    FL = DO_AT + Bq * KS
    assert D % 8 == 0 and Bq % 16 == 0
    block_rows, rows, by_rows, _, clear_s, clear_o, write = parts(D, Bq, WARPS, PAD, False)
    ds_t = ds_transposed(NBQ, Bq, CAUSAL, PAD, NAT=True, KILL=False)   # (see there)
    unpad = clear_padded(NBO, False)
    by_blocks = tf32_by_keys_blocks(NBO, NBQ)          # (two-level sums: module menu)
    FR = 4 * NBQ                                        # floats of a tile of Pᵀ's fragments

    @cuda.jit
    def dkdv(q, k, v, do, lse, dvec, dk, dv, scale, n_q, n_k, heads, kpm):
        bh, k0, tid, g, t, key_lo = lane_rows(Bk, CAUSAL, True)   # my keys: key_lo, key_lo + 8
        mine = 16 * (tid // 32) * KS            # my warp's 16 rows in the block's tiles
        offset = n_k - n_q                      # §34: query i sees key j iff j ≤ i + offset
        smem = cuda.shared.array(0, float32)    # tf32x3_bwd_smem_bytes(D, Bq, WARPS)

        st = cuda.local.array(SQ, float32)      # Sᵀ, then Pᵀ
        dpt = cuda.local.array(SQ, float32)     # dPᵀ, then dSᵀ
        dk_acc = cuda.local.array(AO, float32)
        dv_acc = cuda.local.array(AO, float32)
        pa = cuda.local.array(4, float32)       # one k8 step of A, split: big …
        ps = cuda.local.array(4, float32)       # … and small
        fa = cuda.local.array(FR, float32)      # a tile of Pᵀ (dSᵀ) split: big …
        fs = cuda.local.array(FR, float32)      # … and small
        pad_lo = pad_hi = False                 # §35: a padded key gets dk = dv = 0 (its K,
        if PAD:                                 # V rows: zeros on chip, block_rows)
            pad_lo, pad_hi = padded_keys(kpm, bh // heads, key_lo, n_k)
        clear_o(dk_acc)
        clear_o(dv_acc)
        block_rows(k, v, bh, n_k, k0, smem, K_AT, V_AT, tid, kpm,
                   bh // heads)                 # (seen after the 1st barrier)

        first = first_q_tile(CAUSAL, k0, Bq, n_q, n_k)
        last = (n_q + Bq - 1) // Bq             # Q tiles last to first (menu: the causal
        for jj in range(last - first):          # diagonal's large P comes last, so dV and dK
            j = last - 1 - jj                   # round at a small size until then)
            q0 = j * Bq
            cuda.syncthreads()                  # wait: every warp is done with the last tile
            rows(q, do, bh, n_q, q0, smem, Q_AT, DO_AT, tid, kpm, 0)   # (no mask read)
            for r in range(tid, Bq, T):         # LSE_i, D_i (−inf/0 past Nq)
                smem[FL + r] = lse[bh, q0 + r] if q0 + r < n_q else NEG_INF
                smem[FL + Bq + r] = dvec[bh, q0 + r] if q0 + r < n_q else ZERO
            cuda.syncthreads()                  # wait: the tile (first time: K, V too) is in

            clear_s(st)
            clear_s(dpt)
            by_rows(K_AT + mine, smem, Q_AT, KS, g, t, st, pa, ps)      # Sᵀ = K Qiᵀ
            by_rows(V_AT + mine, smem, DO_AT, KS, g, t, dpt, pa, ps)    # dPᵀ = V dOiᵀ
            ds_t(st, dpt, smem, FL, key_lo, q0, n_q, n_k, offset, pad_lo, pad_hi, t,
                 scale)                         # Pᵀ, dSᵀ = Pᵀ∘(dPᵀ − D)
            by_blocks(st, smem, DO_AT, KS, g, t, dv_acc, fa, fs)        # dV += Pᵀ dOi
            by_blocks(dpt, smem, Q_AT, KS, g, t, dk_acc, fa, fs)        # dK += dSᵀ Qi

        if PAD:                                 # a padded key: dk = dv = 0, written
            unpad(dv_acc, pad_lo, pad_hi)
            unpad(dk_acc, pad_lo, pad_hi)
        write(dv, bh, key_lo, n_k, t, dv_acc, float32(1.0))
        write(dk, bh, key_lo, n_k, t, dk_acc, scale)            # dK = scale · Σ dSᵀ Q

    BUILT[("flash_tf32x3_bwd_dkdv_kernel", D, Bq, WARPS, CAUSAL, PAD)] = dkdv
    return dkdv


@lru_cache(maxsize=None)
def flash_tf32x3_bwd_dq_kernel(D, Bk, WARPS, CAUSAL, PAD):
    """dQ for float32 inputs, 3xTF32; see the module menu."""
    Bq, T, KS, NBK, NBO, SK, AO = tf32x3_tiles(D, Bk, WARPS)     # (as in the dK/dV kernel)
    Q_AT, DO_AT = 0, Bq * KS        # shared: the block's Q rows, dO rows, …
    K_AT = 2 * Bq * KS              # … the tile's Kj rows, Vj rows
    V_AT = K_AT + Bk * KS
    assert D % 8 == 0 and Bk % 16 == 0
    block_rows, rows, by_rows, by_keys, clear_s, clear_o, write = parts(D, Bk, WARPS, False, PAD)
    ds = ds_rows(NBK, CAUSAL, PAD, True)     # (NAT: see exponent)

    @cuda.jit
    def dq_kernel(q, k, v, do, lse, dvec, dq, scale, n_q, n_k, heads, kpm):
        bh, q0, tid, g, t, r_lo = lane_rows(Bq, CAUSAL, False)     # my rows: r_lo, r_lo + 8
        mine = 16 * (tid // 32) * KS
        offset = n_k - n_q
        smem = cuda.shared.array(0, float32)    # tf32x3_bwd_smem_bytes(D, Bk, WARPS)

        s = cuda.local.array(SK, float32)       # S, then P
        dp = cuda.local.array(SK, float32)      # dP, then dS
        dq_acc = cuda.local.array(AO, float32)
        pa = cuda.local.array(4, float32)       # one k8 step of A, split: big …
        ps = cuda.local.array(4, float32)       # … and small
        stats = cuda.local.array(4, float32)    # LSE and D of my two rows
        lane_row_stats(lse, dvec, bh, r_lo, n_q, stats, True)
        clear_o(dq_acc)
        b_idx = bh // heads                     # (PAD: the mask's batch row)
        block_rows(q, do, bh, n_q, q0, smem, Q_AT, DO_AT, tid, kpm,
                   b_idx)                       # (no mask read; seen after the 1st barrier)

        for j in range(kv_tiles(CAUSAL, q0, Bq, Bk, n_q, n_k)):
            k0 = j * Bk
            cuda.syncthreads()                  # wait: every warp is done with the last tile
            rows(k, v, bh, n_k, k0, smem, K_AT, V_AT, tid, kpm, b_idx)     # (PAD: zeros for
                                                                            #  padded keys)
            cuda.syncthreads()                  # wait: the tile (first time: Q, dO too) is in

            clear_s(s)
            clear_s(dp)
            by_rows(Q_AT + mine, smem, K_AT, KS, g, t, s, pa, ps)       # S = Qi Kjᵀ
            by_rows(DO_AT + mine, smem, V_AT, KS, g, t, dp, pa, ps)     # dP = dOi Vjᵀ
            ds(s, dp, stats, r_lo, k0, n_k, offset, kpm, b_idx, t,
               scale)                           # P, dS = P ∘ (dP − D)
            by_keys(dp, smem, K_AT, KS, g, t, dq_acc, pa, ps)           # dQ += dS Kj

        write(dq, bh, r_lo, n_q, t, dq_acc, scale)              # dQ = scale · Σ dS K

    BUILT[("flash_tf32x3_bwd_dq_kernel", D, Bk, WARPS, CAUSAL, PAD)] = dq_kernel
    return dq_kernel
