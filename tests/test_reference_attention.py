"""Tests of the attention oracles in ``reference/attention.py`` (lesson 22, §12–§16, §21–§25,
§32–§34, §49).

NumPy only, no GPU, no numba: these check the oracles themselves, so the kernels' tests can
trust them. Three independent routes to the same numbers — the whole-matrix formula (§12), one
query at a time (§13), and a brute-force double loop in plain Python floats written here — and
then the tiled §32 oracle and the §22 merges against them. Random inputs are fresh each run; the
seed is printed (shown by pytest when a test fails) and ``FLASHLESSON_SEED=<seed>`` replays it.
"""

import math
import warnings

import numpy as np
import pytest

from flashlesson.reference import (
    attention,
    attention_flops,
    attention_per_query,
    attention_state,
    attention_state_sizes,
    causal_mask,
    flash_attention_bytes,
    flash_attention_tiled,
    merge_attention,
    merge_states,
    naive_attention_bytes,
)

E = math.e
RTOL, ATOL = 1e-12, 1e-12


@pytest.fixture(autouse=True)
def _warnings_are_errors():
    """No oracle may print a RuntimeWarning: masked rows and −inf states are handled on purpose."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def _qkv(rng, b, h, nq, nk, d, dv=None, scale=1.0):
    q = rng.standard_normal((b, h, nq, d)) * scale
    k = rng.standard_normal((b, h, nk, d))
    v = rng.standard_normal((b, h, nk, d if dv is None else dv))
    return q, k, v


def _close(got, want):
    """Equal up to rounding; −inf must meet −inf (assert_allclose compares infinities exactly)."""
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def _brute_force(q, k, v, causal=False, scale=None, key_padding_mask=None):
    """o and lse by the definition, in plain Python floats, one (b, h, i) at a time.

    s_ij = scale Σ_c q_ic k_jc over the visible keys j; lse_i = m + ln Σ_j e^{s_ij − m};
    o_i = Σ_j e^{s_ij − lse_i} v_j. Written from §12–§13 without the oracle's code.
    """
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    b_, h_, nq, d = q.shape
    nk, dv = v.shape[2], v.shape[3]
    scale = 1 / math.sqrt(d) if scale is None else scale
    o = np.zeros((b_, h_, nq, dv))
    lse = np.full((b_, h_, nq), -math.inf)
    for b in range(b_):
        for h in range(h_):
            for i in range(nq):
                seen = [j for j in range(nk)
                        if (not causal or j <= i + nk - nq)
                        and (key_padding_mask is None or key_padding_mask[b][j])]
                if not seen:
                    continue
                s = {j: scale * math.fsum(q[b, h, i, c] * k[b, h, j, c] for c in range(d))
                     for j in seen}
                m = max(s.values())
                lse[b, h, i] = m + math.log(math.fsum(math.exp(x - m) for x in s.values()))
                for c in range(dv):
                    o[b, h, i, c] = math.fsum(math.exp(s[j] - lse[b, h, i]) * v[b, h, j, c]
                                              for j in seen)
    return o, lse


def _scores(q, k, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return np.einsum("...id,...jd->...ij", q, k) * scale


def _logsumexp_masked(s, visible):
    """ln Σ_j e^{s_ij} over visible j, independently of the oracle: np.logaddexp.reduce."""
    s = np.where(visible, s, -np.inf)
    with np.errstate(invalid="ignore"):   # logaddexp(-inf, -inf) is -inf; numpy may flag it
        return np.logaddexp.reduce(s, axis=-1)


# ---------------------------------------------------------------------------------------------
# §12, §13: three routes agree
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("nq,nk", [(1, 1), (3, 5), (5, 3), (4, 4), (1, 6)])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_equals_brute_force_and_per_query(rng, nq, nk, causal):
    q, k, v = _qkv(rng, 2, 2, nq, nk, 3, dv=2)
    want_o, want_lse = _brute_force(q, k, v, causal)
    o, lse = attention(q, k, v, causal=causal)
    assert o.shape == (2, 2, nq, 2) and lse.shape == (2, 2, nq)
    assert o.dtype == lse.dtype == np.float64
    _close(o, want_o)
    _close(lse, want_lse)
    _close(attention_per_query(q, k, v, causal=causal), want_o)
    o_t, lse_t = flash_attention_tiled(q, k, v, 2, 2, causal=causal)
    _close(o_t, want_o)
    _close(lse_t, want_lse)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_vs_per_query_random(rng, causal):
    q, k, v = _qkv(rng, 2, 3, 19, 23, 16)
    o, _ = attention(q, k, v, causal=causal)
    _close(attention_per_query(q, k, v, causal=causal), o)


@pytest.mark.parametrize("causal", [False, True])
def test_lse_against_independent_logsumexp(rng, causal):
    q, k, v = _qkv(rng, 2, 2, 7, 11, 8, scale=5.0)
    o, lse, p = attention(q, k, v, causal=causal, return_p=True)
    visible = causal_mask(7, 11) if causal else np.ones((7, 11), bool)
    _close(lse, _logsumexp_masked(_scores(q, k), visible))
    # P_ij = e^{S_ij − lse_i}: the LSE alone rebuilds P (§30's backward relies on this)
    _close(p, np.where(visible, np.exp(_scores(q, k) - lse[..., None]), 0.0))
    _close(o, p @ v)
    _close(p.sum(axis=-1), 1.0)


def test_explicit_scale_and_default(rng):
    q, k, v = _qkv(rng, 1, 2, 5, 6, 9)
    o_default, lse_default = attention(q, k, v)
    o3, lse3 = attention(q, k, v, scale=1 / 3)           # 1/√9
    _close(o_default, o3)
    _close(lse_default, lse3)
    o2, _ = attention(q, k, v, scale=0.7)
    want, _ = _brute_force(q, k, v, scale=0.7)
    _close(o2, want)
    # scale = 0: every score 0, P uniform, o = mean of the values, lse = ln Nk
    o0, lse0 = attention(q, k, v, scale=0.0)
    _close(o0, np.broadcast_to(v.mean(axis=-2, keepdims=True), o0.shape))
    _close(lse0, np.log(6.0))


def test_two_d_inputs_are_one_head(rng):
    q, k, v = _qkv(rng, 1, 1, 6, 9, 5, dv=4)
    o4, lse4 = attention(q, k, v, causal=True)
    o2, lse2 = attention(q[0, 0], k[0, 0], v[0, 0], causal=True)
    assert o2.shape == (6, 4) and lse2.shape == (6,)
    _close(o2, o4[0, 0])
    _close(lse2, lse4[0, 0])
    _close(attention_per_query(q[0, 0], k[0, 0], v[0, 0], causal=True), o4[0, 0])
    o_t, lse_t = flash_attention_tiled(q[0, 0], k[0, 0], v[0, 0], 4, 4, causal=True)
    _close(o_t, o4[0, 0])
    _close(lse_t, lse4[0, 0])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int32])
def test_any_real_dtype_is_computed_in_float64(rng, dtype):
    q, k, v = (a * 3 for a in _qkv(rng, 1, 2, 4, 5, 3))
    q, k, v = (a.astype(dtype) for a in (q, k, v))
    o, lse = attention(q, k, v)
    o_t, lse_t = flash_attention_tiled(q, k, v, 3, 2)
    assert o.dtype == lse.dtype == o_t.dtype == np.float64
    want_o, want_lse = _brute_force(q, k, v)
    _close(o, want_o)
    _close(lse, want_lse)
    _close(o_t, want_o)


# ---------------------------------------------------------------------------------------------
# §32: the tiled oracle equals the whole-matrix one, for every tiling
# ---------------------------------------------------------------------------------------------

TILES = [(1, 1), (1, 3), (3, 1), (3, 16), (16, 3), (16, 16), (64, 64), (16, 64), (64, 16),
         (200, 200)]
SHAPES = [(1, 1), (1, 37), (37, 1), (37, 37), (50, 20), (20, 50), (70, 70)]


@pytest.mark.parametrize("Br,Bc", TILES, ids=lambda t: str(t))
@pytest.mark.parametrize("nq,nk", SHAPES, ids=lambda s: str(s))
@pytest.mark.parametrize("causal", [False, True])
def test_tiled_equals_attention(rng, Br, Bc, nq, nk, causal):
    q, k, v = _qkv(rng, 1, 2, nq, nk, 16, scale=2.0)
    o, lse = attention(q, k, v, causal=causal)
    o_t, lse_t = flash_attention_tiled(q, k, v, Br, Bc, causal=causal)
    assert o_t.shape == o.shape and lse_t.shape == lse.shape
    assert not np.any(np.isnan(o_t)) and not np.any(np.isnan(lse_t))
    _close(o_t, o)
    _close(lse_t, lse)


@pytest.mark.parametrize("d", [1, 3, 16, 80])
@pytest.mark.parametrize("Br,Bc", [(1, 1), (3, 5), (16, 16), (64, 128)])
@pytest.mark.parametrize("causal", [False, True])
def test_tiled_head_dims(rng, d, Br, Bc, causal):
    q, k, v = _qkv(rng, 2, 2, 33, 29, d)
    o, lse = attention(q, k, v, causal=causal)
    o_t, lse_t = flash_attention_tiled(q, k, v, Br, Bc, causal=causal)
    _close(o_t, o)
    _close(lse_t, lse)


@pytest.mark.parametrize("causal", [False, True])
def test_outliers_in_the_scores(rng, causal):
    """Scores in the hundreds and one per row pushed far higher (the llm.c trick): e^{s} would
    overflow (e^710 = inf in float64), the max-subtracted forms must not."""
    q, k, v = _qkv(rng, 2, 2, 24, 24, 8)
    q *= 40.0                                            # scores ~ 40·N(0, 1): tens
    k[:, :, 5] *= 50.0                                   # one key far out: scores ~ ±2000
    s = _scores(q, k)
    assert np.abs(s).max() > 710                         # naive e^s would overflow float64
    want_o, want_lse = _brute_force(q, k, v, causal)
    for Br, Bc in [(1, 1), (4, 7), (24, 24)]:
        o_t, lse_t = flash_attention_tiled(q, k, v, Br, Bc, causal=causal)
        assert np.all(np.isfinite(o_t)) and np.all(np.isfinite(lse_t))
        np.testing.assert_allclose(o_t, want_o, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(lse_t, want_lse, rtol=1e-12)
    o, lse = attention(q, k, v, causal=causal)
    np.testing.assert_allclose(o, want_o, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-12)
    np.testing.assert_allclose(attention_per_query(q, k, v, causal=causal), want_o,
                               rtol=1e-10, atol=1e-10)


def test_later_tile_with_larger_max_rescales_earlier_ones():
    """§17 + §32: the max of the row is in the last K tile, so every earlier tile's l and acc
    must be rescaled by correction = e^{m − new_m}; forgetting it gives a wrong answer."""
    s = np.array([[0.0, 1.0, 2.0, 3.0, 4.0, 50.0]])     # one query; score = key value (q = 1)
    q, k = np.ones((1, 1)), s.T
    v = np.arange(12.0).reshape(6, 2)
    o, lse = attention(q, k, v, scale=1.0)
    for Bc in (1, 2, 4, 5):
        o_t, lse_t = flash_attention_tiled(q, k, v, 1, Bc, scale=1.0)
        _close(o_t, o)
        _close(lse_t, lse)
    np.testing.assert_allclose(lse, [50 + math.log1p(sum(math.exp(x - 50) for x in range(5)))],
                               rtol=1e-15)


# ---------------------------------------------------------------------------------------------
# §33: the lesson's numeric example, tiles [2, 1] then [4, 3]
# ---------------------------------------------------------------------------------------------

def test_section_33_numbers():
    """One query whose scores are [2, 1, 4, 3] (q = 1, k_j = s_j, d = 1, scale 1), Bc = 2.
    v = identity (dv = 4), so o is the row of P itself and can be checked by hand."""
    q, k, v = np.array([[1.0]]), np.array([[2.0], [1.0], [4.0], [3.0]]), np.eye(4)
    trace = []
    o, lse = flash_attention_tiled(q, k, v, Br=1, Bc=2, scale=1.0, trace=trace)
    assert [(t["i"], t["j"], t["cols"]) for t in trace] == [(0, 0, (0, 2)), (0, 1, (2, 4))]
    m_1, l_1 = trace[0]["m"][0], trace[0]["l"][0]
    assert m_1 == 2.0                                            # m_1 = 2
    np.testing.assert_allclose(l_1, 1 + E**-1, rtol=1e-15)       # l_1 = e^{2-2} + e^{1-2}
    m_2, l_2 = trace[1]["m"][0], trace[1]["l"][0]
    assert m_2 == 4.0                                            # m_2 = 4
    # l_2 = e^{-2}(1 + e^{-1}) + 1 + e^{-1}  =  e^{2-4} + e^{1-4} + e^{4-4} + e^{3-4}
    np.testing.assert_allclose(l_2, E**-2 * (1 + E**-1) + 1 + E**-1, rtol=1e-15)
    np.testing.assert_allclose(l_2, E**-2 + E**-3 + 1 + E**-1, rtol=1e-15)
    # o = P row = [e^{2-4}, e^{1-4}, e^{4-4}, e^{3-4}] / l_2 ≈ [0.087, 0.032, 0.644, 0.237]
    p = np.array([E**-2, E**-3, 1.0, E**-1]) / l_2
    np.testing.assert_allclose(o[0], p, rtol=1e-15)
    np.testing.assert_allclose(o[0], [0.0871443187, 0.0320586033, 0.6439142599, 0.2368828181],
                               rtol=1e-9)
    np.testing.assert_allclose(lse, [4 + math.log(l_2)], rtol=1e-15)
    np.testing.assert_allclose(lse, [math.log(E**2 + E + E**4 + E**3)], rtol=1e-15)
    # the whole-matrix oracle says the same
    o_ref, lse_ref = attention(q, k, v, scale=1.0)
    _close(o, o_ref)
    _close(lse, lse_ref)


# ---------------------------------------------------------------------------------------------
# §34: causal, aligned bottom-right
# ---------------------------------------------------------------------------------------------

def test_causal_mask_bottom_right():
    # Nq = Nk: the lower triangle, j ≤ i (torch SDPA's top-left is the same here)
    np.testing.assert_array_equal(causal_mask(4, 4), np.tril(np.ones((4, 4), bool)))
    # Nq = 3, Nk = 5: query 0 sees keys 0..2, the last query sees all 5
    np.testing.assert_array_equal(causal_mask(3, 5), [[1, 1, 1, 0, 0],
                                                      [1, 1, 1, 1, 0],
                                                      [1, 1, 1, 1, 1]])
    # Nq = 5, Nk = 3: queries 0 and 1 see no key
    np.testing.assert_array_equal(causal_mask(5, 3), [[0, 0, 0],
                                                      [0, 0, 0],
                                                      [1, 0, 0],
                                                      [1, 1, 0],
                                                      [1, 1, 1]])
    assert causal_mask(0, 3).shape == (0, 3) and causal_mask(2, 0).shape == (2, 0)


def test_causal_more_keys_than_queries(rng):
    """Nq = 3, Nk = 5: v = identity makes o the P row; query 0 puts weight on keys 0..2 only."""
    q, k, _ = _qkv(rng, 1, 1, 3, 5, 4)
    v = np.broadcast_to(np.eye(5), (1, 1, 5, 5))
    for f in (lambda: attention(q, k, v, causal=True)[0],
              lambda: attention_per_query(q, k, v, causal=True),
              lambda: flash_attention_tiled(q, k, v, 2, 2, causal=True)[0]):
        p = f()[0, 0]
        assert np.all(p[0, :3] > 0) and np.all(p[0, 3:] == 0)
        assert np.all(p[1, :4] > 0) and p[1, 4] == 0
        assert np.all(p[2] > 0)
        _close(p.sum(axis=-1), 1.0)


@pytest.mark.parametrize("Br,Bc", [(1, 1), (2, 2), (3, 2), (8, 8)])
def test_causal_rows_with_no_key(rng, Br, Bc):
    """Nq = 5, Nk = 3: queries 0 and 1 see no key → o = 0 exactly, lse = −inf, never NaN."""
    q, k, v = _qkv(rng, 2, 2, 5, 3, 4)
    want_o, want_lse = _brute_force(q, k, v, causal=True)
    results = [attention(q, k, v, causal=True), flash_attention_tiled(q, k, v, Br, Bc, causal=True)]
    for o, lse in results:
        assert np.all(o[:, :, :2] == 0.0)
        assert np.all(lse[:, :, :2] == -np.inf)
        assert np.all(np.isfinite(o)) and np.all(np.isfinite(lse[:, :, 2:]))
        _close(o, want_o)
        _close(lse, want_lse)
    o_pq = attention_per_query(q, k, v, causal=True)
    assert np.all(o_pq[:, :, :2] == 0.0)
    _close(o_pq, want_o)


def test_causal_equals_explicit_minus_inf_mask(rng):
    """Causal = s_ij = −inf for invisible j (§34), written out on the scores here."""
    q, k, v = _qkv(rng, 1, 2, 6, 9, 4)
    s = np.where(causal_mask(6, 9), _scores(q, k), -np.inf)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    _close(attention(q, k, v, causal=True)[0], (e / e.sum(axis=-1, keepdims=True)) @ v)


def test_no_keys_at_all(rng):
    """Nk = 0: every row sees no key. Nq = 0: empty outputs."""
    q = rng.standard_normal((1, 2, 3, 4))
    k, v = np.zeros((1, 2, 0, 4)), np.zeros((1, 2, 0, 5))
    for o, lse in (attention(q, k, v), flash_attention_tiled(q, k, v, 2, 2),
                   attention(q, k, v, causal=True)):
        assert o.shape == (1, 2, 3, 5) and np.all(o == 0) and np.all(lse == -np.inf)
    assert np.all(attention_per_query(q, k, v) == 0)
    o, lse = flash_attention_tiled(q[:, :, :0], rng.standard_normal((1, 2, 4, 4)),
                                   rng.standard_normal((1, 2, 4, 5)), 2, 2)
    assert o.shape == (1, 2, 0, 5) and lse.shape == (1, 2, 0)


# ---------------------------------------------------------------------------------------------
# §34: tile statistics — skipped tiles, masked diagonal tiles
# ---------------------------------------------------------------------------------------------

def _tile_counts_by_definition(nq, nk, Br, Bc):
    """(computed, skipped, masked) from causal_mask, tile by tile: a tile is computed if any
    entry is visible and masked if additionally some entry is not."""
    vis = causal_mask(nq, nk)
    computed = skipped = masked = 0
    for r0 in range(0, nq, Br):
        for c0 in range(0, nk, Bc):
            t = vis[r0:r0 + Br, c0:c0 + Bc]
            if not t.any():
                skipped += 1
            else:
                computed += 1
                masked += int(not t.all())
    return computed, skipped, masked


@pytest.mark.parametrize("nq,nk,Br,Bc", [
    (64, 64, 16, 16), (64, 64, 16, 8), (64, 64, 8, 16), (37, 37, 5, 7), (20, 50, 8, 8),
    (50, 20, 8, 8), (50, 20, 3, 7), (1, 9, 1, 4), (9, 1, 4, 1), (10, 10, 32, 32),
])
def test_causal_tile_counts(rng, nq, nk, Br, Bc):
    q, k, v = _qkv(rng, 1, 1, nq, nk, 2)
    stats = {}
    flash_attention_tiled(q, k, v, Br, Bc, causal=True, stats=stats)
    assert stats["q_tiles"] == -(-nq // Br) and stats["kv_tiles"] == -(-nk // Bc)
    assert stats["total"] == stats["q_tiles"] * stats["kv_tiles"]
    assert stats["computed"] + stats["skipped"] == stats["total"]
    assert (stats["computed"], stats["skipped"], stats["masked"]) == \
        _tile_counts_by_definition(nq, nk, Br, Bc)


def test_causal_computes_about_half_the_tiles(rng):
    """Nq = Nk = N, Br = Bc = T: n(n+1)/2 of n² tiles (n = N/T) computed, n masked — about
    half for large N: §34's ~2× less work."""
    n_tiles, T = 32, 8
    N = n_tiles * T
    q, k, v = _qkv(rng, 1, 1, N, N, 1)
    stats = {}
    flash_attention_tiled(q, k, v, T, T, causal=True, stats=stats)
    assert stats["computed"] == n_tiles * (n_tiles + 1) // 2
    assert stats["skipped"] == n_tiles * (n_tiles - 1) // 2 > 0
    assert stats["masked"] == n_tiles                    # only the diagonal tiles are masked
    assert 0.5 < stats["computed"] / stats["total"] < 0.52
    plain = {}
    flash_attention_tiled(q, k, v, T, T, stats=plain)
    assert plain == dict(stats, computed=n_tiles**2, skipped=0, masked=0)


def test_causal_tile_visits_follow_the_lesson(rng):
    """§34: Q tile 0 visits K tile 0, Q tile 1 K tiles 0–1, Q tile 2 K tiles 0–2; only the
    diagonal tile of each is masked."""
    q, k, v = _qkv(rng, 1, 1, 12, 12, 2)
    trace = []
    flash_attention_tiled(q, k, v, 4, 4, causal=True, trace=trace)
    assert [(t["i"], t["j"], t["masked"]) for t in trace] == [
        (0, 0, True),
        (1, 0, False), (1, 1, True),
        (2, 0, False), (2, 1, False), (2, 2, True),
    ]
    assert trace[0]["m"].shape == (1, 1, 4)


def test_stats_and_trace_types_are_checked(rng):
    q, k, v = _qkv(rng, 1, 1, 2, 2, 2)
    with pytest.raises(TypeError, match="stats"):
        flash_attention_tiled(q, k, v, 1, 1, stats=[])
    with pytest.raises(TypeError, match="trace"):
        flash_attention_tiled(q, k, v, 1, 1, trace={})


# ---------------------------------------------------------------------------------------------
# §35: key padding mask
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_key_padding_mask(rng, causal):
    """Batch of 3 sequences: row 0 partly padded, row 1 with no valid key, row 2 unpadded."""
    b, h, nq, nk = 3, 2, 6, 9
    q, k, v = _qkv(rng, b, h, nq, nk, 5)
    mask = np.ones((b, nk), bool)
    mask[0, [1, 4, 8]] = False
    mask[1] = False
    want_o, want_lse = _brute_force(q, k, v, causal, key_padding_mask=mask)
    results = [attention(q, k, v, causal=causal, key_padding_mask=mask)]
    results += [flash_attention_tiled(q, k, v, Br, Bc, causal=causal, key_padding_mask=mask)
                for Br, Bc in [(1, 1), (4, 4), (6, 9), (2, 5)]]
    for o, lse in results:
        assert np.all(o[1] == 0.0) and np.all(lse[1] == -np.inf)
        assert not np.any(np.isnan(o)) and not np.any(np.isnan(lse))
        _close(o, want_o)
        _close(lse, want_lse)
    _close(attention_per_query(q, k, v, causal=causal, key_padding_mask=mask), want_o)
    # Not causal: a padded sequence is the same as the sequence with those keys removed
    if not causal:
        keep = mask[0]
        o_cut, lse_cut = attention(q[:1], k[:1, :, keep], v[:1, :, keep])
        _close(results[0][0][:1], o_cut)
        _close(results[0][1][:1], lse_cut)


@pytest.mark.parametrize("causal", [False, True])
def test_tiled_dropout_equals_the_untiled_oracle(rng, causal):
    """§36 in the tiled oracle: l sums the un-dropped P, acc takes P∘Z — the same O and lse as
    the untiled oracle with the same keep-mask, for tiles that divide nothing; and lse is the
    one without dropout (only O changes)."""
    from flashlesson.reference.philox import dropout_keep_mask
    b, h, nq, nk, p = 2, 2, 7, 11, 0.4
    q, k, v = _qkv(rng, b, h, nq, nk, 5)
    mask = dropout_keep_mask(7, b, h, nq, nk, p)
    mask[0, 0, -1] = False                      # the last row drops everything it sees but key 0
    mask[0, 0, -1, 0] = True
    pad = np.ones((b, nk), bool)
    pad[1, 3:6] = False
    want_o, want_lse = attention(q, k, v, causal=causal, key_padding_mask=pad,
                                 dropout_mask=mask, dropout_p=p)
    plain_o, plain_lse = attention(q, k, v, causal=causal, key_padding_mask=pad)
    for Br, Bc in [(1, 1), (3, 4), (7, 11), (2, 5)]:
        o, lse = flash_attention_tiled(q, k, v, Br, Bc, causal=causal, key_padding_mask=pad,
                                       dropout_mask=mask, dropout_p=p)
        _close(o, want_o)
        _close(lse, want_lse)
        _close(lse, plain_lse)                  # l took the whole P: the LSE ignores dropout
        assert np.max(np.abs(o - plain_o)) > 1e-3
    with pytest.raises(ValueError, match="dropout_mask"):
        flash_attention_tiled(q, k, v, 2, 2, dropout_p=p)


def test_key_padding_mask_one_d_for_every_sequence(rng):
    q, k, v = _qkv(rng, 2, 2, 4, 6, 3)
    keep = np.array([True, False, True, True, False, True])
    o1, lse1 = attention(q, k, v, key_padding_mask=keep)
    o2, lse2 = attention(q, k, v, key_padding_mask=np.stack([keep, keep]))
    _close(o1, o2)
    _close(lse1, lse2)
    _close(flash_attention_tiled(q, k, v, 3, 4, key_padding_mask=keep)[0], o1)


# ---------------------------------------------------------------------------------------------
# §21–22: states and their merges
# ---------------------------------------------------------------------------------------------

def test_state_normalizes_to_attention(rng):
    q, k, v = _qkv(rng, 2, 2, 5, 7, 4)
    m, l, acc = attention_state(q, k, v, causal=True)
    o, lse = attention(q, k, v, causal=True)
    _close(acc / l[..., None], o)                         # §21: o = a / l
    _close(m + np.log(l), lse)
    _close(m, np.where(causal_mask(5, 7), _scores(q, k), -np.inf).max(-1))   # m = max_j s_j


def _random_key_split(rng, nk, parts):
    """Assign each key to one of ``parts`` disjoint sets (not contiguous); returns bool masks."""
    owner = rng.integers(0, parts, size=nk)
    return [owner == p for p in range(parts)]


@pytest.mark.parametrize("parts", [2, 3, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_merge_states_equals_state_of_union(rng, parts, causal):
    q, k, v = _qkv(rng, 2, 2, 6, 13, 4)
    masks = _random_key_split(rng, 13, parts)
    m, l, acc = (np.full((2, 2, 6), -np.inf), np.zeros((2, 2, 6)), np.zeros((2, 2, 6, 4)))
    for mask in masks:                                   # fold the parts in, left to right
        m, l, acc = merge_states(m, l, acc,
                                 *attention_state(q, k, v, causal, key_padding_mask=mask))
    m_all, l_all, acc_all = attention_state(q, k, v, causal)
    np.testing.assert_array_equal(m, m_all)
    _close(l, l_all)
    _close(acc, acc_all)


def test_merge_states_contiguous_halves_and_identity(rng):
    """§22 with A = keys 0..4, B = keys 5..10 computed on their own (no mask): the merge is the
    state of the concatenation; the empty state is the identity; the merge is commutative."""
    q, k, v = _qkv(rng, 1, 2, 4, 11, 3)
    a = attention_state(q, k[:, :, :5], v[:, :, :5])
    b = attention_state(q, k[:, :, 5:], v[:, :, 5:])
    whole = attention_state(q, k, v)
    for got in (merge_states(*a, *b), merge_states(*b, *a)):
        for x, y in zip(got, whole):
            _close(x, y)
    empty = (np.full((1, 2, 4), -np.inf), np.zeros((1, 2, 4)), np.zeros((1, 2, 4, 3)))
    for got in (merge_states(*a, *empty), merge_states(*empty, *a)):
        for x, y in zip(got, a):
            np.testing.assert_array_equal(x, y)          # exactly: e^0 · x + 0
    m, l, acc = merge_states(*empty, *empty)
    assert np.all(m == -np.inf) and np.all(l == 0) and np.all(acc == 0)


def test_merge_states_section_33():
    """§33's numbers as a §22 merge: states of [2, 1] and [4, 3] with v = identity."""
    q, k, v = np.array([[1.0]]), np.array([[2.0], [1.0], [4.0], [3.0]]), np.eye(4)
    a = attention_state(q, k[:2], v[:2], scale=1.0)
    b = attention_state(q, k[2:], v[2:], scale=1.0)
    np.testing.assert_allclose(a[1], [1 + E**-1], rtol=1e-15)    # l_1, relative to m_1 = 2
    m, l, acc = merge_states(*a, *b)                              # acc: [Nq, 4], one per key
    assert m[0] == 4.0
    np.testing.assert_allclose(l, [E**-2 * (1 + E**-1) + 1 + E**-1], rtol=1e-15)
    np.testing.assert_allclose(acc[0], [E**-2, E**-3, 1.0, E**-1], rtol=1e-15)


@pytest.mark.parametrize("parts", [2, 3, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_merge_attention_equals_full_attention(rng, parts, causal):
    """Split-KV: each part is attention over a disjoint subset of the keys (a padding mask,
    so causal positions stay global); merging the (o, lse) of the parts gives the whole."""
    q, k, v = _qkv(rng, 2, 2, 7, 15, 4)
    masks = _random_key_split(rng, 15, parts)
    o_parts, lse_parts = zip(*(attention(q, k, v, causal, key_padding_mask=m) for m in masks))
    o, lse = merge_attention(o_parts, lse_parts)
    o_all, lse_all = attention(q, k, v, causal)
    _close(o, o_all)
    _close(lse, lse_all)


def test_merge_attention_contiguous_chunks(rng):
    """The flash-decoding layout: keys cut into contiguous chunks, each chunk its own call."""
    q, k, v = _qkv(rng, 1, 3, 2, 20, 8)
    cuts = [0, 3, 4, 12, 20]
    o_parts, lse_parts = zip(*(attention(q, k[:, :, a:b], v[:, :, a:b])
                               for a, b in zip(cuts, cuts[1:])))
    o, lse = merge_attention(np.stack(o_parts), np.stack(lse_parts))
    o_all, lse_all = attention(q, k, v)
    _close(o, o_all)
    _close(lse, lse_all)


def test_merge_attention_with_empty_parts(rng):
    q, k, v = _qkv(rng, 1, 2, 4, 9, 3)
    none = np.zeros(9, bool)
    part = attention(q, k, v, key_padding_mask=none)
    assert np.all(part[1] == -np.inf) and np.all(part[0] == 0)
    whole = attention(q, k, v)
    # an empty part contributes nothing — even with garbage (finite) values in its o
    garbage = (np.full_like(part[0], 123.0), part[1])
    for empty in (part, garbage):
        o, lse = merge_attention([empty[0], whole[0]], [empty[1], whole[1]])
        _close(o, whole[0])
        np.testing.assert_array_equal(lse, whole[1])
    # all parts empty: o = 0, lse = −inf, no NaN
    o, lse = merge_attention([part[0], part[0]], [part[1], part[1]])
    assert np.all(o == 0) and np.all(lse == -np.inf)
    # zero parts: the same
    o, lse = merge_attention(np.zeros((0, 4, 3)), np.zeros((0, 4)))
    assert o.shape == (4, 3) and np.all(o == 0) and np.all(lse == -np.inf)
    # and some rows empty, others not (causal Nq > Nk, merged with itself split in two)
    q2, k2, v2 = _qkv(rng, 1, 1, 6, 4, 3)
    halves = [np.arange(4) < 2, np.arange(4) >= 2]
    parts = [attention(q2, k2, v2, True, key_padding_mask=h) for h in halves]
    o, lse = merge_attention([p[0] for p in parts], [p[1] for p in parts])
    o_all, lse_all = attention(q2, k2, v2, True)
    _close(o, o_all)
    _close(lse, lse_all)
    assert np.all(lse[..., :2] == -np.inf) and np.all(o[..., :2, :] == 0)


def test_merge_rejects_bad_states():
    with pytest.raises(ValueError, match="m_a"):
        merge_states(np.inf, 1.0, np.zeros(2), 0.0, 1.0, np.zeros(2))
    with pytest.raises(ValueError, match="m_b"):
        merge_states(0.0, 1.0, np.zeros(2), np.nan, 1.0, np.zeros(2))
    with pytest.raises(ValueError, match="lse_parts"):
        merge_attention(np.zeros((2, 3, 4)), np.array([[0.0, 0, 0], [np.nan, 0, 0]]))
    with pytest.raises(ValueError, match="same leading axes"):
        merge_attention(np.zeros((2, 3, 4)), np.zeros((2, 4)))


# ---------------------------------------------------------------------------------------------
# Errors name the argument
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("f", [
    lambda q, k, v, **kw: attention(q, k, v, **kw),
    lambda q, k, v, **kw: attention_per_query(q, k, v, **kw),
    lambda q, k, v, **kw: flash_attention_tiled(q, k, v, 2, 2, **kw),
], ids=["attention", "per_query", "tiled"])
def test_bad_inputs_raise(rng, f):
    q, k, v = _qkv(rng, 2, 2, 3, 4, 5)
    with pytest.raises(ValueError, match="4-D"):
        f(q[0], k[0], v[0])                              # 3-D
    with pytest.raises(ValueError, match="4-D"):
        f(q, k[0, 0], v[0, 0])                           # ranks differ
    with pytest.raises(ValueError, match="batch and head"):
        f(q, k[:1], v[:1])
    with pytest.raises(ValueError, match="number of keys"):
        f(q, k, v[:, :, :3])
    with pytest.raises(ValueError, match="head dimension"):
        f(q, k[..., :4], v)
    with pytest.raises(ValueError, match="≥ 1"):
        f(q[..., :0], k[..., :0], v)
    with pytest.raises(TypeError, match="q must hold real"):
        f(q.astype(complex), k, v)
    bad = q.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="q holds NaN"):
        f(bad, k, v)
    with pytest.raises(TypeError, match="scale"):
        f(q, k, v, scale="1")
    with pytest.raises(ValueError, match="scale"):
        f(q, k, v, scale=float("inf"))
    with pytest.raises(TypeError, match="key_padding_mask"):
        f(q, k, v, key_padding_mask=np.ones((2, 4), int))
    with pytest.raises(ValueError, match="key_padding_mask"):
        f(q, k, v, key_padding_mask=np.ones((2, 5), bool))
    with pytest.raises(ValueError, match="key_padding_mask"):
        f(q[0, 0], k[0, 0], v[0, 0], key_padding_mask=np.ones((1, 4), bool))


def test_bad_tile_sizes_raise(rng):
    q, k, v = _qkv(rng, 1, 1, 3, 4, 5)
    with pytest.raises(ValueError, match="Br"):
        flash_attention_tiled(q, k, v, 0, 2)
    with pytest.raises(TypeError, match="Bc"):
        flash_attention_tiled(q, k, v, 2, 1.5)
    with pytest.raises(TypeError, match="Bc"):
        flash_attention_tiled(q, k, v, 2, True)


# ---------------------------------------------------------------------------------------------
# §15–16, §25, §28, §49: cost models
# ---------------------------------------------------------------------------------------------

def test_attention_flops():
    assert attention_flops(2, 8, 1024, 1024, 64) == 4 * 2 * 8 * 1024 * 1024 * 64
    assert attention_flops(2, 8, 1024, 1024, 64, causal=True) == 2 * 2 * 8 * 1024 * 1024 * 64
    assert isinstance(attention_flops(1, 1, 3, 5, 7, causal=True), int)
    # §28: still O(N²d): doubling N quadruples the count
    assert attention_flops(1, 1, 2048, 2048, 64) == 4 * attention_flops(1, 1, 1024, 1024, 64)
    with pytest.raises(ValueError, match="nq"):
        attention_flops(1, 1, -1, 2, 3)


def test_section_15_sizes():
    """§15: N = 4096 → 16 777 216 scores, 32 MiB in FP16 per head; 32 heads ≈ 1 GiB."""
    naive = naive_attention_bytes(1, 32, 4096, 4096, 64, dtype_bytes=2)
    assert naive["S_bytes"] == 4096 * 4096 * 2 == 32 * 2**20
    assert naive["write_S"] == 32 * naive["S_bytes"] == 2**30
    assert naive["total"] == 32 * 2 * (2 * 4096 * 64 + 2 * 4096 * 64 + 4 * 4096 * 4096)
    assert naive["total"] == sum(v for key, v in naive.items() if key not in ("total", "S_bytes"))


def test_flash_bytes_and_the_section_25_saving():
    b, h, n, d = 2, 4, 1024, 64
    flash = flash_attention_bytes(b, h, n, n, d, dtype_bytes=2)
    assert flash["total"] == b * h * (4 * n * d * 2 + n * 4)        # Q, K, V, O once + LSE fp32
    assert flash_attention_bytes(b, h, n, n, d, lse_bytes=0)["total"] == b * h * 4 * n * d * 2
    tiled = flash_attention_bytes(b, h, n, n, d, dtype_bytes=2, Br=128)
    assert tiled["read_K"] == tiled["read_V"] == 8 * b * h * n * d * 2   # ceil(1024/128) passes
    naive = naive_attention_bytes(b, h, n, n, d, dtype_bytes=2)
    # what §25 says flash removes: S and P written and read once each
    removed = naive["write_S"] + naive["read_S"] + naive["write_P"] + naive["read_P"]
    assert naive["total"] - removed == flash_attention_bytes(b, h, n, n, d, lse_bytes=0)["total"]


def test_state_sizes_section_49():
    s = attention_state_sizes(4096, 64)
    assert s["flash_row_values"] == 66 and s["p_row_values"] == 4096
    assert s["flash_row_bytes"] == 66 * 4 and s["p_row_bytes"] == 4096 * 4
    assert s["flash_head_bytes"] == 4096 * 66 * 4 and s["p_head_bytes"] == 4096**2 * 4
    assert s["ratio"] == pytest.approx(4096 / 66)
    assert attention_state_sizes(128, 64, dtype_bytes=2)["flash_row_bytes"] == 132
    with pytest.raises(ValueError, match="d"):
        attention_state_sizes(10, 0)
