"""Refused inputs name the real problem: a value that is no array says what it is (not the dtype
NumPy would give it), arrays of supported dtypes that differ say so, naming each one's, and an
unsupported dtype is still named as such. A refused call launches nothing and leaves no plan
behind: the next call runs as if it had never been made. Tiny shapes (the simulator's)."""

import numpy as np
import pytest

import flashlesson as fl
from flashlesson import launch, reference

NOT_AN_ARRAY = "expected a NumPy array, a Numba device array or a torch tensor"


def _qkv(rng, shape=(1, 2, 5, 8)):
    return tuple(rng.standard_normal(shape).astype(np.float32) for _ in range(3))


def _varlen(rng):
    """Two packed sequences of 3 and 2 rows, H = 2, d = 8."""
    q, k, v = (rng.standard_normal((5, 2, 8)).astype(np.float32) for _ in range(3))
    cu = np.array([0, 3, 5], np.int32)
    return q, k, v, cu


def _state():
    return dict(launch.STATS), len(launch._PLANS)


# --- not an array ---------------------------------------------------------------------------
def test_a_list_is_named_as_a_list(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(TypeError, match=f"q: {NOT_AN_ARRAY}, got list .as a NumPy array its "
                                        "dtype would be float64; expected float32"):
        fl.attention(q.tolist(), k, v)
    with pytest.raises(TypeError, match=f"v: {NOT_AN_ARRAY}, got tuple"):
        fl.attention(q, k, tuple(v.tolist()))
    with pytest.raises(TypeError, match=f"x: {NOT_AN_ARRAY}, got list"):
        fl.softmax([[1.0, 2.0, 3.0]])
    with pytest.raises(TypeError, match=f"x: {NOT_AN_ARRAY}, got a list that is no "
                                        "rectangular array"):
        fl.softmax([[1.0, 2.0], [3.0]])


def test_other_values_are_named(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(TypeError, match=f"k: {NOT_AN_ARRAY}, got str"):
        fl.attention(q, "abc", v)
    with pytest.raises(TypeError, match=f"x: {NOT_AN_ARRAY}, got float"):
        fl.softmax(1.5)
    o, lse = fl.attention(q, k, v, return_lse=True)
    with pytest.raises(TypeError, match=f"q: {NOT_AN_ARRAY}, got list"):
        fl.attention_backward(o, q.tolist(), k, v, o, lse)


# --- arrays of different dtypes -------------------------------------------------------------
def test_attention_names_each_dtype(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(TypeError, match="q, k, v must share one dtype; got q float32, "
                                        "k float16, v float32"):
        fl.attention(q, k.astype(np.float16), v)
    with pytest.raises(TypeError, match="q, k, v must share one dtype; got q float32, "
                                        "k float32, v bfloat16"):
        fl.attention(q, k, fl.BFloat16.from_float32(v))


def test_backward_names_each_dtype(rng):
    q, k, v = _qkv(rng)
    o, lse = fl.attention(q, k, v, return_lse=True)
    do = rng.standard_normal(o.shape).astype(np.float32)
    with pytest.raises(TypeError, match="do, q, k, v, o must share one dtype; got do float16, "
                                        "q float32, k float32, v float32, o float32"):
        fl.attention_backward(do.astype(np.float16), q, k, v, o, lse)
    with pytest.raises(TypeError, match="do, q, k, v, o must share one dtype; got do float32, "
                                        "q float32, k float32, v float32, o float16"):
        fl.attention_backward(do, q, k, v, o.astype(np.float16), lse)


def test_varlen_names_each_dtype(rng):
    q, k, v, cu = _varlen(rng)
    with pytest.raises(TypeError, match="q, k, v must share one dtype; got q float32, "
                                        "k float16, v float32"):
        fl.varlen_attention(q, k.astype(np.float16), v, cu, cu, max_seqlen_q=3, max_seqlen_k=3)
    o, lse = fl.varlen_attention(q, k, v, cu, cu, max_seqlen_q=3, max_seqlen_k=3,
                                 return_lse=True)
    with pytest.raises(TypeError, match="do, q, k, v, o must share one dtype; got do float16"):
        fl.varlen_attention_backward(o.astype(np.float16), q, k, v, o, lse, cu, cu,
                                     max_seqlen_q=3, max_seqlen_k=3)
    with pytest.raises(TypeError, match=f"q: {NOT_AN_ARRAY}, got list"):
        fl.varlen_attention(q.tolist(), k, v, cu, cu, max_seqlen_q=3, max_seqlen_k=3)


def test_an_unsupported_dtype_is_still_named_alone(rng):
    """float64 is no dtype of attention's: the message says that, not that the three differ."""
    q, k, v = _qkv(rng)
    with pytest.raises(TypeError, match="q: dtype float64 is not supported; expected float32"):
        fl.attention(q.astype(np.float64), k, v)
    with pytest.raises(TypeError, match="k: dtype float64 is not supported; expected float32"):
        fl.attention(q, k.astype(np.float64), v)


# --- a refused call leaves nothing behind ---------------------------------------------------
def test_refused_calls_leave_the_library_as_it_was(rng):
    q, k, v = _qkv(rng)
    fl.attention(q, k, v)                          # (the plans of a good call, built first)
    before = _state()
    refused = [lambda: fl.attention(q.tolist(), k, v),
               lambda: fl.attention(q, k.astype(np.float16), v),
               lambda: fl.attention_backward(q.astype(np.float16), q, k, v, q,
                                             np.zeros(q.shape[:3], np.float32)),
               lambda: fl.softmax([[1.0, 2.0]])]
    for call in refused:
        with pytest.raises(TypeError):
            call()
        assert _state() == before
    o = fl.attention(q, k, v)
    assert _state()[1] == before[1]                # the good call's plans, reused
    ref, _ = reference.attention(*(a.astype(np.float64) for a in (q, k, v)))
    np.testing.assert_allclose(o, ref, rtol=1e-4, atol=1e-5)
