"""``flashlesson.backward_methods``: the backward pass of softmax attention (lesson §30–31), with
causal masks (§34), key padding and packed variable-length sequences (§35) and dropout (§36);
the public functions are ``flashlesson.attention_backward`` and
``flashlesson.varlen_attention_backward`` (the backward of ``flashlesson.varlen_attention``:
the flash kernels with their VARLEN flag, no naive method). (The module is not named
``attention_backward``: the package exports the function under that name, which would hide a
module of the same name — the reason ``attention_methods`` is not called ``attention``.)

Two methods, one API: "flash" (§30) recomputes S and P tile by tile from Q, K and the forward's
LSE and never stores an N × N matrix; "naive" (§31's contrast) stores P = exp(S − LSE) and dP/dS
in global memory and runs GEMM launches around two element-wise kernels. Validation, the
registry, launch configurations and dispatch live here; the kernels are in
``kernels_numba/attention_backward.py`` and ``kernels_numba/gemm.py`` (the fast tier, the
default) and ``kernels_numba/lesson/backward.py`` (``tier="lesson"``: method "flash" only).
"""

import numpy as np
from numba import cuda

from .kernels_numba import attention_backward as KB
from .kernels_numba.lesson import backward as LB

from . import calls, checks, device, tc_methods
from .arrays import Operand, empty, result, using
from .attention_methods import AttentionMethod, gemm, operands, varlen_operands
from .configs import NAIVE_GEMM_TILES, BwdConfig, bwd_default_config
from .dropout import dropout_args
from .launch import dummy, launch, rows16, stride_grid


METHODS = {m.name: m for m in [
    AttentionMethod("naive", "31", "P = exp(S − LSE) stored, dP and dS stored: five GEMM "
                    "launches around two element-wise kernels",
                    "gemm.matmul_kernel ×5, attention_backward.naive_probs_kernel, "
                    "naive_ds_kernel", "P and dP (then P∘Z, dS), [B·H, Nq, Nk] each"),
    AttentionMethod("flash", "30, 34–36", "D = rowsum(dO∘O); one kernel over K/V tiles for dK, "
                    "dV and one over Q tiles for dQ, S and P recomputed from Q, K and LSE; no "
                    "atomics", "attention_backward.bwd_preprocess, flash_bwd_dkdv_kernel, "
                    "flash_bwd_dq_kernel", "D [B·H, Nq] (nothing N × N)",
                    lesson_kernels="lesson.backward.D_kernel, dkdv_kernel, dq_kernel"),
    AttentionMethod("flash_tc", "30, 37", "the flash backward on tensor cores: fp16/bf16 "
                    "inputs (m16n8k16, chosen by themselves), float32 inputs with 3xTF32 "
                    "(three m16n8k8 tf32 mmas a product); no dropout",
                    "attention_tc_backward.flash_tc_bwd_dkdv_kernel, flash_tc_bwd_dq_kernel, "
                    "attention_tf32x3_backward.flash_tf32x3_bwd_dkdv_kernel, "
                    "flash_tf32x3_bwd_dq_kernel", "D [B·H, Nq] (nothing N × N)"),
    AttentionMethod("flash_wgmma", "30, 37, 42", "the flash backward on Hopper's wgmma: Sᵀ = "
                    "KQᵀ, dPᵀ = VdOᵀ from shared memory, dV += PᵀdO and dK += dSᵀQ with Pᵀ, "
                    "dSᵀ in registers; Q/dO and K/V tiles in a ring of stages on mbarriers; "
                    "fp16/bf16, d = 64 or 128; the default for them on Hopper; float32 "
                    "(d = 64 or 128): 3xTF32, Q, K, V, dO split once into packed tiles, a "
                    "producer warp's bulk copies, at d = 128 a block computing dK or dV",
                    "attention_wgmma_backward.wgmma_bwd_dkdv_kernel, wgmma_bwd_dq_kernel, "
                    "attention_wgmma_tf32_backward.pack_kernel, wgmma_tf32_bwd_dkdv_kernel, "
                    "wgmma_tf32_bwd_dq_kernel",
                    "D [B·H, Nq] (nothing N × N); float32: Q, K, V, dO packed (3.5×)"),
]}
CHOICES = tuple(METHODS)
# The methods with a lesson-tier kernel (``tier="lesson"``), read from the registry.
LESSON_METHODS = tuple(name for name, m in METHODS.items() if m.lesson_kernels != "—")


def lesson_tiles(d):
    """The lesson kernels' default tiles (Br queries, Bc keys) for head dimension d: any sizes
    work; a block has Bc (dK/dV) or Br (dQ) threads, each with rows of d floats in local
    memory, and two [tile, d] float32 arrays of static shared memory (≤ 48 KB: tile ≤ 6144/d).
    Plain, not tuned: 16 in the simulator; 64, 32 or 16 on a GPU."""
    if device.SIMULATOR:
        return 16, 16
    t = 64 if d <= 64 else 32 if d <= 128 else 16
    return t, t


LESSON_STATIC_SHARED = 48 * 1024        # bytes of static shared memory a block may declare
# The float32 CUDA-core methods: tests/test_attention_backward.py runs them all (any d, dropout);
# "flash_tc" has its own (tests/test_attention_tc_backward.py).
FP32_METHODS = tuple(m for m in METHODS if m not in ("flash_tc", "flash_wgmma"))
# The methods that take float32 inputs at any d (the edge suites loop over them): all but
# flash_wgmma (d = 64, 128 only; fp16/bf16: tests/test_attention_wgmma_backward.py, float32:
# tests/test_attention_wgmma_tf32_backward.py)
FLOAT32_METHODS = tuple(m for m in METHODS if m != "flash_wgmma")


def _same_side(op, qo):
    if op.on_host != qo.on_host:
        where = "a NumPy array" if qo.on_host else "a device array"
        raise TypeError(f"{op.name}: must be {where}, like q, k, v")


def _like_q(arr, name, qo):
    """do and o: float32 arrays of q's shape, on q's side."""
    op = Operand(arr, name, (np.float32,), ndim=len(qo.shape))
    _same_side(op, qo)
    if op.shape != qo.shape:
        raise ValueError(f"{name}: expected q's shape {qo.shape}, got {op.shape}")
    return op


def attention_backward(do, q, k, v, o, lse, *, causal=False, scale=None, key_padding_mask=None,
                       dropout_p=0.0, seed=0, method="flash", config=None, tier="fast"):
    """Gradients (dq, dk, dv) of O = attention(q, k, v, ...) for the upstream gradient do = ∂L/∂O.

    q, do, o: float32 [B, H, Nq, d]; k, v: float32 [B, H, Nk, d]; lse: float32 [B, H, Nq], the
    forward's LSE (``attention(..., return_lse=True)``; −inf for a row that sees no key);
    o is the forward's output (with dropout: the dropped one, (P∘Z) V).
    The keyword arguments are the forward's: causal (bottom-right aligned, query i sees key j
    iff j ≤ i + Nk − Nq), scale (default 1/√d), key_padding_mask (bool [B, Nk], True = the key
    takes part), dropout_p in [0, 1) and seed in [0, 2^64) (the Philox keep-mask of
    ``flashlesson.dropout_keep_mask(seed, B, H, Nq, Nk, dropout_p)``, regenerated, not stored;
    kept probabilities are scaled by 1/(1 − p)).

    method: "flash" (§30: S and P recomputed tile by tile, nothing N × N stored), "naive"
        (§31: P = exp(S − LSE) and dP/dS stored in global memory, GEMM launches) or
        "flash_tc" (§37: the flash backward on tensor cores; float32 inputs run 3xTF32 there,
        no dropout) or "flash_wgmma" (the same on Hopper's wgmma: fp16/bf16, d = 64 or 128,
        and float32 as 3xTF32 at d = 64 (opt-in); no dropout; the default for fp16/bf16 with
        d = 64 or 128 on Hopper, causal or not, where it measured ahead — else fp16/bf16
        inputs run "flash_tc" unless asked).
    config: a ``BwdConfig`` for method "flash", a ``TcBwdConfig`` for "flash_tc", a
        ``WgmmaBwdConfig`` (fp16/bf16) or ``WgmmaTf32BwdConfig`` (float32) for
        "flash_wgmma"; default per head dim.
    tier: "fast" (the tuned kernels, the default) or "lesson" (method "flash" only: the three
        plain kernels of ``kernels_numba/lesson/backward.py``, float32, no dropout, no config;
        checked by the same tests and oracles).

    Dispatch: D = rowsum(dO ∘ O) first (one small kernel), then the method's kernels. Masked
    scores give exact zeros: a padded key gets dk = dv = 0, a row that sees no key dq = 0,
    never NaN. The result does not depend on the run: no atomics, a fixed summation order.
    NumPy in → NumPy out; device arrays in → device arrays out, without host copies.
    Returns (dq, dk, dv) with the shapes of q, k, v, float32.

    fp16 / bf16 inputs (all five of do, q, k, v, o; the forward's "flash_tc" output) run the
    tensor-core backward (``flashlesson.tc_methods.attention_backward_tc``, §37): gradients in
    the inputs' format, no dropout; config a ``TcBwdConfig`` (tiles and warps of its two
    kernels).

    torch tensors seen before with these options (no dropout) replay their first call's
    launches (``flashlesson.calls``: no check repeated, since none could answer otherwise).
    """
    if calls.no_dropout(dropout_p):     # the fast path: torch tensors, a key seen before
        tensors = (do, q, k, v, o, lse) if key_padding_mask is None else \
            (do, q, k, v, o, lse, key_padding_mask)
        facts, ptrs = calls.tensor_facts(tensors)
        if facts is not None:
            key = ("attention_backward", facts, causal, type(causal), scale, type(scale),
                   dropout_p, type(dropout_p), seed, type(seed), key_padding_mask is None,
                   method, config, tier)
            plan = calls.lookup(key)
            if plan is not None:
                return plan(ptrs, tensors)
            return calls.run(key, tensors, lambda: _backward_call(
                do, q, k, v, o, lse, causal, scale, key_padding_mask, dropout_p, seed, method,
                config, tier))
    return _backward_call(do, q, k, v, o, lse, causal, scale, key_padding_mask, dropout_p, seed,
                          method, config, tier)


def _backward_call(do, q, k, v, o, lse, causal, scale, key_padding_mask, dropout_p, seed,
                   method, config, tier):
    """``attention_backward``'s full path: every check, then the launches."""
    if method not in CHOICES:
        raise ValueError(f"method: expected one of {', '.join(CHOICES)}; got {method!r}")
    tier = checks.tier(tier, method, LESSON_METHODS, "attention_backward")
    if tier == "lesson" and tc_methods.low_precision(q):
        raise TypeError("q: the lesson tier's backward takes float32 inputs; fp16/bf16 run on "
                        "tier 'fast' (the tensor-core backward)")
    if method == "flash_wgmma" or (method == "flash" and config is None and tier == "fast" and
                                   tc_methods.wgmma_bwd_is_default(q, dropout_p)):
        # §30 on Hopper's wgmma (fp16/bf16, d = 64, 128; the default where it measured ahead)
        checks.integer(seed, "seed", 0, 2**64)
        if config is not None and not isinstance(config, (tc_methods.WgmmaBwdConfig,
                                                          tc_methods.WgmmaTf32BwdConfig)):
            raise TypeError("config: method 'flash_wgmma' takes a WgmmaBwdConfig (fp16/bf16) "
                            f"or a WgmmaTf32BwdConfig (float32), not a {type(config).__name__}")
        return tc_methods.attention_backward_wgmma(do, q, k, v, o, lse, causal=causal,
                                                   scale=scale,
                                                   key_padding_mask=key_padding_mask,
                                                   dropout_p=dropout_p, config=config)
    if method == "flash_tc" or tc_methods.low_precision(q):    # §37: the tensor-core backward
        checks.integer(seed, "seed", 0, 2**64)      # (no dropout there, but a seed is a seed)
        if method not in ("flash", "flash_tc"):
            raise TypeError("method: fp16/bf16 inputs take the tensor-core backward (method "
                            f"'flash' or 'flash_tc'); got {method!r}")
        if config is not None and not isinstance(config, tc_methods.TcBwdConfig):
            raise TypeError("config: fp16/bf16 inputs take the tensor-core backward, which "
                            f"takes a TcBwdConfig, not a {type(config).__name__}")
        return tc_methods.attention_backward_tc(do, q, k, v, o, lse, causal=causal, scale=scale,
                                                key_padding_mask=key_padding_mask,
                                                dropout_p=dropout_p, config=config)
    checks.one_dtype(("do", do), ("q", q), ("k", k), ("v", v), ("o", o))
    qo, ko, vo = operands(q, k, v)
    B, H, nq, d = qo.shape
    nk = ko.shape[2]
    doo = _like_q(do, "do", qo)
    oo = _like_q(o, "o", qo)
    lo = Operand(lse, "lse", (np.float32,), ndim=3)
    _same_side(lo, qo)
    if lo.shape != (B, H, nq):
        raise ValueError(f"lse: expected shape {(B, H, nq)} ([B, H, Nq]), got {lo.shape}")
    pad = checks.key_padding_mask(key_padding_mask, B, nk, on_host=qo.on_host)
    p, drop_args = dropout_args(dropout_p, seed, "drop probability")   # (and the seed)
    scale = checks.scale(scale, d)
    causal = checks.flag(causal, "causal")
    if tier == "lesson":
        if p > 0.0:
            raise ValueError("dropout_p: the lesson tier's backward has no dropout; use "
                             "tier='fast'")
        if config is not None:
            raise ValueError("config: the lesson tier takes no configuration (its tiles are "
                             "lesson_tiles(d))")
    elif method == "flash":
        cfg = config or bwd_default_config(d)
        if not isinstance(cfg, BwdConfig):
            raise TypeError(f"config: expected a BwdConfig, got {type(cfg).__name__}")
        cfg.check(d)
    elif config is not None:
        raise ValueError("config: only method 'flash' takes a configuration")
    if B * H * nq == 0 or nk == 0:      # empty: no launch; what no query or no key reaches is 0
        return tuple(checks.filled(x.shape, np.float32, 0.0, qo.on_host, like=qo)
                     for x in (qo, ko, vo))
    with using(qo):                     # torch in: torch's stream, torch.empty
        dq3, dk3, dv3 = _backward(qo, ko, vo, doo, oo, lo, B, H, nq, nk, d, method,
                                  cfg if method == "flash" and tier == "fast" else None, pad,
                                  p, drop_args,
                                  scale, causal, tier)
    if qo.on_host:
        return (dq3.copy_to_host().reshape(qo.shape), dk3.copy_to_host().reshape(ko.shape),
                dv3.copy_to_host().reshape(vo.shape))
    return result(dq3, qo.shape), result(dk3, ko.shape), result(dv3, vo.shape)


def _backward(qo, ko, vo, doo, oo, lo, B, H, nq, nk, d, method, cfg, pad, p, drop_args, scale,
              causal, tier):
    bh = B * H
    q3 = qo.device_view((bh, nq, d))
    k3 = ko.device_view((bh, nk, d))
    v3 = vo.device_view((bh, nk, d))
    do3 = doo.device_view((bh, nq, d))
    o3 = oo.device_view((bh, nq, d))
    lse2 = lo.device_view((bh, nq))
    dq3 = empty((bh, nq, d), np.float32)        # (NaN-filled when arrays.POISON: the tests)
    dk3 = empty((bh, nk, d), np.float32)
    dv3 = empty((bh, nk, d), np.float32)

    if tier == "lesson":
        lesson_backward(q3, k3, v3, do3, o3, lse2, dq3, dk3, dv3, scale=scale, causal=causal,
                        kpm=pad, heads=H)
        return dq3, dk3, dv3

    # D_i = Σ_c dO_ic O_ic, one thread per row
    dvec = empty((bh, nq), np.float32)
    rows = bh * nq
    _preprocess(o3.reshape((rows, d)), do3.reshape((rows, d)), dvec.reshape(rows))

    dropping = p > 0.0
    if method == "flash":
        flat = [a.reshape(a.size) for a in (q3, k3, v3, do3, lse2, dvec, dq3, dk3, dv3)]
        _flash(*flat, d=d, n_q=nq, n_k=nk, heads=H, grid_bh=bh, max_q=nq, max_k=nk,
               causal=causal, scale=scale, cfg=cfg, kpm=pad,
               drop_args=drop_args if dropping else None)
    else:
        _naive(q3, k3, v3, do3, lse2, dvec, dq3, dk3, dv3, np.float32(scale), causal, pad, H,
               dropping, drop_args)
    return dq3, dk3, dv3


def lesson_backward(q3, k3, v3, do3, o3, lse2, dq3, dk3, dv3, *, scale, causal, kpm, heads,
                    tiles=None):
    """§30, lesson tier: D = rowsum(dO∘O), then the dK/dV kernel (one block per K/V tile, Bc
    threads), then the dQ kernel (one block per Q tile, Br threads), on [B·H, N, d] device
    arrays (lse2 [B·H, Nq]; kpm uint8 [B, Nk] or None). tiles = (Br, Bc), default
    ``lesson_tiles(d)``; any positive sizes (§33's Bc = 2 included) up to 1024 threads and
    48 KB of shared memory."""
    bh, nq, d = q3.shape
    Br, Bc = tiles or lesson_tiles(d)
    Br, Bc = checks.positive_int(Br, "Br"), checks.positive_int(Bc, "Bc")
    for name, t in (("Br", Br), ("Bc", Bc)):
        if t > 1024 or 2 * t * d * 4 > LESSON_STATIC_SHARED:
            raise ValueError(f"{name} = {t}: the lesson kernels take tiles of at most 1024 rows "
                             f"and 2·{name}·d·4 ≤ {LESSON_STATIC_SHARED} bytes (d = {d})")
    nk = k3.shape[1]
    D = empty((bh, nq), np.float32)
    rows = bh * nq
    launch(LB.D_kernel, -(-rows // 128), 128, (o3.reshape((rows, d)), do3.reshape((rows, d)),
                                               D.reshape(rows)))
    mask = dummy("mask") if kpm is None else kpm
    flags = (d, Br, Bc, bool(causal), kpm is not None)
    grid = (-(-nk // Bc), bh)
    checks.grid(grid, f"k: {nk} keys in tiles of Bc = {Bc}")
    launch(LB.dkdv_kernel(*flags), grid, Bc,
           (q3, k3, v3, do3, lse2, D, dk3, dv3, np.float32(scale), heads, mask))
    grid = (-(-nq // Br), bh)
    checks.grid(grid, f"q: {nq} queries in tiles of Br = {Br}")
    launch(LB.dq_kernel(*flags), grid, Br,
           (q3, k3, v3, do3, lse2, D, dq3, np.float32(scale), heads, mask))


def varlen_attention_backward(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, *, max_seqlen_q,
                              max_seqlen_k, causal=False, scale=None, dropout_p=0.0, seed=0,
                              config=None):
    """§30 + §35: gradients (dq, dk, dv) of ``varlen_attention`` over packed sequences.

    q, do, o: float32 [total_q, H, d]; k, v: float32 [total_k, H, d]; lse: float32
    [total_q, H] — o and lse as ``varlen_attention(..., return_lse=True)`` returned them (with
    dropout: the dropped o). cu_seqlens_q, cu_seqlens_k: int32 [B + 1] offsets (sequence b is
    rows cu[b] … cu[b+1] − 1), max_seqlen_q, max_seqlen_k at least the longest sequence, and
    causal, scale, dropout_p, seed: all as given to the forward (causal bottom-right inside each
    sequence; dropout's Philox counters use b = the sequence, i, j = positions inside it).
    config: a ``BwdConfig``; default per head dim.

    Each sequence's gradients are those of running it alone (a key of sequence b gets gradient
    only from queries of sequence b), with the flash kernels of ``attention_backward`` under
    their VARLEN flag — the same tiles, the same summation order. Empty sequences are allowed:
    n_q,b = 0 gives its keys dk = dv = 0, n_k,b = 0 its queries dq = 0.
    NumPy in → NumPy out; device arrays in → device arrays out, without host copies.
    Returns (dq [total_q, H, d], dk [total_k, H, d], dv [total_k, H, d]), float32.
    """
    checks.one_dtype(("do", do), ("q", q), ("k", k), ("v", v), ("o", o))
    qo, ko, vo, batch, cu_q, cu_k = varlen_operands(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                                    max_seqlen_q, max_seqlen_k)
    total_q, H, d = qo.shape
    total_k = ko.shape[0]
    doo = _like_q(do, "do", qo)
    oo = _like_q(o, "o", qo)
    lo = Operand(lse, "lse", (np.float32,), ndim=2)
    _same_side(lo, qo)
    if lo.shape != (total_q, H):
        raise ValueError(f"lse: expected shape {(total_q, H)} ([total_q, H]), got {lo.shape}")
    p, drop_args = dropout_args(dropout_p, seed, "drop probability")   # (and the seed)
    scale = checks.scale(scale, d)
    causal = checks.flag(causal, "causal")
    cfg = config or bwd_default_config(d)
    if not isinstance(cfg, BwdConfig):
        raise TypeError(f"config: expected a BwdConfig, got {type(cfg).__name__}")
    cfg.check(d)
    if total_q * H == 0 or total_k == 0:    # empty: no launch
        return tuple(checks.filled(x.shape, np.float32, 0.0, qo.on_host, like=qo)
                     for x in (qo, ko, vo))
    with using(qo):
        dq, dk, dv = _varlen_backward(qo, ko, vo, doo, oo, lo, total_q, total_k, H, d, batch,
                                      cu_q, cu_k, max_seqlen_q, max_seqlen_k, causal, scale,
                                      cfg, p, drop_args)
    if qo.on_host:
        return dq.copy_to_host(), dk.copy_to_host(), dv.copy_to_host()
    return result(dq), result(dk), result(dv)


def _varlen_backward(qo, ko, vo, doo, oo, lo, total_q, total_k, H, d, batch, cu_q, cu_k,
                     max_seqlen_q, max_seqlen_k, causal, scale, cfg, p, drop_args):
    dq = empty((total_q, H, d), np.float32)     # (NaN-filled when arrays.POISON: the tests)
    dk = empty((total_k, H, d), np.float32)
    dv = empty((total_k, H, d), np.float32)
    dvec = empty((total_q, H), np.float32)      # D, laid out as lse
    rows = total_q * H
    _preprocess(oo.device_view((rows, d)), doo.device_view((rows, d)), dvec.reshape(rows))
    _flash(qo.device_view(-1), ko.device_view(-1), vo.device_view(-1), doo.device_view(-1),
           lo.device_view(-1), dvec.reshape(rows), dq.reshape(-1), dk.reshape(-1),
           dv.reshape(-1), d=d, n_q=0, n_k=0, heads=H, grid_bh=batch * H,
           max_q=int(max_seqlen_q), max_k=int(max_seqlen_k), causal=causal, scale=scale,
           cfg=cfg, drop_args=drop_args if p > 0.0 else None,
           cu=(cu_q, cu_k))
    return dq, dk, dv


def _flash(qf, kf, vf, dof, lsef, dvecf, dqf, dkf, dvf, *, d, n_q, n_k, heads, grid_bh, max_q,
           max_k, causal, scale, cfg, kpm=None, drop_args=None, cu=None):
    """§30: the dK/dV kernel, then the dQ kernel, on flat arrays (layouts: the forward's
    ``attention_geometry``; ``cu`` = (cu_q, cu_k) selects VARLEN, the grids then sized by the
    longest sequences max_q, max_k). D = rowsum(dO∘O) must already be in dvecf."""
    vec = rows16(d, qf, kf, vf, dof)
    cu_q, cu_k = cu or (dummy("cu"), dummy("cu"))
    args = (np.float32(scale), d, n_q, n_k, heads, cu_q, cu_k,
            dummy("mask") if kpm is None else kpm) + \
        (drop_args or (np.uint32(0), np.uint32(0), np.uint32(0), np.float32(1)))
    flags = (causal, kpm is not None, drop_args is not None, vec, cu is not None)
    D1, D2 = cfg.head_dims(d)
    smem_kv, smem_q = cfg.smem_bytes(d)
    if max_k > 0 and dkf.size:
        kernel = KB.flash_bwd_dkdv_kernel(D1, cfg.Bc, cfg.Br, cfg.TR, cfg.TC, *flags)
        checks.grid((-(-max_k // cfg.Bc), grid_bh), f"k: {max_k} keys in tiles of {cfg.Bc}")
        launch(kernel, (-(-max_k // cfg.Bc), grid_bh), cfg.TR * cfg.TC,
               (qf, kf, vf, dof, lsef, dvecf, dkf, dvf) + args, smem_kv)
    if max_q > 0 and dqf.size:
        kernel = KB.flash_bwd_dq_kernel(D2, cfg.dq_Br, cfg.dq_Bc, cfg.dq_TR, cfg.dq_TC, *flags)
        checks.grid((-(-max_q // cfg.dq_Br), grid_bh), f"q: {max_q} queries in tiles of "
                    f"{cfg.dq_Br}")
        launch(kernel, (-(-max_q // cfg.dq_Br), grid_bh), cfg.dq_TR * cfg.dq_TC,
               (qf, kf, vf, dof, lsef, dvecf, dqf) + args, smem_q)


def _preprocess(o2, do2, dvec):
    """D_i = Σ_c dO_ic O_ic over rows o2, do2 [R, d] → dvec [R], one thread per row."""
    rows = o2.shape[0]
    if rows:
        launch(KB.bwd_preprocess, *stride_grid(rows), (o2, do2, dvec))


def _naive(q3, k3, v3, do3, lse2, dvec, dq3, dk3, dv3, scale, causal, pad, heads, dropping,
           drop_args):
    """§31: P stored, then read back by every later step (the traffic §30 avoids)."""
    bh, nq, d = q3.shape
    nk = k3.shape[1]
    grid = stride_grid(bh * nq * nk)
    tiles = NAIVE_GEMM_TILES
    p = cuda.device_array((bh, nq, nk), np.float32)             # S, then P, then P∘Z
    gemm(q3, k3, p, scale, trans_b=True, causal=causal, offset=nk - nq,    # S = Q Kᵀ · scale
         tiles=tiles)                                                       # (−inf masked)
    kpm = pad if pad is not None else dummy("mask")
    launch(KB.naive_probs_kernel(pad is not None), *grid, (p, lse2, kpm, heads))
    dp = cuda.device_array((bh, nq, nk), np.float32)            # dP, then dS
    gemm(do3, v3, dp, 1.0, trans_b=True, tiles=tiles)           # dP = dO Vᵀ
    launch(KB.naive_ds_kernel(dropping), *grid, (p, dp, dvec, *drop_args))  # dS, P∘Z
    gemm(p, do3, dv3, 1.0, trans_a=True, tiles=tiles)           # dV = (P∘Z)ᵀ dO
    gemm(dp, q3, dk3, scale, trans_a=True, tiles=tiles)         # dK = dSᵀ Q · scale
    gemm(dp, k3, dq3, scale, tiles=tiles,                       # dQ = dS K · scale (masked:
         skip_zero_a=causal or pad is not None)                 # dS = 0 skipped, K may be NaN)
