"""Simulator twin of ``kernels_numba/reductions.py``'s ``fast_exp`` (libdevice's ``__expf``,
which the simulator does not have): NumPy's float32 exp, which overflows to inf like the GPU.

Chosen by ``kernels_numba/sim/__init__.py`` (``helper_chooser``). A plain Python function, not
a simulated device function: the simulator wraps each device-function call in a per-module
lock, and ``fast_exp`` is called per element (see ``pure_device``).
"""

import numpy as np


def fast_exp(x):
    """e^x in float32 (simulator: NumPy, which overflows to inf like the GPU)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.exp(np.float32(x))
