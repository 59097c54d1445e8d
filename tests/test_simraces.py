"""The simulator's race mode (kernels_numba/sim/races.py): a barrier taken out of a kernel is an
error there, whatever the simulator's schedule; the project's kernels run clean in it.

Simulator only: on a GPU, ``scripts/gpu_sanitize.sh`` runs compute-sanitizer's racecheck.
"""

import importlib.util
import inspect

import numpy as np
import pytest
from conftest import SIM
from numba import cuda, float32

from flashlesson import kernels_numba
from flashlesson.kernels_numba import reductions

pytestmark = pytest.mark.skipif(not SIM, reason="race mode is a simulator mode (the GPU runs "
                                "compute-sanitizer: scripts/gpu_sanitize.sh)")

if SIM:
    from flashlesson.kernels_numba.sim import races


def without_barrier(module, function, nth):
    """A copy of ``module`` whose ``function`` lost its nth (0-based) ``cuda.syncthreads()``:
    the mutant is built from the source text, the real file is untouched."""
    src = inspect.getsource(module)
    start = src.index(f"def {function}(")
    at = start
    for _ in range(nth + 1):
        at = src.index("cuda.syncthreads()", at + 1)
    nxt = src.find("\ndef ", start + 1)
    assert nxt == -1 or at < nxt, f"{function} has no barrier number {nth}"
    src = src[:at] + "pass" + src[at + len("cuda.syncthreads()"):]
    spec = importlib.util.spec_from_loader(f"{module.__name__}_mutant", loader=None)
    mutant = importlib.util.module_from_spec(spec)
    mutant.__package__ = kernels_numba.__name__
    exec(compile(src, module.__file__, "exec"), mutant.__dict__)
    return mutant


def softmax_stats_kernel(R):
    """max then sum over the block, reusing one scratch array (as the softmax kernels do)."""
    @cuda.jit
    def kernel(x, out):
        scratch = cuda.shared.array(32, float32)
        i = cuda.grid(1)
        m = R.block_max(x[i], scratch)
        s = R.block_sum(x[i] - m, scratch)
        out[i, 0] = m
        out[i, 1] = s
    return kernel


def run(kernel, threads, rng):
    x = rng.standard_normal(threads).astype(np.float32)
    out = cuda.to_device(np.full((threads, 2), np.nan, np.float32))
    kernel[1, threads](cuda.to_device(x), out)
    got = out.copy_to_host()
    np.testing.assert_array_equal(got[:, 0], x.max())
    np.testing.assert_allclose(got[:, 1], (x - x.max()).astype(np.float64).sum(), rtol=1e-5,
                               atol=1e-6 * np.abs(x).sum())


def test_block_reductions_are_clean_in_race_mode(rng):
    with races.race_mode():
        run(softmax_stats_kernel(reductions), 96, rng)


@pytest.mark.parametrize("function,nth", [
    ("block_max", 1),     # the barrier after the reduction: block_sum reuses scratch at once
    ("block_max", 0),     # the barrier between the partials' writes and their reads
    ("block_sum", 0),
])
def test_a_missing_barrier_is_caught_in_race_mode(function, nth, rng):
    """Without race mode the simulator's fine interleaving usually hides these; in it, the
    pair of unordered accesses is an error whatever the schedule (which of the two comes
    first, and so the kind reported, may vary)."""
    mutant = without_barrier(reductions, function, nth)
    kernel = softmax_stats_kernel(mutant)
    with races.race_mode(), pytest.raises(races.SharedRaceError,
                                             match="shared-memory race"):
        run(kernel, 96, rng)


@cuda.jit
def _uninitialised_read(out):
    tile = cuda.shared.array(64, float32)
    i = cuda.threadIdx.x
    if i < 32:
        tile[i] = 1.0                 # the upper half is never written
    cuda.syncthreads()                # every write above is visible below
    out[i] = tile[i]


def test_shared_memory_starts_poisoned_in_race_mode():
    out = cuda.to_device(np.zeros(64, np.float32))
    with races.race_mode():
        _uninitialised_read[1, 64](out)
    got = out.copy_to_host()
    assert np.all(got[:32] == 1) and np.isnan(got[32:]).all()


@cuda.jit
def _same_warp(out):
    tile = cuda.shared.array(64, float32)
    i = cuda.threadIdx.x
    tile[i] = i
    cuda.syncwarp()
    out[i] = tile[i ^ 1]              # a neighbour lane of the same warp: ordered by syncwarp


def test_lanes_of_one_warp_are_not_reported():
    out = cuda.to_device(np.zeros(64, np.float32))
    with races.race_mode():
        _same_warp[1, 64](out)
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(64) ^ 1)
