"""§37 — attention on tensor cores: method "flash_tc" (kernels_numba/attention_tc.py).

    flashlesson.attention(q, k, v, ...)                     fp16 / bf16 inputs come here by
                                                            themselves (method "flash")
    flashlesson.attention(q, k, v, ..., method="flash_tc")  also float32: 3xTF32 on tensor cores
    flashlesson.attention(q, k, v, ..., method="flash_wgmma")  Hopper (sm_90a): §42–43 on
                                                   wgmma, fp16/bf16, d = 64 or 128 (a
                                                   ``WgmmaConfig``; the default where it
                                                   measured faster: wgmma_is_default):
                                                   kernels_numba/attention_wgmma.py
    flashlesson.attention_backward(..., method="flash_wgmma")  its backward on wgmma (a
                                                   ``WgmmaBwdConfig``; the default on Hopper
                                                   at d = 64 and 128: wgmma_bwd_is_default):
                                                   kernels_numba/attention_wgmma_backward.py

Input formats:
- float16 NumPy or device arrays → the fp16 kernel, O in float16.
- bf16: NumPy has no bfloat16, so bf16 data travels as its raw 16-bit patterns in a
  :class:`BFloat16` (``BFloat16.from_float32(x)`` rounds to nearest even, ``.to_float32()`` goes
  back); a torch ``bfloat16`` CUDA tensor is read through DLPack-free reinterpretation (its bytes
  viewed as int16), never through ``__cuda_array_interface__``, which torch reports as float16.
  O comes back as a BFloat16 (its ``.bits`` a device array for device inputs).
- float32 with ``method="flash_tc"`` → 3xTF32 (fp32-level accuracy on tensor cores).

Limits: any head dim 1 … 256 for fp16/bf16 (the kernels run D = d rounded up to a multiple of
16, the columns past d zeros on chip and never written: kernels_numba/attention_tc.head_io;
rows travel as 16-byte pieces when d % 8 == 0, else half by half), multiples of 8 up to 256
for 3xTF32; causal, key padding and LSE as in ``attention``; no dropout (the CUDA-core "flash"
method has it).
"""

import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np
from numba import cuda

from .kernels_numba import attention_tc as KT
from .kernels_numba import attention_wgmma as KW
from .kernels_numba import attention_wgmma_backward as KWB
from .kernels_numba import attention_wgmma_tf32 as KWF
from .kernels_numba import attention_wgmma_tf32_backward as KWFB
from .kernels_numba.lesson import tensor_core as LT

from . import checks, device
from .arrays import DevArray, Operand, empty, is_device_array, result, using
from .configs import MAX_HEAD_DIM
from .launch import aligned16, compute_capability, dummy, launch, launch_beside, max_shared_bytes, \
    rows16, stride_grid


@dataclass(frozen=True)
class TcConfig:
    """Tiles of the tensor-core kernels: Bc keys per K/V tile, WARPS warps, MT m16 row blocks
    per warp (Br = 16·MT·WARPS; fp16/bf16 only), PF: prefetch the next K/V tile into
    registers during the current tile's products (fp16/bf16 only), ASYNC: the next tile by
    cp.async instead and B fragments by ldmatrix (fp16/bf16 only; not with PF)."""
    Bc: int = 64
    WARPS: int = 4
    MT: int = 1
    PF: bool = False
    ASYNC: bool = False

    def __post_init__(self):
        checks.config_fields(self)      # Bc, WARPS, MT positive ints; PF, ASYNC bools

    def check(self, tf32):
        if self.Bc < 16 or self.Bc % 16 or self.Bc > 128:
            raise ValueError(f"config: Bc must be a multiple of 16 in 16 … 128, got {self.Bc}")
        if self.WARPS not in (1, 2, 4, 8):
            raise ValueError(f"config: WARPS must be 1, 2, 4 or 8, got {self.WARPS}")
        if self.MT not in (1, 2):
            raise ValueError(f"config: MT must be 1 or 2, got {self.MT}")
        if tf32 and (self.MT != 1 or self.PF or self.ASYNC):
            raise ValueError("config: the 3xTF32 kernel takes MT = 1, PF = False and ASYNC = "
                             "False only")
        if self.PF and self.ASYNC:
            raise ValueError("config: PF and ASYNC are two ways to prefetch; choose one")

    @property
    def Br(self):
        return 16 * self.MT * self.WARPS


def head_dim_check(d, tf32, fmt, what):
    """Refuse a head dimension the tensor-core kernels do not take: fp16/bf16 any d in
    1 … 256 (padded to a multiple of 16 inside the kernels), 3xTF32 multiples of 8."""
    if tf32 and (d % 8 or not 8 <= d <= MAX_HEAD_DIM):
        raise ValueError(f"q: {what} needs a head dimension that is a multiple of 8 up to "
                         f"{MAX_HEAD_DIM} (3xTF32); got d = {d}. Use method 'flash' (CUDA "
                         "cores, any d) instead")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"q: {what} needs a head dimension in 1 … {MAX_HEAD_DIM} ({fmt}); "
                         f"got d = {d}")


def default_tc_config(d, tf32):
    """fp16/bf16: chosen by the kernels' padded head dimension D (padded_head_dim(d))."""
    if device.SIMULATOR:
        return TcConfig(Bc=16, WARPS=2)
    if tf32:
        return TcConfig(Bc=64 if d <= 64 else 32, WARPS=4)
    d = KT.padded_head_dim(d)
    # scripts/tune_tc.py on the H200 (2026-11-30), fp16, × SDPA flash in the same process:
    # B2 H16 N4096 d64 — ASYNC (cp.async stages, ldmatrix), MT = 2 (each K/V fragment feeds
    # two mmas), 8 warps 0.80, 4 warps 0.74; the register-staged MT = 2 0.59; B1 H16 N8192
    # d128 — ASYNC, Bc 128, 8 warps 0.66; Bc 64 0.52; register-staged 8 warps 0.47; the
    # register prefetch (PF) lost at both. (With mma.ex2 and 32-bit shared addresses since:
    # 0.90 and 0.77 in docs/results.md's tables.)
    if d <= 64:
        return TcConfig(Bc=64, WARPS=8, MT=2, ASYNC=True)
    if d <= 128:                # 136 KB of shared memory at d = 128; on a GPU allowing less
        if KT.tc_smem_bytes(d, 128, False, True) <= max_shared_bytes():   # (99 KB: sm_86/89)
            return TcConfig(Bc=128, WARPS=8, ASYNC=True)
        return TcConfig(Bc=64, WARPS=8, ASYNC=True)                      # 68 KB
    return TcConfig(Bc=32, WARPS=4)


class BFloat16:
    """bf16 data as its raw 16-bit patterns (uint16), NumPy or device array."""

    def __init__(self, bits):
        if not (isinstance(bits, np.ndarray) or is_device_array(bits)):
            raise TypeError(f"BFloat16: expected a uint16 NumPy or device array of bf16 bit "
                            f"patterns, got {type(bits).__name__}")
        if np.dtype(bits.dtype) != np.uint16:
            raise TypeError(f"BFloat16: expected uint16 bit patterns, got {bits.dtype}")
        self.bits = bits

    @property
    def shape(self):
        return tuple(self.bits.shape)

    @classmethod
    def from_float32(cls, x):
        """Round float32 values to bf16 (nearest even; NaN stays NaN)."""
        b = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
        nan = (b & 0x7F800000) == 0x7F800000
        nan &= (b & 0x7FFFFF) != 0
        r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF
        r = np.where(nan, (b >> 16) | 0x40, r)
        return cls(r.astype(np.uint16))

    def to_float32(self):
        bits = self.bits if isinstance(self.bits, np.ndarray) else self.bits.copy_to_host()
        return (bits.astype(np.uint32) << 16).view(np.float32)

    def __repr__(self):
        return f"BFloat16(shape={self.shape}, on {'host' if isinstance(self.bits, np.ndarray) else 'device'})"


def _torch_bf16(x):
    """A torch bfloat16 CUDA tensor → BFloat16 over the same memory (no copy)."""
    import torch
    return BFloat16(cuda.as_cuda_array(x.detach().contiguous().view(torch.int16)).view(np.uint16))


def is_torch_bf16(x):
    return type(x).__module__.startswith("torch") and str(getattr(x, "dtype", "")) == \
        "torch.bfloat16"


def low_precision(x):
    """Whether ``attention`` should send these inputs to the tensor-core path by itself."""
    if isinstance(x, BFloat16) or is_torch_bf16(x):
        return True
    dtype = getattr(x, "dtype", None)
    if type(x).__module__.startswith("torch"):  # np.dtype() cannot read torch.float16; the
        # tensor's own dtype can (not its __cuda_array_interface__: ~10 µs a call, and it
        # raises for a tensor that requires grad). A CPU tensor: the ordinary path names it.
        return bool(getattr(x, "is_cuda", False)) and \
            str(dtype) == "torch.float16"
    try:
        return np.dtype(dtype) == np.float16
    except TypeError:
        return False


def _operand(x, name):
    """(Operand over 4-byte words or float32, format) with format 'f16', 'bf16' or 'tf32'; a
    device input that does not start on a 16-byte boundary is read from an aligned copy
    (``_aligned``)."""
    if is_torch_bf16(x):
        if not device.SIMULATOR:                # read directly: a bf16 tensor, bits as uint16
            return _aligned(Operand(x, name, (np.uint16,), ndim=4)), "bf16"
        x = _torch_bf16(x)
    if isinstance(x, BFloat16):
        return _aligned(Operand(x.bits, name, (np.uint16,), ndim=4)), "bf16"
    op = Operand(x, name, (np.float16, np.float32), ndim=4)
    return _aligned(op), ("f16" if op.dtype == np.float16 else "tf32")


def _aligned(op):
    """The tensor-core kernels read rows 16 bytes at a time (cp.async, bulk copies, vector
    loads of float32 rows), which needs each row to start on a 16-byte boundary: a fresh
    allocation does (and then every row of d % 8 == 0 halves or d % 4 == 0 floats), a view at a
    storage offset may not. Such an input is read from an aligned copy, made once per call on
    the call's stream; since a call plan's key holds each input's address modulo 16, a call
    with an aligned input never replays a call that copied (the copy is no noted allocation:
    that key is not replayable and always takes this path)."""
    if op.on_host or aligned16(op.obj):
        return op
    if op.torch is not None:                    # torch's allocator aligns to 512 bytes
        t = op.torch.clone(memory_format=sys.modules["torch"].contiguous_format)
        op.torch, op.obj = t, DevArray(t.data_ptr(), op.shape, op.dtype, t)
    else:
        src = op.obj.numba() if isinstance(op.obj, DevArray) else op.obj
        dst = cuda.device_array(op.shape, op.dtype)
        dst.copy_to_device(src)
        op.obj = DevArray.from_interface(dst, op.name)
    return op


def _shapes(qo, ko, vo):
    """(B, H, Nq, Nk, d) of q [B, H, Nq, d], k and v [B, H, Nk, d], checked."""
    B, H, nq, d = qo.shape
    nk = ko.shape[2]
    if ko.shape != (B, H, nk, d) or vo.shape != ko.shape:
        raise ValueError(f"k, v: expected [B, H, Nk, d] with q's B, H, d = {(B, H, d)} and "
                         f"equal shapes; got k {ko.shape}, v {vo.shape}")
    return B, H, nq, nk, d


def _empty_result(qo, fmt, shape, return_lse):
    """The result of a forward with nothing to compute (no rows, or no key): O = 0 of ``shape``
    in the inputs' format, LSE = −inf (a row that sees no key)."""
    o = _filled(shape, fmt, 0.0, qo.on_host, like=qo)
    if not return_lse:
        return o
    return o, checks.filled(shape[:3], np.float32, -np.inf, qo.on_host, like=qo)


def _filled(shape, fmt, value, on_host, like=None):
    """A result of an empty problem in the inputs' format (fp16, BFloat16 bits, float32; a
    torch tensor of that dtype when ``like`` holds one)."""
    if not on_host and getattr(like, "torch", None) is not None:
        import torch
        dtype = {"tf32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[fmt]
        return torch.full(shape, value, dtype=dtype, device=like.torch.device)
    if fmt == "tf32":
        return checks.filled(shape, np.float32, value, on_host)
    if fmt == "f16":
        return checks.filled(shape, np.float16, value, on_host)
    bits = BFloat16.from_float32(np.full(shape, value, np.float32)).bits
    return BFloat16(bits if on_host else cuda.to_device(bits))


def attention_tc(q, k, v, *, causal=False, scale=None, key_padding_mask=None, dropout_p=0.0,
                 return_lse=False, config=None, tier="fast"):
    """``attention(..., method="flash_tc")``; see the module docstring for formats.
    tier="lesson": fp16 only, no config — ``kernels_numba/lesson/tensor_core.py`` (§37: one
    warp per 16-row Q block, plain loads, natural-log softmax)."""
    qo, fq = _operand(q, "q")
    ko, fk = _operand(k, "k")
    vo, fv = _operand(v, "v")
    if not (fq == fk == fv):
        raise TypeError(f"q, k, v: all three must have the same format; got {fq}, {fk}, {fv} "
                        "(fp16, bf16 or float32)")
    if not (qo.on_host == ko.on_host == vo.on_host):
        raise TypeError("q, k, v: all three must be NumPy arrays or all three device arrays")
    B, H, nq, nk, d = _shapes(qo, ko, vo)
    tf32 = fq == "tf32"
    head_dim_check(d, tf32, fq, "method 'flash_tc'")
    if B * H > 65535:
        raise ValueError(f"q: B·H = {B * H} exceeds the 65535 blocks of a grid's y dimension")
    if checks.probability(dropout_p, "dropout_p"):
        raise ValueError("dropout_p: method 'flash_tc' has no dropout; use method 'flash' "
                         "(float32) for dropout")
    scale = checks.scale(scale, d)
    causal = checks.flag(causal, "causal")
    return_lse = checks.flag(return_lse, "return_lse")
    kpm = checks.key_padding_mask(key_padding_mask, B, nk)
    checks.tier(tier, "flash_tc", ("flash_tc",), "attention")
    if tier == "lesson" and fq != "f16":
        raise TypeError(f"q: the lesson tier's tensor-core kernel takes float16 inputs; got "
                        f"{fq} (use tier='fast')")
    if tier == "lesson" and config is not None:
        raise ValueError("config: the lesson tier's tensor-core kernel takes no config")
    if tier == "lesson" and d % 16:     # (its mma k-steps read 16 columns of Qi, Kj at a time)
        raise ValueError(f"q: the lesson tier's tensor-core kernel takes a head dimension that "
                         f"is a multiple of 16; got d = {d} (tier 'fast' pads any d)")
    cfg = config or default_tc_config(d, tf32)
    if not isinstance(cfg, TcConfig):
        raise TypeError(f"config: expected a TcConfig for method 'flash_tc', got "
                        f"{type(cfg).__name__}")
    cfg.check(tf32)
    if B * H * nq == 0 or nk == 0:      # empty: no launch; a row with no key gives 0, −inf
        return _empty_result(qo, fq, (B, H, nq, d), return_lse)
    with using(qo):                     # torch in: torch's stream, torch.empty
        o3, lse2 = _forward_tc(qo, ko, vo, fq, B, H, nq, nk, d, cfg, causal, scale, kpm, tf32,
                                tier)
    o = _unwords(o3, (B, H, nq, d), fq, qo.on_host)
    if not return_lse:
        return o
    return o, (lse2.copy_to_host().reshape((B, H, nq)) if qo.on_host else
               result(lse2, (B, H, nq)))


def _forward_tc(qo, ko, vo, fq, B, H, nq, nk, d, cfg, causal, scale, kpm, tf32, tier):
    bh = B * H
    width, word = _row_format(d, tf32)
    q3 = _words(qo, (bh, nq, width), word)
    k3 = _words(ko, (bh, nk, width), word)
    v3 = _words(vo, (bh, nk, width), word)
    # poisoned as NaN halves (or NaN floats) in tests, then seen as words
    o3 = empty((bh, nq, d), np.float32) if tf32 else \
        empty((bh, nq, d), np.float16, bf16=fq == "bf16").view(word)
    lse2 = empty((bh, nq), np.float32)
    mask = kpm if kpm is not None else dummy("mask")      # (a copy here would synchronize)
    if tier == "lesson":                            # one warp per 16 rows, plain loads
        grid = (-(-nq // 16), bh)
        checks.grid(grid, f"q: {nq} queries in blocks of 16 rows")
        launch(LT.flash_tc_kernel(d, causal, kpm is not None), grid, 32,
               (q3, k3, v3, o3, lse2, np.float32(scale), H, mask))
        return o3, lse2
    D = d if tf32 else KT.padded_head_dim(d)        # the kernels' head dimension
    if tf32:
        kernel = KT.flash_tf32x3_kernel(d, cfg.Bc, cfg.WARPS, causal, kpm is not None)
    else:
        kernel = KT.flash_tc_kernel(D, cfg.Bc, cfg.WARPS, causal, kpm is not None,
                                    fq == "bf16", cfg.MT, bool(cfg.PF), bool(cfg.ASYNC), d,
                                    KT.folds(scale))
    grid = row_grid(causal, bh, -(-nq // cfg.Br), f"q: {nq} queries in tiles of Br = {cfg.Br}",
                    "query tiles")
    launch(kernel, grid, 32 * cfg.WARPS,
           (q3, k3, v3, o3, lse2, np.float32(scale), nq, nk, H, mask),
           KT.tc_smem_bytes(D, cfg.Bc, tf32, bool(cfg.ASYNC)))
    return o3, lse2


def _row_format(d, tf32):
    """(width, element) of the arrays the kernels take: float32 columns (3xTF32); uint32 words
    of two halves when d % 8 == 0 (rows 16-byte aligned: 16-byte pieces); else the uint16
    halves themselves (kernels_numba/attention_tc.head_io)."""
    if tf32:
        return d, np.float32
    return (d // 2, np.uint32) if KT.word_rows(d) else (d, np.uint16)


def row_grid(causal, bh, blocks, what, tiles="row blocks", z=1):
    """The grid of a kernel with a block per row tile, as its block_tile / lane_rows reads it:
    causal (B·H, blocks) — the tiles on the y axis, heaviest first — else (blocks, B·H), and
    z on the z axis where the kernel takes one (the float32 wgmma dK/dV kernel's roles at d =
    128); refused before any launch where CUDA could not launch it (checks.grid; what names
    the tiling, tiles what they are called)."""
    grid = ((bh, blocks) if causal else (blocks, bh)) + ((z,) if z > 1 else ())
    checks.grid(grid, what + (f" (causal: {tiles} on the grid's y axis)" if causal else ""))
    return grid


def _words(op, shape, word):
    """The operand's data as [BH, N, width] words (uint32 pairs of halves, uint16 halves, or
    float32)."""
    if op.on_host:
        return cuda.to_device(np.ascontiguousarray(op.obj).view(word).reshape(shape))
    return op.obj.view(word).reshape(shape) if word is not np.float32 else \
        op.obj.reshape(shape)


def _unwords(o3, shape, fmt, on_host):
    """The result in the inputs' format: NumPy (bf16 as a BFloat16), a torch tensor of the
    inputs' dtype (bf16: torch.bfloat16), or a Numba device array (bf16: a BFloat16)."""
    if fmt == "tf32":
        return o3.copy_to_host().reshape(shape) if on_host else result(o3, shape)
    half = np.float16 if fmt == "f16" else np.uint16
    if on_host:
        out = o3.copy_to_host().view(half).reshape(shape)
    else:
        out = result(o3.view(half), shape, bf16=fmt == "bf16")
        if type(out).__module__.startswith("torch"):
            return out                          # (torch.float16 or torch.bfloat16)
    return BFloat16(out) if fmt == "bf16" else out


# ---------------------------------------------------------------------------------------------
# §42–43 on Hopper: method "flash_wgmma" (kernels_numba/attention_wgmma.py)
# ---------------------------------------------------------------------------------------------
WGMMA_HEAD_DIMS = (64, 128)


def hopper_check(what):
    """Refuse a GPU that is not Hopper (compute capability 9.0: sm_90a's wgmma, mbarrier,
    setmaxnreg); the simulator passes."""
    if not device.SIMULATOR:
        cc = compute_capability()
        if cc != (9, 0):
            raise ValueError(f"{what} needs a Hopper GPU (sm_90a: wgmma, mbarrier, "
                             f"setmaxnreg); this one is compute capability {cc[0]}.{cc[1]}. "
                             "Use method 'flash_tc'")


def wgmma_checks(d, what):
    """d = 64 or 128 and a Hopper GPU, else a ValueError naming q (or the device)."""
    if d not in WGMMA_HEAD_DIMS:
        raise ValueError(f"q: {what} takes a head dimension of "
                         f"{' or '.join(map(str, WGMMA_HEAD_DIMS))}; got d = {d}. Use method "
                         "'flash_tc' (any d in 1 … 256)")
    hopper_check(what)


def shared_fits(smem, d, what, hint=""):
    """A wgmma config's check of its shared memory on this GPU (the simulator does not model
    the limit): a ValueError naming the bytes, d, ``what`` (the config's fields) and ``hint``."""
    if not device.SIMULATOR and smem > max_shared_bytes():
        raise ValueError(f"config: {smem} bytes of shared memory at d = {d} ({what}); this GPU "
                         f"allows {max_shared_bytes()}{hint}")


@dataclass(frozen=True)
class WgmmaConfig:
    """The wgmma kernel's compile-time variants: Bc keys per K/V tile (64, 96, 128, 160, 176 or
    192 — up to ``attention_wgmma.widest_bc(d, CWG, OVERLAP)``, the widest whose consumers fit
    their registers: 192, but 176 at d = 128 with CWG = 2 and OVERLAP, and with CWG = 3 176 at
    d = 64 (128 with OVERLAP) and 64 at d = 128; FA3's d = 128 forward takes 176, with STAGES =
    2: three stages of 176 keys exceed the H200's 227 KB of shared memory), CWG consumer
    warpgroups of 64 query rows (1, 2 or 3: Br = 64·CWG; 3 is FA3's block at d = 64 — 512
    threads with the producer, 160 registers a consumer thread), STAGES shared-memory stages of
    the K/V ring (1: load, wait, compute; 2: §42, the next tile in flight), PRODUCER: one more
    warpgroup that only copies (§43, needs STAGES ≥ 2 to overlap anything), OVERLAP:
    FlashAttention-3's intra-warpgroup pipelining — tile j's S = Q Kᵀ and tile j − 1's P·V
    issued together, the softmax of S running while P·V does (STAGES ≥ 2). PINGPONG:
    FlashAttention-3's inter-warpgroup ping-pong — the consumer warpgroups take turns,
    round-robin on named barriers, to issue their wgmmas (S; with OVERLAP, S and P·V), so one
    warpgroup's softmax runs while another's products do (CWG ≥ 2). SWIZZLE: Q, K and V tiles
    in the 128-byte swizzle (hopper.sw128_index: a row's 64-column half in one 128-byte line,
    so a quarter-warp's copies read one line and write one; V read MN-major), against the
    L2 requests that bound the unswizzled kernel (docs/results.md; the descriptors:
    docs/hopper_sw128.md); the default on the GPU (default_wgmma_config)."""
    Bc: int = 128
    CWG: int = 2
    STAGES: int = 3
    PRODUCER: bool = True
    OVERLAP: bool = False
    PINGPONG: bool = False
    SWIZZLE: bool = False

    def __post_init__(self):
        checks.config_fields(self)

    def check(self, d):
        widths = KW.BC_WIDTHS
        if self.Bc not in widths:
            raise ValueError(f"config: Bc must be {', '.join(map(str, widths[:-1]))} or "
                             f"{widths[-1]} (the wgmma's N of S = Q Kᵀ, a multiple of 16 for "
                             f"P·V's k16 steps), got {self.Bc}")
        if self.CWG not in (1, 2, 3):
            raise ValueError(f"config: CWG must be 1, 2 or 3 consumer warpgroups, got {self.CWG}")
        widest = KW.widest_bc(d, self.CWG, bool(self.OVERLAP))
        if self.Bc > widest:
            raise ValueError(f"config: Bc = {self.Bc} is too wide at d = {d} with CWG = "
                             f"{self.CWG}{' and OVERLAP' if self.OVERLAP else ''}: a consumer "
                             f"thread holds S (Bc/2 floats), P (Bc/4 words) and acc (d/2 "
                             f"floats) in {KW.consumer_regs(self.CWG)} registers (with a "
                             f"producer); wider than Bc = {widest} its consumers spill over 64 "
                             f"bytes (ptxas: attention_wgmma.widest_bc)")
        if self.STAGES not in (1, 2, 3):
            raise ValueError(f"config: STAGES must be 1, 2 or 3, got {self.STAGES}")
        if self.OVERLAP and self.STAGES < 2:
            raise ValueError("config: OVERLAP needs STAGES ≥ 2 (tile j − 1's V is still read "
                             "while tile j lands in the ring), got STAGES = 1")
        if self.PINGPONG and self.CWG < 2:
            raise ValueError("config: PINGPONG needs CWG ≥ 2 (consumer warpgroups that take "
                             "turns issuing their wgmmas), got CWG = 1")
        shared_fits(KW.wgmma_smem_bytes(d, self.Bc, self.CWG, self.STAGES, bool(self.SWIZZLE)),
                    d, f"Bc, CWG, STAGES = {self.Bc}, {self.CWG}, {self.STAGES}",
                    " (fewer STAGES or a narrower Bc)")

    @property
    def Br(self):
        return 64 * self.CWG


def default_wgmma_config(d):
    """The simulator: the smallest block (one consumer warpgroup, Bc = 64, no producer). On the
    GPU: Bc = 128, a producer, 2 consumer warpgroups at d = 128 and 3 at d = 64 (Br = 192,
    FlashAttention-3's block for d = 64: 1.19–1.26× two at B2 H16 N4096 d64, ``scripts/
    bench_hopper.py --cwg3``, docs/logs/2026-12-01_wgmma_forward_cwg3_h200.log), every tile in the 128-byte
    swizzle with two stages in the ring. The swizzle: 1.17–1.57× the unswizzled default (three
    stages) at B4 H16 N1024 d64, B2 H16 N4096 d64 and B1 H16 N8192 d128, causal and not; with
    it two stages ran level with three (0.99–1.03×) in less shared memory (``scripts/
    bench_hopper.py --swizzle``, H200, 2026-12-02, docs/logs/2026-12-02_swizzle_forward_h200.log)."""
    if device.SIMULATOR:
        return WgmmaConfig(Bc=64, CWG=1, STAGES=2, PRODUCER=False)
    if d == 64:
        return WgmmaConfig(Bc=128, CWG=3, STAGES=2, PRODUCER=True, SWIZZLE=True)
    return WgmmaConfig(STAGES=2, SWIZZLE=True)


def wgmma_is_default(q, dropout_p):
    """Whether ``attention(q, k, v)`` with the default method ("flash") runs "flash_wgmma"
    rather than "flash_tc": fp16/bf16 inputs on a Hopper GPU (compute capability 9.0, not the
    simulator), d = 64 or 128, no dropout. Measured on the H200, 2026-12-02 (kernel-only,
    flash_wgmma's default against flash_tc's, docs/logs/2026-12-02_swizzle_forward_h200.log): 1.24× and
    1.19× at B4 H16 N1024 d64 (not causal / causal), 1.39× and 1.43× at B2 H16 N4096 d64,
    1.91× and 1.86× at B1 H16 N8192 d128."""
    return _wgmma_head_dim(q, dropout_p) is not None


def wgmma_bwd_is_default(q, dropout_p):
    """Whether ``attention_backward`` with the default method runs "flash_wgmma" rather than
    "flash_tc": fp16/bf16 inputs on a Hopper GPU (not the simulator), d = 64 or 128, no
    dropout, causal or not. Measured on the H200 (2026-12-02, kernel-only, the default
    ``WgmmaBwdConfig()`` against flash_tc's default, docs/results.md): 1.34× and 1.14× at B4
    H16 N1024 d64 (not causal / causal), 1.56× and 1.28× at B2 H16 N4096 d64, 1.62× and 1.38×
    at B1 H16 N8192 d128. Without the instruction savings of attention_wgmma_backward's menu
    ("Instructions") the wgmma backward was behind flash_tc causal (0.81–0.99×, H200,
    2026-12-01, docs/logs/2026-12-01_wgmma_backward_fused_h200.log)."""
    return _wgmma_head_dim(q, dropout_p) is not None


def _wgmma_head_dim(q, dropout_p):
    """d where a default call could take a wgmma method: fp16/bf16 q with d = 64 or 128, no
    dropout, on a Hopper GPU (compute capability 9.0, not the simulator); else None (also
    for a q too odd to read: the full path names what is wrong)."""
    if device.SIMULATOR or dropout_p or not low_precision(q):
        return None
    try:
        d = int(q.shape[-1])
    except (AttributeError, IndexError, TypeError):
        return None
    return d if d in WGMMA_HEAD_DIMS and compute_capability() == (9, 0) else None


def attention_wgmma(q, k, v, *, causal=False, scale=None, key_padding_mask=None, dropout_p=0.0,
                    return_lse=False, config=None):
    """``attention(..., method="flash_wgmma")``: fp16 or bf16 (BFloat16, torch bfloat16) q, k, v
    with d = 64 or 128, on Hopper's wgmma (sm_90a); outputs as method "flash_tc". float32
    q, k, v: 3xTF32 on wgmma (kernels_numba/attention_wgmma_tf32.py; no config)."""
    qo, fq = _operand(q, "q")
    ko, fk = _operand(k, "k")
    vo, fv = _operand(v, "v")
    if not (fq == fk == fv):
        raise TypeError(f"q, k, v: method 'flash_wgmma' takes fp16, bf16 or float32, all three "
                        f"the same; got {fq}, {fk}, {fv}")
    if not (qo.on_host == ko.on_host == vo.on_host):
        raise TypeError("q, k, v: all three must be NumPy arrays or all three device arrays")
    B, H, nq, nk, d = _shapes(qo, ko, vo)
    if d not in WGMMA_HEAD_DIMS:
        raise ValueError(f"q: method 'flash_wgmma' takes a head dimension of "
                         f"{' or '.join(map(str, WGMMA_HEAD_DIMS))}; got d = {d}. Use method "
                         "'flash_tc' (any d in 1 … 256)")
    if B * H > 65535:
        raise ValueError(f"q: B·H = {B * H} exceeds the 65535 blocks of a grid's y dimension")
    if checks.probability(dropout_p, "dropout_p"):
        raise ValueError("dropout_p: method 'flash_wgmma' has no dropout; use method 'flash' "
                         "(float32) for dropout")
    hopper_check("method 'flash_wgmma'")
    scale = checks.scale(scale, d)
    causal = checks.flag(causal, "causal")
    return_lse = checks.flag(return_lse, "return_lse")
    kpm = checks.key_padding_mask(key_padding_mask, B, nk)
    if fq == "tf32":
        cfg = config or default_wgmma_tf32_config(d)
        if not isinstance(cfg, WgmmaTf32Config):
            raise TypeError(f"config: method 'flash_wgmma' on float32 inputs (3xTF32) takes a "
                            f"WgmmaTf32Config, got {type(cfg).__name__}")
        cfg.check(d)
        if B * H * nq == 0 or nk == 0:
            return _empty_result(qo, fq, (B, H, nq, d), return_lse)
        with using(qo):
            o3, lse2 = _forward_wgmma_tf32(qo, ko, vo, B, H, nq, nk, d, causal, scale, kpm, cfg)
        o = _unwords(o3, (B, H, nq, d), fq, qo.on_host)
        if not return_lse:
            return o
        return o, (lse2.copy_to_host().reshape((B, H, nq)) if qo.on_host else
                   result(lse2, (B, H, nq)))
    cfg = config or default_wgmma_config(d)
    if not isinstance(cfg, WgmmaConfig):
        raise TypeError(f"config: expected a WgmmaConfig for method 'flash_wgmma', got "
                        f"{type(cfg).__name__}")
    cfg.check(d)
    if B * H * nq == 0 or nk == 0:      # empty: no launch; a row with no key gives 0, −inf
        return _empty_result(qo, fq, (B, H, nq, d), return_lse)
    with using(qo):
        bh = B * H
        word = np.uint32
        q3, k3, v3 = (_words(x, (bh, x.shape[2], d // 2), word) for x in (qo, ko, vo))
        o3 = empty((bh, nq, d), np.float16, bf16=fq == "bf16").view(word)
        lse2 = empty((bh, nq), np.float32)
        kernel = KW.flash_wgmma_kernel(d, cfg.Bc, cfg.CWG, cfg.STAGES, bool(cfg.PRODUCER),
                                       causal, kpm is not None, fq == "bf16",
                                       bool(cfg.OVERLAP), bool(cfg.PINGPONG), KT.folds(scale),
                                       bool(cfg.SWIZZLE))
        grid = row_grid(causal, bh, -(-nq // cfg.Br),
                        f"q: {nq} queries in tiles of Br = {cfg.Br}", "query tiles")
        launch(kernel, grid, 128 * (cfg.CWG + bool(cfg.PRODUCER)),
               (q3, k3, v3, o3, lse2, np.float32(scale), nq, nk, H,
                kpm if kpm is not None else dummy("mask")),
               KW.wgmma_smem_bytes(d, cfg.Bc, cfg.CWG, cfg.STAGES, bool(cfg.SWIZZLE)))
    o = _unwords(o3, (B, H, nq, d), fq, qo.on_host)
    if not return_lse:
        return o
    return o, (lse2.copy_to_host().reshape((B, H, nq)) if qo.on_host else
               result(lse2, (B, H, nq)))


@dataclass(frozen=True)
class WgmmaTf32Config:
    """The 3xTF32 wgmma forward's tiles (float32 inputs, method "flash_wgmma";
    kernels_numba/attention_wgmma_tf32.py): Bc keys per K/V tile (32 or 64: O's staged sums
    take 32 keys each), CWG consumer warpgroups of 64 query rows (1 or 2), STAGES
    shared-memory stages of the K/V ring (1, 2 or 3). Each stage holds K and Vᵀ, big and
    small: 16·Bc·d bytes, and Q 512·CWG·d."""
    Bc: int = 32
    CWG: int = 1
    STAGES: int = 2

    def __post_init__(self):
        checks.config_fields(self)

    def check(self, d):
        if self.Bc not in (32, 64):
            raise ValueError(f"config: Bc must be 32 or 64 (O's staged sums take 32 keys "
                             f"each), got {self.Bc}")
        if self.CWG not in (1, 2):
            raise ValueError(f"config: CWG must be 1 or 2 consumer warpgroups, got {self.CWG}")
        if self.CWG == 2 and self.Bc != 32:
            raise ValueError(f"config: CWG = 2 takes Bc = 32 (its 288 threads get 168 registers "
                             f"each, attention_wgmma.block_reg_cap; at Bc = 64 they spill 380 "
                             f"bytes), got Bc = {self.Bc}")
        if self.STAGES not in (1, 2, 3):
            raise ValueError(f"config: STAGES must be 1, 2 or 3, got {self.STAGES}")
        shared_fits(KWF.tf32_smem_bytes(d, self.Bc, self.CWG, self.STAGES), d,
                    f"Bc, CWG, STAGES = {self.Bc}, {self.CWG}, {self.STAGES}",
                    " (fewer STAGES, a narrower Bc or CWG = 1)")

    @property
    def Br(self):
        return 64 * self.CWG


def default_wgmma_tf32_config(d):
    """The simulator: one warpgroup, tiles of 32 keys (its smallest block). The GPU: at d = 64
    two consumer warpgroups and tiles of 32 keys (128 KB of shared memory, 168 registers a
    thread: attention_wgmma.block_reg_cap), at d = 128 one warpgroup and tiles of 32 keys
    (192 KB); two stages — the fastest of a sweep of these configs (H200, 2026-12-02,
    docs/results.md: at d = 64 1.05–1.09× one warpgroup with tiles of 64 and three stages,
    1.21–1.38× one with tiles of 32; at d = 128 1.14–1.42× one stage of 32 or 64 keys)."""
    if device.SIMULATOR or d == 128:
        return WgmmaTf32Config(Bc=32, CWG=1, STAGES=2)
    return WgmmaTf32Config(Bc=32, CWG=2, STAGES=2)


def pack_operands(q3, k3, v3, H, d, kpm, cfg):
    """attention_wgmma_tf32's packing kernel on q3, k3, v3 ([B·H, n, d] float32): Q in tiles
    of 64 rows (whole blocks of CWG), K in tiles of Bc rows, Vᵀ in tiles of Bc keys, each
    tile's big and small tf32 parts in the layout shared memory holds (padded keys and keys
    past n zero). Returns (packed Q, K, Vᵀ as flat float32 arrays, Q tiles, K/V tiles)."""
    bh, nq, nk = q3.shape[0], q3.shape[1], k3.shape[1]
    Bc, CWG = cfg.Bc, cfg.CWG
    q_tiles = -(-nq // (64 * CWG)) * CWG
    k_tiles = -(-nk // Bc)
    pad = kpm is not None
    mask = kpm if pad else dummy("mask")
    packed = []
    for x, n, R, C, trans, tiles, masked in ((q3, nq, 64, d, False, q_tiles, False),
                                              (k3, nk, Bc, d, False, k_tiles, pad),
                                              (v3, nk, d, Bc, True, k_tiles, pad)):
        out = empty((bh * tiles * 2 * R * C,), np.float32)
        words = tiles * R * C
        grid = (-(-words // 256), bh)
        checks.grid(grid, f"q: {bh} heads of {words} packed words")
        launch(KWF.pack_kernel(d, R, C, trans, masked), grid, 256,
               (x, out, n, mask, H, tiles))
        packed.append(out)
    return (*packed, q_tiles, k_tiles)


def pack_for_wgmma_tf32(q, k, v, config=None):
    """The packing step alone of ``attention(q, k, v, method="flash_wgmma")`` on float32 q, k, v
    (no key mask), to time its share of the call. Returns what pack_operands does."""
    (qo, _), (ko, _), (vo, _) = _operand(q, "q"), _operand(k, "k"), _operand(v, "v")
    B, H, nq, nk, d = _shapes(qo, ko, vo)
    cfg = config or default_wgmma_tf32_config(d)
    with using(qo):
        q3, k3, v3 = (_words(x, (B * H, x.shape[2], d), np.float32) for x in (qo, ko, vo))
        return pack_operands(q3, k3, v3, H, d, None, cfg)


def _forward_wgmma_tf32(qo, ko, vo, B, H, nq, nk, d, causal, scale, kpm, cfg):
    """The packing kernel on Q, K and V (pack_operands), then the forward on the packed tiles;
    the packed copies are freed when the call ends."""
    bh = B * H
    Bc, CWG = cfg.Bc, cfg.CWG
    Br = 64 * CWG
    q3, k3, v3 = (_words(x, (bh, x.shape[2], d), np.float32) for x in (qo, ko, vo))
    pad = kpm is not None
    mask = kpm if pad else dummy("mask")
    *packed, q_tiles, k_tiles = pack_operands(q3, k3, v3, H, d, kpm, cfg)
    o3 = empty((bh, nq, d), np.float32)
    lse2 = empty((bh, nq), np.float32)
    kernel = KWF.flash_wgmma_tf32_kernel(d, Bc, CWG, causal, pad, KT.folds(scale), cfg.STAGES)
    grid = row_grid(causal, bh, -(-nq // Br), f"q: {nq} queries in tiles of Br = {Br}",
                    "query tiles")
    launch(kernel, grid, 128 * CWG + 32,
           (*packed, o3, lse2, np.float32(scale), nq, nk, H, mask, q_tiles, k_tiles),
           KWF.tf32_smem_bytes(d, Bc, CWG, cfg.STAGES))
    return o3, lse2


# ---------------------------------------------------------------------------------------------
# The backward (§30 on tensor cores): kernels_numba/attention_tc_backward.py
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TcBwdConfig:
    """Tiles of the tensor-core backward: the dK/dV kernel streams Q/dO tiles of Bq queries
    past blocks of 16·KV_WARPS keys; the dQ kernel streams K/V tiles of Bk keys past blocks of
    16·Q_WARPS queries. KV_ASYNC / Q_ASYNC: that kernel double-buffers its tiles with
    cp.async and reads fragments by ldmatrix (no transposed copies)."""
    Bq: int = 64
    KV_WARPS: int = 4
    Bk: int = 64
    Q_WARPS: int = 4
    KV_ASYNC: bool = False
    Q_ASYNC: bool = False

    def __post_init__(self):
        checks.config_fields(self)      # tiles and warps positive ints; the ASYNC flags bools

    def check(self):
        for name, tile in (("Bq", self.Bq), ("Bk", self.Bk)):
            if tile < 16 or tile % 16 or tile > 128:
                raise ValueError(f"config: {name} must be a multiple of 16 in 16 … 128, got "
                                 f"{tile}")
        for name, warps in (("KV_WARPS", self.KV_WARPS), ("Q_WARPS", self.Q_WARPS)):
            if warps not in (1, 2, 4, 8):
                raise ValueError(f"config: {name} must be 1, 2, 4 or 8, got {warps}")


def default_tc_bwd_config(d, tf32=False):  # (fp16/bf16: by the padded D, as the forward)
    """fp16/bf16: scripts/tune_tc_bwd.py on the H200 (2026-11-30), × SDPA flash backward in the
    same process: both kernels ASYNC with 8 warps; Q tiles of 64 (d ≤ 64) or 32 (d ≤ 128), K/V
    tiles of 64: 0.63 / 0.62 non-causal in docs/results.md's tables (the register-staged 4-warp
    kernels: 0.32 / 0.29). A later sweep had dQ tiles of 32 at 0.68 for d = 64 (log:
    docs/logs/2026-11-30_tune_tc_backward_h200.log), not adopted without a full bench. Above d = 128: the
    register-staged kernels with tiles of 32 (they spill). 3xTF32 (float32 operands, twice
    the registers): tiles of 32, and 16 above d = 64."""
    if device.SIMULATOR:
        return TcBwdConfig(16, 1, 16, 1)
    if tf32:
        return TcBwdConfig(32, 4, 32, 4) if d <= 64 else TcBwdConfig(16, 4, 16, 4)
    d = KT.padded_head_dim(d)
    if d <= 64:
        return TcBwdConfig(64, 8, 64, 8, KV_ASYNC=True, Q_ASYNC=True)        # 73 KB each
    if d <= 128:                # 103 / 137 KB; on a GPU allowing less (99 KB: sm_86/89) …
        from .kernels_numba.attention_tc_backward import tc_bwd_smem_bytes
        if tc_bwd_smem_bytes(d, 64, 8, True) <= max_shared_bytes():
            return TcBwdConfig(32, 8, 64, 8, KV_ASYNC=True, Q_ASYNC=True)
        return TcBwdConfig(32, 4, 32, 4, KV_ASYNC=True, Q_ASYNC=True)    # … 69 KB each
    return TcBwdConfig(32, 4, 32, 4)


def attention_backward_tc(do, q, k, v, o, lse, *, causal=False, scale=None,
                          key_padding_mask=None, dropout_p=0.0, config=None):
    """``attention_backward`` for fp16 / bf16 inputs, or float32 ones with method "flash_tc"
    (3xTF32; the forward's ``flash_tc``): gradients in the inputs' format, deterministic (no
    atomics). No dropout. config: a ``TcBwdConfig`` (default per head dim; 3xTF32: no ASYNC)."""
    ins = _backward_inputs(do, q, k, v, o, lse, causal, scale, key_padding_mask, dropout_p)
    fmt, tf32, (doo, qo, ko, vo, oo, lo), (B, H, nq, nk, d), scale, causal, kpm = ins
    cfg = config or default_tc_bwd_config(d, tf32)
    if not isinstance(cfg, TcBwdConfig):
        raise TypeError(f"config: expected a TcBwdConfig, got {type(cfg).__name__}")
    cfg.check()
    if tf32 and (cfg.KV_ASYNC or cfg.Q_ASYNC):
        raise ValueError("config: the 3xTF32 backward has no ASYNC form (KV_ASYNC, Q_ASYNC "
                         "False)")
    if B * H * nq == 0 or nk == 0:      # empty: no launch; what no query or no key reaches is 0
        return tuple(_filled(x.shape, fmt, 0.0, qo.on_host, like=qo) for x in (qo, ko, vo))
    with using(qo):                     # torch in: torch's stream, torch.empty
        grads = _backward_tc(qo, ko, vo, doo, oo, lo, fmt, B, H, nq, nk, d, cfg, causal,
                             scale, kpm, tf32)
    return tuple(_unwords(g, (B, H, g.shape[1], d), fmt, qo.on_host) for g in grads)


def _backward_inputs(do, q, k, v, o, lse, causal, scale, key_padding_mask, dropout_p,
                     wgmma=False):
    """The tensor-core backwards' checks, each error naming its argument: (fmt, tf32, (do, q,
    k, v, o, lse operands), (B, H, Nq, Nk, d), scale, causal, kpm). wgmma: method
    "flash_wgmma"'s limits (fp16/bf16/float32 at d = 64 or 128; no dropout; a Hopper GPU)."""
    ops = [_operand(x, name) for x, name in ((do, "do"), (q, "q"), (k, "k"), (v, "v"),
                                              (o, "o"))]
    fmts = {f for _, f in ops}
    if len(fmts) != 1:
        raise TypeError("do, q, k, v, o: all five must be fp16, all bf16 or all float32 (the "
                        f"tensor-core backward); got {', '.join(f for _, f in ops)}")
    fmt = fmts.pop()
    tf32 = fmt == "tf32"
    (doo, _), (qo, _), (ko, _), (vo, _), (oo, _) = ops
    if len({x.on_host for x, _ in ops}) != 1:
        raise TypeError("do, q, k, v, o: all NumPy arrays or all device arrays")
    B, H, nq, nk, d = _shapes(qo, ko, vo)
    for x, name in ((doo, "do"), (oo, "o")):
        if x.shape != qo.shape:
            raise ValueError(f"{name}: expected q's shape {qo.shape}, got {x.shape}")
    if wgmma:
        wgmma_checks(d, "method 'flash_wgmma' (backward)")
    else:
        head_dim_check(d, tf32, fmt, "the tensor-core backward")
    if checks.probability(dropout_p, "dropout_p", "drop probability"):
        raise ValueError("dropout_p: the tensor-core backward has no dropout" +
                         ("" if not wgmma else " (method 'flash_wgmma' neither); use method "
                          "'flash' (float32) for dropout"))
    lo = Operand(lse, "lse", (np.float32,), ndim=3)
    if lo.shape != (B, H, nq) or lo.on_host != qo.on_host:
        raise ValueError(f"lse: expected float32 [B, H, Nq] = {(B, H, nq)} on the same side as "
                         f"q, got {lo.shape}")
    scale = checks.scale(scale, d)
    causal = checks.flag(causal, "causal")
    kpm = checks.key_padding_mask(key_padding_mask, B, nk, on_host=qo.on_host)
    return fmt, tf32, (doo, qo, ko, vo, oo, lo), (B, H, nq, nk, d), scale, causal, kpm


def _backward_tc(qo, ko, vo, doo, oo, lo, fmt, B, H, nq, nk, d, cfg, causal, scale, kpm, tf32):
    from .kernels_numba import attention_backward as KBF
    from .kernels_numba import attention_tc_backward as KB

    bh = B * H
    w, word = _row_format(d, tf32)
    D = d if tf32 else KT.padded_head_dim(d)        # the kernels' head dimension
    q3, k3, v3, do3, o3 = (_words(x, (bh, x.shape[2], w), word)
                           for x in (qo, ko, vo, doo, oo))
    lse = lo.device_view((bh, nq))
    dvec = empty((bh, nq), np.float32)
    rows = bh * nq
    pre = KBF.bwd_preprocess if tf32 else \
        KB.tc_bwd_preprocess(fmt == "bf16", VEC=word is np.uint32 and rows16(w, o3, do3))
    launch(pre, *stride_grid(rows), (o3.reshape((rows, w)), do3.reshape((rows, w)),
                                     dvec.reshape(rows)))
    grads = [empty((bh, n, d), np.float32) if tf32 else
             empty((bh, n, d), np.float16, bf16=fmt == "bf16").view(word) for n in (nq, nk, nk)]
    dq, dk, dv = grads
    mask = kpm if kpm is not None else dummy("mask")
    pad, bf = kpm is not None, fmt == "bf16"
    wk, wq = cfg.KV_WARPS, cfg.Q_WARPS
    if tf32:                                        # 3xTF32 (attention_tf32x3_backward.py)
        from .kernels_numba import attention_tf32x3_backward as K3
        kv = K3.flash_tf32x3_bwd_dkdv_kernel(d, cfg.Bq, wk, causal, pad)
        qk = K3.flash_tf32x3_bwd_dq_kernel(d, cfg.Bk, wq, causal, pad)
        kv_smem = K3.tf32x3_bwd_smem_bytes(d, cfg.Bq, wk)
        q_smem = K3.tf32x3_bwd_smem_bytes(d, cfg.Bk, wq)
    else:
        kv = KB.flash_tc_bwd_dkdv_kernel(D, cfg.Bq, wk, causal, pad, bf, cfg.KV_ASYNC, d)
        qk = KB.flash_tc_bwd_dq_kernel(D, cfg.Bk, wq, causal, pad, bf, cfg.Q_ASYNC, d)
        kv_smem = KB.tc_bwd_smem_bytes(D, cfg.Bq, wk, cfg.KV_ASYNC)
        q_smem = KB.tc_bwd_smem_bytes(D, cfg.Bk, wq, cfg.Q_ASYNC)
    launches = ((kv, nk, wk, (dk, dv), kv_smem), (qk, nq, wq, (dq,), q_smem))
    grids = [row_grid(causal, bh, -(-n // (16 * warps)),   # (both checked before either launch)
                      f"q, k: {nq} queries, {nk} keys in row blocks of {16 * warps}")
             for _, n, warps, _, _ in launches]
    for (kern, _, warps, out, smem), grid in zip(launches, grids):
        launch(kern, grid, 32 * warps,
               (q3, k3, v3, do3, lse, dvec, *out, np.float32(scale), nq, nk, H, mask), smem)
    return grads


# ---------------------------------------------------------------------------------------------
# The backward on Hopper's wgmma: method "flash_wgmma" (kernels_numba/attention_wgmma_backward.py)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WgmmaBwdConfig:
    """The wgmma backward's compile-time variants: Bq queries per streamed Q/dO tile of the
    dK/dV kernel and Bk keys per streamed K/V tile of the dQ kernel (64 or 128: the wgmma's
    N; Bq = 128 not at d = 128: too many registers), CWG consumer warpgroups of 64 rows a
    block in both kernels (1 or 2), STAGES shared-memory stages of each kernel's ring (1:
    load, wait, compute; 2 or 3: the next tiles in flight), FUSED: no dQ kernel — the dK/dV
    kernel adds dS K to a float32 dQ in key-block order (Bq = 64; Bk unused). SWIZZLE: every
    tile in the 128-byte swizzle, as WgmmaConfig.SWIZZLE (not with FUSED; correct on the H200,
    and 0.94–1.02× unswizzled with two stages, no AHEAD, 2026-12-02: the backward is not bound
    by its copies' L2 requests — docs/logs/2026-12-02_swizzle_forward_h200.log). AHEAD: the next
    tile's first products (Sᵀ, dPᵀ; S, dP) issued at the end of this tile, behind its last
    ones (the kernel file's menu, "AHEAD"); it needs the next tile in flight and the loop's
    end free (STAGES ≥ 2, not FUSED). None (the default): the dK/dV kernel ahead wherever it can be,
    the dQ kernel at d = 128 only — at d = 64 ahead costs it its second block an SM (139
    registers, not 122): both kernels ahead 0.82–0.96× SDPA flash, the dK/dV kernel alone
    0.95–1.03× (H200, 2026-12-02, docs/results.md); True: both kernels; False: neither.
    Shared memory bounds STAGES: Bk = 128 at d = 128 takes two at most (three: 256 KB)."""
    Bq: int = 64
    Bk: int = 64
    CWG: int = 2
    STAGES: int = 3
    FUSED: bool = False
    SWIZZLE: bool = False
    AHEAD: Optional[bool] = None

    def __post_init__(self):
        checks.config_fields(self)

    def can_go_ahead(self):
        """Whether AHEAD can be on: the next tile in flight (STAGES ≥ 2), no FUSED dQ step."""
        return self.STAGES >= 2 and not self.FUSED

    def ahead(self, d):
        """AHEAD as the two kernels take it at head dim d: (dK/dV kernel, dQ kernel)."""
        if self.AHEAD is None:
            return self.can_go_ahead(), self.can_go_ahead() and d == 128
        return self.AHEAD, self.AHEAD

    def check(self, d):
        for name, tile in (("Bq", self.Bq), ("Bk", self.Bk)):
            if tile not in (64, 128):
                raise ValueError(f"config: {name} must be 64 or 128 (the wgmma's N), got {tile}")
        if self.CWG not in (1, 2):
            raise ValueError(f"config: CWG must be 1 or 2 consumer warpgroups, got {self.CWG}")
        if self.STAGES not in (1, 2, 3):
            raise ValueError(f"config: STAGES must be 1, 2 or 3, got {self.STAGES}")
        if self.Bq == 128 and d == 128:     # ptxas (CUDA 13.5, sm_90a): 255 registers, 200–900
            raise ValueError(             # bytes of spills, the wgmmas serialized (C7512)
                "config: Bq = 128 at d = 128 needs 256 accumulator floats a thread in the dK/dV "
                "kernel (Sᵀ and dPᵀ 64 each, dK and dV 64 each), more than its 255 registers; "
                "take Bq = 64")
        if self.FUSED and self.Bq != 64:
            raise ValueError(f"config: FUSED (dQ in the dK/dV kernel) takes Bq = 64 (the dQ "
                             f"wgmma's M), got Bq = {self.Bq}")
        if self.FUSED and self.SWIZZLE:
            raise ValueError("config: SWIZZLE does not go with FUSED (its dS tiles are stored "
                             "unswizzled); take one of them")
        if self.AHEAD is True and not self.can_go_ahead():
            raise ValueError(f"config: AHEAD (the next tile's first products issued before "
                             f"this tile's last retire) needs STAGES ≥ 2 and FUSED off — the "
                             f"next tile must be in flight and the loop end free — got "
                             f"STAGES = {self.STAGES}, FUSED = {self.FUSED}; take AHEAD=False")
        sw = bool(self.SWIZZLE)
        smem = max(KWB.wgmma_bwd_smem_bytes(d, self.Bq, self.CWG, self.STAGES, True,
                                            self.FUSED, sw),
                   KWB.wgmma_bwd_smem_bytes(d, self.Bk, self.CWG, self.STAGES, False, False, sw))
        shared_fits(smem, d, str(self))


def default_wgmma_bwd_config(d):
    """The simulator: one consumer warpgroup, tiles of 64, two stages (the smallest blocks).
    On the GPU: ``WgmmaBwdConfig()`` — 2 consumer warpgroups (128 keys or queries a block),
    tiles of 64, three stages, AHEAD (at d = 128: 162 KB of shared memory a block). Three
    stages measured 1.00–1.04× two with AHEAD (H200, 2026-12-02, one run; without AHEAD
    within 3 % either way): AHEAD waits for a tile's copies at the end of the tile before,
    and with two stages they are issued only at that tile's start, with three a tile
    earlier. CWG = 1, Bk = 128 slower, Bq = 128 (d = 64) level."""
    if device.SIMULATOR:
        return WgmmaBwdConfig(Bq=64, Bk=64, CWG=1, STAGES=2)
    return WgmmaBwdConfig()


def attention_backward_wgmma(do, q, k, v, o, lse, *, causal=False, scale=None,
                             key_padding_mask=None, dropout_p=0.0, config=None):
    """``attention_backward(..., method="flash_wgmma")``: fp16 or bf16 inputs with d = 64 or
    128 on Hopper's wgmma (kernels_numba/attention_wgmma_backward.py), float32 with d = 64 or
    128 as 3xTF32 (kernels_numba/attention_wgmma_tf32_backward.py); the same outputs and masks
    as method "flash_tc" (deterministic, no atomics, no dropout). config: a
    ``WgmmaBwdConfig`` (fp16/bf16) or a ``WgmmaTf32BwdConfig`` (float32)."""
    ins = _backward_inputs(do, q, k, v, o, lse, causal, scale, key_padding_mask, dropout_p,
                           wgmma=True)
    fmt, tf32, (doo, qo, ko, vo, oo, lo), (B, H, nq, nk, d), scale, causal, kpm = ins
    kind = WgmmaTf32BwdConfig if tf32 else WgmmaBwdConfig
    cfg = config or (default_wgmma_tf32_bwd_config(d) if tf32 else default_wgmma_bwd_config(d))
    if not isinstance(cfg, kind):
        raise TypeError(f"config: expected a {kind.__name__} for method 'flash_wgmma' on "
                        f"{'float32' if tf32 else fmt} inputs, got {type(cfg).__name__}")
    cfg.check(d)
    if B * H * nq == 0 or nk == 0:      # empty: no launch; what no query or no key reaches is 0
        return tuple(_filled(x.shape, fmt, 0.0, qo.on_host, like=qo) for x in (qo, ko, vo))
    run = _backward_wgmma_tf32 if tf32 else _backward_wgmma
    with using(qo):                     # torch in: torch's stream, torch.empty
        grads = run(qo, ko, vo, doo, oo, lo, fmt, B, H, nq, nk, d, cfg, causal, scale, kpm)
    return tuple(_unwords(g, (B, H, g.shape[1], d), fmt, qo.on_host) for g in grads)


def _backward_wgmma(qo, ko, vo, doo, oo, lo, fmt, B, H, nq, nk, d, cfg, causal, scale, kpm):
    from .kernels_numba import attention_tc_backward as KB

    bh = B * H
    word = np.uint32
    q3, k3, v3, do3, o3 = (_words(x, (bh, x.shape[2], d // 2), word)
                           for x in (qo, ko, vo, doo, oo))
    lse = lo.device_view((bh, nq))
    dvec = empty((bh, nq), np.float32)
    lse2 = empty((bh, nq), np.float32)      # LSE·log2e, +inf for −inf: the preprocess writes it
    rows = bh * nq
    pre_args = (o3.reshape((rows, d // 2)), do3.reshape((rows, d // 2)), dvec.reshape(rows),
                lse.reshape(rows), lse2.reshape(rows))
    grads = [empty((bh, n, d), np.float16, bf16=fmt == "bf16").view(word) for n in (nq, nk, nk)]
    dq, dk, dv = grads
    mask = kpm if kpm is not None else dummy("mask")
    flags = (causal, kpm is not None, fmt == "bf16")
    rows_a_block = 64 * cfg.CWG
    if cfg.FUSED:                       # dQ in the dK/dV kernel: a float32 accumulator, turns
        dqa = empty((bh, nq, d), np.float32)
        sem = empty((bh * -(-nq // cfg.Bq),), np.int32)
        acc = (dqa, sem)
    else:
        acc = (dummy("acc"), dummy("turns"))
    sw, (ahead, ahead_dq) = bool(cfg.SWIZZLE), cfg.ahead(d)
    launches = [(KWB.wgmma_bwd_dkdv_kernel(d, cfg.Bq, cfg.CWG, cfg.STAGES, *flags, cfg.FUSED, sw,
                                           ahead),
                 -(-nk // rows_a_block), (dk, dv, *acc),
                 KWB.wgmma_bwd_smem_bytes(d, cfg.Bq, cfg.CWG, cfg.STAGES, True, cfg.FUSED, sw))]
    if not cfg.FUSED:
        launches.append((KWB.wgmma_bwd_dq_kernel(d, cfg.Bk, cfg.CWG, cfg.STAGES, *flags, sw,
                                                 ahead_dq),
                         -(-nq // rows_a_block), (dq,),
                         KWB.wgmma_bwd_smem_bytes(d, cfg.Bk, cfg.CWG, cfg.STAGES, False, False,
                                                  sw)))
    grids = [row_grid(causal, bh, blocks,   # (every grid checked before any launch)
                      f"q, k: {nq} queries, {nk} keys in row blocks of {rows_a_block}")
             for _, blocks, _, _ in launches]
    vec = rows16(d // 2, o3, do3)
    if cfg.FUSED:
        launch(KB.tc_bwd_preprocess(fmt == "bf16", LSE2=True, CLEAR=True, VEC=vec),
               *stride_grid(rows), (*pre_args, dqa.reshape(rows * d), sem))
    else:
        launch(KB.tc_bwd_preprocess(fmt == "bf16", LSE2=True, VEC=vec), *stride_grid(rows),
               pre_args)
    runs = [(kern, grid, 128 * cfg.CWG,
             (q3, k3, v3, do3, lse2, dvec, *out, np.float32(scale), nq, nk, H, mask), smem)
            for (kern, _, out, smem), grid in zip(launches, grids)]
    if cfg.FUSED:               # the dK/dV kernel, then dq = scale · the accumulator, in the
        launch(*runs[0])        #  inputs' format
        launch(KWB.dq_finish(fmt == "bf16"), *stride_grid(rows * d // 2),
               (dqa.reshape(rows * d), dq.reshape(rows * d // 2), np.float32(scale)))
    else:                       # the dK/dV and dQ kernels: independent, side by side
        launch_beside(*runs)    # (launch.launch_beside)
    return grads


# ---------------------------------------------------------------------------------------------
# The float32 backward on wgmma (3xTF32): kernels_numba/attention_wgmma_tf32_backward.py
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WgmmaTf32BwdConfig:
    """The 3xTF32 wgmma backward's blocks (float32 inputs, d = 64 or 128, method
    "flash_wgmma"; kernels_numba/attention_wgmma_tf32_backward.py): Q_CWG consumer
    warpgroups of 64 queries in the dQ kernel (1 or 2; the dK/dV kernel has one: two spill
    644 bytes at 168 registers offline and their K, V rows take 128 KB), STAGES
    shared-memory stages of each kernel's ring (1 or 2), Bq queries a tile of the dK/dV
    kernel and Bk keys a tile of the dQ kernel (32, the staged sums' 32, or 16: the d = 128
    kernels' two stages fit in shared memory only so). At d = 128 a block of the dK/dV kernel
    computes dK or dV (attention_wgmma_tf32_backward's "d = 128: roles")."""
    Q_CWG: int = 2
    STAGES: int = 2
    Bq: int = 32
    Bk: int = 32

    def __post_init__(self):
        checks.config_fields(self)

    def check(self, d):
        if self.Q_CWG not in (1, 2):
            raise ValueError(f"config: Q_CWG must be 1 or 2 consumer warpgroups, got "
                             f"{self.Q_CWG}")
        if self.STAGES not in (1, 2):
            raise ValueError(f"config: STAGES must be 1 or 2, got {self.STAGES}")
        for name, tile in (("Bq", self.Bq), ("Bk", self.Bk)):
            if tile not in (16, 32):
                raise ValueError(f"config: {name} must be 16 or 32, got {tile}")
        if d == 128 and self.Q_CWG != 1:
            raise ValueError(f"config: Q_CWG must be 1 at d = 128 (two warpgroups' Q, dO rows "
                             f"would take 256 KB of shared memory), got {self.Q_CWG}")
        for cwg, tile, keys in ((1, self.Bq, True), (self.Q_CWG, self.Bk, False)):
            shared_fits(KWFB.tf32_bwd_smem_bytes(d, tile, cwg, self.STAGES, keys), d,
                        f"the {'dK/dV' if keys else 'dQ'} kernel; Q_CWG, STAGES, Bq, Bk = "
                        f"{self.Q_CWG}, {self.STAGES}, {self.Bq}, {self.Bk}",
                        " (fewer STAGES or tiles of 16)")


def default_wgmma_tf32_bwd_config(d):
    """The GPU at d = 64: two consumer warpgroups in the dQ kernel (224 KB; 122–126 registers
    a thread on the H200, no local memory), two stages, tiles of 32 — 1.07–1.17× one
    warpgroup (160 KB, no spills) and 1.24–1.71× one stage at the three shapes of a sweep
    of these configs (H200, 2026-12-02, docs/results.md; with the packing of one word a
    thread, attention_wgmma_tf32_backward.pack_kernel's non-VEC form). At d = 128: one
    warpgroup, two stages of tiles of 16 (each kernel 224 KB) — 1.28× tiles of 32 queries in
    one stage at B1 H16 N8192 d128 not causal, 1.20× causal (H200, 2026-12-02,
    docs/results.md). The simulator: one warpgroup (fewer simulated threads)."""
    if d == 128:
        return WgmmaTf32BwdConfig(Q_CWG=1, Bq=16, Bk=16)
    return WgmmaTf32BwdConfig(Q_CWG=1 if device.SIMULATOR else 2)


def pack_backward_operands(q3, k3, v3, do3, H, d, kpm):
    """attention_wgmma_tf32_backward's packing launch on [B·H, n, d] float32 q, k, v, dO: the Q
    side (Q, dO, Qᵀ, dOᵀ) and the K side (K, V, Kᵀ), big and small parts, rows padded to
    pad_rows(n). Returns (qside, kside, nq_pad, nk_pad)."""
    bh, nq, nk = q3.shape[0], q3.shape[1], k3.shape[1]
    nq_pad, nk_pad = KWFB.pad_rows(nq), KWFB.pad_rows(nk)
    qside = empty((8 * bh * nq_pad * d,), np.float32)
    kside = empty((6 * bh * nk_pad * d,), np.float32)
    pad = kpm is not None
    grid = (-(-max(nq_pad, nk_pad) * d // (4 * 256)), bh, KWFB.JOBS)    # (4 words a thread)
    checks.grid(grid, f"q, k: {bh} heads of {max(nq_pad, nk_pad) * d} packed words")
    vec = aligned16(q3, k3, v3, do3)        # (16-byte loads of the natural layouts)
    launch(KWFB.pack_kernel(d, pad, vec), grid, 256,
           (q3, k3, v3, do3, qside, kside, nq, nk, nq_pad, nk_pad,
            kpm if pad else dummy("mask"), H))
    return qside, kside, nq_pad, nk_pad


def _backward_wgmma_tf32(qo, ko, vo, doo, oo, lo, fmt, B, H, nq, nk, d, cfg, causal, scale,
                         kpm):
    """The packing launch, D and LSE into padded rows, then the dK/dV and dQ kernels; the
    packed copies are freed when the call ends."""
    bh = B * H
    q3, k3, v3, do3, o3 = (_words(x, (bh, x.shape[2], d), np.float32)
                           for x in (qo, ko, vo, doo, oo))
    lse = lo.device_view((bh, nq))
    pad = kpm is not None
    mask = kpm if pad else dummy("mask")
    grids = [row_grid(causal, bh, -(-n // (64 * cwg)),    # (both checked before any launch)
                      f"q, k: {nq} queries, {nk} keys in row blocks of {64 * cwg}", z=z)
             for n, cwg, z in ((nk, 1, 2 if KWFB.dkdv_roles(d) else 1),    # (z: dK or dV)
                               (nq, cfg.Q_CWG, 1))]
    qside, kside, nq_pad, nk_pad = pack_backward_operands(q3, k3, v3, do3, H, d, kpm)
    lse_p = empty((bh, nq_pad), np.float32)
    d_p = empty((bh, nq_pad), np.float32)
    stats = KWFB.stats_kernel(rows16(d, o3, do3))
    launch(stats, (nq_pad // 128, bh), 128,
           (o3.reshape((bh * nq, d)), do3.reshape((bh * nq, d)), lse, lse_p, d_p, nq))
    dq, dk, dv = (empty((bh, n, d), np.float32) for n in (nq, nk, nk))
    pads = (nq_pad, nk_pad)
    kv = KWFB.wgmma_tf32_bwd_dkdv_kernel(d, cfg.Bq, 1, cfg.STAGES, causal, pad)
    qk = KWFB.wgmma_tf32_bwd_dq_kernel(d, cfg.Bk, cfg.Q_CWG, cfg.STAGES, causal, pad)
    launch_beside(        # (independent: side by side, launch.launch_beside)
        (kv, grids[0], 128 + 32,
         (qside, kside, lse_p.reshape(bh * nq_pad), d_p.reshape(bh * nq_pad), dk, dv,
          np.float32(scale), nq, nk, H, mask, *pads),
         KWFB.tf32_bwd_smem_bytes(d, cfg.Bq, 1, cfg.STAGES, True)),
        (qk, grids[1], 128 * cfg.Q_CWG + 32,
         (qside, kside, lse_p, d_p, dq, np.float32(scale), nq, nk, H, mask, *pads),
         KWFB.tf32_bwd_smem_bytes(d, cfg.Bk, cfg.Q_CWG, cfg.STAGES, False)))
    return dq, dk, dv
