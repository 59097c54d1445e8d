"""``flashlesson.loop_order``: FlashAttention-1's loop order (§41), double-buffered K/V tiles (§42)
and producer/consumer warps (§43) — launchers, configurations and their IO model.

The kernels are ``kernels_numba/attention_fa1.py`` and ``kernels_numba/attention_db.py``; the
methods ``"flash_fa1"`` and ``"flash_db"`` of ``flashlesson.attention`` call the launchers here.

- ``launch_fa1(…, q_blocks=1)``: Algorithm 1 of FlashAttention (K/V outside, O, m, l through
  HBM), ``q_blocks`` blocks per head (1: the paper's one block per head; ⌈Nq/Br⌉: FA2's grid).
- ``launch_db(…, producers=0)``: FA2's loop, next K/V tile prefetched (producers = 0: by every
  thread, through registers; producers = P: by P warps that only load).
- ``launch_async(…, producers=0, stages=None)``: §42–43 on Hopper's machinery
  (``kernels_numba/attention_async.py``, method ``"flash_async"``): K/V tiles copied by the
  copy engine into a ring of stages, FULL/EMPTY mbarriers (producers = 0: warp 0 issues the
  copies and computes; producers = 1: a producer warpgroup that only issues them, registers
  moved to the consumers with setmaxnreg).
- the lesson tier (``kernels_numba/lesson/loop_order.py``; ``attention(…, tier="lesson")``):
  ``launch_fa1_lesson`` (§41), ``launch_db_lesson(…, producers=0)`` (§42; producers = P: §43),
  on [B·H, N, d] arrays with a ``LessonConfig``; ``lesson_db_config(d)`` its default tiles.
- ``fa1_attention_traffic``, ``db_attention_traffic``: element reads and writes of each global
  array, as ``flashlesson.traffic``'s models (held to the counter by tests/test_loop_order.py).
- ``attention_traffic``: the model of any attention method (the registry's): these two here,
  the others from ``flashlesson.traffic``.
"""

import numpy as np

from .kernels_numba import attention_async as KAS
from .kernels_numba import attention_db as KDB
from .kernels_numba import attention_fa1 as KF1
from .kernels_numba.lesson import loop_order as LL

from .arrays import empty
from .checks import grid as check_grid
from . import device
from .configs import FlashConfig, LessonConfig, default_config, default_lesson_config
from .io_model import Access, attention_traffic as _attention_traffic, \
    flash_attention_traffic
from .launch import aligned16 as _aligned16, compute_capability, dummy, launch, \
    max_shared_bytes, rows16

FA1 = "flash_fa1"
DB = "flash_db"
ASYNC = "flash_async"


# When the forward kernel's default tiles do not fit the double buffers (d = 256: 366 KB):
# Br = 64, Bc = 32 (221 KB; not tuned on a GPU yet).
DB_FALLBACK = FlashConfig(Br=64, Bc=32, TR=16, TC=8, KU=2, GROUP=4)


def config_for(d, nq=None, bh=None, config=None, method=None):
    """The tile configuration: ``config`` or, by default, the forward kernel's (same tiles:
    the timings then differ by the loop order or the buffering, not by the tiles) — for
    ``flash_db``, ``DB_FALLBACK`` where those do not fit its shared memory."""
    cfg = config or default_config(d, nq, bh)
    if not isinstance(cfg, FlashConfig):
        raise TypeError(f"config: expected a FlashConfig, got {type(cfg).__name__}")
    if config is None and method == DB and smem_bytes(DB, cfg, d) > max_shared_bytes():
        cfg = DB_FALLBACK
    return cfg


def smem_bytes(method, cfg, d):
    """Dynamic shared memory per block of ``method``'s kernel with ``cfg``, in bytes."""
    floats = KF1.fa1_smem_floats if method == FA1 else KDB.db_smem_floats
    return 4 * floats(cfg.head_dim(d), cfg.Br, cfg.Bc)


def check_config(method, cfg, d, producers=0):
    """``FlashConfig.check`` (tiles, threads, registers), then this kernel's shared memory."""
    cfg.check(d)            # (checks flash_forward's shared memory, which is smaller)
    need = smem_bytes(method, cfg, d)
    if need > max_shared_bytes():
        raise ValueError(f"config {cfg}: {method} needs {need} bytes of shared memory for "
                         f"d = {d}; this device allows {max_shared_bytes()}")
    if cfg.threads + 32 * producers > 1024:
        raise ValueError(f"config {cfg}: {cfg.threads} + 32·{producers} producer threads "
                         "exceed 1024")


def _extras(kpm, dropout):
    seed_lo, seed_hi, threshold, inv_keep = dropout or (np.uint32(0), np.uint32(0),
                                                        np.uint32(0), np.float32(1))
    return (dummy("mask") if kpm is None else kpm), seed_lo, seed_hi, threshold, inv_keep


def launch_fa1(q, k, v, o, lse, *, d, n_q, n_k, heads, bh, causal, scale, config=None,
               kpm=None, dropout=None, q_blocks=1):
    """§41: FlashAttention-1's loop order on flat padded arrays (q, o [B·H·Nq·d], k, v
    [B·H·Nk·d], lse [B·H·Nq]). Allocates m and l [B·H·Nq] in global memory (the kernel's
    scratch: Algorithm 1 keeps them in HBM). q_blocks: blocks per head, each owning every
    q_blocks-th Q tile (1 = Algorithm 1's one block per head; at most ⌈Nq/Br⌉)."""
    cfg = config_for(d, n_q, bh, config)
    check_config(FA1, cfg, d)
    n_qt = -(-n_q // cfg.Br)
    if not isinstance(q_blocks, (int, np.integer)) or not 1 <= q_blocks <= n_qt:
        raise ValueError(f"q_blocks: expected an int from 1 to ⌈Nq/Br⌉ = {n_qt}, got "
                         f"{q_blocks!r}")
    kernel = KF1.flash_fa1_kernel(cfg.head_dim(d), cfg.Br, cfg.Bc, cfg.TR, cfg.TC,
                                  bool(causal), rows16(d, q, k, v), cfg.KU,
                                  kpm is not None, dropout is not None)
    m = empty(bh * n_q, np.float32)             # Algorithm 1's m and l, in HBM
    l = empty(bh * n_q, np.float32)             # noqa: E741 - the lesson's name
    launch(kernel, (int(q_blocks), bh), cfg.threads,
           (q, k, v, o, lse, m, l, np.float32(scale), d, n_q, n_k, heads, int(q_blocks),
            *_extras(kpm, dropout)), smem_bytes(FA1, cfg, d))


def launch_db(q, k, v, o, lse, *, d, n_q, n_k, heads, bh, causal, scale, config=None,
              kpm=None, dropout=None, producers=0):
    """§42 (producers = 0) / §43 (producers = P warps that only load): FA2's loop with the
    next K/V tile in flight, on flat padded arrays (as ``launch_fa1``); grid as ``flash``."""
    cfg = config_for(d, n_q, bh, config, DB)
    if not isinstance(producers, (int, np.integer)) or producers < 0:
        raise ValueError(f"producers: expected an int ≥ 0, got {producers!r}")
    check_config(DB, cfg, d, producers)
    kernel = KDB.flash_db_kernel(cfg.head_dim(d), cfg.Br, cfg.Bc, cfg.TR, cfg.TC,
                                 bool(causal), rows16(d, q, k, v), cfg.KU,
                                 kpm is not None, dropout is not None, int(producers))
    tiles = -(-n_q // cfg.Br)
    launch(kernel, (bh, tiles) if causal else (tiles, bh), cfg.threads + 32 * int(producers),
           (q, k, v, o, lse, np.float32(scale), d, n_q, n_k, heads, *_extras(kpm, dropout)),
           smem_bytes(DB, cfg, d))


# ---------------------------------------------------------------------------------------------
# §42–43 on Hopper's machinery (kernels_numba/attention_async.py)
# ---------------------------------------------------------------------------------------------
# §43 needs whole consumer warpgroups (setmaxnreg acts per warpgroup): in the simulator, whose
# default tiles have one warp, these (128 consumer threads, several tiles at tiny shapes)
ASYNC_SIM_WS = FlashConfig(Br=64, Bc=32, TR=16, TC=8)
MAX_STAGES = 4


def async_smem_bytes(cfg, d, stages):
    """Dynamic shared memory per block of ``flash_async_kernel``, in bytes."""
    return 4 * KAS.async_smem_floats(cfg.head_dim(d), cfg.Br, cfg.Bc, stages)


def async_config(d, nq=None, bh=None, config=None, producers=0, stages=None):
    """(config, stages) of ``flash_async``: ``config`` or flash's default tiles (§43 in the
    simulator: ``ASYNC_SIM_WS``; on the GPU at d ≤ 64 ``measured_async_config``, 2 stages
    unless given); stages: given, or 2 for §42 (double buffering) and for §43
    the deepest ring of ≤ 4 stages that fits in shared memory (at d = 64 the ring does not
    change how many blocks an SM holds: one from 2 stages on)."""
    if config is None and producers and device.SIMULATOR:
        cfg = ASYNC_SIM_WS
    else:
        cfg = config or default_config(d, nq, bh)
    if not isinstance(cfg, FlashConfig):
        raise TypeError(f"config: expected a FlashConfig, got {type(cfg).__name__}")
    if config is None and not device.SIMULATOR and d <= 64:
        pick = measured_async_config(cfg, producers)
        if pick.threads + 128 * bool(producers) <= 1024 and \
                async_smem_bytes(pick, d, 2) <= max_shared_bytes():
            return pick, 2 if stages is None else stages
    if stages is None:
        stages = 2
        if producers:
            while stages < MAX_STAGES and \
                    async_smem_bytes(cfg, d, stages + 1) <= max_shared_bytes():
                stages += 1
    return cfg, stages


def measured_async_config(cfg, producers):
    """flash_async's tiles on the GPU at d ≤ 64, from flash's default ``cfg``: the
    tiles measured fastest on the H200 (2026-12-01, B2 H16 N4096 d64 fp32,
    docs/logs/2026-12-01_async_loop_order_h200.log; flash 31.4 TFLOP/s). §42: Bc = 32, so that two blocks fit on
    an SM (31.2 TFLOP/s; Bc = 64: 21.6, one block). §43: two consumer warpgroups (Br and TR
    doubled: 35.5 TFLOP/s, 1.13× flash; one: 27.0, at 2, 3 or 4 stages alike)."""
    if producers:
        return FlashConfig(2 * cfg.Br, cfg.Bc, 2 * cfg.TR, cfg.TC, cfg.KU, cfg.GROUP)
    return FlashConfig(cfg.Br, 32, cfg.TR, cfg.TC, cfg.KU, cfg.GROUP)


def check_async(cfg, d, producers, stages, arrays):
    """Everything ``flash_async_kernel`` cannot run, refused with its reason."""
    if d % 4:
        raise ValueError(f"d: method {ASYNC!r} copies K/V rows with cp.async.bulk, which moves "
                         f"multiples of 16 bytes: d must be a multiple of 4, got d = {d} "
                         "(other d: method 'flash_db' or 'flash')")
    if not _aligned16(*arrays):
        raise ValueError(f"q, k, v: method {ASYNC!r} needs 16-byte aligned data (cp.async.bulk's "
                         "addresses); a view into a bigger tensor may not be: pass a copy")
    if isinstance(producers, bool) or producers not in (0, 1):
        raise ValueError(f"producers: method {ASYNC!r} takes 0 (§42: warp 0 issues the copies) "
                         f"or 1 (§43: one producer warpgroup), got {producers!r}")
    if isinstance(stages, bool) or not isinstance(stages, (int, np.integer)) or \
            not 2 <= stages <= MAX_STAGES:
        raise ValueError(f"stages: expected an int from 2 to {MAX_STAGES}, got {stages!r}")
    cfg.check(d)
    if producers:
        KAS.register_split(cfg.threads)         # (raises: whole warpgroups only)
    need = async_smem_bytes(cfg, d, stages)
    if need > max_shared_bytes():
        raise ValueError(f"config {cfg}, stages = {stages}: {ASYNC} needs {need} bytes of "
                         f"shared memory for d = {d}; this device allows {max_shared_bytes()}")
    if not device.SIMULATOR:
        cc = compute_capability()
        if cc < (9, 0):
            raise ValueError(f"method {ASYNC!r}: cp.async.bulk, mbarrier expect_tx and "
                             f"setmaxnreg need a Hopper GPU (sm_90a); this one is sm_{cc[0]}"
                             f"{cc[1]}")


def launch_async(q, k, v, o, lse, *, d, n_q, n_k, heads, bh, causal, scale, config=None,
                 kpm=None, dropout=None, producers=0, stages=None):
    """§42 (producers = 0) / §43 (producers = 1): FA2's loop with K/V tiles in a ring of
    ``stages`` shared buffers filled by bulk copies, on flat padded arrays (as
    ``launch_db``); grid as ``flash``; block TR·TC threads (+ 128 with the producer
    warpgroup)."""
    cfg, stages = async_config(d, n_q, bh, config, producers, stages)
    check_async(cfg, d, producers, stages, (q, k, v))
    kernel = KAS.flash_async_kernel(cfg.head_dim(d), cfg.Br, cfg.Bc, cfg.TR, cfg.TC,
                                    bool(causal), cfg.KU, kpm is not None, dropout is not None,
                                    int(producers), int(stages))
    tiles = -(-n_q // cfg.Br)
    launch(kernel, (bh, tiles) if causal else (tiles, bh),
           cfg.threads + KAS.WARPGROUP * int(producers),
           (q, k, v, o, lse, np.float32(scale), d, n_q, n_k, heads, *_extras(kpm, dropout)),
           async_smem_bytes(cfg, d, stages))


# ---------------------------------------------------------------------------------------------
# The lesson tier (kernels_numba/lesson/loop_order.py)
# ---------------------------------------------------------------------------------------------
STATIC_SMEM = 48 * 1024         # the lesson kernels' shared arrays are static: at most 48 KB


def lesson_db_config(d):
    """§42–43's default tiles: the lesson forward's (``default_lesson_config``), Bc halved until
    the two buffers (4·Bc·d float32) fit in 48 KB."""
    cfg = default_lesson_config(d)
    bc = cfg.Bc
    while bc > 1 and 16 * bc * d > STATIC_SMEM:
        bc //= 2
    return LessonConfig(Br=cfg.Br, Bc=bc)


def _lesson_config(config, d, buffers):
    if not isinstance(config, LessonConfig):
        raise TypeError(f"config: expected a LessonConfig, got {type(config).__name__}")
    config.check(d)
    need = 4 * buffers * 2 * config.Bc * d
    if need > STATIC_SMEM:
        raise ValueError(f"config {config}: {buffers} K/V buffers need {buffers}·2·Bc·d·4 = "
                         f"{need} bytes of static shared memory; at most {STATIC_SMEM}")
    return config


def launch_fa1_lesson(q3, k3, v3, o3, lse2, *, causal, scale, config=None):
    """§41, the lesson kernel ``flash_fa1`` on [B·H, N, d] device arrays: one block per (batch,
    head), Br threads; allocates its m and l [B·H, Nq] in global memory (Algorithm 1's HBM)."""
    bh, nq, d = q3.shape
    cfg = _lesson_config(config or default_lesson_config(d), d, 1)
    check_grid((bh,), f"q: {bh} (batch, head) pairs, one block each")
    m = empty((bh, nq), np.float32)             # Algorithm 1's m and l, in HBM
    l = empty((bh, nq), np.float32)             # noqa: E741 - the lesson's name
    launch(LL.flash_fa1(d, cfg.Br, cfg.Bc, bool(causal)), (bh,), cfg.Br,
           (q3, k3, v3, o3, m, l, lse2, np.float32(scale)))


def launch_db_lesson(q3, k3, v3, o3, lse2, *, causal, scale, config=None, producers=0):
    """§42 (producers = 0: ``flash_double_buffer``, Br threads) or §43 (producers = P:
    ``flash_producer_consumer``, Br + 32·P threads), the lesson kernels on [B·H, N, d] device
    arrays; grid (⌈Nq/Br⌉, B·H)."""
    bh, nq, d = q3.shape
    cfg = _lesson_config(config or lesson_db_config(d), d, 2)
    if isinstance(producers, bool) or not isinstance(producers, (int, np.integer)) \
            or producers < 0:
        raise ValueError(f"producers: expected an int ≥ 0, got {producers!r}")
    if cfg.Br + 32 * producers > 1024:
        raise ValueError(f"producers: Br = {cfg.Br} consumer threads + 32·{producers} producer "
                         "threads exceed 1024")
    grid = (-(-nq // cfg.Br), bh)
    check_grid(grid, f"q: {nq} queries in tiles of Br = {cfg.Br}")
    if producers:
        kernel = LL.flash_producer_consumer(d, cfg.Br, cfg.Bc, int(producers), bool(causal))
    else:
        kernel = LL.flash_double_buffer(d, cfg.Br, cfg.Bc, bool(causal))
    launch(kernel, grid, cfg.Br + 32 * int(producers), (q3, k3, v3, o3, lse2, np.float32(scale)))


# ---------------------------------------------------------------------------------------------
# The IO model
# ---------------------------------------------------------------------------------------------
def fa1_steps(nq, nk, causal, config, q_blocks=1):
    """The (K/V tile j, Q tile i) steps of one head, per block, as ``flash_fa1_kernel`` takes
    them: a list per block qb of (k0, [q0, …]) for the K/V tiles it loads."""
    Br, Bc = config.Br, config.Bc
    n_qt, n_kv = -(-nq // Br), -(-nk // Bc)
    offset = nk - nq
    if causal:
        last_key = nq - 1 + offset
        n_kv = min(n_kv, last_key // Bc + 1) if last_key >= 0 else 0
    blocks = []
    for qb in range(q_blocks):
        steps = []
        for j in range(n_kv):
            first = max(j * Bc - offset, 0) // Br if causal else 0
            start = first + (qb - first) % q_blocks
            if start < n_qt:
                steps.append((j * Bc, [t * Br for t in range(start, n_qt, q_blocks)]))
        blocks.append(steps)
    return blocks


def fa1_attention_traffic(B, H, nq, nk, d, causal=False, config=None, q_blocks=1):
    """§41: element reads and writes of ``attention(…, method="flash_fa1")`` per global array.

    Per head, with rows(x0, B, N) = min(B, N − x0) (the loaders issue no load past N or d):
    - K, V: each K/V tile a block visits, once per block: Σ rows(k0, Bc, Nk)·d (the visit list
      of ``fa1_steps``: causal skips the tiles no query of the block sees);
    - Q: once per (K/V tile, Q tile) step: Σ_steps rows(q0, Br, Nq)·d;
    - O: Nq·d writes (line 2, O = 0), then per step rows·d reads and rows·d writes (line 12);
    - m, l: Nq writes each (line 2), then per step one read and one write per row (lines 8,
      13: the row's thread tc = 0 reads and writes), then one read per row for the LSE;
    - LSE: Nq writes.
    Without causal that is Tc = ⌈Nk/Bc⌉ steps per Q tile: Q read Tc times, O read Tc and
    written Tc + 1 times, m and l read Tc + 1 and written Tc + 1 times.
    """
    bh = B * H
    cfg = config_for(d, nq, bh, config)
    kv = qd = steps_rows = 0
    for steps in fa1_steps(nq, nk, causal, cfg, q_blocks):
        for k0, q0s in steps:
            kv += min(cfg.Bc, nk - k0)
            rows = sum(min(cfg.Br, nq - q0) for q0 in q0s)
            steps_rows += rows
    qd = steps_rows * d
    return {
        "q": Access(bh * qd, 0, 4, bh * nq * d),
        "k": Access(bh * kv * d, 0, 4, bh * nk * d),
        "v": Access(bh * kv * d, 0, 4, bh * nk * d),
        "o": Access(bh * qd, bh * (nq * d + qd), 4, bh * nq * d),
        "lse": Access(0, bh * nq, 4, bh * nq),
        "m": Access(bh * (steps_rows + nq), bh * (nq + steps_rows), 4, bh * nq),
        "l": Access(bh * (steps_rows + nq), bh * (nq + steps_rows), 4, bh * nq),
    }


def db_attention_traffic(B, H, nq, nk, d, causal=False, config=None):
    """§42–43: the same global traffic as ``flash`` with the same tiles (each visited K/V tile
    loaded once per Q tile, prefetched or not; Q once; O and LSE written once): the
    double-buffered kernel changes when the loads happen, not how many there are."""
    return flash_attention_traffic(B, H, nq, nk, d, causal,
                                   config_for(d, nq, B * H, config, DB))


def attention_traffic(B, H, nq, nk, d, method="flash", causal=False, config=None,
                      return_lse=True, key_padding_mask=None):
    """The model of ``attention(…, method=method)`` for every registered method (called as
    ``flashlesson.traffic.attention_traffic``; key padding is modelled for naive and flash
    only)."""
    if method in (FA1, DB, ASYNC):
        if key_padding_mask is not None:
            raise ValueError(f"method {method!r}: the IO model has no key padding mask")
        if method == FA1:
            return fa1_attention_traffic(B, H, nq, nk, d, causal, config)
        if method == ASYNC:         # (the copies stop at Nk: flash's loads, from the copy engine)
            return flash_attention_traffic(B, H, nq, nk, d, causal,
                                           async_config(d, nq, B * H, config)[0])
        return db_attention_traffic(B, H, nq, nk, d, causal, config)
    if key_padding_mask is None:
        return _attention_traffic(B, H, nq, nk, d, method, causal, config, return_lse)
    return _attention_traffic(B, H, nq, nk, d, method, causal, config, return_lse,
                              key_padding_mask=key_padding_mask)


def fa1_vs_fa2_bytes(B, H, n, d, causal=False, config=None):
    """(FA1 bytes, FA2 bytes) of the models at one size (§41's table), float32."""
    from .io_model import total_bytes
    return (total_bytes(fa1_attention_traffic(B, H, n, n, d, causal, config)),
            total_bytes(flash_attention_traffic(B, H, n, n, d, causal,
                                                config_for(d, n, B * H, config))))


__all__ = ["launch_fa1", "launch_db", "launch_async", "async_config", "async_smem_bytes",
           "ASYNC", "fa1_steps", "fa1_attention_traffic",
           "db_attention_traffic", "attention_traffic", "fa1_vs_fa2_bytes", "config_for",
           "check_config", "smem_bytes", "FA1", "DB"]
