"""§30 + §37 for float32 on Hopper: ``attention_backward(do, q, k, v, o, lse,
method="flash_wgmma")`` on float32 inputs — 3xTF32 on wgmma (kernels_numba/
attention_wgmma_tf32_backward.py) — against the float64 oracle under the error model (dtype
"tf32": conftest.check_grads), O and LSE from the float64 oracle's forward (the backward only
reads them). Outputs are poisoned by the library's allocator on the GPU (NaN in a gradient
element not written fails); padded keys hold NaN in K and V.

Simulator (three cases, ~5 minutes): padded keys (one partial K tile) with two Q tiles, so
the dK/dV kernel's second tile comes through stage 1; causal with Nq > Nk (rows 0–7 see no
key: dq = 0) over two Q tiles and two K tiles through rings of one stage, so both producers
wait on EMPTY; d = 128 (the dK/dV kernel's dK and dV blocks, tiles of 16) with padded keys
and two Q tiles of 16. GPU: d = 64 and 128, N = 1, Nq ≠ Nk both ways, 1000 × 998, causal ×
padding with a batch row that has no valid key, the other configurations, and ten runs
bitwise equal.
Accuracy against torch's efficient backend: tests/test_tf32x3_accuracy.py.
"""

import numpy as np
import pytest
from conftest import GPU, by_device, check_grads

from flashlesson import reference
from flashlesson import TcBwdConfig, WgmmaBwdConfig, WgmmaTf32BwdConfig, attention_backward
from flashlesson.reference import attention_backward as ref_backward

CASES = by_device(      # (causal, pad, (B, H, Nq, Nk, d), config)
    [(False, True, (1, 1, 40, 20, 64), None),
     (True, False, (1, 1, 45, 37, 64), WgmmaTf32BwdConfig(Q_CWG=1, STAGES=1)),
     (False, True, (1, 1, 20, 9, 128), None)],
    [(c, p, s, None) for c in (False, True) for p in (False, True)
     for s in ((1, 1, 1, 1, 64), (2, 3, 100, 100, 64), (1, 2, 77, 300, 64),
               (1, 2, 257, 130, 64), (1, 1, 1000, 998, 64), (1, 1, 1, 1, 128),
               (2, 3, 100, 100, 128), (1, 2, 77, 300, 128), (1, 1, 1000, 998, 128))]
    + [(c, p, (2, 2, 300, 257, 64), cfg) for c, p, cfg in (
        (True, True, WgmmaTf32BwdConfig(Q_CWG=2)), (False, False, WgmmaTf32BwdConfig(STAGES=1)),
        (False, True, WgmmaTf32BwdConfig(Q_CWG=2, STAGES=1)))]
    + [(c, p, (2, 2, 300, 257, 128), cfg) for c, p, cfg in (
        (True, True, WgmmaTf32BwdConfig(Q_CWG=1, Bq=32, Bk=16, STAGES=1)),
        (False, False, WgmmaTf32BwdConfig(Q_CWG=1, Bq=16, Bk=16, STAGES=1)),
        (False, True, WgmmaTf32BwdConfig(Q_CWG=1, Bq=16, Bk=32, STAGES=1)))])


def _case(rng, B, H, nq, nk, d, causal, pad):
    """float32 q, k, v, do; O, LSE from the float64 oracle; a key mask (batch row 0 with no
    valid key when B > 1) with NaN in the padded keys' K and V; the oracle's gradients."""
    q, k, v, do = (rng.standard_normal((B, H, n, d)).astype(np.float32)
                   for n in (nq, nk, nk, nq))
    kpm = None
    if pad:
        kpm = rng.random((B, nk)) > 0.3
        kpm[:, 0] = True
        if B > 1:
            kpm[0] = False
        k.transpose(0, 2, 1, 3)[~kpm] = np.nan
        v.transpose(0, 2, 1, 3)[~kpm] = np.nan
    clean = [np.where(np.isnan(x), 0.0, x).astype(np.float64) for x in (q, k, v, do)]
    o, lse = reference.attention(*clean[:3], causal=causal, key_padding_mask=kpm)
    refs = ref_backward(clean[3], *clean[:3], causal=causal, key_padding_mask=kpm)
    return (do, q, k, v, o.astype(np.float32), lse.astype(np.float32)), kpm, refs


@pytest.mark.parametrize("causal, pad, shape, config", CASES,
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x))
def test_matches_oracle(rng, causal, pad, shape, config):
    """The gradients within the 3xTF32 error model; padded keys: dk = dv = 0 exactly; a batch
    row with no valid key: dq = 0 exactly."""
    ins, kpm, refs = _case(rng, *shape, causal, pad)
    grads = attention_backward(*ins, causal=causal, key_padding_mask=kpm, method="flash_wgmma",
                               config=config)
    q, k = ins[1], np.where(np.isnan(ins[2]), 0, ins[2])
    check_grads(grads, refs, q, k, dtype="tf32", rel=1e-3 if shape[3] == 1 else None)
    dq, dk, dv = grads
    if pad:
        assert np.all(dk.swapaxes(1, 2)[~kpm] == 0) and np.all(dv.swapaxes(1, 2)[~kpm] == 0)
        if shape[0] > 1:
            assert np.all(dq[0] == 0)


def _menu_layout(x, D, transposed):
    """The module menu's packed layout of one head x [n_pad, D] (zeros past n), in NumPy:
    natural, word (r, c) at (r // 8)·8D + (c // 4)·32 + (r % 8)·4 + c % 4; transposed, word
    (c, kw) at (kw // 4)·4D + (c // 8)·32 + (c % 8)·4 + kw % 4, holding token 8·(kw // 8) +
    PERM[kw % 8]."""
    perm = (0, 2, 4, 6, 1, 3, 5, 7)
    out = np.empty(x.size, x.dtype)
    r, c = np.meshgrid(np.arange(x.shape[0]), np.arange(D), indexing="ij")
    if transposed:          # (here r is the word kw of the k slot, c the column)
        out[(r // 4) * 4 * D + (c // 8) * 32 + (c % 8) * 4 + r % 4] = \
            x[8 * (r // 8) + np.take(perm, r % 8), c]
    else:
        out[(r // 8) * 8 * D + (c // 4) * 32 + (r % 8) * 4 + c % 4] = x
    return out


@pytest.mark.parametrize("vec", [True, False], ids=["16-byte", "unaligned"])
def test_packing_follows_the_menu(rng, monkeypatch, vec):
    """The packing launch (tc_methods.pack_backward_operands) against the menu's formulas:
    every slot of both sides, each head, both parts tf32 (low 13 bits zero), big = x to tf32
    (within 2^-11) and big + small = x within 2^-21 (the 3xTF32 split: each rounding to
    nearest, 2^-22 and 2^-11·2^-11); zeros past n and for padded keys, whose K and V hold NaN,
    each batch row with its own mask. Nq = 77 (not a multiple of 8), Nk = 20, B = 2, H = 1.
    unaligned: the launcher's answer for inputs not on 16 bytes (the simulator's is always
    yes), four loads where the 16-byte one would be."""
    from numba import cuda
    from flashlesson import tc_methods
    monkeypatch.setattr(tc_methods, "aligned16", lambda *arrays: vec)
    B, nq, nk, d = 2, 77, 20, 64
    q, do = (rng.standard_normal((B, nq, d)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((B, nk, d)).astype(np.float32) for _ in range(2))
    kpm = rng.random((B, nk)) > 0.3
    kpm[0, 0], kpm[1, 0], kpm[1, 1] = False, True, False
    for x in (k, v):
        x[~kpm] = np.nan
    qside, kside, nq_pad, nk_pad = tc_methods.pack_backward_operands(
        *(cuda.to_device(x) for x in (q, k, v, do)), 1, d, cuda.to_device(kpm.astype(np.uint8)))
    for side, n_pad, slots in ((qside.copy_to_host(), nq_pad, (q, do, q, do)),
                               (kside.copy_to_host(), nk_pad, (k, v, k))):
        part = B * n_pad * d
        for slot, x in enumerate(slots):
            for h in range(B):
                xp = np.zeros((n_pad, d), np.float32)
                xp[:x.shape[1]] = np.nan_to_num(x[h], nan=0.0)
                want = _menu_layout(xp, d, slot >= 2).astype(np.float64)
                at = 2 * slot * part + h * n_pad * d
                big = side[at:at + n_pad * d]
                small = side[at + part:at + part + n_pad * d]
                assert not np.any((big.view(np.uint32) | small.view(np.uint32)) & 0x1FFF), \
                    (slot, h)
                np.testing.assert_array_less(np.abs(big - want), 2.0 ** -11 * np.abs(want) + 1e-45)
                np.testing.assert_array_less(np.abs(big.astype(np.float64) + small - want),
                                             2.0 ** -21 * np.abs(want) + 1e-45)


def test_stats_sixteen_bytes_a_load(rng):
    """The D and LSE launch (stats_kernel) with VEC on and off: D the same bits (attention_
    backward.d_row4, only the loads wider: a float64 sum rounded once, so a change of its
    order would hide in that rounding — this checks the bits, not the order), D within one
    float32 rounding of the float64 sum (plus d·2^-53 of Σ|dO·O| for the float64 sums' own
    roundings, to first order), LSE copied, both 0 in the rows past Nq up to pad_rows(Nq);
    outputs NaN before. Two heads of Nq = 77 rows (not a multiple of 8) at d = 64."""
    from numba import cuda
    from flashlesson.kernels_numba.attention_wgmma_tf32_backward import pad_rows, stats_kernel
    bh, nq, d = 2, 77, 64
    o, do = (rng.standard_normal((bh * nq, d)).astype(np.float32) for _ in range(2))
    lse = rng.standard_normal((bh, nq)).astype(np.float32)
    lse[0, 3] = -np.inf
    pad = pad_rows(nq)
    got = {}
    for vec in (False, True):
        lse_p, d_p = (cuda.to_device(np.full((bh, pad), np.nan, np.float32)) for _ in range(2))
        stats_kernel(vec)[(pad // 128, bh), 128](cuda.to_device(o), cuda.to_device(do),
                                                   cuda.to_device(lse), lse_p, d_p, nq)
        got[vec] = d_p.copy_to_host(), lse_p.copy_to_host()
    np.testing.assert_array_equal(got[True][0].view(np.uint32), got[False][0].view(np.uint32))
    np.testing.assert_array_equal(got[True][1], got[False][1])
    prod = (o.astype(np.float64) * do).reshape(bh, nq, d)
    want = prod.sum(axis=2)
    bound = 2.0 ** -24 * np.abs(want) + d * 2.0 ** -53 * np.abs(prod).sum(axis=2)
    assert np.all(np.abs(got[True][0][:, :nq] - want) <= bound)
    np.testing.assert_array_equal(got[True][1][:, :nq], lse)
    assert np.all(got[True][0][:, nq:] == 0) and np.all(got[True][1][:, nq:] == 0)


@pytest.mark.skipif(not GPU, reason="ten runs of a large case: the GPU")
def test_bitwise_identical_runs(rng):
    """No atomics, a fixed order of every sum: ten calls give the same bits."""
    ins, kpm, _ = _case(rng, 2, 4, 700, 650, 64, True, True)
    first = attention_backward(*ins, causal=True, key_padding_mask=kpm, method="flash_wgmma")
    for _ in range(9):
        again = attention_backward(*ins, causal=True, key_padding_mask=kpm,
                                   method="flash_wgmma")
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_refusals():
    """What the float32 wgmma backward does not build, refused naming the argument."""
    x = np.zeros((1, 1, 8, 64), np.float32)
    lse = np.zeros((1, 1, 8), np.float32)
    args = (x, x, x, x, x, lse)
    with pytest.raises(ValueError, match="Q_CWG must be 1 or 2"):
        attention_backward(*args, method="flash_wgmma", config=WgmmaTf32BwdConfig(Q_CWG=3))
    with pytest.raises(ValueError, match="STAGES must be 1 or 2"):
        attention_backward(*args, method="flash_wgmma", config=WgmmaTf32BwdConfig(STAGES=3))
    with pytest.raises(TypeError, match="expected a WgmmaTf32BwdConfig .* float32 inputs, got "
                       "WgmmaBwdConfig"):
        attention_backward(*args, method="flash_wgmma", config=WgmmaBwdConfig())
    with pytest.raises(TypeError, match="WgmmaTf32BwdConfig .float32., not a TcBwdConfig"):
        attention_backward(*args, method="flash_wgmma", config=TcBwdConfig())
    with pytest.raises(ValueError, match="Bk must be 16 or 32, got 64"):
        attention_backward(*args, method="flash_wgmma", config=WgmmaTf32BwdConfig(Bk=64))
    with pytest.raises(ValueError, match="Bq must be 16 or 32, got 8"):
        attention_backward(*args, method="flash_wgmma", config=WgmmaTf32BwdConfig(Bq=8))
    x128 = np.zeros((1, 1, 8, 128), np.float32)
    with pytest.raises(ValueError, match="Q_CWG must be 1 at d = 128 .* got 2"):
        attention_backward(x128, x128, x128, x128, x128, lse, method="flash_wgmma",
                           config=WgmmaTf32BwdConfig())
    x96 = np.zeros((1, 1, 8, 96), np.float32)
    with pytest.raises(ValueError, match="q: method 'flash_wgmma' .backward. takes a head "
                       "dimension of 64 or 128; got d = 96"):
        attention_backward(x96, x96, x96, x96, x96, lse, method="flash_wgmma")
    with pytest.raises(ValueError, match="dropout_p: the tensor-core backward has no dropout"):
        attention_backward(*args, method="flash_wgmma", dropout_p=0.1)
