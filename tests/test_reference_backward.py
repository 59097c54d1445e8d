"""Tests of the backward, dropout and varlen oracles (lesson 22, §30–31, §35, §36):
``reference/attention_backward.py``, ``reference/varlen.py`` and the dropout arguments of
``reference.attention.attention``.

NumPy only, no GPU, no numba. The backward oracle is checked against central finite
differences of the scalar loss L = Σ O ∘ G (G a fixed random upstream gradient, so ∂L/∂O = G):
an independent route to the same numbers that knows nothing of the formulas. Then the mask
cases (exact zeros, no NaN), dropout with a fixed mask, and the varlen oracles against
per-sequence and padded attention. Random inputs are fresh each run; the seed is printed and
``FLASHLESSON_SEED=<seed>`` replays it.
"""

import warnings

import numpy as np
import pytest

from flashlesson.reference import (
    attention,
    attention_backward,
    attention_backward_flops,
    attention_backward_intermediates,
    attention_flops,
    check_cu_seqlens,
    cu_seqlens,
    flash_attention_backward_tiled,
    pack,
    packed_to_padded,
    padded_to_packed,
    unpack,
    varlen_attention,
    varlen_attention_backward,
    varlen_dropout_masks,
)

EPS = 1e-6                     # central differences: truncation ~EPS², rounding ~1e-16/EPS
FD_RTOL, FD_ATOL = 1e-6, 1e-8
RTOL, ATOL = 1e-12, 1e-12      # two exact routes to the same float64 numbers


@pytest.fixture(autouse=True)
def _warnings_are_errors():
    """No oracle may print a RuntimeWarning: masked rows and −inf states are handled on purpose."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def _qkv(rng, b, h, nq, nk, d, dv=None):
    q = rng.standard_normal((b, h, nq, d))
    k = rng.standard_normal((b, h, nk, d))
    v = rng.standard_normal((b, h, nk, d if dv is None else dv))
    return q, k, v


def _close(got, want, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _finite_differences(q, k, v, g, **kw):
    """∂L/∂q, ∂L/∂k, ∂L/∂v of L = Σ attention(q, k, v, **kw)[0] ∘ g, by central differences."""
    def loss(qq, kk, vv):
        return np.sum(attention(qq, kk, vv, **kw)[0] * g)

    grads = []
    args = [q.copy(), k.copy(), v.copy()]
    for a in args:
        grad = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            x = a[idx]
            a[idx] = x + EPS
            up = loss(*args)
            a[idx] = x - EPS
            down = loss(*args)
            a[idx] = x
            grad[idx] = (up - down) / (2 * EPS)
        grads.append(grad)
    return grads


def _check_against_fd(q, k, v, g, **kw):
    dq, dk, dv = attention_backward(g, q, k, v, **kw)
    fq, fk, fv = _finite_differences(q, k, v, g, **kw)
    for name, got, want in (("dq", dq, fq), ("dk", dk, fk), ("dv", dv, fv)):
        assert got.shape == want.shape and got.dtype == np.float64, name
        assert np.all(np.isfinite(got)), name
        np.testing.assert_allclose(got, want, rtol=FD_RTOL, atol=FD_ATOL, err_msg=name)
    return dq, dk, dv


# ---------------------------------------------------------------------------------------------
# §30  the backward oracle against finite differences
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "b, h, nq, nk, d, dv, causal",
    [
        (1, 1, 1, 1, 1, 1, False),     # N = 1: P = [[1]], dq = dk = 0, dv = g
        (1, 1, 1, 1, 3, 3, True),
        (2, 2, 5, 5, 3, 3, False),     # odd d
        (2, 2, 5, 5, 3, 3, True),
        (1, 2, 3, 6, 5, 5, True),      # Nq < Nk: bottom-right, the last query sees every key
        (1, 2, 6, 3, 4, 4, True),      # Nq > Nk: the first 3 queries see no key
        (1, 1, 4, 7, 3, 2, False),     # dv ≠ d
        (1, 1, 7, 4, 2, 3, False),
    ],
)
def test_backward_matches_finite_differences(rng, b, h, nq, nk, d, dv, causal):
    q, k, v = _qkv(rng, b, h, nq, nk, d, dv)
    g = rng.standard_normal((b, h, nq, dv))
    _check_against_fd(q, k, v, g, causal=causal)


def test_backward_2d_inputs_and_custom_scale(rng):
    q, k, v = _qkv(rng, 1, 1, 4, 5, 3)
    q, k, v = q[0, 0], k[0, 0], v[0, 0]
    g = rng.standard_normal((4, 3))
    dq, dk, dv = _check_against_fd(q, k, v, g, causal=True, scale=0.7)
    assert dq.shape == (4, 3) and dk.shape == (5, 3) and dv.shape == (5, 3)


def test_backward_n1_values(rng):
    """One query, one key: P = 1 whatever the score, so O = v, dv = g and dq = dk = 0 (to
    rounding: dS = P∘(dP − D) with dP = g·v by BLAS and D = Σ g∘o, two summation orders)."""
    q, k, v = _qkv(rng, 1, 1, 1, 1, 4)
    g = rng.standard_normal((1, 1, 1, 4))
    dq, dk, dv = attention_backward(g, q, k, v)
    _close(dv, g)
    _close(dq, 0, atol=1e-13)
    _close(dk, 0, atol=1e-13)


def test_backward_key_padding_with_a_fully_padded_sequence(rng):
    b, h, nq, nk, d = 3, 2, 4, 5, 3
    q, k, v = _qkv(rng, b, h, nq, nk, d)
    g = rng.standard_normal((b, h, nq, d))
    mask = np.ones((b, nk), dtype=bool)
    mask[0, 3:] = False                 # sequence 0: 3 real keys
    mask[1, :] = False                  # sequence 1: no key at all
    mask[2, 1] = False                  # sequence 2: a hole in the middle
    for causal in (False, True):
        dq, dk, dv = _check_against_fd(q, k, v, g, causal=causal, key_padding_mask=mask)
        # exact zeros, not "small": masked entries have P = 0 exactly
        assert np.all(dq[1] == 0) and np.all(dk[1] == 0) and np.all(dv[1] == 0)
        for bb in range(b):
            pad = ~mask[bb]
            assert np.all(dk[bb][:, pad] == 0) and np.all(dv[bb][:, pad] == 0)


def test_fully_masked_rows_give_zero_gradients_no_nan(rng):
    """Causal with Nq > Nk: queries 0 … Nq − Nk − 1 see no key: O = 0, dq = 0, no NaN."""
    q, k, v = _qkv(rng, 2, 1, 6, 2, 3)
    g = rng.standard_normal((2, 1, 6, 3))
    r = attention_backward_intermediates(g, q, k, v, causal=True)
    assert np.all(r["lse"][..., :4] == -np.inf)
    assert np.all(r["dq"][..., :4, :] == 0)
    assert np.all(r["P"][..., :4, :] == 0) and np.all(r["dS"][..., :4, :] == 0)
    for name in ("P", "D", "dP", "dS", "dq", "dk", "dv"):
        assert not np.any(np.isnan(r[name])), name
    # Nk = 0: every row sees no key; all gradients are zero (and empty for k, v)
    dq, dk, dv = attention_backward(g, q, k[..., :0, :], v[..., :0, :])
    assert np.all(dq == 0) and dk.shape == (2, 1, 0, 3) and dv.shape == (2, 1, 0, 3)
    # Nq = 0: nothing to differentiate, zero gradients for k and v
    dq, dk, dv = attention_backward(g[..., :0, :], q[..., :0, :], k, v, causal=True)
    assert dq.shape == (2, 1, 0, 3) and np.all(dk == 0) and np.all(dv == 0)


def test_backward_dropout_fixed_mask(rng):
    """With the keep-mask held fixed, O = (P ∘ M/(1−p)) V is differentiable: check it by FD."""
    b, h, nq, nk, d, p = 2, 2, 5, 4, 3, 0.3
    q, k, v = _qkv(rng, b, h, nq, nk, d)
    g = rng.standard_normal((b, h, nq, d))
    m = rng.random((b, h, nq, nk)) >= p
    for causal in (False, True):
        dq, dk, dv = _check_against_fd(q, k, v, g, causal=causal, dropout_mask=m, dropout_p=p)
    # a mask shared by the heads, [B, 1, Nq, Nk], broadcasts
    _check_against_fd(q, k, v, g, dropout_mask=m[:, :1], dropout_p=p)
    # a key dropped for every query gets dv = 0 (it still gets dk: it is in the softmax)
    m2 = m.copy()
    m2[..., 2] = False
    dq, dk, dv = attention_backward(g, q, k, v, dropout_mask=m2, dropout_p=p)
    assert np.all(dv[..., 2, :] == 0) and np.any(dk[..., 2, :] != 0)


def test_intermediates_are_the_formulas(rng):
    b, h, nq, nk, d, p = 2, 3, 6, 5, 4, 0.25
    q, k, v = _qkv(rng, b, h, nq, nk, d)
    g = rng.standard_normal((b, h, nq, d))
    m = rng.random((b, h, nq, nk)) >= p
    r = attention_backward_intermediates(g, q, k, v, causal=True, dropout_mask=m, dropout_p=p)
    o, lse, P = attention(q, k, v, causal=True, return_p=True, dropout_mask=m, dropout_p=p)
    _close(r["P"], P)                                  # §30: rebuilt from lse = the softmax
    _close(r["O"], o)
    _close(r["lse"], lse)
    _close(r["Z"], m / (1 - p))
    _close(r["Pd"], P * m / (1 - p))
    _close(r["O"], r["Pd"] @ v)                        # O = P̃ V
    _close(r["D"], np.sum(r["P"] * r["dP"], axis=-1))  # D = rowsum(dO ∘ O) = rowsum(P ∘ dP)
    _close(r["dS"], r["P"] * (r["dP"] - r["D"][..., None]))
    _close(r["dv"], np.swapaxes(r["Pd"], -1, -2) @ g)
    scale = 1 / np.sqrt(d)
    _close(r["dq"], r["dS"] @ k * scale)
    _close(r["dk"], np.swapaxes(r["dS"], -1, -2) @ q * scale)
    # Σ_j dS_ij = 0: shifting a row of scores does not change the softmax
    _close(np.sum(r["dS"], axis=-1), np.zeros((b, h, nq)))
    # no dropout: Z is ones and P̃ = P
    r0 = attention_backward_intermediates(g, q, k, v)
    assert np.all(r0["Z"] == 1) and np.array_equal(r0["Pd"], r0["P"])


@pytest.mark.parametrize(
    "nq, nk, Br, Bc, causal",
    [
        (7, 7, 2, 2, True),     # §33's tiles; Nq = Nk
        (5, 9, 3, 2, True),     # Nq < Nk, Br ≠ Bc, shorter last tiles
        (9, 4, 2, 3, True),     # Nq > Nk: rows that see no key, Q tiles that see none
        (6, 5, 4, 8, False),    # a K/V tile larger than Nk
    ],
)
def test_tiled_backward_equals_the_oracle(rng, nq, nk, Br, Bc, causal):
    """§30 tile by tile (K/V outside for dK, dV; Q outside for dQ) = the whole-matrix oracle,
    with key padding (a hole, a fully padded sequence) and a NaN/inf K, V row of a padded key."""
    b, h, d = 2, 2, 3
    q, k, v = _qkv(rng, b, h, nq, nk, d)
    g = rng.standard_normal((b, h, nq, d))
    for mask in (None, np.ones((b, nk), bool)):
        if mask is not None:
            mask[0, 1] = False                      # a hole
            mask[1, :] = False                      # no key at all
            k[0, :, 1], v[0, :, 1] = np.nan, np.inf    # the hidden key holds NaN/inf
        with np.errstate(invalid="ignore"):        # (the whole-matrix oracle's 0·NaN, dropped)
            want = attention_backward(g, q, k, v, causal=causal, key_padding_mask=mask)
        got = flash_attention_backward_tiled(g, q, k, v, Br, Bc, causal=causal,
                                             key_padding_mask=mask)
        for name, x, y in zip(("dq", "dk", "dv"), got, want):
            assert np.all(np.isfinite(x)), name
            _close(x, y)
    dq, dk, dv = flash_attention_backward_tiled(g[0, 0], q[0, 0], k[0, 0], v[0, 0], Br, Bc)
    assert dq.shape == (nq, d) and dk.shape == (nk, d)      # 2-D inputs: one head
    for bad, error in ((0, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(error, match="Br must be a positive int"):
            flash_attention_backward_tiled(g, q, k, v, bad, Bc)


def test_backward_checks_its_arguments(rng):
    q, k, v = _qkv(rng, 1, 2, 3, 4, 5)
    g = rng.standard_normal((1, 2, 3, 5))
    with pytest.raises(ValueError, match="do must have"):
        attention_backward(g[..., :2, :], q, k, v)
    with pytest.raises(ValueError, match="do holds NaN"):
        attention_backward(np.full_like(g, np.nan), q, k, v)
    with pytest.raises(TypeError, match="do must hold real"):
        attention_backward(g.astype(complex), q, k, v)
    with pytest.raises(ValueError, match="dropout_p"):
        attention_backward(g, q, k, v, dropout_p=0.5)       # no mask
    with pytest.raises(ValueError, match="dropout_mask"):
        attention_backward(g, q, k, v, dropout_mask=np.ones((2, 4), bool), dropout_p=0.5)


def test_backward_flops():
    for args in [(1, 1, 1, 1, 1), (2, 8, 1024, 1024, 64), (3, 5, 7, 11, 13)]:
        for causal in (False, True):
            f = attention_backward_flops(*args, causal=causal)
            assert isinstance(f, int)
            assert f == 2.5 * attention_flops(*args, causal=causal)
    assert attention_backward_flops(2, 8, 1024, 512, 64) == 10 * 2 * 8 * 1024 * 512 * 64
    assert attention_backward_flops(1, 1, 1, 1, 1, causal=True) == 5
    with pytest.raises(ValueError, match="nq"):
        attention_backward_flops(1, 1, -1, 1, 1)


# ---------------------------------------------------------------------------------------------
# §36  dropout in the forward oracle
# ---------------------------------------------------------------------------------------------

def test_forward_dropout(rng):
    b, h, nq, nk, d, p = 2, 2, 5, 6, 3, 0.4
    q, k, v = _qkv(rng, b, h, nq, nk, d)
    m = rng.random((b, h, nq, nk)) >= p
    o0, lse0, P = attention(q, k, v, causal=True, return_p=True)
    o, lse, P1 = attention(q, k, v, causal=True, return_p=True, dropout_mask=m, dropout_p=p)
    _close(o, (P * m / (1 - p)) @ v)                   # O = (P ∘ Z) V
    assert np.array_equal(lse, lse0) and np.array_equal(P1, P)   # lse, P: before dropout
    # keep everything with p = 0: no change at all
    o2, lse2 = attention(q, k, v, causal=True, dropout_mask=np.ones((nq, nk), bool))
    _close(o2, o0)
    # 2-D inputs take an [Nq, Nk] mask
    o3, _ = attention(q[0, 0], k[0, 0], v[0, 0], dropout_mask=m[0, 0], dropout_p=p)
    _close(o3, attention(q, k, v, dropout_mask=m, dropout_p=p)[0][0, 0])
    # a fully masked row stays 0 under dropout
    o4, lse4 = attention(q, k, v, key_padding_mask=np.zeros(nk, bool), dropout_mask=m,
                         dropout_p=p)
    assert np.all(o4 == 0) and np.all(lse4 == -np.inf)


@pytest.mark.parametrize(
    "kw, error, words",
    [
        ({"dropout_p": 0.1}, ValueError, "dropout_p = 0.1 needs a dropout_mask"),
        ({"dropout_p": 1.0, "dropout_mask": True}, ValueError, "dropout_p"),
        ({"dropout_p": -0.1, "dropout_mask": True}, ValueError, "dropout_p"),
        ({"dropout_p": float("nan"), "dropout_mask": True}, ValueError, "dropout_p"),
        ({"dropout_p": True, "dropout_mask": True}, TypeError, "dropout_p"),
        ({"dropout_p": "0.1", "dropout_mask": True}, TypeError, "dropout_p"),
        ({"dropout_p": 0.1, "dropout_mask": np.ones((2, 2, 3, 4))}, TypeError,
         "dropout_mask must be a bool"),
        ({"dropout_p": 0.1, "dropout_mask": np.ones((2, 2, 4, 3), bool)}, ValueError,
         "dropout_mask must broadcast"),
        ({"dropout_p": 0.1, "dropout_mask": np.ones((1, 2, 2, 3, 4), bool)}, ValueError,
         "dropout_mask must broadcast"),
    ],
)
def test_forward_dropout_errors_name_the_argument(rng, kw, error, words):
    q, k, v = _qkv(rng, 2, 2, 3, 4, 2)
    with pytest.raises(error, match=words):
        attention(q, k, v, **kw)


# ---------------------------------------------------------------------------------------------
# §35  varlen: packed sequences, each on its own
# ---------------------------------------------------------------------------------------------

def _packed(rng, h, lengths_q, lengths_k, d, dv=None):
    dv = d if dv is None else dv
    qs = [rng.standard_normal((h, n, d)) for n in lengths_q]
    ks = [rng.standard_normal((h, n, d)) for n in lengths_k]
    vs = [rng.standard_normal((h, n, dv)) for n in lengths_k]
    (q, cq), (k, ck), (v, _) = pack(qs), pack(ks), pack(vs)
    return q, k, v, cq, ck, qs, ks, vs


def test_cu_seqlens_pack_unpack(rng):
    cu = cu_seqlens([3, 0, 1, 4])
    assert cu.dtype == np.int32 and cu.tolist() == [0, 3, 3, 4, 8]
    assert cu_seqlens([]).tolist() == [0]
    seqs = [rng.standard_normal((2, n, 3)) for n in (3, 0, 1, 4)]
    packed, cu2 = pack(seqs)
    assert packed.shape == (8, 2, 3) and np.array_equal(cu2, cu)
    assert np.array_equal(packed[3], seqs[2][:, 0])     # row cu[2] = sequence 2, token 0
    for a, b in zip(unpack(packed, cu), seqs):
        assert np.array_equal(a, b)
    padded, mask = packed_to_padded(packed, cu)
    assert padded.shape == (4, 2, 4, 3) and mask.tolist()[2] == [True, False, False, False]
    assert np.all(padded[~mask[:, None, :].repeat(2, 1)] == 0)
    assert np.array_equal(padded_to_packed(padded, cu), packed)
    with pytest.raises(ValueError, match="seqs\\[1\\]"):
        pack([np.zeros((2, 3, 3)), np.zeros((3, 3, 3))])
    with pytest.raises(ValueError, match="lengths must be ≥ 0"):
        cu_seqlens([2, -1])
    with pytest.raises(TypeError, match="lengths"):
        cu_seqlens([1.5])


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_equals_each_sequence_alone(rng, causal):
    lq, lk = [3, 1, 5, 0, 2], [4, 1, 2, 3, 0]        # Nq < Nk, =, >, empty q, empty k
    q, k, v, cq, ck, qs, ks, vs = _packed(rng, 2, lq, lk, 3, 2)
    o, lse = varlen_attention(q, k, v, cq, ck, causal=causal, scale=0.6, return_lse=True)
    assert o.shape == (sum(lq), 2, 2) and lse.shape == (sum(lq), 2)
    for b in range(len(lq)):
        o_b, lse_b = attention(qs[b][None], ks[b][None], vs[b][None], causal=causal,
                               scale=0.6)                       # a batch of one: [1, H, n, ·]
        rows = slice(cq[b], cq[b + 1])
        _close(o[rows], np.swapaxes(o_b[0], 0, 1))
        _close(lse[rows], lse_b[0].T)
    assert np.all(o[cq[4]:cq[5]] == 0) and np.all(lse[cq[4]:cq[5]] == -np.inf)   # no key
    _close(varlen_attention(q, k, v, cq, ck, causal=causal, scale=0.6), o)


def test_varlen_equals_padded_attention_with_key_padding(rng):
    lq, lk = [3, 1, 5, 2], [4, 6, 2, 1]
    q, k, v, cq, ck, *_ = _packed(rng, 2, lq, lk, 3)
    Q, _ = packed_to_padded(q, cq)
    K, kmask = packed_to_padded(k, ck)
    V, _ = packed_to_padded(v, ck)
    O, LSE = attention(Q, K, V, key_padding_mask=kmask)
    o, lse = varlen_attention(q, k, v, cq, ck, return_lse=True)
    _close(o, padded_to_packed(O, cq))
    _close(lse, padded_to_packed(LSE[..., None], cq)[..., 0])
    # causal agrees when every sequence has n_q = n_k (the diagonals coincide)
    ls = [3, 1, 5, 2]
    q, k, v, cq, ck, *_ = _packed(rng, 2, ls, ls, 3)
    Q, qmask = packed_to_padded(q, cq)
    K, kmask = packed_to_padded(k, ck)
    V, _ = packed_to_padded(v, ck)
    O, _ = attention(Q, K, V, causal=True, key_padding_mask=kmask)
    _close(varlen_attention(q, k, v, cq, ck, causal=True), padded_to_packed(O, cq))


def test_varlen_backward(rng):
    lq, lk = [3, 1, 4, 2], [4, 2, 2, 1]
    q, k, v, cq, ck, qs, ks, vs = _packed(rng, 2, lq, lk, 3)
    g = rng.standard_normal((sum(lq), 2, 3))
    for causal in (False, True):
        dq, dk, dv = varlen_attention_backward(g, q, k, v, cq, ck, causal=causal)
        for b, gs in enumerate(unpack(g, cq)):
            want = attention_backward(gs[None], qs[b][None], ks[b][None], vs[b][None],
                                      causal=causal)
            for got, w, cu in zip((dq, dk, dv), want, (cq, ck, ck)):
                _close(unpack(got, cu)[b], w[0])
    # against the padded layout (not causal): padded query rows get dO = 0
    Q, _ = packed_to_padded(q, cq)
    K, kmask = packed_to_padded(k, ck)
    V, _ = packed_to_padded(v, ck)
    G, _ = packed_to_padded(g, cq)
    dQ, dK, dV = attention_backward(G, Q, K, V, key_padding_mask=kmask)
    dq, dk, dv = varlen_attention_backward(g, q, k, v, cq, ck)
    _close(dq, padded_to_packed(dQ, cq))
    _close(dk, padded_to_packed(dK, ck))
    _close(dv, padded_to_packed(dV, ck))
    assert np.all(dK[:, :, ~kmask.any(0)] == 0)                     # padded keys: exactly 0


def test_varlen_dropout_rule(rng):
    """Sequence b's keep-mask is mask[b, :, :n_q,b, :n_k,b] of the padded-layout mask."""
    lq, lk, p = [3, 1, 4], [2, 4, 3], 0.3
    q, k, v, cq, ck, qs, ks, vs = _packed(rng, 2, lq, lk, 3)
    mask = rng.random((3, 2, max(lq), max(lk))) >= p
    per_seq = varlen_dropout_masks(mask, cq, ck)
    assert [m.shape for m in per_seq] == [(2, 3, 2), (2, 1, 4), (2, 4, 3)]
    o = varlen_attention(q, k, v, cq, ck, dropout_masks=mask, dropout_p=p)
    _close(varlen_attention(q, k, v, cq, ck, dropout_masks=per_seq, dropout_p=p), o)
    for b in range(3):
        o_b, _ = attention(qs[b][None], ks[b][None], vs[b][None],
                           dropout_mask=mask[b, :, :lq[b], :lk[b]], dropout_p=p)
        _close(unpack(o, cq)[b], o_b[0])
    # the padded run with the same mask drops the same probabilities
    Q, _ = packed_to_padded(q, cq)
    K, kmask = packed_to_padded(k, ck)
    V, _ = packed_to_padded(v, ck)
    O, _ = attention(Q, K, V, key_padding_mask=kmask, dropout_mask=mask, dropout_p=p)
    _close(o, padded_to_packed(O, cq))
    g = rng.standard_normal(o.shape)
    G, _ = packed_to_padded(g, cq)
    want = attention_backward(G, Q, K, V, key_padding_mask=kmask, dropout_mask=mask,
                              dropout_p=p)
    got = varlen_attention_backward(g, q, k, v, cq, ck, dropout_masks=mask, dropout_p=p)
    for x, w, cu in zip(got, want, (cq, ck, ck)):
        _close(x, padded_to_packed(w, cu))
    # errors name the argument
    with pytest.raises(ValueError, match="dropout_masks"):
        varlen_attention(q, k, v, cq, ck, dropout_p=p)
    with pytest.raises(ValueError, match="one mask per sequence"):
        varlen_attention(q, k, v, cq, ck, dropout_masks=per_seq[:2], dropout_p=p)
    with pytest.raises(ValueError, match="dropout_masks\\[1\\]"):
        varlen_attention(q, k, v, cq, ck, dropout_masks=[per_seq[0], per_seq[0], per_seq[2]],
                         dropout_p=p)
    with pytest.raises(ValueError, match="Nq ≥ 4"):
        varlen_attention(q, k, v, cq, ck, dropout_masks=mask[:, :, :3], dropout_p=p)


@pytest.mark.parametrize(
    "cu, error, words",
    [
        ([1, 3, 6], ValueError, "cu_seqlens_q must start at 0"),
        ([0, 4, 3, 6], ValueError, "cu_seqlens_q must be non-decreasing"),
        ([0, 3, 7], ValueError, "past the end of the packed tensor"),
        ([0, 3, 5], ValueError, "belong to no sequence"),
        (np.array([0.0, 3.0, 6.0]), TypeError, "cu_seqlens_q must hold integer"),
        (np.array([False, True]), TypeError, "cu_seqlens_q must hold integer"),
        (np.array([[0, 3, 6]]), ValueError, "cu_seqlens_q must be 1-D"),
        ([], TypeError, "cu_seqlens_q"),
        ([0, 2, 4, 6], ValueError, "cu_seqlens_q and cu_seqlens_k must have the same length"),
    ],
)
def test_bad_cu_seqlens_raise(rng, cu, error, words):
    q, k, v, cq, ck, *_ = _packed(rng, 2, [3, 3], [2, 4], 3)
    with pytest.raises(error, match=words):
        varlen_attention(q, k, v, cu, ck)
    with pytest.raises(error, match=words):
        varlen_attention_backward(np.zeros_like(q), q, k, v, cu, ck)


def test_check_cu_seqlens_direct():
    out = check_cu_seqlens(np.array([0, 2, 2, 5], np.int32), 5, "cu")
    assert out.dtype == np.int64 and out.tolist() == [0, 2, 2, 5]
    with pytest.raises(ValueError, match="cu_seqlens_k\\[-1\\] = 9 is past the end"):
        check_cu_seqlens([0, 9], 8, "cu_seqlens_k")
    with pytest.raises(ValueError, match="cu_seqlens_k\\[2\\] = 1 < cu_seqlens_k\\[1\\] = 2"):
        check_cu_seqlens([0, 2, 1, 3], 3, "cu_seqlens_k")


def test_varlen_checks_shapes(rng):
    q, k, v, cq, ck, *_ = _packed(rng, 2, [3, 3], [2, 4], 3)
    with pytest.raises(ValueError, match="q must be packed"):
        varlen_attention(q[None], k, v, cq, ck)
    with pytest.raises(ValueError, match="same number of heads"):
        varlen_attention(q[:, :1], k, v, cq, ck)
    with pytest.raises(ValueError, match="do must have"):
        varlen_attention_backward(q[:, :, :2], q, k, v, cq, ck)
