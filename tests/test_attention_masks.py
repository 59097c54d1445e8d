"""Forward attention with a key padding mask (§35), dropout (§36) and packed variable-length
sequences (§35), both methods against the float64 oracle; outputs poisoned (conftest).

The dropout keep-mask is the Philox one of ``reference.philox.dropout_keep_mask`` (a pure
function of (seed, b, h, i, j)), so the oracle sees exactly the entries the kernels dropped.
"""

import numpy as np
import pytest
from conftest import SIM, by_device, check_attention, packed_tol

import flashlesson
from flashlesson import attention, varlen_attention
from flashlesson.tolerance import attention_tol
from flashlesson import reference
from flashlesson.reference.philox import dropout_keep_mask as ref_keep_mask
from flashlesson.reference.varlen import varlen_attention as ref_varlen

METHODS = list(flashlesson.attention_methods.FP32_METHODS)   # flash_tc: test_attention_tc.py
# (method, tier): the fast methods and the lesson tier's flash kernel (kernels_numba/lesson/;
# the lesson naive path runs in test_dropout_with_padding_and_the_same_mask_for_every_method)
TIERED = [(m, "fast") for m in METHODS] + [("flash", "lesson")]

# (Simulator: two batch rows and two heads at 9 × 13; one head at 17 × 6, d = 80.)
SHAPES = by_device([(2, 2, 9, 13, 16), (1, 1, 1, 5, 3), (1, 1, 17, 6, 80)],
                   [(2, 3, 100, 130, 64), (1, 2, 257, 64, 80), (2, 2, 129, 300, 128),
                    (1, 1, 1, 1000, 256), (1, 2, 33, 17, 3)])


def _qkv(rng, B, H, nq, nk, d):
    return (rng.standard_normal((B, H, n, d)).astype(np.float32) for n in (nq, nk, nk))


def _close(o, lse, o_ref, lse_ref, q, k, v, **kw):
    check_attention(o, lse, o_ref, lse_ref, q, k, v, **kw)


@pytest.mark.parametrize("method, tier", TIERED)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_key_padding_mask(method, tier, causal, shape, rng):
    B, H, nq, nk, d = shape
    q, k, v = _qkv(rng, *shape)
    kpm = rng.random((B, nk)) > 0.3
    kpm[0, -1] = False                           # the last key (often a tile edge) is padding
    if B > 1:
        kpm[1] = False                           # a batch row with no valid key: zeros
    o, lse = attention(q, k, v, causal=causal, key_padding_mask=kpm, return_lse=True,
                       method=method, tier=tier)
    o_ref, lse_ref = reference.attention(q, k, v, causal=causal, key_padding_mask=kpm)
    _close(o, lse, o_ref, lse_ref, q, k, v)
    if B > 1:
        assert np.all(o[1] == 0) and np.all(np.isneginf(lse[1]))


# p is a launch argument, not a compile-time one: each (method, causal) kernel is built once
# whatever p, so the simulator takes each p once, with one causal setting each (the GPU crosses
# them)
DROPOUT_CASES = by_device([(False, 0.1), (True, 0.5)],
                          [(causal, p) for causal in (False, True) for p in (0.1, 0.5)])


@pytest.mark.parametrize("method, tier", TIERED)
@pytest.mark.parametrize("causal, p", DROPOUT_CASES)
def test_dropout_matches_oracle_with_the_philox_mask(method, tier, causal, p, rng):
    B, H, nq, nk, d = by_device((2, 2, 11, 14, 8), (2, 4, 300, 257, 64))
    q, k, v = _qkv(rng, B, H, nq, nk, d)
    seed = int(rng.integers(0, 2**64, dtype=np.uint64))
    mask = ref_keep_mask(seed, B, H, nq, nk, p)
    o, lse = attention(q, k, v, causal=causal, dropout_p=p, seed=seed, return_lse=True,
                       method=method, tier=tier)
    o_ref, lse_ref = reference.attention(q, k, v, causal=causal, dropout_mask=mask,
                                         dropout_p=p)
    _close(o, lse, o_ref, lse_ref, q, k, v, dropout_p=p)
    # the LSE is that of the scores before dropout, and another seed drops other entries
    o2 = attention(q, k, v, causal=causal, dropout_p=p, seed=seed + 1, method=method, tier=tier)
    assert np.max(np.abs(o2 - o)) > 1e-3


def test_dropout_with_padding_and_the_same_mask_for_every_method(rng):
    """Both methods, both tiers: causal + padding + dropout, one Philox mask."""
    B, H, nq, nk, d = by_device((2, 1, 7, 10, 4), (2, 2, 200, 333, 64))
    q, k, v = _qkv(rng, B, H, nq, nk, d)
    kpm = rng.random((B, nk)) > 0.5
    kw = dict(causal=True, key_padding_mask=kpm, dropout_p=0.3, seed=12345)
    outs = [attention(q, k, v, method=m, tier=t, **kw)
            for m in ("flash", "naive") for t in ("fast", "lesson")]
    mask = ref_keep_mask(12345, B, H, nq, nk, 0.3)
    o_ref, _ = reference.attention(q, k, v, causal=True, key_padding_mask=kpm,
                                   dropout_mask=mask, dropout_p=0.3)
    tol = attention_tol(q, k, v, dropout_p=0.3)
    for o in outs:
        assert np.all(np.abs(o - o_ref) <= tol.o)


def _packed(rng, lens_q, lens_k, H, d):
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q = rng.standard_normal((cu_q[-1], H, d)).astype(np.float32)
    k = rng.standard_normal((cu_k[-1], H, d)).astype(np.float32)
    v = rng.standard_normal((cu_k[-1], H, d)).astype(np.float32)
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_equals_each_sequence_alone(causal, rng):
    lens_q, lens_k = by_device(([5, 1, 12, 0], [7, 3, 12, 2]),
                               ([300, 1, 129, 64, 1000], [310, 5, 129, 700, 1000]))
    H, d = by_device((2, 16), (3, 64))
    q, k, v, cu_q, cu_k = _packed(rng, lens_q, lens_k, H, d)
    o, lse = varlen_attention(q, k, v, cu_q, cu_k, max_seqlen_q=max(lens_q),
                              max_seqlen_k=max(lens_k), causal=causal, return_lse=True)
    o_ref, lse_ref = ref_varlen(q, k, v, cu_q, cu_k, causal=causal, return_lse=True)
    _close(o, lse, o_ref, lse_ref, q, k, v, packed=True)
    # and sequence by sequence through the padded API
    for b in range(len(lens_q)):
        if lens_q[b] == 0 or lens_k[b] == 0:
            continue
        qs = q[cu_q[b]:cu_q[b + 1]].transpose(1, 0, 2)[None]
        ks = k[cu_k[b]:cu_k[b + 1]].transpose(1, 0, 2)[None]
        vs = v[cu_k[b]:cu_k[b + 1]].transpose(1, 0, 2)[None]
        ob = attention(qs, ks, vs, causal=causal)[0].transpose(1, 0, 2)
        tol = attention_tol(qs, ks, vs).o[0].transpose(1, 0, 2)      # each within its bound
        assert np.all(np.abs(o[cu_q[b]:cu_q[b + 1]] - ob) <= 2 * tol)


def test_varlen_dropout(rng):
    lens_q, lens_k = by_device(([4, 9], [6, 9]), ([100, 257], [130, 257]))
    H, d = by_device((2, 8), (2, 64))
    q, k, v, cu_q, cu_k = _packed(rng, lens_q, lens_k, H, d)
    mq, mk = max(lens_q), max(lens_k)
    mask = ref_keep_mask(99, len(lens_q), H, mq, mk, 0.25)
    o = varlen_attention(q, k, v, cu_q, cu_k, max_seqlen_q=mq, max_seqlen_k=mk, causal=True,
                         dropout_p=0.25, seed=99)
    o_ref = ref_varlen(q, k, v, cu_q, cu_k, causal=True, dropout_masks=mask, dropout_p=0.25)
    assert np.all(np.abs(o - o_ref) <= packed_tol(q, k, v, dropout_p=0.25).o)


def test_bad_masks_dropout_and_offsets():
    z = np.zeros((2, 1, 4, 8), np.float32)
    with pytest.raises(ValueError, match="key_padding_mask: expected shape"):
        attention(z, z, z, key_padding_mask=np.ones((2, 5), bool))
    with pytest.raises(TypeError, match="key_padding_mask: dtype float32"):
        attention(z, z, z, key_padding_mask=np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match="dropout_p: expected a probability"):
        attention(z, z, z, dropout_p=1.0)
    with pytest.raises(TypeError, match="dropout_p: expected a real number"):
        attention(z, z, z, dropout_p="0.1")
    with pytest.raises(ValueError, match="seed: expected an integer"):
        attention(z, z, z, dropout_p=0.1, seed=-1)
    q = np.zeros((6, 2, 8), np.float32)
    good = np.array([0, 2, 6], np.int32)
    kw = dict(max_seqlen_q=4, max_seqlen_k=4)
    with pytest.raises(ValueError, match="cu_seqlens_q: offsets must not decrease"):
        varlen_attention(q, q, q, np.array([0, 4, 2, 6], np.int32),
                         np.array([0, 2, 4, 6], np.int32), **kw)
    with pytest.raises(ValueError, match="cu_seqlens_k: expected B . 1 = 3 offsets"):
        varlen_attention(q, q, q, good, np.array([0, 6], np.int32), **kw)
    with pytest.raises(ValueError, match="cu_seqlens_q: the last offset must be"):
        varlen_attention(q, q, q, np.array([0, 2, 7], np.int32), good, **kw)
    with pytest.raises(ValueError, match="cu_seqlens_k: must start at 0"):
        varlen_attention(q, q, q, good, np.array([1, 2, 6], np.int32), **kw)
    with pytest.raises(TypeError, match="cu_seqlens_q: dtype int64"):
        varlen_attention(q, q, q, good.astype(np.int64), good, **kw)
    with pytest.raises(ValueError, match="max_seqlen_q: 3 is shorter"):
        varlen_attention(q, q, q, good, good, max_seqlen_q=3, max_seqlen_k=4)
    with pytest.raises(ValueError, match="k, v: expected"):
        varlen_attention(q, q[:, :1], q, good, good, **kw)


@pytest.mark.skipif(SIM, reason="GPU: varlen with device arrays in, device arrays out")
def test_varlen_device_in_device_out(rng):
    from numba import cuda
    q, k, v, cu_q, cu_k = _packed(rng, [70, 3], [70, 90], 2, 64)
    args = [cuda.to_device(a) for a in (q, k, v, cu_q, cu_k)]
    o = varlen_attention(*args, max_seqlen_q=70, max_seqlen_k=90)
    assert cuda.is_cuda_array(o)
    err = np.abs(o.copy_to_host() - ref_varlen(q, k, v, cu_q, cu_k))
    assert np.all(err <= packed_tol(q, k, v).o)
