"""``flashlesson.attention_methods``: naive (§14) and FlashAttention (§23–24, §32, §34) forward passes,
and the merge of partial results (§22). Validation, the registry of attention methods, launch
configurations and dispatch live here; the kernels are in ``kernels_numba/attention.py`` and
``kernels_numba/gemm.py``.
"""

import math
from dataclasses import dataclass

import numpy as np
from numba import cuda

from kernels_numba import attention as KA
from kernels_numba import gemm as KG

from . import device
from .arrays import Operand
from .launch import launch, max_shared_bytes
from .softmax_methods import softmax as _softmax

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


# Defaults per head dimension, from the H200 sweep (scripts/tune_attention.py; README).
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
# The naive path's GEMM tiles (BM, BN, TY, TX): 64×64 with 256 threads; 16×16 with 64 threads
# in the simulator.
GEMM_TILES = (16, 16, 8, 8) if device.SIMULATOR else (64, 64, 16, 16)


# When the grid of (Q tiles × B·H) blocks would not even give every SM one block (B1 H16 N256:
# 32 blocks for 132 SMs), tiles of 32 query rows make four times as many blocks.
SMALL_GRID_CONFIGS = (
    (64, FlashConfig(Br=32, Bc=64, TR=8, TC=8)),
    (128, FlashConfig(Br=32, Bc=32, TR=8, TC=8)),
    (256, FlashConfig(Br=32, Bc=64, TR=8, TC=16)),
)


def default_config(d, nq=None, bh=None):
    """The tile configuration for head dimension d (and, given nq and B·H, the grid size)."""
    if device.SIMULATOR:
        return SIM_CONFIG
    if not 1 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"head dimension d = {d}: at most {MAX_HEAD_DIM} is supported")
    cfg = next(c for limit, c in GPU_CONFIGS if d <= limit)
    if nq is not None and bh is not None:
        sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
        if -(-nq // cfg.Br) * bh < sms:
            cfg = next(c for limit, c in SMALL_GRID_CONFIGS if d <= limit)
    return cfg


@dataclass(frozen=True)
class AttentionMethod:
    name: str
    sections: str
    idea: str
    kernels: str
    hbm_extra: str          # what it keeps in HBM beyond Q, K, V, O (and LSE)


METHODS = {m.name: m for m in [
    AttentionMethod("naive", "14", "three launches: S = QKᵀ·scale, P = softmax(S), O = PV",
                    "gemm.matmul_kernel, softmax (auto), gemm.matmul_kernel",
                    "S and P, [B·H, Nq, Nk] each"),
    AttentionMethod("flash", "23–24, 32, 34", "one kernel: Q tile on chip, K/V tiles streamed, "
                    "online softmax; causal tiles above the diagonal skipped",
                    "attention.flash_forward_kernel", "nothing (m, l, acc stay on chip)"),
]}
CHOICES = tuple(METHODS)


def _check_scale(scale, d):
    if scale is None:
        return 1.0 / math.sqrt(d)
    try:
        value = float(scale)
    except (TypeError, ValueError):
        raise TypeError(f"scale: expected a real number or None, got {type(scale).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"scale: expected a finite number, got {scale!r}")
    return value


def _operands(q, k, v):
    qo = Operand(q, "q", (np.float32,), ndim=4)
    ko = Operand(k, "k", (np.float32,), ndim=4)
    vo = Operand(v, "v", (np.float32,), ndim=4)
    if not (qo.on_host == ko.on_host == vo.on_host):
        raise TypeError("q, k, v: all three must be NumPy arrays or all three device arrays")
    B, H, nq, d = qo.shape
    if ko.shape[:2] != (B, H) or vo.shape[:2] != (B, H):
        raise ValueError(f"k, v: batch and heads must match q's {(B, H)}; got k {ko.shape}, "
                         f"v {vo.shape}")
    if ko.shape[3] != d or vo.shape[3] != d:
        raise ValueError(f"k, v: head dimension must be q's d = {d}; got k {ko.shape}, "
                         f"v {vo.shape}")
    if vo.shape[2] != ko.shape[2]:
        raise ValueError(f"v: must have as many keys as k ({ko.shape[2]}); got {vo.shape[2]}")
    if nq < 1 or ko.shape[2] < 1:
        raise ValueError(f"q, k: need at least one query and one key; got Nq = {nq}, "
                         f"Nk = {ko.shape[2]}")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"q: head dimension d = {d} is not supported (1 … {MAX_HEAD_DIM})")
    if B * H > 65535:
        raise ValueError(f"q: B·H = {B * H} exceeds the 65535 blocks of a grid's y dimension")
    return qo, ko, vo


def attention(q, k, v, *, causal=False, scale=None, return_lse=False, method="flash",
              config=None):
    """Softmax attention O = softmax(Q Kᵀ · scale) V, over float32 q [B, H, Nq, d] and
    k, v [B, H, Nk, d].

    method: "flash" (§23–24, §32: one fused kernel) or "naive" (§14: three launches, S and P
        in global memory).
    causal: mask keys after each query, aligned bottom-right when Nq ≠ Nk (query i sees key j
        iff j ≤ i + Nk − Nq, as flash-attn ≥ 2.1; torch SDPA's is_causal aligns top-left).
        Rows that see no key give O = 0 and LSE = −inf.
    scale: defaults to 1/√d. return_lse: also return LSE = log Σ_j e^{S_ij}, float32 [B, H, Nq].
    config: a ``FlashConfig`` (tile sizes, threads) for method "flash"; default per head dim.
    NumPy in → NumPy out; device arrays in → device arrays out, without host copies.
    """
    if method not in CHOICES:
        raise ValueError(f"method: expected one of {', '.join(CHOICES)}; got {method!r}")
    qo, ko, vo = _operands(q, k, v)
    B, H, nq, d = qo.shape
    nk = ko.shape[2]
    scale = _check_scale(scale, d)
    causal = bool(causal)
    bh = B * H
    q3 = qo.device_view((bh, nq, d))
    k3 = ko.device_view((bh, nk, d))
    v3 = vo.device_view((bh, nk, d))
    o3 = cuda.device_array((bh, nq, d), np.float32)
    lse2 = cuda.device_array((bh, nq), np.float32)
    if method == "flash":
        cfg = config or default_config(d, nq, bh)
        if not isinstance(cfg, FlashConfig):
            raise TypeError(f"config: expected a FlashConfig, got {type(cfg).__name__}")
        cfg.check(d)
        vec = d % 4 == 0 and _aligned16(q3, k3, v3)
        kernel = KA.flash_forward_kernel(cfg.head_dim(d), cfg.Br, cfg.Bc, cfg.TR, cfg.TC,
                                         causal, vec, cfg.KU, cfg.GROUP)
        tiles = -(-nq // cfg.Br)
        launch(kernel, (bh, tiles) if causal else (tiles, bh), cfg.threads,
               (q3, k3, v3, o3, lse2, np.float32(scale)), cfg.smem_bytes(d))
    else:
        if config is not None:
            raise ValueError("config: only method 'flash' takes a configuration")
        _naive(q3, k3, v3, o3, lse2, scale, causal, return_lse)
    shape = (B, H, nq, d)
    if qo.on_host:
        o = o3.copy_to_host().reshape(shape)
        return (o, lse2.copy_to_host().reshape(shape[:3])) if return_lse else o
    o = o3.reshape(shape)
    return (o, lse2.reshape(shape[:3])) if return_lse else o


def _aligned16(*arrays):
    """True if every array's data starts on a 16-byte boundary (then rows of d % 4 == 0 floats
    can be read 16 bytes at a time). Fresh allocations always do; a view into a bigger tensor
    may not."""
    if device.SIMULATOR:
        return True
    return all(a.__cuda_array_interface__["data"][0] % 16 == 0 for a in arrays)


def _naive(q3, k3, v3, o3, lse2, scale, causal, return_lse):
    """§14: S = QKᵀ·scale → HBM; P = softmax(S) → HBM; O = PV."""
    bh, nq, d = q3.shape
    nk = k3.shape[1]
    bm, bn, ty, tx = GEMM_TILES
    s = cuda.device_array((bh, nq, nk), np.float32)         # S, written to global memory
    gemm = KG.matmul_kernel(True, causal, bm, bn, ty, tx)
    gemm[(-(-nk // bn), -(-nq // bm), bh), ty * tx](q3, k3, s, np.float32(scale), nk - nq)
    p = cuda.device_array((bh, nq, nk), np.float32)         # P, written to global memory
    _softmax(s, method="auto", out=p)                      # the softmax kernels, reused
    gemm = KG.matmul_kernel(False, False, bm, bn, ty, tx)
    gemm[(-(-d // bn), -(-nq // bm), bh), ty * tx](p, v3, o3, np.float32(1.0), 0)
    if return_lse:                                          # one more read of S: its row LSE
        rows = bh * nq
        KA.row_lse[-(-rows // 4), 128](s.reshape((rows, nk)), lse2.reshape(rows))


def merge_attention(o_parts, lse_parts):
    """§22: combine outputs computed over disjoint key sets (split-KV, flash-decoding).

    o_parts [P, ..., d] float32 and lse_parts [P, ...] float32 (natural-log LSE of each part);
    returns (o [..., d], lse [...]) as if attention had seen all the keys at once. A part with
    LSE = −inf (it saw no key) contributes nothing. NumPy in → NumPy out; device → device.
    """
    oo = Operand(o_parts, "o_parts", (np.float32,), min_ndim=2)
    lo = Operand(lse_parts, "lse_parts", (np.float32,), min_ndim=1)
    if oo.on_host != lo.on_host:
        raise TypeError("o_parts, lse_parts: both NumPy arrays or both device arrays")
    if oo.shape[:-1] != lo.shape:
        raise ValueError(f"lse_parts: expected shape {oo.shape[:-1]} (o_parts without its last "
                         f"axis), got {lo.shape}")
    n_parts, d = oo.shape[0], oo.shape[-1]
    if n_parts < 1 or d < 1:
        raise ValueError(f"o_parts: need at least one part and d ≥ 1; got shape {oo.shape}")
    rows = int(np.prod(oo.shape[1:-1], dtype=np.int64))
    o = cuda.device_array((rows, d), np.float32)
    lse = cuda.device_array(rows, np.float32)
    if rows:
        KA.merge_attention_kernel[rows, 32](oo.device_view((n_parts, rows, d)),
                                           lo.device_view((n_parts, rows)), o, lse)
    out_shape = oo.shape[1:]
    if oo.on_host:
        return o.copy_to_host().reshape(out_shape), lse.copy_to_host().reshape(out_shape[:-1])
    return o.reshape(out_shape), lse.reshape(out_shape[:-1])
