"""Tests that fail when a kernel is wrong where the other tests do not look:

- compile-time options crossed: dropout × key padding × causal under tiles where each
  thread's column loops run twice (Bc = 8·TC: two groups of four S columns; D = 8·TC: two
  groups of O columns), with KU and GROUP > 1 — the simulator's default tiles run each loop
  once, so an index that is wrong only in the second iteration passes there;
- causal shapes whose last visible key falls exactly on a K/V tile edge (Nq = Nk, Nq < Nk,
  Nq > Nk), forward and backward, every method (an off-by-one in the tiles-visited rule drops
  or adds exactly one tile there);
- the project's kernels run in the simulator's race mode (``kernels_numba/sim/races.py``): a
  shared-memory race between warps is an error whatever the schedule.

Tiny shapes: a few seconds each in the simulator; on a GPU the same checks run as they are.
"""

import numpy as np
import pytest
from conftest import SIM, by_device, check_attention, check_grads
from numba import cuda

from flashlesson import reference
from flashlesson import BwdConfig, FlashConfig, TcBwdConfig, TcConfig, attention
from flashlesson import attention_backward, softmax
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
