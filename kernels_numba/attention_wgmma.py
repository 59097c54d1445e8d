"""§42–43 on Hopper — FlashAttention-3's forward, step by step: both products on ``wgmma``, K/V
tiles in a ring of shared-memory stages handed over by mbarriers, and (§43) a producer
warpgroup that only copies.

Menu
| kernel                                          | what                                        |
|-------------------------------------------------|---------------------------------------------|
| ``flash_wgmma_kernel(D, Bc, CWG, STAGES=1,      | §37's loop with S = Q Kᵀ as wgmma (A = Q,   |
|   PRODUCER=False, CAUSAL, PAD, BF16, FOLD)``    | B = K, both from shared memory) and         |
|                                                 | O += P V as wgmma with P from registers     |
|                                                 | (RS) and V N-major (imm-trans-b 1); no      |
|                                                 | overlap: load tile j, wait, compute         |
| ``… STAGES=2``                                  | §42: tile j + 1's copies in flight during   |
|                                                 | tile j's products (every thread copies)     |
| ``… STAGES=2, PRODUCER=True``                   | §43: one more warpgroup that only copies    |
|                                                 | (setmaxnreg.dec 56), consumers compute only |
|                                                 | (setmaxnreg.inc 224 / 240 for CWG 2 / 1)    |
| ``… CWG=3, PRODUCER=True``                      | FA3's block at d = 64: Br = 192 rows, 3     |
|                                                 | consumer warpgroups and the producer, 512   |
|                                                 | threads (max_registers 128; setmaxnreg.dec  |
|                                                 | 32, inc 160); no producer: 384 threads,     |
|                                                 | max_registers 168                           |
| ``… Bc=176, STAGES=2, PRODUCER=True``           | FA3's d = 128 tile: 176 keys a K/V tile (S  |
|                                                 | by m64n176k16), 2 stages to fit 227 KB;     |
|                                                 | Bc = 96 … 192 up to ``widest_bc`` (below)   |
| ``… STAGES=3, PRODUCER=True, OVERLAP=True``     | FA3's intra-warpgroup pipelining (its       |
|                                                 | Algorithm 2): tile j's S = Q Kᵀ and tile    |
|                                                 | j − 1's P·V issued together, the softmax of |
|                                                 | S_j while P·V runs (STAGES ≥ 2; 3 advised)  |
| ``… CWG=2 or 3, PINGPONG=True``                 | FA3's inter-warpgroup ping-pong: the        |
|                                                 | consumer warpgroups take turns, round-robin |
|                                                 | on named barriers, to issue their wgmmas    |
|                                                 | (S; with OVERLAP, S and P·V), so one        |
|                                                 | warpgroup's softmax runs while another's    |
|                                                 | products do (CWG ≥ 2; with or without       |
|                                                 | OVERLAP)                                    |
| ``… SWIZZLE=True``                              | Q, K, V tiles in the 128-byte swizzle       |
|                                                 | (hopper.sw128_index; V read MN-major): a    |
|                                                 | quarter-warp's copies one 128-byte line on  |
|                                                 | both sides (below); with STAGES=2 the       |
|                                                 | default on the GPU (1.17–1.57× unswizzled)  |
| ``… FOLD=True`` (scale > 0; False otherwise)    | scale·log2e folded into the softmax: the    |
|                                                 | row max of raw S times it, P = 2^(S·c − m)  |
|                                                 | one FFMA (attention_tc.fold_scale); False:  |
|                                                 | S·c first, entry by entry                   |

Ladder (lesson tier to fast tier): from the lesson kernel to this file, step by step, at B1 H16
N8192 d128 float16 unless a step says otherwise; TFLOP/s = 4·B·H·N²·d / time (half when causal);
kernel-only CUDA-event medians; "× lesson" = the lesson kernel's time / the step's on the same
inputs. ``flashlesson bench ladder --only attention_wgmma`` checks and times every step with a timed
call, ``--write`` puts its numbers here; a step without one is historical (no longer separable in
the code) and keeps the TFLOP/s recorded then.
| step | what changed                                 | measured                     | timed call                     |
|------|----------------------------------------------|------------------------------|--------------------------------|
| 0    | the lesson kernel of §37                     | H200, 2026-12-02: 99.4 ms,   | method='flash_tc',             |
|      | (``lesson/tensor_core.py``), as in           | 5.53 TFLOP/s                 | tier='lesson'                  |
|      | attention_tc's ladder                        |                              |                                |
| 1    | the mma.sync kernel (``attention_tc.py``,    | H200, 2026-12-02: 2.02 ms,   | method='flash_tc'              |
|      | its default): where this file starts         | 272 TFLOP/s, 49.09× lesson   |                                |
| 2    | both products on wgmma (S: Q, K from shared  | H200, 2026-12-02: 2.66 ms,   | method='flash_wgmma',          |
|      | memory; P·V: P in registers, V N-major), 2   | 207 TFLOP/s, 37.34× lesson   | config=WgmmaConfig(Bc=128,     |
|      | consumer warpgroups, Bc = 128, K/V through   |                              | CWG=2, STAGES=1,               |
|      | one stage on mbarriers: load, wait, compute  |                              | PRODUCER=False, OVERLAP=False, |
|      | (STAGES = 1)                                 |                              | PINGPONG=False, SWIZZLE=False) |
| 3    | §42: two stages, the next tile's cp.async    | H200, 2026-12-02: 2.16 ms,   | method='flash_wgmma',          |
|      | copies in flight during this tile's wgmmas   | 255 TFLOP/s, 46.10× lesson   | config=WgmmaConfig(Bc=128,     |
|      | (every thread copies)                        |                              | CWG=2, STAGES=2,               |
|      |                                              |                              | PRODUCER=False, OVERLAP=False, |
|      |                                              |                              | PINGPONG=False, SWIZZLE=False) |
| 4    | §43: a producer warpgroup that only copies   | H200, 2026-12-02: 1.76 ms,   | method='flash_wgmma',          |
|      | (setmaxnreg: 56 registers for it, 224 for    | 312 TFLOP/s, 56.38× lesson   | config=WgmmaConfig(Bc=128,     |
|      | the consumers), consumers that only compute  |                              | CWG=2, STAGES=2,               |
|      |                                              |                              | PRODUCER=True, OVERLAP=False,  |
|      |                                              |                              | PINGPONG=False, SWIZZLE=False) |
| 5    | three stages in the ring (``WgmmaConfig()``; | H200, 2026-12-02: 1.7 ms,    | method='flash_wgmma',          |
|      | until the swizzle the default, and the       | 323 TFLOP/s, 58.37× lesson   | config=WgmmaConfig(Bc=128,     |
|      | default method for fp16/bf16 on Hopper at d  |                              | CWG=2, STAGES=3,               |
|      | = 128: 1.10× SDPA flash causal, 0.88× not)   |                              | PRODUCER=True, OVERLAP=False,  |
|      |                                              |                              | PINGPONG=False, SWIZZLE=False) |
| 6    | the 128-byte swizzle on the Q, K and V tiles | H200, 2026-12-02: 1.04 ms,   | method='flash_wgmma',          |
|      | (a quarter-warp's 16-byte copies one         | 527 TFLOP/s, 95.19× lesson   | config=WgmmaConfig(Bc=128,     |
|      | 128-byte line in global and in shared        |                              | CWG=2, STAGES=2,               |
|      | memory, against the L2 tag requests that     |                              | PRODUCER=True, OVERLAP=False,  |
|      | bound step 5; V read MN-major), with it two  |                              | PINGPONG=False, SWIZZLE=True)  |
|      | stages as fast as three: the default         |                              |                                |
|      | (``tc_methods.default_wgmma_config``), and   |                              |                                |
|      | the default method for fp16/bf16 on Hopper   |                              |                                |
|      | at d = 64 and 128                            |                              |                                |

The loop (per consumer warpgroup of 64 query rows; CWG = 1, 2 or 3 of them, Br = 64·CWG)::

    wait FULL[s]                     ← K_j, V_j have landed (mbarrier phase j // STAGES)
    S = Qi Kjᵀ                       ← wgmma m64n{Bc}k16, D/16 steps, A = Q, B = K tiles (SS)
    mask S                           ← CUDA cores, as flash_tc (attention_tc.mask_scores_tc)
    m, l, acc = online softmax       ← attention_tc.online_softmax_tc: the wgmma accumulator of a
                                       warp is mma.sync's m16n8 C fragment repeated, so flash_tc's
                                       quad-shuffle softmax runs on it unchanged
    P → A fragments (registers)      ← attention_tc.pack_accumulators: 2 column blocks = 1 k16
    acc += P Vj                      ← wgmma m64n{D}k16, Bc/16 steps, A = P (RS), B = V N-major
    arrive EMPTY[s]                  ← the stage may be refilled
    O = acc / l;  LSE = m·ln2 + ln l

OVERLAP (FlashAttention-3's "2-stage pipelining"): the tensor cores run P_{j−1}·V_{j−1} while the
CUDA cores run the softmax of S_j. Tile 0's S is computed and its softmax run before the loop;
then for j = 1 … n − 1::

    wait_group 0                     ← acc += P_{j−2} V_{j−2} done (nothing pending at j = 1)
    arrive EMPTY[tile j − 2]         ← its stage may be refilled (no producer: copy j − 2 + STAGES)
    acc *= correction_{j−1}          ← the rescale the softmax of S_{j−1} deferred (ml[4], ml[5])
    P_{j−1} → A fragments
    wait FULL[tile j]
    S = Qi Kjᵀ          (issue, commit)   ← group 1
    acc += P_{j−1} V_{j−1} (issue, commit) ← group 2: A = P_{j−1} in registers, read async
    wait_group 1                     ← S is in sacc; P·V still running
    mask, online softmax             ← m, l, P_j in sacc; correction_j kept, acc not touched
                                        (it is an in-flight wgmma's accumulator)

and after it the last rescale, P_{n−1}·V_{n−1} and its arrive. Registers: S (Bc/2 floats), P as A
fragments (Bc/4 words) and acc (D/2) are all live during the softmax, as they are at the
non-overlapped loop's packing step, so no second S buffer is needed (d = 128, Bc = 128: the
consumers use 205 of their 224 registers, 216 with causal, padding and bf16; no spills; ptxas
13.5). The wait for P·V sits at the top of the loop on purpose: placed after the softmax in the
same basic block, ptxas hoists it above the softmax (WARPGROUP.DEPBAR.LE gsb0, 0x0 before the
MUFU.EX2s in the SASS) and nothing overlaps. A stage is held one tile longer than without
OVERLAP (until tile j + 1's loop top), so with STAGES = 2 the copy of tile j starts only when
tile j's wait does: use 3.

Measured (H200, 2026-12-01, kernel-only, docs/logs/gpu_wgmma_overlap_h200.log; correct: its
GPU tests pass): slower, so opt-in and not a ladder step — 0.87× and 0.90× the unswizzled
three-stage block at B2 H16 N4096 d64 (non-causal, causal), 0.96× and 0.96× at B1 H16 N8192 d128,
with STAGES = 3 (STAGES = 2: 0.58–0.64×; Bc = 64: 0.74–0.87×). With two consumer
warpgroups an SM already runs one warpgroup's softmax while the other's products run; OVERLAP
adds its own waits and the deferred rescale, and holds each stage one tile longer.

PINGPONG (FlashAttention-3's inter-warpgroup overlap, its §3.1): the consumer warpgroups issue
their wgmmas in turns, round-robin, so that their softmaxes fall in between each other's
products rather than all at once. Turn of warpgroup c: named barrier TURN + c (id 1 + c; 0 is
syncthreads', the producer touches none), count 256 — c's own 128 threads in ``bar_sync``
and the 128 of the warpgroup before it, whose ``bar_arrive`` passes the turn on::

    wait FULL[tile]                  ← the data first: a warpgroup never waits for its turn
                                       while the others wait for its copies or its release
    bar_sync(TURN + c)               ← my turn
    issue (commit)                   ← S; OVERLAP: S_j and P_{j−1}·V_{j−1}
    bar_arrive(TURN + (c + 1) % CWG) ← the next warpgroup's turn; then wait_group as before

Warpgroup 0 takes the first turn by its own ``bar_arrive(TURN)`` before the loop. Turns a
warpgroup: n_tiles without OVERLAP (each tile's S); n_tiles + 1 with it (tile 0's S, the
loop's S_j + P_{j−1}·V_{j−1} for j = 1 … n − 1, the last P·V). Every warpgroup runs the same
tiles, so each barrier's arrivals and syncs match — but for the last turn of the rotation
(warpgroup CWG − 1's last), which would pass to nobody: it is not passed on, and a block with
no key tile takes no turn, so no arrival is left pending when the block exits. No deadlock:
the turns are totally ordered, (turn, c) in order, and every wait a warpgroup makes before
its turn in tile j (FULL of tile j; without a producer, EMPTY of an earlier tile, before its
copies) needs only what the others did in earlier tiles, which they did before taking their
own earlier turns; while it waits for its turn it holds nothing another warpgroup needs (its
EMPTY arrivals and copies of earlier tiles are made). A turn cannot be passed twice to one
barrier before it is taken: passing again needs the whole rotation, which goes through the
warpgroup that takes it. (FA3 without intra-warpgroup overlap holds the turn from the P·V of
tile j − 1 to the S of tile j; here it is the S alone: the copies and EMPTY arrivals of the
non-producer ring sit between those two, and a turn held across them would deadlock.)
Registers (ptxas 13.5, the highest register the SASS names, nvdisasm; without PINGPONG in
brackets): d = 128, Bc = 128, CWG = 2, STAGES = 3, a producer — 187 of 224 (187), causal 191
(185), OVERLAP 198 (198), OVERLAP causal 199 (196), with causal, PAD and bf16 208 (211) and
OVERLAP 218 (216); d = 64, Bc = 128, CWG = 3 — 153 of 160 (153), OVERLAP 157 (157); no spills
but where CWG = 3 with a key padding mask spills (56 bytes; OVERLAP 8). The
simulator counts each barrier's arrivals: a turn never passed on fails there (named barrier …
never fills), where the GPU would hang. Measured (H200, 2026-12-01, kernel-only, × the
unswizzled block without turns in the same run, non-causal / causal,
docs/results.md; its GPU tests pass): no gain, so opt-in — d = 128
1.00 / 1.00, with OVERLAP 0.97 / 0.97; d = 64 (CWG = 3) 0.99 / 0.95–0.97, with OVERLAP
0.94–0.98 / 1.01; on the wide tiles as without turns (not profiled; a likely cause: the
warpgroups fall out of step on their own, so the turns add waits and no overlap).

Who holds what. A thread of consumer warpgroup c (warp w of it, lane 4g + t) owns rows
q0 + 64c + 16w + g and + 8, columns 8j + 2t, + 1 of S (Bc/2 floats) and of acc (D/2 floats).

Shared memory (dynamic, ``wgmma_smem_bytes``), without SWIZZLE in hopper.py's no-swizzle core
matrices (SWIZZLE, the GPU default: below)::

    Q tile   Br × D, K-major (kmajor_index(r, k, Br)): LBO = 16·Br B, SBO = 128 B; warpgroup c's
             rows start at element 512·c (64 rows = 8 row blocks of 64 halves)
    stage s  K tile Bc × D, K-major (kmajor_index(key, k, Bc)): LBO = 16·Bc B, SBO = 128 B
             V tile Bc × D, N-major (mnmajor_index(key, n, D)): LBO = 16·D B, SBO = 128 B
    bars     FULL[s] (count: the copying threads), EMPTY[s] (count: the consumer threads)

Each 16-byte piece of a row of Q, K or V (8 consecutive d of one row) is one 16-byte row of a
core matrix in both layouts, so every copy is one ``cp.async`` of 16 bytes (vector.cp_async16),
zero-filled (src-size 0, no global read) for keys past Nk and, PAD, padded keys; the copying
thread then issues ``cp_async_mbar_arrive`` on FULL[s] (noinc: one of FULL's count, triggered
when its copies have landed). Consumers wait on FULL[s], then ``fence.proxy.async`` (the copies
are generic-proxy writes, wgmma reads through the async proxy), and arrive on EMPTY[s] once
their wgmmas reading the stage are waited for.

Tile j uses stage j % STAGES; FULL[s]'s phase n is tile n·STAGES + s, so tile j waits for
parity (j // STAGES) & 1; the copier of tile i ≥ STAGES first waits on EMPTY[s] for parity
(i // STAGES − 1) & 1 (tile i − STAGES consumed). Without a producer every thread copies:
before its products of tile j it issues tile j + STAGES − 1's copies (STAGES = 1: tile j's
own — load, wait, compute; STAGES = 2: the next tile's, in flight during this one's wgmmas,
§42). With PRODUCER, warpgroup 0 runs the copy loop alone, up to STAGES tiles ahead (§43);
the consumers never copy and need no barrier between themselves (the mbarriers are the only
hand-off; the named barriers of PINGPONG only order their turns); producer threads wait for
their last copies before exiting. Masking, causal tiles and the epilogue are flash_tc's
(bottom-right causal, padded keys zeros on chip, a row with no key: O = 0, LSE = −inf).

Wide K/V tiles (Bc = 96, 160, 176, 192; FA3's d = 128 forward: Br = 128, Bc = 176, 2 stages).
Only S = Q Kᵀ changes instruction (m64n{Bc}k16: any multiple of 8 is a wgmma N); P·V takes
Bc/16 k16 steps, and the mask, softmax, packing and copies loop over Bc/8 column blocks as
before. Shared memory, Q (2·Br·D bytes) and STAGES × K, V (4·Bc·D bytes): at d = 128,
Br = 128, Bc = 176 and 192 fit in the H200's 232,448 bytes with 2 stages (212,992 and 229,376),
not 3. Registers: a consumer holds S (Bc/2 floats), P (Bc/4 words) and acc (D/2 floats); ptxas
13.5 with a producer, the consumers' share of the SASS read with nvdisasm: d = 128, CWG = 2,
Bc = 176 uses 221 of 224, no spills (causal, PAD, bf16 alike), Bc = 160 208–213; Bc = 192
spills 0–24 bytes (0–9 local loads and stores a tile, cached in L1); with OVERLAP 176 spills
48–64 bytes (11–19 a tile) and 192 is refused (136–184). d = 64: CWG = 2 takes Bc = 192
without spills (200–202 of 224, 212–217 with OVERLAP); CWG = 3 spills 0–8 bytes at Bc = 160,
24–32 at 176 (1–10 local accesses a tile), 192 is refused (80–144), and with OVERLAP past
128. CWG = 1 (240): 192, 40–48 bytes with OVERLAP at d = 128. ``widest_bc`` holds these
limits (``WgmmaConfig.check`` refuses wider); the PAD mask reads its byte in the entry's one
test (``mask_scores_tc(…, CLAMPED=True)``: in a branch of its own LLVM leaves the mask loop
rolled at Bc = 192 and S goes to local memory). Measured (H200, 2026-12-01, kernel-only,
× each head dim's unswizzled default block in the same run, non-causal / causal; docs/logs/
docs/results.md; correct: their GPU tests pass): none is faster, so opt-in — d = 128
Bc = 176 0.99 / 0.95, 192 0.99 / 0.97, 176 with OVERLAP 0.64 / 0.60 (its spills); d = 64
CWG = 3 Bc = 176 0.94–0.98 / 0.84–0.91, CWG = 2 Bc = 192 0.74–0.79 / 0.79–0.86.

Limits: fp16/bf16, d = D = 64 or 128 exactly (other d: method 'flash_tc'); Bc: BC_WIDTHS; sm_90a
(wgmma, setmaxnreg, mbarrier); every consumer warpgroup runs every tile of the block (wgmma is
warpgroup-collective; PINGPONG's turns count on it too); OVERLAP needs STAGES ≥ 2, PINGPONG CWG
≥ 2. CWG = 3 (ptxas 13.5, SASS read with nvdisasm): a consumer uses 153 of its 160 registers at
d = 64, Bc = 128 (157 with OVERLAP), 106 at Bc = 64, 141 at d = 128, Bc = 64, no spills; d = 128
with Bc = 128 is refused (about 190 needed); with a key padding mask at d = 64, Bc = 128 the
consumers spill 0–8 bytes with the CLAMPED mask (8–88, OVERLAP 152–176, with the test in a
branch of its own). Without SWIZZLE the tensor core reads core matrices of 128 contiguous bytes,
conflict-free, and a warp's cp.async writes are 4 runs of 128 bytes (``piece_of``), which read
half lines from L2 — 64 bytes of 8 rows: the bound SWIZZLE lifts (below). Not tuned: no TMA (the
producer issues cp.async); without OVERLAP one wgmma group is waited for at once; with it, K and
V of a tile share one EMPTY barrier (FA3 releases K after S, V after P·V), so a stage is held
until P·V is done. The simulator runs it at tiny shapes (one block); it holds each wgmma
accumulator back (NaN) until the wait_group that retires its group, so an accumulator read or
written too early fails there, but it reads shared memory when the wgmma is issued: a stage
released too early shows on the GPU only.

Why the swizzle (Nsight Compute, H200, 2026-12-01, B1 H16 N8192 d128 not causal, the
unswizzled three-stage block against torch SDPA's flash kernel on the same inputs,
docs/results.md): 1.71 ms and 1.54 ms; issue slots busy 34 % and 44 %; the tensor pipe 34 % and
55 %; L2 throughput 88 % and 25 % for the same K/V bytes (L2 hit rate 98.5 % and 96 %; DRAM
1.6 % and 1.9 %); L2's tag requests at 88 %, 240 M requests for 241 M sectors, 1.76× the K/V
bytes read (docs/logs/2026-12-01_ncu_l2_breakdown_h200.log). Each 16-byte copy goes to L2 alone, as a
whole sector, and unswizzled a quarter-warp's 8 copies are one 128-byte line on one side only:
in shared memory unpadded, in global memory padded. (16 bytes of padding after each 16-byte
chunk column, LBO = 16·(rows + 1), so that a warp copies whole 128-byte lines, keeps L2 at
90 % and is 4 % slower, 1.79 ms: the core matrices then sit off 128-byte boundaries.) The
128-byte swizzle keeps both sides in one line: a row's 8 chunks, permuted, in one line of
shared memory (SWIZZLE_128B: K-major for Q and K, MN-major for V; the descriptors:
docs/hopper_sw128.md) — ladder step 6.

SWIZZLE (``WgmmaConfig(SWIZZLE=True)``; with STAGES = 2 the GPU default, ``tc_methods.
default_wgmma_config``): every tile, Q, K and V alike, lies as hopper.sw128_index puts it:
64-column halves one after the other, a row's 64 columns in one 128-byte line, its 16-byte chunk j
at j ^ (row % 8); the tiles start on a 1024-byte boundary (``at0``, hopper.to_1024: the swizzle
works on address bits; 1024 bytes more shared memory). The copies go row by row (``piece_order(D,
True)``, which kmajor_rows and copy_tile share): 8 lanes take one row's 128 bytes of a half, one
line of global memory, into one line of shared memory. Q and K are read K-major
(hopper.kmajor_desc: SBO = 1024, the k16 step 32 bytes into a half, the next half 128·rows on); V
is read MN-major (hopper.nmajor_desc: SBO = 1024 for 8 keys, LBO = 128·Bc for the next 64 columns,
the k16 step 2048 bytes). The descriptors come from the PTX ISA and four public implementations
(``docs/hopper_sw128.md``); ``tests/test_hopper.py::test_wgmma_b_mn_major_128b_swizzle`` and
``tests/test_attention_tc.py -k wgmma_swizzle`` passed on the H200 (2026-12-02), so the hardware
reads them so. ptxas 13.5: the consumers keep 168 registers (d = 128) and 128 (d = 64, CWG = 3) and
spill nothing, except 8 bytes with OVERLAP, causal, PAD and bf16 at d = 64. The descriptors are
built once a k16 loop (hopper.desc_step), and Q's and the stage's addresses come through
uniform_u32 and ring_slot (the descriptors in uniform registers): the d = 128 loop with two stages
is 673 SASS instructions (717 with per-thread addresses; the time the same within run-to-run
spread, 1.47/1.78× against 1.45/1.79× SDPA flash at d = 128, not causal/causal, H200, 2026-12-02).
Measured (H200, 2026-12-02, kernel-only, ``scripts/bench_hopper.py --swizzle``,
docs/logs/2026-12-02_swizzle_forward_h200.log and 2026-12-02_swizzle_default_calls_h200.log, two runs): 1.17–1.57× the
unswizzled block with three stages, at B4 H16 N1024 d64, B2 H16 N4096 d64 and B1 H16 N8192 d128,
causal and not (the larger d, the larger the gain); with the swizzle three stages ran level with
two (0.97–1.01×) and two take less shared memory, so two is the default. With the swizzle (the same
command and day) the schedules FA3 adds: OVERLAP 0.95–1.03× the default, PINGPONG 0.99–1.02×, both
1.00–1.03×, the wide d = 128 tile (Bc = 176) 0.94–0.96× — still opt-in: gains within what two runs
of one configuration differ by.

How to run: ``attention(q16, k16, v16, method="flash_wgmma", config=WgmmaConfig(...))``
(``WgmmaConfig(OVERLAP=True)``: the pipelined loop; ``PINGPONG=True``: the turns),
``pytest tests/test_attention_tc.py -k wgmma``; on a Hopper GPU ``flashlesson bench ladder
--only attention_wgmma`` and ``python3 scripts/bench_hopper.py`` (``--overlap``: the OVERLAP
configs timed beside the default; ``--cwg3``: the CWG = 3 configs at d = 64; ``--wide``: the
wide tiles; ``--pingpong``: the PINGPONG configs at both head dims; ``--swizzle --tc``: the
default beside the unswizzled block and the schedules with the swizzle; ``--cudnn``: torch's
cuDNN backend too).
"""

from functools import lru_cache

from numba import cuda, float32, int32, uint32, uint64

from .attention import block_tile, kv_tiles
from .attention_tc import LOG2E, finish_rows, fold_scale, head_io, mask_scores_tc, \
    online_softmax_tc, pack_accumulators, rescale_tc, store_words, zeros
from .hopper import SW128_ALIGN, SWIZZLE_NONE, WGMMA, WGMMA_RS_TB, bar_arrive, bar_sync, \
    cp_async_mbar_arrive, fence_mbarrier_init, fence_proxy_async, kmajor_desc, mbar_arrive, \
    mbar_init, mbar_try_wait_parity, nmajor_desc, setmaxnreg_dec, setmaxnreg_inc, shared_addr, \
    sw128_index, to_1024, wgmma_commit_group, wgmma_desc, wgmma_fence, wgmma_fence_operand, \
    wgmma_wait_group
from .mma import pack_bf16, pack_f16
from .reductions import NEG_INF, ZERO
from .sim import gpu_options
from .vector import cp_async16, cp_async_wait_all

WARPGROUP = 128
SM_REGS = 65536             # registers of an SM: what one block's threads share at most
TURN = 1                    # PINGPONG: named barrier TURN + c is consumer warpgroup c's turn to
TURN_THREADS = 2 * WARPGROUP    # issue its wgmmas (ids 1 … CWG; 0 is cuda.syncthreads()'s):
                                # c's bar_sync (128 threads) and the arrival that passes the
                                # turn on (128: the warpgroup before it in the rotation)
BUILT = {}                  # (factory, *arguments) → kernel, for resource reports
BC_WIDTHS = (64, 96, 128, 160, 176, 192)   # Bc: wgmma N of S = Q Kᵀ and k16 steps of P·V


@cuda.jit(device=True)
def warpgroup_of(tid):
    """tid // 128, taken from lane 0 by a shuffle (as CUTLASS's canonical_warp_group_idx): the
    same value, but ptxas then knows it is the same in the whole warp and keeps what is built
    from it — a warpgroup's tile addresses and wgmma descriptors — in uniform registers, where
    wgmma reads its descriptors (attention_wgmma_backward: no R2UR per descriptor)."""
    return cuda.shfl_sync(0xFFFFFFFF, tid // WARPGROUP, 0)


@cuda.jit(device=True)
def uniform_u32(x):
    """x, a 32-bit value the same in every lane (a shared-window address), taken from lane 0 by
    a shuffle, as warpgroup_of: ptxas then keeps it and what is built from it — a stage's
    wgmma descriptors — in uniform registers (attention_wgmma_backward: a stage's descriptors
    were rebuilt in the vector registers, about 7 instructions a wgmma)."""
    return uint32(cuda.shfl_sync(0xFFFFFFFF, int32(x), 0))


@cuda.jit(device=True)
def ring_slot(i, STAGES):
    """Use i of a ring of STAGES stages: (its stage i % STAGES, the parity of its phase
    (i // STAGES) & 1), in 32-bit unsigned arithmetic (i ≥ 0): Numba's int64 signed modulo and
    division cost about 20 uniform instructions a tile, this a handful."""
    u = uint32(i)
    return u % uint32(STAGES), (u // uint32(STAGES)) & uint32(1)


def producer_regs(CWG):
    """setmaxnreg.dec of the producer warpgroup: ptxas allocates the code after it within this
    (d = 128, CWG = 2: 40 gave 40 bytes of spills, 56 none). CWG = 3: 32, FA3's figure, so
    that the consumers can have 160 (the copy loop fits in it: copy_tile; 0 bytes of spills
    at d = 64 and 128, ptxas 13.5)."""
    return 32 if CWG == 3 else 56


def block_reg_cap(T):
    """max_registers of a block of T threads (a multiple of 8, at most 255): an SM's 65536
    registers are four sub-partitions' 16384, and a block's warps are dealt out among the
    four, so the sub-partition that gets ⌈warps / 4⌉ of them must hold their registers: 255
    for 5 warps (one consumer warpgroup and a producer warp), 168 for 9 (at 224, which 65536
    / 288 allows, the H200 refused the launch with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
    attention_wgmma_tf32's menu), 128 a thread for two blocks of 256 (T = 512:
    attention_wgmma_backward's d = 64 dQ kernel). reg_cap below is the same rule for whole
    warpgroups with setmaxnreg's condition added."""
    per_lane = SM_REGS // (WARPGROUP * -(-T // WARPGROUP))
    return min(255, per_lane // 8 * 8)


def reg_cap(WGS):
    """max_registers of a block of WGS warpgroups (the producer's included): the whole block
    must be resident before setmaxnreg moves registers between its warpgroups (128·WGS·cap ≤
    65536), a multiple of 8; 2 warpgroups keep 3's cap. 168 for 2 or 3 warpgroups, 128 for 4
    (CWG = 3 and a producer)."""
    return SM_REGS // (WARPGROUP * max(WGS, 3)) // 8 * 8


def consumer_regs(CWG):
    """setmaxnreg.inc of each consumer warpgroup: what the producer gave up, shared out
    (128·(producer + CWG·n) ≤ 65536), a multiple of 8, at most 240: 240, 224, 160 for
    CWG = 1, 2, 3."""
    return min(240, (SM_REGS // WARPGROUP - producer_regs(CWG)) // CWG // 8 * 8)


def widest_bc(D, CWG, OVERLAP):
    """The widest K/V tile whose consumers fit their registers (consumer_regs): a consumer
    thread holds S (Bc/2 floats), P as A fragments (Bc/4 words) and acc (D/2 floats), all
    live at the packing step (and, OVERLAP, through the softmax). Compiled for sm_90a (ptxas
    13.5, with a producer; fp16 and bf16, causal and PAD or not), the widest whose consumers
    spill at most 64 bytes (a few local loads and stores a tile, in L1) in the worst case:
    CWG = 1 (240 registers): 192 (d = 128 with OVERLAP: 40–48 bytes). CWG = 2 (224): 192 at
    d = 64; at d = 128 192 (8–24 bytes) and with OVERLAP 176 (48–64 bytes; 192: 136–184).
    CWG = 3 (160): at d = 64 176 (24–32 bytes; 192: 80–144) and with OVERLAP 128 (0–8; 160:
    224); at d = 128 64 (96: 16 bytes; 128: about 190 registers needed)."""
    if CWG == 3:
        return 64 if D == 128 else 128 if OVERLAP else 176
    return 176 if D == 128 and CWG == 2 and OVERLAP else 192


def wgmma_smem_bytes(D, Bc, CWG, STAGES, SWIZZLE=False):
    """Dynamic shared memory: the Q tile (64·CWG × D halves) and STAGES × (K, V) tiles
    (SWIZZLE: 1024 bytes more, to put the tiles on a 1024-byte boundary)."""
    return 2 * (64 * CWG * D + STAGES * 2 * Bc * D) + (SW128_ALIGN if SWIZZLE else 0)


def row_words(SWIZZLE=False):
    """Words from a row of a tile to the next in piece_order's layouts: 4 in the K-major core
    matrices (a row of a core matrix is 16 bytes), 32 with SWIZZLE (a row of a 64-column half
    is a 128-byte line). With SWIZZLE it holds over steps of 8 rows only (the chunk order
    repeats every 8 rows), which is all the kernels take: copies STEP rows apart, a
    warpgroup's 64 rows (64·row_words words on)."""
    return 32 if SWIZZLE else 4


@lru_cache(maxsize=None)
def piece_order(D, SWIZZLE=False):
    """(piece_of, chunk_word) of a tile with rows of D halves (D/8 16-byte pieces a row), the
    copies' one layout for both kernels (kmajor_rows, copy_tile):

    piece_of(p) → (row, piece c) of the p-th 16-byte copy. Core matrices: 8 consecutive p take
    8 consecutive rows, so a warp's 32 copies are 4 pieces (64 contiguous bytes) of 8 rows —
    whole 32-byte sectors in global memory — and land as 4 runs of 128 contiguous bytes in
    shared memory (K-major or N-major core matrices), the 4 wavefronts 512 bytes need (p →
    rows first, piece after, would put a warp's copies 16·Bc bytes apart: all in the same
    banks). SWIZZLE: row-major — 8 lanes take a row's 128 bytes of one half, one line in
    global memory and, swizzled, one line in shared memory (docs/results.md: the L2
    requests). Tiles of a multiple of 8 rows.

    chunk_word(r, c, R) → the word offset, in a tile of R rows, of piece c of row r: K-major
    core matrices, hopper.kmajor_index(r, 8c, R) / 2; SWIZZLE, hopper.sw128_index(r, 8c, R) /
    2 (half c // 8, row r, chunk (c % 8) ^ (r % 8))."""
    PIECES = D // 8

    @cuda.jit(device=True)
    def piece_of(p):
        if SWIZZLE:                                 # (compile-time)
            return p // PIECES, p % PIECES
        return 8 * (p // (8 * PIECES)) + p % 8, (p // 8) % PIECES

    @cuda.jit(device=True)
    def chunk_word(r, c, R):
        if SWIZZLE:
            return sw128_index(r, 8 * c, R) // 2
        return 4 * (c * R + r)
    return piece_of, chunk_word


@lru_cache(maxsize=None)
def kmajor_rows(D, R, NL, PAD=False, SWIZZLE=False):
    """copy(x, smem, at, lt, bh, n, r0, kpm, b_idx): thread lt of NL copiers starts the
    cp.async copies of rows r0 … r0 + R − 1 of x[bh] (x [BH, n, D/2] words) into smem from word
    ``at`` on, K-major (hopper.kmajor_index(r, k, R): LBO = 16·R bytes, SBO = 128 bytes; SWIZZLE:
    hopper.sw128_index(r, k, R), row by row, ``at`` on a 1024-byte boundary), zeros (no global
    read) for rows ≥ n and, PAD, rows whose kpm[b_idx, row] is 0. Nothing waits: the caller
    follows with cp_async_wait_all or cp_async_mbar_arrive. R a multiple of 8.

    NL is a multiple of D (a lap of D copies: D/8 pieces of 8 rows, or 8 rows of D/8 pieces,
    SWIZZLE), so a copier's
    pieces piece_of(lt + NL·m) keep the piece c and lie STEP = NL / PIECES rows apart, a
    multiple of 8 (the swizzle's chunk order repeats every 8 rows): each shared offset is the
    first one plus m·STEP·ROW words and each global one plus m·STEP·D/2 — computed once, not
    per piece (attention_wgmma_backward streams its tiles with this: SASS, about 75
    instructions a 16-byte copy before, a handful after). A whole tile (r0 + R ≤ n, no
    padding: the same branch for every thread) reads from one base; a partial tile clamps
    each row into the input and zero-fills the rows past n (n ≥ 1: the callers launch
    nothing for empty inputs)."""
    assert NL % D == 0, (NL, D)                    # (every caller: warpgroups, D ≤ 128)
    piece_of, chunk_word = piece_order(D, SWIZZLE)
    DW, PIECES = D // 2, D // 8
    STEP = NL // PIECES                             # rows between a copier's pieces
    COPIES = -(-R // STEP)
    ROW = row_words(SWIZZLE)                        # words a row on (STEP a multiple of 8)

    @cuda.jit(device=True)
    def copy(x, smem, at, lt, bh, n, r0, kpm, b_idx):
        r, c = piece_of(lt)                         # my first piece: row r, piece c
        dst = at + chunk_word(r, c, R)
        if not PAD and r0 + R <= n:                 # a whole tile: one base
            src = (bh * n + r0 + r) * DW + 4 * c
            for m in range(COPIES):                 # (unrolled: the offsets are constants)
                if R % STEP == 0 or r + STEP * m < R:       # (compile-time True if STEP | R)
                    cp_async16(smem, dst + ROW * STEP * m, x, src + STEP * DW * m, True)
        else:                                       # the last tile, or PAD: row by row
            for m in range(COPIES):
                if R % STEP == 0 or r + STEP * m < R:
                    row = r0 + r + STEP * m
                    ok = row < n and (not PAD or kpm[b_idx, row] != 0)
                    cp_async16(smem, dst + ROW * STEP * m, x,
                               (bh * n + min(row, n - 1)) * DW + 4 * c, ok)   # (in bounds)
    return copy


@lru_cache(maxsize=None)
def flash_wgmma_kernel(D, Bc, CWG, STAGES, PRODUCER, CAUSAL, PAD, BF16, OVERLAP=False,
                       PINGPONG=False, FOLD=True, SWIZZLE=False):
    """fp16 (BF16=False) or bf16 FlashAttention forward on wgmma; see the module menu. FOLD:
    scale·log2e > 0 (attention_tc.fold_scale). SWIZZLE: the tiles in hopper.sw128_index's
    layout (menu: "SWIZZLE")."""
    assert D in (64, 128) and Bc in BC_WIDTHS and CWG in (1, 2, 3) and STAGES >= 1
    assert STAGES >= 2 or not OVERLAP       # (OVERLAP holds tile j − 1's stage while j lands)
    assert CWG >= 2 or not PINGPONG         # (a rotation needs two warpgroups to take turns)
    kind = "bf16" if BF16 else "f16"
    mma_s = WGMMA[(kind, Bc)]               # S = Q Kᵀ: 64 × Bc, A and B from shared memory
    mma_o = WGMMA_RS_TB[(kind, D)]          # acc += P V: 64 × D, A in registers, B N-major
    Br = 64 * CWG
    T = WARPGROUP * (CWG + (1 if PRODUCER else 0))
    NL = WARPGROUP if PRODUCER else WARPGROUP * CWG     # threads that copy K/V
    NC = WARPGROUP * CWG                                # consumer threads
    NBARS = 2 * STAGES                                  # FULL[s], then EMPTY[s]
    DW = D // 2                             # words (half pairs) of a row in global memory
    PIECES = D // 8                         # 16-byte pieces of a row
    STEP = NL // PIECES                     # rows between a copier's pieces of a K/V tile …
    COPIES = -(-Bc // STEP)                 # … and how many it copies, at most
    assert NL % (8 * PIECES) == 0           # (copy_tile: a copier's pieces share their c,
                                            # and, SWIZZLE, their row % 8)
    QW = Br * DW                            # words of the Q tile; stage s follows at …
    KVW = Bc * DW                           # … QW + 2·KVW·s: K tile, then V tile
    SH, OH = Bc // 2, D // 2                # accumulator floats per thread: S, acc
    NBS, NBO, KC2 = Bc // 8, D // 8, Bc // 16
    PA = 4 * KC2                            # words of P as A fragments (4 per k16 step)
    pack = pack_bf16 if BF16 else pack_f16
    update = online_softmax_tc(NBS, NBO, 1, OVERLAP)   # OVERLAP: acc's rescale deferred …
    rescale = rescale_tc(NBO, 1)                        # … to this, once P·V is waited for
    mask = mask_scores_tc(NBS, CAUSAL, PAD, 1, CLAMPED=True)
    scaled = fold_scale(SH, FOLD)
    to_a = pack_accumulators(KC2, 1, NBS, BF16)
    clear_acc = zeros(OH)
    _, _, _, put_word = head_io(D, D)
    finish = finish_rows(NBO, store_words(put_word, pack))
    SHRINK, GROW = producer_regs(CWG), consumer_regs(CWG)   # setmaxnreg (PRODUCER)
    ML = 6 if OVERLAP else 4                # m, l (, OVERLAP: the deferred correction) of 2 rows
    AHEAD = STAGES if OVERLAP else STAGES - 1   # no PRODUCER: tiles copied before the loop

    piece_of, chunk_word = piece_order(D, SWIZZLE)   # the copies' layout (Q: q_rows)
    q_rows = kmajor_rows(D, Br, T, False, SWIZZLE)
    ROW = row_words(SWIZZLE)                # words a row on in the Q and K tiles

    @cuda.jit(device=True)
    def take_turn(cw):
        """PINGPONG: wait until the warpgroup before cw in the rotation has issued its wgmmas
        (its arrival on my barrier; warpgroup 0's first turn: its own arrival before the
        loop). One bar_sync per id, so that each id is an immediate: an id computed from cw
        kept a register through the loop (ptxas 13.5: 28 bytes of spills at d = 128 with
        OVERLAP, causal, PAD and bf16) and made ptxas reserve all 16 barriers."""
        if cw == 0:
            bar_sync(TURN, TURN_THREADS)            # wait: my turn (warpgroup 0)
        elif CWG == 2 or cw == 1:
            bar_sync(TURN + 1, TURN_THREADS)        # wait: my turn (warpgroup 1)
        else:
            bar_sync(TURN + 2, TURN_THREADS)        # wait: my turn (warpgroup 2)

    @cuda.jit(device=True)
    def pass_turn(cw):
        """PINGPONG: my wgmmas are issued (and committed): the next warpgroup in the rotation,
        (cw + 1) % CWG, may issue its own; an arrival, no wait (ids immediate: take_turn)."""
        if cw == CWG - 1:
            bar_arrive(TURN, TURN_THREADS)          # … to warpgroup 0
        elif CWG == 2 or cw == 0:
            bar_arrive(TURN + 1, TURN_THREADS)      # … to warpgroup 1
        else:
            bar_arrive(TURN + 2, TURN_THREADS)      # … to warpgroup 2

    @cuda.jit(device=True)
    def issue_s(sacc, q_addr, k_addr):
        """S = Qi Kjᵀ issued as one wgmma group: D/16 k16 steps (Q: 16·Br·ks halves on, K:
        16·Bc·ks; SWIZZLE: 32 bytes a step in a half, 128·rows from one half to the next, SBO
        1024), A and B from shared memory, K-major; nothing waits."""
        for ks in range(D // 16):
            mma_s(sacc, kmajor_desc(q_addr, Br, ks, SWIZZLE), kmajor_desc(k_addr, Bc, ks, SWIZZLE),
                  ks > 0)
        wgmma_commit_group()

    @cuda.jit(device=True)
    def issue_pv(acc, pa, v_addr):
        """acc += P Vj issued as one wgmma group: Bc/16 k16 steps, A = P from registers (RS),
        V N-major (16·D·ks halves on; SWIZZLE: V's tile laid out as K's, read MN-major, 2048
        bytes a step, LBO 128·Bc to the next 64 columns, SBO 1024); nothing waits."""
        for ks in range(KC2):
            if SWIZZLE:                             # (V laid out as K: its N-major reading)
                desc = nmajor_desc(v_addr, Bc, ks, True)
            else:                                   # (V's own N-major core matrices)
                desc = wgmma_desc(v_addr + 32 * D * ks, 16 * D, 128, SWIZZLE_NONE)
            mma_o(acc, pa[4 * ks], pa[4 * ks + 1], pa[4 * ks + 2], pa[4 * ks + 3], desc, True)
        wgmma_commit_group()

    @cuda.jit(device=True)
    def scores(sacc, scale2, k0, r_lo, t, n_k, q0, offset, kpm, b_idx):
        """S → masked (−inf): keys past Nk, above the causal diagonal, padded (only on the
        tiles that have such keys); returns the multiplier of S in update (fold_scale:
        scale·log2e, applied in the softmax's FFMAs, or 1 with S scaled here)."""
        mult = scaled(sacc, scale2)
        if PAD or k0 + Bc > n_k or (CAUSAL and k0 + Bc - 1 > q0 + offset):
            mask(sacc, k0, r_lo, 2 * t, n_k, offset, kpm, b_idx)
        return mult

    @cuda.jit(device=True)
    def copy_tile(k, v, smem, at0, bars, i, lt, bh, n_k, kpm, b_idx):
        """Thread lt of the NL copiers: K and V rows of tile i into stage i % STAGES, by
        cp.async (zeros past Nk / for padded keys), then its arrival on FULL (noinc). Its
        pieces are piece_of(lt + NL·n): the same c, rows STEP apart (NL a multiple of
        8·PIECES), so every offset is its first one plus a constant; the source row is clamped
        rather than the index zeroed. Both keep the producer in 32 registers at CWG = 3 (ptxas
        13.5): with piece_of per copy, or ``src if ok else 0``, LLVM hoisted one 64-bit offset
        per piece out of the tile loop (4 to 120 bytes of spills)."""
        s = i % STAGES
        if i >= STAGES:                             # wait: tile i − STAGES left this stage
            mbar_try_wait_parity(bars, STAGES + s, ((i // STAGES) - 1) & 1)
        r0, c = piece_of(lt)                        # my first piece: row r0, piece c; my
        k_at = at0 + QW + 2 * KVW * s + chunk_word(r0, c, Bc)   # others: STEP rows on, same c
        if SWIZZLE:                                 # (V's tile laid out as K's)
            v_at = k_at + KVW
        else:
            v_at = at0 + QW + 2 * KVW * s + KVW + (r0 // 8) * (4 * D) + 32 * c + 4 * (r0 % 8)
        for n in range(COPIES):                     # (unrolled: the offsets are constants)
            r = r0 + STEP * n
            if Bc % STEP == 0 or r < Bc:            # (compile-time True unless STEP does not
                key = i * Bc + r                    # divide Bc: CWG = 3, no producer, 48 or
                                                    # 24 rows a step; d = 64, CWG = 2, no
                                                    # producer, 32 rows, at Bc = 176)
                ok = key < n_k and (not PAD or kpm[b_idx, key] != 0)
                src = (bh * n_k + min(key, n_k - 1)) * DW + 4 * c   # (in bounds; read if ok)
                v_step = ROW if SWIZZLE else DW     # (V as K, else mnmajor_index(r, 8c, D) / 2)
                cp_async16(smem, k_at + ROW * STEP * n, k, src, ok)
                cp_async16(smem, v_at + v_step * STEP * n, v, src, ok)
        cp_async_mbar_arrive(bars, s)               # FULL[s]: once my copies have landed

    @cuda.jit(device=True)
    def release(k, v, smem, at0, bars, i, n_tiles, ct, bh, n_k, kpm, b_idx):
        """OVERLAP: tile i's P·V has been waited for — its stage may be refilled (EMPTY), and
        without a producer this thread then copies tile i + STAGES into it."""
        mbar_arrive(bars, STAGES + i % STAGES)      # EMPTY[i % STAGES]
        if not PRODUCER and i + STAGES < n_tiles:
            copy_tile(k, v, smem, at0, bars, i + STAGES, ct, bh, n_k, kpm, b_idx)

    @cuda.jit(**gpu_options(max_registers=reg_cap(T // WARPGROUP))
              if PRODUCER or CWG == 3 else {})      # (1 or 2 warpgroups alone: no cap)
    def flash_wgmma(q, k, v, o, lse, scale, n_q, n_k, heads, kpm):
        """q [BH, Nq, D/2], k, v [BH, Nk, D/2], o [BH, Nq, D/2]: uint32 words of two halves;
        lse [BH, Nq] float32; kpm uint8 [B, Nk] (PAD)."""
        bh, q0 = block_tile(CAUSAL, Br)
        tid = cuda.threadIdx.x
        smem = cuda.shared.array(0, uint32)         # Q | stage 0 (K, V) | stage 1 … (menu)
        bars = cuda.shared.array(NBARS, uint64)     # FULL[0 …], EMPTY[0 …]
        b_idx = bh // heads
        offset = n_k - n_q                          # §34: query i sees key j iff j ≤ i + offset
        n_tiles = kv_tiles(CAUSAL, q0, Br, Bc, n_q, n_k)
        at0 = to_1024(smem) if SWIZZLE else 0       # SWIZZLE: the tiles from a 1024-byte boundary

        q_rows(q, smem, at0, tid, bh, n_q, q0, kpm, 0)  # Q tile, by every thread: cp.async,
                                                    # zeros past Nq
        cp_async_wait_all()                         # my Q pieces have landed
        fence_proxy_async()                         # … before wgmma's (async-proxy) reads
        if tid == 0:
            for s in range(STAGES):
                mbar_init(bars, s, NL)              # FULL[s]: one arrival per copying thread
                mbar_init(bars, STAGES + s, NC)     # EMPTY[s]: one per consumer thread
            fence_mbarrier_init()
        cuda.syncthreads()                          # wait: Q in shared memory, barriers ready

        if PRODUCER and tid < WARPGROUP:            # (compile-time PRODUCER) §43: the copier
            setmaxnreg_dec(SHRINK)
            for i in range(n_tiles):
                copy_tile(k, v, smem, at0, bars, i, tid, bh, n_k, kpm, b_idx)
            cp_async_wait_all()                     # (no copy in flight when the thread exits)
            return
        if PRODUCER:
            setmaxnreg_inc(GROW)

        ct = tid - WARPGROUP if PRODUCER else tid   # consumer thread index, 0 … NC − 1
        cw = ct // WARPGROUP                        # consumer warpgroup: rows 64·cw …
        w = (ct % WARPGROUP) // 32
        g = (ct % 32) // 4
        t = ct % 4
        r_lo = q0 + 64 * cw + 16 * w + g            # my rows: r_lo, r_lo + 8
        scale2 = scale * LOG2E                      # S in base 2 (online_softmax_tc)
        sacc = cuda.local.array(SH, float32)        # S, then P, of this tile
        acc = cuda.local.array(OH, float32)         # un-normalized output (§32: acc)
        pa = cuda.local.array(PA, uint32)           # P as A fragments of the RS wgmma
        ml = cuda.local.array(ML, float32)          # m of my 2 rows (base 2), l (, correction)
        clear_acc(acc)
        ml[0] = NEG_INF
        ml[1] = NEG_INF
        ml[2] = ZERO
        ml[3] = ZERO
        q_addr = uniform_u32(shared_addr(smem, at0 + 64 * ROW * cw))    # warpgroup cw's 64
        ring = uniform_u32(shared_addr(smem, at0 + QW))     # rows of Q; stage 0's K (uniform:
                                                            # the descriptors in uniform registers)

        if not PRODUCER:                            # tiles 0 … AHEAD − 1 before the loop
            for i in range(min(AHEAD, n_tiles)):
                copy_tile(k, v, smem, at0, bars, i, ct, bh, n_k, kpm, b_idx)
        if PINGPONG:                                # (compile-time) warpgroup 0 has the first
            if cw == 0 and n_tiles > 0:             # turn: its arrival here and its bar_sync
                bar_arrive(TURN, TURN_THREADS)      # fill its barrier (none with no tile)
        if not OVERLAP:                             # (compile-time) one group waited for at once
            for j in range(n_tiles):
                if not PRODUCER and j + STAGES - 1 < n_tiles:
                    copy_tile(k, v, smem, at0, bars, j + STAGES - 1, ct, bh, n_k, kpm, b_idx)
                s, ph = ring_slot(j, STAGES)
                mbar_try_wait_parity(bars, s, ph)   # wait: K_j, V_j have landed
                fence_proxy_async()                 # the copies (generic proxy) before wgmma
                k_addr = uint32(ring + uint32(8 * KVW) * s)     # shared_addr(smem, at0 + QW +
                v_addr = uint32(k_addr + uint32(4 * KVW))       #  2·KVW·s), … + KVW

                if PINGPONG:                        # (compile-time) after the data, my turn
                    take_turn(cw)
                wgmma_fence_operand(sacc, SH)
                wgmma_fence()                       # (sacc last read by to_a, before)
                issue_s(sacc, q_addr, k_addr)       # S = Qi Kjᵀ
                if PINGPONG and (cw < CWG - 1 or j < n_tiles - 1):  # (the rotation's last
                    pass_turn(cw)                   # turn is nobody's: not passed on)
                wgmma_wait_group(0)                 # wait: S is in sacc
                wgmma_fence_operand(sacc, SH)

                mult = scores(sacc, scale2, j * Bc, r_lo, t, n_k, q0, offset, kpm, b_idx)
                update(sacc, acc, ml, mult)         # m, l; P = 2^(S₂ − m); acc *= correction
                to_a(sacc, pa)                      # P → A fragments (16-bit pairs)

                wgmma_fence_operand(acc, OH)
                wgmma_fence()                       # acc's rescale above before the mmas
                issue_pv(acc, pa, v_addr)           # acc += P Vj
                wgmma_wait_group(0)                 # wait: acc updated, stage s read
                wgmma_fence_operand(acc, OH)
                mbar_arrive(bars, STAGES + s)       # EMPTY[s]: the stage may be refilled
        elif n_tiles > 0:                           # OVERLAP: FA3's two-stage pipelining (menu)
            mbar_try_wait_parity(bars, 0, 0)        # wait: K_0, V_0 have landed
            fence_proxy_async()
            if PINGPONG:                            # turn 0 (n_tiles + 1 turns a warpgroup:
                take_turn(cw)                       # this S, the loop's n − 1, the last P·V)
            wgmma_fence_operand(sacc, SH)
            wgmma_fence()
            issue_s(sacc, q_addr, shared_addr(smem, at0 + QW))  # S = Qi K0ᵀ
            if PINGPONG:
                pass_turn(cw)
            wgmma_wait_group(0)                     # wait: S is in sacc
            wgmma_fence_operand(sacc, SH)
            mult = scores(sacc, scale2, 0, r_lo, t, n_k, q0, offset, kpm, b_idx)
            update(sacc, acc, ml, mult)             # m, l; P_0; correction (0: acc is 0) kept
            for j in range(1, n_tiles):
                # tile j − 1's softmax is done (P_j−1 in sacc); P_j−2 V_j−2 may still run
                wgmma_wait_group(0)                 # wait: acc += P_j−2 V_j−2 done, pa and
                wgmma_fence_operand(acc, OH)        # stage j − 2 read (nothing at j = 1)
                if j >= 2:
                    release(k, v, smem, at0, bars, j - 2, n_tiles, ct, bh, n_k, kpm, b_idx)
                rescale(acc, ml)                    # acc = correction·acc (m of tile j − 1)
                to_a(sacc, pa)                      # P_j−1 → A fragments
                s = j % STAGES
                mbar_try_wait_parity(bars, s, (j // STAGES) & 1)    # wait: K_j, V_j have landed
                fence_proxy_async()
                if PINGPONG:                        # turn j: both groups below in it
                    take_turn(cw)
                wgmma_fence_operand(sacc, SH)
                wgmma_fence_operand(acc, OH)
                wgmma_fence()                       # sacc read by to_a, acc rescaled: before
                issue_s(sacc, q_addr, shared_addr(smem, at0 + QW + 2 * KVW * s))   # S = Qi Kjᵀ
                issue_pv(acc, pa, shared_addr(smem, at0 + QW + 2 * KVW * ((j - 1) % STAGES)
                                              + KVW))
                if PINGPONG:
                    pass_turn(cw)
                wgmma_wait_group(1)                 # wait: S is in sacc (P_j−1 V_j−1 runs on)
                wgmma_fence_operand(sacc, SH)
                mult = scores(sacc, scale2, j * Bc, r_lo, t, n_k, q0, offset, kpm, b_idx)
                update(sacc, acc, ml, mult)         # m, l; P_j in sacc; the correction
                                                    # 2^(m_old − m) kept (acc still in flight)
            # (the loop's back edge sits between the softmax and the wait for P·V above, so
            # ptxas cannot hoist that wait over the softmax: with both in one basic block it
            # does, and the overlap is gone — the SASS shows it: WARPGROUP.DEPBAR.LE gsb0, 0x0)
            wgmma_wait_group(0)                     # wait: the P·V of tile n − 2 (if any)
            wgmma_fence_operand(acc, OH)
            if n_tiles >= 2:
                release(k, v, smem, at0, bars, n_tiles - 2, n_tiles, ct, bh, n_k, kpm, b_idx)
            rescale(acc, ml)
            to_a(sacc, pa)
            last = (n_tiles - 1) % STAGES           # the last tile's P·V
            if PINGPONG:                            # turn n
                take_turn(cw)
            wgmma_fence_operand(acc, OH)
            wgmma_fence()
            issue_pv(acc, pa, shared_addr(smem, at0 + QW + 2 * KVW * last + KVW))
            if PINGPONG and cw < CWG - 1:           # (the rotation's last turn is nobody's:
                pass_turn(cw)                       # not passed on)
            wgmma_wait_group(0)                     # wait: acc final, its stage read
            wgmma_fence_operand(acc, OH)
            mbar_arrive(bars, STAGES + last)        # (no copy waits for it: symmetry only)

        finish(o, lse, acc, ml, bh, r_lo, t, n_q)  # O = acc / l, LSE = m·ln2 + ln l

    BUILT[("flash_wgmma_kernel", D, Bc, CWG, STAGES, PRODUCER, CAUSAL, PAD, BF16,
           OVERLAP, PINGPONG) + (() if FOLD else ("scale ≤ 0",))
          + (("SWIZZLE",) if SWIZZLE else ())] = flash_wgmma
    return flash_wgmma
