"""§30 on Hopper's wgmma: ``attention_backward(..., method="flash_wgmma")`` against the float64
oracle (kernels_numba/attention_wgmma_backward.py).

The error model is flash_tc's backward (tests/test_attention_tc_backward.py: conftest's
check_tc_grads — flashlesson.tolerance.backward_tol of each gradient's largest value plus
rounded_o_tol element by element; on the GPU also 2× torch SDPA's own backward error plus its
rounding slack). O and LSE come from the float64 oracle's forward, O rounded to the inputs'
format (the backward only reads them: D = rowsum(dO∘O) and P = exp(S − LSE)); that keeps the
simulator from running a forward kernel a case. Outputs are poisoned (NaN) before the kernels
run, so an element not written fails.

Simulator (one to four blocks a kernel, ~20 s in all): N not a multiple of the tile and N <
tile, N = 1, causal with the last visible key of a row on a tile edge, key padding with NaN in
the padded keys' K and V rows, bf16, d = 128, two consumer warpgroups, one and two stages,
tiles of 128; the refusals. GPU: more shapes and variants, and ten runs bitwise equal.
"""

import numpy as np
import pytest
from conftest import SIM, by_device, check_tc_grads, tc_inputs, torch_grad_errors
from numba import cuda

from flashlesson import reference
from flashlesson import BFloat16, TcBwdConfig, WgmmaBwdConfig, attention_backward
from flashlesson.backward_methods import FLOAT32_METHODS, METHODS
from flashlesson.reference import attention_backward as ref_backward


@pytest.mark.parametrize("kind, N", by_device([("bf16", 128)], [("f16", 64), ("bf16", 128)]))
def test_one_tile_two_readings(rng, kind, N):
    """The layout fact the kernels stand on, alone: a tile stored K-major by its rows (as Q and
    K lie for Sᵀ = K Qᵀ) read N-major by the descriptor LBO = 128 bytes, SBO = 16·rows bytes,
    is the B of dK += dSᵀ Q (hopper.wgmma_ab_kernel's b_rows, A from registers): d = a·b + c
    within float32 accumulation's bound. If this fails on the GPU, every dK, dV, dQ does."""
    from flashlesson.kernels_numba import hopper as H
    K = 64
    bits = {"f16": lambda x: x.astype(np.float16).view(np.uint16),
            "bf16": lambda x: BFloat16.from_float32(x).bits}[kind]
    a = bits(rng.standard_normal((64, K)).astype(np.float32))
    b = bits(rng.standard_normal((K, N)).astype(np.float32))
    c = rng.standard_normal((64, N)).astype(np.float32)
    d = np.full((64, N), np.nan, np.float32)
    H.wgmma_ab_kernel(kind, N, K // 16, True, 1, b_rows=True)[1, 128](a, b, c, d)
    value = {"f16": lambda x: x.view(np.float16).astype(np.float64),
             "bf16": lambda x: BFloat16(x).to_float32().astype(np.float64)}[kind]
    A, B = value(a), value(b)
    err = np.abs(d - (A @ B + c))
    assert np.all(err <= (K + 1) * 2.0 ** -22 * (np.abs(A) @ np.abs(B) + np.abs(c))), \
        f"N-major reading of a row tile: error up to {err.max():.2e}"


def _forward(q64, k64, v64, fmt, **kw):
    """O (in the inputs' format) and LSE (float32) from the float64 oracle."""
    o, lse = reference.attention(q64, k64, v64, **kw)
    o16 = o.astype(np.float16) if fmt == "f16" else BFloat16.from_float32(o.astype(np.float32))
    return o16, lse.astype(np.float32)


def _run(rng, shape, fmt, causal=False, config=None):
    (q, k, v, do), (q64, k64, v64, do64) = tc_inputs(rng, *shape, fmt)
    o, lse = _forward(q64, k64, v64, fmt, causal=causal)
    grads = attention_backward(do, q, k, v, o, lse, causal=causal, method="flash_wgmma",
                               config=config)
    assert all(g.shape == x.shape for g, x in zip(grads, (q, k, v)))
    refs = ref_backward(do64, q64, k64, v64, causal=causal)
    check_tc_grads(grads, refs, fmt, q64, k64,
                   torch_grad_errors(q64, k64, v64, do64, causal, refs, fmt),
                   v64=v64, do64=do64, causal=causal)
    return grads


# (fmt, causal, (B, H, Nq, Nk, d), config). Simulator (each block-tile of 128 threads costs
# about a second there): causal bf16 at 81 × 81 with the default (one warpgroup, tiles of 64,
# two stages) — two key blocks and two query blocks, 2 + 1 Q tiles and 1 + 2 K/V tiles (the
# tiles past the diagonal skipped), row 63's last key the last of tile 0, row 64's the first of
# tile 1 (about 30 s; N = 1, d = 128 and two warpgroups cost 10–55 s each there, and run on the
# GPU; d = 128's operand readings are in test_one_tile_two_readings). The ring wraps (a stage's
# second use: the other phase parity on FULL, the wait on EMPTY) in two cases: FUSED at 150 ×
# 130, three Q tiles through two stages, and the SWIZZLE case's one stage, two K/V tiles in its
# dQ kernel — without them a wrong parity in ring_slot passes the simulator (scripts/mutate.py's
# wgb-parity mutant). AHEAD (the next tile's first products issued at the end of this
# one, the stage released after them) with the ring wrapping in each kernel: the dK/dV
# kernel's three Q tiles through two stages at 150 × 40 (AHEAD=True: the dQ kernel ahead too,
# one K/V tile a block), the dQ kernel's three K/V tiles at 40 × 150, d = 128 (the default:
# both kernels ahead there).
# GPU: flash-attn's awkward lengths, N = 1, both dtypes, causal and not, both head dims, the
# default and other variants (one stage with a wrapping ring, three stages, two warpgroups).
# SWIZZLE (every tile in the 128-byte swizzle): in the simulator d = 128 (two 64-column halves:
# the K-major half step and the MN-major LBO), causal over two key blocks; on the GPU both head
# dims, both tile sizes, one and two warpgroups.
FUSED = WgmmaBwdConfig(STAGES=2, FUSED=True)
SW = WgmmaBwdConfig(STAGES=2, SWIZZLE=True)
CASES = by_device(
    [("bf16", True, (1, 1, 81, 81, 64), None),
     ("bf16", True, (1, 1, 81, 150, 64), WgmmaBwdConfig(64, 64, 2, 2, True)),
     ("f16", False, (1, 1, 150, 130, 64), WgmmaBwdConfig(64, 64, 1, 2, True)),
     ("f16", True, (1, 1, 40, 90, 128), WgmmaBwdConfig(64, 64, 1, 1, SWIZZLE=True)),
     ("f16", False, (1, 1, 150, 40, 64), WgmmaBwdConfig(64, 64, 1, 2, AHEAD=True)),
     ("bf16", False, (1, 1, 40, 150, 128), None)],
    [(fmt, causal, shape, None) for fmt in ("f16", "bf16") for causal in (False, True)
     for shape in ((2, 3, 100, 100, 64), (1, 2, 257, 130, 128), (1, 2, 77, 300, 64),
                   (1, 2, 1031, 517, 128), (1, 1, 1, 1, 64), (2, 2, 1000, 1000, 128))]
    + [("f16", causal, (1, 2, 333, 301, d), cfg)
       for causal, d, cfg in ((False, 64, WgmmaBwdConfig(64, 64, 2, 1)),
                              (True, 128, WgmmaBwdConfig(64, 64, 2, 1)),
                              (True, 64, WgmmaBwdConfig(128, 128, 1, 3)),
                              (False, 128, WgmmaBwdConfig(64, 128, 1, 3)),
                              (False, 64, WgmmaBwdConfig(64, 128, 2, 3)),
                              (True, 128, WgmmaBwdConfig(64, 128, 2, 2)),
                              (True, 64, WgmmaBwdConfig(128, 64, 2, 2)),
                              (False, 128, WgmmaBwdConfig(64, 64, 1, 2)),
                              (True, 64, WgmmaBwdConfig(64, 64, 2, 2, AHEAD=True)),
                              (False, 64, WgmmaBwdConfig(64, 128, 1, 3, AHEAD=True)),
                              (True, 128, WgmmaBwdConfig(64, 64, 2, 2, AHEAD=False)))]
    + [(fmt, causal, shape, cfg) for fmt in ("f16", "bf16") for causal in (False, True)
       for shape, cfg in (((2, 3, 100, 100, 64), FUSED), ((1, 2, 1031, 517, 128), FUSED),
                          ((1, 2, 77, 300, 64), WgmmaBwdConfig(64, 64, 1, 3, True)),
                          ((1, 1, 1, 1, 128), FUSED), ((2, 2, 1000, 1000, 128), FUSED),
                          ((1, 2, 333, 1301, 128), WgmmaBwdConfig(64, 64, 2, 3, True)))]
    + [("f16", False, (2, 3, 100, 100, 64), SW), ("bf16", True, (1, 2, 1031, 517, 128), SW),
       ("f16", True, (1, 2, 333, 301, 64), WgmmaBwdConfig(128, 128, 1, 3, SWIZZLE=True)),
       ("bf16", False, (2, 2, 1000, 1000, 128), WgmmaBwdConfig(64, 128, 1, 3, SWIZZLE=True)),
       ("f16", True, (1, 2, 333, 1301, 128), WgmmaBwdConfig(64, 64, 2, 3, SWIZZLE=True))])


@pytest.mark.parametrize("fmt, causal, shape, config", CASES,
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else
                         f"cfg{x.Bq}-{x.Bk}-{x.CWG}-{x.STAGES}{'-fused' * x.FUSED}"
                         f"{'-swizzle' * x.SWIZZLE}"
                         f"{'' if x.AHEAD is None else f'-ahead{int(x.AHEAD)}'}"
                         if isinstance(x, WgmmaBwdConfig)
                         else str(x))
def test_matches_oracle(rng, fmt, causal, shape, config):
    _run(rng, shape, fmt, causal, config)


def test_padding_with_nan_in_masked_rows(rng):
    """Key padding with NaN in the padded keys' K and V rows (zeros on chip by cp.async's
    zero-fill: no NaN reaches a product), a batch row that sees no key (dq = 0), padded keys
    dk = dv = 0 exactly."""
    B, H, nq, nk, d = by_device((2, 1, 9, 40, 64), (3, 4, 300, 257, 128))
    (q, k, v, do), (q64, k64, v64, do64) = tc_inputs(rng, B, H, nq, nk, d, "f16")
    kpm = rng.random((B, nk)) > 0.4
    kpm[0] = False                                  # batch row 0 sees no key
    k_bad, v_bad = k.copy(), v.copy()
    for x in (k_bad, v_bad):                        # NaN, +inf, −inf in padded rows
        x.swapaxes(1, 2)[~kpm] = np.array([np.nan, np.inf, -np.inf] * d, np.float16)[:d]
    o, lse = _forward(q64, k64, v64, "f16", key_padding_mask=kpm)
    dq, dk, dv = attention_backward(do, q, k_bad, v_bad, o, lse, key_padding_mask=kpm,
                                    method="flash_wgmma")
    refs = ref_backward(do64, q64, k64, v64, key_padding_mask=kpm)
    check_tc_grads((dq, dk, dv), refs, "f16", q64, k64, v64=v64, do64=do64, key_padding_mask=kpm)
    assert np.all(dq[0] == 0)
    assert np.all(dk.swapaxes(1, 2)[~kpm] == 0) and np.all(dv.swapaxes(1, 2)[~kpm] == 0)


@pytest.mark.skipif(SIM, reason="the simulator computes each wgmma at once in NumPy: nothing "
                    "there could vary; ten runs on the GPU")
@pytest.mark.parametrize("config", [None, FUSED], ids=["two-kernels", "fused"])
def test_bitwise_identical_runs(rng, config):
    """Deterministic: the fused variant adds each key block's dQ part in key-block order (its
    turns), so its float32 sums too are the same from run to run."""
    (q, k, v, do), (q64, k64, v64, _) = tc_inputs(rng, 2, 4, 1000, 1000, 128, "f16")
    o, lse = _forward(q64, k64, v64, "f16", causal=True)
    dev = [cuda.to_device(a) for a in (do, q, k, v, o, lse)]
    first = [g.copy_to_host() for g in attention_backward(*dev, causal=True,
                                                          method="flash_wgmma", config=config)]
    for _ in range(9):
        again = attention_backward(*dev, causal=True, method="flash_wgmma", config=config)
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a.view(np.uint16), b.copy_to_host().view(np.uint16))


def test_refusals(rng):
    """Limited: named in the registry, not taken by float32 suites; d other than 64
    and 128, dropout, another config type, bad config fields: refused, naming the argument
    and where to go instead."""
    assert "flash_wgmma" in METHODS and "flash_wgmma" not in FLOAT32_METHODS
    q = np.zeros((1, 1, 8, 80), np.float16)
    lse = np.zeros((1, 1, 8), np.float32)
    with pytest.raises(ValueError, match="q: method 'flash_wgmma' \\(backward\\) takes a head "
                       "dimension of 64 or 128; got d = 80. Use method 'flash_tc'"):
        attention_backward(q, q, q, q, q, lse, method="flash_wgmma")
    q = np.zeros((1, 1, 8, 64), np.float16)
    with pytest.raises(ValueError, match="dropout_p: .*no dropout"):
        attention_backward(q, q, q, q, q, lse, method="flash_wgmma", dropout_p=0.1)
    with pytest.raises(TypeError, match="config: method 'flash_wgmma' takes a WgmmaBwdConfig "
                       "\\(fp16/bf16\\)"):
        attention_backward(q, q, q, q, q, lse, method="flash_wgmma", config=TcBwdConfig())
    with pytest.raises(ValueError, match="config: Bq must be 64 or 128"):
        attention_backward(q, q, q, q, q, lse, method="flash_wgmma",
                           config=WgmmaBwdConfig(Bq=32))
    with pytest.raises(ValueError, match="config: Bq = 128 at d = 128 needs 256 accumulator"):
        h = np.zeros((1, 1, 8, 128), np.float16)
        attention_backward(h, h, h, h, h, lse, method="flash_wgmma",
                           config=WgmmaBwdConfig(Bq=128))
    with pytest.raises(ValueError, match="config: FUSED .* takes Bq = 64 .*, got Bq = 128"):
        attention_backward(q, q, q, q, q, lse, method="flash_wgmma",
                           config=WgmmaBwdConfig(Bq=128, FUSED=True))
    with pytest.raises(ValueError, match="config: CWG must be 1 or 2 consumer warpgroups, "
                       "got 3"):                # (the forward's CWG = 3 is not the backward's)
        attention_backward(q, q, q, q, q, lse, method="flash_wgmma",
                           config=WgmmaBwdConfig(CWG=3))
    with pytest.raises(TypeError, match="WgmmaBwdConfig.FUSED: expected a bool"):
        WgmmaBwdConfig(FUSED=2)
    with pytest.raises(ValueError, match="config: STAGES must be 1, 2 or 3"):
        attention_backward(q, q, q, q, q, lse, method="flash_wgmma",
                           config=WgmmaBwdConfig(STAGES=4))
    for cfg in (WgmmaBwdConfig(STAGES=1, AHEAD=True), WgmmaBwdConfig(FUSED=True, AHEAD=True)):
        with pytest.raises(ValueError, match="config: AHEAD .* needs STAGES ≥ 2 and FUSED off"):
            attention_backward(q, q, q, q, q, lse, method="flash_wgmma", config=cfg)
    with pytest.raises(TypeError, match="WgmmaBwdConfig.AHEAD: expected a bool"):
        WgmmaBwdConfig(AHEAD=1)
    with pytest.raises(ValueError, match="tier"):
        attention_backward(q, q, q, q, q, lse, method="flash_wgmma", tier="lesson")
    empty = np.zeros((1, 1, 0, 64), np.float16)     # empty: zeros, no launch
    grads = attention_backward(empty, empty, q, q, empty, np.zeros((1, 1, 0), np.float32),
                               method="flash_wgmma")
    assert [g.shape for g in grads] == [empty.shape, q.shape, q.shape]
    assert np.all(grads[1] == 0) and np.all(grads[2] == 0)


@pytest.mark.skipif(SIM, reason="a GPU that is not Hopper: refused (the simulator passes)")
def test_refuses_a_gpu_that_is_not_hopper(rng):
    cc = tuple(cuda.get_current_device().compute_capability)
    if cc == (9, 0):
        pytest.skip("this GPU is Hopper")
    q = np.zeros((1, 1, 8, 64), np.float16)
    with pytest.raises(ValueError, match="needs a Hopper GPU"):
        attention_backward(q, q, q, q, q, np.zeros((1, 1, 8), np.float32), method="flash_wgmma")


@pytest.mark.parametrize("causal", [False, True])
def test_default_where_it_measured_ahead(rng, causal):
    """The default method on fp16 inputs: flash_wgmma on Hopper, causal or not (where it
    measured ahead of flash_tc), flash_tc otherwise and in the simulator — bitwise the method
    named."""
    shape = by_device((1, 1, 5, 9, 64), (1, 2, 130, 256, 128))
    (q, k, v, do), (q64, k64, v64, _) = tc_inputs(rng, *shape, "f16")
    o, lse = _forward(q64, k64, v64, "f16", causal=causal)
    default = attention_backward(do, q, k, v, o, lse, causal=causal)
    hopper = not SIM and tuple(cuda.get_current_device().compute_capability) == (9, 0)
    named = "flash_wgmma" if hopper else "flash_tc"
    chosen = attention_backward(do, q, k, v, o, lse, causal=causal, method=named)
    for a, b in zip(default, chosen):
        np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))
