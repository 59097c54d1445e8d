"""``flashlesson.attention_methods``: naive (§14) and FlashAttention (§23–24, §32, §34) forward passes,
and the merge of partial results (§22). Validation, the registry of attention methods, launch
configurations and dispatch live here; the kernels are in ``kernels_numba/attention.py`` and
``kernels_numba/gemm.py``.
"""

from dataclasses import dataclass

import numpy as np
from numba import cuda

from .kernels_numba import attention as KA
from .kernels_numba import gemm as KG
from .kernels_numba.lesson import attention as LA

from . import calls, checks, tc_methods
from .arrays import Operand, empty, result, using
from .configs import GEMM_TILES, MAX_HEAD_DIM, FlashConfig, LessonConfig, default_config, \
    default_lesson_config
from .dropout import dropout_args
from .launch import dummy, launch, rows16, stride_grid
from .softmax_methods import softmax as _softmax


@dataclass(frozen=True)
class AttentionMethod:
    name: str
    sections: str
    idea: str
    kernels: str
    hbm_extra: str          # what it keeps in HBM beyond Q, K, V, O (and LSE)
    lesson_kernels: str = "—"   # its lesson-tier kernels (tier="lesson"), "—" if none


METHODS = {m.name: m for m in [
    AttentionMethod("naive", "14", "three launches: S = QKᵀ·scale, P = softmax(S), O = PV",
                    "gemm.matmul_kernel, softmax (auto), gemm.matmul_kernel",
                    "S and P, [B·H, Nq, Nk] each",
                    "gemm.matmul_kernel, lesson softmax (auto), gemm.matmul_kernel"),
    AttentionMethod("flash", "23–24, 32, 34", "one kernel: Q tile on chip, K/V tiles streamed, "
                    "online softmax; causal tiles above the diagonal skipped",
                    "attention.flash_forward_kernel", "nothing (m, l, acc stay on chip)",
                    "lesson.attention.flash_forward"),
    # §41–42 (flashlesson.loop_order)
    AttentionMethod("flash_fa1", "41", "FlashAttention-1's loop order: K/V tiles outside, Q "
                    "tiles inside; O, m, l read and written back to HBM for every K/V tile; one "
                    "block per (batch, head)", "attention_fa1.flash_fa1_kernel",
                    "m and l, [B·H, Nq] each (O, m, l re-read and re-written Tc times)",
                    "lesson.loop_order.flash_fa1"),
    AttentionMethod("flash_db", "42", "flash with K/V double-buffered: the next tile's loads "
                    "issued before the current tile's products, one barrier per tile",
                    "attention_db.flash_db_kernel", "nothing (m, l, acc stay on chip)",
                    "lesson.loop_order.flash_double_buffer; §43: "
                    "lesson.loop_order.flash_producer_consumer"),
    AttentionMethod("flash_async", "42–43", "flash_db on Hopper's machinery: K/V copied by "
                    "cp.async.bulk into a ring of stages, FULL/EMPTY mbarriers; §43 "
                    "(producers=1): a producer warpgroup, setmaxnreg (d % 4 == 0, sm_90a)",
                    "attention_async.flash_async_kernel", "nothing (m, l, acc stay on chip)"),
    # §37 (flashlesson.tc_methods): fp16/bf16 inputs choose it by themselves
    AttentionMethod("flash_tc", "37", "flash on tensor cores: S = QKᵀ and PV as mma.sync "
                    "(fp16/bf16 in, fp32 accumulate; float32 in: 3xTF32), softmax on CUDA cores",
                    "attention_tc.flash_tc_kernel, attention_tc.flash_tf32x3_kernel",
                    "nothing (m, l, acc stay on chip)",
                    "lesson.tensor_core.flash_tc_kernel (fp16)"),
    # §42–43 on Hopper (flashlesson.tc_methods.attention_wgmma): d = 64 or 128
    AttentionMethod("flash_wgmma", "37, 42–43", "flash on Hopper's wgmma (FlashAttention-3's "
                    "structure): S = QKᵀ from shared memory, PV with P in registers, K/V in a "
                    "ring of stages on mbarriers, optionally a producer warpgroup (fp16/bf16); "
                    "float32 in: 3xTF32, Q, K, V split once into packed tiles, bulk copies",
                    "attention_wgmma.flash_wgmma_kernel, attention_wgmma_tf32.pack_kernel, "
                    "attention_wgmma_tf32.flash_wgmma_tf32_kernel",
                    "Q, K, V packed (big and small tf32 parts; float32 only)"),
]}
CHOICES = tuple(METHODS)
LESSON_METHODS = tuple(name for name, m in METHODS.items() if m.lesson_kernels != "—")
# Methods that take every float32 option of ``attention`` (dropout, any d): the shared tests
# run them all; "flash_tc" has its own (tests/test_attention_tc.py), and so have "flash_wgmma"
# (d = 64 or 128 only) and "flash_async" (d % 4 == 0 only: tests/test_attention_async.py).
FP32_METHODS = tuple(m for m in METHODS if m not in ("flash_tc", "flash_wgmma", "flash_async"))
# The tensor-core methods (fp16/bf16 in): tests/test_attention_tc.py runs each.
TC_METHODS = ("flash_tc", "flash_wgmma")
# The methods that take float32 inputs of any head dim, which the edge suites (d = 4 … 8) loop
# over: all but "flash_wgmma" (float32 at d = 64 or 128 only: tests/test_attention_tc.py).
FLOAT32_METHODS = tuple(m for m in METHODS if m != "flash_wgmma")


def operands(q, k, v):
    """Validate attention's q [B, H, Nq, d], k and v [B, H, Nk, d] (float32, one side, matching
    shapes, 1 ≤ d ≤ 256; B, H, Nq, Nk may be 0: an empty problem). Returns three Operands."""
    checks.one_dtype(("q", q), ("k", k), ("v", v))
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
    if not 1 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"q: head dimension d = {d} is not supported (1 … {MAX_HEAD_DIM})")
    if B * H > 65535:
        raise ValueError(f"q: B·H = {B * H} exceeds the 65535 blocks of a grid's y dimension")
    return qo, ko, vo



def forward_kernel(cfg, d, causal, vec, pad=False, dropout=False, varlen=False):
    """The forward kernel that ``attention`` launches for a FlashConfig and head dimension d.
    Every flag is passed, in one order: ``flash_forward_kernel`` is cached per argument list
    as written, so a call that leaves the defaults out gets a different dispatcher — one that
    never ran, whose registers no one can ask (§39's table asked such a one)."""
    return KA.flash_forward_kernel(cfg.head_dim(d), cfg.Br, cfg.Bc, cfg.TR, cfg.TC, causal, vec,
                                   cfg.KU, cfg.GROUP, pad, dropout, varlen)


def _flash(q, k, v, o, lse, *, d, n_q, n_k, heads, grid_bh, max_q, causal, scale, config,
           kpm=None, dropout=None, cu=None):
    """Launch the forward kernel on flat arrays (layouts: ``attention_geometry`` in
    kernels_numba/attention.py)."""
    cfg = config or default_config(d, max_q, grid_bh)
    if not isinstance(cfg, FlashConfig):
        raise TypeError(f"config: expected a FlashConfig, got {type(cfg).__name__}")
    cfg.check(d)
    kernel = forward_kernel(cfg, d, causal, rows16(d, q, k, v), kpm is not None,
                            dropout is not None, cu is not None)
    seed_lo, seed_hi, threshold, inv_keep = dropout or (np.uint32(0), np.uint32(0),
                                                        np.uint32(0), np.float32(1))
    cu_q, cu_k = cu or (dummy("cu"), dummy("cu"))
    tiles = -(-max_q // cfg.Br)
    grid = (grid_bh, tiles) if causal else (tiles, grid_bh)
    checks.grid(grid, f"q: {max_q} queries in tiles of Br = {cfg.Br}"
                + (" (causal: query tiles on the grid's y axis)" if causal else ""))
    launch(kernel, grid, cfg.threads,
           (q, k, v, o, lse, np.float32(scale), d, n_q, n_k, heads, cu_q, cu_k,
            dummy("mask") if kpm is None else kpm, seed_lo, seed_hi, threshold, inv_keep),
           cfg.smem_bytes(d))


def attention(q, k, v, *, causal=False, scale=None, key_padding_mask=None, dropout_p=0.0,
              seed=0, return_lse=False, method="flash", config=None, tier="fast"):
    """Softmax attention O = softmax(Q Kᵀ · scale) V, over float32 q [B, H, Nq, d] and
    k, v [B, H, Nk, d].

    method: "flash" (§23–24, §32: one fused kernel) or "naive" (§14: three launches, S and P
        in global memory); "flash_fa1" (§41, FlashAttention-1's loop order) and "flash_db"
        (§42, double-buffered K/V tiles) take a config too; "flash_tc" (§37, tensor cores,
        a ``TcConfig``) is where float16 and bf16 (``BFloat16``, torch bfloat16) inputs go by
        themselves, and runs float32 inputs with 3xTF32 (see ``flashlesson.tc_methods``);
        "flash_wgmma" (§42–43 on Hopper's wgmma, fp16/bf16 with d = 64 or 128, a
        ``WgmmaConfig``: stages of the K/V ring, a producer warpgroup), where fp16/bf16
        inputs with d = 64 or 128 go by themselves on an H100/H200 (``tc_methods.
        wgmma_is_default``: where it measured faster); float32 inputs with d = 64 or 128 run
        there as 3xTF32 (a ``WgmmaTf32Config``; opt-in: the default for float32 stays the
        exact CUDA-core "flash").
    causal: mask keys after each query, aligned bottom-right when Nq ≠ Nk (query i sees key j
        iff j ≤ i + Nk − Nq, as flash-attn ≥ 2.1; torch SDPA's is_causal aligns top-left).
        Rows that see no key give O = 0 and LSE = −inf.
    scale: defaults to 1/√d. return_lse: also return LSE = log Σ_j e^{S_ij}, float32 [B, H, Nq]
        (of the scores before dropout).
    key_padding_mask: bool (or uint8) [B, Nk], True = the key takes part (§35); a batch row
        with no valid key gives zeros.
    dropout_p, seed: §36 dropout on P with the keep-mask of ``dropout_keep_mask(seed, B, H,
        Nq, Nk, dropout_p)``; kept probabilities scaled by 1/(1 − p).
    config: a ``FlashConfig`` (tile sizes, threads) for method "flash"; default per head dim.
        With tier="lesson" a ``LessonConfig(Br, Bc)``.
    tier: "fast" (the tuned kernels) or "lesson" (kernels_numba/lesson/: "flash" runs
        ``lesson.attention.flash_forward``, "naive" the GEMMs with the lesson softmax,
        "flash_fa1" and "flash_db" ``lesson.loop_order``'s kernels — causal, no padding or
        dropout; §43's producer warps: ``flashlesson.loop_order.launch_db_lesson``).
    NumPy in → NumPy out; device arrays in → device arrays out, without host copies.
    torch tensors seen before with these options (no dropout) replay their first call's
    launches (``flashlesson.calls``: no check repeated, since none could answer otherwise).
    """
    if calls.no_dropout(dropout_p):     # the fast path: torch tensors, a key seen before
        tensors = (q, k, v) if key_padding_mask is None else (q, k, v, key_padding_mask)
        facts, ptrs = calls.tensor_facts(tensors)
        if facts is not None:
            key = ("attention", facts, causal, type(causal), scale, type(scale), dropout_p,
                   type(dropout_p), seed, type(seed), return_lse, type(return_lse),
                   key_padding_mask is None, method, config, tier)
            plan = calls.lookup(key)
            if plan is not None:
                return plan(ptrs, tensors)
            return calls.run(key, tensors, lambda: _attention_call(
                q, k, v, causal, scale, key_padding_mask, dropout_p, seed, return_lse, method,
                config, tier))
    return _attention_call(q, k, v, causal, scale, key_padding_mask, dropout_p, seed,
                           return_lse, method, config, tier)


def _attention_call(q, k, v, causal, scale, key_padding_mask, dropout_p, seed, return_lse,
                    method, config, tier):
    """``attention``'s full path: every check, then the launches."""
    if method not in CHOICES:
        raise ValueError(f"method: expected one of {', '.join(CHOICES)}; got {method!r}")
    checks.tier(tier, method, LESSON_METHODS, "attention")
    if tier == "lesson" and tc_methods.low_precision(q) and method != "flash_tc":
        raise TypeError(f"q: tier 'lesson' of method {method!r} takes float32 inputs (fp16 "
                        "runs on method 'flash_tc', either tier; bf16 on its fast tier)")
    if method == "flash" and tier == "fast" and config is None and \
            tc_methods.wgmma_is_default(q, dropout_p):
        method = "flash_wgmma"                                  # (fp16/bf16 on Hopper)
    if method == "flash_wgmma":                                 # §42–43 on Hopper
        checks.integer(seed, "seed", 0, 2**64)
        if config is not None and not isinstance(config, (tc_methods.WgmmaConfig,
                                                          tc_methods.WgmmaTf32Config)):
            raise TypeError(f"config: method 'flash_wgmma' takes a WgmmaConfig (fp16/bf16) or "
                            f"a WgmmaTf32Config (float32), not a {type(config).__name__}")
        return tc_methods.attention_wgmma(q, k, v, causal=causal, scale=scale,
                                          key_padding_mask=key_padding_mask,
                                          dropout_p=dropout_p, return_lse=return_lse,
                                          config=config)
    if method == "flash_tc" or tc_methods.low_precision(q):     # §37: tensor cores
        checks.integer(seed, "seed", 0, 2**64)      # (no dropout there, but a seed is a seed)
        if method not in ("flash", "flash_tc"):
            raise TypeError(f"q: method {method!r} takes float32 inputs; fp16/bf16 run on "
                            "method 'flash_tc' (the default for them)")
        if config is not None and not isinstance(config, tc_methods.TcConfig):
            raise TypeError("config: fp16/bf16 inputs run on method 'flash_tc', which takes a "
                            f"TcConfig, not a {type(config).__name__}")
        return tc_methods.attention_tc(q, k, v, causal=causal, scale=scale,
                                       key_padding_mask=key_padding_mask, dropout_p=dropout_p,
                                       return_lse=return_lse, config=config, tier=tier)
    qo, ko, vo = operands(q, k, v)
    B, H, nq, d = qo.shape
    nk = ko.shape[2]
    scale = checks.scale(scale, d)
    causal = checks.flag(causal, "causal")
    return_lse = checks.flag(return_lse, "return_lse")
    p, dropout = dropout_args(dropout_p, seed)
    kpm = checks.key_padding_mask(key_padding_mask, B, nk)
    if tier == "lesson" and method in _LOOP_ORDER_METHODS:     # §41–43: CAUSAL their only flag
        if kpm is not None:
            raise ValueError(f"key_padding_mask: the lesson tier's {method!r} takes none (§35 "
                             "padding: method 'flash', either tier)")
        if p > 0:
            raise ValueError(f"dropout_p: the lesson tier's {method!r} takes none (§36 "
                             "dropout: method 'flash', either tier)")
    if config is not None:
        want = LessonConfig if tier == "lesson" else FlashConfig
        if not isinstance(config, want):
            raise TypeError(f"config: expected a {want.__name__} (tier {tier!r}), got "
                            f"{type(config).__name__}")
        if method == "naive":
            raise ValueError("config: only method 'flash' takes a configuration")
        config.check(d)
    if B * H * nq == 0 or nk == 0:      # empty: no launch; a row with no key gives 0, −inf
        o = checks.filled((B, H, nq, d), np.float32, 0.0, qo.on_host, like=qo)
        lse = checks.filled((B, H, nq), np.float32, -np.inf, qo.on_host, like=qo)
        return (o, lse) if return_lse else o
    with using(qo):                     # torch in: torch's stream, torch.empty
        o3, lse2 = _attention(qo, ko, vo, B, H, nq, nk, d, method, causal, scale, config, kpm,
                              return_lse, dropout if p > 0 else None, tier)
    shape = (B, H, nq, d)
    if qo.on_host:
        o = o3.copy_to_host().reshape(shape)
        return (o, lse2.copy_to_host().reshape(shape[:3])) if return_lse else o
    o = result(o3, shape)
    return (o, result(lse2, shape[:3])) if return_lse else o


def _attention(qo, ko, vo, B, H, nq, nk, d, method, causal, scale, config, kpm, return_lse,
               dropout, tier):
    bh = B * H
    q3 = qo.device_view((bh, nq, d))
    k3 = ko.device_view((bh, nk, d))
    v3 = vo.device_view((bh, nk, d))
    o3 = empty((bh, nq, d), np.float32)
    lse2 = empty((bh, nq), np.float32)
    if method == "flash" and tier == "lesson":
        flash_lesson(q3, k3, v3, o3, lse2, heads=H, causal=causal, scale=scale,
                     config=config or default_lesson_config(d), kpm=kpm, dropout=dropout)
    elif method == "flash":
        _flash(q3.reshape(-1), k3.reshape(-1), v3.reshape(-1), o3.reshape(-1),
               lse2.reshape(-1), d=d, n_q=nq, n_k=nk, heads=H, grid_bh=bh, max_q=nq,
               causal=causal, scale=scale, config=config, kpm=kpm, dropout=dropout)
    elif method in _LOOP_ORDER_METHODS and tier == "lesson":    # §41–42, lesson tier
        from . import loop_order
        run = loop_order.launch_fa1_lesson if method == "flash_fa1" else \
            loop_order.launch_db_lesson
        run(q3, k3, v3, o3, lse2, causal=causal, scale=scale, config=config)
    elif method in _LOOP_ORDER_METHODS:                     # §41–42
        _loop_order(method, q3, k3, v3, o3, lse2, d=d, nq=nq, nk=nk, heads=H, bh=bh,
                    causal=causal, scale=scale, config=config, kpm=kpm, dropout=dropout)
    else:
        _naive(q3, k3, v3, o3, lse2, scale, causal, return_lse, H, kpm, dropout, tier)
    return o3, lse2


# --- the lesson tier's forward (kernels_numba/lesson/attention.py) -----------------------------
def flash_lesson(q3, k3, v3, o3, lse2, *, heads, causal, scale, config, kpm=None, dropout=None,
                 trace=None):
    """Launch ``lesson.attention.flash_forward`` on [B·H, N, d] device arrays: grid (Q tiles,
    B·H), Br threads a block. trace: None or a float32 device array [B·H, Nq, tiles, 2]."""
    bh, nq, d = q3.shape
    config.check(d)
    kernel = LA.flash_forward(d, config.Br, config.Bc, causal, kpm is not None,
                              dropout is not None)
    seed_lo, seed_hi, threshold, inv_keep = dropout or (np.uint32(0), np.uint32(0),
                                                        np.uint32(0), np.float32(1))
    if trace is None:
        trace = _lesson_no_trace()
    grid = (-(-nq // config.Br), bh)
    checks.grid(grid, f"q: {nq} queries in tiles of Br = {config.Br}")
    launch(kernel, grid, config.Br,
           (q3, k3, v3, o3, lse2, np.float32(scale), heads,
            dummy("mask") if kpm is None else kpm, seed_lo, seed_hi, threshold, inv_keep,
            trace))


_NO_TRACE = []


def _lesson_no_trace():
    """A [1, 1, 0, 2] device array: the lesson kernel records no trace."""
    if not _NO_TRACE:
        _NO_TRACE.append(cuda.to_device(np.zeros((1, 1, 0, 2), np.float32)))
    return _NO_TRACE[0]


def attention_trace(q, k, v, *, config, causal=False, scale=None, key_padding_mask=None):
    """§33: the lesson-tier flash kernel with tiles ``config`` (a ``LessonConfig``, e.g. Bc = 2),
    returning (o, lse, trace): trace float32 [B, H, Nq, ceil(Nk/Bc), 2] holds each row's (m, l)
    after each K/V tile, as the kernel held them (NaN for a tile the row's Q tile skipped, §34).
    NumPy float32 q [B, H, Nq, d], k, v [B, H, Nk, d] in; NumPy out."""
    qo, ko, vo = operands(q, k, v)
    if not qo.on_host:
        raise TypeError("q: attention_trace takes NumPy arrays (it returns the trace on the host)")
    if not isinstance(config, LessonConfig):
        raise TypeError(f"config: expected a LessonConfig, got {type(config).__name__}")
    B, H, nq, d = qo.shape
    nk = ko.shape[2]
    config.check(d)
    scale = checks.scale(scale, d)
    causal = checks.flag(causal, "causal")
    kpm = checks.key_padding_mask(key_padding_mask, B, nk)
    tiles = -(-nk // config.Bc)
    if B * H * nq == 0 or nk == 0:
        raise ValueError(f"q, k: attention_trace needs at least one query and one key; got "
                         f"Nq = {nq}, Nk = {nk}, B·H = {B * H}")
    bh = B * H
    o3 = empty((bh, nq, d), np.float32)
    lse2 = empty((bh, nq), np.float32)
    trace = cuda.to_device(np.full((bh, nq, tiles, 2), np.nan, np.float32))
    flash_lesson(qo.device_view((bh, nq, d)), ko.device_view((bh, nk, d)),
                 vo.device_view((bh, nk, d)), o3, lse2, heads=H, causal=causal, scale=scale,
                 config=config, kpm=kpm, trace=trace)
    return (o3.copy_to_host().reshape(B, H, nq, d), lse2.copy_to_host().reshape(B, H, nq),
            trace.copy_to_host().reshape(B, H, nq, tiles, 2))


# --- §41–42: the loop-order and double-buffer variants (flashlesson.loop_order) -------------
_LOOP_ORDER_METHODS = ("flash_fa1", "flash_db", "flash_async")


def _loop_order(method, q3, k3, v3, o3, lse2, *, d, nq, nk, heads, bh, causal, scale, config,
                kpm, dropout):
    """Method "flash_fa1" (§41: FlashAttention-1's loop order) or "flash_db" (§42: K/V tiles
    double-buffered): the launchers of ``flashlesson.loop_order``, on flat arrays."""
    from . import loop_order
    run = {"flash_fa1": loop_order.launch_fa1, "flash_db": loop_order.launch_db,
           "flash_async": loop_order.launch_async}[method]
    run(q3.reshape(-1), k3.reshape(-1), v3.reshape(-1), o3.reshape(-1), lse2.reshape(-1),
        d=d, n_q=nq, n_k=nk, heads=heads, bh=bh, causal=causal, scale=scale, config=config,
        kpm=kpm, dropout=dropout)
# --- end §41–42 ------------------------------------------------------------------------------


def _check_cu(cu, name, batch, total):
    """int32 cumulative offsets [B + 1]: 0, increasing, ending at the packed row count."""
    co = Operand(cu, name, (np.int32,), ndim=1)
    if co.shape[0] != batch + 1:
        raise ValueError(f"{name}: expected B + 1 = {batch + 1} offsets (as many as "
                         f"cu_seqlens_q), got {co.shape[0]}")
    host = co.obj if co.on_host else co.obj.copy_to_host()      # B + 1 integers
    if host[0] != 0:
        raise ValueError(f"{name}: must start at 0, got {host[0]}")
    if np.any(np.diff(host.astype(np.int64)) < 0):
        raise ValueError(f"{name}: offsets must not decrease, got {host.tolist()}")
    if host[-1] != total:
        raise ValueError(f"{name}: the last offset must be the packed row count {total}, got "
                         f"{host[-1]}")
    return co.device_view(co.shape), np.diff(host.astype(np.int64))


def varlen_operands(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """Validate §35's packed operands (shared by the forward and the backward): q [total_q, H,
    d], k and v [total_k, H, d] float32, offsets int32 [B + 1], max lengths covering the longest
    sequence. Returns (q, k, v Operands, B, cu_q and cu_k on the device)."""
    checks.one_dtype(("q", q), ("k", k), ("v", v))
    qo = Operand(q, "q", (np.float32,), ndim=3)
    ko = Operand(k, "k", (np.float32,), ndim=3)
    vo = Operand(v, "v", (np.float32,), ndim=3)
    if not (qo.on_host == ko.on_host == vo.on_host):
        raise TypeError("q, k, v: all three must be NumPy arrays or all three device arrays")
    total_q, H, d = qo.shape
    total_k = ko.shape[0]
    if ko.shape[1:] != (H, d) or vo.shape != ko.shape:
        raise ValueError(f"k, v: expected [total_k, H, d] with q's H = {H}, d = {d} and equal "
                         f"shapes; got k {ko.shape}, v {vo.shape}")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"q: head dimension d = {d} is not supported (1 … {MAX_HEAD_DIM})")
    cuo = Operand(cu_seqlens_q, "cu_seqlens_q", (np.int32,), ndim=1)
    batch = cuo.shape[0] - 1
    if batch < 1:
        raise ValueError("cu_seqlens_q: expected at least two offsets (one sequence)")
    if batch * H > 65535:
        raise ValueError(f"cu_seqlens_q: B·H = {batch * H} exceeds the 65535 blocks of a "
                         "grid's y dimension")
    cu_q, len_q = _check_cu(cu_seqlens_q, "cu_seqlens_q", batch, total_q)
    cu_k, len_k = _check_cu(cu_seqlens_k, "cu_seqlens_k", batch, total_k)
    for name, value, lengths, total in (("max_seqlen_q", max_seqlen_q, len_q, total_q),
                                        ("max_seqlen_k", max_seqlen_k, len_k, total_k)):
        value = checks.integer(value, name, 0, 2**31)
        longest = int(lengths.max())
        if value < longest:
            raise ValueError(f"{name}: {value} is shorter than the longest sequence "
                             f"({longest})")
        if value > max(total, 1):
            raise ValueError(f"{name}: {value} is longer than the packed total ({total} rows): "
                             "no sequence can be that long")
    return qo, ko, vo, batch, cu_q, cu_k


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, *, max_seqlen_q, max_seqlen_k,
                     causal=False, scale=None, dropout_p=0.0, seed=0, return_lse=False,
                     config=None):
    """§35: attention over packed variable-length sequences, no padding computed.

    q [total_q, H, d], k and v [total_k, H, d] float32; sequence b is rows
    cu_seqlens_q[b] … cu_seqlens_q[b+1] − 1 of q (and likewise of k, v with cu_seqlens_k);
    offsets int32 [B + 1], starting at 0, not decreasing, ending at total. max_seqlen_q and
    max_seqlen_k: at least the longest sequence (the grid is sized by max_seqlen_q). Causal
    alignment, dropout (b = sequence index, i and j = positions inside it) and empty
    sequences as in ``attention``. Returns o [total_q, H, d] (and LSE [total_q, H]).
    """
    qo, ko, vo, batch, cu_q, cu_k = varlen_operands(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                                    max_seqlen_q, max_seqlen_k)
    total_q, H, d = qo.shape
    scale = checks.scale(scale, d)
    causal = checks.flag(causal, "causal")
    return_lse = checks.flag(return_lse, "return_lse")
    p, dropout = dropout_args(dropout_p, seed)
    if config is not None and not isinstance(config, FlashConfig):
        raise TypeError(f"config: expected a FlashConfig, got {type(config).__name__}")
    if config is not None:
        config.check(d)
    if total_q * H == 0 or ko.shape[0] == 0:    # nothing to launch: O = 0, LSE = −inf
        o = checks.filled((total_q, H, d), np.float32, 0.0, qo.on_host, like=qo)
        lse = checks.filled((total_q, H), np.float32, -np.inf, qo.on_host, like=qo)
        return (o, lse) if return_lse else o
    with using(qo):
        o = empty((total_q, H, d), np.float32)
        lse = empty((total_q, H), np.float32)
        _flash(qo.device_view(-1), ko.device_view(-1), vo.device_view(-1), o.reshape(-1),
               lse.reshape(-1), d=d, n_q=0, n_k=0, heads=H, grid_bh=batch * H,
               max_q=int(max_seqlen_q), causal=causal, scale=scale, config=config,
               dropout=dropout if p > 0 else None, cu=(cu_q, cu_k))
    if qo.on_host:
        o, lse = o.copy_to_host(), lse.copy_to_host()
    else:
        o, lse = result(o), result(lse)
    return (o, lse) if return_lse else o


def gemm(a, b, c, alpha, *, trans_a=False, trans_b=False, causal=False, offset=0,
         tiles=GEMM_TILES, skip_zero_a=False):
    """c = alpha · op(a) @ op(b) over the leading batch axis (``gemm.matmul_kernel``): the
    naive paths' products, forward (§14) and backward (§31). causal: −inf above the diagonal
    shifted by ``offset`` (= Nk − Nq, bottom-right alignment). skip_zero_a: terms with a = 0
    skipped (P V, dS K under a mask: a masked key adds nothing even holding NaN/inf)."""
    bm, bn, ty, tx = tiles
    kernel = KG.matmul_kernel(trans_b, causal, bm, bn, ty, tx, trans_a, bool(skip_zero_a))
    m, n = c.shape[1], c.shape[2]
    checks.grid((-(-n // bn), -(-m // bm), c.shape[0]), f"the naive path's GEMM ({m} × {n} "
                f"per head, tiles of {bm} × {bn})")
    launch(kernel, (-(-n // bn), -(-m // bm), c.shape[0]), ty * tx,
           (a, b, c, np.float32(alpha), offset))


def _naive(q3, k3, v3, o3, lse2, scale, causal, return_lse, heads=1, kpm=None, dropout=None,
           tier="fast"):
    """§14: S = QKᵀ·scale → HBM; P = softmax(S) → HBM; O = PV. (§35 padding: −inf into S;
    §36 dropout: P ∘ Z, after the LSE's S is kept.)"""
    bh, nq, d = q3.shape
    nk = k3.shape[1]
    s = cuda.device_array((bh, nq, nk), np.float32)         # S, written to global memory
    gemm(q3, k3, s, scale, trans_b=True, causal=causal, offset=nk - nq)
    if kpm is not None:
        launch(KA.pad_scores, *stride_grid(s.size), (s, kpm, heads))
    p = cuda.device_array((bh, nq, nk), np.float32)         # P, written to global memory
    _softmax(s, method="auto", out=p, tier=tier)           # the softmax kernels, reused
    if dropout is not None:
        launch(KA.dropout_probs, *stride_grid(bh * nq * -(-nk // 4)), (p, *dropout))
    gemm(p, v3, o3, 1.0, skip_zero_a=causal or kpm is not None)  # O = P V (masked: P = 0
                                                            # skipped, V may hold NaN/inf there)
    if return_lse:                                          # one more read of S: its row LSE
        rows = bh * nq
        launch(KA.row_lse, -(-rows // 4), 128, (s.reshape((rows, nk)), lse2.reshape(rows)))


def merge_attention(o_parts, lse_parts):
    """§22: combine outputs computed over disjoint key sets (split-KV, flash-decoding).

    o_parts [P, ..., d] float32 and lse_parts [P, ...] float32 (natural-log LSE of each part);
    returns (o [..., d], lse [...]) as if attention had seen all the keys at once. A part with
    LSE = −inf (it saw no key) contributes nothing; every part −inf gives o = 0, lse = −inf.
    An LSE of +inf or NaN is refused (ValueError naming lse_parts; device inputs' LSEs are
    copied to the host for this check). NumPy in → NumPy out; device → device.
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
    host_lse = lo.obj if lo.on_host else lo.obj.copy_to_host()    # (P × rows floats)
    checks.lse_parts_values(host_lse)
    rows = int(np.prod(oo.shape[1:-1], dtype=np.int64))
    with using(oo):
        o = empty((rows, d), np.float32)
        lse = empty(rows, np.float32)
        if rows:
            launch(KA.merge_attention_kernel, rows, 32,
                   (oo.device_view((n_parts, rows, d)), lo.device_view((n_parts, rows)), o, lse))
    out_shape = oo.shape[1:]
    if oo.on_host:
        return o.copy_to_host().reshape(out_shape), lse.copy_to_host().reshape(out_shape[:-1])
    return result(o, out_shape), result(lse, out_shape[:-1])
