"""Varlen backward (§30 + §35, with §34 causal and §36 dropout): ``varlen_attention_backward``
over packed sequences against the float64 oracle ``reference.varlen.varlen_attention_backward``
(each sequence alone), and against running each sequence alone through ``attention_backward``.

o and lse come from ``flashlesson.varlen_attention(..., return_lse=True)`` — the forward whose
LSE the backward rebuilds P from. Sequence lengths include 0 and 1, are not multiples of the
tiles, and differ between queries and keys (causal is bottom-right per sequence, so with
n_q,b > n_k,b the first rows see no key). Gradients start NaN-poisoned (conftest): an element
no kernel writes fails. Each gradient within flashlesson.tolerance.backward_tol of the oracle
(relative to its largest |value|, conftest.check_grads), as tests/test_attention_backward.py.
Tiny shapes in the simulator, bigger ones on the GPU.
"""

import numpy as np
import pytest
from conftest import SIM, by_device, check_grads
from flashlesson.tolerance import backward_tol
from numba import cuda

from flashlesson import BwdConfig, attention_backward, varlen_attention, \
    varlen_attention_backward
from flashlesson.arrays import is_device_array
from flashlesson.reference.philox import dropout_keep_mask as ref_keep_mask
from flashlesson.reference.varlen import varlen_attention_backward as ref_varlen_backward


# (lengths of the queries, of the keys, H, d): empty sequences on either side and on both, a
# sequence of one query and one of one key, Nq,b ≠ Nk,b both ways, several tiles (simulator:
# Bc = dq_Br = 32, Br = dq_Bc = 16)
CASES = by_device(
    [([5, 1, 0, 0, 37, 3], [7, 0, 4, 0, 33, 1], 2, 5), ([1, 45, 16], [50, 1, 16], 1, 16)],
    [([300, 1, 0, 0, 129, 64, 1000], [310, 0, 5, 0, 129, 700, 1000], 3, 64),
     ([77, 257, 1, 33], [300, 130, 1, 17], 2, 80),
     ([129, 0, 200], [129, 65, 3], 2, 128),
     ([64, 1, 100], [65, 9, 100], 1, 256),
     ([33, 17], [17, 33], 2, 3)])


def _cu(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def _packed(rng, lens_q, lens_k, H, d):
    """Packed q, k, v, do (float32) and the offsets cu_q, cu_k (int32)."""
    cu_q, cu_k = _cu(lens_q), _cu(lens_k)
    q = rng.standard_normal((cu_q[-1], H, d)).astype(np.float32)
    k = rng.standard_normal((cu_k[-1], H, d)).astype(np.float32)
    v = rng.standard_normal((cu_k[-1], H, d)).astype(np.float32)
    do = rng.standard_normal((cu_q[-1], H, d)).astype(np.float32)
    return q, k, v, do, cu_q, cu_k


def _forward_backward(q, k, v, do, cu_q, cu_k, lens_q, lens_k, *, longest=False, **kw):
    """o, lse of the varlen forward, then the varlen backward with the same keywords; device
    arrays in, device arrays out, back to NumPy. ``longest=True``: max_seqlen = the packed
    total (the most allowed), past the longest sequence."""
    config = kw.pop("config", None)
    pick = sum if longest else max
    sizes = dict(max_seqlen_q=pick(lens_q), max_seqlen_k=pick(lens_k))
    o, lse = varlen_attention(q, k, v, cu_q, cu_k, return_lse=True, **sizes, **kw)
    grads = varlen_attention_backward(*(cuda.to_device(a) for a in (do, q, k, v, o, lse,
                                                                    cu_q, cu_k)),
                                      **sizes, config=config, **kw)
    assert all(is_device_array(g) for g in grads)       # device in → device out
    return o, lse, tuple(g.copy_to_host() for g in grads)


def _check(grads, refs, q, k):
    """Within flashlesson.tolerance.backward_tol of q, k (packed [total, H, d]: every packed
    query and key counted in Nq, Nk, an upper bound); a sequence of one key: dq = dk = 0."""
    check_grads(grads, refs, np.swapaxes(q, 0, 1), np.swapaxes(k, 0, 1))


def _check_empty(grads, cu_q, cu_k, lens_q, lens_k):
    """A sequence without keys: dq = 0 exactly; without queries: dk = dv = 0 exactly."""
    dq, dk, dv = grads
    for b, (nq, nk) in enumerate(zip(lens_q, lens_k)):
        if nk == 0:
            assert np.all(dq[cu_q[b]:cu_q[b + 1]] == 0)
        if nq == 0:
            assert np.all(dk[cu_k[b]:cu_k[b + 1]] == 0)
            assert np.all(dv[cu_k[b]:cu_k[b + 1]] == 0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{len(c[0])}seq-H{c[2]}-d{c[3]}")
def test_matches_oracle(causal, case, rng):
    lens_q, lens_k, H, d = case
    q, k, v, do, cu_q, cu_k = _packed(rng, lens_q, lens_k, H, d)
    _, _, grads = _forward_backward(q, k, v, do, cu_q, cu_k, lens_q, lens_k, causal=causal)
    _check(grads, ref_varlen_backward(do, q, k, v, cu_q, cu_k, causal=causal), q, k)
    _check_empty(grads, cu_q, cu_k, lens_q, lens_k)


@pytest.mark.parametrize("causal", [False, True])
def test_equals_each_sequence_alone(causal, rng):
    """Sequence b of the packed call = the padded API on that sequence alone ([1, H, n_b, d],
    the same o and lse): the same tiles in the same order, so bitwise in the simulator. The GPU
    compiles the two kernels separately (FMA contraction may differ): each is within
    backward_tol of the oracle, so the two within twice that of each other."""
    lens_q, lens_k, H, d = by_device(([20, 1, 9], [13, 5, 40], 2, 8),
                                     ([300, 1, 129, 1000], [310, 5, 129, 700], 3, 64))
    q, k, v, do, cu_q, cu_k = _packed(rng, lens_q, lens_k, H, d)
    o, lse, grads = _forward_backward(q, k, v, do, cu_q, cu_k, lens_q, lens_k, causal=causal)
    for b in range(len(lens_q)):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        alone = attention_backward(*(x[rows].transpose(1, 0, 2)[None] for x in (do, q)),
                                   *(x[keys].transpose(1, 0, 2)[None] for x in (k, v)),
                                   o[rows].transpose(1, 0, 2)[None], lse[rows].T[None],
                                   causal=causal)
        rel = 2 * backward_tol(q[rows].transpose(1, 0, 2), k[keys].transpose(1, 0, 2))
        for g, part, g_alone in zip(grads, (rows, keys, keys), alone):
            mine = g[part]
            want = g_alone[0].transpose(1, 0, 2)
            if SIM:      # same arithmetic in the same order, deterministic: bitwise
                np.testing.assert_array_equal(mine.view(np.uint32), want.view(np.uint32))
            else:
                np.testing.assert_allclose(mine, want, rtol=0,
                                           atol=rel * np.max(np.abs(want), initial=0.0))


@pytest.mark.parametrize("causal", [False, True])
def test_dropout(causal, rng):
    """§36: the kernels regenerate the forward's keep-mask from (seed, b·H + h, i, j), i and j
    inside the sequence; the oracle is given the padded-layout mask of the longest lengths."""
    lens_q, lens_k, H, d = by_device(([4, 0, 19], [6, 3, 13], 2, 12),
                                     ([100, 0, 257, 1], [130, 7, 257, 1], 3, 64))
    seed, p = 2**40 + 99, 0.3
    q, k, v, do, cu_q, cu_k = _packed(rng, lens_q, lens_k, H, d)
    _, _, grads = _forward_backward(q, k, v, do, cu_q, cu_k, lens_q, lens_k, causal=causal,
                                    dropout_p=p, seed=seed)
    mask = ref_keep_mask(seed, len(lens_q), H, max(lens_q), max(lens_k), p)
    _check(grads, ref_varlen_backward(do, q, k, v, cu_q, cu_k, causal=causal,
                                      dropout_masks=mask, dropout_p=p), q, k)
    _check_empty(grads, cu_q, cu_k, lens_q, lens_k)


@pytest.mark.parametrize("config", by_device(
    [BwdConfig(Bc=64, Br=16, TR=16, TC=4, dq_Br=16, dq_Bc=64, dq_TR=2, dq_TC=16)],
    [BwdConfig(Bc=64, Br=32, TR=16, TC=8, dq_Br=128, dq_Bc=32, dq_TR=32, dq_TC=8),
     BwdConfig(Bc=32, Br=64, TR=8, TC=16, dq_Br=32, dq_Bc=64, dq_TR=8, dq_TC=16)]), ids=str)
def test_other_config_and_longer_max_seqlen(config, rng):
    """Other tiles and several warps; max_seqlen = the packed total, past the longest sequence
    by more than a tile (more blocks, the last ones past every sequence: they must leave
    without writing)."""
    lens_q, lens_k, H, d = by_device(([18, 3, 16], [70, 2, 64], 1, 24),
                                     ([500, 3, 300], [700, 2, 300], 2, 96))
    q, k, v, do, cu_q, cu_k = _packed(rng, lens_q, lens_k, H, d)
    _, _, grads = _forward_backward(q, k, v, do, cu_q, cu_k, lens_q, lens_k, causal=True,
                                    longest=True, config=config)
    _check(grads, ref_varlen_backward(do, q, k, v, cu_q, cu_k, causal=True), q, k)


def test_host_arrays_and_empty_sides(rng):
    """NumPy in → NumPy out; no query at all (total_q = 0: dk = dv = 0) and no key at all
    (total_k = 0: dq = 0)."""
    q, k, v, do, cu_q, cu_k = _packed(rng, [3, 0, 2], [0, 4, 5], 2, 4)
    o, lse = varlen_attention(q, k, v, cu_q, cu_k, max_seqlen_q=3, max_seqlen_k=5,
                              return_lse=True)
    grads = varlen_attention_backward(do, q, k, v, o, lse, cu_q, cu_k, max_seqlen_q=3,
                                      max_seqlen_k=5)
    for g, like in zip(grads, (q, k, v)):
        assert isinstance(g, np.ndarray) and g.shape == like.shape and g.dtype == np.float32
    _check(grads, ref_varlen_backward(do, q, k, v, cu_q, cu_k), q, k)

    none = np.zeros((0, 2, 4), np.float32)
    zeros = np.zeros(4, np.int32)                      # three empty sequences
    dq, dk, dv = varlen_attention_backward(none, none, k, v, none, np.zeros((0, 2), np.float32),
                                           zeros, cu_k, max_seqlen_q=1, max_seqlen_k=5)
    assert dq.shape == (0, 2, 4) and np.all(dk == 0) and np.all(dv == 0)
    lse_none = np.full((q.shape[0], 2), -np.inf, np.float32)
    dq, dk, dv = varlen_attention_backward(do, q, none, none, np.zeros_like(q), lse_none,
                                           cu_q, zeros, max_seqlen_q=3, max_seqlen_k=1)
    assert np.all(dq == 0) and dk.shape == (0, 2, 4) and dv.shape == (0, 2, 4)


# --- bad input ------------------------------------------------------------------------------
def test_bad_offsets_and_inputs():
    q = np.zeros((6, 2, 8), np.float32)
    lse = np.zeros((6, 2), np.float32)
    good = np.array([0, 2, 6], np.int32)
    kw = dict(max_seqlen_q=4, max_seqlen_k=4)

    def call(cu_q=good, cu_k=good, **over):
        args = dict(do=q, q=q, k=q, v=q, o=q, lse=lse)
        args.update({name: over.pop(name) for name in list(over) if name in args})
        return varlen_attention_backward(*args.values(), cu_q, cu_k, **{**kw, **over})

    with pytest.raises(ValueError, match="cu_seqlens_q: offsets must not decrease"):
        call(np.array([0, 4, 2, 6], np.int32), np.array([0, 2, 4, 6], np.int32))
    with pytest.raises(ValueError, match="cu_seqlens_k: expected B . 1 = 3 offsets"):
        call(cu_k=np.array([0, 6], np.int32))
    with pytest.raises(ValueError, match="cu_seqlens_q: the last offset must be"):
        call(np.array([0, 2, 7], np.int32))
    with pytest.raises(ValueError, match="cu_seqlens_k: must start at 0"):
        call(cu_k=np.array([1, 2, 6], np.int32))
    with pytest.raises(TypeError, match="cu_seqlens_q: dtype int64"):
        call(good.astype(np.int64))
    with pytest.raises(ValueError, match="cu_seqlens_q: expected at least two offsets"):
        call(np.array([0], np.int32))
    with pytest.raises(ValueError, match="max_seqlen_q: 3 is shorter"):
        call(max_seqlen_q=3)
    with pytest.raises(TypeError, match="max_seqlen_k: expected an int"):
        call(max_seqlen_k=4.0)
    with pytest.raises(ValueError, match="k, v: expected"):
        call(k=q[:, :1])
    with pytest.raises(ValueError, match="do: expected q's shape"):
        call(do=q[:5])
    with pytest.raises(ValueError, match="o: expected a 3-D array"):
        call(o=q[None])
    with pytest.raises(ValueError, match=r"lse: expected shape \(6, 2\)"):
        call(lse=lse.T.copy())
    with pytest.raises(TypeError, match="lse: must be a NumPy array, like q"):
        call(lse=cuda.to_device(lse))
    with pytest.raises(ValueError, match="dropout_p: expected a drop probability"):
        call(dropout_p=1.0)
    with pytest.raises(ValueError, match="seed: expected an integer in"):
        call(seed=-1)
    with pytest.raises(ValueError, match="scale: expected a finite"):
        call(scale=float("inf"))
    with pytest.raises(TypeError, match="config: expected a BwdConfig"):
        call(config=(32, 16))
