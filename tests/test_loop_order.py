"""§41 FlashAttention-1's loop order, §42 double-buffered K/V, §43 producer/consumer warps
(``flashlesson.loop_order``): against the float64 oracle on shapes that break tiling, and the IO
model against the counter, exactly.

The registry-driven tests (test_attention.py, test_attention_masks.py) already run the methods
"flash_fa1" and "flash_db" with the default configuration; here: several K/V and Q tiles per
head (small tiles), FA1's blocks-per-head knob, the producer warps, and the traffic.
"""

import numpy as np
import pytest
from conftest import check_attention, needs_sim
from numba import cuda

from flashlesson import FlashConfig, attention, loop_order
from flashlesson.attention_methods import LessonConfig
from flashlesson.arrays import empty
from flashlesson.traffic import compare, count_attention, count_traffic, \
    flash_attention_traffic
from flashlesson.reference import attention as ref_attention
from flashlesson.reference.philox import dropout_keep_mask

# small tiles so that tiny shapes have several Q and K/V tiles (T = 32 or 64 threads)
SMALL = FlashConfig(Br=16, Bc=32, TR=4, TC=8)
WARPS2 = FlashConfig(Br=64, Bc=16, TR=16, TC=4)
LESSON = LessonConfig(Br=16, Bc=8)     # the lesson tier's: 16 threads, several tiles


def _qkv(rng, B, H, nq, nk, d, outliers=False):
    q, k, v = (rng.standard_normal((B, H, n, d)).astype(np.float32) for n in (nq, nk, nk))
    if outliers:                       # scores ~±1000: e^{S} overflows unless m is subtracted
        q[..., 0, :] *= 30
        k[..., -1, :] *= 30
    return q, k, v


def _launch(fn, q, k, v, causal, config, scale=None, **kw):
    """Call a loop_order launcher on fresh (poisoned) device outputs; host (o, lse)."""
    B, H, nq, d = q.shape
    nk = k.shape[2]
    o = empty(B * H * nq * d, np.float32)
    lse = empty(B * H * nq, np.float32)
    fn(*(cuda.to_device(x.reshape(-1)) for x in (q, k, v)), o, lse, d=d, n_q=nq, n_k=nk,
       heads=H, bh=B * H, causal=causal, scale=scale or 1 / np.sqrt(d), config=config, **kw)
    return o.copy_to_host().reshape(q.shape), lse.copy_to_host().reshape(q.shape[:3])


def _check(o, lse, q, k, v, causal, scale=None):
    check_attention(o, lse, *ref_attention(q, k, v, causal=causal, scale=scale), q, k, v,
                    scale=scale)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("q_blocks", [1, 2, 3])
def test_fa1_blocks_per_head(q_blocks, causal, rng):
    """3 Q tiles × 2 K/V tiles per head (Nq ≠ Nk, neither a tile multiple), 1, 2 or 3 blocks
    per head: Algorithm 1 exactly, a split, and one Q tile per block (FA2's grid)."""
    q, k, v = _qkv(rng, 1, 2, 37, 45, 24)
    o, lse = _launch(loop_order.launch_fa1, q, k, v, causal, SMALL, q_blocks=q_blocks)
    _check(o, lse, q, k, v, causal)


@pytest.mark.parametrize("method", ["flash_fa1", "flash_db"])
@pytest.mark.parametrize("shape", [(1, 1, 45, 37, 8), (1, 1, 7, 70, 5)], ids=str)
def test_many_tiles_outliers_and_two_warps(method, shape, rng):
    """Two warps (TR·TC = 64), several K/V tiles; scores near ±1000 (outliers), causal with
    Nq > Nk (queries that see no key: O = 0, LSE = −inf) and Nq < Nk."""
    q, k, v = _qkv(rng, *shape, outliers=True)
    for causal in (False, True):
        o, lse = attention(q, k, v, causal=causal, method=method, config=WARPS2,
                           return_lse=True, scale=0.7)
        _check(o, lse, q, k, v, causal, scale=0.7)


@pytest.mark.parametrize("producers", [1, 2])
def test_producer_consumer_warps(producers, rng):
    """§43: 1 or 2 loading warps beside the computing ones, causal and not, padding + dropout."""
    B, H, nq, nk, d = 2, 1, 21, 50, 12
    q, k, v = _qkv(rng, B, H, nq, nk, d)
    for causal in (False, True):
        o, lse = _launch(loop_order.launch_db, q, k, v, causal, SMALL, producers=producers)
        _check(o, lse, q, k, v, causal)
    if producers == 1:                 # §35, §36 through the producer/consumer kernel
        kpm = rng.random((B, nk)) > 0.3
        mask = dropout_keep_mask(7, B, H, nq, nk, 0.2)
        from flashlesson import checks
        from flashlesson.dropout import dropout_args
        _, drop = dropout_args(0.2, 7)
        o, lse = _launch(loop_order.launch_db, q, k, v, True, SMALL, producers=1,
                         kpm=checks.key_padding_mask(kpm, B, nk), dropout=drop)
        check_attention(o, lse, *ref_attention(q, k, v, causal=True, key_padding_mask=kpm,
                                               dropout_mask=mask, dropout_p=0.2), q, k, v,
                        dropout_p=0.2)


def test_bad_arguments(rng):
    q, k, v = _qkv(rng, 1, 1, 20, 20, 8)
    with pytest.raises(ValueError, match="q_blocks"):
        _launch(loop_order.launch_fa1, q, k, v, False, SMALL, q_blocks=3)   # 2 Q tiles only
    with pytest.raises(ValueError, match="producers"):
        _launch(loop_order.launch_db, q, k, v, False, SMALL, producers=-1)
    with pytest.raises(ValueError, match="shared memory"):
        # fits flash's shared memory (131 KB at d = 128), not the double buffers (264 KB)
        attention(*_qkv(rng, 1, 1, 3, 3, 128), method="flash_db",
                  config=FlashConfig(128, 64, 32, 8))
    with pytest.raises(ValueError, match="method"):
        attention(q, k, v, method="flash_fa3")


# --- the lesson tier (kernels_numba/lesson/loop_order.py), the same oracle --------------------
@pytest.mark.parametrize("method", ["flash_fa1", "flash_db"])
def test_lesson_tier_many_tiles_and_outliers(method, rng):
    """tier="lesson": §41's FA1 order and §42's double buffer, several Q and K/V tiles (partial
    ones), scores near ±1000, causal with Nq > Nk (rows that see no key) and Nq < Nk."""
    for shape in ((1, 1, 37, 21, 5), (1, 2, 7, 30, 8)):
        q, k, v = _qkv(rng, *shape, outliers=True)
        for causal in (False, True):
            o, lse = attention(q, k, v, causal=causal, method=method, tier="lesson",
                               config=LESSON, return_lse=True, scale=0.7)
            _check(o, lse, q, k, v, causal, scale=0.7)


@pytest.mark.parametrize("producers", [1, 2])
def test_lesson_producer_consumer(producers, rng):
    """§43's lesson kernel: 1 or 2 loading warps beside 16 computing threads, causal and not."""
    q, k, v = _qkv(rng, 2, 1, 21, 50, 6)
    for causal in (False, True):
        o = empty((2, 21, 6), np.float32)
        lse = empty((2, 21), np.float32)
        loop_order.launch_db_lesson(*(cuda.to_device(x[:, 0]) for x in (q, k, v)), o, lse,
                                    causal=causal, scale=1 / np.sqrt(6), config=LESSON,
                                    producers=producers)
        _check(o.copy_to_host()[:, None], lse.copy_to_host()[:, None], q, k, v, causal)


def test_lesson_tier_refusals(rng):
    q, k, v = _qkv(rng, 1, 1, 4, 4, 8)
    with pytest.raises(ValueError, match="key_padding_mask: the lesson tier's 'flash_fa1'"):
        attention(q, k, v, method="flash_fa1", tier="lesson",
                  key_padding_mask=np.ones((1, 4), bool))
    with pytest.raises(ValueError, match="dropout_p: the lesson tier's 'flash_db'"):
        attention(q, k, v, method="flash_db", tier="lesson", dropout_p=0.1)
    with pytest.raises(ValueError, match="2 K/V buffers need"):     # 64 KB > 48 KB static
        attention(*_qkv(rng, 1, 1, 2, 2, 128), method="flash_db", tier="lesson",
                  config=LessonConfig(Br=16, Bc=32))
    d3 = [cuda.to_device(x[0]) for x in (q, k, v)]
    with pytest.raises(ValueError, match="producers"):
        loop_order.launch_db_lesson(*d3, d3[0], empty((1, 4), np.float32), causal=False,
                                    scale=1.0, config=LESSON, producers=-1)


# --- the IO model against the counter ------------------------------------------------------
@needs_sim
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("q_blocks", [1, 2])
def test_fa1_model_equals_counter(q_blocks, causal):
    """Every array (q, k, v, o, lse, m, l), reads and writes, exactly; Nq ≠ Nk, partial tiles."""
    B, H, nq, nk, d = 1, 2, 37, 45, 6
    model = loop_order.fa1_attention_traffic(B, H, nq, nk, d, causal, SMALL, q_blocks)
    with count_traffic() as t:
        q, k, v = (t.to_device(np.ones(B * H * n * d, np.float32), name)
                   for n, name in ((nq, "q"), (nk, "k"), (nk, "v")))
        o = empty(B * H * nq * d, np.float32)          # (named o and lse by the counter)
        lse = empty(B * H * nq, np.float32)
        loop_order.launch_fa1(q, k, v, o, lse, d=d, n_q=nq, n_k=nk, heads=H, bh=B * H,
                              causal=causal, scale=1.0, config=SMALL, q_blocks=q_blocks)
    rows = compare(model, t.arrays)
    assert all(r[-1] == "yes" for r in rows), rows


@needs_sim
def test_fa1_and_db_models_equal_counter_through_the_api():
    """``count_attention`` (the library call as users make it) vs ``attention_traffic``."""
    for method, shape, causal in (("flash_fa1", (1, 1, 40, 24, 5), True),
                                  ("flash_db", (1, 2, 33, 50, 8), False),
                                  ("flash_db", (1, 1, 40, 24, 5), True)):
        counted, _ = count_attention(*shape, method=method, causal=causal)
        model = loop_order.attention_traffic(*shape, method=method, causal=causal)
        rows = compare(model, counted.arrays)
        assert all(r[-1] == "yes" for r in rows), (method, rows)


@pytest.mark.parametrize("n", [64, 1024, 4096])
def test_fa1_model_reads_o_and_q_tc_times(n):
    """Non-causal, N a tile multiple: Q read Tc times, O read Tc and written Tc + 1 times, m and
    l Tc + 1 times each way; K, V once; FA2 reads Q and writes O once and K, V Tr times."""
    cfg = FlashConfig(Br=64, Bc=64, TR=16, TC=8)
    tc = tr = n // 64
    B, H, d = 2, 3, 64
    fa1 = loop_order.fa1_attention_traffic(B, H, n, n, d, False, cfg)
    fa2 = flash_attention_traffic(B, H, n, n, d, False, cfg)
    e, r = B * H * n * d, B * H * n
    assert (fa1["q"].reads, fa1["k"].reads, fa1["v"].reads) == (tc * e, e, e)
    assert (fa1["o"].reads, fa1["o"].writes) == (tc * e, (tc + 1) * e)
    assert (fa1["m"].reads, fa1["m"].writes, fa1["l"].writes) == ((tc + 1) * r,) * 3
    assert (fa2["q"].reads, fa2["k"].reads, fa2["o"].writes) == (e, tr * e, e)
    fa1_bytes, fa2_bytes = loop_order.fa1_vs_fa2_bytes(B, H, n, d, config=cfg)
    # per element of Q (= of O, K, V here): FA1 ≈ 3 Tc + 3, FA2 ≈ 2 Tr + 2 reads/writes
    assert fa1_bytes / fa2_bytes == pytest.approx((3 * tc + 3 + (4 * tc + 5) / d) /
                                                  (2 * tr + 2 + 1 / d), rel=1e-12)
