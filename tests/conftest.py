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


def by_device(sim, gpu):
    """The simulator's value or the GPU's: tiny shapes on the CPU, bigger ones on the GPU."""
    return sim if SIM else gpu


@pytest.fixture
def rng():
    seed = int(os.environ.get("FLASHLESSON_SEED", np.random.SeedSequence().entropy))
    print(f"FLASHLESSON_SEED={seed}")
    return np.random.default_rng(seed)


def pytest_report_header(config):
    return f"flashlesson device: {flashlesson.MODE} ({flashlesson.device.REASON})"
