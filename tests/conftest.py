"""Shared test setup: the device is chosen by ``import flashlesson`` (GPU if usable, else the
CUDA simulator); the same test files run in both, with sizes picked by ``SIM``.

Random inputs are fresh each run; the seed is printed and ``FLASHLESSON_SEED=<seed>`` replays it.
"""

import os

import numpy as np
import pytest

import flashlesson  # noqa: F401 - must come before numba.cuda: it picks the device
import flashlesson.arrays

# Every result array the library allocates starts full of NaN (or 0xAB bytes): an element a
# kernel does not write fails the comparison with the oracle.
flashlesson.arrays.POISON = True

SIM = flashlesson.SIMULATOR
GPU = not SIM
# flashlesson.traffic's counter runs kernels in the simulator; on a GPU it refuses
# (test_traffic.py::test_counter_refuses_the_gpu)
needs_sim = pytest.mark.skipif(not SIM, reason="the traffic counter runs kernels in the "
                               "simulator")


def by_device(sim, gpu):
    """The simulator's value or the GPU's: tiny shapes on the CPU, bigger ones on the GPU."""
    return sim if SIM else gpu


@pytest.fixture
def rng():
    seed = int(os.environ.get("FLASHLESSON_SEED", np.random.SeedSequence().entropy))
    print(f"FLASHLESSON_SEED={seed}")
    return np.random.default_rng(seed)


def check_attention(o, lse, o_ref, lse_ref, rel):
    """O and LSE against the float64 oracle: no NaN (an unwritten, poisoned element), relative
    error ≤ rel against the largest |O|, −inf in the same places, finite LSEs to rel."""
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    err = np.max(np.abs(o - o_ref)) / max(np.max(np.abs(o_ref)), 1e-30)
    assert err <= rel, f"relative error {err:.2e}"
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse_ref))
    fin = np.isfinite(lse_ref)
    np.testing.assert_allclose(lse[fin], lse_ref[fin], rtol=rel, atol=rel)


def check_grads(grads, refs, rel):
    """(dq, dk, dv) against the oracle's, each relative to its largest |value| — or, for a
    gradient that vanishes analytically (one key: dS = P(dP − D) = 0), to 1e-3 of the largest
    gradient of the problem, not to ~0. Returns the three relative errors."""
    floor = 1e-3 * max(np.max(np.abs(ref), initial=0.0) for ref in refs)
    errs = []
    for name, g, ref in zip(("dq", "dk", "dv"), grads, refs):
        assert g.shape == ref.shape and g.dtype == np.float32
        assert not np.isnan(g).any(), f"{name}: NaN (unwritten or 0·inf)"
        top = max(np.max(np.abs(ref), initial=0.0), floor)
        err = np.max(np.abs(g - ref), initial=0.0) / top if top > 0 else 0.0
        errs.append(err)
        assert err <= rel, f"{name}: relative error {err:.2e} > {rel:.1e}"
    print("relative errors dq, dk, dv:", " ".join(f"{e:.1e}" for e in errs))
    return errs


def pytest_report_header(config):
    return f"flashlesson device: {flashlesson.MODE} ({flashlesson.device.REASON})"
