"""Attention forward (§12–§14, §23–§24, §32, §34) and the merge of partial results (§22): both
methods against the float64 oracle, on shapes that break tiling; outputs NaN-poisoned.

Tiny shapes in the simulator, bigger ones on the GPU. Relative error in float32 ≤ 1e-5 (the
issue's bar), measured as max|o − o_ref| / max|o_ref| per case.
"""

import numpy as np
import pytest
from conftest import GPU, SIM, by_device, check_attention
from numba import cuda

import flashlesson
from flashlesson import FlashConfig, LessonConfig, attention, merge_attention
from flashlesson import attention_methods as attn_module
from flashlesson.tolerance import attention_tol, merge_tol
from flashlesson.reference import attention as ref_attention

METHODS = list(flashlesson.attention_methods.FP32_METHODS)   # flash_tc: test_attention_tc.py
# (method, tier): every fast method, and the lesson tier's flash kernel
# (kernels_numba/lesson/attention.py; its naive path differs from the fast one only in the
# softmax, tested in test_softmax.py, and runs in test_attention_masks.py)
TIERED = [(m, "fast") for m in METHODS] + [("flash", "lesson")]

# (B, H, Nq, Nk, d): N = 1, N < tile, N not a multiple of any tile, Nq ≠ Nk both ways.
# (Simulator: 20 × 20 with one head; B = 2 at 17 × 5 gives the kernels more than one (batch,
# head) — they see B·H flattened, so two batch rows or two heads take the same path.)
SHAPES = by_device(
    [(1, 1, 1, 1, 1), (1, 1, 20, 20, 16), (2, 1, 17, 5, 80), (1, 1, 5, 33, 96), (1, 1, 33, 17, 3)],
    [(1, 1, 1, 1, 1), (2, 3, 100, 100, 64), (1, 2, 257, 130, 80), (1, 2, 77, 300, 96),
     (2, 2, 129, 129, 128), (1, 2, 200, 65, 256), (1, 1, 1000, 1000, 64), (1, 2, 33, 17, 3),
     (1, 1, 4097, 4097, 64)])


def _qkv(rng, B, H, nq, nk, d, outliers=False):
    q = rng.standard_normal((B, H, nq, d)).astype(np.float32)
    k = rng.standard_normal((B, H, nk, d)).astype(np.float32)
    v = rng.standard_normal((B, H, nk, d)).astype(np.float32)
    if outliers:                       # a few scores far above the rest: e^{S} would overflow
        q[..., 0, :] *= 30
        k[..., -1, :] *= 30
    return q, k, v


def _run_poisoned(q, k, v, **kw):
    """Device in → device out, so the outputs can be checked for unwritten elements: the
    kernel's own outputs are fresh device arrays, and any NaN left in them fails below."""
    o, lse = attention(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v),
                       return_lse=True, **kw)
    return o.copy_to_host(), lse.copy_to_host()


def _check(o, lse, q, k, v, causal, scale=None):
    check_attention(o, lse, *ref_attention(q, k, v, causal=causal, scale=scale), q, k, v,
                    scale=scale)


@pytest.mark.parametrize("method, tier", TIERED)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_oracle(method, tier, causal, shape, rng):
    q, k, v = _qkv(rng, *shape)
    o, lse = _run_poisoned(q, k, v, causal=causal, method=method, tier=tier)
    _check(o, lse, q, k, v, causal)


@pytest.mark.parametrize("method, tier", TIERED)
def test_outliers_and_scale(method, tier, rng):
    q, k, v = _qkv(rng, *by_device((1, 1, 24, 19, 8), (1, 2, 24, 19, 8)), outliers=True)
    o, lse = _run_poisoned(q, k, v, method=method, scale=0.7, tier=tier)
    _check(o, lse, q, k, v, False, scale=0.7)


@pytest.mark.parametrize("method, tier", TIERED)
def test_rows_that_see_no_key(method, tier, rng):
    """Causal with Nq > Nk: query i sees keys j ≤ i + Nk − Nq; the first Nq − Nk see none and
    give O = 0, LSE = −inf (never NaN)."""
    q, k, v = _qkv(rng, 1, 1, 21, 4, 5)
    o, lse = _run_poisoned(q, k, v, causal=True, method=method, tier=tier)
    assert np.all(o[0, 0, :17] == 0) and np.all(np.isneginf(lse[0, 0, :17]))
    _check(o, lse, q, k, v, True)


@pytest.mark.parametrize("config", by_device(
    [FlashConfig(64, 16, 16, 4), FlashConfig(16, 32, 4, 8), FlashConfig(32, 64, 8, 4),
     FlashConfig(8, 64, 2, 16)],
    [FlashConfig(64, 64, 16, 8), FlashConfig(128, 64, 32, 8), FlashConfig(64, 32, 16, 8),
     FlashConfig(128, 64, 16, 8), FlashConfig(64, 64, 8, 8), FlashConfig(128, 32, 32, 4),
     FlashConfig(32, 64, 8, 16)]),
    ids=str)
def test_flash_configs(config, rng):
    """Tile sizes and thread layouts other than the default give the same answer."""
    q, k, v = _qkv(rng, 1, 1, 37, 45, 24)
    for causal in (False, True):
        o, lse = _run_poisoned(q, k, v, causal=causal, config=config)
        _check(o, lse, q, k, v, causal)


@pytest.mark.parametrize("config", [LessonConfig(2, 2), LessonConfig(5, 3), LessonConfig(33, 7),
                                    LessonConfig(1, 64)], ids=str)
def test_lesson_tiles(config, rng):
    """The lesson kernel takes any Br (threads) and Bc, the lesson's own (§33: Bc = 2)
    included; tiles that divide nothing, and tiles wider than Nk."""
    q, k, v = _qkv(rng, 1, 1, 11, 13, 6)
    for causal in (False, True):
        o, lse = _run_poisoned(q, k, v, causal=causal, config=config, tier="lesson")
        _check(o, lse, q, k, v, causal)


def test_lesson_trace_is_the_oracles_trace(rng):
    """§33: the lesson kernel's (m, l) after each K/V tile equal the tiled oracle's, tile by
    tile (causal: the tiles a Q tile skips are left NaN); bounds from the error model's LSE
    bound (m and ln l each move by less than it)."""
    from flashlesson.attention_methods import attention_trace
    from flashlesson.reference import flash_attention_tiled
    q, k, v = _qkv(rng, 1, 2, 7, 9, 5)
    for causal in (False, True):
        o, lse, trace = attention_trace(q, k, v, config=LessonConfig(3, 2), causal=causal)
        want = []
        flash_attention_tiled(q, k, v, 3, 2, causal=causal, trace=want)
        seen = np.zeros(trace.shape[:4], bool)
        bound = float(np.max(attention_tol(q, k, v).lse))
        for t in want:
            r0, r1 = t["rows"]
            got_m, got_l = trace[:, :, r0:r1, t["j"], 0], trace[:, :, r0:r1, t["j"], 1]
            fin = np.isfinite(t["m"])
            np.testing.assert_array_equal(np.isneginf(got_m), ~fin)
            assert np.all(np.abs(got_m[fin] - t["m"][fin]) <= bound)
            assert np.all(np.abs(np.log(got_l[fin]) - np.log(t["l"][fin])) <= bound)
            seen[:, :, r0:r1, t["j"]] = True
        assert np.all(np.isnan(trace[~seen])), "a tile the oracle skipped was traced"


def test_host_arrays_in_host_arrays_out(rng):
    q, k, v = _qkv(rng, 1, 2, 9, 11, 4)
    o = attention(q, k, v)
    assert isinstance(o, np.ndarray) and o.shape == q.shape and o.dtype == np.float32
    o2, lse = attention(q, k, v, return_lse=True, method="naive")
    assert isinstance(lse, np.ndarray) and lse.shape == q.shape[:3]
    assert np.all(np.abs(o - o2) <= 2 * attention_tol(q, k, v).o)     # each within its bound


@pytest.mark.skipif(SIM, reason="GPU: torch CUDA tensors in, torch tensors out, vs SDPA")
def test_torch_tensors_and_sdpa():
    torch = pytest.importorskip("torch")
    q, k, v = (torch.randn(2, 4, 300, 64, device="cuda") for _ in range(3))
    o = attention(q, k, v, causal=True)
    assert isinstance(o, torch.Tensor) and o.dtype == torch.float32 and o.shape == q.shape
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                            is_causal=True)
    tol = attention_tol(*(x.cpu().numpy() for x in (q, k, v)))
    assert np.all(np.abs(o.cpu().numpy() - want.cpu().numpy()) <= tol.o)


# --- §22: merge of partial results --------------------------------------------------------
@pytest.mark.parametrize("parts", [1, 2, 3])
def test_merge_of_disjoint_key_sets_equals_full_attention(parts, rng):
    q, k, v = _qkv(rng, 1, 2, 13, 30, 8)
    cuts = np.linspace(0, 30, parts + 1).astype(int)
    os_, ls_ = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        o, lse = attention(q, k[..., a:b, :], v[..., a:b, :], return_lse=True)
        os_.append(o)
        ls_.append(lse)
    o, lse = merge_attention(np.stack(os_), np.stack(ls_))
    _check(o, lse, q, k, v, False)


def test_merge_ignores_empty_parts():
    o_parts = np.array([[[1.0, 2.0]], [[np.nan, 5.0]]], np.float32)     # part 2 saw no key
    lse_parts = np.array([[0.5], [-np.inf]], np.float32)
    o, lse = merge_attention(o_parts, lse_parts)
    np.testing.assert_array_equal(o, [[1.0, 2.0]])
    assert lse[0] == np.float32(0.5)
    o, lse = merge_attention(o_parts[1:], lse_parts[1:])
    assert np.all(o == 0) and np.isneginf(lse[0])


def test_merge_matches_oracle(rng):
    from flashlesson.reference import merge_attention as ref_merge
    o_parts = rng.standard_normal((3, 2, 5, 7)).astype(np.float32)
    lse_parts = (rng.standard_normal((3, 2, 5)) * 4).astype(np.float32)
    # the known cancellation: three parts of −ln 3 merge to lse ≈ 0 = M + ln Σ — a sum of
    # two numbers of size |M|, so its error is ulps of |M| (in the model's bound), not of lse
    lse_parts[:, 0, 0] = -np.log(3.0)
    o, lse = merge_attention(o_parts, lse_parts)
    o_ref, lse_ref = ref_merge(o_parts, lse_parts)
    tol = merge_tol(o_parts, lse_parts)      # flashlesson.tolerance's bound, per element
    assert np.all(np.abs(o - o_ref) <= tol.o)
    assert np.all(np.abs(lse - lse_ref) <= tol.lse)
    assert abs(lse_ref[0, 0]) < 1e-6       # (the case is there: float32(−ln 3) ≈ −ln 3)


# --- bad input ------------------------------------------------------------------------------
def test_bad_inputs():
    z = np.zeros((1, 1, 4, 8), np.float32)
    with pytest.raises(ValueError, match="method: expected one of"):
        attention(z, z, z, method="fast")
    with pytest.raises(TypeError, match="q: dtype float64"):
        attention(z.astype(np.float64), z, z)
    with pytest.raises(ValueError, match="q: expected a 4-D array"):
        attention(z[0], z, z)
    with pytest.raises(ValueError, match="head dimension must be q's d = 8"):
        attention(z, np.zeros((1, 1, 4, 7), np.float32), z)
    with pytest.raises(ValueError, match="batch and heads must match"):
        attention(z, np.zeros((2, 1, 4, 8), np.float32), z)
    with pytest.raises(ValueError, match="v: must have as many keys"):
        attention(z, z, np.zeros((1, 1, 5, 8), np.float32))
    with pytest.raises(ValueError, match="d = 300 is not supported"):
        w = np.zeros((1, 1, 2, 300), np.float32)
        attention(w, w, w)
    e = np.zeros((1, 1, 0, 8), np.float32)      # no query: an empty result, as torch
    assert attention(e, z, z).shape == (1, 1, 0, 8)     # (tests/test_edge_documented.py)
    with pytest.raises(ValueError, match="scale: expected a finite"):
        attention(z, z, z, scale=float("inf"))
    with pytest.raises(TypeError, match="all three must be NumPy arrays or all three device"):
        attention(z, cuda.to_device(z), z)
    with pytest.raises(ValueError, match="must be a multiple of 4·TR"):
        attention(z, z, z, config=FlashConfig(Br=10, Bc=32, TR=4, TC=8))
    with pytest.raises(ValueError, match="only method 'flash' takes a configuration"):
        attention(z, z, z, method="naive", config=FlashConfig(32, 16, 8, 4))
    with pytest.raises(ValueError, match="lse_parts: expected shape"):
        merge_attention(np.zeros((2, 3, 4), np.float32), np.zeros((2, 4), np.float32))


def test_config_too_big_for_shared_memory():
    cfg = FlashConfig(Br=256, Bc=256, TR=32, TC=32)
    with pytest.raises(ValueError, match="bytes of shared memory"):
        cfg.check(256)


@pytest.mark.skipif(SIM, reason="GPU: the opt-in above 48 KB of shared memory")
def test_default_configs_above_48kb_launch(rng):
    for d in (64, 128, 256):
        cfg = attn_module.default_config(d)
        q, k, v = _qkv(rng, 1, 1, 70, 70, d)
        o, lse = _run_poisoned(q, k, v)
        _check(o, lse, q, k, v, False)
        assert cfg.smem_bytes(d) > 0


@pytest.mark.skipif(not GPU, reason="GPU: B1 H1 N65536 d64 must run with flash (§29)")
def test_long_sequence_runs_with_flash(rng):
    n = 65536
    q, k, v = (cuda.to_device(rng.standard_normal((1, 1, n, 64)).astype(np.float32))
               for _ in range(3))
    o, lse = attention(q, k, v, causal=True, return_lse=True)
    o = o.copy_to_host()
    assert np.isfinite(o).all()
    # spot-check a few rows against the oracle (a full float64 oracle at 65536² is too big)
    rows = [0, 1, 4095, n - 1]
    qh = q.copy_to_host()[:, :, rows]
    kh, vh = k.copy_to_host(), v.copy_to_host()
    for idx, r in enumerate(rows):
        o_ref, _ = ref_attention(qh[:, :, idx:idx + 1], kh[:, :, :r + 1], vh[:, :, :r + 1])
        tol = attention_tol(qh[:, :, idx:idx + 1], kh[:, :, :r + 1], vh[:, :, :r + 1])
        assert np.all(np.abs(o[0, 0, r] - o_ref[0, 0, 0]) <= tol.o[0, 0, 0])
