"""§30 + §37: the tensor-core backward (fp16 / bf16) against the float64 oracle.

The oracle gets the inputs as the kernels see them (rounded to fp16/bf16, O and LSE from the
tensor-core forward) and computes in float64; the kernels round P and dS to 16 bits before
their products, so the bar is flashlesson.tolerance.backward_tol's (those roundings plus the
float32 model) of each gradient's largest value, plus element by element
flashlesson.tolerance.rounded_o_tol (D from an O rounded to 16 bits, which does not shrink where
dS cancels); on the GPU also no more than 2× torch SDPA's own backward error in the same dtype
(when torch is installed). Outputs are poisoned before the kernels run. Ten runs bitwise equal.
"""

from functools import lru_cache

import numpy as np
import pytest
from conftest import by_device, check_grads, check_tc_grads, tc_inputs, torch_grad_errors
from numba import cuda, float32

from flashlesson import TcBwdConfig, TcConfig, attention, attention_backward
from flashlesson.reference import attention_backward as ref_backward

# Simulator: Nq < Nk (2 Q tiles × 3 K tiles, both partial, causal skips a Q tile for the last
# K tile) at d = 32 (two k16 steps) with one head; Nq > Nk (rows that see no key) with two
# heads, where a second head costs less; N = 1.
SHAPES = by_device(
    [(1, 1, 21, 35, 32), (1, 2, 37, 9, 16), (1, 1, 1, 1, 16)],
    [(2, 3, 100, 100, 64), (1, 2, 257, 130, 80), (1, 2, 77, 300, 96), (2, 2, 129, 129, 128),
     (1, 1, 1000, 1000, 64), (1, 2, 200, 65, 256)])


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_oracle(rng, shape, causal, fmt):
    (q, k, v, do), (q64, k64, v64, do64) = tc_inputs(rng, *shape, fmt)
    o, lse = attention(q, k, v, causal=causal, return_lse=True)
    grads = attention_backward(do, q, k, v, o, lse, causal=causal)
    refs = ref_backward(do64, q64, k64, v64, causal=causal)
    check_tc_grads(grads, refs, fmt, q64, k64,
                   torch_grad_errors(q64, k64, v64, do64, causal, refs, fmt),
                   v64=v64, do64=do64, causal=causal)


# Head dims that are not multiples of 16 (test_attention_tc.ODD_HEAD_DIMS: D = d padded to 16
# inside the kernels). Simulator: d = 1 (register-staged dK/dV, ASYNC dQ: halves), 40 (both
# ASYNC: 16-byte pieces, zero-filled past the row), 59 (ASYNC dK/dV, register-staged dQ:
# halves); GPU: flash-attn's sequence-length pairs, both dtypes, causal and not, defaults.
ODD_HEAD_DIMS = by_device(
    [("f16", 1, True, (1, 2, 9, 13), TcBwdConfig(16, 1, 16, 1, False, True)),
     ("f16", 40, False, (1, 1, 11, 20), TcBwdConfig(16, 1, 16, 1, True, True)),
     ("f16", 59, True, (1, 1, 13, 7), TcBwdConfig(16, 1, 16, 1, True, False)),
     ("bf16", 20, False, (1, 1, 9, 12), TcBwdConfig(16, 1, 16, 1, True, True))],
    [(fmt, d, causal, shape, None) for fmt in ("f16", "bf16") for d in (40, 59, 100, 111, 200)
     for causal in (False, True) for shape in ((2, 3, 113, 203), (1, 2, 1024, 1024))])


@pytest.mark.parametrize("fmt, d, causal, shape, config", ODD_HEAD_DIMS,
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else
                         str(x) if not isinstance(x, TcBwdConfig) else "cfg")
def test_head_dims_not_a_multiple_of_16(rng, fmt, d, causal, shape, config):
    """dq, dk, dv against the oracle (and 2× torch's error on the GPU), each poisoned first:
    a column < d not written is NaN, a write past d lands in the next row. d = 20 and 100 (d %
    8 = 4): rows of uint16 halves whose count is a multiple of four, which the D launch must
    still read a half at a time (its 16-byte loads take words only; the simulator's load4
    refuses other elements as the GPU's typing does)."""
    (q, k, v, do), (q64, k64, v64, do64) = tc_inputs(rng, *shape, d, fmt)
    o, lse = attention(q, k, v, causal=causal, return_lse=True)
    grads = attention_backward(do, q, k, v, o, lse, causal=causal, config=config)
    assert all(g.shape == x.shape for g, x in zip(grads, (q, k, v)))
    refs = ref_backward(do64, q64, k64, v64, causal=causal)
    check_tc_grads(grads, refs, fmt, q64, k64,
                   torch_grad_errors(q64, k64, v64, do64, causal, refs, fmt),
                   v64=v64, do64=do64, causal=causal)


# tiles and warps of the two kernels (TcBwdConfig): several warps per block, tiles that do not
# divide N, different choices for the dK/dV and the dQ kernel, cp.async + ldmatrix in either
# (KV_ASYNC, Q_ASYNC)
CONFIGS = by_device([TcBwdConfig(32, 2, 16, 2), TcBwdConfig(16, 1, 32, 2),
                     TcBwdConfig(32, 2, 16, 1, True, True), TcBwdConfig(16, 1, 32, 2, True, False)],
                    [TcBwdConfig(64, 8, 64, 8), TcBwdConfig(32, 8, 32, 8), TcBwdConfig(16, 4, 128, 4),
                     TcBwdConfig(128, 2, 16, 1), TcBwdConfig(64, 4, 64, 4, True, True),
                     TcBwdConfig(64, 8, 64, 8, True, True), TcBwdConfig(32, 8, 128, 4, True, False)])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_configs(rng, config, causal):
    shape = by_device((1, 1, 45, 37, 16), (2, 2, 333, 301, 64))
    (q, k, v, do), (q64, k64, v64, do64) = tc_inputs(rng, *shape, "f16")
    o, lse = attention(q, k, v, causal=causal, return_lse=True)
    grads = attention_backward(do, q, k, v, o, lse, causal=causal, config=config)
    check_tc_grads(grads, ref_backward(do64, q64, k64, v64, causal=causal), "f16", q64, k64,
                   v64=v64, do64=do64, causal=causal)


@pytest.mark.parametrize("asy", [False, True])
def test_padding_and_fully_masked_rows(rng, asy):
    """Key padding, a batch row that sees no key; ASYNC at a head dim of odd k16 steps (48, 80)."""
    # (simulator: 17 keys are two K/V tiles of 16, the second holding one key)
    B, H, nq, nk, d = by_device((2, 1, 19, 17, 48 if asy else 16),
                                (3, 4, 300, 257, 80 if asy else 64))
    (q, k, v, do), (q64, k64, v64, do64) = tc_inputs(rng, B, H, nq, nk, d, "f16")
    kpm = rng.random((B, nk)) > 0.4
    kpm[0] = False                             # batch row 0 sees no key: zero gradients
    o, lse = attention(q, k, v, key_padding_mask=kpm, return_lse=True)
    cfg = TcBwdConfig(*by_device((16, 1, 16, 1), (32, 4, 32, 4)), True, True) if asy else None
    dq, dk, dv = attention_backward(do, q, k, v, o, lse, key_padding_mask=kpm, config=cfg)
    check_tc_grads((dq, dk, dv), ref_backward(do64, q64, k64, v64, key_padding_mask=kpm), "f16", q64,
                   k64, v64=v64, do64=do64, key_padding_mask=kpm)
    assert np.all(dq[0] == 0)                 # and padded keys get no gradient:
    assert np.all(dk.swapaxes(1, 2)[~kpm] == 0) and np.all(dv.swapaxes(1, 2)[~kpm] == 0)


def test_bitwise_identical_runs(rng):
    (q, k, v, do), _ = tc_inputs(rng, *by_device((1, 1, 33, 40, 16), (2, 4, 1000, 1000, 64)),
                               "f16")
    dev = [cuda.to_device(a) for a in (q, k, v, do)]
    o, lse = attention(*dev[:3], causal=True, return_lse=True)
    first = [g.copy_to_host() for g in attention_backward(dev[3], *dev[:3], o, lse, causal=True)]
    for _ in range(by_device(1, 9)):
        again = attention_backward(dev[3], *dev[:3], o, lse, causal=True)
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a.view(np.uint16), b.copy_to_host().view(np.uint16))


@pytest.mark.parametrize("bf16", [False, True], ids=["f16", "bf16"])
@pytest.mark.parametrize("words", [4, 36, 64])
def test_d_rows_sixteen_bytes_a_load(rng, bf16, words):
    """The backward's first launch (attention_tc_backward.tc_bwd_preprocess with LSE2, as the
    wgmma backward runs it) with VEC on and off: D the same bits (the same words in the same
    order, only the loads wider; d = 2·words halves), within the float32 sum's bound of the
    float64 one (products of two halves are exact in float32, so only the d − 1 additions
    round: |error| ≤ (d − 1)·2^-24·Σ_c |dO_ic·O_ic| to first order), and LSE·log2e, +inf for
    −inf. R rows not a multiple of the grid's threads (in the simulator a thread takes
    several); outputs NaN before."""
    from flashlesson.launch import stride_grid
    from flashlesson.kernels_numba.attention_tc_backward import tc_bwd_preprocess
    R = by_device(37, 4099)
    halves = rng.standard_normal((2, R, 2 * words)).astype(np.float32)
    if bf16:
        bits = (halves.view(np.uint32) >> 16).astype(np.uint16)
        h64 = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    else:
        bits = halves.astype(np.float16).view(np.uint16)
        h64 = bits.view(np.float16).astype(np.float64)
    o, do = (cuda.to_device(np.ascontiguousarray(b).view(np.uint32)) for b in bits)
    lse = rng.standard_normal(R).astype(np.float32)
    lse[::5] = -np.inf
    prod = h64[0] * h64[1]
    got = {}
    for vec in (False, True):
        dvec, lse2 = (cuda.to_device(np.full(R, np.nan, np.float32)) for _ in range(2))
        tc_bwd_preprocess(bf16, LSE2=True, VEC=vec)[stride_grid(R)](
            o, do, dvec, cuda.to_device(lse), lse2)
        got[vec] = dvec.copy_to_host(), lse2.copy_to_host()
    np.testing.assert_array_equal(got[True][0].view(np.uint32), got[False][0].view(np.uint32))
    np.testing.assert_array_equal(got[True][1], got[False][1])
    bound = (2 * words - 1) * 2.0 ** -24 * np.abs(prod).sum(axis=1)
    assert np.all(np.abs(got[True][0] - prod.sum(axis=1)) <= bound)
    want = np.where(np.isinf(lse), np.inf, lse.astype(np.float64) * np.log2(np.e))
    np.testing.assert_allclose(got[True][1], want, rtol=2.0 ** -22)


def test_unaligned_rows_take_the_word_loads(rng, monkeypatch):
    """The launcher's answer for o, dO not on 16 bytes (``launch.rows16`` False: the
    simulator's is always yes): the backward's D launch a word a load — gradients bitwise
    those of the 16-byte form."""
    from flashlesson import tc_methods
    (q, k, v, do), _ = tc_inputs(rng, 1, 1, 21, 35, 32, "f16")
    o, lse = attention(q, k, v, causal=True, return_lse=True)
    grads = {}
    for vec in (True, False):
        monkeypatch.setattr(tc_methods, "rows16", lambda width, *arrays, vec=vec: vec)
        grads[vec] = attention_backward(do, q, k, v, o, lse, causal=True, method="flash_tc")
    for a, b in zip(grads[True], grads[False]):
        np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))


@pytest.mark.parametrize("limit_kb", [227, 99])
def test_default_configs_fit_the_device(monkeypatch, limit_kb):
    """The GPU defaults (tc_methods) are the H200's (227 KB of shared memory a block); on a GPU
    allowing 99 KB (sm_86/89) they step down to configs that fit, forward and backward."""
    from flashlesson import tc_methods
    from flashlesson.kernels_numba.attention_tc import tc_smem_bytes
    from flashlesson.kernels_numba.attention_tc_backward import tc_bwd_smem_bytes
    monkeypatch.setattr(tc_methods.device, "SIMULATOR", False)
    monkeypatch.setattr(tc_methods, "max_shared_bytes", lambda: limit_kb * 1024)
    for d in (64, 80, 128, 256):
        f = tc_methods.default_tc_config(d, False)
        b = tc_methods.default_tc_bwd_config(d)
        need = [tc_smem_bytes(d, f.Bc, False, f.ASYNC),
                tc_bwd_smem_bytes(d, b.Bq, b.KV_WARPS, b.KV_ASYNC),
                tc_bwd_smem_bytes(d, b.Bk, b.Q_WARPS, b.Q_ASYNC)]
        assert max(need) <= limit_kb * 1024, (d, f, b, need)
        if limit_kb == 227 and d == 128:        # the H200's: the tuned ones
            assert (f.Bc, f.WARPS, b.Bk, b.Q_WARPS) == (128, 8, 64, 8)


def test_badtc_inputs(rng):
    q = rng.standard_normal((1, 1, 8, 16)).astype(np.float16)
    o, lse = attention(q, q, q, return_lse=True)
    with pytest.raises(TypeError, match="all five"):
        attention_backward(q.astype(np.float32), q, q, q, o, lse)
    with pytest.raises(ValueError, match="no dropout"):
        attention_backward(q, q, q, q, o, lse, dropout_p=0.1)
    with pytest.raises(TypeError, match="method: fp16/bf16 inputs take the tensor-core"):
        attention_backward(q, q, q, q, o, lse, method="naive")
    with pytest.raises(TypeError, match="config: .*TcBwdConfig"):
        attention_backward(q, q, q, q, o, lse, config=TcConfig())
    with pytest.raises(ValueError, match="config: Bq must be a multiple of 16"):
        attention_backward(q, q, q, q, o, lse, config=TcBwdConfig(Bq=24))
    with pytest.raises(ValueError, match="config: Q_WARPS must be 1, 2, 4 or 8"):
        attention_backward(q, q, q, q, o, lse, config=TcBwdConfig(Q_WARPS=3))
    with pytest.raises(ValueError, match="lse"):
        attention_backward(q, q, q, q, o, lse[..., :4])


# --- float32 inputs, method "flash_tc": 3xTF32 (kernels_numba/attention_tf32x3_backward.py) ----
# Simulator: one head at 20 × 20 (2 × 2 tiles; B = 2 at 17 × 5 covers more than one head);
# 9 × 24 at d = 24 (Nq < Nk, two K/V tiles, the second half full, three k8 steps).
TF32_SHAPES = by_device(
    [(1, 1, 20, 20, 16), (2, 1, 17, 5, 8), (1, 1, 1, 1, 8), (1, 1, 9, 24, 24)],
    [(2, 3, 100, 100, 64), (1, 2, 257, 130, 80), (1, 2, 77, 300, 96), (2, 2, 129, 129, 128),
     (1, 1, 1000, 1000, 64), (1, 2, 200, 65, 256)])


def _f32_inputs(rng, B, H, nq, nk, d):
    return [rng.standard_normal((B, H, n, d)).astype(np.float32) for n in (nq, nk, nk, nq)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", TF32_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_tf32x3_matches_oracle(rng, shape, causal):
    """float32-level accuracy on tensor cores: the error model's bar for 3xTF32 (backward_tol,
    dtype "tf32"; conftest.check_grads), O and LSE from the 3xTF32 forward.
    One key (N = 1): dq = scale·(dP − D)·K vanishes analytically, and here dP (3xTF32) and D
    (float32, from the 3xTF32 O) cancel to ~1e-6 of |dO||V| instead of to the bit, as the CUDA-
    core kernels' do; that case is held to 1e-3 of the problem's largest gradient."""
    q, k, v, do = _f32_inputs(rng, *shape)
    o, lse = attention(q, k, v, causal=causal, return_lse=True, method="flash_tc")
    grads = attention_backward(do, q, k, v, o, lse, causal=causal, method="flash_tc")
    refs = ref_backward(*(a.astype(np.float64) for a in (do, q, k, v)), causal=causal)
    check_grads(grads, refs, q, k, dtype="tf32", rel=1e-3 if shape[3] == 1 else None)


def test_tf32x3_padding_configs_and_bitwise_runs(rng):
    """Key padding with a batch row that sees no key (zero gradients, never NaN), other tiles and
    warps, and the same bits on every run (no atomics)."""
    # (simulator: 17 keys are two K/V tiles of 16, the second holding one key)
    B, H, nq, nk, d = by_device((2, 1, 19, 17, 8), (3, 4, 300, 257, 64))
    q, k, v, do = _f32_inputs(rng, B, H, nq, nk, d)
    kpm = rng.random((B, nk)) > 0.4
    kpm[0] = False
    o, lse = attention(q, k, v, key_padding_mask=kpm, return_lse=True, method="flash_tc")
    refs = ref_backward(*(a.astype(np.float64) for a in (do, q, k, v)), key_padding_mask=kpm)
    first = None
    for cfg in by_device([None, TcBwdConfig(32, 2, 16, 1)],
                         [None, TcBwdConfig(64, 4, 64, 4), TcBwdConfig(16, 8, 32, 8)]):
        grads = attention_backward(do, q, k, v, o, lse, key_padding_mask=kpm, method="flash_tc",
                                   config=cfg)
        check_grads(grads, refs, q, k, dtype="tf32")
        dq, dk, dv = grads
        assert np.all(dq[0] == 0)
        assert np.all(dk.swapaxes(1, 2)[~kpm] == 0) and np.all(dv.swapaxes(1, 2)[~kpm] == 0)
        if cfg is None:
            first = grads
            again = attention_backward(do, q, k, v, o, lse, key_padding_mask=kpm,
                                       method="flash_tc")
            for a, b in zip(first, again):
                np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


@lru_cache(maxsize=None)
def _two_sums_kernel(NB, KC2):
    """One warp: acc += P·B over tiles two ways — attention_tc.tf32_by_keys into a d-wide
    partial zeroed per tile and then added to acc, and the dK/dV kernel's tf32_by_keys_blocks
    (4 floats a block of 8 columns)."""
    from flashlesson.kernels_numba.attention_tc import tf32_by_keys
    from flashlesson.kernels_numba.attention_tf32x3_backward import tf32_by_keys_blocks
    by_keys, by_blocks = tf32_by_keys(NB, KC2), tf32_by_keys_blocks(NB, KC2)
    KS, AO, PN = 8 * NB + 4, 4 * NB, 4 * KC2

    @cuda.jit
    def kernel(p, b, wide, blocks):             # p [tiles, 32, PN], b [tiles, 8·KC2·KS]
        lane = cuda.threadIdx.x
        g, t = lane // 4, lane % 4
        pt = cuda.local.array(PN, float32)
        part = cuda.local.array(AO, float32)
        acc_w = cuda.local.array(AO, float32)
        acc_b = cuda.local.array(AO, float32)
        pa = cuda.local.array(4, float32)
        ps = cuda.local.array(4, float32)
        fa = cuda.local.array(PN, float32)
        fs = cuda.local.array(PN, float32)
        for i in range(AO):
            part[i] = acc_w[i] = acc_b[i] = float32(0)
        for tile in range(p.shape[0]):
            for i in range(PN):
                pt[i] = p[tile, lane, i]
            by_keys(pt, b[tile], 0, KS, g, t, part, pa, ps)
            for i in range(AO):
                acc_w[i] += part[i]
                part[i] = float32(0)
            by_blocks(pt, b[tile], 0, KS, g, t, acc_b, fa, fs)
        for i in range(AO):
            wide[lane, i] = acc_w[i]
            blocks[lane, i] = acc_b[i]
    return kernel


@pytest.mark.parametrize("NB, KC2", [(1, 4), (2, 2)])
def test_tf32x3_dkdv_sums_by_blocks(rng, NB, KC2):
    """The dK/dV kernel's two-level sums a block at a time (``tf32_by_keys_blocks``) give the
    same bits as ``tf32_by_keys`` into a d-wide partial added once a tile (the sum the H200
    measured first at d = 64), over several tiles; P of both signs, as dSᵀ."""
    tiles = 5
    p = rng.standard_normal((tiles, 32, 4 * KC2)).astype(np.float32)
    b = rng.standard_normal((tiles, 8 * KC2 * (8 * NB + 4))).astype(np.float32)
    wide, blocks = (np.full((32, 4 * NB), np.nan, np.float32) for _ in range(2))
    _two_sums_kernel(NB, KC2)[1, 32](p, b, wide, blocks)
    assert not np.isnan(wide).any()
    np.testing.assert_array_equal(wide.view(np.uint32), blocks.view(np.uint32))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("fmt, config", [
    ("f16", None), ("f16", by_device(TcBwdConfig(16, 1, 16, 1, True, True),
                                     TcBwdConfig(64, 8, 64, 8, True, True))),
    ("tf32", None)], ids=["f16", "f16-async", "tf32x3"])
def test_very_negative_scores(rng, fmt, config, causal):
    """Every score ≈ −256 (q·k = 256·(−√d) in column 0, S = that · 1/√d, plus ordinary
    scores from the other columns), so LSE ≈ −256 and, for a key past Nk (a zero row of a
    partial tile: S = 0), 2^((S − LSE)·log2e) = 2^369 = inf: only the masks keep it out of
    dS and dq (NaN otherwise). Nk not a multiple of any tile."""
    B, H, nq, nk, d = by_device((1, 1, 19, 21, 16), (1, 2, 100, 75, 64))
    q, k, v, do = (rng.standard_normal((B, H, n, d)) for n in (nq, nk, nk, nq))
    q[..., 0], k[..., 0] = 256.0, -np.sqrt(d)
    x = [a.astype(np.float16 if fmt == "f16" else np.float32) for a in (q, k, v, do)]
    method = "flash_tc"                         # (what fp16 inputs get anyway)
    o, lse = attention(*x[:3], causal=causal, return_lse=True, method=method)
    assert np.max(lse.copy_to_host() if hasattr(lse, "copy_to_host") else lse) < -200
    grads = attention_backward(x[3], *x[:3], o, lse, causal=causal, method=method,
                               config=config)
    refs = ref_backward(*(a.astype(np.float64) for a in (x[3], *x[:3])), causal=causal)
    q64, k64, v64, do64 = (a.astype(np.float64) for a in x)
    if fmt == "f16":
        check_tc_grads(grads, refs, fmt, q64, k64, v64=v64, do64=do64, causal=causal)
    else:   # (the exponent (S − LSE)·log2e is a difference of two numbers near 369, each
        check_grads(grads, refs, q64, k64, dtype="tf32")  # rounded to float32: the A term)


def test_tf32x3_badtc_inputs(rng):
    q = rng.standard_normal((1, 1, 8, 12)).astype(np.float32)
    o, lse = attention(q, q, q, return_lse=True)
    with pytest.raises(ValueError, match="multiple of 8 .*3xTF32"):
        attention_backward(q, q, q, q, o, lse, method="flash_tc")
    q = rng.standard_normal((1, 1, 8, 16)).astype(np.float32)
    o, lse = attention(q, q, q, return_lse=True)
    with pytest.raises(ValueError, match="no ASYNC form"):
        attention_backward(q, q, q, q, o, lse, method="flash_tc",
                           config=TcBwdConfig(KV_ASYNC=True))
    with pytest.raises(ValueError, match="no dropout"):
        attention_backward(q, q, q, q, o, lse, method="flash_tc", dropout_p=0.1)
