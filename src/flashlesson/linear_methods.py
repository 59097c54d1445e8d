"""``flashlesson.linear_attention``: §45's linear attention (a different model, O(N·d²)).

Validation is attention's (``attention_methods.operands``: float32 [B, H, N, d], matching
shapes, NumPy or device arrays); the kernels are in ``kernels_numba/linear_attention.py``, the
oracle ``reference.linear_attention``.
"""

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
from numba import cuda

from .kernels_numba import linear_attention as KL

from . import checks, device
from .arrays import empty, result
from .attention_methods import operands
from .launch import stride_grid

MAX_HEAD_DIM = 128
WARP = 32


@dataclass(frozen=True)
class LinearConfig:
    """Thread layout and tiles of the linear-attention kernels (kernels_numba/linear_attention.py).

    G: row groups, C·G threads (C = d + 1 rounded up to 32); each thread holds D/G rows of KV'.
    BN: keys (state, causal) or queries (output) per shared-memory tile.
    splits: non-causal only, key splits per (b, h) whose KV' are summed (None: enough to fill
        the GPU; 1 in the simulator).
    """
    G: int = 1
    BN: int = 16
    splits: Optional[int] = None

    def __post_init__(self):
        checks.config_fields(self)      # G, BN positive ints; splits None or a positive int

    def check(self, d):
        problems = []
        if self.G not in (1, 2, 4, 8):
            problems.append(f"G = {self.G} must be 1, 2, 4 or 8")
        if not 1 <= self.BN <= 64:
            problems.append(f"BN = {self.BN} must be between 1 and 64")
        if not problems:
            c = columns(d)
            if c * self.G > 1024:
                problems.append(f"C·G = {c}·{self.G} threads exceed 1024")
            smem = 4 * (2 * self.BN * rows(d) + self.G * self.BN * c)
            if smem > 48 * 1024:
                problems.append(f"its tiles need {smem} bytes of shared memory (> 48 KiB)")
        if problems:
            raise ValueError(f"config {self}: " + "; ".join(problems))


def columns(d):
    """C: the columns of KV' = φ(K)ᵀ[V | 1] (d + 1) rounded up to whole warps."""
    return -(-(d + 1) // WARP) * WARP


def rows(d):
    """D: the rows of KV' (d) rounded up to 8 (a multiple of every G)."""
    return -(-d // 8) * 8


def default_config(d):
    if device.SIMULATOR:
        return LinearConfig(G=1, BN=8)
    # G = 4 at every d: at d = 128, G = 2 (320 threads holding 64 rows of KV' each) asked for
    # more registers than an SM has (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES on the H200); with
    # G = 4 the tiles of 16 rows would need 56 KB of shared memory there, so 8 rows
    return LinearConfig(G=4, BN=16 if d <= 64 else 8)


def linear_attention(q, k, v, *, causal=False, config=None):
    """§45: linear attention O = φ(Q)(φ(K)ᵀV) / (φ(Q)(φ(K)ᵀ1)), φ(x) = elu(x) + 1, over float32
    q [B, H, Nq, d] and k, v [B, H, Nk, d] (d ≤ 128). A different model from softmax attention
    (``attention``), in O((Nq + Nk)·d²) instead of O(Nq·Nk·d).

    causal: query i sees keys j ≤ i + Nk − Nq (bottom-right, as ``attention``); a query that
        sees no key gives O = 0.
    config: a ``LinearConfig`` (thread groups, tile, key splits); default per d.
    NumPy in → NumPy out; device arrays in → device arrays out, without host copies.
    """
    qo, ko, vo = operands(q, k, v)
    B, H, nq, d = qo.shape
    nk = ko.shape[2]
    causal = checks.flag(causal, "causal")
    if d > MAX_HEAD_DIM:
        raise ValueError(f"q: head dimension d = {d} is not supported by linear attention "
                         f"(1 … {MAX_HEAD_DIM}: each thread keeps d/G rows of KV' in registers)")
    cfg = default_config(d) if config is None else config
    if not isinstance(cfg, LinearConfig):
        raise TypeError(f"config: expected a LinearConfig, got {type(cfg).__name__}")
    cfg.check(d)
    if B * H * nq == 0 or nk == 0:      # empty: no launch; a query with no key gives O = 0
        return checks.filled((B, H, nq, d), np.float32, 0.0, qo.on_host)
    bh = B * H
    q3 = qo.device_view((bh, nq, d))
    k3 = ko.device_view((bh, nk, d))
    v3 = vo.device_view((bh, nk, d))
    o3 = empty((bh, nq, d), np.float32)
    D, C = rows(d), columns(d)
    threads = C * cfg.G
    if causal:
        KL.linear_causal_kernel(D, C, cfg.G, cfg.BN)[bh, threads](q3, k3, v3, o3, d, nq, nk)
    else:
        splits = cfg.splits or _auto_blocks(bh, -(-nk // cfg.BN))
        splits = min(splits, nk)
        per = -(-nk // splits)
        splits = -(-nk // per)                       # no empty split
        part = cuda.device_array((bh, splits, D * C), np.float32)
        KL.linear_state_kernel(D, C, cfg.G, cfg.BN)[(splits, bh), threads](
            k3, v3, part, d, nk, per)
        state = cuda.device_array((bh, D * C), np.float32)
        KL.sum_partials[stride_grid(bh * D * C)](part, state)
        qblocks = _auto_blocks(bh, -(-nq // cfg.BN))
        KL.linear_out_kernel(D, C, cfg.G, cfg.BN)[(qblocks, bh), threads](q3, state, o3, d, nq)
    shape = (B, H, nq, d)
    if qo.on_host:
        return o3.copy_to_host().reshape(shape)
    return result(o3, shape)


def _auto_blocks(bh, most):
    """Blocks per (b, h) for about four blocks per SM over the grid (1 in the simulator)."""
    if device.SIMULATOR:
        return 1
    sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    return max(1, min(most, math.ceil(4 * sms / bh)))


__all__ = ["LinearConfig", "linear_attention", "default_config", "MAX_HEAD_DIM"]
