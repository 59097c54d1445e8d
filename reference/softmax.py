"""Softmax oracles for lesson 22, §1–§3 and §17–§20: pure NumPy, float64, readable before fast.

Every kernel in ``kernels_numba/`` is checked against one of these. They run over the last
axis of an array of any rank; each row is independent.

Menu (§ = section of the lesson, see ``shared/lesson/OUTLINE.md``)::

    softmax_naive(x, dtype)          §1   e^x / Σ e^x, no max subtracted: overflows (float32
                                          at x > 88.7, float64 at x > 709.8), inf/inf = NaN
    softmax_stable(x)                §2   m = max x; p = e^{x-m} / Σ e^{x-m}       (the oracle)
    softmax_three_pass(x)            §3   the same, as three explicit passes: max | exp+sum |
                                          exp+normalize (x read three times, exp computed twice)
    online_softmax_state(x)          §20  one streaming pass for (m, l), element by element:
                                          m' = max(m, x_k);  l' = e^{m-m'} l + e^{x_k-m'}
    normalize_with_ml(x, m, l)       §20  the last pass: p = e^{x-m} / l from a finished (m, l)
    softmax_online(x)                §20  online_softmax_state + normalize_with_ml: two passes
    merge_ml(m_a, l_a, m_b, l_b)     §18–19  m = max(m_a, m_b);  l = e^{m_a-m} l_a + e^{m_b-m} l_b
    softmax_tiled_ml(x, tile)        §17–19, §33  (m, l) after each tile, merged left to right
    softmax_of_first_tile_only(x, tile)  §17  the WRONG answer: each tile normalized on its own

``ORACLES`` names the exact methods (stable, three_pass, online); tests and tours iterate it.

Conventions, the same for every exact method (everything except ``softmax_naive`` and the
deliberately wrong ``softmax_of_first_tile_only`` per tile):

* Input: any array-like of real numbers (bool/int/float) with at least one axis and a
  non-empty last axis; otherwise ``ValueError`` (or ``TypeError`` for complex/object data),
  naming the argument. Integers, float16 and float32 are converted to float64; the result
  is always float64 of the input's shape.
* ``-inf`` entries get probability exactly 0 (they are masked keys, §34–35).
* A row that is all ``-inf`` (a fully masked row) gives all zeros, not NaN, and its state is
  (m, l) = (-inf, 0), the empty state. The trick that makes this work without ever computing
  ``-inf - (-inf)`` is the *safe max*: where m = -inf we subtract 0 instead of m, so every
  e^{x-m} is e^{-inf} = 0, l = 0, and 0 / l is defined as 0.
* A NaN anywhere in a row makes the whole row NaN (and its m and l NaN).
* ``+inf`` anywhere in a row makes the whole row NaN. This is what IEEE arithmetic gives for
  the formula as written: m = +inf, so e^{x-m} is e^{inf-inf} = NaN for the +inf entries,
  which poisons l and then every p = e^{x-m} / l. (The limit — mass shared equally among the
  +inf entries — is not attempted; torch.softmax also returns NaN there.) No warning is
  printed for it: the NaN is the documented answer.
* Large finite inputs are exact: [1000, 999, 998] gives e^{0,-1,-2} / (e^0 + e^-1 + e^-2).

Imports: NumPy only. Nothing here may import numba, so the oracles run where no GPU is.
"""

import operator

import numpy as np

__all__ = [
    "softmax_naive",
    "softmax_stable",
    "softmax_three_pass",
    "online_softmax_state",
    "normalize_with_ml",
    "softmax_online",
    "merge_ml",
    "softmax_tiled_ml",
    "softmax_of_first_tile_only",
    "ORACLES",
]


# ---------------------------------------------------------------------------------------------
# Input checks and the two conventions every exact method shares
# ---------------------------------------------------------------------------------------------

def _as_rows(x, name="x"):
    """``x`` as a float64 array with a non-empty last axis, or a ValueError naming ``name``."""
    a = np.asarray(x)
    if a.dtype.kind not in "biuf":
        raise TypeError(
            f"{name} must hold real numbers (bool, int or float); got dtype {a.dtype}"
        )
    if a.ndim == 0:
        raise ValueError(
            f"{name} must have at least one axis (softmax runs over the last axis); "
            f"got a 0-d value {a!r}"
        )
    if a.shape[-1] == 0:
        raise ValueError(
            f"{name} has an empty last axis (shape {a.shape}); softmax of an empty row "
            "is undefined"
        )
    return a.astype(np.float64, copy=False)


def _check_tile(tile):
    """``tile`` as a positive int, or an error naming ``tile``."""
    if isinstance(tile, (bool, np.bool_)):
        raise TypeError(f"tile must be a positive int; got {tile!r}")
    try:
        t = operator.index(tile)
    except TypeError:
        raise TypeError(f"tile must be a positive int; got {tile!r}") from None
    if t < 1:
        raise ValueError(f"tile must be a positive int (elements per tile); got {t}")
    return t


def _safe_max(m):
    """m where it is finite or +inf/NaN, 0 where it is -inf.

    Subtracting this instead of m keeps an all -inf row (or an empty state) from computing
    -inf - (-inf) = NaN: its entries become e^{-inf - 0} = 0. Where m is finite nothing changes.
    """
    return np.where(m == -np.inf, 0.0, m)


def _exp_minus(x, m):
    """e^{x - m} with the safe max. m is broadcast against x (keep its reduced axis)."""
    # over: x - m may overflow to -inf for huge finite gaps (e.g. -1e308 - 1e308); e^-inf = 0
    #       is then the right answer.  invalid: +inf - +inf = NaN, the documented +inf result.
    with np.errstate(over="ignore", invalid="ignore"):
        return np.exp(x - _safe_max(m))


def _divide_by_l(e, l):
    """e / l, with 0 / 0 defined as 0 (a fully masked row: every e and l are 0)."""
    return e / np.where(l == 0.0, 1.0, l)


def _scalar_if_0d(a):
    """A 0-d array becomes a NumPy scalar (a 1-D row's m and l are plain numbers)."""
    a = np.asarray(a)
    return a[()] if a.ndim == 0 else a


# ---------------------------------------------------------------------------------------------
# §1  naive softmax — the one that overflows
# ---------------------------------------------------------------------------------------------

def softmax_naive(x, dtype=np.float64):
    """§1: p_i = e^{x_i} / Σ_j e^{x_j}, computed in ``dtype`` with no max subtracted.

    Kept to reproduce the failure, not to be used. e^x overflows to inf once
    x > ln(max of the dtype): about 88.72 for float32, 709.78 for float64, 11.09 for float16.
    Then the sum is inf and p = inf / inf = NaN (entries that did not overflow give
    finite / inf = 0). So [1000, 999, 998] gives [nan, nan, nan] in float32 — and in float64
    too. For moderate inputs it agrees with :func:`softmax_stable`.

    ``dtype`` is any NumPy floating dtype (float16, float32, float64); the input is cast to it
    and the result has it. Overflow and inf/inf warnings are silenced: overflow is the point.
    No conventions for -inf rows: an all -inf row is 0 / 0 = NaN here.
    """
    dt = np.dtype(dtype)
    if dt.kind != "f":
        raise ValueError(f"dtype must be a floating dtype (float16/32/64); got {dt}")
    x = _as_rows(x).astype(dt)  # the cast itself is exact for float64; lossy for narrower types
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)                               # e^{x_i}: inf once x_i > ln(max)
        l = np.sum(e, axis=-1, keepdims=True)       # Σ e^{x_j}: inf if any term is
        return e / l                                # inf / inf = NaN


# ---------------------------------------------------------------------------------------------
# §2  stable softmax — the oracle
# ---------------------------------------------------------------------------------------------

def softmax_stable(x):
    """§2: m = max_j x_j;  p_i = e^{x_i - m} / Σ_j e^{x_j - m}.

    Same value as e^{x_i} / Σ e^{x_j} (numerator and denominator both times e^{-m}), but every
    exponent x_i - m ≤ 0, so 0 < e^{x_i - m} ≤ 1 and nothing overflows; the largest entry's
    numerator is exactly e^0 = 1, so l = Σ e^{x_j - m} ≥ 1. Whole-array NumPy, the reference
    the other methods are compared with. Conventions for -inf / NaN / +inf: see the module.
    """
    x = _as_rows(x)
    m = np.max(x, axis=-1, keepdims=True)       # §2: m = max_j x_j (NaN if any x_j is NaN)
    e = _exp_minus(x, m)                        # e^{x_i - m}, in (0, 1]
    l = np.sum(e, axis=-1, keepdims=True)       # l = Σ_j e^{x_j - m}
    return _divide_by_l(e, l)                   # p_i = e^{x_i - m} / l


# ---------------------------------------------------------------------------------------------
# §3  the same thing as three passes over the row
# ---------------------------------------------------------------------------------------------

def softmax_three_pass(x):
    """§3: stable softmax written as the three passes a simple kernel makes over a row.

        pass 1  read x            m = max_i x_i                    (max reduction)
        pass 2  read x again      l = Σ_i e^{x_i - m}              (exp + sum reduction)
        pass 3  read x again      p_i = e^{x_i - m} / l, write p   (exp again + normalize)

    x is read three times and each e^{x_i - m} computed twice (storing it instead would add
    a write and a read of an N-vector). The loops walk one row element by element, as one
    thread would; for rank > 1 each step runs over all rows at once (column ``x[:, i]``
    instead of ``x[i]``). Same result as :func:`softmax_stable` up to summation order.
    """
    x = _as_rows(x)
    shape = x.shape
    rows = x.reshape(-1, shape[-1])             # (R, N): R independent rows
    n = rows.shape[1]

    # pass 1: m = max_i x_i.  np.maximum (not Python's max) so a NaN propagates into m.
    m = np.full(rows.shape[0], -np.inf)
    for i in range(n):
        m = np.maximum(m, rows[:, i])

    # pass 2: l = Σ_i e^{x_i - m}
    l = np.zeros(rows.shape[0])
    for i in range(n):
        l = l + _exp_minus(rows[:, i], m)

    # pass 3: p_i = e^{x_i - m} / l   (the exponential is recomputed, not stored)
    p = np.empty_like(rows)
    for i in range(n):
        p[:, i] = _divide_by_l(_exp_minus(rows[:, i], m), l)

    return p.reshape(shape)


# ---------------------------------------------------------------------------------------------
# §20  online softmax: (m, l) in one streaming pass
# ---------------------------------------------------------------------------------------------

def online_softmax_state(x):
    """§20: the running state (m, l) of a row, streamed element by element in one pass.

    Start from the empty state m_0 = -inf, l_0 = 0. For each new element x_{k+1}:

        m_{k+1} = max(m_k, x_{k+1})
        l_{k+1} = e^{m_k - m_{k+1}} l_k + e^{x_{k+1} - m_{k+1}}

    so after the row, m = max_j x_j and l = Σ_j e^{x_j - m}. The factor e^{m_k - m_{k+1}} (the
    *correction* of §32) rescales the old sum to the new max; it is 1 when the max did not
    change. While the max is still -inf (only -inf seen so far) the state stays (-inf, 0): the
    safe max turns -inf - (-inf) into a 0 contribution instead of NaN.

    Returns ``(m, l)`` of shape ``x.shape[:-1]`` (NumPy scalars for a 1-D row). Rank > 1:
    every row streams at once, one element per step.
    """
    x = _as_rows(x)
    m = np.full(x.shape[:-1], -np.inf)          # m_0 = -inf
    l = np.zeros(x.shape[:-1])                  # l_0 = 0
    for k in range(x.shape[-1]):
        x_k = x[..., k]
        m_new = np.maximum(m, x_k)                  # m_{k+1} = max(m_k, x_{k+1})
        correction = _exp_minus(m, m_new)           # e^{m_k - m_{k+1}}
        l = correction * l + _exp_minus(x_k, m_new)  # l_{k+1} = corr · l_k + e^{x_{k+1} - m_{k+1}}
        m = m_new
    return _scalar_if_0d(m), _scalar_if_0d(l)


def normalize_with_ml(x, m, l):
    """§20 (last step), §33: p_i = e^{x_i - m} / l, given the row's finished state (m, l).

    ``m`` and ``l`` have shape ``x.shape[:-1]`` (scalars for a 1-D row), as returned by
    :func:`online_softmax_state` or the last entry of :func:`softmax_tiled_ml`. An empty state
    (-inf, 0) gives zeros. This is the one extra read of x that online softmax still needs:
    two passes in all instead of three.
    """
    x = _as_rows(x)
    m = np.asarray(m, dtype=np.float64)[..., None]  # keep a length-1 last axis to broadcast
    l = np.asarray(l, dtype=np.float64)[..., None]
    return _divide_by_l(_exp_minus(x, m), l)        # p_i = e^{x_i - m} / l


def softmax_online(x):
    """§20: p = e^{x - m} / l, with (m, l) from the one-pass stream :func:`online_softmax_state`.

    Pass 1 fuses max and sum (§20's update); pass 2 normalizes. Same result as
    :func:`softmax_stable` up to rounding (the sum is built with rescales along the way).
    """
    m, l = online_softmax_state(x)
    return normalize_with_ml(x, m, l)


# ---------------------------------------------------------------------------------------------
# §18–19  merging two partial states; §17, §33 tiles
# ---------------------------------------------------------------------------------------------

def merge_ml(m_a, l_a, m_b, l_b):
    """§18–19: merge the states of two parts A and B of one row without re-reading either.

        m = max(m_a, m_b)
        l = e^{m_a - m} l_a + e^{m_b - m} l_b

    where (m_a, l_a) = (max A, Σ_{x∈A} e^{x - m_a}), likewise for B. Each old sum is rescaled
    from its own max to the common one: Σ_A e^{x-m} = e^{m_a - m} Σ_A e^{x - m_a}.

    Element-wise on broadcastable arrays (scalars in, scalars out). The merge is commutative
    (exactly) and associative (up to rounding), so any split of a row, merged in any order,
    gives the whole row's state. The empty state (-inf, 0) is the identity: merging with it
    returns the other state exactly, and two empty states give (-inf, 0) — no NaN, no warning.
    NaN in either m makes both results NaN; +inf in either m gives l = NaN (see the module).
    """
    m_a, l_a, m_b, l_b = (np.asarray(v, dtype=np.float64) for v in (m_a, l_a, m_b, l_b))
    m = np.maximum(m_a, m_b)                            # §19: m = max(m_a, m_b)
    # invalid: 0 · inf, only if a caller passes l = inf; the NaN it gives is left as is.
    with np.errstate(invalid="ignore"):
        # §19: l = e^{m_a - m} l_a + e^{m_b - m} l_b
        l = _exp_minus(m_a, m) * l_a + _exp_minus(m_b, m) * l_b
    return _scalar_if_0d(m), _scalar_if_0d(l)


def _tile_state(x_tile):
    """(m, l) of one tile computed locally: m = max, l = Σ e^{x - m} (§18's m_A, l_A)."""
    m = np.max(x_tile, axis=-1)
    l = np.sum(_exp_minus(x_tile, m[..., None]), axis=-1)
    return m, l


def softmax_tiled_ml(x, tile):
    """§17–19, §33: split each row into tiles of ``tile`` elements and merge their (m, l).

    For tile t = 1, 2, …: compute the tile's own state (m_t, l_t) = (max, Σ e^{x - m_t}) from
    its elements only, then fold it into the running state with :func:`merge_ml`, left to
    right, starting from the empty state (-inf, 0). The last tile may be shorter.

    Returns ``history``: a list with one ``(m, l)`` pair per tile, the running state *after*
    that tile (length ceil(N / tile)). ``history[-1]`` is the whole row's state, equal to
    :func:`online_softmax_state` up to rounding; ``normalize_with_ml(x, *history[-1])`` is the
    softmax. For a 1-D row each m, l is a NumPy scalar; for rank > 1 an array of shape
    ``x.shape[:-1]`` (every row tiled the same way).

    §33's example: ``softmax_tiled_ml([2, 1, 4, 3], 2)`` gives
    ``[(2, 1 + e^-1), (4, e^-2 (1 + e^-1) + 1 + e^-1)]``.
    """
    x = _as_rows(x)
    tile = _check_tile(tile)
    n = x.shape[-1]
    m = np.full(x.shape[:-1], -np.inf)          # empty state: m = -inf, l = 0
    l = np.zeros(x.shape[:-1])
    history = []
    for start in range(0, n, tile):
        m_t, l_t = _tile_state(x[..., start:start + tile])  # this tile alone
        m, l = merge_ml(m, l, m_t, l_t)                      # fold into the running state
        history.append((_scalar_if_0d(m), _scalar_if_0d(l)))
    return history


def softmax_of_first_tile_only(x, tile):
    """§17: the WRONG softmax a naive fused kernel would produce — each tile normalized alone.

    §17: with only the first K tile seen, its probabilities cannot be known, because a later
    tile may hold a larger score and change the row max, the denominator, and so every earlier
    probability. This function does the tempting wrong thing: treat the first tile as if it
    were the whole row (p = e^{x - m_1} / l_1 over tile 1 only), and the same for every later
    tile, concatenated back to the input's shape. Each tile then sums to 1, so the row sums to
    ceil(N / tile); with more than one tile the values are in general wrong (only a single
    tile, tile ≥ N, gives the true softmax).

    On §33's row [2, 1, 4, 3] with tile = 2 it gives [σ(2,1), σ(4,3)] ≈ [0.731, 0.269, 0.731,
    0.269] instead of ≈ [0.087, 0.032, 0.644, 0.237].
    """
    x = _as_rows(x)
    tile = _check_tile(tile)
    return np.concatenate(
        [softmax_stable(x[..., s:s + tile]) for s in range(0, x.shape[-1], tile)], axis=-1
    )


#: The exact softmax methods, by name: the registry tests, examples and the tour iterate.
ORACLES = {
    "stable": softmax_stable,
    "three_pass": softmax_three_pass,
    "online": softmax_online,
}
