"""Tests that fail when a kernel is wrong where the other tests do not look:

- compile-time options crossed: dropout × key padding × causal under tiles where each
  thread's column loops run twice (Bc = 8·TC: two groups of four S columns; D = 8·TC: two
  groups of O columns), with KU and GROUP > 1 — the simulator's default tiles run each loop
  once, so an index that is wrong only in the second iteration passes there;
- causal shapes whose last visible key falls exactly on a K/V tile edge (Nq = Nk, Nq < Nk,
  Nq > Nk), forward and backward, every method (an off-by-one in the tiles-visited rule drops
  or adds exactly one tile there), and for every forward method that takes causal on its own
  default tiles (``edge_shape``: each shape's off-by-one);
- the backward with dropout where a thread's dK/dV key loops run twice (two quads of keys);
- the project's kernels run in the simulator's race mode (``kernels_numba/sim/races.py``): a
  shared-memory race between warps is an error whatever the schedule.

Tiny shapes: a few seconds each in the simulator; on a GPU the same checks run as they are.
"""

import numpy as np
import pytest
from conftest import SIM, by_device, check_attention, check_grads
from numba import cuda

from flashlesson import reference
from flashlesson import BwdConfig, FlashConfig, TcBwdConfig, TcConfig, WgmmaConfig, \
    WgmmaTf32Config, attention
from flashlesson import attention_backward, configs, loop_order, softmax, tc_methods
from flashlesson.reference.philox import dropout_keep_mask


# Two groups of four S columns and of O columns per thread; unrolled products, grouped loads.
CROSS_CONFIGS = [FlashConfig(Br=32, Bc=32, TR=8, TC=4, KU=2, GROUP=2),
                 FlashConfig(Br=16, Bc=64, TR=4, TC=8, KU=4, GROUP=8)]
CROSS_BWD = BwdConfig(Bc=32, Br=32, TR=8, TC=4, dq_Br=32, dq_Bc=32, dq_TR=8, dq_TC=4)


def _qkv(rng, B, H, nq, nk, d):
    return tuple(rng.standard_normal((B, H, n, d)).astype(np.float32) for n in (nq, nk, nk))


def _options(rng, B, H, nq, nk, causal, pad, p):
    kw, ref = dict(causal=causal), dict(causal=causal)
    if pad:
        kpm = rng.random((B, nk)) > 0.3
        kpm[0, -1] = False
        kw["key_padding_mask"] = ref["key_padding_mask"] = kpm
    if p:
        seed = int(rng.integers(0, 2**63))
        kw.update(dropout_p=p, seed=seed)
        ref.update(dropout_mask=dropout_keep_mask(seed, B, H, nq, nk, p), dropout_p=p)
    return kw, ref


@pytest.mark.parametrize("config", CROSS_CONFIGS, ids=str)
@pytest.mark.parametrize("causal,pad,p", [(False, True, 0.3), (True, True, 0.3),
                                          (True, False, 0.5)])
def test_forward_options_crossed_on_two_iteration_tiles(config, causal, pad, p, rng):
    B, H, nq, nk, d = by_device((2, 1, 37, 45, 40), (2, 2, 300, 333, 120))
    q, k, v = _qkv(rng, B, H, nq, nk, d)
    assert config.Bc // config.TC >= 8 and config.head_dim(d) // config.TC >= 8
    kw, ref = _options(rng, B, H, nq, nk, causal, pad, p)
    o, lse = attention(q, k, v, return_lse=True, config=config, **kw)
    check_attention(o, lse, *reference.attention(q, k, v, **ref), q, k, v, dropout_p=p)


@pytest.mark.parametrize("method", ["flash_fa1", "flash_db"])
def test_loop_orders_options_crossed_on_two_iteration_tiles(method, rng):
    """§41–42's kernels share flash_steps.py's mask, keep bits and Pᵀ store: the same crossing."""
    B, H, nq, nk, d = by_device((2, 1, 37, 45, 40), (2, 2, 300, 333, 120))
    q, k, v = _qkv(rng, B, H, nq, nk, d)
    kw, ref = _options(rng, B, H, nq, nk, True, True, 0.3)
    o, lse = attention(q, k, v, return_lse=True, method=method,
                       config=FlashConfig(Br=32, Bc=32, TR=8, TC=4, KU=2), **kw)
    check_attention(o, lse, *reference.attention(q, k, v, **ref), q, k, v, dropout_p=0.3)


@pytest.mark.parametrize("causal,pad,p", [(True, True, 0.3), (False, False, 0.0)])
def test_backward_options_crossed_on_two_iteration_tiles(causal, pad, p, rng):
    # (d ≤ 40: CROSS_BWD's 4 keys × 2·D/TC gradients + S, dP stay within 160 registers)
    B, H, nq, nk, d = by_device((2, 1, 37, 45, 24), (2, 2, 300, 333, 40))
    q, k, v = _qkv(rng, B, H, nq, nk, d)
    do = rng.standard_normal(q.shape).astype(np.float32)
    kw, ref = _options(rng, B, H, nq, nk, causal, pad, p)
    o, lse = attention(q, k, v, return_lse=True, **kw)
    grads = attention_backward(do, q, k, v, o, lse, config=CROSS_BWD, **kw)
    check_grads(grads, reference.attention_backward(do, q, k, v, **ref), q, k)


# Causal, bottom-right: query i sees key j ≤ i + Nk − Nq. With the simulator's tiles (Q tiles
# of 32 rows, K/V tiles of 16 keys; the backward's dK/dV Q tiles of 16) the last row of the
# first Q tile sees exactly up to a tile's last key, and a K tile's first query is a Q tile's
# first row; with Nk − Nq = 1 a K tile's first query is a Q tile's *last* row (query 31 is the
# first to see key 32). (On the GPU: multiples of 64, offsets of 64, and Nk − Nq = 1.)
EDGE_SHAPES = by_device([(32, 32), (40, 56), (48, 32), (47, 48)],
                        [(256, 256), (192, 320), (320, 192), (255, 256)])
# Heads: one in the simulator (the tiles-visited rule is per (batch, head); more than one head
# is the other tests' business), two on the GPU.
EDGE_H = by_device(1, 2)


@pytest.mark.parametrize("nq,nk", EDGE_SHAPES, ids=lambda s: str(s))
@pytest.mark.parametrize("method", ["flash", "flash_fa1", "flash_db"])
def test_forward_causal_last_key_on_a_tile_edge(method, nq, nk, rng):
    q, k, v = _qkv(rng, 1, EDGE_H, nq, nk, 8)
    o, lse = attention(q, k, v, causal=True, return_lse=True, method=method)
    check_attention(o, lse, *reference.attention(q, k, v, causal=True), q, k, v)


@pytest.mark.parametrize("nq,nk", EDGE_SHAPES, ids=lambda s: str(s))
def test_backward_causal_last_key_on_a_tile_edge(nq, nk, rng):
    q, k, v = _qkv(rng, 1, EDGE_H, nq, nk, 8)
    do = rng.standard_normal(q.shape).astype(np.float32)
    o, lse = attention(q, k, v, causal=True, return_lse=True)
    grads = attention_backward(do, q, k, v, o, lse, causal=True)
    check_grads(grads, reference.attention_backward(do, q, k, v, causal=True), q, k)


@pytest.mark.parametrize("nq,nk", EDGE_SHAPES[1:], ids=lambda s: str(s))
def test_tensor_cores_causal_last_key_on_a_tile_edge(nq, nk, rng):
    """fp16 in (exact inputs for the float64 oracle), forward and backward on mma.sync."""
    q, k, v = (x.astype(np.float16) for x in _qkv(rng, 1, 1, nq, nk, 16))
    do = rng.standard_normal(q.shape).astype(np.float16)
    q64, k64, v64, do64 = (x.astype(np.float64) for x in (q, k, v, do))
    o, lse = attention(q, k, v, causal=True, return_lse=True,
                       config=TcConfig(Bc=16, WARPS=by_device(1, 4)))
    o_ref, lse_ref = reference.attention(q64, k64, v64, causal=True)
    check_attention(np.asarray(o, np.float32), lse, o_ref, lse_ref, q64, k64, v64,
                    dtype="float16")
    grads = attention_backward(do, q, k, v, o, lse, causal=True,
                               config=TcBwdConfig(*by_device((16, 1, 16, 1), (64, 4, 64, 4))))
    # the oracle gets the forward's O as the kernels do (rounded to fp16)
    refs = reference.attention_backward(do64, q64, k64, v64, causal=True)
    check_grads([np.asarray(g, np.float32) for g in grads], refs, q64, k64, dtype="float16")


# Every forward method that takes causal, float32 and fp16, on its default tiles in the simulator
# (the same tiles passed on a GPU: there the defaults are bigger): (method, dtype, d, config,
# Br, Bc). "flash_wgmma" runs d = 64 or 128 only; 3xTF32 d a multiple of 8.
SIM_FLASH = configs.SIM_CONFIG                      # Br = 32, Bc = 16
EDGE_METHODS = [
    ("flash", "float32", 8, SIM_FLASH, 32, 16),
    ("flash_fa1", "float32", 8, SIM_FLASH, 32, 16),
    ("flash_db", "float32", 8, SIM_FLASH, 32, 16),
    ("flash_async", "float32", 8, SIM_FLASH, 32, 16),
    ("naive", "float32", 8, None, 32, 16),          # (no tiles skipped: the mask, rows unseen)
    ("flash_tc", "float16", 16, TcConfig(Bc=16, WARPS=2), 32, 16),
    ("flash_tc", "float32", 8, TcConfig(Bc=16, WARPS=2), 32, 16),          # 3xTF32
    ("flash_wgmma", "float16", 64, WgmmaConfig(Bc=64, CWG=1, STAGES=2, PRODUCER=False), 64, 64),
    ("flash_wgmma", "float32", 64, WgmmaTf32Config(Bc=32, CWG=1, STAGES=2), 64, 32),
]


def edge_shape(kind, Br, Bc):
    """(Nq, Nk) that put the causal edge (query i sees key j iff j ≤ i + Nk − Nq) on a tile
    boundary of Q tiles of Br rows and K/V tiles of Bc keys (Bc divides Br, or Bc = Br), and
    the off-by-one each catches in the rules every fast kernel shares (``kernels_numba/
    attention.py``: ``kv_tiles``, ``first_q_tile``, the mask test ``k0 + Bc − 1 > q0 + offset``):

    - "end": Nq = Nk = Br + Bc: Q tile 0's last row sees keys up to Br − 1, the last key of a K
      tile, and Q tile 1 up to the last of all — the boundary itself, which the three below
      move by one key: a count of tiles one short drops the edge tile (as at any shape); one
      too many adds a tile the mask hides entirely, which costs time, not correctness, and no
      comparison with the oracle can see;
    - "next": Nq = Br, Nk = Br + 1: the last row is the only one to see key Br, the
      *first* key of the next K tile: ``⌈last_key / Bc⌉`` tiles instead of
      ``last_key // Bc + 1`` (that tile dropped), ``first_q_tile`` by ``k0 − offset + 1``
      (§41: the Q tile skipped for that K tile);
    - "first-row": Nq = 2, Nk = Bc: K tile 0's last key (Bc − 1) is one past the edge of Q
      tile 0's *first* row (Bc − 2) and exactly the second row's: the mask test off by one
      (``k0 + Bc − 1 > q0 + offset + 1``, or tested against the tile's second row) leaves that
      tile unmasked and row 0 sees one key too many;
    - "blind": Nq − Nk = Bc: Q tile 0's first Bc rows see no key (O = 0, LSE = −inf) and its
      last row's edge is the last key of a K tile (with Br = Bc: no key at all, ``kv_tiles`` = 0).
    """
    n = Br + Bc
    return {"end": (n, n), "next": (Br, Br + 1), "first-row": (2, Bc), "blind": (n, Br)}[kind]


EDGE_KINDS = ["end", "next", "first-row", "blind"]
# test_forward_causal_last_key_on_a_tile_edge covers "end", "next" and "blind" of flash,
# flash_fa1, flash_db at these tiles. The wgmma kernels (the slowest in the simulator: seconds
# a case) skip "next" (kv_tiles is the kernels' shared rule, caught there at the others),
# 3xTF32 wgmma keeps only its own mask test ("first-row"); naive (no tiles skipped, the mask
# per element) runs "blind": the offset's sign and the rows that see nothing.
SKIP_KINDS = {"flash": ("end", "next", "blind"), "flash_fa1": ("end", "next", "blind"),
              "flash_db": ("end", "next", "blind"), "naive": ("end", "next", "first-row"),
              ("flash_wgmma", "float16"): ("next",),
              ("flash_wgmma", "float32"): ("end", "next", "blind")}
EDGE_CASES = [pytest.param(m, dt, d, cfg, Br, Bc, kind, id=f"{m}-{dt}-{kind}")
              for m, dt, d, cfg, Br, Bc in EDGE_METHODS for kind in EDGE_KINDS
              if kind not in SKIP_KINDS.get(m, SKIP_KINDS.get((m, dt), ()))]


@pytest.mark.parametrize("method,dtype,d,config,Br,Bc,kind", EDGE_CASES)
def test_every_forward_method_causal_edge_on_its_tiles(method, dtype, d, config, Br, Bc, kind,
                                                       rng):
    nq, nk = edge_shape(kind, Br, Bc)
    q, k, v = _qkv(rng, 1, 1, nq, nk, d)
    if dtype == "float16":
        q, k, v = (x.astype(np.float16) for x in (q, k, v))
    o, lse = attention(q, k, v, causal=True, return_lse=True, method=method, config=config)
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    arithmetic = {"float16": "float16", "float32": None}[dtype]
    if method in ("flash_tc", "flash_wgmma") and dtype == "float32":
        arithmetic = "tf32"
    check_attention(np.asarray(o, np.float32), lse,
                    *reference.attention(q64, k64, v64, causal=True), q64, k64, v64,
                    dtype=arithmetic)


@pytest.mark.skipif(not SIM, reason="the tiles of EDGE_METHODS are the simulator's defaults")
def test_edge_methods_use_the_simulators_default_tiles():
    """EDGE_METHODS' configs and (Br, Bc) are what each method runs with no config in the
    simulator, so the edge shapes sit on its default tiles' edges."""
    for method, dtype, d, cfg, Br, Bc in EDGE_METHODS:
        if method in ("flash", "flash_fa1", "flash_db"):
            assert cfg == configs.default_config(d) and (cfg.Br, cfg.Bc) == (Br, Bc)
        elif method == "flash_async":
            assert loop_order.async_config(d)[0] == cfg and (cfg.Br, cfg.Bc) == (Br, Bc)
        elif method == "flash_tc":
            assert cfg == tc_methods.default_tc_config(d, dtype == "float32")
            assert (cfg.Br, cfg.Bc) == (Br, Bc)
        elif method == "flash_wgmma":
            default = tc_methods.default_wgmma_config(d) if dtype == "float16" else \
                tc_methods.default_wgmma_tf32_config(d)
            assert cfg == default and (cfg.Br, cfg.Bc) == (Br, Bc)


# The dK/dV kernel's thread owns Bc/TR keys, handled four at a time (one Philox call for the
# dropout keep bits of four keys, one 16-byte load or store of P∘Z, dS): with the defaults'
# Bc/TR = 4 those loops (``for g in range(RM // 4)`` in kernels_numba/attention_backward.py)
# run once, so an index wrong only from the second quad on — the keep bits of keys
# ``(k0 + r0 + g) >> 2`` instead of ``(k0 + r0 + 4·g) >> 2``, a store at ``r0 + g`` instead of
# ``r0 + 4·g`` — passes every other test. Here Bc/TR = 8 (two quads) in both kernels (the dQ
# kernel's dq_Br/dq_TR = 8 queries, dq_Bc/dq_TC = 8 keys: two quads of each).
QUADS_BWD = BwdConfig(Bc=64, Br=16, TR=8, TC=4, dq_Br=64, dq_Bc=32, dq_TR=8, dq_TC=4)


@pytest.mark.parametrize("causal,pad", [(True, False), (False, True)])
def test_backward_dropout_two_key_quads_per_thread(causal, pad, rng):
    cfg = QUADS_BWD
    assert cfg.Bc // cfg.TR == 8 and cfg.dq_Br // cfg.dq_TR == 8 and cfg.dq_Bc // cfg.dq_TC == 8
    B, H, nq, nk, d = by_device((1, 1, 21, 40, 16), (2, 2, 300, 333, 16))
    q, k, v = _qkv(rng, B, H, nq, nk, d)
    do = rng.standard_normal(q.shape).astype(np.float32)
    kw, ref = _options(rng, B, H, nq, nk, causal, pad, 0.4)
    o, lse = attention(q, k, v, return_lse=True, **kw)
    grads = attention_backward(do, q, k, v, o, lse, config=cfg, **kw)
    check_grads(grads, reference.attention_backward(do, q, k, v, **ref), q, k)


# --- race mode (simulator): the kernels' shared memory is race-free ---------------------------
if SIM:
    from flashlesson.kernels_numba.sim import races


@pytest.mark.skipif(not SIM, reason="race mode is the simulator's (GPU: gpu_sanitize.sh)")
@pytest.mark.parametrize("method", ["block", "block_smem", "online"])
def test_softmax_kernels_race_free(method, rng):
    x = rng.standard_normal((2, 100)).astype(np.float32)
    with races.race_mode():
        y = softmax(cuda.to_device(x), method=method, threads=64).copy_to_host()
    np.testing.assert_allclose(y, reference.softmax_stable(x.astype(np.float64)), rtol=2e-5,
                               atol=1e-12)


@pytest.mark.skipif(not SIM, reason="race mode is the simulator's (GPU: gpu_sanitize.sh)")
@pytest.mark.parametrize("method", ["flash", "flash_fa1", "flash_db", "naive"])
def test_forward_kernels_race_free(method, rng):
    """Two warps (FlashConfig(32, 32, 8, 8)), two K/V tiles: the barriers around the tile
    loads, P's store and the products are all needed. (naive: the GEMM's tiles.)"""
    q, k, v = _qkv(rng, 1, 1, 30, 40, 8)
    cfg = None if method == "naive" else FlashConfig(Br=32, Bc=32, TR=8, TC=8)
    with races.race_mode():
        o, lse = attention(q, k, v, causal=True, return_lse=True, method=method, config=cfg)
    check_attention(o, lse, *reference.attention(q, k, v, causal=True), q, k, v)


@pytest.mark.skipif(not SIM, reason="race mode is the simulator's (GPU: gpu_sanitize.sh)")
def test_backward_kernels_race_free(rng):
    q, k, v = _qkv(rng, 1, 1, 30, 40, 8)
    do = rng.standard_normal(q.shape).astype(np.float32)
    o, lse = attention(q, k, v, causal=True, return_lse=True)
    with races.race_mode():
        grads = attention_backward(do, q, k, v, o, lse, causal=True, config=BwdConfig(
            Bc=32, Br=32, TR=8, TC=8, dq_Br=32, dq_Bc=32, dq_TR=8, dq_TC=8))
    check_grads(grads, reference.attention_backward(do, q, k, v, causal=True), q, k)


@pytest.mark.skipif(not SIM, reason="race mode is the simulator's (GPU: gpu_sanitize.sh)")
@pytest.mark.parametrize("asy", [False, True])
def test_tensor_core_kernels_race_free(asy, rng):
    q, k, v = (x.astype(np.float16) for x in _qkv(rng, 1, 1, 40, 40, 16))
    do = rng.standard_normal(q.shape).astype(np.float16)
    q64, k64, v64, do64 = (x.astype(np.float64) for x in (q, k, v, do))
    with races.race_mode():
        o, lse = attention(q, k, v, causal=True, return_lse=True,
                           config=TcConfig(Bc=16, WARPS=2, ASYNC=asy))
        grads = attention_backward(do, q, k, v, o, lse, causal=True,
                                   config=TcBwdConfig(16, 2, 16, 2, asy, asy))
    check_attention(np.asarray(o, np.float32), lse,
                    *reference.attention(q64, k64, v64, causal=True), q64, k64, v64,
                    dtype="float16")
    check_grads([np.asarray(g, np.float32) for g in grads],
                reference.attention_backward(do64, q64, k64, v64, causal=True), q64, k64,
                dtype="float16")
