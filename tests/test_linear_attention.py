"""§45: linear attention — the kernels against the float64 oracle, and the oracle against itself.

``flashlesson.linear_attention`` (kernels_numba/linear_attention.py) vs
``reference.linear_attention`` on shapes that break the tiling: N = 1, odd N, N not a multiple
of the tile, d not a multiple of 32 (nor of 8), Nq ≠ Nk both ways when causal, several key
splits and row groups. Outputs are NaN-poisoned (conftest), so an element never written fails.
Bars: ``flashlesson.tolerance.linear_attention_tol`` (the error model's O(N·d²) bound: key
sums of length N, dot products of length d, float32), per element.
"""

import numpy as np
import pytest
from numba import cuda

import flashlesson
from conftest import by_device
from flashlesson import LinearConfig
from flashlesson.tolerance import linear_attention_tol
from flashlesson.reference import (attention, linear_attention, linear_attention_flops,
                       linear_attention_quadratic)

def inputs(rng, b, h, nq, nk, d):
    return tuple(rng.standard_normal((b, h, n, d)).astype(np.float32) for n in (nq, nk, nk))


def check(o, q, k, v, causal=False):
    """O against reference.linear_attention, each element within the error model's bound."""
    want = linear_attention(q, k, v, causal)
    assert o.dtype == np.float32 and o.shape == want.shape
    assert not np.isnan(o).any(), "an output element was not written (NaN poison)"
    bound = linear_attention_tol(q, k, v, causal=causal)
    worst = float(np.max(np.abs(o - want) / np.where(bound > 0, bound, 1.0), initial=0.0))
    assert np.all(np.abs(o - want) <= bound), \
        f"error {np.max(np.abs(o - want)):.2e}, {worst:.2f}× the model's bound"


SHAPES = by_device(
    [(1, 2, 13, 13, 16), (1, 1, 1, 1, 5), (2, 1, 9, 9, 40), (1, 1, 17, 17, 3)],
    [(2, 4, 1000, 1000, 64), (1, 2, 1, 1, 5), (1, 3, 517, 517, 40), (1, 1, 1500, 1500, 128),
     (1, 1, 4097, 4097, 3)])


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_oracle(rng, shape, causal):
    q, k, v = inputs(rng, *shape)
    check(flashlesson.linear_attention(q, k, v, causal=causal), q, k, v, causal)


@pytest.mark.parametrize("nq, nk", by_device([(7, 11), (11, 7), (1, 9), (6, 1)],
                                             [(300, 1000), (1000, 300), (1, 999), (77, 1)]))
def test_causal_bottom_right(rng, nq, nk):
    """Nq ≠ Nk: query i sees keys j ≤ i + Nk − Nq; queries that see none give exactly 0."""
    q, k, v = inputs(rng, 1, 2, nq, nk, by_device(24, 40))
    cfg = LinearConfig(G=2, BN=4) if flashlesson.SIMULATOR else None
    o = flashlesson.linear_attention(q, k, v, causal=True, config=cfg)
    check(o, q, k, v, causal=True)
    blind = max(nq - nk, 0)
    assert np.all(o[..., :blind, :] == 0.0)


@pytest.mark.parametrize("cfg", [LinearConfig(G=2, BN=4, splits=3), LinearConfig(G=4, BN=3,
                                                                                 splits=2)],
                         ids=["G2-BN4-s3", "G4-BN3-s2"])
def test_splits_and_groups(rng, cfg):
    """Several key splits (their KV' summed: split-K, no rescaling) and row groups (their
    partial dot products reduced in shared memory), with tiles that do not divide N."""
    n = by_device(21, 3001)
    q, k, v = inputs(rng, 2, 1, n - 4, n, by_device(20, 64))
    check(flashlesson.linear_attention(q, k, v, config=cfg), q, k, v)
    if flashlesson.SIMULATOR:
        check(flashlesson.linear_attention(q, k, v, causal=True, config=cfg), q, k, v, True)


def test_device_arrays_stay_on_device(rng):
    q, k, v = inputs(rng, 1, 2, 5, 5, 8)
    o = flashlesson.linear_attention(*(cuda.to_device(a) for a in (q, k, v)))
    assert not isinstance(o, np.ndarray) and o.shape == (1, 2, 5, 8)
    check(o.copy_to_host(), q, k, v)


def test_oracle_two_forms_agree_and_differ_from_softmax(rng):
    """The O(N·d²) form equals the O(N²·d) form (associativity), causal or not — and neither is
    softmax attention: a different model, far from it on the same data."""
    q, k, v = (rng.standard_normal((2, 3, n, 8)) for n in (9, 12, 12))
    for causal in (False, True):
        lin = linear_attention(q, k, v, causal)
        # float64 against float64, two association orders: rounding level of float64
        np.testing.assert_allclose(lin, linear_attention_quadratic(q, k, v, causal), rtol=1e-12,
                                   atol=1e-12)
        soft = attention(q, k, v, causal=causal)[0]
        assert np.max(np.abs(lin - soft)) / np.max(np.abs(soft)) > 0.05
    assert linear_attention_flops(1, 1, 9, 12, 8) == 2 * (9 + 12) * 8 * 9


def test_errors(rng):
    q, k, v = inputs(rng, 1, 1, 4, 4, 8)
    big = np.zeros((1, 1, 4, 129), np.float32)
    with pytest.raises(ValueError, match="129"):
        flashlesson.linear_attention(big, big, big)
    with pytest.raises(TypeError, match="float64"):
        flashlesson.linear_attention(q.astype(np.float64), k, v)
    with pytest.raises(ValueError, match="as many keys"):
        flashlesson.linear_attention(q, k, v[..., :3, :])
    with pytest.raises(ValueError, match="G = 3"):
        flashlesson.linear_attention(q, k, v, config=LinearConfig(G=3))
    with pytest.raises(TypeError, match="LinearConfig"):
        flashlesson.linear_attention(q, k, v, config=(1, 16))
