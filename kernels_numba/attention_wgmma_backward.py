"""§30 on Hopper — the FlashAttention backward with every product on ``wgmma`` (fp16 / bf16 in,
fp32 accumulation): flash_tc's backward (``attention_tc_backward.py``) with its mma.sync
products replaced by warpgroup mmas and its tiles streamed through a ring of stages on
mbarriers, as the wgmma forward (``attention_wgmma.py``) streams K and V.

Menu
| kernel                                            | what                                      |
|---------------------------------------------------|-------------------------------------------|
| ``attention_tc_backward.tc_bwd_preprocess(BF16,  | D_i = Σ_c dO_ic·O_ic and LSE_i·log2e     |
|   LSE2=True, VEC)``                               | (+inf for −inf), a thread a row (VEC: 16  |
|                                                   | bytes a load)                             |
| ``wgmma_bwd_dkdv_kernel(D, Bq, CWG, STAGES,       | one block per 64·CWG keys (a consumer     |
|   CAUSAL, PAD, BF16)``                            | warpgroup per 64), Q/dO tiles of Bq       |
|                                                   | streamed: Sᵀ = K Qᵀ, dPᵀ = V dOᵀ (SS),    |
|                                                   | dV += Pᵀ dO, dK += dSᵀ Q (RS, B N-major)  |
| ``wgmma_bwd_dq_kernel(D, Bk, CWG, STAGES,         | one block per 64·CWG queries, K/V tiles   |
|   CAUSAL, PAD, BF16)``                            | of Bk streamed: S = Q Kᵀ, dP = dO Vᵀ      |
|                                                   | (SS), dQ += dS K (RS, B N-major)          |
| ``wgmma_bwd_dkdv_kernel(…, FUSED=True)``,         | no dQ kernel: the dK/dV kernel also puts  |
|   ``tc_bwd_preprocess(BF16, LSE2=True,            | dS in shared memory, dQ_i += dS K (SS, B  |
|   CLEAR=True)``, ``dq_finish(BF16)``              | = its K rows N-major) and adds that to a  |
|                                                   | float32 dQ in key-block order (turns on a |
|                                                   | semaphore a Q tile); opt-in, slower here  |
| ``… (…, SWIZZLE=True)`` (not with FUSED)          | every tile in the 128-byte swizzle        |
|                                                   | (hopper.sw128_index), read K-major and    |
|                                                   | MN-major as attention_wgmma's SWIZZLE;    |
|                                                   | opt-in: 0.94–1.02× unswizzled, H200       |
| ``wgmma_bwd_dkdv_kernel(…, AHEAD=True)``,         | AHEAD: the next tile's Sᵀ, dPᵀ (S, dP)    |
|   ``wgmma_bwd_dq_kernel(…, AHEAD=True)``          | issued at the end of this tile, behind    |
|   (STAGES ≥ 2, not FUSED)                         | dV, dK (dQ); the default: the dK/dV       |
|                                                   | kernel always, the dQ kernel at d = 128   |

Ladder (lesson tier to fast tier): from the lesson kernel to this file, step by step, at B1 H16
N8192 d128 float16 unless a step says otherwise; TFLOP/s = 10·B·H·N²·d / time (2.5 × the forward's);
kernel-only CUDA-event medians; "× lesson" = the lesson kernel's time / the step's on the same
inputs. ``flashlesson bench ladder --only attention_wgmma_backward`` checks and times every step
with a timed call, ``--write`` puts its numbers here; a step without one is historical (no longer
separable in the code) and keeps the TFLOP/s recorded then.
| step | what changed                                 | measured                     | timed call                     |
|------|----------------------------------------------|------------------------------|--------------------------------|
| 0    | the lesson kernels of §30 on CUDA cores, on  | H200, 2026-12-02: 832 ms,    | tier='lesson'                  |
|      | float32 inputs of the same shape (there is   | 1.65 TFLOP/s                 |                                |
|      | no lesson tensor-core backward) (float32)    |                              |                                |
| 1    | the mma.sync backward                        | H200, 2026-12-02: 7.27 ms,   | method='flash_tc'              |
|      | (``attention_tc_backward.py``, the fp16/bf16 | 189 TFLOP/s, 114.47× lesson  |                                |
|      | default off Hopper and at other head dims):  |                              |                                |
|      | where this file starts                       |                              |                                |
| 2    | every product on wgmma (Sᵀ, dPᵀ / S, dP from | H200, 2026-12-02: 6.32 ms,   | method='flash_wgmma',          |
|      | shared memory; dV, dK / dQ with Pᵀ, dSᵀ / dS | 217 TFLOP/s, 131.66× lesson  | config=WgmmaBwdConfig(Bq=64,   |
|      | in registers and B N-major), 2 consumer      |                              | Bk=64, CWG=2, STAGES=1,        |
|      | warpgroups, tiles of 64 through one stage on |                              | FUSED=False, SWIZZLE=False,    |
|      | mbarriers: load, wait, compute (STAGES = 1)  |                              | AHEAD=None)                    |
| 3    | two stages: the next tile's cp.async copies  | H200, 2026-12-02: 5.31 ms,   | method='flash_wgmma',          |
|      | in flight during this tile's wgmmas. Steps 2 | 259 TFLOP/s, 156.68× lesson  | config=WgmmaBwdConfig(Bq=64,   |
|      | and 3 run the leaner loop and the softmax    |                              | Bk=64, CWG=2, STAGES=2,        |
|      | under the second product (menu); with the    |                              | FUSED=False, SWIZZLE=False,    |
|      | lean loop alone 6.62 and 5.63 ms, before it  |                              | AHEAD=False)                   |
|      | 7.41 and 6.4 ms (2026-12-01)                 |                              |                                |
| 4    | AHEAD: the next tile's Sᵀ, dPᵀ (S, dP)       | H200, 2026-12-02: 4.65 ms,   | method='flash_wgmma',          |
|      | issued behind this tile's dV, dK (dQ), so    | 296 TFLOP/s, 179.06× lesson  | config=WgmmaBwdConfig(Bq=64,   |
|      | the tensor cores have the next products      |                              | Bk=64, CWG=2, STAGES=2,        |
|      | queued while the warpgroup waits, arrives    |                              | FUSED=False, SWIZZLE=False,    |
|      | and copies (menu; the dQ kernel ahead at d = |                              | AHEAD=None)                    |
|      | 128 only)                                    |                              |                                |
| 5    | three stages: with AHEAD a tile's FULL wait  | historical: H200,            | method='flash_wgmma',          |
|      | comes at the end of the tile before, and two | 2026-12-02: 4.51 ms, 305     | config=WgmmaBwdConfig() before |
|      | stages had issued its copies only at that    | TFLOP/s, 182.65× lesson      | step 6                         |
|      | tile's start; three issue them a tile        |                              |                                |
|      | earlier. The method's default                |                              |                                |
|      | (``WgmmaBwdConfig()``), and the default      |                              |                                |
|      | method for fp16/bf16 on Hopper at d = 64 and |                              |                                |
|      | 128                                          |                              |                                |
| 6    | the first launch (D_i = Σ_c dO_ic·O_ic and   | H200, 2026-12-02: 4.36 ms,   | method='flash_wgmma',          |
|      | LSE_i·log2e, a thread a row) reads its rows  | 315 TFLOP/s, 190.79× lesson  | config=WgmmaBwdConfig(Bq=64,   |
|      | 16 bytes a load instead of a word (VEC; the  |                              | Bk=64, CWG=2, STAGES=3,        |
|      | same sums in the same order, the same bits): |                              | FUSED=False, SWIZZLE=False,    |
|      | 0.095 → 0.030 ms here, the backward 1.00×    |                              | AHEAD=None)                    |
|      | the word form at this shape and 1.06× at B4  |                              |                                |
|      | H16 N1024 d64, where that launch was 9 % of  |                              |                                |
|      | the call (H200, 2026-12-02,                  |                              |                                |
|      | docs/results.md). The method's default       |                              |                                |

FUSED (``WgmmaBwdConfig(FUSED=True)``): the two kernels compute S and dP twice — seven
products a tile pair where FlashAttention-2 and -3 do five, adding dQ from the dK/dV kernel
with atomics in whatever order the blocks arrive (not deterministic). FUSED does the five and
stays deterministic: after dV is issued and before dK, each warpgroup stores its dSᵀ fragments as dS
(queries as rows, K-major: ``dq_turns``' put_ds), a syncthreads publishes the whole 64 × Bk
tile, and warpgroup c computes columns c·D/CWG … of dQ_i = dS K (m64n{D/CWG}k16 × Bk/16, SS,
B = the block's K rows read N-major); then it waits for its turn on sem[Q tile] (hopper.
sem_wait_geq: key blocks in order, CWG turns each), adds its part to a float32 dQ with
atomic adds, and gives the turn on (sem_release_add). The preprocess zeroes the accumulator
and the turns; ``dq_finish`` writes dq = scale · accumulator in the inputs' format.
Measured (H200, 2026-12-01, kernel-only, docs/logs/2026-12-01_wgmma_backward_fused_h200.log): 0.46–0.61×
SDPA flash, 0.68–0.88× the two kernels without AHEAD — slower, so opt-in. Every tile waits for
a turn (an acquire load and a release at GPU scope, about two L2 round trips), both
warpgroups meet at a syncthreads, and the dQ product runs alone after dV, dK; the two kernels
overlap one warpgroup's softmax with the other's products instead. The turns' latency is not
the whole cost: each key block's Q-tile order rotated so that turns come in arrival order
measured 1–6 % slower (causal 5–19 %: the causal grid must then go lightest-first), and each
tile's part added at the next tile under its first products 7–11 % slower at d = 128 (same
day and log); the barrier and the lone dQ product are the rest. FlashAttention-3 hides the
turn behind a separate warp that writes dQ with a bulk reduce-add from shared memory; this
file has no such warp. Turns wait only for key blocks launched earlier (blocks start in
launch order), so they cannot deadlock.

The dK/dV kernel (keys as rows, as flash_tc's: Pᵀ and dSᵀ leave their wgmmas in the
accumulator layout, which is the A-fragment layout of the next product, so they never touch
shared memory). Per consumer warpgroup of 64 keys k0 + 64c …, for each Q tile i from the
first one whose last row sees key k0 (§34)::

    wait FULL[s]                       ← Qi, dOi, LSE_i, D_i have landed
    Sᵀ  = K Qiᵀ                        ← wgmma m64n{Bq}k16 ×D/16, A = K rows, B = Qi rows (SS)
    dPᵀ = V dOiᵀ                       ← the same with V and dOi (a second commit group)
    wait Sᵀ                            ← wgmma_wait_group(1): dPᵀ still running
    Pᵀ  = 2^(Sᵀ·scale·log2e − LSE·log2e) → A fragments
                                       ← CUDA cores (attention_tc_backward.ds_transposed_steps'
                                         probs), under dPᵀ's products; pack_accumulators
    dV += Pᵀ dOi                       ← wgmma m64n{D}k16 ×Bq/16, A = Pᵀ (RS), B = dOi N-major
    wait dPᵀ                           ← wgmma_wait_group(1): dV still running
    dSᵀ = Pᵀ∘(dPᵀ − D) → A fragments   ← CUDA cores (its grads), under dV's products
    dK += dSᵀ Qi                       ← the same with dSᵀ and Qi
    wait dV, dK; arrive EMPTY[s]
    dK ·= scale; padded keys: dk = dv = 0

AHEAD (the default where it can be: STAGES ≥ 2, not FUSED) moves the first products to the
end of the tile before, so that the tensor cores find them queued behind dK::

    before the loop: wait FULL[0]; Sᵀ₀, dPᵀ₀; wait Sᵀ₀
    for each tile i:
        copies of tile i + STAGES − 1  ← into tile i − 1's stage, released at its end
        Pᵀ from Sᵀ → A fragments       ← under dPᵀᵢ (issued in tile i − 1)
        wait dPᵀ                       ← wgmma_wait_group(0): below
        dV += Pᵀ dOi; dSᵀ (under dV); dK += dSᵀ Qi
        wait FULL[i + 1]; Sᵀᵢ₊₁        ← behind dV, dK (st is free: Pᵀ is in pa_p)
        wait dV, dK; arrive EMPTY[s]   ← wgmma_wait_group(1): Sᵀᵢ₊₁ runs on
        dPᵀᵢ₊₁; wait Sᵀᵢ₊₁             ← wgmma_wait_group(1): dPᵀᵢ₊₁ runs on, over the back edge

and the dQ kernel the same with S, dP issued together behind dQ. Three facts of ptxas shape
it (CUDA 13.5, read from its C75xx remarks and the SASS): (1) a group issued before the
loop's back edge and waited for after it must be waited for by wait_group(0) before any
newer group is issued — ptxas does not follow the groups' order across the back edge, and a
wait_group(1) behind dV makes it serialize every wgmma of the kernel (C7514); so the dK/dV
kernel waits for dPᵀ before it issues dV. (2) Both entries of the back edge (from before the
loop, from the loop's end) must carry the same groups in flight: a prologue that leaves two
groups against a loop end that leaves three, or next-tile products issued only "if there is
one", make ptxas insert waits (C7517) or serialize (C7515); so the products past the last
tile are issued all the same, reading a stage nobody fills, and their FULL wait is skipped
(``stage_products``' ready) — one extra Sᵀ, dPᵀ a block, waited for after the loop. (3) At
d = 128 the dK/dV kernel cannot hold dPᵀᵢ₊₁'s accumulators while dV, dK still read pa_p,
pa_ds: issuing both next products at once spills 56–136 bytes, so dPᵀᵢ₊₁ follows the wait
for dV, dK. Per full tile of the dK/dV kernel (SASS, d = 128) AHEAD costs 446 instructions
against 408 (the loop's extra waits, arrivals and addresses). Measured (H200, 2026-12-02,
kernel-only, × SDPA flash backward, docs/results.md; not causal / causal): AHEAD in the dK/dV
kernel alone 0.85 → 0.93 / 0.83 → 0.90 at B1 H16 N8192 d128, 0.91 → 0.97 / 0.89 → 0.95 at B2
H16 N4096 d64, 0.91 → 0.95 / 0.99 → 1.03 at B4 H16 N1024 d64; the dQ kernel ahead too 0.95 /
0.96 at d = 128 but 0.82 / 0.89 and 0.82 / 0.96 at d = 64, where its 139 registers leave one
block an SM instead of two (122) — hence the default. With AHEAD three stages run level to
4 % ahead of two (without AHEAD, within 3 % either way): AHEAD waits for a tile's copies at
the end of the tile before, and with two stages they are issued only at that tile's start
(into the stage the tile before last has just released); with three they are issued a tile
earlier — so ``WgmmaBwdConfig()`` has three (ladder step 5; the default call 0.97 / 1.04,
1.02 / 0.98, 1.02 / 0.95 × SDPA flash at the three shapes, same day).

The dQ kernel (queries as rows), per consumer warpgroup of 64 queries, for each K/V tile j
the warpgroup's rows see (§34)::

    S = Qi Kjᵀ, dP = dOi Vjᵀ            ← SS wgmmas, B = Kj rows, Vj rows (K-major), two groups
    P; then dS = P∘(dP − D)             ← attention_tc_backward.ds_rows_steps: P once S has
                                          landed, under dP's products (masked: dS = 0)
    dQ += dS Kj                         ← RS wgmma, B = Kj N-major
    dQ ·= scale

The masks (keys past Nk, §34 causal, §35 padding) are tested only on the tiles that need them,
on a path of their own, and only on dS (ds_rows_steps' APART: one branch a tile around every
test; P feeds nothing else). Tested element by element under a branch on the tile, as flash_tc's
dQ kernel does, ptxas predicates the tests into every tile, and the causal dQ kernel costs as
much as the dK/dV kernel: 0.45 and 1.40 ms against 0.43 and 1.41 at B2 H16 N4096 d64 and B1
H16 N8192 d128; apart, 0.32 and 1.13, the causal backward 0.97 → 1.17× and 0.95 → 1.05× SDPA
flash on one stream (H200, 2026-12-02, docs/results.md; not causal, the same). At d = 64 the
kernel is compiled for two blocks an SM (max_registers 128: ptxas gives it 132 without the
cap, 125 with it and no spills).

One tile, two readings. Every tile in shared memory is stored once, K-major
(``attention_wgmma.kmajor_rows``: hopper.kmajor_index(row, col, R), 16-byte pieces of a row as
they lie in global memory), and read by two descriptors. As the B of Sᵀ = K Qᵀ (k = the head
dimension, n = the tile's rows) it is K-major: LBO = 16·R bytes (the next 8 columns), SBO =
128 bytes (the next 8 rows), k16 step s at byte 32·R·s. As the B of dK += dSᵀ Q (k = the
tile's rows, n = the head dimension) the same core matrices — 8 rows × 8 columns, each 16-byte
line 8 consecutive columns of one row — are the N-major core matrices of hopper.py's drawing
(each line 8 consecutive n of one k), only their order differs: the next 8 n (columns) are
16·R bytes on, the next 8 k (rows) 128 bytes on, so LBO = 128 bytes, SBO = 16·R bytes, k16
step s at byte 256·s::

    address(row, col) = start + (row // 8)·128 + (row % 8)·16 + (col // 8)·16·R + (col % 8)·2
        K-major B (n = row, k = col): SBO = 128,  LBO = 16·R
        N-major B (k = row, n = col): LBO = 128,  SBO = 16·R

(the forward's V tile is N-major with LBO = 16·D, SBO = 128: the same formula, rows and
columns stored the other way round). No transposed copy, no second tile.

SWIZZLE (``WgmmaBwdConfig(SWIZZLE=True)``, opt-in, not with FUSED; correct on the H200 and
0.94–1.02× the unswizzled kernel there, 2026-12-02, measured on the loop without the
instruction savings below: the backward is bound by instructions, not copies): every tile as
hopper.sw128_index lays it out — 64-column halves, a row's half in one 128-byte line, chunks
XOR (row % 8) — copied row by row (kmajor_rows(…, SWIZZLE)), the tiles from a 1024-byte
boundary on (``at0``; a stage rounded up to 1024 bytes: ``stage_words``), and its two
readings with the swizzle (``kmajor_desc``, ``nmajor_desc``: SBO = 1024; K-major 32 bytes a
k16 step within a half and 128·R to the next, MN-major 2048 bytes a step and LBO = 128·R;
docs/hopper_sw128.md). The same reason as the forward's SWIZZLE: a quarter-warp's copies one
line of global memory and one of shared memory, where kmajor_rows's order reads half lines
(docs/results.md, the L2 requests).

Shared memory (dynamic, ``wgmma_bwd_smem_bytes``), in words (uint32 pairs of halves)::

    dK/dV: K rows (64·CWG × D, K-major) | V rows | stage 0: Qi | dOi | LSE_i | D_i | stage 1 …
           FUSED: then dS tiles 0, 1 (Bq × 64·CWG halves, K-major by queries; tile i uses i % 2,
           so that one warpgroup's stores of tile i + 1 never meet the other's reads of tile i)
    dQ:    Q rows (64·CWG × D, K-major) | dO rows | stage 0: Kj | Vj | stage 1 …
    bars   FULL[s] (count: every thread copies), EMPTY[s] (count: every thread)

The block's own rows (K, V; or Q, dO) are copied once by cp.async (zeros past N and, PAD, for
padded keys), waited for, and published by a syncthreads; the streamed tiles go through the
ring as in the forward without a producer: tile i uses stage i % STAGES, every thread issues
the copies of tile i + STAGES − 1 before tile i's products (STAGES = 1: tile i's own — load,
wait, compute), arrives on FULL[s] by ``cp_async_mbar_arrive``, waits on EMPTY[s] before
refilling a stage, and arrives on EMPTY[s] once its wgmmas reading the stage are waited for.
LSE_i and D_i travel by 4-byte cp.async in the same stage (zeros past Nq, where
``ds_transposed`` puts +inf: P = 0); LSE_i as LSE·log2e (+inf for −inf), which the preprocess
computes once a row (``tc_bwd_preprocess(…, LSE2=True)``, the kernels' argument lse2).

Deterministic: no atomics, each gradient element summed by one thread in tile order (the
wgmma's own summation order is fixed by the hardware): bitwise the same from run to run. The
two kernels share no output, so the host launches them side by side (flashlesson's
launch.launch_beside: the dQ kernel on a forked stream; 1–4 % faster on the H200, 2026-12-02).

Masks (as flash_tc's backward; docs/api.md): causal bottom-right (query i sees key j iff j ≤ i +
Nk − Nq), tiles that no row of the block sees skipped (the dK/dV kernel starts at
``first_q_tile``, the dQ kernel stops at ``kv_tiles``); padded keys' and keys past Nk's rows
are zeros on chip (cp.async zero-fill, no global read), so a NaN in a masked K or V row never
enters a product, the dK/dV kernel writes dk = dv = 0 for padded keys, and the dQ kernel sets
dS = 0 where it masks a score. The documented exception is flash_tc's: on a causal diagonal
tile, a key hidden from some rows but seen by others is in the tile, and 0·NaN = NaN in dS·K.

Limits: fp16/bf16, d = D = 64 or 128 exactly (other d: method 'flash_tc'); Bq, Bk = 64 or 128
(not Bq = 128 at d = 128: below; FUSED: Bq = 64); CWG = 1 or 2; sm_90a (wgmma, mbarrier). No
producer warpgroup (every thread copies), a tile's CUDA-core work overlaps its own later
products and (AHEAD) the next tile's first ones, never a second tile's softmax; no dropout, no
varlen. The simulator runs it at tiny shapes (one to four blocks; the products computed at
once, not asynchronously).

Instructions. The backward is bound by instructions and latency, not by copies: Nsight Compute
at B1 H16 N8192 d128 (H200, 2026-12-02, docs/results.md) of the loop written plainly showed
both kernels issuing 2.6× the instructions of torch's backward, the integer pipe the busiest:
about 1600 SASS instructions a warp per tile in the dK/dV kernel and 1050 in the dQ kernel,
where some 230 and 170 do the work (wgmma, ex2, the dS arithmetic, packing, copies). What the
loop does to stay short (none of it in the arithmetic: the gradients are bitwise the same):
- the copies: ``attention_wgmma.kmajor_rows`` finds a thread's first 16-byte piece once and
  steps by constants (its pieces keep their column and lie a fixed number of rows apart),
  with one base address for a whole tile (about 75 instructions a copy otherwise); LSE_i and
  D_i in one unrolled pass;
- the descriptors: ``hopper.kmajor_desc``/``nmajor_desc`` are step 0's descriptor plus a
  constant (``desc_step``), so a k16 loop builds each once; the warpgroup index comes from
  ``warpgroup_of`` (a shuffle from lane 0), so ptxas keeps the per-warpgroup addresses in
  uniform registers, where wgmma reads its descriptors;
- dS: ``attention_tc_backward.ds_transposed`` reads LSE_i, D_i at 32-bit offsets, tests
  "query < Nq" on the last tile only, puts the causal tests in one branch for the lanes at the
  diagonal and, KILL = FUSED, skips the kill flags of keys past Nk and padded keys (their
  rows of Pᵀ, dSᵀ reach only their own dK, dV rows, never written or zeroed; FUSED's dQ keeps
  them);
- the stage's tile addresses: the stage 0 address taken once through
  ``attention_wgmma.uniform_u32`` (a shuffle from lane 0) plus the stage's offset keeps the
  Q/dO descriptors in uniform registers — one uniform add a wgmma, where ``shared_addr(smem,
  at)`` per tile puts them in vector registers (R2UR and a 64-bit add: 7 instructions a wgmma);
- ``attention_wgmma.ring_slot``: a use's stage and phase parity in 32-bit unsigned
  arithmetic, not Numba's int64 signed modulo and division;
- LSE·log2e (+inf for −inf) computed once a row by the preprocess (``tc_bwd_preprocess(…,
  LSE2=True)``) instead of once a tile in every key block (48 instructions a tile at Bq = 64).
SASS per tile (ptxas 13.5, d = 128, Bq = Bk = 64, CWG = 2, fp16, without AHEAD): the first three
items take dK/dV 1560 → 783 and dQ 1045 → 485 (d = 64: 1185 → 612, 700 → 350; partial-tile branches
counted), the last three, on a full tile's path alone, 572 → 406 and 350 → 337; the dK/dV kernel's
20 bytes of spills gone. Measured (H200, 2026-12-02, kernel-only, × torch SDPA flash backward, not
causal / causal, docs/logs/2026-12-02_wgmma_backward_lean_loop_h200.log and docs/results.md): the first three items took
0.71 / 0.65 to 0.81 / 0.86 at B1 H16 N8192 d128, 0.69 / 0.58 to 0.87 / 0.83 at B2 H16 N4096 d64,
0.74 / 0.70 to 0.89 / 0.93 at B4 H16 N1024 d64 — ahead of flash_tc causal too (1.02–1.25×), so the
default method on Hopper causal or not (``tc_methods.wgmma_bwd_is_default``); the last three 2–4 %
more. Taking Pᵀ while dPᵀ runs and issuing dV before dSᵀ (the loop above) measured mixed, alike in
two runs: not causal level, causal about 3 % faster at d = 64 and 5 % slower at d = 128 (2.89 →
3.03 ms); kept for the shorter critical path. What bounds it then (Nsight Compute, same shape, not
causal, without AHEAD): the dK/dV kernel 2.92 ms, the dQ kernel 2.47, torch's fused kernel 4.43;
issue slots 17 % busy, the tensor pipe 39 % and 34 %, 11.5 cycles between a warp's instructions
against torch's 7.7, 8 warps an SM (one block of 256 threads: 242 registers) — latency, with two
warps a scheduler to hide it: hence AHEAD (above), more independent work a warp. Not done: a
producer warp for the copies (FA3's layout), and the dQ kernel's seven-products cost.

Registers (CUDA 13.5's NVVM and ptxas, sm_90a): the dK/dV kernel holds Sᵀ, dPᵀ (Bq/2 floats
each) and dK, dV (D/2 each) a thread — without AHEAD 192 at d = 128, Bq = 64: 242 registers,
no spills (FUSED: 255 with 72 bytes of spills); 184 at d = 64, Bq = 64; Bq = 128 at d = 128
(256 floats) spills 200–900 bytes and ptxas serializes the wgmmas (C7512), so
``WgmmaBwdConfig`` refuses it. The dQ kernel: 161 registers at d = 128, Bk = 64, no spills.
With AHEAD: the dK/dV kernel 254 at d = 128 (254–255 from the H200's driver), 184 at d = 64;
the dQ kernel 189 (194–198) and 139 (122 without: two blocks an SM, so not ahead at d = 64 by
default); no spills.

How to run: ``attention_backward(do, q, k, v, o, lse, method="flash_wgmma",
config=WgmmaBwdConfig(...))`` on fp16/bf16 inputs; ``pytest tests/test_attention_wgmma_backward.py``;
on a Hopper GPU ``flashlesson bench ladder --only attention_wgmma_backward`` and
``flashlesson bench attention --tc --backward``.
"""

from functools import lru_cache

from numba import cuda, float32, uint16, uint32, uint64

from .attention import first_q_tile, kv_tiles
from .attention_tc import pack_accumulators, zeros
from .attention_tc_backward import clear_padded, ds_rows_steps, ds_transposed_steps, \
    lane_row_stats, lane_rows, padded_keys, write_rows
from .attention_wgmma import BUILT, WARPGROUP, block_reg_cap, kmajor_rows, ring_slot, row_words, \
    uniform_u32, warpgroup_of
from .hopper import SW128_ALIGN, WGMMA, WGMMA_RS_TB, WGMMA_TB, bar_sync, cp_async_mbar_arrive, \
    fence_mbarrier_init, fence_proxy_async, kmajor_desc, kmajor_index, mbar_arrive, mbar_init, \
    mbar_try_wait_parity, nmajor_desc, sem_release_add, sem_wait_geq, shared_addr, to_1024, \
    wgmma_commit_group, wgmma_fence, wgmma_fence_operand, wgmma_wait_group
from .mma import pack_bf16, pack_f16
from .sim import gpu_options
from .vector import cp_async4, cp_async_wait_all


def stage_words(D, B, KEYS, SWIZZLE=False):
    """Words of a stage: two streamed tiles of B rows (KEYS, the dK/dV kernel: + LSE_i, D_i),
    SWIZZLE: rounded up to 1024 bytes, so that every tile starts on a 1024-byte boundary."""
    words = 2 * B * D // 2 + (2 * B if KEYS else 0)
    align = SW128_ALIGN // 4                # (words)
    return -(-words // align) * align if SWIZZLE else words


def wgmma_bwd_smem_bytes(D, B, CWG, STAGES, KEYS, FUSED=False, SWIZZLE=False):
    """Dynamic shared memory of one kernel: the block's two row tiles (64·CWG × D halves each)
    and STAGES stages (stage_words); FUSED: two dS tiles (B queries × 64·CWG keys); SWIZZLE:
    1024 bytes more, to start on a 1024-byte boundary."""
    own = 2 * 64 * CWG * D // 2
    ds = 2 * B * 64 * CWG // 2 if FUSED else 0
    return 4 * (own + STAGES * stage_words(D, B, KEYS, SWIZZLE) + ds) + \
        (SW128_ALIGN if SWIZZLE else 0)


@lru_cache(maxsize=None)
def block_start(D, R, T, STAGES, PAD, SWIZZLE=False):
    """Both kernels' start, by all T threads: the block's own two row tiles (K and V, or Q and
    dO: R rows of D each, K-major, at words at0 and at0 + R·D/2; zeros past n and, PAD, for
    padded keys) copied by cp.async, waited for and published, and the ring's mbarriers made —
    FULL[s] and EMPTY[s], each counting every thread (all copy, all compute)."""
    own_rows = kmajor_rows(D, R, T, PAD, SWIZZLE)
    OWN = R * D // 2

    @cuda.jit(device=True)
    def start(x, y, smem, at0, bars, tid, bh, n, r0, kpm, b_idx):
        own_rows(x, smem, at0, tid, bh, n, r0, kpm, b_idx)
        own_rows(y, smem, at0 + OWN, tid, bh, n, r0, kpm, b_idx)
        cp_async_wait_all()                     # my pieces have landed
        fence_proxy_async()                     # … before wgmma's (async-proxy) reads
        if tid == 0:
            for s in range(STAGES):
                mbar_init(bars, s, T)           # FULL[s]: one arrival per thread
                mbar_init(bars, STAGES + s, T)  # EMPTY[s]: one per thread
            fence_mbarrier_init()
        cuda.syncthreads()                      # wait: the rows in shared memory, barriers ready
    return start


@lru_cache(maxsize=None)
def one_product(kind, D, RA, RB, SWIZZLE=False):
    """issue(x, a, b): X = A Bᵀ (64 × RB, D/16 k16 steps; A the warpgroup's 64 rows of a
    K-major tile of RA rows, B a K-major tile of RB rows, both in shared memory) as one wgmma
    group, not waited for; the caller has fenced x and the wgmmas (wgmma_fence_operand,
    wgmma_fence)."""
    mma = WGMMA[(kind, RB)]

    @cuda.jit(device=True)
    def issue(x, a, b):
        for ks in range(D // 16):
            mma(x, kmajor_desc(a, RA, ks, SWIZZLE), kmajor_desc(b, RB, ks, SWIZZLE), ks > 0)
        wgmma_commit_group()
    return issue


@lru_cache(maxsize=None)
def stage_products(kind, D, RA, RB, STAGES, STAGE, SWIZZLE=False):
    """Both kernels' first step on tile i: X = A₁ B₁ᵀ, Y = A₂ B₂ᵀ (one_product; Sᵀ = K Qiᵀ,
    dPᵀ = V dOiᵀ in the dK/dV kernel, S = Qi Kjᵀ, dP = dOi Vjᵀ in the dQ kernel) with B₁, B₂
    the two tiles of stage i % STAGES (STAGE words a stage from ``ring``, stage 0's uniform
    address), two wgmma groups, X's first, not waited for. Returns (start, both, first, second,
    stage_addr):

    start(x, y, a1, a2, ring, bars, i, ready): both, then the wait for X — X in x, Y still
    running (wgmma_wait_group(1)): where each kernel's tile begins (AHEAD: before the loop).

    both(x, y, a1, a2, ring, bars, i, ready): wait until tile i has landed (if ready: AHEAD's
    products past the last tile read a stage nobody fills and wait for nothing), then X and
    Y, not waited for (the dQ kernel's AHEAD: behind dQ, whose wait comes first).
    first(x, a1, ring, bars, i, ready), second(y, a2, ring, i): the same in two calls, so
    that the caller can wait for older groups between them (the dK/dV kernel's AHEAD).
    stage_addr(ring, s): the address of stage s (its first tile; the second 4·TW bytes on)."""
    one = one_product(kind, D, RA, RB, SWIZZLE)
    SH = RB // 2                            # accumulator floats a thread
    TW = RB * D // 2                        # words of one streamed tile

    @cuda.jit(device=True)
    def stage_addr(ring, s):
        return uint32(ring + uint32(4 * STAGE) * s)     # shared_addr(smem, stage s)

    @cuda.jit(device=True)
    def landed(ring, bars, i, ready):
        """Tile i's stage address, once its copies have landed."""
        s, ph = ring_slot(i, STAGES)
        if ready:
            mbar_try_wait_parity(bars, s, ph)   # wait: tile i has landed
        fence_proxy_async()                 # the copies (generic proxy) before wgmma
        return stage_addr(ring, s)

    @cuda.jit(device=True)
    def both(x, y, a1, a2, ring, bars, i, ready):
        b1 = landed(ring, bars, i, ready)
        wgmma_fence_operand(x, SH)
        wgmma_fence_operand(y, SH)
        wgmma_fence()                           # (x, y last read by to_a, before)
        one(x, a1, b1)                          # group: X
        one(y, a2, uint32(b1 + uint32(4 * TW)))     # group: Y

    @cuda.jit(device=True)
    def start(x, y, a1, a2, ring, bars, i, ready):
        both(x, y, a1, a2, ring, bars, i, ready)
        wgmma_wait_group(1)                     # wait: X is in x (Y still running)
        wgmma_fence_operand(x, SH)

    @cuda.jit(device=True)
    def first(x, a1, ring, bars, i, ready):
        b1 = landed(ring, bars, i, ready)
        wgmma_fence_operand(x, SH)
        wgmma_fence()
        one(x, a1, b1)                          # group: X

    @cuda.jit(device=True)
    def second(y, a2, ring, i):
        wgmma_fence_operand(y, SH)
        wgmma_fence()
        one(y, a2, uint32(stage_addr(ring, ring_slot(i, STAGES)[0]) + uint32(4 * TW)))
    return start, both, first, second, stage_addr


@lru_cache(maxsize=None)
def accumulated_product(kind, D, B, SWIZZLE=False):
    """Both kernels' second step: acc += A·B (64 × D; B/16 k16 steps) as one wgmma group, not
    waited for — A the warpgroup's fragments pa in registers (RS: Pᵀ, dSᵀ, dS as
    pack_accumulators leaves them), B a tile of B rows from shared memory read N-major (dOi,
    Qi in the dK/dV kernel, Kj in the dQ kernel)."""
    mma = WGMMA_RS_TB[(kind, D)]
    OH = D // 2

    @cuda.jit(device=True)
    def run(acc, pa, b):
        wgmma_fence_operand(acc, OH)
        wgmma_fence()                           # (pa just written)
        for ks in range(B // 16):
            mma(acc, pa[4 * ks], pa[4 * ks + 1], pa[4 * ks + 2], pa[4 * ks + 3],
                nmajor_desc(b, B, ks, SWIZZLE), True)
        wgmma_commit_group()
    return run



@lru_cache(maxsize=None)
def dq_turns(D, Bq, CWG):
    """FUSED: the part of dQ_i = dS_i K that one consumer warpgroup computes and adds, in its
    block's turn. Returns (put_ds, add_dq):

    put_ds(pa_ds, hsm, at, key, t): this thread's dSᵀ A fragments (attention_tc.
    pack_accumulators: word 4ks + j holds keys key + 8·(j & 1), queries 16ks + 8·(j >> 1) + 2t
    and + 1) into the dS tile at halves index at, K-major with the queries as rows (kmajor_index
    (query, key, Bq)): one 16-bit store a half. A warp's 32 stores of one register fall in 16
    different 4-byte words of 16 different banks, two lanes a word: conflict-free.

    add_dq(dqa, sem, dq_part, bh, q0, n_q, col0, turn, si, tid): wait until sem[si] ≥ turn (the
    first thread of the warpgroup spins, a named barrier passes the turn on), add the 64 × N
    part (N = D/CWG; rows q0 + 16w + g, + 8; columns col0 + 8j + 2t, + 1) to dqa[bh] (float32,
    one atomic add an element: red.global.add), then, after a second named barrier, sem[si]
    += 1."""
    N = D // CWG

    @cuda.jit(device=True)
    def put_ds(pa_ds, hsm, at, key, t):
        base = at + kmajor_index(2 * t, key, Bq)         # (the rest: constants, so that the
        for ks in range(Bq // 16):                       #  stores take [base + immediate])
            for j in range(4):
                word = pa_ds[4 * ks + j]
                off = (j & 1) * 8 * Bq + (2 * ks + (j >> 1)) * 64   # keys + 8, queries + 16ks
                hsm[base + off] = uint16(word & 0xFFFF)              # query 2t (+ 16ks …)
                hsm[base + off + 8] = uint16(word >> 16)             # query 2t + 1

    @cuda.jit(device=True)
    def add_dq(dqa, sem, dq_part, bh, q0, n_q, col0, turn, si, tid):
        cw = warpgroup_of(tid)
        lane = tid % 32
        row = q0 + 16 * ((tid % WARPGROUP) // 32) + lane // 4
        col = col0 + 2 * (lane % 4)
        if tid % WARPGROUP == 0:
            sem_wait_geq(sem, si, turn)         # (acquire: the earlier blocks' adds)
        bar_sync(1 + cw, WARPGROUP)             # wait: my warpgroup's turn (its first thread)
        for j in range(N // 8):
            for e in range(4):
                r = row + 8 * (e // 2)
                if r < n_q:
                    cuda.atomic.add(dqa, (bh, r, col + 8 * j + e % 2), dq_part[4 * j + e])
        bar_sync(1 + cw, WARPGROUP)             # wait: every add of my warpgroup issued
        if tid % WARPGROUP == 0:
            sem_release_add(sem, si, 1)         # (release: the next block's turn)
    return put_ds, add_dq


@lru_cache(maxsize=None)
def dq_finish(BF16):
    """FUSED: dq[w] = the pair (acc[2w], acc[2w + 1]) · scale as fp16/bf16 (flat words)."""
    pack = pack_bf16 if BF16 else pack_f16

    @cuda.jit
    def finish(acc, dq, scale):
        first = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        for w in range(first, dq.shape[0], cuda.gridDim.x * cuda.blockDim.x):
            dq[w] = pack(acc[2 * w] * scale, acc[2 * w + 1] * scale)
    return finish


@lru_cache(maxsize=None)
def wgmma_bwd_dkdv_kernel(D, Bq, CWG, STAGES, CAUSAL, PAD, BF16, FUSED=False, SWIZZLE=False,
                          AHEAD=False):
    """dK, dV (FUSED: and dQ): one block per 64·CWG keys, Q/dO tiles of Bq streamed; see the
    module menu (SWIZZLE, AHEAD: its "SWIZZLE", "AHEAD")."""
    assert D in (64, 128) and Bq in (64, 128) and CWG in (1, 2) and STAGES >= 1
    assert not FUSED or Bq == 64
    assert not (FUSED and SWIZZLE)          # (the dS tiles are stored unswizzled)
    assert not AHEAD or (STAGES >= 2 and not FUSED)     # (menu: "AHEAD")
    kind = "bf16" if BF16 else "f16"
    TW = Bq * D // 2                        # words of a Qi or dOi tile
    STAGE = stage_words(D, Bq, True, SWIZZLE)   # [Qi | dOi | LSE_i | D_i (| to 1024 bytes)]
    first_products, _, s_ahead, dp_ahead, stage_addr = stage_products(  # Sᵀ = K Qᵀ, dPᵀ = V dOᵀ
        kind, D, 64 * CWG, Bq, STAGES, STAGE, SWIZZLE)
    add_product = accumulated_product(kind, D, Bq, SWIZZLE)     # dV += Pᵀ dO, dK += dSᵀ Q
    Bk = 64 * CWG                           # keys per block
    T = WARPGROUP * CWG
    OWN = Bk * D // 2                       # words of the block's K rows (V rows follow)
    WG_ROWS = 64 * row_words(SWIZZLE)       # words from one warpgroup's 64 rows to the next
    RING = 2 * OWN                          # stage s at RING + STAGE·s
    NBARS = 2 * STAGES                      # FULL[s], then EMPTY[s]
    SH, OH = Bq // 2, D // 2                # accumulator floats per thread: Sᵀ (dPᵀ), dK (dV)
    NBQ, KC2 = Bq // 8, Bq // 16
    PA = 4 * KC2                            # words of Pᵀ (dSᵀ) as A fragments
    start = block_start(D, Bk, T, STAGES, PAD, SWIZZLE)     # (PAD: padded keys' rows zeros)
    tile_rows = kmajor_rows(D, Bq, T, False, SWIZZLE)
    to_a = pack_accumulators(KC2, 1, NBQ, BF16)
    probs, grads = ds_transposed_steps(NBQ, Bq, CAUSAL, PAD, KILL=FUSED,   # (FUSED: dS feeds
                                       LSE2=True)                          #  dQ too)
    unpad = clear_padded(D // 8, False)
    write = write_rows(D // 8, BF16)
    clear_acc = zeros(OH)
    NQ = D // CWG // 2                      # FUSED: dQ part floats per thread (64 × D/CWG)
    DSW = Bq * Bk // 2                      # FUSED: words of a dS tile (Bq queries × Bk keys)
    DS0 = RING + STAGES * STAGE             # FUSED: dS tiles 0 and 1 (tile i uses i % 2)
    mma_dq = WGMMA_TB[(kind, D // CWG)]     # FUSED: dQ_i += dS K: SS, B N-major
    put_ds, add_dq = dq_turns(D, Bq, CWG)
    STATS = -(-2 * Bq // T)                 # passes of the LSE_i, D_i copies

    @cuda.jit(device=True)
    def issue(q, do, lse2, dvec, smem, fsm, at0, bars, i, first, tid, bh, n_q, kpm):
        """Every thread: tile first + i's Qi, dOi rows and LSE_i, D_i (0 past Nq) into stage
        i % STAGES by cp.async, then its arrival on FULL (noinc, once they have landed)."""
        s, ph = ring_slot(i, STAGES)
        if i >= STAGES:                             # wait: tile i − STAGES left this stage
            mbar_try_wait_parity(bars, STAGES + s, ph ^ uint32(1))
        at = at0 + RING + STAGE * s
        q0 = (first + i) * Bq
        tile_rows(q, smem, at, tid, bh, n_q, q0, kpm, 0)
        tile_rows(do, smem, at + TW, tid, bh, n_q, q0, kpm, 0)
        for m in range(STATS):                      # LSE_i, then D_i: 4 bytes a thread
            r = tid + T * m                         # (unrolled; one pass when T ≥ 2·Bq)
            if r < 2 * Bq:
                c = r % Bq
                ok = q0 + c < n_q
                src = bh * n_q + min(q0 + c, n_q - 1)       # (in bounds; read if ok)
                if r < Bq:
                    cp_async4(fsm, at + 2 * TW + c, lse2, src, ok)
                else:
                    cp_async4(fsm, at + 2 * TW + Bq + c, dvec, src, ok)
        cp_async_mbar_arrive(bars, s)               # FULL[s]: once my copies have landed

    @cuda.jit
    def dkdv(q, k, v, do, lse2, dvec, dk, dv, dqa, sem, scale, n_q, n_k, heads, kpm):
        """q, do [BH, Nq, D/2], k, v [BH, Nk, D/2]: uint32 words of two halves; lse2 (LSE·log2e,
        +inf for −inf), dvec [BH, Nq] float32; dk, dv [BH, Nk, D/2] words; kpm uint8 [B, Nk]
        (PAD); FUSED: dqa [BH, Nq, D] float32 (zeros), sem [BH·⌈Nq/Bq⌉] int32 (zeros) — else
        placeholders."""
        bh, k0, tid, g, t, key_lo = lane_rows(Bk, CAUSAL, True)     # my keys: key_lo, + 8
        smem = cuda.shared.array(0, uint32)     # K | V | stage 0 | stage 1 … (menu)
        fsm = cuda.shared.array(0, float32)     # (the same memory as float32: LSE_i, D_i)
        hsm = cuda.shared.array(0, uint16)      # (… as halves: FUSED, the dS tiles)
        bars = cuda.shared.array(NBARS, uint64)         # FULL[0 …], EMPTY[0 …]
        b_idx = bh // heads
        offset = n_k - n_q                      # §34: query i sees key j iff j ≤ i + offset
        cw = warpgroup_of(tid)                  # my warpgroup: keys k0 + 64·cw …

        at0 = to_1024(smem) if SWIZZLE else 0   # SWIZZLE: the tiles from a 1024-byte boundary
        start(k, v, smem, at0, bars, tid, bh, n_k, k0, kpm, b_idx)  # the block's K, V; ring

        pad_lo = pad_hi = False                 # §35: a padded key gets dk = dv = 0
        if PAD:
            pad_lo, pad_hi = padded_keys(kpm, b_idx, key_lo, n_k)
        st = cuda.local.array(SH, float32)      # Sᵀ, then Pᵀ
        dpt = cuda.local.array(SH, float32)     # dPᵀ, then dSᵀ
        dk_acc = cuda.local.array(OH, float32)
        dv_acc = cuda.local.array(OH, float32)
        pa_p = cuda.local.array(PA, uint32)     # Pᵀ as A fragments
        pa_ds = cuda.local.array(PA, uint32)    # dSᵀ as A fragments
        clear_acc(dk_acc)
        clear_acc(dv_acc)
        k_addr = shared_addr(smem, at0 + WG_ROWS * cw)  # my warpgroup's 64 rows of K, V
        v_addr = shared_addr(smem, at0 + OWN + WG_ROWS * cw)
        ring = uniform_u32(shared_addr(smem, at0 + RING))  # stage 0's Qi (uniform_u32: the
                                                            #  descriptors in uniform registers)
        first = first_q_tile(CAUSAL, k0, Bq, n_q, n_k)  # (causal: earlier Q tiles see none
        n_qt = (n_q + Bq - 1) // Bq                      #  of this block's keys)
        count = max(n_qt - first, 0)
        dq_part = cuda.local.array(NQ, float32)         # FUSED: dQ_i's columns c·N … of mine
        kq_addr = shared_addr(smem, cw * (D // CWG) * Bk // 2)  # (… K read N-major from there)
        for i in range(min(STAGES - 1, count)):         # tiles 0 … STAGES − 2 before the loop
            issue(q, do, lse2, dvec, smem, fsm, at0, bars, i, first, tid, bh, n_q, kpm)
        if AHEAD:                                       # AHEAD (menu): tile 0's Sᵀ, dPᵀ
            first_products(st, dpt, k_addr, v_addr, ring, bars, 0, count > 0)  # Sᵀ in st
        for i in range(count):
            if i + STAGES - 1 < count:
                issue(q, do, lse2, dvec, smem, fsm, at0, bars, i + STAGES - 1, first, tid, bh,
                      n_q, kpm)
            if not AHEAD:                       # Sᵀ = K Qiᵀ, dPᵀ = V dOiᵀ
                first_products(st, dpt, k_addr, v_addr, ring, bars, i, True)   # Sᵀ in st
            s = ring_slot(i, STAGES)[0]
            q0 = (first + i) * Bq
            at = at0 + RING + STAGE * s
            q_addr = stage_addr(ring, s)                    # shared_addr(smem, at)
            do_addr = uint32(q_addr + uint32(4 * TW))       # shared_addr(smem, at + TW)

            probs(st, fsm, at + 2 * TW, key_lo, q0, n_q, n_k, offset, pad_lo, pad_hi, t,
                  scale)                        # Pᵀ
            to_a(st, pa_p)                      # → A fragments (16-bit pairs)

            if AHEAD:                           # dPᵀ came over the loop's back edge, and
                wgmma_wait_group(0)             # ptxas does not follow the groups' order
                wgmma_fence_operand(dpt, SH)    # across it (menu: C7514) — wait: dPᵀ in dpt
            add_product(dv_acc, pa_p, do_addr)  # group: dV += Pᵀ dOi
            if not AHEAD:                       # (dV issued under dPᵀ's products)
                wgmma_wait_group(1)             # wait: dPᵀ is in dpt (dV still running)
                wgmma_fence_operand(dpt, SH)
            grads(st, dpt, fsm, at + 2 * TW, t)     # dSᵀ = Pᵀ∘(dPᵀ − D)
            to_a(dpt, pa_ds)

            if FUSED:                           # (before the wgmmas that read pa_ds)
                ds_at = DS0 + DSW * (i % 2)     # (two dS tiles: see the menu)
                put_ds(pa_ds, hsm, 2 * ds_at, key_lo - k0, t)  # dSᵀ → dS, K-major by queries
                fence_proxy_async()             # my dS stores before wgmma's reads

            add_product(dk_acc, pa_ds, q_addr)  # group: dK += dSᵀ Qi
            if FUSED:                           # dQ_i += dS K over the block's Bk keys
                cuda.syncthreads()              # wait: every warpgroup's keys of dS stored
                wgmma_wait_group(0)             # wait: dV, dK updated (Pᵀ, dSᵀ free: fewer
                wgmma_fence_operand(dv_acc, OH)  # registers live under the dQ wgmma)
                wgmma_fence_operand(dk_acc, OH)
                ds_addr = shared_addr(smem, ds_at)
                wgmma_fence_operand(dq_part, NQ)
                wgmma_fence()
                for ks in range(Bk // 16):
                    mma_dq(dq_part, kmajor_desc(ds_addr, Bq, ks, False),
                           nmajor_desc(kq_addr, Bk, ks, False), ks > 0)
                wgmma_commit_group()
            if AHEAD:                           # the next tile's Sᵀ behind dV, dK (st free:
                s_ahead(st, k_addr, ring, bars, i + 1, i + 1 < count)   # Pᵀ is in pa_p)
                wgmma_wait_group(1)             # wait: dV, dK updated (the next Sᵀ running)
            else:
                wgmma_wait_group(0)             # wait: dV, dK (dQ_i) updated, stage s read
            wgmma_fence_operand(dv_acc, OH)
            wgmma_fence_operand(dk_acc, OH)
            mbar_arrive(bars, STAGES + s)       # EMPTY[s]: the stage may be refilled
            if AHEAD:                           # then its dPᵀ (pa_p, pa_ds free: never live
                dp_ahead(dpt, v_addr, ring, i + 1)  # with dpt's new accumulators — at d =
                wgmma_wait_group(1)             # 128 that spilled) wait: the next Sᵀ is in st
                wgmma_fence_operand(st, SH)     # (dPᵀ runs on, across the back edge)
            if FUSED:                           # my columns of dQ_i, after the key blocks
                wgmma_fence_operand(dq_part, NQ)  # left of mine (key block k0 // Bk)
                add_dq(dqa, sem, dq_part, bh, q0, n_q, cw * (D // CWG), CWG * (k0 // Bk),
                       bh * n_qt + first + i, tid)
        if AHEAD:
            wgmma_wait_group(0)                 # wait: the products past the last tile

        if PAD:                                 # a padded key: dk = dv = 0, written
            unpad(dv_acc, pad_lo, pad_hi)
            unpad(dk_acc, pad_lo, pad_hi)
        write(dv, bh, key_lo, n_k, t, dv_acc, float32(1.0))
        write(dk, bh, key_lo, n_k, t, dk_acc, scale)              # dK = scale · Σ dSᵀ Q

    BUILT[("wgmma_bwd_dkdv_kernel", D, Bq, CWG, STAGES, CAUSAL, PAD, BF16, FUSED)
          + (("SWIZZLE",) if SWIZZLE else ()) + (("AHEAD",) if AHEAD else ())] = dkdv
    return dkdv


@lru_cache(maxsize=None)
def wgmma_bwd_dq_kernel(D, Bk, CWG, STAGES, CAUSAL, PAD, BF16, SWIZZLE=False, AHEAD=False):
    """dQ: one block per 64·CWG queries, K/V tiles of Bk streamed; see the module menu
    (SWIZZLE, AHEAD: its "SWIZZLE", "AHEAD")."""
    assert D in (64, 128) and Bk in (64, 128) and CWG in (1, 2) and STAGES >= 1
    assert not AHEAD or STAGES >= 2
    kind = "bf16" if BF16 else "f16"
    TW = Bk * D // 2                        # words of a Kj or Vj tile
    STAGE = stage_words(D, Bk, False, SWIZZLE)  # [Kj | Vj]
    first_products, next_products, _, _, stage_addr = stage_products(  # S = Q Kᵀ, dP = dO Vᵀ
        kind, D, 64 * CWG, Bk, STAGES, STAGE, SWIZZLE)
    add_product = accumulated_product(kind, D, Bk, SWIZZLE)     # dQ += dS K
    Bq = 64 * CWG                           # queries per block
    T = WARPGROUP * CWG
    OWN = Bq * D // 2                       # words of the block's Q rows (dO rows follow)
    WG_ROWS = 64 * row_words(SWIZZLE)       # words from one warpgroup's 64 rows to the next
    RING = 2 * OWN
    NBARS = 2 * STAGES
    SH, OH = Bk // 2, D // 2
    NBK, KC2 = Bk // 8, Bk // 16
    PA = 4 * KC2
    start = block_start(D, Bq, T, STAGES, False, SWIZZLE)
    tile_rows = kmajor_rows(D, Bk, T, PAD, SWIZZLE)     # (PAD: padded keys' rows are zeros)
    to_a = pack_accumulators(KC2, 1, NBK, BF16)
    probs, grads = ds_rows_steps(NBK, CAUSAL, PAD)
    write = write_rows(D // 8, BF16)
    clear_acc = zeros(OH)
    # d = 64: two blocks an SM (their shared memory fits) only at ≤ 65536 / 2T registers a
    # thread (attention_wgmma.block_reg_cap of both blocks' threads). ptxas gives the causal
    # kernel 132 without a cap (its mask tests on their own path, ds_rows_steps), 125 with it
    # and no spills (CUDA 13.0, sm_90a). Not with AHEAD (139: one block, menu), nor at d = 128
    # (one block: shared memory)
    two_blocks = gpu_options(max_registers=block_reg_cap(2 * T)) if D == 64 and not AHEAD else {}

    @cuda.jit(device=True)
    def issue(k, v, smem, at0, bars, i, tid, bh, n_k, kpm, b_idx):
        """Every thread: tile i's Kj, Vj rows into stage i % STAGES (zeros past Nk and for
        padded keys), then its arrival on FULL."""
        s, ph = ring_slot(i, STAGES)
        if i >= STAGES:                             # wait: tile i − STAGES left this stage
            mbar_try_wait_parity(bars, STAGES + s, ph ^ uint32(1))
        at = at0 + RING + STAGE * s
        tile_rows(k, smem, at, tid, bh, n_k, i * Bk, kpm, b_idx)
        tile_rows(v, smem, at + TW, tid, bh, n_k, i * Bk, kpm, b_idx)
        cp_async_mbar_arrive(bars, s)               # FULL[s]: once my copies have landed

    @cuda.jit(**two_blocks)
    def dq_kernel(q, k, v, do, lse2, dvec, dq, scale, n_q, n_k, heads, kpm):
        """As the dK/dV kernel's arguments; dq [BH, Nq, D/2] words."""
        bh, q0, tid, g, t, r_lo = lane_rows(Bq, CAUSAL, False)    # my rows: r_lo, r_lo + 8
        smem = cuda.shared.array(0, uint32)     # Q | dO | stage 0 | stage 1 … (menu)
        bars = cuda.shared.array(NBARS, uint64)
        b_idx = bh // heads
        offset = n_k - n_q
        cw = warpgroup_of(tid)

        at0 = to_1024(smem) if SWIZZLE else 0   # SWIZZLE: as the dK/dV kernel
        start(q, do, smem, at0, bars, tid, bh, n_q, q0, kpm, b_idx)     # Q, dO rows; ring

        s_acc = cuda.local.array(SH, float32)   # S, then P
        dp = cuda.local.array(SH, float32)      # dP, then dS
        dq_acc = cuda.local.array(OH, float32)
        pa = cuda.local.array(PA, uint32)       # dS as A fragments
        stats = cuda.local.array(4, float32)    # LSE·log2e and D of my two rows
        lane_row_stats(lse2, dvec, bh, r_lo, n_q, stats, False, True)  # (NAT, LSE2)
        clear_acc(dq_acc)
        q_addr = shared_addr(smem, at0 + WG_ROWS * cw)  # my warpgroup's 64 rows of Q, dO
        do_addr = shared_addr(smem, at0 + OWN + WG_ROWS * cw)
        ring = uniform_u32(shared_addr(smem, at0 + RING))  # stage 0's Kj (as the dK/dV kernel)

        n_tiles = kv_tiles(CAUSAL, q0, Bq, Bk, n_q, n_k)
        for i in range(min(STAGES - 1, n_tiles)):
            issue(k, v, smem, at0, bars, i, tid, bh, n_k, kpm, b_idx)
        if AHEAD:                                       # AHEAD (menu): tile 0's S, dP
            first_products(s_acc, dp, q_addr, do_addr, ring, bars, 0, n_tiles > 0)  # S in s_acc
        for j in range(n_tiles):
            if j + STAGES - 1 < n_tiles:
                issue(k, v, smem, at0, bars, j + STAGES - 1, tid, bh, n_k, kpm, b_idx)
            if not AHEAD:                       # S = Qi Kjᵀ, dP = dOi Vjᵀ
                first_products(s_acc, dp, q_addr, do_addr, ring, bars, j, True)  # S in s_acc
            s = ring_slot(j, STAGES)[0]
            k_addr = stage_addr(ring, s)        # shared_addr(smem, at0 + RING + STAGE·s)
            probs(s_acc, stats, r_lo, j * Bk, n_k, offset, kpm, b_idx, t, scale)      # P
            wgmma_wait_group(0)                 # wait: dP is in dp (AHEAD: dP came over the
            wgmma_fence_operand(dp, SH)         #  back edge, and nothing was issued since)
            grads(s_acc, dp, stats, r_lo, j * Bk, n_k, offset, kpm, b_idx, t)  # dS = P∘(dP − D)
            to_a(dp, pa)                        # dS → A fragments

            add_product(dq_acc, pa, k_addr)     # group: dQ += dS Kj
            if AHEAD:                           # the next tile's S, dP behind dQ (s_acc, dp
                next_products(s_acc, dp, q_addr, do_addr, ring, bars, j + 1,   # free: dS is
                               j + 1 < n_tiles)                               #  in pa)
                wgmma_wait_group(2)             # wait: dQ updated (the next S, dP running)
            else:
                wgmma_wait_group(0)             # wait: dQ updated, stage s read
            wgmma_fence_operand(dq_acc, OH)
            mbar_arrive(bars, STAGES + s)       # EMPTY[s]: the stage may be refilled
            if AHEAD:
                wgmma_wait_group(1)             # wait: the next S is in s_acc (dP runs on,
                wgmma_fence_operand(s_acc, SH)  #  across the back edge)
        if AHEAD:
            wgmma_wait_group(0)                 # wait: the products past the last tile

        write(dq, bh, r_lo, n_q, t, dq_acc, scale)        # dQ = scale · Σ dS K

    BUILT[("wgmma_bwd_dq_kernel", D, Bk, CWG, STAGES, CAUSAL, PAD, BF16)
          + (("SWIZZLE",) if SWIZZLE else ()) + (("AHEAD",) if AHEAD else ())] = dq_kernel
    return dq_kernel
