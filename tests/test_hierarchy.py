"""§26: the memory-hierarchy kernels (kernels_numba/membw.py) compute what their NumPy twins say,
and, on a GPU, the measured order is shared memory > HBM (flashlesson.hierarchy)."""

import numpy as np
import pytest
from numba import cuda

from conftest import GPU, by_device
from flashlesson import hierarchy as HY

T = HY.threads_per_block()


def poisoned(n):
    return cuda.to_device(np.full(n, np.nan, np.float32))


def test_copy_bit_for_bit(rng):
    n = 4 * T * by_device(3, 1000) + 4          # a partial last grid-stride step
    x = rng.standard_normal(n).astype(np.float32)
    dst = poisoned(n)
    HY.copy(cuda.to_device(x), dst)
    np.testing.assert_array_equal(dst.copy_to_host(), x)


@pytest.mark.parametrize("reps, rot", [(1, 0), (3, 12)])
def test_read_partial_sums_exact(rng, reps, rot):
    n = 4 * T * by_device(4, 4096)
    x = rng.integers(0, 8, n).astype(np.float32)     # integer values: every sum exact in fp32
    grid = T * by_device(1, 32)
    part = poisoned(grid)
    HY.read(cuda.to_device(x), part, reps, rot)
    np.testing.assert_array_equal(part.copy_to_host(), HY.read_twin(x, grid, reps, rot))


def test_fill_pattern_checksum():
    n = 8 * T * by_device(1, 4096)
    x = poisoned(n)
    HY.fill(x, 2 ** 20 + 7)
    got = x.copy_to_host()
    assert set(np.unique(got)) == set(range(8))
    assert got.sum(dtype=np.float64) == HY.pattern_sum(n)
    with pytest.raises(ValueError, match="odd"):
        HY.fill(x, 4)


def test_smem_equals_twin_bitwise(rng):
    k, rounds, blocks = by_device((4, 3, 2), (8, 100, 64))
    x = rng.standard_normal(blocks * T * k).astype(np.float32)
    out = poisoned(x.shape[0])
    HY.smem(cuda.to_device(x), out, rounds, k=k)
    np.testing.assert_array_equal(out.copy_to_host(), HY.smem_twin(x, T * k, rounds))


def test_fma_chains_closed_form(rng):
    iters = by_device(12, 2048)
    x = rng.uniform(-1, 1, T * by_device(1, 64)).astype(np.float32)
    out = poisoned(x.shape[0])
    HY.fma(cuda.to_device(x), out, iters)
    want = HY.fma_twin(x, iters)
    assert np.max(np.abs(out.copy_to_host() - want) / np.abs(want)) <= 1e-3


def test_byte_formulas():
    assert HY.copy_bytes(10) == 80 and HY.read_bytes(10, 3) == 120
    assert HY.smem_bytes(2, 32, 4, 5) == 12 * 2 * 32 * 4 * 5
    assert HY.fma_bytes(64, 8, 10) == 16 * 64 * 8 * 10 and HY.fma_flops(64, 8, 10) == 2 * 5120


def test_launch_errors():
    x = poisoned(4 * T)
    with pytest.raises(ValueError, match="power of 2"):
        HY.read(poisoned(12), poisoned(T))
    with pytest.raises(ValueError, match="multiple of 4"):
        HY.read(x, poisoned(T), 2, 6)
    with pytest.raises(ValueError, match="power of 2"):
        HY.smem(poisoned(3 * T), poisoned(3 * T), 1, k=3)


@pytest.mark.skipif(not GPU, reason="timing needs a GPU")
def test_measured_order():
    result = HY.measure(scale=0.25)
    assert result["ok"]["checks"], result["rows"]
    assert result["ok"]["shared > HBM"], result["best GB/s"]


@pytest.mark.skipif(GPU, reason="on a GPU the bench runs (test_measured_order)")
def test_cli_bench_hierarchy_refuses_the_simulator(capsys):
    from flashlesson.cli import main
    assert main(["bench", "hierarchy"]) == 2
    assert "GPU" in capsys.readouterr().err
