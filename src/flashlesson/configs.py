"""``flashlesson.configs``: the launch configurations of the attention kernels and their defaults
per device and head dimension — ``FlashConfig`` and ``LessonConfig`` (forward, §23–24/§32),
``BwdConfig`` (backward, §30), the GEMM tiles of the naive paths (§14, §31).

They sit below the operations (``attention_methods``, ``backward_methods``, ``loop_order``) and
the IO model (``io_model``), which all read them; this module imports none of those.
"""

from dataclasses import dataclass

from .kernels_numba import attention as KA
from .kernels_numba import attention_backward as KB

from . import checks, device
from .launch import max_shared_bytes, sm_count

MAX_HEAD_DIM = 256
WARP = 32


@dataclass(frozen=True)
class FlashConfig:
    """Tile sizes and thread layout of the forward kernel (see kernels_numba/attention.py)."""
    Br: int          # query rows per block (Q tile)
    Bc: int          # keys per K/V tile
    TR: int          # thread rows: each thread owns Br/TR query rows
    TC: int          # threads sharing a row (lanes of one warp, a power of 2 ≤ 32)
    KU: int = 1      # inner product loops unrolled KU times
    GROUP: int = 4   # 16-byte tile loads in flight per thread before they are stored

    def __post_init__(self):
        checks.config_fields(self)      # every field a positive int, named if not

    @property
    def threads(self):
        return self.TR * self.TC

    def head_dim(self, d):
        """D: d rounded up to a multiple of 4·TC (the kernel's compile-time head dimension)."""
        w = 4 * self.TC
        return -(-d // w) * w

    def smem_bytes(self, d):
        return 4 * KA.flash_smem_floats(self.head_dim(d), self.Br, self.Bc)

    def check(self, d):
        """Raise a clear error if this configuration cannot run head dimension d."""
        if (self, d) in _CHECKED:           # (frozen: a pair that passed once always passes)
            return
        problems = []
        if self.TC < 1 or self.TC > WARP or self.TC & (self.TC - 1):
            problems.append(f"TC = {self.TC} must be a power of 2 between 1 and 32")
        if self.threads % WARP or not WARP <= self.threads <= 1024:
            problems.append(f"TR·TC = {self.threads} threads must be a multiple of 32, ≤ 1024")
        if self.TR < 1 or self.Br % (4 * self.TR):
            problems.append(f"Br = {self.Br} must be a multiple of 4·TR = {4 * self.TR}")
        if self.Bc % (4 * max(self.TC, 1)):
            problems.append(f"Bc = {self.Bc} must be a multiple of 4·TC = {4 * self.TC}")
        if self.KU not in (1, 2, 4) or self.GROUP not in (1, 2, 4, 8):
            problems.append(f"KU = {self.KU} must be 1, 2 or 4 and GROUP = {self.GROUP} "
                            "1, 2, 4 or 8")
        if not problems and self.smem_bytes(d) > max_shared_bytes():
            problems.append(f"its tiles need {self.smem_bytes(d)} bytes of shared memory for "
                            f"d = {d}; this device allows {max_shared_bytes()}")
        if not problems:
            per_thread = (self.Br // self.TR) * (self.Bc // self.TC + self.head_dim(d) // self.TC)
            if per_thread > 160:
                problems.append(f"each thread would hold {per_thread} scores and outputs in "
                                "registers (> 160): they would spill")
        if problems:
            raise ValueError(f"config {self}: " + "; ".join(problems))
        _CHECKED.add((self, d))


# (config, d) pairs whose check passed, FlashConfig's and BwdConfig's: a call checks its config
# once per process, not per call.
_CHECKED = set()


# Defaults per head dimension, from the H200 sweep (scripts/tune_attention.py; docs/results.md).
# In the simulator: small tiles and one warp (the tests add multi-warp configurations).
# Measured 2026-11-30 at B1 H16 N4096, fp32 (TFLOP/s), with the grouped 16-byte tile loads:
# d=64 (128, 64, 16, 8, KU=2, GROUP=2) 28.9 vs 27.0 with KU=1, GROUP=4 and 24.5 for
# (64, 64, 16, 8); d=128 (128, 32, 16, 8, 2, 2) 28.3 vs 26.6 (KU=1, GROUP=4) and 24.5 for
# (64, 32, 16, 8); d=256 (64, 64, 16, 16, 2, 4) 24.5 vs 22.0 with KU=1. (Repeated runs move
# these by ±3%.) The d ≤ 128 winners hold 8 rows × 8 columns per thread (255 registers): fewer
# loads per multiply-add beat occupancy. Before the tile loads were grouped (one global load, then its
# store, thirty times per tile) the same tiles ran at 14.0 (d=64, d=128).
GPU_CONFIGS = (
    (64, FlashConfig(Br=128, Bc=64, TR=16, TC=8, KU=2, GROUP=2)),
    (128, FlashConfig(Br=128, Bc=32, TR=16, TC=8, KU=2, GROUP=2)),
    (256, FlashConfig(Br=64, Bc=64, TR=16, TC=16, KU=2, GROUP=4)),
)
SIM_CONFIG = FlashConfig(Br=32, Bc=16, TR=8, TC=4)
# Above d = 144, SIM_CONFIG's threads would hold more than the 160 floats ``check`` allows: two
# warps with 8 lanes a row (4 rows × (4 + 256/8) floats at d = 256), so every d of 1 … 256 runs
# with the default tiles.
SIM_WIDE_CONFIG = FlashConfig(Br=32, Bc=32, TR=8, TC=8)
# The naive path's GEMM tiles (BM, BN, TY, TX): 64×64 with 256 threads; 16×16 with 64 threads
# in the simulator.
GEMM_TILES = (16, 16, 8, 8) if device.SIMULATOR else (64, 64, 16, 16)


# When the grid of (Q tiles × B·H) blocks would leave three quarters of the SMs idle (B1 H16
# N256: 32 blocks for 132 SMs), tiles of 32 query rows make four times as many blocks. (At one
# wave, B1 H16 N1024 = 128 blocks, the default tiles still win: 24.7 vs 19.5 TFLOP/s for
# (32, 64, 8, 8) in the sweep; the N ≤ 256 case itself is not benchmarked yet.)
SMALL_GRID_CONFIGS = (
    (64, FlashConfig(Br=32, Bc=64, TR=8, TC=8)),
    (128, FlashConfig(Br=32, Bc=32, TR=8, TC=8)),
    (256, FlashConfig(Br=32, Bc=64, TR=8, TC=16)),
)


def default_config(d, nq=None, bh=None):
    """The tile configuration for head dimension d (and, given nq and B·H, the grid size)."""
    if not 1 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"head dimension d = {d}: at most {MAX_HEAD_DIM} is supported")
    if device.SIMULATOR:
        return SIM_CONFIG if d <= 144 else SIM_WIDE_CONFIG
    cfg = next(c for limit, c in GPU_CONFIGS if d <= limit)
    if nq is not None and bh is not None:
        if 4 * -(-nq // cfg.Br) * bh <= sm_count():       # (asked of the device once)
            cfg = next(c for limit, c in SMALL_GRID_CONFIGS if d <= limit)
    return cfg


@dataclass(frozen=True)
class LessonConfig:
    """Tiles of the lesson-tier forward kernel (kernels_numba/lesson/attention.py): Br query rows
    (= Br threads, one a row) and Bc keys per K/V tile; any Br in 1 … 1024 and Bc ≥ 1 (§33:
    Bc = 2). Shared memory: 2·Bc·d float32 (≤ 48 KB, static)."""
    Br: int
    Bc: int

    def __post_init__(self):
        checks.config_fields(self)

    def check(self, d):
        if self.Br > 1024:
            raise ValueError(f"config {self}: Br = {self.Br} threads a block; at most 1024")
        if 2 * self.Bc * d * 4 > 48 * 1024:
            raise ValueError(f"config {self}: Kj and Vj need 2·Bc·d·4 = {8 * self.Bc * d} bytes "
                             "of static shared memory; at most 49152")


def default_lesson_config(d):
    """The lesson kernel's tiles: Br = 64 rows, Bc = 32 keys (16 for d > 128, so that Kj, Vj
    fit in 48 KB); in the simulator Br = Bc = 16."""
    if device.SIMULATOR:
        return LessonConfig(Br=16, Bc=16)
    return LessonConfig(Br=64, Bc=32 if d <= 128 else 16)


# ---------------------------------------------------------------------------------------------
# The backward (§30–31)
# ---------------------------------------------------------------------------------------------
# Registers: a coarse guard on the floats a thread keeps live in its inner loops (gradient
# accumulators + S and dP of a tile; ``BwdConfig.registers_floats``). The GPU defaults below
# hold 96–160 and compile for sm_90 with 0 spill bytes and 0 stack, at 128–254 registers
# (ptxas -v, every CAUSAL/PAD/DROPOUT/VEC variant); the operand and tile-loader registers come
# on top, so much more would spill.
MAX_REGISTER_FLOATS = 160


@dataclass(frozen=True)
class BwdConfig:
    """Tile sizes and thread layouts of the two backward kernels (kernels_numba/
    attention_backward.py). The dK/dV kernel keeps Bc keys per block and streams Q tiles of Br
    queries (each of its TR·TC threads owns Bc/TR keys); the dQ kernel keeps dq_Br queries per
    block and streams K/V tiles of dq_Bc keys (each thread owns dq_Br/dq_TR queries)."""
    Bc: int          # dK/dV kernel: keys per block (Kj, Vj on chip; dKj, dVj in registers)
    Br: int          # dK/dV kernel: queries per streamed Q/dO tile
    TR: int          # dK/dV kernel: thread rows; each thread owns Bc/TR keys
    TC: int          # dK/dV kernel: threads sharing a key row (a power of 2 ≤ 32)
    dq_Br: int       # dQ kernel: queries per block (Qi, dOi on chip; dQi in registers)
    dq_Bc: int       # dQ kernel: keys per streamed K/V tile
    dq_TR: int       # dQ kernel: thread rows; each thread owns dq_Br/dq_TR queries
    dq_TC: int       # dQ kernel: threads sharing a query row (a power of 2 ≤ 32)

    def __post_init__(self):
        checks.config_fields(self)      # every field a positive int, named if not

    @property
    def threads(self):
        """(threads of the dK/dV kernel, threads of the dQ kernel)."""
        return self.TR * self.TC, self.dq_TR * self.dq_TC

    @staticmethod
    def _head_dim(d, tc):
        w = 4 * tc
        return -(-d // w) * w

    def head_dims(self, d):
        """D of each kernel: d rounded up to a multiple of 4·TC (its compile-time head dim)."""
        return self._head_dim(d, self.TC), self._head_dim(d, self.dq_TC)

    def smem_bytes(self, d):
        """(shared memory of the dK/dV kernel, of the dQ kernel), in bytes."""
        D1, D2 = self.head_dims(d)
        return (4 * KB.dkdv_smem_floats(D1, self.Bc, self.Br),
                4 * KB.dq_smem_floats(D2, self.dq_Br, self.dq_Bc))

    def registers_floats(self, d):
        """Floats each thread keeps in registers across the inner loops, per kernel: the
        gradient rows it accumulates plus S and dP of one tile (dK/dV: 2 accumulators)."""
        D1, D2 = self.head_dims(d)
        rm, cn = self.Bc // self.TR, self.Br // self.TC
        dkdv = rm * (2 * D1 // self.TC + 2 * cn)
        rm, cn = self.dq_Br // self.dq_TR, self.dq_Bc // self.dq_TC
        dq = rm * (D2 // self.dq_TC + 2 * cn)
        return dkdv, dq

    def check(self, d):
        """Raise a clear error if this configuration cannot run head dimension d."""
        if (self, d) in _CHECKED:
            return
        problems = []
        for kernel, rows, cols, tr, tc, rows_name, cols_name in (
                ("dK/dV", self.Bc, self.Br, self.TR, self.TC, "Bc", "Br"),
                ("dQ", self.dq_Br, self.dq_Bc, self.dq_TR, self.dq_TC, "dq_Br", "dq_Bc")):
            pre = "dq_" if kernel == "dQ" else ""
            threads = tr * tc
            if tc < 1 or tc > WARP or tc & (tc - 1):
                problems.append(f"{pre}TC = {tc} must be a power of 2 between 1 and 32")
            if threads % WARP or not WARP <= threads <= 1024:
                problems.append(f"{pre}TR·{pre}TC = {threads} threads ({kernel} kernel) must "
                                "be a multiple of 32, ≤ 1024")
            if tr < 1 or rows % (4 * tr):
                problems.append(f"{rows_name} = {rows} must be a multiple of 4·{pre}TR = "
                                f"{4 * tr}")
            if tc >= 1 and cols % (4 * tc):
                problems.append(f"{cols_name} = {cols} must be a multiple of 4·{pre}TC = "
                                f"{4 * tc}")
        if not problems:
            for kernel, nbytes in zip(("dK/dV", "dQ"), self.smem_bytes(d)):
                if nbytes > max_shared_bytes():
                    problems.append(f"the {kernel} kernel's tiles need {nbytes} bytes of shared "
                                    f"memory for d = {d}; this device allows "
                                    f"{max_shared_bytes()}")
            for kernel, floats in zip(("dK/dV", "dQ"), self.registers_floats(d)):
                if floats > MAX_REGISTER_FLOATS and not device.SIMULATOR:   # (no registers)
                    problems.append(f"each thread of the {kernel} kernel would hold {floats} "
                                    f"gradients and scores in registers (> "
                                    f"{MAX_REGISTER_FLOATS}): they would spill")
        if problems:
            raise ValueError(f"config {self}: " + "; ".join(problems))
        _CHECKED.add((self, d))


# Defaults per head dimension, from the H200 sweep (scripts/tune_backward.py), B1 H16 N4096,
# 2026-11-30, TFLOP/s counted as 2.5 × the forward: d=64 (128, 64, 32, 8) 12.7 vs 12.1 for
# (64, 64, 16, 8), 11.0 for (64, 32, 16, 8), 10.9 for (64, 64, 16, 16); d=128 (64, 64, 16, 16)
# 11.9 vs 11.5 for (64, 32, 16, 8), 10.5 for (32, 32, 8, 8), 9.9 for (32, 64, 8, 16). d=256:
# not swept. The simulator runs one warp.
BWD_GPU_CONFIGS = (
    (64, BwdConfig(Bc=128, Br=64, TR=32, TC=8, dq_Br=128, dq_Bc=64, dq_TR=32, dq_TC=8)),
    (128, BwdConfig(Bc=64, Br=64, TR=16, TC=16, dq_Br=64, dq_Bc=64, dq_TR=16, dq_TC=16)),
    (256, BwdConfig(Bc=32, Br=64, TR=8, TC=16, dq_Br=32, dq_Bc=64, dq_TR=8, dq_TC=16)),
)
BWD_SIM_CONFIG = BwdConfig(Bc=32, Br=16, TR=8, TC=4, dq_Br=32, dq_Bc=16, dq_TR=8, dq_TC=4)

# The naive path's GEMM tiles (BM, BN, TY, TX): the forward's on the GPU; in the simulator 32×32
# tiles with 64 threads (fewer simulated blocks for the same work than the forward's 16×16).
NAIVE_GEMM_TILES = (32, 32, 8, 8) if device.SIMULATOR else GEMM_TILES


def bwd_default_config(d):
    """The backward's tiles for head dimension d (``BwdConfig``)."""
    if device.SIMULATOR:
        return BWD_SIM_CONFIG
    for limit, cfg in BWD_GPU_CONFIGS:
        if d <= limit:
            return cfg
    raise ValueError(f"head dimension d = {d}: at most {MAX_HEAD_DIM} is supported")
