"""Awkward but valid input gives the documented result, checked against the float64
oracle (``reference/``) or the stated values: empty inputs (as torch: empty results, no
launch), N = 1, N below or off the tiles, 1000/999/998, −inf and NaN entries, rows that see no
key (O = 0, LSE = −inf), exact in-place softmax, d = 145 … 256 with the default tiles. Ids read
``documented-<function>-<label>`` (table: ``edge_table``). Shapes are tiny: most cases run one
simulated block or none.
"""

import numpy as np
import pytest
from conftest import check_attention, check_grads
from edge_table import Documented, params
from numba import cuda

import flashlesson
from flashlesson import (attention, attention_backward, linear_attention, merge_attention,
                         softmax, varlen_attention, varlen_attention_backward)
from flashlesson.attention_methods import FLOAT32_METHODS
from flashlesson.tolerance import softmax_tol
from flashlesson.reference import attention as ref_attention
from flashlesson.reference import merge_attention as ref_merge
from flashlesson.reference.attention_backward import attention_backward as ref_backward
from flashlesson.reference.softmax import softmax_stable

F32 = np.float32
REL = 1e-5          # merge_attention only (a few float32 roundings of each part's O and LSE,
                    # no sum over keys: outside flashlesson.tolerance's attention model)


def _rng():
    return np.random.default_rng(12)


def host(a):
    return a if isinstance(a, np.ndarray) else a.copy_to_host()


# ---------------------------------------------------------------------------------------------
# softmax
# ---------------------------------------------------------------------------------------------
def softmax_matches(x, method="auto", device=False):
    def check():
        arg = cuda.to_device(x) if device else x
        y = host(softmax(arg, method=method))
        assert y.shape == x.shape and y.dtype == x.dtype
        if x.size:
            ref = softmax_stable(x.astype(np.float64))
            rtol, atol = softmax_tol(max(x.shape[-1], 1), x.dtype)
            np.testing.assert_allclose(y, ref, rtol=rtol, atol=atol, equal_nan=True)
    return check


def softmax_in_place(method):
    def check():
        x = np.array([[1000, 999, 998, -np.inf, 0.5], [0, 1, 2, 3, 4]], F32)
        dev = cuda.to_device(x)
        y = softmax(dev, method=method, out=dev)
        assert y is dev
        rtol, atol = softmax_tol(x.shape[-1])
        np.testing.assert_allclose(dev.copy_to_host(), softmax_stable(x.astype(np.float64)),
                                   rtol=rtol, atol=atol)
    return check


_row = np.array([[1000, 999, 998]], F32)
SOFTMAX = [
    Documented("softmax", "empty-rows-0xN", softmax_matches(np.zeros((0, 5), F32))),
    Documented("softmax", "empty-N-0", softmax_matches(np.zeros((3, 0), F32))),
    Documented("softmax", "empty-3d", softmax_matches(np.zeros((2, 0, 4), F32))),
    Documented("softmax", "empty-N-0-device", softmax_matches(np.zeros((3, 0), F32), device=True)),
    Documented("softmax", "empty-fp16", softmax_matches(np.zeros((0, 7), np.float16))),
    Documented("softmax", "N-1", softmax_matches(np.array([[3.0], [-np.inf]], F32)[:1])),
    Documented("softmax", "1000-999-998", softmax_matches(_row)),
    Documented("softmax", "row-of-minus-inf", softmax_matches(np.full((1, 5), -np.inf, F32))),
    Documented("softmax", "nan-row", softmax_matches(np.array([[1, np.nan, 2]], F32))),
    Documented("softmax", "mixed-minus-inf", softmax_matches(np.array([[-np.inf, 0, 1]], F32))),
    Documented("softmax", "N-33-not-a-warp", softmax_matches(
        _rng().standard_normal((2, 33)).astype(F32))),
] + [Documented("softmax", f"in-place-{m}", softmax_in_place(m))
     for m in flashlesson.SOFTMAX_METHODS if m != "naive"]


# ---------------------------------------------------------------------------------------------
# attention forward: empty shapes (no launch) and small awkward ones (oracle)
# ---------------------------------------------------------------------------------------------
def attention_empty(method, B, H, nq, nk, d=8, device=False):
    def check():
        q, k, v = (np.ones((B, H, n, d), F32) for n in (nq, nk, nk))
        if device:
            q, k, v = (cuda.to_device(a) for a in (q, k, v))
        o, lse = attention(q, k, v, method=method, return_lse=True)
        o, lse = host(o), host(lse)
        assert o.shape == (B, H, nq, d) and lse.shape == (B, H, nq)
        assert np.all(o == 0) and np.all(np.isneginf(lse))     # a row with no key: 0, −inf
    return check


def attention_oracle(nq, nk, d=8, method="flash", causal=False, pad=None, big=False):
    def check():
        rng = _rng()
        q, k, v = (rng.standard_normal((1, 1, n, d)).astype(F32) for n in (nq, nk, nk))
        if big:                                 # scores 1000, 999, 998 …: online max needed
            q[:] = 1.0
            k[..., :] = 0.0
            k[..., 0] = 1000.0 - np.arange(nk, dtype=F32)
        mask = None if pad is None else np.arange(nk)[None, :] < pad
        o, lse = attention(q, k, v, method=method, causal=causal, key_padding_mask=mask,
                           return_lse=True, scale=1.0 if big else None)
        ref = ref_attention(q, k, v, causal=causal, key_padding_mask=mask,
                            scale=1.0 if big else None)
        check_attention(o, lse, *ref, q, k, v, scale=1.0 if big else None)
    return check


ATTENTION = []
# (flash_wgmma takes fp16/bf16 with d = 64 or 128 only: its empty problems are below)
for _m in FLOAT32_METHODS:
    for _shape in ((0, 1, 3, 4), (1, 0, 3, 4), (1, 1, 0, 4), (1, 1, 3, 0)):
        ATTENTION.append(Documented(f"attention[{_m}]", "empty-B{}-H{}-Nq{}-Nk{}".format(*_shape),
                                    attention_empty(_m, *_shape)))
    ATTENTION.append(Documented(f"attention[{_m}]", "empty-Nk0-device",
                                attention_empty(_m, 1, 1, 2, 0, device=True)))
for _m in flashlesson.attention_methods.FP32_METHODS:
    ATTENTION += [
        Documented(f"attention[{_m}]", "N-1", attention_oracle(1, 1)),
        Documented(f"attention[{_m}]", "Nq3-Nk5-below-tiles", attention_oracle(3, 5, d=5)),
        Documented(f"attention[{_m}]", "causal-Nq5-Nk3-rows-without-keys",
                   attention_oracle(5, 3, causal=True)),
        Documented(f"attention[{_m}]", "padding-row-fully-masked", attention_oracle(2, 6, pad=0)),
        Documented(f"attention[{_m}]", "scores-1000-999-998", attention_oracle(2, 3, big=True)),
    ]
ATTENTION += [
    Documented("attention[flash]", "Nk-17-off-the-tiles", attention_oracle(2, 17)),
    Documented("attention[flash]", "d-145-default-tiles", attention_oracle(2, 3, d=145)),
    Documented("attention[flash]", "d-256-default-tiles", attention_oracle(2, 3, d=256)),
    Documented("attention[flash_tc]", "float32-N-1", attention_oracle(1, 1, method="flash_tc")),
]


def fp16_empty():
    q = np.zeros((1, 1, 0, 16), np.float16)
    o = attention(q, q, q)
    assert o.dtype == np.float16 and o.shape == (1, 1, 0, 16)


def bf16_empty():
    q = flashlesson.BFloat16(np.zeros((0, 1, 2, 16), np.uint16))
    o, lse = attention(q, q, q, return_lse=True)
    assert isinstance(o, flashlesson.BFloat16) and o.shape == (0, 1, 2, 16) and lse.size == 0


def wgmma_empty(nq, nk):
    def check():
        q, k = np.zeros((1, 2, nq, 64), np.float16), np.zeros((1, 2, nk, 64), np.float16)
        o, lse = attention(q, k, k, method="flash_wgmma", return_lse=True)
        assert o.dtype == np.float16 and o.shape == q.shape and lse.shape == (1, 2, nq)
        assert np.all(o == 0) and np.all(np.isneginf(lse))     # a row with no key: 0, −inf
    return check


ATTENTION += [Documented("attention[flash_tc]", "fp16-empty", fp16_empty),
              Documented("attention[flash_tc]", "bf16-empty", bf16_empty),
              Documented("attention[flash_wgmma]", "fp16-empty-Nq0", wgmma_empty(0, 3)),
              Documented("attention[flash_wgmma]", "fp16-empty-Nk0", wgmma_empty(3, 0))]


# ---------------------------------------------------------------------------------------------
# attention backward
# ---------------------------------------------------------------------------------------------
def backward_empty(method, B, H, nq, nk, d=8):
    def check():
        q, do, o = (np.ones((B, H, nq, d), F32) for _ in range(3))
        k, v = (np.ones((B, H, nk, d), F32) for _ in range(2))
        lse = np.full((B, H, nq), -np.inf, F32)
        dq, dk, dv = attention_backward(do, q, k, v, o, lse, method=method)
        assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
        assert not (dq.any() or dk.any() or dv.any())   # nothing reaches them: zeros
    return check


def backward_oracle(nq, nk, method="flash", pad=None, d=8):
    def check():
        rng = _rng()
        q, k, v = (rng.standard_normal((1, 1, n, d)).astype(F32) for n in (nq, nk, nk))
        do = rng.standard_normal((1, 1, nq, d)).astype(F32)
        mask = None if pad is None else np.arange(nk)[None, :] < pad
        lib_mask = mask if pad is None else mask.astype(np.asarray(pad).dtype)  # (bool, uint8)
        o, lse = attention(q, k, v, key_padding_mask=lib_mask, return_lse=True)
        grads = attention_backward(do, q, k, v, o, lse, key_padding_mask=lib_mask,
                                   method=method)
        check_grads(grads, ref_backward(do, q, k, v, key_padding_mask=mask), q, k, v=v, do=do)
    return check


BACKWARD = []
for _m in flashlesson.backward_methods.FLOAT32_METHODS:     # (not flash_wgmma: fp16/bf16)
    for _shape in ((0, 1, 3, 4), (1, 1, 0, 4), (1, 1, 3, 0)):
        BACKWARD.append(Documented(f"attention_backward[{_m}]",
                                   "empty-B{}-H{}-Nq{}-Nk{}".format(*_shape),
                                   backward_empty(_m, *_shape)))
for _m in flashlesson.backward_methods.FP32_METHODS:
    BACKWARD += [Documented(f"attention_backward[{_m}]", "N-1", backward_oracle(1, 1, _m)),
                 Documented(f"attention_backward[{_m}]", "uint8-mask-with-a-padded-key",
                            backward_oracle(2, 3, _m, pad=np.array([2], np.uint8)))]
BACKWARD.append(Documented("attention_backward[flash]", "d-256-default-tiles",
                           backward_oracle(1, 2, d=256)))


# ---------------------------------------------------------------------------------------------
# varlen, merge, linear attention
# ---------------------------------------------------------------------------------------------
def varlen_empty(backward):
    def check():
        q = np.zeros((0, 2, 8), F32)
        k = np.ones((3, 2, 8), F32)
        cu_q, cu_k = np.array([0, 0], np.int32), np.array([0, 3], np.int32)
        if backward:
            dq, dk, dv = varlen_attention_backward(q, q, k, k, q, np.zeros((0, 2), F32), cu_q,
                                                   cu_k, max_seqlen_q=0, max_seqlen_k=3)
            assert dq.shape == (0, 2, 8) and not dk.any() and not dv.any()
        else:
            o, lse = varlen_attention(q, k, k, cu_q, cu_k, max_seqlen_q=0, max_seqlen_k=3,
                                      return_lse=True)
            assert o.shape == (0, 2, 8) and lse.shape == (0, 2)
    return check


def varlen_max_is_total():
    rng = _rng()
    q, k, v = (rng.standard_normal((4, 1, 8)).astype(F32) for _ in range(3))
    cu = np.array([0, 4], np.int32)
    o, lse = varlen_attention(q, k, v, cu, cu, max_seqlen_q=4, max_seqlen_k=4, return_lse=True)
    t = lambda a: a.transpose(1, 0, 2)[None]    # noqa: E731 - [total, H, d] → [1, H, N, d]
    ref_o, ref_lse = ref_attention(t(q), t(k), t(v))
    check_attention(t(o), lse.T[None], ref_o, ref_lse, t(q), t(k), t(v))


def merge_case(lse_parts):
    def check():
        rng = _rng()
        lse = np.array(lse_parts, F32)[:, None]                 # [P, 1]
        o = rng.standard_normal((lse.shape[0], 1, 4)).astype(F32)
        got_o, got_lse = merge_attention(o, lse)
        ref_o, ref_lse = ref_merge(o, lse)
        np.testing.assert_allclose(got_o, ref_o, rtol=REL, atol=REL)
        np.testing.assert_array_equal(np.isneginf(got_lse), np.isneginf(ref_lse))
        fin = np.isfinite(ref_lse)
        np.testing.assert_allclose(got_lse[fin], ref_lse[fin], rtol=REL)
        assert not np.isnan(got_o).any()
    return check


def merge_empty_rows():
    o, lse = merge_attention(np.zeros((2, 0, 4), F32), np.zeros((2, 0), F32))
    assert o.shape == (0, 4) and lse.shape == (0,)


def linear_empty(shape):
    def check():
        B, H, nq, nk = shape
        q, k = np.ones((B, H, nq, 8), F32), np.ones((B, H, nk, 8), F32)
        o = linear_attention(q, k, k)
        assert o.shape == (B, H, nq, 8) and not o.any()
    return check


OTHER = [
    Documented("varlen_attention", "total-q-0", varlen_empty(False)),
    Documented("varlen_attention_backward", "total-q-0", varlen_empty(True)),
    Documented("varlen_attention", "max-seqlen-equals-total", varlen_max_is_total),
    Documented("merge_attention", "one-part-minus-inf", merge_case([0.5, -np.inf])),
    Documented("merge_attention", "all-parts-minus-inf", merge_case([-np.inf, -np.inf])),
    Documented("merge_attention", "parts-1000-999-998", merge_case([1000, 999, 998])),
    Documented("merge_attention", "zero-rows", merge_empty_rows),
] + [Documented("linear_attention", "empty-B{}-H{}-Nq{}-Nk{}".format(*s), linear_empty(s))
     for s in ((0, 1, 3, 4), (1, 0, 3, 4), (1, 1, 0, 4), (1, 1, 3, 0))]

ALL = SOFTMAX + ATTENTION + BACKWARD + OTHER


@pytest.mark.parametrize("case", params(ALL))
def test_documented(case):
    case.check()


# ---------------------------------------------------------------------------------------------
# flashlesson.torch (GPU, torch): torch's mask conventions, or a refusal — never an inversion
# ---------------------------------------------------------------------------------------------
def test_torch_masks_and_flags():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or flashlesson.SIMULATOR:
        pytest.skip("flashlesson.torch runs on CUDA tensors")
    from flashlesson.torch import scaled_dot_product_attention as sdpa
    q = torch.randn(2, 1, 4, 16, device="cuda")
    keep = torch.tensor([[True, True, False, True], [True, False, False, False]], device="cuda")
    want = sdpa(q, q, q, key_padding_mask=keep)
    got = sdpa(q, q, q, attn_mask=keep[:, None, None, :])       # torch's bool convention
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    ref = torch.nn.functional.scaled_dot_product_attention(q, q, q,
                                                            attn_mask=keep[:, None, None, :])
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    for bad, err, name in (
            (dict(attn_mask=torch.zeros(2, 1, 1, 4, device="cuda")), TypeError, "attn_mask"),
            (dict(key_padding_mask=keep.float()), TypeError, "key_padding_mask"),
            (dict(attn_mask=torch.ones(4, 4, dtype=torch.bool, device="cuda")), ValueError,
             "attn_mask"),
            (dict(is_causal="False"), TypeError, "is_causal"),
            (dict(dropout_p="0.1"), TypeError, "dropout_p"),
            (dict(scale=1e300), ValueError, "scale")):
        with pytest.raises(err, match=f"^{name}"):
            sdpa(q, q, q, **bad)
