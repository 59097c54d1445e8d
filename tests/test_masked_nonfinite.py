"""A masked key contributes exactly nothing, even when its K and V rows hold NaN or ±inf.

The rule (docs/api.md, "Masked keys contribute exactly nothing"; ``reference.attention``): a key hidden from query i — by
``key_padding_mask``, by ``causal``, by belonging to another sequence in varlen, or by lying
past Nk at a tile's edge — adds no term to row i's max, sum, O, LSE or gradients. Not
0·NaN = NaN, not −inf + NaN. A *visible* non-finite key makes its rows non-finite, as IEEE
arithmetic does. So here:

* NaN, +inf and −inf are planted in the K and V rows of padded keys, of keys hidden by causal
  from the first rows, and of the neighbouring sequences' keys in varlen (lengths that are not
  tile multiples, so a tile reaches past a sequence's last key into the next one's);
* every output is compared with the float64 oracle (which follows the rule): where the oracle
  is finite the result is finite and within the error model's bound (flashlesson.tolerance's
  attention_tol / backward_tol for the method's arithmetic, on the finite part of the inputs:
  the poisoned rows, which no finite result sees, count as zeros in the magnitudes); where it
  is not, the result is not either; O = 0 and LSE = −inf exactly for a row that sees no key;
  dk = dv = 0 exactly for a padded key.

On tensor cores (``flash_tc``, fp16/bf16 and 3xTF32) padded keys are exact too: their loaders
write a padded key's K and V rows as zeros on chip, both loader forms (register-staged and
cp.async) — the staged and the async configurations are both run here. The documented
exception (docs/api.md; ``kernels_numba/attention_tc.py``'s menu): P·V and dS·K are mma
instructions where 0·NaN is NaN, and a causal diagonal tile mixes keys a row sees with keys it
does not. ``test_tensor_cores_causal_limit`` asserts exactly what is documented.
"""

import numpy as np
import pytest
from conftest import by_device, packed_tol

from flashlesson import BFloat16, TcBwdConfig, TcConfig, attention, attention_backward, \
    varlen_attention, varlen_attention_backward
from flashlesson import reference
from flashlesson.tolerance import attention_tol, backward_tol
from flashlesson.reference.attention_backward import attention_backward as ref_backward
from flashlesson.reference.varlen import varlen_attention as ref_varlen, \
    varlen_attention_backward as ref_varlen_backward

# (method, input format): every forward path of the public API that takes a padding mask;
# "f16a": fp16 with the cp.async loaders (ASYNC), "f16": the register-staged ones
FORWARD = [("naive", "f32"), ("flash", "f32"), ("flash_fa1", "f32"), ("flash_db", "f32"),
           ("flash_tc", "f16"), ("flash_tc", "f16a"), ("flash_tc", "bf16"), ("flash_tc", "tf32")]
BACKWARD = [("naive", "f32"), ("flash", "f32"), ("flash_tc", "f16"), ("flash_tc", "f16a"),
            ("flash_tc", "tf32")]
# flash_tc's configurations: both loader forms, whatever the device's default
TC_FWD = {"f16": TcConfig(Bc=by_device(16, 64), WARPS=by_device(2, 4)),
          "f16a": TcConfig(Bc=by_device(16, 64), WARPS=by_device(2, 8), MT=by_device(1, 2),
                           ASYNC=True)}
TC_BWD = {"f16": TcBwdConfig(*by_device((16, 1, 16, 2), (64, 4, 64, 4))),
          "f16a": TcBwdConfig(*by_device((16, 1, 16, 2), (64, 8, 64, 8)), True, True)}
# the arithmetic of each input format, for flashlesson.tolerance: the poison must not move a
# finite result at all, so the error model's usual bounds apply
DTYPE = {"f32": "float32", "tf32": "tf32", "f16": "float16", "f16a": "float16",
         "bf16": "bfloat16"}
POISON = (np.nan, np.inf, -np.inf)

# B, H, Nq, Nk, d: Nk not a multiple of any tile (16, 32, 64), d a multiple of 16 (flash_tc)
SHAPE = by_device((2, 1, 20, 21, 16), (2, 3, 200, 333, 64))
# causal: the poisoned keys lie inside the first diagonal tiles, hidden from the rows before
HIDDEN = by_device((5, 9, 11), (5, 70, 150))


def _cast(arrays, fmt):
    """(inputs for the method, the same values in float64 for the oracle)."""
    if fmt in ("f16", "f16a"):
        x = [a.astype(np.float16) for a in arrays]
        return x, [a.astype(np.float64) for a in x]
    if fmt == "bf16":
        x = [BFloat16.from_float32(a) for a in arrays]
        return x, [a.to_float32().astype(np.float64) for a in x]
    return arrays, [a.astype(np.float64) for a in arrays]


def _f64(x):
    return (x.to_float32() if isinstance(x, BFloat16) else np.asarray(x)).astype(np.float64)


def _problem(rng, case):
    """q, k, v, do (float32), key_padding_mask (or None), causal: poison in hidden keys only."""
    B, H, nq, nk, d = SHAPE
    q, k, v, do = (rng.standard_normal((B, H, n, d)).astype(np.float32)
                   for n in (nq, nk, nk, nq))
    if case == "pad":                      # causal and padding: poison every padded key
        kpm = rng.random((B, nk)) > 0.3
        kpm[0, [0, 7, nk - 1]] = False     # the first key, one inside, the last (a tile edge)
        kpm[1] = False                     # a batch row that sees no key: O = 0, LSE = −inf
        keys = [np.nonzero(~kpm[b])[0] for b in range(B)]
        for b in range(B):
            for n, j in enumerate(keys[b]):
                k[b, :, j] = POISON[n % 3]
                v[b, :, j] = POISON[(n + 1) % 3]
        return q, k, v, do, kpm, True
    for n, j in enumerate(HIDDEN):         # causal alone (Nq = Nk): key j hidden from rows < j
        k[:, :, j] = POISON[n]
        v[:, :, HIDDEN[-1 - n]] = POISON[n]
    q, do = (rng.standard_normal((B, H, nk - 1, d)).astype(np.float32) for _ in range(2))
    return q, k[:, :, :nk - 1], v[:, :, :nk - 1], do, None, True     # Nq = Nk = nk − 1


def _tensor_cores(method, case):
    """flash_tc with causal-hidden poison: the documented limit, checked by
    test_tensor_cores_causal_limit instead."""
    if method == "flash_tc" and case == "causal":
        pytest.skip("flash_tc: a causal diagonal mma block mixes seen and unseen keys "
                    "(documented limit: test_tensor_cores_causal_limit)")


def _exempt_rows(method, case, nq):
    """Rows left unchecked: none (kept as a hook for a documented per-row limit)."""
    return np.zeros(nq, bool)


def _finite(*arrays):
    """The inputs with every non-finite entry set to 0: the finite part whose magnitudes the
    error model takes (a finite result sees no poisoned key)."""
    return [np.where(np.isfinite(x), x, 0.0) for x in arrays]


def _fwd_tol(q64, k64, v64, fmt, causal, kpm):
    """flashlesson.tolerance.attention_tol on the finite part of the inputs, elementwise with
    the oracle's P there (a row with a finite oracle result sees the same keys in both)."""
    q0, k0, v0 = _finite(q64, k64, v64)
    o0, _, p0 = reference.attention(q0, k0, v0, causal=causal, key_padding_mask=kpm,
                                    return_p=True)
    return attention_tol(q0, k0, v0, dtype=DTYPE[fmt], p=p0, o=o0)


def _bwd_bound(ref, q64, k64, fmt):
    """backward_tol (relative to a gradient's largest |value|, as conftest.check_grads) on the
    finite part of q, k, as an absolute bound for this gradient."""
    top = np.max(np.abs(ref[np.isfinite(ref)]), initial=0.0)
    return backward_tol(*_finite(q64, k64), dtype=DTYPE[fmt]) * top


def _config(method, fmt, table):
    return table.get(fmt) if method == "flash_tc" else None


def _match(got, ref, bound, name, exempt=None):
    """Finite where the oracle is finite and within ``bound`` (absolute, broadcastable to
    ref) of it there; non-finite where the oracle is not. ``exempt``: bool over the rows
    (axis −2 of O, dq)."""
    got = _f64(got)
    fin = np.isfinite(ref)
    check = np.ones(ref.shape, bool)
    if exempt is not None:
        check &= ~exempt[:, None] if ref.ndim == 4 else ~exempt
    bad = check & (np.isfinite(got) != fin)
    assert not bad.any(), f"{name}: finite/non-finite differs from the oracle at " \
                          f"{np.argwhere(bad)[:5].tolist()}"
    sel = check & fin
    bound = np.broadcast_to(bound, ref.shape)[sel]
    err = np.abs(got[sel] - ref[sel])
    worst = np.max(err / np.maximum(bound, 1e-300), initial=0.0)
    assert np.all(err <= bound), f"{name}: error {np.max(err):.2e}, {worst:.2f}× the bound"


@pytest.mark.parametrize("case", ["pad", "causal"])
@pytest.mark.parametrize("method,fmt", FORWARD, ids=lambda x: x)
def test_forward(rng, method, fmt, case):
    _tensor_cores(method, case)
    q, k, v, _, kpm, causal = _problem(rng, case)
    (q, k, v), (q64, k64, v64) = _cast([q, k, v], fmt)
    o, lse = attention(q, k, v, causal=causal, key_padding_mask=kpm, return_lse=True,
                       method=method, config=_config(method, fmt, TC_FWD))
    o_ref, lse_ref = reference.attention(q64, k64, v64, causal=causal, key_padding_mask=kpm)
    exempt = _exempt_rows(method, case, o_ref.shape[2])
    tol = _fwd_tol(q64, k64, v64, fmt, causal, kpm)
    _match(o, o_ref, tol.o, "O", exempt)
    _match(lse, lse_ref, tol.lse, "LSE", exempt)
    assert np.isfinite(o_ref[..., :min(HIDDEN), :]).all()      # (the test means something)
    if case == "pad":                      # the row that sees no key: exactly 0 and −inf
        assert np.all(_f64(o)[1] == 0) and np.all(np.isneginf(lse[1]))


@pytest.mark.parametrize("case", ["pad", "causal"])
@pytest.mark.parametrize("method,fmt", BACKWARD, ids=lambda x: x)
def test_backward(rng, method, fmt, case):
    _tensor_cores(method, case)
    q, k, v, do, kpm, causal = _problem(rng, case)
    (q, k, v, do), (q64, k64, v64, do64) = _cast([q, k, v, do], fmt)
    o, lse = attention(q, k, v, causal=causal, key_padding_mask=kpm, return_lse=True,
                       method=method, config=_config(method, fmt, TC_FWD))
    grads = attention_backward(do, q, k, v, o, lse, causal=causal, key_padding_mask=kpm,
                               method=method, config=_config(method, fmt, TC_BWD))
    refs = ref_backward(do64, q64, k64, v64, causal=causal, key_padding_mask=kpm)
    exempt = _exempt_rows(method, case, q64.shape[2])
    bound = [_bwd_bound(r, q64, k64, fmt) for r in refs]
    _match(grads[0], refs[0], bound[0], "dq", exempt)
    if exempt.any():
        return                             # (a NaN row of dS reaches every key it sees)
    _match(grads[1], refs[1], bound[1], "dk")
    _match(grads[2], refs[2], bound[2], "dv")
    if case == "pad":                      # a padded key gets exactly nothing
        hidden = ~kpm[:, None, :, None]
        for g in grads[1:]:
            assert np.all(np.where(hidden, _f64(g), 0.0) == 0.0)
        assert np.all(_f64(grads[0])[1] == 0)           # rows that see no key: dq = 0


@pytest.mark.parametrize("case", ["pad", "causal"])
def test_backward_lesson_tier(rng, case):
    """The lesson tier's backward (kernels_numba/lesson/backward.py) under the same rule."""
    q, k, v, do, kpm, causal = _problem(rng, case)
    (q, k, v, do), (q64, k64, v64, do64) = _cast([q, k, v, do], "f32")
    o, lse = attention(q, k, v, causal=causal, key_padding_mask=kpm, return_lse=True)
    grads = attention_backward(do, q, k, v, o, lse, causal=causal, key_padding_mask=kpm,
                               tier="lesson")
    refs = ref_backward(do64, q64, k64, v64, causal=causal, key_padding_mask=kpm)
    for g, r, name in zip(grads, refs, ("dq", "dk", "dv")):
        _match(g, r, _bwd_bound(r, q64, k64, "f32"), name)
    if case == "pad":                      # a padded key gets exactly nothing
        hidden = ~kpm[:, None, :, None]
        for g in grads[1:]:
            assert np.all(np.where(hidden, _f64(g), 0.0) == 0.0)


# varlen: three sequences, lengths not tile multiples; the outer two hold poison in their last
# key (seen only by their last rows when causal), the middle one none: it must be exact
LENS_Q, LENS_K = by_device(([5, 7, 4], [6, 9, 3]), ([70, 200, 41], [90, 257, 33]))


def _varlen(rng):
    cu_q = np.concatenate([[0], np.cumsum(LENS_Q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(LENS_K)]).astype(np.int32)
    H, d = 2, SHAPE[4]
    q, do = (rng.standard_normal((cu_q[-1], H, d)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((cu_k[-1], H, d)).astype(np.float32) for _ in range(2))
    k[cu_k[1] - 1], v[cu_k[1] - 1] = np.nan, np.inf     # sequence 0's last key
    k[cu_k[3] - 1], v[cu_k[3] - 1] = -np.inf, np.nan    # sequence 2's last key
    sizes = dict(max_seqlen_q=max(LENS_Q), max_seqlen_k=max(LENS_K))
    return q, k, v, do, cu_q, cu_k, sizes


@pytest.mark.parametrize("causal", [False, True])
def test_varlen(rng, causal):
    q, k, v, do, cu_q, cu_k, sizes = _varlen(rng)
    o, lse = varlen_attention(q, k, v, cu_q, cu_k, causal=causal, return_lse=True, **sizes)
    o_ref, lse_ref = ref_varlen(q, k, v, cu_q, cu_k, causal=causal, return_lse=True)
    tol = packed_tol(*_finite(q, k, v))    # (every packed key counted: an upper bound)
    _match(o, o_ref, tol.o, "O")
    _match(lse, lse_ref, tol.lse, "LSE")
    assert np.isfinite(o_ref[cu_q[1]:cu_q[2]]).all()   # the middle sequence: exact
    grads = varlen_attention_backward(do, q, k, v, o, lse, cu_q, cu_k, causal=causal, **sizes)
    refs = ref_varlen_backward(do, q, k, v, cu_q, cu_k, causal=causal)
    qh, kh = (np.swapaxes(x, 0, 1) for x in (q, k))    # [H, total, d]: every packed row
    for name, g, r in zip(("dq", "dk", "dv"), grads, refs):
        _match(g, r, _bwd_bound(r, qh, kh, "f32"), name)


# The tensor cores' documented limit, exactly: N queries = N keys, causal, one poisoned key J
# (NaN in K, +inf in V) that rows < J do not see. K reaches only S's column J, which the
# select masks: LSE is exact in every row. V (forward) and K (the dQ kernel's dS·K) enter an
# mma over the whole K/V tile: rows < J whose Q tile visits J's K/V tile may be non-finite
# (0·NaN inside the mma); every other row is exact.
N_LIM, J_LIM = by_device((48, 36), (600, 400))


def _limit_rows(rows, tile, n, j):
    """Rows i < j whose block of ``rows`` queries visits the K/V tile of ``tile`` keys holding
    key j (attention.kv_tiles, causal, Nq = Nk = n): the rows the limit may reach."""
    i = np.arange(n)
    last = np.minimum((i // rows + 1) * rows - 1, n - 1)   # the block's last row sees up to it
    return (i < j) & ((last // tile + 1) * tile > j)


@pytest.mark.parametrize("fmt", ["f16", "f16a", "tf32"])
def test_tensor_cores_causal_limit(rng, fmt):
    q, k, v, do = (rng.standard_normal((1, 1, N_LIM, SHAPE[4])).astype(np.float32)
                   for _ in range(4))
    k[..., J_LIM, :], v[..., J_LIM, :] = np.nan, np.inf
    fwd = TC_FWD.get(fmt, TcConfig(Bc=by_device(16, 64), WARPS=by_device(1, 4)))
    bwd = TC_BWD.get(fmt, TcBwdConfig(*by_device((16, 1, 16, 1), (32, 4, 32, 4))))
    (q, k, v, do), (q64, k64, v64, do64) = _cast([q, k, v, do], fmt)
    o, lse = attention(q, k, v, causal=True, return_lse=True, method="flash_tc", config=fwd)
    o_ref, lse_ref = reference.attention(q64, k64, v64, causal=True)
    limit = _limit_rows(fwd.Br, fwd.Bc, N_LIM, J_LIM)
    assert limit.any() and (~limit[:J_LIM]).any()          # (both kinds of rows exist)
    tol = _fwd_tol(q64, k64, v64, fmt, True, None)
    _match(lse, lse_ref, tol.lse, "LSE")                    # every row: K is masked by select
    _match(o, o_ref, tol.o, "O", limit)
    # the backward from the oracle's O and LSE (finite in rows < J: D is), so that what is
    # checked is the backward kernels' own limit: dq's rows as O's, with the dQ kernel's tiles
    o_in = _cast([o_ref.astype(np.float32)], fmt)[0][0]
    dq = attention_backward(do, q, k, v, o_in, lse_ref.astype(np.float32), causal=True,
                            method="flash_tc", config=bwd)[0]
    dq_ref = ref_backward(do64, q64, k64, v64, causal=True)[0]
    limit = _limit_rows(16 * bwd.Q_WARPS, bwd.Bk, N_LIM, J_LIM)
    assert limit.any() and (~limit[:J_LIM]).any()
    _match(dq, dq_ref, _bwd_bound(dq_ref, q64, k64, fmt), "dq", limit)
    assert np.isfinite(_f64(dq)[..., :J_LIM, :][..., ~limit[:J_LIM], :]).all()
