"""``flashlesson bench ladder``: the ladder at the top of each fast kernel file, measured.

Each fast kernel file (``kernels_numba/softmax.py``, ``attention.py``, …) opens with a ladder
from the lesson tier to the fast tier: step 0 its lesson kernel, then each step towards the tuned kernel — what it
changed, and what that bought. This module is the tables' one source: ``LADDERS`` holds, per
file, the shape it is measured at and its steps. A step either *runs* — a public call (a
method, a tier, a config) that the command checks against the float64 oracle and times — or is
*historical*: a change the code no longer lets one switch off, kept with the number recorded
when it was made.

    flashlesson bench ladder [--only softmax attention …] [--json F]   GPU: check, time, table
    flashlesson bench ladder --write [--from F.json]    the numbers into the files' tables
    flashlesson bench ladder --tiny                      simulator: every step checked at tiny
                                                         shapes, nothing timed (the plumbing)

Timing: kernel-only, ``bench.time_gpu_adaptive`` (CUDA events around launches queued behind a
sleeping kernel, so they time the GPU, not Python; the median of the samples). Rates from the
formulas the other benchmarks use: softmax GB/s = one read and one write of x (§4,
``bench.softmax_bytes``), beside a device-to-device copy of the same bytes (the ceiling);
attention TFLOP/s = ``reference.attention_flops`` (4·B·H·N²·d, half when causal), the
backward 2.5 × that (``attention_backward_flops``). "× lesson": the lesson kernel's time over
the step's, on the same inputs (shape, dtype, causal) — the lesson step named by ``versus``.

Checks: softmax, the first and last 32 rows against ``reference.softmax_stable`` (the
tolerance of ``flashlesson.tolerance.softmax_tol``); attention, head (0, 0) against
``reference.attention`` (``tour.attention_check``: ``tolerance.attention_tol``); backward, head
(0, 0)'s dq, dk, dv against ``reference.attention_backward`` (``tolerance.backward_tol``). A
step that fails its check is reported and not written into a table.
"""

import datetime
import json
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from .configs import BwdConfig, FlashConfig
from .tc_methods import TcBwdConfig, TcConfig, WgmmaBwdConfig, WgmmaConfig, WgmmaTf32BwdConfig, \
    WgmmaTf32Config

SOFTMAX, FORWARD, BACKWARD = "softmax", "attention", "backward"
UNITS = {SOFTMAX: "GB/s", FORWARD: "TFLOP/s", BACKWARD: "TFLOP/s"}
NOT_MEASURED = "not measured yet"


@dataclass(frozen=True)
class Step:
    """One row of a ladder.

    step: its label ("0", "1", "7b", "ref"). what: what changed against the step before.
    kw: the keyword arguments of the public call that runs it (``flashlesson.softmax``,
    ``attention`` or ``attention_backward``; for §41–43 also ``q_blocks`` — "all": one Q tile a
    block — and ``producers``, which go to ``flashlesson.loop_order``'s launchers); None for a
    historical step, whose ``recorded`` text is its measured cell. shape, dtype, causal: where
    they differ from the ladder's. versus: the lesson step it is measured against (None: no
    gain printed). call: the timed call as the table shows it (default: from kw)."""
    step: str
    what: str
    kw: Optional[dict] = None
    shape: Optional[tuple] = None
    dtype: Optional[str] = None
    causal: bool = False
    versus: Optional[str] = "0"
    call: str = ""
    recorded: str = ""

    @property
    def runs(self):
        return self.kw is not None

    def call_text(self):
        if not self.runs:
            return self.call
        if self.call:
            return self.call
        text = ", ".join(f"{k}={v!r}" for k, v in self.kw.items()) or "the defaults"
        return text + (", causal=True" if self.causal else "")


@dataclass(frozen=True)
class Ladder:
    """The ladder of one fast kernel file: its steps at one shape (B, H, N, d) or (rows, N)."""
    name: str               # the file's stem: kernels_numba/<name>.py
    op: str                 # SOFTMAX, FORWARD or BACKWARD
    shape: tuple
    dtype: str
    steps: tuple = field(default_factory=tuple)

    @property
    def file(self):
        return f"kernels_numba/{self.name}.py"

    def step(self, label):
        return next(s for s in self.steps if s.step == label)


def shape_text(op, shape):
    """"[65536, 1024]" or "B4 H16 N1024 d64"."""
    if op == SOFTMAX:
        return f"[{shape[0]}, {shape[1]}]"
    b, h, n, d = shape
    return f"B{b} H{h} N{n} d{d}"


LESSON = {"tier": "lesson"}
DEFAULT_FP32 = (4, 16, 1024, 64)        # the benchmarks' first attention shape

LADDERS = (
    Ladder("softmax", SOFTMAX, (65536, 1024), "float32", (
        Step("0", "the lesson kernel of §8 (what ``auto`` runs at N = 1024): "
             "``softmax_warp_multi(32)``, a warp a row, ``math.exp``, ``%``/``//`` indices",
             {"method": "warp_multi", "tier": "lesson"}),
        Step("1", "the project's first fast version (per-method launch shapes)",
             call="(no script left; docs/results.md)",
             recorded="H200, 2026-11-30: N = 1024: 3300 GB/s fp32, 1685 GB/s fp16"),
        Step("2", "``fast_exp`` (``__expf``) instead of the rounded expf, lane indices as "
             "masks (``tid & 31``), the row's max and sum by butterfly (``lanes_max``): "
             "``warp_multi_kernel(32, 1, 32)``, at N = 1024 the lesson's layout (G = 32 lanes "
             "a row, K = 32 values a lane), so the gain is these changes alone "
             "(before: \"together these halved the instructions per element\", docs/results.md)",
             {"method": "warp_multi"}),
        Step("3", "§8 with G < 32 lanes a row below N = 256 (8–16 values a lane, 4–8 loads in "
             "flight), R rounds of rows for fp16: ``warp_multi_shape`` gives G = 16 at "
             "N = 128 (before: N = 32, ``warp_multi`` 4175 GB/s vs the one-per-lane §6 "
             "``warp`` 1675, 2026-11-30)", {"method": "warp_multi"}, shape=(524288, 128)),
        Step("4", "§9 blocks of 128–512 threads, 16 (fp32) / 32 (fp16) values a thread "
             "(``block_shape``): ``block_kernel(16, 256)`` at N = 4096, against the lesson's "
             "``softmax_block(16)`` (before, after steps 1–4: N = 1024 4072 GB/s fp32, 97% "
             "of copy; N = 4096 ``block`` 4048, 2026-11-30)", {"method": "block"},
             shape=(16384, 4096), versus="0b"),
        Step("0b", "(the lesson kernel of step 4: §9's ``softmax_block(K)``, K = ⌈N/T⌉)",
             {"method": "block", "tier": "lesson"}, shape=(16384, 4096), versus=None),
    )),
    Ladder("attention", FORWARD, DEFAULT_FP32, "float32", (
        Step("0", "the lesson kernel (``lesson/attention.py``): a thread a query row, Kj and Vj "
             "in shared memory, S and acc in local memory, ``math.exp``; Br 64, Bc 32",
             LESSON),
        Step("1", "TR × TC threads, each RM rows × CN columns of S in registers; Qiᵀ, Kjᵀ, Pᵀ "
             "transposed in shared memory, ``load4``; a row's max and sum by "
             "``lanes_max``/``lanes_sum``; ``fast_exp``; tiles 64 × 64, one 16-byte load in "
             "flight at a time (GROUP = 1) (before: 14.8 TFLOP/s at B2 H16 N4096, Nsight: 45% "
             "of stalls on global loads)",
             {"config": FlashConfig(64, 64, 16, 8, KU=1, GROUP=1)}),
        Step("2", "tile loads grouped: four 16-byte loads in flight per thread before their "
             "stores (``tiles.py``, GROUP = 4) (before: 27 TFLOP/s at B2 H16 N4096)",
             {"config": FlashConfig(64, 64, 16, 8, KU=1, GROUP=4)}),
        Step("3", "the two inner products unrolled twice (KU = 2) (before: 29 TFLOP/s at B2 "
             "H16 N4096)", {"config": FlashConfig(64, 64, 16, 8, KU=2, GROUP=4)}),
        Step("4", "tiles per head dimension from the sweep (``GPU_CONFIGS``; d = 64: Br 128, "
             "Bc 64, 8 × 8 per thread, GROUP = 2): the default (before: B1 H16 N4096 28.9 vs "
             "24.5 for (64, 64, 16, 8))", {}),
        Step("5", "causal (§34): the tiles past the diagonal skipped, the heaviest Q tile first "
             "on the grid (``block_tile``; the order itself is not switchable: before, causal "
             "/ full time 0.64 → 0.51); against the lesson kernel, causal", {}, causal=True),
        Step("6", "§35–36 flags (PAD, DROPOUT, VARLEN), compiled out when unused",
             call="``flashlesson bench attention``",
             recorded="H200, 2026-11-30: B4 H16 N1024 d64 29.4 vs 30.5 TFLOP/s before "
                      "(runs vary ±3%)"),
        Step("7a", "(before step 7: step 4's tiles, 32 blocks for 132 SMs)",
             {"config": FlashConfig(128, 64, 16, 8, KU=2, GROUP=2)}, shape=(1, 16, 256, 64)),
        Step("7", "32-row tiles when the grid would leave ¾ of the SMs idle "
             "(``SMALL_GRID_CONFIGS``): the default here, 128 blocks", {},
             shape=(1, 16, 256, 64)),
    )),
    Ladder("attention_backward", BACKWARD, DEFAULT_FP32, "float32", (
        Step("0", "the lesson kernels (``lesson/backward.py``, §30): a thread a key (dK/dV) or "
             "a query (dQ), its rows in local memory, one tile in shared memory", LESSON),
        Step("1", "TR × TC threads share a tile, S and dP as register blocks (4 along d per "
             "load), Kj, Vj and Qi, dOi in padded shared tiles; the first tiles (64, 64, 16, 8) "
             "for both kernels (before: 12.5 TFLOP/s vs 4.4 for the naive §31, "
             "docs/bench_attention_backward_h200.json, 2026-11-30)",
             {"config": BwdConfig(64, 64, 16, 8, 64, 64, 16, 8)}),
        Step("2", "tiles per head dimension from a sweep (``BWD_GPU_CONFIGS``; d = 64: "
             "(128, 64, 32, 8) both kernels): the default (before: B1 H16 N4096 12.7 vs 12.1 "
             "for step 1's tiles)", {}),
    )),
    Ladder("attention_tc", FORWARD, DEFAULT_FP32, "float16", (
        Step("0", "the lesson kernel (``lesson/tensor_core.py``, §37): one warp per 16 rows, "
             "K/V tiles of 16 keys loaded plainly, natural-log softmax, l per row",
             {"method": "flash_tc", "tier": "lesson"}),
        Step("1", "several warps a block (4), fragments straight from words, MT = 2 row blocks "
             "per warp, tiles through registers (before: 0.59× torch SDPA flash at B2 H16 "
             "N4096, 2026-11-30)", {"method": "flash_tc",
                                    "config": TcConfig(Bc=64, WARPS=4, MT=2)}),
        Step("2", "ASYNC: cp.async K/V stages, ldmatrix fragments (before: 0.74×)",
             {"method": "flash_tc", "config": TcConfig(Bc=64, WARPS=4, MT=2, ASYNC=True)}),
        Step("3", "8 warps: the default (``default_tc_config``) (before: 0.80×)",
             {"method": "flash_tc"}),
        Step("4", "base-2 exponentials (``mma.ex2``, log2e folded into the scale), 32-bit "
             "shared addresses: in steps 1–3 as run today, not switchable",
             call="``flashlesson bench attention --tc``",
             recorded="H200, 2026-11-30: 0.90× SDPA flash at B2 H16 N4096 d64 (0.77–0.99× "
                      "over the sizes)"),
        Step("tf32", "float32 inputs on the tensor cores, 3xTF32 (``flash_tf32x3_kernel``: "
             "three tf32 mmas a product, each k8 step summed from zero and added on the CUDA cores: "
             "the staged accumulation), against the float32 lesson "
             "kernel of §32 (before the staging: 30.3 TFLOP/s, 3–94× torch efficient's error)",
             {"method": "flash_tc"}, dtype="float32", versus="0f"),
        Step("0f", "(the lesson kernel of step tf32: ``lesson/attention.py``, CUDA cores)",
             LESSON, dtype="float32", versus=None),
    )),
    Ladder("attention_wgmma", FORWARD, (1, 16, 8192, 128), "float16", (
        Step("0", "the lesson kernel of §37 (``lesson/tensor_core.py``), as in attention_tc's "
             "ladder", {"method": "flash_tc", "tier": "lesson"}),
        Step("1", "the mma.sync kernel (``attention_tc.py``, its default): where this file "
             "starts", {"method": "flash_tc"}),
        Step("2", "both products on wgmma (S: Q, K from shared memory; P·V: P in registers, V "
             "N-major), 2 consumer warpgroups, Bc = 128, K/V through one stage on mbarriers: "
             "load, wait, compute (STAGES = 1)",
             {"method": "flash_wgmma",
              "config": WgmmaConfig(Bc=128, CWG=2, STAGES=1, PRODUCER=False)}),
        Step("3", "§42: two stages, the next tile's cp.async copies in flight during this "
             "tile's wgmmas (every thread copies)",
             {"method": "flash_wgmma",
              "config": WgmmaConfig(Bc=128, CWG=2, STAGES=2, PRODUCER=False)}),
        Step("4", "§43: a producer warpgroup that only copies (setmaxnreg: 56 registers for it, "
             "224 for the consumers), consumers that only compute",
             {"method": "flash_wgmma",
              "config": WgmmaConfig(Bc=128, CWG=2, STAGES=2, PRODUCER=True)}),
        Step("5", "three stages in the ring (``WgmmaConfig()``; until the swizzle the default, "
             "and the default method for fp16/bf16 on Hopper at d = 128: 1.10× SDPA flash "
             "causal, 0.88× not)",
             {"method": "flash_wgmma", "config": WgmmaConfig()}),
        Step("6", "the 128-byte swizzle on the Q, K and V tiles (a quarter-warp's 16-byte copies "
             "one 128-byte line in global and in shared memory, against the L2 tag requests "
             "that bound step 5; V read MN-major), with it two stages as fast as three: the "
             "default (``tc_methods.default_wgmma_config``), and the default method for "
             "fp16/bf16 on Hopper at d = 64 and 128",
             {"method": "flash_wgmma", "config": WgmmaConfig(STAGES=2, SWIZZLE=True)}),
    )),
    Ladder("attention_wgmma_tf32", FORWARD, (1, 16, 8192, 128), "float32", (
        Step("0", "the float32 lesson kernel of §32 (``lesson/attention.py``, CUDA cores)",
             LESSON),
        Step("1", "3xTF32 on mma.sync (``attention_tc.flash_tf32x3_kernel``): every warp splits "
             "its B operands again each k8 step; 255 registers and local memory at d = 128",
             {"method": "flash_tc"}),
        Step("2", "this file: Q, K, V split once by the packing kernel into the layout shared "
             "memory holds, both products on wgmma (three a k8 step, summed every 32 of k), "
             "a producer warp's bulk copies, one stage: load, wait, compute",
             {"method": "flash_wgmma", "config": WgmmaTf32Config(Bc=32, CWG=1, STAGES=1)}),
        Step("3", "§42: two stages, the next tile's bulk copies in flight during this tile's "
             "wgmmas: the default (``tc_methods.default_wgmma_tf32_config``)",
             {"method": "flash_wgmma"}),
    )),
    Ladder("attention_tc_backward", BACKWARD, DEFAULT_FP32, "float16", (
        Step("0", "the lesson kernels of §30 on CUDA cores, on float32 inputs of the same shape "
             "(there is no lesson tensor-core backward)", LESSON, dtype="float32"),
        Step("1", "D, dK/dV on the transposed problem, dQ, all on ``mma.sync``, tiles through "
             "registers, 4 warps (before: 0.32× / 0.29× SDPA flash backward, "
             "docs/results.md)", {"config": TcBwdConfig(64, 4, 64, 4)}),
        Step("2", "ASYNC loads (cp.async stages, ldmatrix), 8 warps: the default (before: "
             "0.62–0.84× SDPA flash backward; 166.9 TFLOP/s at B2 H16 N4096 d64, "
             "0.63×, docs/bench_attention_tc_backward_h200.json). Base-2 exponentials "
             "(``mma.ex2``) in both steps as run today",
             recorded="H200, 2026-12-01: 0.311 ms, 138 TFLOP/s, 18.20× lesson",
             call="the defaults (then flash_tc) before step 3"),
        Step("3", "the backward's first launch (D_i = Σ_c dO_ic·O_ic, a thread a row) reads "
             "its rows 16 bytes a load instead of a word (VEC; the same sums in the same "
             "order, the same bits): 0.020 → 0.007 ms at this shape on the wgmma backward's "
             "form of it (H200, 2026-12-02, docs/results.md): the method's default (the "
             "default method on Hopper is ``flash_wgmma``; this file's steps name theirs)", {"method": "flash_tc"}),
    )),
    Ladder("attention_wgmma_backward", BACKWARD, (1, 16, 8192, 128), "float16", (
        Step("0", "the lesson kernels of §30 on CUDA cores, on float32 inputs of the same shape "
             "(there is no lesson tensor-core backward)", LESSON, dtype="float32"),
        Step("1", "the mma.sync backward (``attention_tc_backward.py``, the fp16/bf16 default "
             "off Hopper and at other head dims): where this file starts", {"method": "flash_tc"}),
        Step("2", "every product on wgmma (Sᵀ, dPᵀ / S, dP from shared memory; dV, dK / dQ with "
             "Pᵀ, dSᵀ / dS in registers and B N-major), 2 consumer warpgroups, tiles of 64 "
             "through one stage on mbarriers: load, wait, compute (STAGES = 1)",
             {"method": "flash_wgmma", "config": WgmmaBwdConfig(Bq=64, Bk=64, CWG=2, STAGES=1)}),
        Step("3", "two stages: the next tile's cp.async copies in flight during this tile's "
             "wgmmas. Steps 2 and 3 run the leaner loop and the softmax under the second "
             "product (menu); with the lean loop alone 6.62 and 5.63 ms, before it "
             "7.41 and 6.4 ms (2026-12-01)",
             {"method": "flash_wgmma", "config": WgmmaBwdConfig(STAGES=2, AHEAD=False)}),
        Step("4", "AHEAD: the next tile's Sᵀ, dPᵀ (S, dP) issued behind this tile's dV, dK "
             "(dQ), so the tensor cores have the next products queued while the warpgroup "
             "waits, arrives and copies (menu; the dQ kernel ahead at d = 128 only)",
             {"method": "flash_wgmma", "config": WgmmaBwdConfig(STAGES=2)}),
        Step("5", "three stages: with AHEAD a tile's FULL wait comes at the end of the tile "
             "before, and two stages had issued its copies only at that tile's start; three "
             "issue them a tile earlier. The method's default (``WgmmaBwdConfig()``), and the "
             "default method for fp16/bf16 on Hopper at d = 64 and 128",
             recorded="H200, 2026-12-02: 4.51 ms, 305 TFLOP/s, 182.65× lesson",
             call="method='flash_wgmma', config=WgmmaBwdConfig() before step 6"),
        Step("6", "the first launch (D_i = Σ_c dO_ic·O_ic and LSE_i·log2e, a thread a row) "
             "reads its rows 16 bytes a load instead of a word (VEC; the same sums in the "
             "same order, the same bits): 0.095 → 0.030 ms here, the backward 1.00× the "
             "word form at this shape and 1.06× at B4 H16 N1024 d64, where that launch was "
             "9 % of the call (H200, 2026-12-02, docs/results.md). The method's default", {"method": "flash_wgmma", "config": WgmmaBwdConfig()}),
    )),
    Ladder("attention_tf32x3_backward", BACKWARD, DEFAULT_FP32, "float32", (
        Step("0", "the lesson kernels of §30 on CUDA cores (``lesson/backward.py``)", LESSON),
        Step("1", "this file: the tensor-core backward with three tf32 mmas a product (3xTF32) "
             "(before: 23.7 TFLOP/s at this shape, 0.71× SDPA efficient fp32, "
             "docs/bench_attention_tc_backward_h200.json, 2026-11-30), its products staged as the "
             "forward's (before the staging: 23.6 TFLOP/s, 12–100× torch "
             "efficient's error)",
             {"method": "flash_tc"}),
    )),
    Ladder("attention_wgmma_tf32_backward", BACKWARD, (2, 16, 4096, 64), "float32", (
        Step("0", "the lesson kernels of §30 on CUDA cores (``lesson/backward.py``)", LESSON),
        Step("1", "3xTF32 on mma.sync (``attention_tf32x3_backward.py``): every warp splits its "
             "operands again each k8 step", {"method": "flash_tc"}),
        Step("2", "this file: Q, K, V, dO split once by one packing launch into the layouts "
             "shared memory holds, every product on wgmma (three a k8 step, summed every 32 "
             "of k), a producer warp's bulk copies, one consumer warpgroup a kernel, one "
             "stage: load, wait, compute",
             {"method": "flash_wgmma", "config": WgmmaTf32BwdConfig(Q_CWG=1, STAGES=1)}),
        Step("3", "§42: two stages, the next tile's bulk copies in flight during this tile's "
             "wgmmas", {"method": "flash_wgmma", "config": WgmmaTf32BwdConfig(Q_CWG=1)}),
        Step("4", "two consumer warpgroups in the dQ kernel (at most 168 registers a thread; "
             "122–126 on the H200, no local memory), "
             "``tc_methods.default_wgmma_tf32_bwd_config``",
             recorded="H200, 2026-12-02: 6.5 ms, 52.9 TFLOP/s, 6.74× lesson (with the packing "
             "of one word a thread)", call="method='flash_wgmma' before step 5"),
        Step("5", "the packing launch four words a thread (a 16-byte load of four columns, or "
             "four tokens of one column, and 16-byte stores of both parts; before: 0.550 ms "
             "at this shape, about 1.3 TB/s of its reads and writes, now 0.175 ms, "
             "H200, 2026-12-02, docs/results.md): the default. Steps 2 "
             "and 3, timed the same day, have it too (with one word a thread: 10.3 and "
             "7.47 ms)",
             recorded="H200, 2026-12-02: 6.06 ms, 56.7 TFLOP/s, 7.23× lesson",
             call="method='flash_wgmma' before step 6"),
        Step("6", "the D and LSE launch (``stats_kernel``, a thread a row) reads its rows 16 "
             "bytes a load instead of a float (VEC; the same float64 sums in the same order, "
             "the same bits): 0.094 → 0.038 ms at this shape, 0.22 → 0.073 ms at B1 H16 "
             "N8192 d128 (H200, 2026-12-02, docs/results.md): the default. "
             "Steps 2 and 3, timed since, have it too",
             {"method": "flash_wgmma"}),
    )),
    Ladder("attention_fa1", FORWARD, (2, 16, 2048, 64), "float32", (
        Step("0", "the lesson kernel (``lesson/loop_order.py``'s ``flash_fa1``): FA1's order, "
             "one thread a row, a block per head", {"method": "flash_fa1", "tier": "lesson"}),
        Step("1", "this file, Algorithm 1 (one block per head), the forward kernel's tiles and "
             "thread layout (before: 2.6 TFLOP/s at B2 H16 N4096)", {"method": "flash_fa1"}),
        Step("2", "the same loop on FA2's grid (a block per Q tile, ``q_blocks`` = ⌈Nq/Br⌉): the "
             "gap to ``ref`` is the HBM round trips alone (before: 18.6 TFLOP/s)",
             {"method": "flash_fa1", "q_blocks": "all"},
             call="loop_order.launch_fa1(…, q_blocks=⌈Nq/Br⌉)"),
        Step("ref", "FA2's order (``attention.py``'s ``flash``), for comparison (before: 31.5 "
             "TFLOP/s at B2 H16 N4096)", {"method": "flash"}, versus=None),
    )),
    Ladder("attention_db", FORWARD, (2, 16, 4096, 64), "float32", (
        Step("0", "the lesson kernel of §42 (``lesson/loop_order.py``'s "
             "``flash_double_buffer``): one thread a row, the next tile's loads written straight "
             "into the other buffer", {"method": "flash_db", "tier": "lesson"}),
        Step("0b", "the lesson kernel of §43 (``flash_producer_consumer``): one warp that only "
             "loads", {"method": "flash_db", "tier": "lesson", "producers": 1},
             call="loop_order.launch_db_lesson(…, producers=1)", versus=None),
        Step("1", "this file, producers = 0: the next K/V tile through registers, two buffers, "
             "one barrier a tile (before: 19.0 TFLOP/s, slower than flash: double the shared "
             "memory, fewer blocks per SM)", {"method": "flash_db"}),
        Step("2", "producers = 1: one warp only loads (§43), against the lesson's §43 kernel "
             "(before: 22.9 TFLOP/s)", {"method": "flash_db", "producers": 1},
             call="loop_order.launch_db(…, producers=1)", versus="0b"),
        Step("3", "§42 on Hopper's machinery (``attention_async.py``, method ``flash_async``): "
             "K/V rows copied by the copy engine (cp.async.bulk) into two stages, FULL/EMPTY "
             "mbarriers, warp 0 issues tile j+1 before tile j is computed; no block barrier in "
             "the loop (Pᵀ stays within a warp); Bc = 32, so that two blocks share an SM (Bc = "
             "64: 21.6 TFLOP/s, one block)", {"method": "flash_async"}),
        Step("4", "§43 on Hopper's machinery (producers = 1): a producer warpgroup whose warp 0 "
             "only issues the copies into two stages; two consumer warpgroups (Br = 256) meet "
             "on a named barrier; setmaxnreg 40 / 232 registers (one consumer warpgroup, 40 / "
             "248: 27.0 TFLOP/s at 2–4 stages); against the lesson's §43 kernel",
             {"method": "flash_async", "producers": 1},
             call="loop_order.launch_async(…, producers=1)", versus="0b"),
        Step("ref", "the single-buffered ``flash`` (``attention.py``), for comparison (before: "
             "31.5 TFLOP/s)", {"method": "flash"}, versus=None),
    )),
)


def ladder_names():
    return tuple(lad.name for lad in LADDERS)


# ---------------------------------------------------------------------------------------------
# Running a step: inputs, the call, the check
# ---------------------------------------------------------------------------------------------
# --tiny (the simulator): 8 rows of at most 1024 (the lesson's block kernel holds ≤ 32 values a
# thread, 64 threads there); one head of 40 queries at the step's head dimension
TINY = {SOFTMAX: lambda shape: (8, min(shape[1], 1024)),
        FORWARD: lambda shape: (1, 1, 40, shape[3]),
        BACKWARD: lambda shape: (1, 1, 40, shape[3])}


class Inputs:
    """Device inputs per (shape, dtype), made once: x, y for softmax; q, k, v for attention;
    and do, o, lse (from the default forward of that dtype) for the backward."""

    def __init__(self, op, seed=0):
        self.op, self.seed, self.cache = op, seed, {}

    def get(self, shape, dtype):
        key = (shape, dtype)
        if key not in self.cache:
            self.cache[key] = self._make(shape, dtype)
        return self.cache[key]

    def _make(self, shape, dtype):
        from numba import cuda
        rng = np.random.default_rng([self.seed, *shape])
        if self.op == SOFTMAX:
            x = (rng.standard_normal(shape, np.float32) * 3).astype(dtype)
            xd = cuda.to_device(x)
            return {"x": xd, "y": cuda.device_array_like(xd), "host": x}
        b, h, n, d = shape
        host = {name: rng.standard_normal((b, h, n, d), np.float32).astype(dtype)
                for name in ("q", "k", "v", "do")}
        dev = {name: cuda.to_device(a) for name, a in host.items()}
        if self.op == BACKWARD:
            from .attention_methods import attention
            dev["o"], dev["lse"] = attention(dev["q"], dev["k"], dev["v"], return_lse=True)
        dev["host"] = host
        return dev


def _loop_order_call(kw, q, k, v, causal):
    """§41–43's variants that the public call does not reach (``q_blocks``, ``producers``):
    ``flashlesson.loop_order``'s launchers on [B·H, N, d] views (``producers`` with method
    ``flash_async``: ``launch_async``); returns (o, lse)."""
    from . import loop_order
    from .arrays import empty, result
    B, H, nq, d = q.shape
    nk, bh = k.shape[2], B * H
    q3, k3, v3 = (a.reshape(bh, -1, d) for a in (q, k, v))
    o3, lse2 = empty((bh, nq, d), np.float32), empty((bh, nq), np.float32)
    scale = d ** -0.5
    if kw.get("tier") == "lesson":
        loop_order.launch_db_lesson(q3, k3, v3, o3, lse2, causal=causal, scale=scale,
                                    producers=kw["producers"])
    elif "q_blocks" in kw:
        cfg = loop_order.config_for(d, nq, bh)
        loop_order.launch_fa1(*(a.reshape(-1) for a in (q3, k3, v3, o3, lse2)), d=d, n_q=nq,
                              n_k=nk, heads=H, bh=bh, causal=causal, scale=scale,
                              q_blocks=-(-nq // cfg.Br))
    else:                               # §43: flash_db's producer warps or flash_async's
        launch_ = loop_order.launch_async if kw.get("method") == loop_order.ASYNC else \
            loop_order.launch_db
        launch_(*(a.reshape(-1) for a in (q3, k3, v3, o3, lse2)), d=d, n_q=nq, n_k=nk,
                heads=H, bh=bh, causal=causal, scale=scale, producers=kw["producers"])
    return result(o3, (B, H, nq, d)), result(lse2, (B, H, nq))


def runner(op, kw, arrays, causal):
    """A function that runs the step once on ``arrays`` and returns its outputs."""
    from .attention_methods import attention
    from .backward_methods import attention_backward
    from .softmax_methods import softmax
    if op == SOFTMAX:
        return lambda: softmax(arrays["x"], out=arrays["y"], **kw)
    if op == FORWARD:
        qkv = (arrays["q"], arrays["k"], arrays["v"])
        if "q_blocks" in kw or "producers" in kw:
            return lambda: _loop_order_call(kw, *qkv, causal)
        return lambda: attention(*qkv, causal=causal, return_lse=True, **kw)
    args = tuple(arrays[n] for n in ("do", "q", "k", "v", "o", "lse"))
    return lambda: attention_backward(*args, causal=causal, **kw)


def arithmetic(step, lad):
    """The kernel's arithmetic for the error model (``flashlesson.tolerance``): "float16" for
    fp16 inputs, "tf32" for float32 inputs on the tensor cores (3xTF32), else "float32"."""
    dtype = step.dtype or lad.dtype
    if dtype == "float16":
        return "float16"
    return "tf32" if step.kw.get("method") in ("flash_tc", "flash_wgmma") else "float32"


def check(op, out, arrays, fmt, causal):
    """(passed, max error, what was compared) of a step's outputs against the float64 oracle,
    with the bound of ``fmt``'s arithmetic (:func:`arithmetic`)."""
    from .tour import attention_check, check_close
    if op == SOFTMAX:
        from .reference import softmax_stable
        x, n = arrays["host"], min(32, len(arrays["host"]))
        got = np.concatenate([out[:n].copy_to_host(), out[len(x) - n:].copy_to_host()])
        want = softmax_stable(np.concatenate([x[:n], x[len(x) - n:]]).astype(np.float64))
        c = check_close("", "", "", got, want)
        return c.passed, c.max_err, f"rows 0–{n - 1} and the last {n} vs softmax_stable"
    host = arrays["host"]
    q, k, v, do = (host[n][:1, :1].astype(np.float64) for n in ("q", "k", "v", "do"))
    if op == FORWARD:
        o, lse = out
        cs, _, _ = attention_check("", "", "", o[:1, :1].copy_to_host(),
                                   lse[:1, :1].copy_to_host(), q, k, v, causal=causal,
                                   dtype=fmt)
        return (all(c.passed for c in cs), max(c.max_err for c in cs),
                "head (0, 0): O, LSE vs reference.attention")
    from .reference import attention_backward_intermediates as oracle

    from .tolerance import HALF, backward_errors, backward_tol, dtype_name, rounded_o_tol
    ref = oracle(do, q, k, v, causal=causal)
    refs = ref["dq"], ref["dk"], ref["dv"]
    rel = backward_tol(q, k, dtype=fmt)
    extra = (0.0, 0.0, 0.0)
    if dtype_name(fmt) in HALF:          # D from an O rounded to 16 bits (rounded_o_tol)
        extra = rounded_o_tol(ref["P"], ref["O"], q, k, do, dtype=fmt)
    errs = backward_errors([g[:1, :1].copy_to_host() for g in out], refs, rel, extra)
    return (max(errs) <= rel, max(errs),
            f"head (0, 0): dq, dk, dv vs reference.attention_backward (bound {rel:.1e})")


def rate(op, shape, causal, ms):
    """GB/s (softmax) or TFLOP/s (attention, backward) of a measured time in ms."""
    from .reference.attention import attention_flops
    from .reference.attention_backward import attention_backward_flops

    from .bench import softmax_bytes
    if op == SOFTMAX:
        return softmax_bytes(shape[0], shape[1], 4) / ms / 1e6      # x is float32 here
    b, h, n, d = shape
    flops = (attention_flops if op == FORWARD else attention_backward_flops)(
        b, h, n, n, d, causal)
    return flops / ms / 1e9


def _key(step, lad):
    return (tuple(sorted((k, repr(v)) for k, v in step.kw.items())), step.dtype or lad.dtype)


def measure(ladders=LADDERS, tiny=False, log=print):
    """Check, then time (tiny: check only, in the simulator) every runnable step of
    ``ladders`` and its lesson comparator. Returns a list of result dicts."""
    from . import device
    from .bench import time_gpu, time_gpu_adaptive
    if not tiny:
        device.gpu_only("flashlesson bench ladder")
    results = []
    for lad in ladders:
        inputs = Inputs(lad.op)
        timed = {}                                  # (kw, dtype, shape, causal) → ms

        def run(step, shape, causal):
            key = _key(step, lad) + (shape, causal)
            if key in timed:
                return timed[key]
            arrays = inputs.get(shape, step.dtype or lad.dtype)
            fn = runner(lad.op, step.kw, arrays, causal)
            ok, err, what = check(lad.op, fn(), arrays, arithmetic(step, lad), causal)
            ms = None
            if ok and not tiny:
                ms = time_gpu_adaptive(fn)
            timed[key] = (ms, ok, err, what)
            return timed[key]

        copy_gbs = {}
        for step in lad.steps:
            if not step.runs:
                continue
            shape = TINY[lad.op](step.shape or lad.shape) if tiny else (step.shape or lad.shape)
            label = f"{lad.name} {step.step}: {step.call_text()}"
            ms, ok, err, what = run(step, shape, step.causal)
            row = {"file": lad.file, "ladder": lad.name, "step": step.step,
                   "shape": list(shape), "dtype": step.dtype or lad.dtype,
                   "causal": step.causal, "call": step.call_text(), "passed": bool(ok),
                   "max err": err, "checked": what, "ms": ms, "unit": UNITS[lad.op],
                   "rate": None if ms is None else rate(lad.op, shape, step.causal, ms)}
            if lad.op == SOFTMAX and ms is not None:
                if shape not in copy_gbs:
                    x, y = inputs.get(shape, lad.dtype)["x"], inputs.get(shape, lad.dtype)["y"]
                    copy_gbs[shape] = 2 * x.nbytes / time_gpu(lambda: y.copy_to_device(x)) / 1e6
                row["copy GB/s"] = copy_gbs[shape]
            if step.versus is not None and step.versus != step.step:
                base = lad.step(step.versus)
                bms = run(base, shape, step.causal)[0]
                row["lesson ms"] = bms
                row["vs lesson"] = None if ms is None or bms is None else bms / ms
                row["versus"] = base.step
            results.append(row)
            log(f"{label}: " + ("FAILED its check" if not ok else
                                "checked" if ms is None else
                                f"{ms:.4g} ms, {row['rate']:.4g} {row['unit']}") +
                f" (max err {err:.2e})")
    return results


def table_rows(results):
    """Rows of the command's table: file, step, what changed (shortened), shape, dtype, ms,
    rate, × lesson, check."""
    whats = {(lad.name, s.step): s.what for lad in LADDERS for s in lad.steps}
    out = []
    for r in results:
        what = textwrap.shorten(whats[(r["ladder"], r["step"])].replace("``", ""), 48)
        rate_ = "" if r["rate"] is None else f"{rate_text(r['rate'])} {r['unit']}" + (
            f" ({100 * r['rate'] / r['copy GB/s']:.0f}% of copy)" if r.get("copy GB/s") else "")
        vs = r.get("vs lesson")
        out.append([r["file"].split("/")[-1], r["step"], what,
                    " ".join(map(str, r["shape"])) + (" causal" if r["causal"] else ""),
                    r["dtype"], "" if r["ms"] is None else f"{r['ms']:.3g}", rate_,
                    "" if vs is None else f"{vs:.2f}× {r['versus']}",
                    "pass" if r["passed"] else "FAIL"])
    return out


TABLE_HEADERS = ["file", "step", "what changed", "shape", "dtype", "ms", "rate",
                 "× lesson step", "check"]


# ---------------------------------------------------------------------------------------------
# The tables in the kernel files
# ---------------------------------------------------------------------------------------------
WIDTHS = (4, 44, 28, 30)        # step | what changed | measured | timed call
HEADERS = ("step", "what changed", "measured", "timed call")


def rate_text(value):
    """3508, 168, 29.2, 0.555: whole numbers from 100 on, else 3 significant digits."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def measured_text(r, device, date):
    """The measured cell of a result: "H200, 2026-12-02: 1.23 ms, 45.6 TFLOP/s, 3.2× lesson"."""
    text = f"{device}, {date}: {r['ms']:.3g} ms, {rate_text(r['rate'])} {r['unit']}"
    if r.get("copy GB/s"):
        text += f" ({100 * r['rate'] / r['copy GB/s']:.0f}% of copy)"
    if r.get("vs lesson"):
        text += f", {r['vs lesson']:.2f}× lesson" + (
            f" (step {r['versus']})" if r.get("versus", "0") != "0" else "")
    return text


def header(lad):
    unit = UNITS[lad.op]
    rate_of = ("GB/s = one read + one write of x / time" if lad.op == SOFTMAX else
               "TFLOP/s = 4·B·H·N²·d / time (half when causal)" if lad.op == FORWARD else
               "TFLOP/s = 10·B·H·N²·d / time (2.5 × the forward's)")
    return textwrap.wrap(
        f"Ladder (lesson tier to fast tier): from the lesson kernel to this file, step by step, at "
        f"{shape_text(lad.op, lad.shape)} {lad.dtype} unless a step says otherwise; {rate_of}; "
        f"kernel-only CUDA-event medians; \"× lesson\" = the lesson kernel's time / the step's "
        f"on the same inputs. ``flashlesson bench ladder --only {lad.name}`` checks and times "
        f"every step with a timed call, ``--write`` puts its numbers here; a step without one "
        f"is historical (no longer separable in the code) and keeps the {unit} recorded then.",
        100, break_on_hyphens=False)


def render(lad, measured):
    """The ladder block of a file (its header, then the table): ``measured`` maps a step label
    to its measured cell (a runnable step without one: "not measured yet")."""
    def wrap(text, width):
        return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]

    lines = header(lad)
    lines.append("| " + " | ".join(h.ljust(w) for h, w in zip(HEADERS, WIDTHS)) + " |")
    lines.append("|" + "|".join("-" * (w + 2) for w in WIDTHS) + "|")
    for s in lad.steps:
        where = [f"at {shape_text(lad.op, s.shape)}"] if s.shape else []
        where += [s.dtype] if s.dtype and s.dtype != lad.dtype else []
        what = s.what + (f" ({', '.join(where)})" if where else "")
        cell = ("historical: " + s.recorded) if not s.runs else measured.get(s.step,
                                                                              NOT_MEASURED)
        cols = [wrap(s.step, WIDTHS[0]), wrap(what, WIDTHS[1]), wrap(cell, WIDTHS[2]),
                wrap(s.call_text(), WIDTHS[3])]
        for i in range(max(map(len, cols))):
            lines.append("| " + " | ".join((c[i] if i < len(c) else "").ljust(w)
                                            for c, w in zip(cols, WIDTHS)) + " |")
    return lines


def find_block(lines):
    """(first, last) line indices of the ladder block in a file's lines: from the line that
    starts with "Ladder (" to the last line of the table after it."""
    first = next(i for i, line in enumerate(lines) if line.startswith("Ladder ("))
    top = next(i for i in range(first, len(lines)) if re.match(r"\| step +\|", lines[i]))
    last = top
    while last + 1 < len(lines) and lines[last + 1].startswith("|"):
        last += 1
    return first, last


def parse_measured(lines):
    """{step label: its measured cell} of a file's ladder table, cells of continued rows
    joined."""
    first, last = find_block(lines)
    top = next(i for i in range(first, last + 1) if re.match(r"\| step +\|", lines[i]))
    cells, label = {}, None
    for line in lines[top + 2:last + 1]:
        parts = [p.strip() for p in line.strip().strip("|").split("|")]
        if parts[0]:
            label = parts[0]
            cells[label] = []
        if len(parts) > 2 and parts[2]:
            cells[label].append(parts[2])
    return {k: " ".join(v) for k, v in cells.items()}


def kernel_path(lad, root=None):
    """The file of a ladder, in ``root`` (a checkout) or beside the imported kernels_numba."""
    if root is not None:
        return Path(root) / lad.file
    from . import kernels_numba
    return Path(kernels_numba.__file__).parent / f"{lad.name}.py"


def write(results, device, date, root=None, ladders=LADDERS):
    """Put the measured steps of ``results`` (passed checks only) into their files' tables,
    keeping the other cells as they are. Returns the paths written."""
    written = []
    for lad in ladders:
        path = kernel_path(lad, root)
        lines = path.read_text(encoding="utf-8").split("\n")
        cells = {k: v for k, v in parse_measured(lines).items()
                 if k in {s.step for s in lad.steps if s.runs}}
        new = {r["step"]: measured_text(r, device, date) for r in results
               if r["ladder"] == lad.name and r["passed"] and r["ms"] is not None}
        if not new:
            continue
        cells.update(new)
        first, last = find_block(lines)
        lines[first:last + 1] = render(lad, cells)
        path.write_text("\n".join(lines), encoding="utf-8")
        written.append(str(path))
    return written


def short_device(name):
    """"NVIDIA H200" → "H200"."""
    return re.sub(r"^NVIDIA\s+", "", str(name)).strip()


def save(path, results, device, date):
    with open(path, "w") as f:
        json.dump({"device": device, "date": date, "results": results}, f, indent=1)


def load(path):
    with open(path) as f:
        data = json.load(f)
    return data["results"], data["device"], data["date"]


def today():
    return datetime.date.today().isoformat()


__all__ = ["LADDERS", "Ladder", "Step", "measure", "render", "write", "parse_measured",
           "find_block", "table_rows", "TABLE_HEADERS", "ladder_names", "save", "load",
           "short_device", "today", "kernel_path", "shape_text", "NOT_MEASURED"]
