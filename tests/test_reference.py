"""Tests of the softmax oracles in ``reference/`` (lesson 22, §1–§3, §17–§20, §33).

NumPy only, no GPU, no numba: these check the oracles themselves, so the kernels' tests can
trust them. Random inputs are fresh each run; the seed is printed (shown by pytest when a
test fails) and ``FLASHLESSON_SEED=<seed>`` replays it.
"""

import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from flashlesson.reference import (
    ORACLES,
    merge_ml,
    normalize_with_ml,
    online_softmax_state,
    softmax_naive,
    softmax_of_first_tile_only,
    softmax_online,
    softmax_stable,
    softmax_three_pass,
    softmax_tiled_ml,
)

REPO = Path(__file__).resolve().parents[1]
E = math.e
EPS = np.finfo(np.float64).eps

# Shapes that break tiling: N = 1, N = 33 (not a multiple of 32), rank 1, 2 and 3, N < tile.
SHAPES = [(1,), (33,), (2, 1), (5, 33), (3, 4, 33), (2, 3, 1), (4, 100), (3, 1000)]
TILES = [1, 2, 7, 32, 64]


def _tiled_softmax(tile):
    """softmax via the tiled (m, l) merge: the last history entry, then normalize."""
    def f(x):
        return normalize_with_ml(x, *softmax_tiled_ml(x, tile)[-1])
    f.__name__ = f"tiled_ml(tile={tile})"
    return f


# Every exact method: the registry plus the tiled merge at a few tile sizes.
EXACT = dict(ORACLES)
EXACT.update({f"tiled_{t}": _tiled_softmax(t) for t in (1, 7, 32)})
EXACT_IDS = list(EXACT)


def _random_rows(rng, shape, scale):
    """Normal scores times ``scale``, with outliers injected (the llm.c trick): one entry per
    row pushed +scale·10 higher, so the max is not where a naive guess would put it."""
    x = rng.standard_normal(shape) * scale
    rows = x.reshape(-1, shape[-1])
    where = rng.integers(0, shape[-1], size=rows.shape[0])
    rows[np.arange(rows.shape[0]), where] += 10 * scale
    return x


def _state_by_definition(x):
    """(m, l) straight from §18: m = max x, l = Σ e^{x - m}; for finite rows only."""
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1)
    return m, np.exp(x - m[..., None]).sum(axis=-1)


@pytest.fixture(autouse=True)
def _warnings_are_errors():
    """No oracle may print a RuntimeWarning: overflow and ∞−∞ are handled on purpose."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


# ---------------------------------------------------------------------------------------------
# The package itself
# ---------------------------------------------------------------------------------------------

def test_reference_imports_numpy_only():
    """The oracles' folder, loaded alone as a package of its own (it is installed as
    flashlesson.reference, whose parent imports Numba), imports nothing but NumPy and the
    standard library."""
    from flashlesson import reference
    folder = Path(reference.__file__).resolve().parent
    code = (
        "import importlib.util, sys; "
        f"spec = importlib.util.spec_from_file_location('oracles', {str(folder / '__init__.py')!r}, "
        f"submodule_search_locations=[{str(folder)!r}]); "
        "m = importlib.util.module_from_spec(spec); sys.modules['oracles'] = m; "
        "spec.loader.exec_module(m); assert hasattr(m, 'attention'); "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('numba', 'numba_cuda', 'cupy', 'torch', 'scipy', 'flashlesson')); "
        "assert not bad, bad"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_registry_names_the_exact_methods():
    assert ORACLES == {
        "stable": softmax_stable, "three_pass": softmax_three_pass, "online": softmax_online,
    }


# ---------------------------------------------------------------------------------------------
# §2, §3, §20: the exact methods agree with each other on random data
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("scale", [1.0, 30.0])
@pytest.mark.parametrize("name", EXACT_IDS)
def test_exact_methods_agree_with_stable(rng, name, shape, scale):
    x = _random_rows(rng, shape, scale)
    want = softmax_stable(x)
    got = EXACT[name](x)
    assert got.shape == x.shape and got.dtype == np.float64
    # Same m, same numerators e^{x-m}; only the summation order of l differs.
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", EXACT_IDS)
def test_rows_sum_to_one(rng, name, shape):
    x = _random_rows(rng, shape, 10.0)
    p = EXACT[name](x)
    assert np.all(p >= 0)
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=0, atol=4 * shape[-1] * EPS)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_online_state_is_max_and_shifted_sum(rng, shape):
    """§20's stream ends at §18's definition: m = max x, l = Σ e^{x-m}."""
    x = _random_rows(rng, shape, 30.0)
    m, l = online_softmax_state(x)
    m_def, l_def = _state_by_definition(x)
    assert np.shape(m) == x.shape[:-1] and np.shape(l) == x.shape[:-1]
    np.testing.assert_array_equal(m, m_def)                 # max is exact
    np.testing.assert_allclose(l, l_def, rtol=1e-13)
    assert np.all(l >= 1.0)                                 # the max's own term is e^0 = 1


def test_largest_numerator_is_exactly_one(rng):
    """§2: 0 < e^{x_i - m} ≤ 1, and = 1 at the max, so p_max · l = 1."""
    x = _random_rows(rng, (6, 50), 20.0)
    m, l = online_softmax_state(x)
    p = softmax_stable(x)
    np.testing.assert_allclose(p.max(axis=-1) * l, 1.0, rtol=4 * EPS)


def test_one_element_rows_are_one():
    for f in EXACT.values():
        np.testing.assert_array_equal(f([[-5.0], [0.0], [1e300]]), [[1.0], [1.0], [1.0]])


# ---------------------------------------------------------------------------------------------
# §1 vs §2: outliers 1000, 999, 998
# ---------------------------------------------------------------------------------------------

OUTLIERS = [1000.0, 999.0, 998.0]
# The hand formula: e^{x - 1000} = e^0, e^-1, e^-2, normalized by their sum.
OUTLIERS_P = np.array([1.0, E**-1, E**-2]) / (1.0 + E**-1 + E**-2)


@pytest.mark.parametrize("name", EXACT_IDS)
def test_outliers_give_the_exact_answer(name):
    p = EXACT[name](OUTLIERS)
    assert np.all(np.isfinite(p))
    np.testing.assert_allclose(p, OUTLIERS_P, rtol=1e-15, atol=0)   # exact up to a few ulp
    np.testing.assert_allclose(p, [0.6652409557748219, 0.24472847105479764,
                                   0.09003057317038046], rtol=1e-15)


@pytest.mark.parametrize("name", EXACT_IDS)
def test_outliers_anywhere_in_a_batch(rng, name):
    """The outlier row at a random position, inside a rank-3 batch of ordinary rows."""
    x = rng.standard_normal((2, 3, 3))
    i, j = rng.integers(0, 2), rng.integers(0, 3)
    perm = rng.permutation(3)
    x[i, j] = np.array(OUTLIERS)[perm]
    p = EXACT[name](x)
    np.testing.assert_allclose(p[i, j], OUTLIERS_P[perm], rtol=1e-15)
    np.testing.assert_allclose(p, softmax_stable(x), rtol=1e-13)


def test_naive_float32_overflows_on_outliers():
    """§1: e^1000 = inf in FP32, so p = inf / inf = NaN for every entry."""
    p = softmax_naive(OUTLIERS, dtype=np.float32)
    assert p.dtype == np.float32
    assert np.all(np.isnan(p))


def test_naive_float64_overflows_too_on_outliers():
    """float64 does not save the naive form here: e^1000 > 1.8e308 (limit x ≈ 709.78)."""
    p = softmax_naive(OUTLIERS)
    assert p.dtype == np.float64 and np.all(np.isnan(p))


def test_naive_float32_overflow_threshold():
    """§1's "x ≈ 100 is already too big for FP32": e^x overflows FP32 past ln(FLT_MAX)."""
    threshold = math.log(np.finfo(np.float32).max)
    assert 88.7 < threshold < 88.8
    # x = 88 still fits: the naive float32 answer is right to float32 precision.
    np.testing.assert_allclose(softmax_naive([88.0, 0.0], dtype=np.float32),
                               softmax_stable([88.0, 0.0]), rtol=1e-6)
    # x = 89 and x = 100 overflow: e^x = inf, p = [inf/inf, 1/inf] = [nan, 0].
    for big in (89.0, 100.0):
        p = softmax_naive([big, 0.0], dtype=np.float32)
        assert np.isnan(p[0]) and p[1] == 0.0
        # while the stable form in float64 is fine
        np.testing.assert_allclose(softmax_stable([big, 0.0]),
                                   np.array([1.0, math.exp(-big)]) / (1 + math.exp(-big)),
                                   rtol=1e-15)
    # float64's own limit
    assert np.all(np.isfinite(softmax_naive([709.0, 0.0])))
    assert np.isnan(softmax_naive([710.0, 0.0])[0])


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_naive_float64_matches_stable_on_moderate_inputs(rng, shape):
    x = rng.uniform(-30.0, 30.0, size=shape)
    np.testing.assert_allclose(softmax_naive(x), softmax_stable(x), rtol=1e-13, atol=1e-300)


def test_naive_float32_computes_in_float32(rng):
    x = rng.standard_normal((4, 33))
    p = softmax_naive(x, dtype=np.float32)
    assert p.dtype == np.float32
    np.testing.assert_allclose(p, softmax_stable(x), rtol=1e-5)


def test_naive_rejects_non_float_dtype():
    with pytest.raises(ValueError, match="dtype"):
        softmax_naive([1.0, 2.0], dtype=np.int32)


# ---------------------------------------------------------------------------------------------
# -inf (masked keys), NaN, +inf, and huge finite values
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", EXACT_IDS)
def test_minus_inf_entries_get_zero(rng, name):
    x = rng.standard_normal((4, 33)) * 5
    mask = rng.random(x.shape) < 0.3
    mask[:, 0] = False                                      # keep one finite entry per row
    x[mask] = -np.inf
    p = EXACT[name](x)
    assert np.all(p[mask] == 0.0)
    for r in range(x.shape[0]):                             # = softmax of the finite entries
        keep = ~mask[r]
        np.testing.assert_allclose(p[r, keep], softmax_stable(x[r, keep]), rtol=1e-13)


@pytest.mark.parametrize("name", EXACT_IDS)
def test_all_minus_inf_rows_give_zeros(rng, name):
    x = rng.standard_normal((2, 3, 33))
    x[0, 1] = -np.inf
    x[1, 2] = -np.inf
    p = EXACT[name](x)
    np.testing.assert_array_equal(p[0, 1], 0.0)
    np.testing.assert_array_equal(p[1, 2], 0.0)
    assert not np.any(np.isnan(p))
    ok = np.ones((2, 3), bool)
    ok[0, 1] = ok[1, 2] = False
    np.testing.assert_allclose(p[ok].sum(axis=-1), 1.0, atol=1e-14)
    np.testing.assert_array_equal(EXACT[name]([-np.inf]), [0.0])


def test_all_minus_inf_row_state_is_empty():
    for n in (1, 2, 33):
        m, l = online_softmax_state([-np.inf] * n)
        assert m == -np.inf and l == 0.0
        assert softmax_tiled_ml([-np.inf] * n, 2)[-1] == (-np.inf, 0.0)


def test_leading_minus_inf_then_finite():
    """The -inf − (-inf) trap of §20's stream: the state must stay (-inf, 0), then recover."""
    x = [-np.inf, -np.inf, 1.0, 2.0, -np.inf, 0.0]
    m, l = online_softmax_state(x)
    assert m == 2.0
    np.testing.assert_allclose(l, E**-1 + 1 + E**-2, rtol=1e-15)
    for f in EXACT.values():
        np.testing.assert_allclose(f(x), softmax_stable([1.0, 2.0, 0.0])[[0, 0, 0, 1, 2, 2]]
                                   * [0, 0, 1, 1, 0, 1], rtol=1e-15)
    # tiles: a whole first tile of -inf, merged with later tiles
    hist = softmax_tiled_ml(x, 2)
    assert hist[0] == (-np.inf, 0.0)
    assert hist[1][0] == 2.0


@pytest.mark.parametrize("name", EXACT_IDS)
def test_nan_poisons_its_row_only(rng, name):
    x = rng.standard_normal((3, 4, 33))
    i, j, k = rng.integers(0, 3), rng.integers(0, 4), rng.integers(0, 33)
    x[i, j, k] = np.nan
    p = EXACT[name](x)
    assert np.all(np.isnan(p[i, j]))
    others = np.ones((3, 4), bool)
    others[i, j] = False
    assert not np.any(np.isnan(p[others]))
    np.testing.assert_allclose(p[others], softmax_stable(x[others]), rtol=1e-13)


def test_nan_state():
    for x in ([np.nan], [np.nan, 1.0], [1.0, np.nan], [-np.inf, np.nan], [np.nan, -np.inf]):
        m, l = online_softmax_state(x)
        assert np.isnan(m) and np.isnan(l), x
        m, l = softmax_tiled_ml(x, 1)[-1]
        assert np.isnan(m) and np.isnan(l), x


@pytest.mark.parametrize("name", EXACT_IDS)
def test_plus_inf_gives_a_nan_row(name):
    """Documented choice: +inf anywhere → the whole row is NaN (e^{inf-inf} poisons l)."""
    x = np.array([[np.inf, 0.0], [0.0, np.inf], [np.inf, np.inf], [np.inf, -np.inf],
                  [1.0, 0.0]])
    p = EXACT[name](x)
    assert np.all(np.isnan(p[:4]))
    np.testing.assert_allclose(p[4], [1 / (1 + E**-1), E**-1 / (1 + E**-1)], rtol=1e-15)


def test_huge_finite_gap_is_not_nan():
    """x - m may overflow to -inf (-1e308 - 1e308); e^-inf = 0 is then the right answer."""
    for f in EXACT.values():
        np.testing.assert_array_equal(f([-1e308, 1e308]), [0.0, 1.0])
        np.testing.assert_array_equal(f([1e308, 1e308]), [0.5, 0.5])


# ---------------------------------------------------------------------------------------------
# §18–19: merge_ml
# ---------------------------------------------------------------------------------------------

def _random_states(rng, n):
    """n random (m, l) states of random rows, some of them empty (-inf, 0)."""
    m = rng.standard_normal(n) * 20
    l = rng.uniform(1.0, 50.0, n)                           # l ≥ 1 for a non-empty part
    empty = rng.random(n) < 0.2
    m[empty], l[empty] = -np.inf, 0.0
    return m, l


def test_merge_formula_by_hand():
    m, l = merge_ml(2.0, 1 + E**-1, 4.0, 1 + E**-1)        # §33's two tiles
    assert m == 4.0
    np.testing.assert_allclose(l, E**-2 * (1 + E**-1) + (1 + E**-1), rtol=1e-15)


def test_merge_is_commutative(rng):
    m_a, l_a = _random_states(rng, 200)
    m_b, l_b = _random_states(rng, 200)
    ab = merge_ml(m_a, l_a, m_b, l_b)
    ba = merge_ml(m_b, l_b, m_a, l_a)
    np.testing.assert_array_equal(ab[0], ba[0])
    np.testing.assert_array_equal(ab[1], ba[1])             # exactly: + and max commute


def test_merge_is_associative(rng):
    a, b, c = (_random_states(rng, 200) for _ in range(3))
    left = merge_ml(*merge_ml(*a, *b), *c)
    right = merge_ml(*a, *merge_ml(*b, *c))
    np.testing.assert_array_equal(left[0], right[0])
    np.testing.assert_allclose(left[1], right[1], rtol=1e-14)


def test_merge_with_empty_state_is_exact_identity(rng):
    m, l = _random_states(rng, 100)
    for got in (merge_ml(m, l, -np.inf, 0.0), merge_ml(-np.inf, 0.0, m, l)):
        np.testing.assert_array_equal(got[0], m)
        np.testing.assert_array_equal(got[1], l)


def test_merge_two_empty_states():
    with np.errstate(all="raise"):
        m, l = merge_ml(-np.inf, 0.0, -np.inf, 0.0)
        assert m == -np.inf and l == 0.0
        m, l = merge_ml([-np.inf] * 3, [0.0] * 3, [-np.inf] * 3, [0.0] * 3)
    np.testing.assert_array_equal(m, -np.inf)
    np.testing.assert_array_equal(l, 0.0)


def test_merge_scalars_in_scalars_out_and_broadcasts():
    m, l = merge_ml(1.0, 1.0, 1.0, 1.0)
    assert np.ndim(m) == 0 and np.ndim(l) == 0 and (m, l) == (1.0, 2.0)
    m, l = merge_ml([0.0, 1.0, 2.0], [1.0, 1.0, 1.0], 1.0, 1.0)
    np.testing.assert_array_equal(m, [1.0, 1.0, 2.0])
    np.testing.assert_allclose(l, [E**-1 + 1, 2.0, 1 + E**-1], rtol=1e-15)


def test_merge_nan_and_inf():
    m, l = merge_ml(np.nan, 1.0, 0.0, 1.0)
    assert np.isnan(m) and np.isnan(l)
    m, l = merge_ml(0.0, 1.0, np.inf, np.nan)
    assert m == np.inf and np.isnan(l)


@pytest.mark.parametrize("n", [1, 2, 33, 200])
def test_any_split_merged_in_any_order_is_the_whole_row(rng, n):
    """§18: the row's state from its parts' states alone, for random splits and orders."""
    x = _random_rows(rng, (n,), 20.0)
    whole = online_softmax_state(x)
    for _ in range(10):
        k = rng.integers(0, n)                              # k cut points → k + 1 parts
        cuts = np.sort(rng.choice(np.arange(1, n), size=min(k, n - 1), replace=False)) \
            if n > 1 else []
        parts = np.split(x, cuts)
        states = [online_softmax_state(p) for p in parts]
        # left to right
        m, l = -np.inf, 0.0
        for s in states:
            m, l = merge_ml(m, l, *s)
        assert m == whole[0]
        np.testing.assert_allclose(l, whole[1], rtol=1e-13)
        # random tree: merge two random states until one is left
        pool = list(states)
        while len(pool) > 1:
            i, j = sorted(rng.choice(len(pool), size=2, replace=False))
            merged = merge_ml(*pool[i], *pool[j])
            pool = [s for t, s in enumerate(pool) if t not in (i, j)] + [merged]
        assert pool[0][0] == whole[0]
        np.testing.assert_allclose(pool[0][1], whole[1], rtol=1e-13)


# ---------------------------------------------------------------------------------------------
# §17–19: tiles
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 5, 33, 64, 100])
@pytest.mark.parametrize("tile", TILES)
def test_tiled_history_is_the_state_of_each_prefix(rng, n, tile):
    x = _random_rows(rng, (n,), 10.0)
    hist = softmax_tiled_ml(x, tile)
    assert len(hist) == -(-n // tile)                       # ceil(N / tile)
    for t, (m, l) in enumerate(hist):
        assert np.ndim(m) == 0 and np.ndim(l) == 0
        m_def, l_def = _state_by_definition(x[: (t + 1) * tile])
        assert m == m_def
        np.testing.assert_allclose(l, l_def, rtol=1e-13)


def test_tiled_history_for_a_batch(rng):
    x = _random_rows(rng, (2, 3, 33), 10.0)
    hist = softmax_tiled_ml(x, 8)
    assert len(hist) == 5
    for m, l in hist:
        assert m.shape == (2, 3) and l.shape == (2, 3)
    m_def, l_def = _state_by_definition(x)
    np.testing.assert_array_equal(hist[-1][0], m_def)
    np.testing.assert_allclose(hist[-1][1], l_def, rtol=1e-13)


@pytest.mark.parametrize("bad", [0, -1])
def test_tile_must_be_positive(bad):
    for f in (softmax_tiled_ml, softmax_of_first_tile_only):
        with pytest.raises(ValueError, match="tile"):
            f([1.0, 2.0], bad)


@pytest.mark.parametrize("bad", [2.5, True, "2", None])
def test_tile_must_be_an_int(bad):
    for f in (softmax_tiled_ml, softmax_of_first_tile_only):
        with pytest.raises(TypeError, match="tile"):
            f([1.0, 2.0], bad)


def test_tile_accepts_numpy_ints():
    assert len(softmax_tiled_ml([1.0, 2.0, 3.0], np.int64(2))) == 2


# ---------------------------------------------------------------------------------------------
# §33: the numeric example, every number
# ---------------------------------------------------------------------------------------------

ROW_33 = [2.0, 1.0, 4.0, 3.0]                                 # tiles [2, 1] then [4, 3]


def test_section33_tile_by_tile():
    (m1, l1), (m2, l2) = softmax_tiled_ml(ROW_33, 2)
    # after tile 1: m_1 = 2, l_1 = e^{2-2} + e^{1-2} = 1 + e^-1
    assert m1 == 2.0
    np.testing.assert_allclose(l1, 1 + E**-1, rtol=1e-15)
    # after tile 2: m_2 = 4 (a larger max arrived); l_2 = e^{-2}(1 + e^{-1}) + 1 + e^{-1}
    assert m2 == 4.0
    np.testing.assert_allclose(l2, E**-2 * (1 + E**-1) + 1 + E**-1, rtol=1e-15)
    # "equivalent to computing directly": e^{2-4} + e^{1-4} + e^{4-4} + e^{3-4}
    np.testing.assert_allclose(l2, E**-2 + E**-3 + E**0 + E**-1, rtol=1e-15)
    np.testing.assert_allclose(l2, 1.553001792775919, rtol=1e-15)


def test_section33_pieces_of_the_update():
    """The rescaled old sum e^{2-4} l_1, tile 2's own contribution e^0 + e^-1, and that
    tile 2's merge needs only tile 1's (m, l), never its two scores."""
    (m1, l1), (m2, l2) = softmax_tiled_ml(ROW_33, 2)
    m_b, l_b = online_softmax_state(ROW_33[2:])             # tile 2 alone
    assert m_b == 4.0
    np.testing.assert_allclose(l_b, E**0 + E**-1, rtol=1e-15)
    correction = math.exp(m1 - m2)                          # e^{2-4}
    np.testing.assert_allclose(correction * l1, E**-2 * (1 + E**-1), rtol=1e-15)
    assert merge_ml(m1, l1, m_b, l_b) == (m2, l2)


def test_section33_final_probabilities():
    m2, l2 = softmax_tiled_ml(ROW_33, 2)[-1]
    p = normalize_with_ml(ROW_33, m2, l2)
    np.testing.assert_allclose(p, softmax_stable(ROW_33), rtol=1e-15)
    want = np.array([E**-2, E**-3, 1.0, E**-1]) / (E**-2 + E**-3 + 1.0 + E**-1)
    np.testing.assert_allclose(p, want, rtol=1e-15)
    np.testing.assert_allclose(p, [0.08714431874203257, 0.03205860328008499,
                                   0.6439142598879722, 0.23688281808991013], rtol=1e-14)


# ---------------------------------------------------------------------------------------------
# §17: normalizing each tile alone is wrong
# ---------------------------------------------------------------------------------------------

def test_section17_tile_only_is_wrong_on_section33_data():
    wrong = softmax_of_first_tile_only(ROW_33, 2)
    right = softmax_stable(ROW_33)
    # each tile alone: [σ(2,1), σ(4,3)], i.e. 1/(1+e^-1), e^-1/(1+e^-1) twice
    half = np.array([1.0, E**-1]) / (1 + E**-1)
    np.testing.assert_allclose(wrong, np.concatenate([half, half]), rtol=1e-15)
    assert not np.allclose(wrong, right)
    # the first tile's probabilities are far too large: 0.731 vs 0.087 — tile 2 held the max
    assert wrong[0] > 8 * right[0]
    np.testing.assert_allclose(wrong.sum(), 2.0, rtol=1e-15)    # one per tile, not one


def test_tile_only_with_one_tile_is_right(rng):
    x = _random_rows(rng, (3, 33), 10.0)
    for tile in (33, 34, 1000):
        np.testing.assert_array_equal(softmax_of_first_tile_only(x, tile), softmax_stable(x))


@pytest.mark.parametrize("tile", [1, 7, 32])
def test_tile_only_overestimates_every_probability(rng, tile):
    """A tile's own denominator leaves out the other tiles' terms, so each p only grows:
    e^{x_i} / Σ_tile e^x ≥ e^{x_i} / Σ_row e^x — and each tile sums to 1."""
    x = _random_rows(rng, (4, 33), 10.0)
    wrong = softmax_of_first_tile_only(x, tile)
    right = softmax_stable(x)
    assert wrong.shape == x.shape
    assert np.all(wrong >= right * (1 - 1e-13))
    n_tiles = -(-33 // tile)
    np.testing.assert_allclose(wrong.sum(axis=-1), n_tiles, rtol=1e-13)


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------

def _every_public_function():
    yield "naive", softmax_naive
    yield from EXACT.items()
    yield "online_state", online_softmax_state
    yield "tiled_ml", lambda x: softmax_tiled_ml(x, 2)
    yield "tile_only", lambda x: softmax_of_first_tile_only(x, 2)
    yield "normalize_with_ml", lambda x: normalize_with_ml(x, 0.0, 1.0)


@pytest.mark.parametrize("name,f", list(_every_public_function()),
                         ids=lambda v: v if isinstance(v, str) else "fn")
def test_bad_shapes_raise_value_error_naming_x(name, f):
    for bad in (3.0, np.float64(3.0), np.array(3.0)):
        with pytest.raises(ValueError, match=r"^x .*0-d"):
            f(bad)
    for bad in ([], np.zeros((3, 0)), np.zeros((2, 3, 0))):
        with pytest.raises(ValueError, match=r"^x .*empty last axis"):
            f(bad)


@pytest.mark.parametrize("name,f", list(_every_public_function()),
                         ids=lambda v: v if isinstance(v, str) else "fn")
def test_non_real_input_raises_type_error(name, f):
    for bad in (np.array([1 + 2j, 3j]), np.array(["a", "b"]), np.array([None, 1.0])):
        with pytest.raises(TypeError, match=r"^x "):
            f(bad)


@pytest.mark.parametrize("name", EXACT_IDS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int32, np.bool_])
def test_narrow_inputs_are_computed_in_float64(rng, name, dtype):
    x = (rng.standard_normal((3, 33)) * 4).astype(dtype)
    p = EXACT[name](x)
    assert p.dtype == np.float64
    np.testing.assert_allclose(p, softmax_stable(x.astype(np.float64)), rtol=1e-13)


@pytest.mark.parametrize("name", EXACT_IDS)
def test_lists_and_empty_batches(name):
    np.testing.assert_allclose(EXACT[name]([2, 1, 4, 3]), softmax_stable(ROW_33), rtol=1e-15)
    assert EXACT[name](np.zeros((0, 5))).shape == (0, 5)


@pytest.mark.parametrize("name", EXACT_IDS)
def test_input_is_not_modified(rng, name):
    x = _random_rows(rng, (3, 33), 10.0)
    x[0, 0] = -np.inf
    before = x.copy()
    EXACT[name](x)
    softmax_tiled_ml(x, 4)
    softmax_of_first_tile_only(x, 4)
    np.testing.assert_array_equal(x, before)
