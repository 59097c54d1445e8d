"""Negative controls for the error model (``flashlesson.tolerance``) and for the checks built on
it (``conftest.check_attention``, ``check_grads``, ``check_tc_grads``, ``packed_tol``): a bound
that let everything through would let the rest of the suite pass too. For each bound, on tiny
random inputs and the float64 oracle (``flashlesson.reference``):

(a) the oracle's own result passes;
(b) the oracle's result moved by ``MARGIN`` = 3 × the bound at one element fails (and so do
    gross errors: a key left out, dK scaled by 1.01, dK and dV swapped, a wrong LSE);
(c) the same check with every bound ``LOOSE`` = 10 × larger lets (b)'s result pass: the
    checks resolve an error of a few bounds, not only gross ones;
(d) the kernel's real error on the same inputs, in units of the bound, lies between a floor
    and 1. Each floor (``FLOORS``) sits above a tenth of the largest ratio seen, so a bound
    made 10× looser fails it, and 2–4× below the smallest seen. Where the error is within 10×
    of its bound — the fp16 rounding of O, element by element, and what O's fp16 rounding does
    to dQ and dK (``rounded_o_tol``, computed exactly) — the floor is 0.1: a bound 10×
    tighter fails the ceiling there too.

The ratios seen in the simulator, 2026-12-07, over 13 seeds (``for s in $(seq 100 112); do
FLASHLESSON_SEED=$s python -m pytest -q -s -p no:cacheprovider tests/test_tolerance_controls.py;
done``: each test prints its ratios; the simulator keeps much of the arithmetic in float64, so
its float32 errors sit below a GPU's), and the floors:

    ===================================  =============  =======
    error / bound                        seen           floor
    ===================================  =============  =======
    float32 O (flash, lesson, varlen)    0.0085–0.028   0.0035
    float32 LSE                          0.039–0.10     0.015
    float32 dQ, dK, dV (the largest)     0.020–0.059    0.008
    3xTF32 O                             0.0027–0.0060  0.0012
    3xTF32 LSE                           0.021–0.033    0.008
    fp16 O, per row                      0.084–0.18     0.03
    fp16 O, element by element           0.38–0.54      0.1
    fp16 dQ, dK, dV (the largest)        0.088–0.16     0.03
    O's fp16 rounding in dQ, dK          0.24–0.67      0.1
    softmax                              0.023–0.055    0.008
    merge O; LSE                         0.087–0.16;    0.03;
                                         0.12–0.20      0.03
    linear attention                     0.027–0.042    0.01
    ===================================  =============  =======

A bound made 10× looser fails its floor in every row. A float32 bound made 10× tighter would
still pass most runs here (the largest ratios seen, × 10: O 0.28, the gradients 0.59, LSE 1.0):
that direction is the GPU suite's, where the float32 errors are larger (the table in
``flashlesson.tolerance``'s docstring).

Tiny shapes (B = 1, H = 2, N ≤ 40, d ≤ 16): the file runs in seconds in the simulator.
"""

import numpy as np
import pytest

import conftest
from conftest import as_f64, check_attention, check_grads, check_tc_grads, grad_floors
from flashlesson import attention, attention_backward, linear_attention, merge_attention, \
    reference, softmax, varlen_attention
from flashlesson import tolerance as T
from flashlesson.reference.philox import dropout_keep_mask

MARGIN = 3.0        # (b): the oracle moved by this many bounds at one element
LOOSE = 10.0        # (c): every bound this many times larger
FLOORS = {          # (d): the real error is at least this fraction of its bound (docstring)
    "float32 O": 0.0035, "float32 LSE": 0.015, "float32 grads": 0.008,
    "3xTF32 O": 0.0012, "3xTF32 LSE": 0.008, "fp16 O": 0.03, "fp16 O elementwise": 0.1,
    "fp16 grads": 0.03, "rounded O": 0.1, "softmax": 0.008, "merge O": 0.03,
    "merge LSE": 0.03, "linear attention": 0.01}
B, H, NQ, NK, D = 1, 2, 23, 37, 16


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _qkv(rng, nq=NQ, nk=NK, d=D):
    return _f32(rng, B, H, nq, d), _f32(rng, B, H, nk, d), _f32(rng, B, H, nk, d)


def _pick(rng, x, where=None):
    """A random flat index of x (among the True of ``where``)."""
    ok = np.flatnonzero(np.ones(np.shape(x), bool) if where is None else where)
    return int(rng.choice(ok))


def _moved(x, at, by):
    y = np.array(x, np.float64, copy=True)
    y.flat[at] += by
    return y


def _ratio(got, want, bound):
    """max |got − want| / bound over the elements (bound broadcast to want's shape)."""
    diff = np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))
    return float(np.max(diff / np.broadcast_to(bound, diff.shape), initial=0.0))


def _in_band(ratio, kind, what=""):
    """(d): FLOORS[kind] ≤ ratio ≤ 1."""
    floor = FLOORS[kind]
    print(f"{kind} {what}: {ratio:.3g} of the bound")
    assert floor <= ratio <= 1, f"{kind} {what}: error {ratio:.2e} of the bound, outside " \
                                f"[{floor:g}, 1]"


def _scaled(fn, factor):
    """fn with each bound it returns multiplied by factor (AttentionTol, float, tuple)."""
    def scaled(*args, **kw):
        out = fn(*args, **kw)
        if isinstance(out, T.AttentionTol):
            return T.AttentionTol(out.o * factor, out.lse * factor)
        if isinstance(out, tuple):
            return tuple(np.asarray(x) * factor for x in out)
        return out * factor
    return scaled


# --- attention_tol through check_attention ---------------------------------------------------
@pytest.mark.parametrize("causal,p", [(False, 0.0), (True, 0.0), (True, 0.3)],
                         ids=["full", "causal", "causal-dropout"])
def test_check_attention_float32(causal, p, rng, monkeypatch):
    q, k, v = _qkv(rng)
    kw, dropout = {}, {}
    if p:
        seed = int(rng.integers(0, 2**62))
        kw = dict(dropout_p=p, seed=seed)
        dropout = dict(dropout_mask=dropout_keep_mask(seed, B, H, NQ, NK, p), dropout_p=p)
    o_ref, lse_ref = reference.attention(q, k, v, causal=causal, **dropout)
    tol = T.attention_tol(q, k, v, dropout_p=p)
    # (a)
    assert check_attention(o_ref, lse_ref, o_ref, lse_ref, q, k, v, dropout_p=p) == 0
    # (b) one element of O, one LSE, MARGIN bounds off; a key left out; the LSE of 2l
    at = _pick(rng, o_ref)
    bad_o = _moved(o_ref, at, MARGIN * np.broadcast_to(tol.o, o_ref.shape).flat[at])
    with pytest.raises(AssertionError, match="O: error"):
        check_attention(bad_o, lse_ref, o_ref, lse_ref, q, k, v, dropout_p=p)
    at_l = _pick(rng, lse_ref)
    bad_lse = _moved(lse_ref, at_l, -MARGIN * np.broadcast_to(tol.lse, lse_ref.shape).flat[at_l])
    with pytest.raises(AssertionError, match="LSE: error"):
        check_attention(o_ref, bad_lse, o_ref, lse_ref, q, k, v, dropout_p=p)
    drop = {kk: x[..., :-1] if kk == "dropout_mask" else x for kk, x in dropout.items()}
    o_short, _ = reference.attention(q, k[:, :, :-1], v[:, :, :-1], causal=causal, **drop)
    with pytest.raises(AssertionError, match="O: error"):
        check_attention(o_short, lse_ref, o_ref, lse_ref, q, k, v, dropout_p=p)
    with pytest.raises(AssertionError, match="LSE: error"):
        check_attention(o_ref, lse_ref + np.log(2.0), o_ref, lse_ref, q, k, v, dropout_p=p)
    # (c) every bound LOOSE× larger: (b)'s MARGIN-bound errors pass
    monkeypatch.setattr(conftest, "attention_tol", _scaled(T.attention_tol, LOOSE))
    check_attention(bad_o, lse_ref, o_ref, lse_ref, q, k, v, dropout_p=p)
    check_attention(o_ref, bad_lse, o_ref, lse_ref, q, k, v, dropout_p=p)
    monkeypatch.undo()
    # (d) the kernels: fast (and, without dropout, lesson) tier
    for tier in ("fast",) if p else ("fast", "lesson"):
        o, lse = attention(q, k, v, causal=causal, return_lse=True, tier=tier, **kw)
        worst = check_attention(o, lse, o_ref, lse_ref, q, k, v, dropout_p=p)
        _in_band(worst, "float32 O", tier)
        _in_band(_ratio(lse, lse_ref, tol.lse), "float32 LSE", tier)


def test_check_attention_float16(rng, monkeypatch):
    """The tensor-core forward (fp16 in): the oracle gets the rounded inputs, the bound adds
    the 16-bit roundings of P and O — per row in check_attention, element by element with the
    oracle's P and O (``attention_tol(p=, o=)``), which sits within 10× of the error."""
    q, k, v = (x.astype(np.float16) for x in _qkv(rng))
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    o_ref, lse_ref, p_ref = reference.attention(q64, k64, v64, causal=True, return_p=True)
    row = T.attention_tol(q64, k64, v64, dtype="float16")
    elem = T.attention_tol(q64, k64, v64, dtype="float16", p=p_ref, o=o_ref)
    assert check_attention(o_ref, lse_ref, o_ref, lse_ref, q64, k64, v64, dtype="float16") == 0
    at = _pick(rng, o_ref)
    bad = _moved(o_ref, at, MARGIN * np.broadcast_to(row.o, o_ref.shape).flat[at])
    with pytest.raises(AssertionError, match="O: error"):
        check_attention(bad, lse_ref, o_ref, lse_ref, q64, k64, v64, dtype="float16")
    monkeypatch.setattr(conftest, "attention_tol", _scaled(T.attention_tol, LOOSE))
    check_attention(bad, lse_ref, o_ref, lse_ref, q64, k64, v64, dtype="float16")
    monkeypatch.undo()
    # the elementwise bound: (b) and (c) by hand
    bad = _moved(o_ref, at, MARGIN * elem.o.flat[at])
    assert _ratio(bad, o_ref, elem.o) > 1 >= _ratio(bad, o_ref, LOOSE * elem.o)
    o, lse = attention(q, k, v, causal=True, return_lse=True)
    o = np.asarray(o, np.float64)
    _in_band(check_attention(o, lse, o_ref, lse_ref, q64, k64, v64, dtype="float16"), "fp16 O")
    _in_band(_ratio(o, o_ref, elem.o), "fp16 O elementwise")


def test_check_attention_tf32x3(rng, monkeypatch):
    """float32 inputs on the tensor cores (3xTF32, method "flash_tc"): the float32 model plus
    the split's and the k8 steps' terms."""
    q, k, v = _qkv(rng, d=8)
    o_ref, lse_ref = reference.attention(q, k, v, causal=True)
    tol = T.attention_tol(q, k, v, dtype="tf32")
    check_attention(o_ref, lse_ref, o_ref, lse_ref, q, k, v, dtype="tf32")
    at = _pick(rng, lse_ref)
    bad = _moved(lse_ref, at, MARGIN * np.broadcast_to(tol.lse, lse_ref.shape).flat[at])
    with pytest.raises(AssertionError, match="LSE: error"):
        check_attention(o_ref, bad, o_ref, lse_ref, q, k, v, dtype="tf32")
    # the tf32 terms count: the float32 model alone gives a smaller bound
    assert np.all(T.attention_tol(q, k, v).lse < T.attention_tol(q, k, v, dtype="tf32").lse)
    monkeypatch.setattr(conftest, "attention_tol", _scaled(T.attention_tol, LOOSE))
    check_attention(o_ref, bad, o_ref, lse_ref, q, k, v, dtype="tf32")
    monkeypatch.undo()
    o, lse = attention(q, k, v, causal=True, return_lse=True, method="flash_tc")
    _in_band(check_attention(o, lse, o_ref, lse_ref, q, k, v, dtype="tf32"), "3xTF32 O")
    _in_band(_ratio(lse, lse_ref, tol.lse), "3xTF32 LSE")


def test_packed_tol(rng, monkeypatch):
    """varlen's packed layout ([total, H, d]): one sequence, so the packed bound is the padded
    one; the varlen kernel within it."""
    q, k, v = _qkv(rng)
    o_ref, lse_ref = reference.attention(q, k, v, causal=True)
    qp, kp, vp = (np.ascontiguousarray(np.swapaxes(x[0], 0, 1)) for x in (q, k, v))
    op_ref, lp_ref = np.swapaxes(o_ref[0], 0, 1), np.swapaxes(lse_ref[0], 0, 1)
    tol = conftest.packed_tol(qp, kp, vp)
    np.testing.assert_array_equal(np.swapaxes(tol.o, 0, 1), T.attention_tol(q, k, v).o[0])
    check_attention(op_ref, lp_ref, op_ref, lp_ref, qp, kp, vp, packed=True)
    at = _pick(rng, op_ref)
    bad = _moved(op_ref, at, MARGIN * np.broadcast_to(tol.o, op_ref.shape).flat[at])
    with pytest.raises(AssertionError, match="O: error"):
        check_attention(bad, lp_ref, op_ref, lp_ref, qp, kp, vp, packed=True)
    monkeypatch.setattr(conftest, "attention_tol", _scaled(T.attention_tol, LOOSE))
    check_attention(bad, lp_ref, op_ref, lp_ref, qp, kp, vp, packed=True)
    monkeypatch.undo()
    cu_q, cu_k = np.array([0, NQ], np.int32), np.array([0, NK], np.int32)
    o, lse = varlen_attention(qp, kp, vp, cu_q, cu_k, max_seqlen_q=NQ, max_seqlen_k=NK,
                              causal=True, return_lse=True)
    _in_band(check_attention(o, lse, op_ref, lp_ref, qp, kp, vp, packed=True), "float32 O",
             "varlen")


# --- backward_tol, backward_errors through check_grads ---------------------------------------
def _grad_controls(rng, grads_ref, q, k, rel, check, loose_check):
    """(a), (b), (c) of a backward check: check(grads) asserts; loose_check(grads) is the same
    check with its bounds LOOSE× larger. Returns nothing; raises where a control fails."""
    dq, dk, dv = grads_ref
    f32 = [np.asarray(g, np.float32) for g in grads_ref]
    check(f32)                                                              # (a)
    floors = grad_floors(grads_ref, q, k)
    for i, (name, g) in enumerate(zip(("dq", "dk", "dv"), grads_ref)):     # (b), (c)
        top = max(float(np.max(np.abs(g))), floors[i])
        at = _pick(rng, g)
        bad = list(f32)
        bad[i] = _moved(g, at, MARGIN * rel * top).astype(np.float32)
        with pytest.raises(AssertionError, match=name):
            check(bad)
        loose_check(bad)
    with pytest.raises(AssertionError, match="dk"):                        # gross errors
        check([f32[0], f32[1] * np.float32(1.01), f32[2]])
    with pytest.raises(AssertionError, match="dk"):
        check([f32[0], f32[2], f32[1]])


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_check_grads_float32(causal, rng):
    q, k, v = _qkv(rng)
    do = _f32(rng, B, H, NQ, D)
    refs = reference.attention_backward(do, q, k, v, causal=causal)
    rel = T.backward_tol(q, k)
    _grad_controls(rng, refs, q, k, rel, lambda g: check_grads(g, refs, q, k),
                   lambda g: check_grads(g, refs, q, k, rel=LOOSE * rel))
    o, lse = attention(q, k, v, causal=causal, return_lse=True)
    for tier in ("fast", "lesson"):
        grads = attention_backward(do, q, k, v, o, lse, causal=causal, tier=tier)
        errs = np.array(check_grads(grads, refs, q, k)) / rel
        assert np.all(errs <= 1)
        _in_band(float(errs.max()), "float32 grads", tier)


def test_backward_errors_by_hand():
    """backward_errors' measure on numbers worked out by hand: |g − ref| / (max(max|ref|,
    floor) + extra/rel), the largest over the elements."""
    ref = np.array([[2.0, -4.0], [1.0, 0.5]])
    g = ref + np.array([[0.0, 0.0], [0.0, 0.004]])
    rel = 1e-3
    assert T.backward_errors([g] * 3, [ref] * 3, rel) == pytest.approx([1e-3] * 3)
    floors = (0.0, 8.0, 0.0)
    extra = (0.0, 0.0, np.array([[0.0, 0.0], [0.0, 4e-3]]))     # 4 more in the denominator
    assert T.backward_errors([g] * 3, [ref] * 3, rel, extra, floors) == \
        pytest.approx([1e-3, 5e-4, 5e-4])
    assert T.backward_errors([ref] * 3, [ref] * 3, rel) == [0.0, 0.0, 0.0]


# --- backward_tol of fp16 and rounded_o_tol through check_tc_grads ---------------------------
def test_check_tc_grads_float16(rng, monkeypatch):
    (q, k, v, do), (q64, k64, v64, do64) = conftest.tc_inputs(rng, B, H, NQ, NK, D, "f16")
    refs = reference.attention_backward(do64, q64, k64, v64)
    inter = reference.attention_backward_intermediates(do64, q64, k64, v64)
    rel = T.backward_tol(q64, k64, dtype="f16")
    extra = T.rounded_o_tol(inter["P"], inter["O"], q64, k64, do64, dtype="f16")
    floors = grad_floors(refs, q64, k64)

    def check(grads):
        check_tc_grads(grads, refs, "f16", q64, k64, v64=v64, do64=do64)

    check(refs)                                                             # (a)
    for i, name in enumerate(("dq", "dk", "dv")):                          # (b), (c)
        top = max(float(np.max(np.abs(refs[i]))), floors[i])
        bound = rel * top + np.broadcast_to(extra[i], refs[i].shape)       # per element
        at = _pick(rng, refs[i])
        bad = list(refs)
        bad[i] = _moved(refs[i], at, MARGIN * bound.flat[at])
        with pytest.raises(AssertionError, match=name):
            check(bad)
        with monkeypatch.context() as m:
            m.setattr(conftest, "backward_tol", _scaled(T.backward_tol, LOOSE))
            m.setattr(conftest, "rounded_o_tol", _scaled(T.rounded_o_tol, LOOSE))
            check(bad)
    with pytest.raises(AssertionError, match="dk"):
        check([refs[0], refs[2], refs[1]])
    o, lse = attention(q, k, v, return_lse=True)
    grads = [as_f64(g) for g in attention_backward(do, q, k, v, o, lse)]
    check(grads)
    errs = np.array(T.backward_errors(grads, refs, rel, extra, floors)) / rel
    assert np.all(errs <= 1)
    _in_band(float(errs.max()), "fp16 grads")


def test_rounded_o_tol_against_the_rounding_it_models(rng):
    """rounded_o_tol bounds what O's rounding to fp16 does to dQ and dK through D = rowsum(dO∘O):
    that effect, computed exactly (float64, O rounded to fp16 and nothing else), lies between
    0.1 and 1 of it — within 10× both ways; MARGIN× of it fails."""
    for causal, (nq, nk, d) in ((False, (NQ, NK, D)), (True, (9, 13, 1))):
        _, (q, k, v, do) = conftest.tc_inputs(rng, B, H, nq, nk, d, "f16")
        it = reference.attention_backward_intermediates(do, q, k, v, causal=causal)
        extra = T.rounded_o_tol(it["P"], it["O"], q, k, do, dtype="float16")
        o16 = it["O"].astype(np.float16).astype(np.float64)
        ds = it["P"] * (it["dP"] - np.sum(do * o16, axis=-1)[..., None])
        scale = d ** -0.5
        moved = (scale * ds @ k, scale * np.swapaxes(ds, -1, -2) @ q)
        ratios = []
        for got, want, bound in zip(moved, (it["dq"], it["dk"]), extra):
            live = bound > 0
            ratios.append(float(np.max(np.abs(got - want)[live] / bound[live])))
            at = _pick(rng, bound, live)
            assert _ratio(_moved(want, at, MARGIN * bound.flat[at]), want,
                          np.where(live, bound, np.inf)) == pytest.approx(MARGIN)
        assert max(ratios) <= 1
        _in_band(max(ratios), "rounded O", f"dQ, dK, causal={causal}")
    with pytest.raises(ValueError, match="16-bit"):
        T.rounded_o_tol(it["P"], it["O"], q, k, do, dtype="float32")


# --- the other bounds of flashlesson.tolerance -----------------------------------------------
def _elementwise_controls(rng, exact, bound):
    """(a)–(c) for an absolute bound per element: exact passes, MARGIN bounds off at one element
    fail, LOOSE× the bound lets that pass."""
    bound = np.broadcast_to(np.asarray(bound, np.float64), np.shape(exact))
    assert _ratio(exact, exact, bound) == 0
    at = _pick(rng, exact, bound > 0)
    bad = _moved(exact, at, MARGIN * bound.flat[at])
    assert _ratio(bad, exact, bound) == pytest.approx(MARGIN)
    assert _ratio(bad, exact, LOOSE * bound) <= 1


@pytest.mark.parametrize("method", ["online", "block"])
def test_softmax_tol(method, rng):
    x = _f32(rng, 6, 40) * 3
    want = reference.softmax_stable(x.astype(np.float64))
    rtol, atol = T.softmax_tol(x.shape[-1])
    bound = atol + rtol * want
    _elementwise_controls(rng, want, bound)
    _in_band(_ratio(softmax(x, method=method), want, bound), "softmax", method)
    r16, a16 = T.softmax_tol(x.shape[-1], np.float16)      # the fp16 output's one rounding
    assert r16 > LOOSE * rtol and a16 > atol


def test_sum_and_merge_l_tol(rng):
    """sum_tol (a sum in any order) and merge_l_tol (§19's merges of (m, l)), (a)–(c) on the
    exact values; their kernels: tests/test_reductions.py."""
    x = _f32(rng, 4, 32).astype(np.float64)
    _elementwise_controls(rng, x.sum(1), T.sum_tol(np.abs(x).sum(1), 32))
    m, l = rng.standard_normal((2, 5)) * 3, rng.uniform(1, 32, (2, 5))
    want = np.sum(np.exp(m - m.max(0)) * l, axis=0)
    _elementwise_controls(rng, want, T.merge_l_tol(m, l, depth=1))


def test_tf32x3_dot_tol(rng):
    """(a)–(c) on exact dot products; the mma kernels: tests/test_tf32x3_accuracy.py."""
    terms = rng.standard_normal((4, 3, 40)) * rng.standard_normal((4, 3, 40))
    _elementwise_controls(rng, terms.sum(-1), T.tf32x3_dot_tol(terms))


def test_merge_tol(rng):
    o_parts = _f32(rng, 3, 2, 5, 7)
    lse_parts = (_f32(rng, 3, 2, 5) * 4).astype(np.float32)
    o_ref, lse_ref = reference.merge_attention(o_parts, lse_parts)
    tol = T.merge_tol(o_parts, lse_parts)
    _elementwise_controls(rng, o_ref, tol.o)
    _elementwise_controls(rng, lse_ref, tol.lse)
    o, lse = merge_attention(o_parts, lse_parts)
    _in_band(_ratio(o, o_ref, tol.o), "merge O")
    _in_band(_ratio(lse, lse_ref, tol.lse), "merge LSE")


def test_linear_attention_tol(rng):
    q, k, v = _qkv(rng)
    want = reference.linear_attention(q, k, v, True)
    bound = T.linear_attention_tol(q, k, v, causal=True)
    _elementwise_controls(rng, want, bound)
    _in_band(_ratio(linear_attention(q, k, v, causal=True), want, bound), "linear attention")
