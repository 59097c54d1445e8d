"""Every softmax method of the registry (§1–§11, §18–§20) against the float64 oracle.

The method list comes from ``flashlesson.SOFTMAX_METHODS``, the same registry the dispatcher,
the CLI and docs/methods.md read. Outputs are device arrays filled with NaN before each launch, so an
element a kernel forgets to write fails the comparison. Tiny shapes in the simulator, bigger on
the GPU (``by_device``).
"""

import numpy as np
import pytest
from conftest import GPU, SIM, by_device
from numba import cuda

import flashlesson
from flashlesson import SOFTMAX_METHODS, softmax
from flashlesson import softmax_methods as sm
from flashlesson.reference import softmax_naive, softmax_stable

METHODS = list(SOFTMAX_METHODS)
# Row lengths that break tiling: 1, below/at/above a warp, not a multiple of 32, above 1024.
NS = by_device([1, 2, 31, 32, 33, 100, 1000, 1025],
               [1, 2, 31, 32, 33, 100, 1000, 1025, 2047, 4096, 12000, 32768, 40000])
ROWS = by_device(3, 67)
# The warp methods put several rows in a block: three rows leave the simulator's last block
# part-empty. The others run one row a block; two rows (two blocks) check that mapping as well.
PACKED = ("warp", "warp_multi")


def _n_rows(method, rows=ROWS):
    return rows if method in PACKED else by_device(2, rows)


# float32: the relative bar holds for every element (no cancellation; e^x errs by a few ulps
# relative), so the absolute floor only covers values near float32's smallest normals.
TOL = {np.float32: dict(rtol=2e-5, atol=1e-12), np.float16: dict(rtol=3e-3, atol=3e-5)}


def _takes(method, n):
    m = SOFTMAX_METHODS[method]
    if m.max_n is not None and n > m.max_n:
        return False
    if method == "block" and SIM and n > 32 * 64:      # the simulator runs 64-thread blocks
        return False
    return True


def _rows(rng, rows, n):
    """Random scores ×3 with one outlier per row (+5), so the max is not where chance puts it.
    The outlier stays small: at +30 every other output (~e^{−30}) would sit below the absolute
    tolerance, and the comparison would check one value per row."""
    x = rng.standard_normal((rows, n)) * 3
    x[np.arange(rows), rng.integers(0, n, rows)] += 5
    return x


def run_poisoned(x, method, threads=None, tier="fast"):
    """Launch on device arrays, the output pre-filled with NaN; return the result on the host."""
    x_dev = cuda.to_device(x)
    out = cuda.to_device(np.full(x.shape, np.nan, dtype=x.dtype))
    got = softmax(x_dev, method=method, out=out, threads=threads, tier=tier)
    assert got is out or got.shape == x.shape
    return out.copy_to_host()


def expected(x, method):
    if method == "naive":   # §1's formula, in float64: equal to the stable one for these inputs
        return softmax_naive(x.astype(np.float64))
    return softmax_stable(x.astype(np.float64))


def _cases(methods, ns):
    """Every (method, N) the method takes; its limit itself is tested by the error tests."""
    return [(m, n) for m in methods for n in ns if _takes(m, n)]


# The lesson tier (kernels_numba/lesson/softmax.py): every method that has a lesson kernel, on
# fewer row lengths in the simulator (1, a warp ± 1, not a multiple of 32, > 1024).
LESSON_METHODS = list(sm.LESSON_METHODS)
LESSON_NS = by_device([1, 31, 33, 1025], NS)
TIER_CASES = ([(m, n, "fast") for m, n in _cases(METHODS, NS)] +
              [(m, n, "lesson") for m, n in _cases(LESSON_METHODS, LESSON_NS)])


@pytest.mark.parametrize("method, n, tier", TIER_CASES)
def test_method_matches_oracle_fp32(method, n, tier, rng):
    x = _rows(rng, _n_rows(method), n)
    if method == "naive":
        x = rng.standard_normal(x.shape)            # §1 overflows past 88: keep it in range
    x = x.astype(np.float32)
    got = run_poisoned(x, method, tier=tier)
    np.testing.assert_allclose(got, expected(x, method), **TOL[np.float32])


@pytest.mark.parametrize("method, n, tier", [
    (m, n, "fast") for m, n in _cases([m for m in METHODS if m != "naive"],
                                      by_device([33, 1000], [33, 1000, 4096, 32768]))] +
    [(m, n, "lesson") for m, n in _cases(LESSON_METHODS, by_device([33], [33, 4096]))])
def test_method_matches_oracle_fp16(method, n, tier, rng):
    x = _rows(rng, _n_rows(method), n).astype(np.float16)
    got = run_poisoned(x, method, tier=tier)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), softmax_stable(x.astype(np.float64)),
                               **TOL[np.float16])


@pytest.mark.parametrize("tier", ["fast", "lesson"])
@pytest.mark.parametrize("method", [m for m in METHODS if m != "naive"])
def test_special_rows(method, tier):
    """§2 outliers give exact values; −inf entries give 0; an all −inf row gives zeros; a NaN
    anywhere makes its row NaN."""
    n = 40 if _takes(method, 40) else 20
    x = np.zeros((5, n), np.float32)
    x[0, :3] = [1000, 999, 998]
    x[0, 3:] = -np.inf
    x[1] = np.linspace(-5, 5, n)
    x[1, ::3] = -np.inf
    x[2] = -np.inf
    x[3] = np.linspace(-1, 1, n)
    x[3, n // 2] = np.nan
    x[4] = np.linspace(-3, 2, n)
    got = run_poisoned(x, method, tier=tier)
    e = np.exp(-np.arange(3.0))
    np.testing.assert_allclose(got[0, :3], e / e.sum(), rtol=2e-6)
    assert np.all(got[0, 3:] == 0)
    np.testing.assert_allclose(got[1], softmax_stable(x[1].astype(np.float64)), **TOL[np.float32])
    assert np.all(got[1, ::3] == 0)
    assert np.all(got[2] == 0), "an all −inf row must give zeros, not NaN"
    assert np.all(np.isnan(got[3])), "a NaN in a row must make the whole row NaN"
    np.testing.assert_allclose(got[4], softmax_stable(x[4].astype(np.float64)), **TOL[np.float32])


def test_naive_overflows_like_section_1():
    """§1: e^1000 is inf in float32, inf/inf is NaN: the naive kernel shows it."""
    x = np.array([[1000, 999, 998], [1, 2, 3]], np.float32)
    got = run_poisoned(x, "naive")
    assert np.all(np.isnan(got[0]))
    assert np.all(np.isnan(softmax_naive(x[0], dtype=np.float32)))
    np.testing.assert_allclose(got[1], softmax_stable(x[1].astype(np.float64)), rtol=2e-5)


@pytest.mark.parametrize("method", ["auto", "warp_multi", "online"])
def test_host_arrays_any_rank(method, rng):
    """NumPy in → NumPy out, any rank ≥ 1; the softmax axis is the last one."""
    for shape in [(7,), (2, 3, 33), (1, 1, 1, 5)]:
        x = rng.standard_normal(shape).astype(np.float32)
        got = softmax(x, method=method)
        assert isinstance(got, np.ndarray) and got.shape == shape and got.dtype == np.float32
        np.testing.assert_allclose(got, softmax_stable(x.astype(np.float64)), **TOL[np.float32])


def test_host_out_argument(rng):
    x = rng.standard_normal((4, 50)).astype(np.float32)
    out = np.full_like(x, np.nan)
    got = softmax(x, out=out)
    assert got is out
    np.testing.assert_allclose(out, softmax_stable(x.astype(np.float64)), **TOL[np.float32])


def test_device_in_device_out(rng):
    x = rng.standard_normal((3, 2, 70)).astype(np.float32)
    got = softmax(cuda.to_device(x))
    assert not isinstance(got, np.ndarray) and tuple(got.shape) == x.shape
    np.testing.assert_allclose(got.copy_to_host(), softmax_stable(x.astype(np.float64)),
                               **TOL[np.float32])


def test_empty_leading_axis():
    x = np.zeros((0, 8), np.float32)
    assert softmax(x).shape == (0, 8)


@pytest.mark.parametrize("threads", by_device([32, 96, 128], [32, 96, 256, 1024]))
def test_threads_argument(threads, rng):
    """Block sizes that are not the default (96: three warps, not a power of 2) still give the
    right answer in the methods that take any block size."""
    x = _rows(rng, 3, 300).astype(np.float32)
    for method in ["three_pass", "block_reread", "online", "block_smem", "warp", "warp_multi"]:
        if not _takes(method, 300):
            continue
        xm = x[:_n_rows(method, 3)]
        got = run_poisoned(xm, method, threads=threads)
        np.testing.assert_allclose(got, softmax_stable(xm.astype(np.float64)), **TOL[np.float32])


def test_block_with_explicit_threads(rng):
    x = _rows(rng, 2, 500).astype(np.float32)
    got = run_poisoned(x, "block", threads=32)            # K = 16 values per thread
    np.testing.assert_allclose(got, softmax_stable(x.astype(np.float64)), **TOL[np.float32])
    with pytest.raises(ValueError, match="power of 2"):
        softmax(x, method="block", threads=96)
    with pytest.raises(ValueError, match="at most 32 values per thread"):
        softmax(np.zeros((1, 2000), np.float32), method="block", threads=32)


@pytest.mark.skipif(SIM, reason="GPU: torch CUDA tensors in, torch tensors out")
def test_torch_cuda_tensor_zero_copy():
    torch = pytest.importorskip("torch")
    t = torch.randn(5, 300, device="cuda")
    got = softmax(t)
    assert isinstance(got, torch.Tensor) and got.dtype == t.dtype and got.device == t.device
    np.testing.assert_allclose(got.cpu().numpy(),
                               torch.softmax(t.double(), -1).cpu().numpy(), **TOL[np.float32])
    out = torch.full_like(t, float("nan"))
    softmax(t, out=out)
    torch.testing.assert_close(out, torch.softmax(t, -1), rtol=2e-5, atol=1e-7)


# --- §5: the dispatcher --------------------------------------------------------------------
def test_auto_rules_cover_every_n_and_pick_methods_that_take_it():
    for n in [1, 31, 32, 33, 1024, 1025, 32768, 32769, 10 ** 6]:
        name = flashlesson.choose_softmax(n)
        m = SOFTMAX_METHODS[name]
        assert m.auto and (m.max_n is None or n <= m.max_n), (n, name)
    assert not SOFTMAX_METHODS["naive"].auto


def test_launch_shapes_hold_the_row():
    for n in [1, 2, 31, 33, 100, 256, 1000, 1024]:
        for dt in (np.float32, np.float16):
            k, r, g = sm.warp_multi_shape(n, dt)
            assert g * k >= n and 32 % g == 0 and r >= 1
    if GPU:
        for n in [1025, 2048, 5000, 32768]:
            for dt in (np.float32, np.float16):
                k, t = sm.block_shape(n, dt)
                assert k * t >= n and k <= 32 and t <= 1024


# --- bad input ------------------------------------------------------------------------------
def test_method_limits_are_clear_errors():
    with pytest.raises(ValueError, match=r"'warp'.*N = 32.*N = 33"):
        softmax(np.zeros((2, 33), np.float32), method="warp")
    with pytest.raises(ValueError, match=r"'warp_multi'.*1024"):
        softmax(np.zeros((1, 1025), np.float32), method="warp_multi")


@pytest.mark.parametrize("bad, err, match", [
    (np.zeros((2, 3), np.float64), TypeError, "x: dtype float64"),
    (np.zeros((2, 3), np.int32), TypeError, "x: dtype int32"),
    (np.float32(1.0), TypeError, "x: expected a NumPy array"),
    (np.zeros((), np.float32), ValueError, "at least 1 dimension"),
    ("abc", TypeError, "x: expected"),
])
def test_bad_input(bad, err, match):
    with pytest.raises(err, match=match):
        softmax(bad)


def test_bad_arguments():
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(ValueError, match="method: expected one of"):
        softmax(x, method="fast")
    with pytest.raises(ValueError, match="threads: expected a multiple of 32"):
        softmax(x, threads=100)
    with pytest.raises(ValueError, match=r"out: expected a NumPy array of shape \(2, 8\)"):
        softmax(x, out=np.zeros((2, 9), np.float32))
    with pytest.raises(ValueError, match="dtype float32"):
        softmax(x, out=np.zeros((2, 8), np.float16))
    with pytest.raises(TypeError, match="out: expected a device array"):
        softmax(cuda.to_device(x), out=np.zeros((2, 8), np.float32))
    with pytest.raises(TypeError, match="out: expected a NumPy array"):
        softmax(x, out=cuda.to_device(x))
