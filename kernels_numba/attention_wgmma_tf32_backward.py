"""§30 + §37 for float32 on Hopper — the FlashAttention backward as 3xTF32 on wgmma: every operand
split once, by one packing launch, into tf32 big and small parts laid out as shared memory holds
them; in each kernel a producer warp streams tiles in by bulk copies and one or two consumer
warpgroups run the products as wgmmas, each 32 of k summed from zero and added on the CUDA cores.

Menu
| kernel                                        | what                                          |
|-----------------------------------------------|-----------------------------------------------|
| ``pack_kernel(D, PAD)``                       | q, k, v, dO [BH, n, D] float32 → the seven    |
|                                               | packed operands (below), big and small, one   |
|                                               | launch (its z axis: the operand); zeros past  |
|                                               | n and (PAD) for padded keys                   |
| ``stats_kernel(VEC)``                         | D_i = Σ_c dO_ic·O_ic and LSE_i into rows      |
|                                               | padded to ``pad_rows(n)`` (0 past Nq); VEC:   |
|                                               | 16-byte loads                                 |
| ``wgmma_tf32_bwd_dkdv_kernel(D, Bq, CWG,      | one block per 64·CWG keys, Q/dO tiles of Bq   |
|   STAGES, CAUSAL, PAD)``                      | last to first: Sᵀ = K Qᵀ, dPᵀ = V dOᵀ (SS     |
|                                               | m64n{Bq}k8), dV += Pᵀ dO, dK += dSᵀ Q (RS     |
|                                               | m64n{D}k8, B = dOᵀ, Qᵀ); at d = 128 each      |
|                                               | block one of dK, dV (grid z; "d = 128:        |
|                                               | roles" below)                                 |
| ``wgmma_tf32_bwd_dq_kernel(D, Bk, CWG,        | one block per 64·CWG queries, K/V tiles of    |
|   STAGES, CAUSAL, PAD)``                      | Bk: S = Q Kᵀ, dP = dO Vᵀ (SS), dQ += dS K     |
|                                               | (RS, B = Kᵀ)                                  |

Ladder (lesson tier to fast tier): from the lesson kernel to this file, step by step, at B2 H16
N4096 d64 float32 unless a step says otherwise; TFLOP/s = 10·B·H·N²·d / time (2.5 × the forward's);
kernel-only CUDA-event medians; "× lesson" = the lesson kernel's time / the step's on the same
inputs. ``flashlesson bench ladder --only attention_wgmma_tf32_backward`` checks and times every
step with a timed call, ``--write`` puts its numbers here; a step without one is historical (no
longer separable in the code) and keeps the TFLOP/s recorded then.
| step | what changed                                 | measured                     | timed call                     |
|------|----------------------------------------------|------------------------------|--------------------------------|
| 0    | the lesson kernels of §30 on CUDA cores      | H200, 2026-12-02: 44.3 ms,   | tier='lesson'                  |
|      | (``lesson/backward.py``)                     | 7.75 TFLOP/s                 |                                |
| 1    | 3xTF32 on mma.sync                           | H200, 2026-12-02: 14.9 ms,   | method='flash_tc'              |
|      | (``attention_tf32x3_backward.py``): every    | 23.1 TFLOP/s, 2.98× lesson   |                                |
|      | warp splits its operands again each k8 step  |                              |                                |
| 2    | this file: Q, K, V, dO split once by one     | H200, 2026-12-02: 9.79 ms,   | method='flash_wgmma',          |
|      | packing launch into the layouts shared       | 35.1 TFLOP/s, 4.53× lesson   | config=WgmmaTf32BwdConfig(Q_CWG=1, |
|      | memory holds, every product on wgmma (three  |                              | STAGES=1, Bq=32, Bk=32)        |
|      | a k8 step, summed every 32 of k), a producer |                              |                                |
|      | warp's bulk copies, one consumer warpgroup a |                              |                                |
|      | kernel, one stage: load, wait, compute       |                              |                                |
| 3    | §42: two stages, the next tile's bulk copies | H200, 2026-12-02: 6.88 ms,   | method='flash_wgmma',          |
|      | in flight during this tile's wgmmas          | 50 TFLOP/s, 6.45× lesson     | config=WgmmaTf32BwdConfig(Q_CWG=1, |
|      |                                              |                              | STAGES=2, Bq=32, Bk=32)        |
| 4    | two consumer warpgroups in the dQ kernel (at | historical: H200,            | method='flash_wgmma' before    |
|      | most 168 registers a thread; 122–126 on the  | 2026-12-02: 6.5 ms, 52.9     | step 5                         |
|      | H200, no local memory),                      | TFLOP/s, 6.74× lesson (with  |                                |
|      | ``tc_methods.default_wgmma_tf32_bwd_config`` | the packing of one word a    |                                |
|      |                                              | thread)                      |                                |
| 5    | the packing launch four words a thread (a    | historical: H200,            | method='flash_wgmma' before    |
|      | 16-byte load of four columns, or four tokens | 2026-12-02: 6.06 ms, 56.7    | step 6                         |
|      | of one column, and 16-byte stores of both    | TFLOP/s, 7.23× lesson        |                                |
|      | parts; before: 0.550 ms at this shape, about |                              |                                |
|      | 1.3 TB/s of its reads and writes, now 0.175  |                              |                                |
|      | ms, H200, 2026-12-02, docs/results.md): the  |                              |                                |
|      | default. Steps 2 and 3, timed the same day,  |                              |                                |
|      | have it too (with one word a thread: 10.3    |                              |                                |
|      | and 7.47 ms)                                 |                              |                                |
| 6    | the D and LSE launch (``stats_kernel``, a    | H200, 2026-12-02: 6.01 ms,   | method='flash_wgmma'           |
|      | thread a row) reads its rows 16 bytes a load | 57.2 TFLOP/s, 7.37× lesson   |                                |
|      | instead of a float (VEC; the same float64    |                              |                                |
|      | sums in the same order, the same bits):      |                              |                                |
|      | 0.094 → 0.038 ms at this shape, 0.22 → 0.073 |                              |                                |
|      | ms at B1 H16 N8192 d128 (H200, 2026-12-02,   |                              |                                |
|      | docs/results.md): the default. Steps 2 and   |                              |                                |
|      | 3, timed since, have it too                  |                              |                                |

Against torch (H200, 2026-12-02, docs/results.md; the public call's launches replayed,
kernel-only, × torch SDPA efficient's fp32 backward in the same process, not causal /
causal): 1.35 / 1.30 at B4 H16 N1024 d64, 1.62 / 1.53 at B2 H16 N4096 d64; with the packing of
one word a thread (step 4) 1.13 / 1.01, 1.52 / 1.37. The tiles and warpgroups (the same day,
one-word packing, kernel-only (end to end)): the default 1.12 (1.12) / 1.00 (1.02) at B4 H16
N1024 d64, 1.51 (1.51) / 1.38 (1.38) at B2 H16 N4096 d64, 1.62 (1.60) / 1.57 (1.56) at B1 H16
N8192 d64; one dQ warpgroup 0.99 / 0.91, 1.31 / 1.19, 1.40 / 1.35; one stage and one
warpgroup 0.78–1.02. Max error of dq, dk, dv on head (0, 0) against float64: 0.21–0.47× torch
efficient's (flash_tc's mma.sync: 0.20–0.56×). At d = 128 (the same day): 1.03 (1.04) / 1.00
(1.00) at B1 H16 N8192 d128, 0.50–0.53× torch efficient's error; flash_tc 0.49 / 0.53.

The packed operands. tf32 wgmma reads both operands K-major only, so each product needs its B
with k contiguous: the row products (over d) read Q, K, V, dO as they are (k = d), the key
products (over a tile) read them transposed (k = the tile's tokens). Seven layouts, each a
permutation of the padded tensor, big and small parts apart::

    natural  (Q, dO, K, V):  word (r, c) at (r // 8)·8D + (c // 4)·32 + (r % 8)·4 + c % 4
             K-major, core matrices (8 rows × 4 words) along k adjacent: LBO = 128 bytes,
             SBO = 32·D (the next 8 rows), a k8 step 256 bytes on (``rows_desc``)
    transposed (Qᵀ, dOᵀ, Kᵀ): word (c, kw) at (kw // 4)·4D + (c // 8)·32 + (c % 8)·4 + kw % 4,
             position kw holding token 8·(kw // 8) + PERM[kw % 8] (attention_wgmma_tf32: the
             order of the accumulator's columns in an RS A fragment); LBO = 16·D, SBO = 128,
             a k8 step 32·D bytes on (hopper.kmajor_desc with R = D)

In both, the rows r0 … r0 + R − 1 (r0 a multiple of 8) are one contiguous run of R·D words at
r0·D, whatever R is: a 64-row A (a warpgroup's own rows) and a Bq-row B tile come from the same
packed array, one bulk copy each, and the packing does not depend on the tiles.

The dK/dV kernel, per consumer warpgroup of 64 keys (its K, V rows copied once), for each Q
tile i from the last to the first one whose rows see its keys (§34; the causal diagonal's
large P comes last, as attention_tf32x3_backward's "Q tiles last to first")::

    wait FULL[s]                         ← Qi, dOi, Qiᵀ, dOiᵀ (both parts), LSE_i, D_i
    Sᵀ  = Σ_parts (Ks·Qbᵀ, Kb·Qsᵀ, Kb·Qbᵀ)   ← 12 wgmmas a part of 32 of d, from zero
    dPᵀ = the same with V, dOi           ← a second commit group
    wait Sᵀ; Pᵀ = e^(Sᵀ·scale − LSE)     ← attention_tc_backward.ds_transposed_steps (NAT)
    dV part = Ps·dOb, Pb·dOs, Pb·dOb     ← RS, B = dOiᵀ; 12 wgmmas a part of 32 queries
    wait dPᵀ; dSᵀ = Pᵀ∘(dPᵀ − D)         ← under dV's wgmmas
    dK part = the same with dSᵀ, Qiᵀ
    wait; arrive EMPTY[s]; dV += part, dK += part (to nearest, on the CUDA cores)
    dK ·= scale; padded keys: dk = dv = 0

The dQ kernel, per consumer warpgroup of 64 queries (Q, dO copied once), for each K/V tile j
its rows see: S = Q Kjᵀ and dP = dO Vjᵀ the same way (two groups), P under dP's wgmmas
(ds_rows_steps, NAT; masked: 0), dS = P∘(dP − D) (masked: 0), dQ part = dS Kj (RS, B = Kjᵀ),
dQ += part; dQ ·= scale. The masks are tested element by element (ds_rows_steps' APART off):
the fp16 dQ kernel's separate mask path (attention_wgmma_backward's menu) makes this one 1.12×
slower not causal and 1.02× causal (H200, 2026-12-02), though ptxas gives it 134 registers
and no spills, against 168 and 84–112 bytes of spills (d = 64). At d = 128 (tiles of 16 keys,
P unmasked) it measured 1.045 → 1.033× torch efficient not causal and 1.011 → 1.016× causal,
the same bits (H200, 2026-12-02, docs/results.md; 168 → 172 registers): within a run's noise
causal, a loss not causal, so neither head dim takes it.

d = 128: roles. One warpgroup's dK and dV at d = 128, with the parts they are summed from,
would take 256 registers a thread before Sᵀ and dPᵀ, so there the dK/dV kernel gives each
block one of them (grid z = 0: dK, the heavier, dispatched first; z = 1: dV)::

    dV block (K own):      Sᵀ = K Qiᵀ (waited) → Pᵀ → dV part = Pᵀ dOi   (two products)
    dK block (K, V own):   Sᵀ, dPᵀ → dSᵀ → dK part = dSᵀ Qi               (three)

Both compute Sᵀ, so a tile costs five products where the d = 64 kernel takes four. The other split
— each block half of dK's and dV's columns, Sᵀ and dPᵀ in both — costs six: 0.91 / 0.89× torch
efficient (not causal / causal) against 1.03 / 1.00 for the roles (1.03 / 0.99 with the dV blocks
dispatched first), and with dQ's columns split the same way 0.73 / 0.70 (H200, 2026-12-02, B1 H16
N8192 d128, docs/results.md). Tiles of 16 queries (16 keys in the dQ kernel), two stages: 224 KB
each kernel; tiles of 32 fit one stage only (roles 0.81 / 0.82×).

Staged sums: as the forward's (attention_wgmma_tf32, "Staged sums"): the tensor core cuts each
addend to the grid of the largest and rounds its sum toward zero, so dV, dK and dQ never go
through it — each part starts from zero and is added to nearest.

Shared memory (dynamic, ``tf32_bwd_smem_bytes``; float32 words)::

    dK/dV: K big | K small | V big | V small (64·CWG rows each) | stages:
           [Q big | Q small | dO big | dO small | Qᵀ big | Qᵀ small | dOᵀ big | dOᵀ small
            (Bq·D each) | LSE_i | D_i (Bq each)]
    dQ:    Q big | Q small | dO big | dO small (64·CWG rows each) | stages:
           [K big | K small | V big | V small | Kᵀ big | Kᵀ small (Bk·D each)]
    dK/dV at d = 128: as above, but a dV block copies K alone, and a stage holds
           [Q big | Q small | dO big | dO small (a dV block: Q only) | Qᵀ big | Qᵀ small
            (dK) or dOᵀ big | dOᵀ small (dV) | LSE_i | D_i]

The defaults (d = 64, tiles of 32, two stages): the dK/dV kernel one warpgroup, 193 KB; the dQ
kernel two, 224 KB (one: 160 KB). Registers (``attention_wgmma.block_reg_cap``; ptxas 13.5
offline): the dK/dV kernel 224–226 of 255, the dQ kernel 186–193 with one warpgroup, 168 with
two and 84–108 bytes of spills offline — but 122–126 registers and no local memory as compiled
on the H200 (numba-cuda's toolchain there; the dK/dV kernel 224–226 there too); the dK/dV
kernel with two warpgroups would spill 644 bytes offline, and its K, V rows would take 128 KB,
so it has one. At d = 128 (tiles of 16, two stages): both kernels 224 KB; the dK/dV kernel
172–174 registers and the dQ kernel 168 on the H200, no local memory (offline ptxas: 172–174,
and 255 with 200 bytes of spills). Barriers: FULL[s] (count 1: the producer's expect_tx,
then the bytes), EMPTY[s] (count: the consumer threads), OWN (count 1: the block's own rows).

Limits: float32, d = 64 or 128; Bq, Bk = 16 or 32 (``tc_methods.default_wgmma_tf32_bwd_config``:
32 at d = 64, 16 at d = 128); CWG = 1 or 2 (d = 128: 1, ``WgmmaTf32BwdConfig.check``); sm_90a.
No dropout, no varlen. Deterministic (no atomics; every sum in a fixed order). Masks as
attention_tc_backward's: padded keys and keys past Nk are zero rows in every packed K, V, Kᵀ, so
a masked key's NaN never reaches a product, and dk = dv = 0 for padded keys; the documented
causal exception of flash_tc (a causal-hidden key's NaN on a diagonal tile). The packed copies
take 3.5× q, k, v and dO's memory while the call runs. The simulator computes each wgmma at
issue (sim/hopper.py).

How to run: ``attention_backward(do32, q32, k32, v32, o32, lse, method="flash_wgmma")``,
``pytest tests/test_attention_wgmma_tf32_backward.py``; on a Hopper GPU ``flashlesson bench
ladder --only attention_wgmma_tf32_backward`` and ``flashlesson bench attention --tc
--backward``.
"""

from functools import lru_cache

from numba import cuda, float32, uint32, uint64

from .attention import first_q_tile, kv_tiles
from .attention_backward import d_row, d_row4
from .attention_tc import split_keys_fragment, zeros
from .attention_tc_backward import clear_padded, ds_rows_steps, ds_transposed_steps, \
    lane_row_stats, lane_rows, padded_keys, write_rows
from .attention_wgmma import WARPGROUP, block_reg_cap, ring_slot, uniform_u32
from .attention_wgmma_tf32 import BUILT, PART, STEPS, added, fence_all, key_product, summed
from .hopper import SWIZZLE_NONE, WGMMA_TF32, bulk_copy_g2s, \
    fence_mbarrier_init, kmajor_desc, mbar_arrive, mbar_arrive_expect_tx, mbar_init, \
    mbar_try_wait_parity, shared_addr, wgmma_commit_group, wgmma_desc, wgmma_fence, \
    wgmma_wait_group
from .mma import tf32
from .reductions import ZERO
from .sim import gpu_options
from .vector import load1, load4, store4

ROWS = 128                  # packed rows are padded to a multiple of this (the largest block)
# The packing launch's z axis: (source, Q side (else K side), slot, transposed); slot s of a
# side holds its big part at 2s·P and its small part at (2s + 1)·P, P words a part
Q_SLOTS = ("Q", "dO", "Qᵀ", "dOᵀ")
K_SLOTS = ("K", "V", "Kᵀ")
JOBS = 7


def pad_rows(n):
    """Rows of a packed head: n rounded up to a multiple of ROWS (≥ ROWS)."""
    return max(1, -(-n // ROWS)) * ROWS


def dkdv_roles(D):
    """Whether each block of the dK/dV kernel computes one of dK, dV (grid z = 0: dK, 1: dV;
    "d = 128: roles"): at d = 128."""
    return D == 128


def stage_words(D, B, KEYS):
    """float32 words of one stage of B tokens: KEYS, the dK/dV kernel's eight tile parts and
    LSE_i, D_i (at d = 128, a block computing dK or dV: six parts and LSE_i, D_i); the dQ
    kernel's six parts (module menu, "Shared memory")."""
    return ((6 if dkdv_roles(D) else 8) * B * D + 2 * B) if KEYS else 6 * B * D


def tf32_bwd_smem_bytes(D, B, CWG, STAGES, KEYS):
    """Dynamic shared memory of one kernel: the block's own rows (four parts of 64·CWG rows)
    and STAGES stages (stage_words), float32."""
    return 4 * (4 * 64 * CWG * D + STAGES * stage_words(D, B, KEYS))


@lru_cache(maxsize=None)
def pack_kernel(D, PAD, VEC=True):
    """pack(q, k, v, do, qside, kside, n_q, n_k, nq_pad, nk_pad, kpm, heads): one thread four
    consecutive words e … e + 3 of a packed head (grid: quads of the larger side's head, BH,
    JOBS). z = 0‥3: Q, dO, Qᵀ, dOᵀ into qside's slots 0‥3; z = 4‥6: K, V, Kᵀ into kside's slots
    0‥2 (module menu: word e of a head → row, column); big = tf32(x), small = tf32(x − big);
    zeros past n and, PAD, for keys whose kpm[b, key] is 0 (the K side). Natural, the four words
    are four adjacent columns of one token (VEC: one 16-byte load, the launcher having checked
    that q, k, v, dO start on 16 bytes; else four); transposed, one column of tokens t, t + 2,
    t + 4, t + 6 (PERM; four loads, a warp's 32 lanes 32 adjacent columns of each); both parts
    stored 16 bytes at a time. H200, 2026-12-02 (docs/results.md): 0.089 ms at B4
    H16 N1024 d64, 4.0 TB/s of its reads (7 × 16.8 MB) and writes (14 × 16.8 MB), where a
    device-to-device copy runs at 4.2 (docs/results.md, softmax, 2026-11-30); one word a
    thread (not VEC), 0.277 ms (1.3 TB/s)."""
    assert D % 8 == 0                               # (the layouts' core matrices)

    @cuda.jit(device=True)
    def kept(kpm, b_idx, tok, n, kside_job):
        """Whether token tok is packed (else zeros): below n and, PAD on the K side, a key that
        kpm keeps."""
        return tok < n and (not PAD or not kside_job or kpm[b_idx, tok] != 0)

    @cuda.jit
    def pack(q, k, v, do, qside, kside, n_q, n_k, nq_pad, nk_pad, kpm, heads):
        e = 4 * (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x)  # first of my 4 words
        bh = cuda.blockIdx.y
        z = cuda.blockIdx.z
        kside_job = z >= 4
        n = n_k if kside_job else n_q
        n_pad = nk_pad if kside_job else nq_pad
        if e >= n_pad * D:
            return
        x = (v if z == 5 else k) if kside_job else (do if z == 1 or z == 3 else q)
        b_idx = bh // heads
        x0 = x1 = x2 = x3 = ZERO
        if z == 2 or z == 3 or z == 6:              # transposed: column col, four tokens
            rem = e % (4 * D)
            col = (rem // 32) * 8 + (rem % 32) // 4
            kw = (e // (4 * D)) * 4                 # tokens of kw … kw + 3: PERM[kw % 8 + j]
            tok = 8 * (kw // 8) + (kw % 8) // 4     #  = t + 2j (kw % 8 is 0 or 4)
            src = (bh * n + tok) * D + col
            if kept(kpm, b_idx, tok, n, kside_job):
                x0 = load1(x, src)
            if kept(kpm, b_idx, tok + 2, n, kside_job):
                x1 = load1(x, src + 2 * D)
            if kept(kpm, b_idx, tok + 4, n, kside_job):
                x2 = load1(x, src + 4 * D)
            if kept(kpm, b_idx, tok + 6, n, kside_job):
                x3 = load1(x, src + 6 * D)
        else:                                       # natural: token tok, columns col … + 3
            tok = (e // (8 * D)) * 8 + (e % 32) // 4
            src = (bh * n + tok) * D + ((e % (8 * D)) // 32) * 4
            if kept(kpm, b_idx, tok, n, kside_job):
                if VEC:                             # (compile time)
                    x0, x1, x2, x3 = load4(x, src)
                else:
                    x0, x1 = load1(x, src), load1(x, src + 1)
                    x2, x3 = load1(x, src + 2), load1(x, src + 3)
        out = kside if kside_job else qside
        part = cuda.gridDim.y * n_pad * D           # words of one part: BH packed heads
        dst = 2 * (z - 4 if kside_job else z) * part + bh * n_pad * D + e   # (slot's big part)
        b0, b1, b2, b3 = tf32(x0), tf32(x1), tf32(x2), tf32(x3)
        store4(out, dst, b0, b1, b2, b3)                                    # big = tf32(x)
        store4(out, dst + part, tf32(x0 - b0), tf32(x1 - b1), tf32(x2 - b2),
               tf32(x3 - b3))                                               # small = tf32(x − big)

    BUILT[("pack_kernel(backward)", D, PAD, VEC)] = pack
    return pack


@lru_cache(maxsize=None)
def stats_kernel(VEC):
    """Row i < pad_rows(Nq) of head bh (grid: rows, BH): d_p[bh, i] = D_i (§30,
    attention_backward.d_row: o, do are [BH·Nq, D] rows), lse_p[bh, i] = LSE_i; 0 past Nq.
    VEC: rows on 16-byte boundaries, read 16 bytes a load (``d_row4``: the same bits; 0.22 →
    0.073 ms at B1 H16 N8192 d128, H200, 2026-12-02, docs/results.md)."""
    row_sum = d_row4 if VEC else d_row

    @cuda.jit
    def stats_kernel(o, do, lse, lse_p, d_p, n_q):
        """o, do [BH·Nq, D] float32; lse [BH, Nq]; lse_p, d_p [BH, pad_rows(Nq)]."""
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        bh = cuda.blockIdx.y
        if i >= lse_p.shape[1]:
            return
        dv = ZERO
        lv = ZERO
        if i < n_q:
            dv = row_sum(o, do, bh * n_q + i)
            lv = lse[bh, i]
        d_p[bh, i] = dv
        lse_p[bh, i] = lv
    return stats_kernel


@cuda.jit(device=True)
def rows_desc(addr, D):
    """The K-major descriptor of a natural packed tile at addr (module menu: LBO = 128 bytes,
    SBO = 32·D; k8 step ks at 256·ks bytes, 16·ks units)."""
    return wgmma_desc(addr, 128, 32 * D, SWIZZLE_NONE)


@lru_cache(maxsize=None)
def two_products(D, N, ONE=False):
    """run(s0, s1, s2, s3, p0, p1, p2, p3, ab, asm, bb, bsm, cb, csm, eb, esm): both kernels'
    first step on a tile — X = A Bᵀ into the parts s0 … (one a 32 of d) and Y = C Eᵀ into
    p0 …, 64 × N each, A, B, C, E natural tiles (rows_desc descriptors of their big and small
    parts), as two commit groups; then the wait for X alone (Y still running) and s0 = X,
    its parts summed to nearest. Each part is As·Bb, then Ab·Bs, then Ab·Bb: 12 wgmmas from
    zero (the small products first, while the sum is small). ONE: X alone (p0 …, C, E
    unused), waited for."""
    mma = WGMMA_TF32[N]
    SH, SP = N // 2, D // PART
    fence = fence_all(SH, SP)
    total = summed(SH, SP)

    @cuda.jit(device=True)
    def part(acc, ab, asm, bb, bsm, p):
        for kk in range(STEPS):                         # As·Bb (acc from zero)
            u = uint64(16 * (STEPS * p + kk))
            mma(acc, asm + u, bb + u, kk > 0)
        for kk in range(STEPS):                         # Ab·Bs
            u = uint64(16 * (STEPS * p + kk))
            mma(acc, ab + u, bsm + u, True)
        for kk in range(STEPS):                         # Ab·Bb
            u = uint64(16 * (STEPS * p + kk))
            mma(acc, ab + u, bb + u, True)

    @cuda.jit(device=True)
    def parts(x0, x1, x2, x3, ab, asm, bb, bsm):
        part(x0, ab, asm, bb, bsm, 0)
        if SP > 1:
            part(x1, ab, asm, bb, bsm, 1)
        if SP > 2:                                      # (compile-time: d = 128)
            part(x2, ab, asm, bb, bsm, 2)
            part(x3, ab, asm, bb, bsm, 3)
        wgmma_commit_group()

    @cuda.jit(device=True)
    def run(s0, s1, s2, s3, p0, p1, p2, p3, ab, asm, bb, bsm, cb, csm, eb, esm):
        fence(s0, s1, s2, s3)
        fence(p0, p1, p2, p3)                           # (ONE: p0 … unused, fenced all the
        wgmma_fence()                                   #  same) (s0, p0 last read, before)
        parts(s0, s1, s2, s3, ab, asm, bb, bsm)         # group: X
        if not ONE:                                     # (compile time)
            parts(p0, p1, p2, p3, cb, csm, eb, esm)     # group: Y
        wgmma_wait_group(0 if ONE else 1)               # wait: X (Y still running, if any)
        fence(s0, s1, s2, s3)
        total(s0, s1, s2, s3)
    return run


@cuda.jit(device=True)
def init_ring(bars, STAGES, NC):
    """Thread 0: FULL[s] (count 1: the producer's expect_tx, then the bytes), EMPTY[s] (every
    consumer thread) for each of the STAGES stages, then the own rows' barrier (count 1)."""
    for s in range(STAGES):
        mbar_init(bars, s, 1)
        mbar_init(bars, STAGES + s, NC)
    mbar_init(bars, 2 * STAGES, 1)
    fence_mbarrier_init()


@lru_cache(maxsize=None)
def producer_steps(OWN, TW, STAGES, STAGE):
    """The producer lane's three steps (both kernels; word offsets into smem, parts P words
    apart in the packed side x):
    own(smem, x, P, src, bars, COUNT): the block's own rows — COUNT parts (4: big, small of
    two operands; 2: of one) of OWN words from x[src …] — onto the own rows' barrier.
    claim(bars, i, words): tile i's stage s (waiting, from the second lap on, until tile i −
    STAGES has left it), its FULL[s] told to expect words (STAGE, or fewer where a block's
    role copies less); returns (its first word, s).
    tile(smem, at, x, P, src, COUNT, bars, s): COUNT parts of TW words from x[src …] into the
    stage at word at, completing on FULL[s]."""
    RING = 4 * OWN

    @cuda.jit(device=True)
    def own(smem, x, P, src, bars, COUNT):
        mbar_arrive_expect_tx(bars, 2 * STAGES, 4 * OWN * COUNT)
        for c in range(COUNT):
            bulk_copy_g2s(smem, c * OWN, x, c * P + src, 4 * OWN, bars, 2 * STAGES)

    @cuda.jit(device=True)
    def claim(bars, i, words):
        s, ph = ring_slot(i, STAGES)
        if i >= STAGES:                             # wait: tile i − STAGES left stage s
            mbar_try_wait_parity(bars, STAGES + s, ph ^ uint32(1))
        mbar_arrive_expect_tx(bars, s, 4 * words)
        return RING + STAGE * s, s

    @cuda.jit(device=True)
    def tile(smem, at, x, P, src, COUNT, bars, s):
        for c in range(COUNT):
            bulk_copy_g2s(smem, at + c * TW, x, c * P + src, 4 * TW, bars, s)
    return own, claim, tile


@lru_cache(maxsize=None)
def four_parts(W):
    """parts(first): the descriptors of four parts of W words each, one after the other from
    first's (a descriptor counts 16 bytes): as packed, the big and small parts of two operands
    (K, V or Q, dO; a tile's Qi, dOi or Kj, Vj), or of Qiᵀ, dOiᵀ."""

    @cuda.jit(device=True)
    def parts(first):
        return (first, first + uint64(W // 4), first + uint64(2 * W // 4),
                first + uint64(3 * W // 4))
    return parts


@lru_cache(maxsize=None)
def own_descriptors(D, OWN):
    """descs(smem, cw): the descriptors of warpgroup cw's own 64 rows — big and small of the
    first operand (K or Q), big and small of the second (V or dO), 4 parts of OWN words from
    word 0 — and the ring's first word's address; all in uniform registers (uniform_u32)."""
    parts = four_parts(OWN)

    @cuda.jit(device=True)
    def descs(smem, cw):
        b1, s1, b2, s2 = parts(rows_desc(uniform_u32(shared_addr(smem, 64 * cw * D)), D))
        return b1, s1, b2, s2, uniform_u32(shared_addr(smem, 4 * OWN))
    return descs


def _geometry(D, B, CWG, STAGES):
    """(consumer threads, words of one own part, of one natural tile part, S's parts over d,
    the tile's parts over its tokens, k8 steps in one of those)."""
    assert D in (64, 128) and B in (16, 32) and CWG in (1, 2) and STAGES >= 1
    return WARPGROUP * CWG, 64 * CWG * D, B * D, D // PART, max(1, B // PART), min(B, PART) // 8


@lru_cache(maxsize=None)
def wgmma_tf32_bwd_dkdv_kernel(D, Bq, CWG, STAGES, CAUSAL, PAD):
    """dK, dV for float32 inputs, 3xTF32 on wgmma (module menu); at d = 128 each block computes
    one of them ("d = 128: roles": grid z = 0 dK, 1 dV)."""
    NC, OWN, TW, SP, OP, KS = _geometry(D, Bq, CWG, STAGES)
    ROLES = dkdv_roles(D)
    assert CWG == 1 or not ROLES
    Bk = 64 * CWG                           # keys a block
    T = NC + 32                             # the consumers, then the producer warp
    RING = 4 * OWN                          # stage s at RING + STAGE·s (words)
    STAGE = stage_words(D, Bq, True)        # (ROLES, a dV block: Qi at 0, dOiᵀ at 4·TW)
    FL = STAGE - 2 * Bq                     # LSE_i, D_i: words into a stage
    FULL, EMPTY, KFULL = 0, STAGES, 2 * STAGES     # bars: FULL[s], EMPTY[s], the own rows'
    NBARS = 2 * STAGES + 1
    SH, OH = Bq // 2, D // 2                # accumulator floats a thread: Sᵀ (dPᵀ), dK (dV)
    NBQ, NBO = Bq // 8, D // 8
    first_step = two_products(D, Bq)
    s_alone = two_products(D, Bq, True)     # (ROLES: a dV block's Sᵀ alone)
    own_rows, claim, tile = producer_steps(OWN, TW, STAGES, STAGE)
    descs = own_descriptors(D, OWN)
    tile_parts = four_parts(TW)
    parts = key_product(D, OP, KS)
    fence_s = fence_all(SH, SP)
    fence_o = fence_all(OH, OP)
    sum_s = summed(SH, SP)
    add_o = added(OH, OP)
    probs, grads = ds_transposed_steps(NBQ, Bq, CAUSAL, PAD, NAT=True, KILL=False)
    unpad = clear_padded(NBO, False)
    write = write_rows(NBO, False, True)
    clear = zeros(OH)
    cap = block_reg_cap(T)

    @cuda.jit(**gpu_options(max_registers=cap))
    def dkdv(qside, kside, lse_p, d_p, dk, dv, scale, n_q, n_k, heads, kpm, nq_pad, nk_pad):
        """qside, kside: pack_kernel's; lse_p, d_p: stats_kernel's, flat (BH·nq_pad); dk, dv
        [BH, Nk, D] float32; kpm uint8 [B, Nk] (PAD); nq_pad, nk_pad = pad_rows(Nq, Nk)."""
        bh, k0, tid, g, t, key_lo = lane_rows(Bk, CAUSAL, True)     # my keys: key_lo, + 8
        dv_role = ROLES and cuda.blockIdx.z == 1    # (z = 0: the heavier dK blocks, first)
        smem = cuda.shared.array(0, float32)        # K, V | stage 0 | stage 1 … (menu)
        bars = cuda.shared.array(NBARS, uint64)
        PQ = qside.shape[0] // 8                    # words of one part, each side
        PK = kside.shape[0] // 6
        offset = n_k - n_q                          # §34: query i sees key j iff j ≤ i + offset
        first = first_q_tile(CAUSAL, k0, Bq, n_q, n_k)
        last = (n_q + Bq - 1) // Bq
        n_tiles = max(last - first, 0)
        if tid == 0:
            init_ring(bars, STAGES, NC)             # FULL[s], EMPTY[s], the own rows'
        cuda.syncthreads()                          # wait: the barriers are ready

        if tid >= NC:                               # the producer warp: lane 0 copies
            if tid == NC and n_tiles > 0:
                own_rows(smem, kside, PK, (bh * nk_pad + k0) * D, bars, 2 if dv_role else 4)
                                                    # K, V: big, small (a dV block: K)
                for i in range(n_tiles):
                    at, s = claim(bars, i, STAGE - 2 * TW if dv_role else STAGE)
                    row = bh * nq_pad + (last - 1 - i) * Bq     # tiles last to first
                    if dv_role:                     # Qi; dOiᵀ (slot 3)
                        tile(smem, at, qside, PQ, row * D, 2, bars, s)
                        tile(smem, at + 4 * TW, qside, PQ, 6 * PQ + row * D, 2, bars, s)
                    else:                           # Qi, dOi, Qiᵀ (and dOiᵀ)
                        tile(smem, at, qside, PQ, row * D, 6 if ROLES else 8, bars, s)
                    bulk_copy_g2s(smem, at + FL, lse_p, row, 4 * Bq, bars, FULL + s)
                    bulk_copy_g2s(smem, at + FL + Bq, d_p, row, 4 * Bq, bars, FULL + s)
            return

        cw = tid // WARPGROUP                       # consumer warpgroup: keys 64·cw …
        s0 = cuda.local.array(SH, float32)          # Sᵀ's parts (s0 becomes Sᵀ, then Pᵀ)
        s1 = cuda.local.array(SH, float32)
        s2 = cuda.local.array(SH, float32)
        s3 = cuda.local.array(SH, float32)
        p0 = cuda.local.array(SH, float32)          # dPᵀ's parts (p0: dPᵀ, then dSᵀ)
        p1 = cuda.local.array(SH, float32)
        p2 = cuda.local.array(SH, float32)
        p3 = cuda.local.array(SH, float32)
        v0 = cuda.local.array(OH, float32)          # this tile's parts of dV, dK (ROLES: c0,
        v1 = cuda.local.array(OH, float32)          #  c1 the block's one; v0, v1, gb, gs,
                                                    #  dv_acc unused)
        c0 = cuda.local.array(OH, float32)
        c1 = cuda.local.array(OH, float32)
        fb = cuda.local.array(SH, float32)          # Pᵀ as A fragments: big, small (ROLES:
        fs = cuda.local.array(SH, float32)          #  Pᵀ or dSᵀ)
        gb = cuda.local.array(SH, float32)          # dSᵀ as A fragments: big, small
        gs = cuda.local.array(SH, float32)
        dv_acc = cuda.local.array(OH, float32)
        dk_acc = cuda.local.array(OH, float32)      # (ROLES: dK or dV, the block's)
        clear(dv_acc)
        clear(dk_acc)
        pad_lo = pad_hi = False                     # §35: a padded key gets dk = dv = 0
        if PAD:
            pad_lo, pad_hi = padded_keys(kpm, bh // heads, key_lo, n_k)
        kb, ksm, vb, vsm, ring = descs(smem, cw)   # my K, V rows (big, small); the ring
        if n_tiles > 0:
            mbar_try_wait_parity(bars, KFULL, 0)    # wait: K, V have landed

        for i in range(n_tiles):
            s, ph = ring_slot(i, STAGES)
            q0 = (last - 1 - i) * Bq
            mbar_try_wait_parity(bars, FULL + s, ph)    # wait: tile i has landed
            a = uint32(ring + uint32(4 * STAGE) * s)
            qb, qs, ob, os_ = tile_parts(rows_desc(a, D))   # Qi, dOi (natural): big, small
            qtb, qts, otb, ots = tile_parts(kmajor_desc(a + uint32(16 * TW), D, 0, False))
                                                    # Qiᵀ, dOiᵀ: big, small (ROLES: the
            fl = RING + STAGE * s + FL              #  first two only); LSE_i, D_i (words)

            if ROLES:                               # (compile time) d = 128: dV or dK
                acc, xtb, xts = dk_acc, qtb, qts    # the block's one accumulator; dOiᵀ (dV
                if dv_role:                         #  block) or Qiᵀ (dK block)
                    s_alone(s0, s1, s2, s3, p0, p1, p2, p3, kb, ksm, qb, qs, vb, vsm, ob, os_)
                                                    # Sᵀ = K Qiᵀ in s0
                    probs(s0, smem, fl, key_lo, q0, n_q, n_k, offset, pad_lo, pad_hi, t, scale)
                    for kc in range(NBQ):           # Pᵀ → big, small A fragments
                        split_keys_fragment(s0, kc, fb, fs, 4 * kc)
                else:
                    first_step(s0, s1, s2, s3, p0, p1, p2, p3, kb, ksm, qb, qs, vb, vsm, ob,
                               os_)                 # Sᵀ in s0; dPᵀ = V dOiᵀ running
                    probs(s0, smem, fl, key_lo, q0, n_q, n_k, offset, pad_lo, pad_hi, t, scale)
                    wgmma_wait_group(0)             # wait: dPᵀ
                    fence_s(p0, p1, p2, p3)
                    sum_s(p0, p1, p2, p3)
                    grads(s0, p0, smem, fl, t)      # dSᵀ = Pᵀ∘(dPᵀ − D) in p0
                    for kc in range(NBQ):
                        split_keys_fragment(p0, kc, fb, fs, 4 * kc)
                parts(c0, c1, fb, fs, xtb, xts)     # group: dV's part = Pᵀ dOi, or dK's =
                wgmma_wait_group(0)                 #  dSᵀ Qi; wait: the part; stage s read
                fence_o(c0, c1, c1, c1)
                mbar_arrive(bars, EMPTY + s)        # EMPTY[s]: the stage may be refilled
                add_o(acc, c0, c1)                  # dV or dK += the part (to nearest)
            else:                                   # d = 64: both
                first_step(s0, s1, s2, s3, p0, p1, p2, p3, kb, ksm, qb, qs, vb, vsm, ob, os_)
                                                    # Sᵀ = K Qiᵀ in s0; dPᵀ = V dOiᵀ running
                probs(s0, smem, fl, key_lo, q0, n_q, n_k, offset, pad_lo, pad_hi, t, scale)
                for kc in range(NBQ):               # Pᵀ → big, small A fragments
                    split_keys_fragment(s0, kc, fb, fs, 4 * kc)

                parts(v0, v1, fb, fs, otb, ots)     # group: dV's parts = Pᵀ dOi
                wgmma_wait_group(1)                 # wait: dPᵀ (dV's part still running)
                fence_s(p0, p1, p2, p3)
                sum_s(p0, p1, p2, p3)
                grads(s0, p0, smem, fl, t)          # dSᵀ = Pᵀ∘(dPᵀ − D) in p0
                for kc in range(NBQ):
                    split_keys_fragment(p0, kc, gb, gs, 4 * kc)

                parts(c0, c1, gb, gs, qtb, qts)     # group: dK's parts = dSᵀ Qi
                wgmma_wait_group(0)                 # wait: both parts; stage s read
                fence_o(v0, v1, v1, v1)
                fence_o(c0, c1, c1, c1)
                mbar_arrive(bars, EMPTY + s)        # EMPTY[s]: the stage may be refilled
                add_o(dv_acc, v0, v1)               # dV, dK += the parts (to nearest)
                add_o(dk_acc, c0, c1)

        if PAD:                                     # a padded key: dk = dv = 0, written
            if not ROLES:                           # (compile time)
                unpad(dv_acc, pad_lo, pad_hi)
            unpad(dk_acc, pad_lo, pad_hi)
        if dv_role:                                 # (ROLES: dV in dk_acc, the one acc)
            write(dv, bh, key_lo, n_k, t, dk_acc, float32(1.0))
        else:
            if not ROLES:                           # (compile time)
                write(dv, bh, key_lo, n_k, t, dv_acc, float32(1.0))
            write(dk, bh, key_lo, n_k, t, dk_acc, scale)        # dK = scale · Σ dSᵀ Q

    BUILT[("wgmma_tf32_bwd_dkdv_kernel", D, Bq, CWG, STAGES, CAUSAL, PAD)] = dkdv
    return dkdv


@lru_cache(maxsize=None)
def wgmma_tf32_bwd_dq_kernel(D, Bk, CWG, STAGES, CAUSAL, PAD):
    """dQ for float32 inputs, 3xTF32 on wgmma (module menu)."""
    NC, OWN, TW, SP, OP, KS = _geometry(D, Bk, CWG, STAGES)
    Br = 64 * CWG                           # queries a block
    T = NC + 32
    STAGE = stage_words(D, Bk, False)
    FULL, EMPTY, QFULL = 0, STAGES, 2 * STAGES
    NBARS = 2 * STAGES + 1
    SH, OH = Bk // 2, D // 2
    NBK, NBO = Bk // 8, D // 8
    first_step = two_products(D, Bk)
    own_rows, claim, tile = producer_steps(OWN, TW, STAGES, STAGE)
    descs = own_descriptors(D, OWN)
    tile_parts = four_parts(TW)
    parts = key_product(D, OP, KS)
    fence_s = fence_all(SH, SP)
    fence_o = fence_all(OH, OP)
    sum_s = summed(SH, SP)
    add_o = added(OH, OP)
    probs, grads = ds_rows_steps(NBK, CAUSAL, PAD, NAT=True, APART=False)  # (menu)
    write = write_rows(NBO, False, True)
    clear = zeros(OH)
    cap = block_reg_cap(T)

    @cuda.jit(**gpu_options(max_registers=cap))
    def dq_kernel(qside, kside, lse_p, d_p, dq, scale, n_q, n_k, heads, kpm, nq_pad, nk_pad):
        """As the dK/dV kernel's arguments, but lse_p, d_p [BH, nq_pad]; dq [BH, Nq, D]
        float32."""
        bh, q0, tid, g, t, r_lo = lane_rows(Br, CAUSAL, False)     # my rows: r_lo, r_lo + 8
        smem = cuda.shared.array(0, float32)        # Q, dO | stage 0 | stage 1 … (menu)
        bars = cuda.shared.array(NBARS, uint64)
        PQ = qside.shape[0] // 8
        PK = kside.shape[0] // 6
        b_idx = bh // heads
        offset = n_k - n_q
        n_tiles = kv_tiles(CAUSAL, q0, Br, Bk, n_q, n_k)
        if tid == 0:
            init_ring(bars, STAGES, NC)             # FULL[s], EMPTY[s], the own rows'
        cuda.syncthreads()                          # wait: the barriers are ready

        if tid >= NC:                               # the producer warp: lane 0 copies
            if tid == NC and n_tiles > 0:
                own_rows(smem, qside, PQ, (bh * nq_pad + q0) * D, bars, 4)  # Q, dO: big, small
                for i in range(n_tiles):
                    at, s = claim(bars, i, STAGE)
                    tile(smem, at, kside, PK, (bh * nk_pad + i * Bk) * D, 6, bars, s)
                                                    # K, V, Kᵀ: big, small
            return

        cw = tid // WARPGROUP
        s0 = cuda.local.array(SH, float32)          # S's parts (s0: S, then P)
        s1 = cuda.local.array(SH, float32)
        s2 = cuda.local.array(SH, float32)
        s3 = cuda.local.array(SH, float32)
        p0 = cuda.local.array(SH, float32)          # dP's parts (p0: dP, then dS)
        p1 = cuda.local.array(SH, float32)
        p2 = cuda.local.array(SH, float32)
        p3 = cuda.local.array(SH, float32)
        o0 = cuda.local.array(OH, float32)          # this tile's parts of dQ
        o1 = cuda.local.array(OH, float32)
        fb = cuda.local.array(SH, float32)          # dS as A fragments: big, small
        fs = cuda.local.array(SH, float32)
        acc = cuda.local.array(OH, float32)
        stats = cuda.local.array(4, float32)        # LSE, D of my two rows
        lane_row_stats(lse_p, d_p, bh, r_lo, n_q, stats, True)
        clear(acc)
        qb, qs, ob, os_, ring = descs(smem, cw)    # my Q, dO rows (big, small); the ring
        if n_tiles > 0:
            mbar_try_wait_parity(bars, QFULL, 0)    # wait: Q, dO have landed

        for j in range(n_tiles):
            s, ph = ring_slot(j, STAGES)
            mbar_try_wait_parity(bars, FULL + s, ph)    # wait: K_j, V_j have landed
            a = uint32(ring + uint32(4 * STAGE) * s)
            kb, ksm, vb, vsm = tile_parts(rows_desc(a, D))  # Kj, Vj (natural): big, small
            ktb, kts, _, _ = tile_parts(kmajor_desc(a + uint32(16 * TW), D, 0, False))
                                                    # Kjᵀ: big, small
            k0 = j * Bk

            first_step(s0, s1, s2, s3, p0, p1, p2, p3, qb, qs, kb, ksm, ob, os_, vb, vsm)
                                                    # S = Q Kjᵀ in s0; dP = dO Vjᵀ running
            probs(s0, stats, r_lo, k0, n_k, offset, kpm, b_idx, t, scale)     # P (masked: 0)
            wgmma_wait_group(0)                     # wait: dP
            fence_s(p0, p1, p2, p3)
            sum_s(p0, p1, p2, p3)
            grads(s0, p0, stats, r_lo, k0, n_k, offset, kpm, b_idx, t)    # dS (masked: 0)
            for kc in range(NBK):                   # dS → big, small A fragments
                split_keys_fragment(p0, kc, fb, fs, 4 * kc)

            parts(o0, o1, fb, fs, ktb, kts)         # group: dQ's parts = dS Kj
            wgmma_wait_group(0)                     # wait: the part; stage s read
            fence_o(o0, o1, o1, o1)
            mbar_arrive(bars, EMPTY + s)            # EMPTY[s]: the stage may be refilled
            add_o(acc, o0, o1)                      # dQ += the part (to nearest)

        write(dq, bh, r_lo, n_q, t, acc, scale)     # dQ = scale · Σ dS K

    BUILT[("wgmma_tf32_bwd_dq_kernel", D, Bk, CWG, STAGES, CAUSAL, PAD)] = dq_kernel
    return dq_kernel
