"""Compile options that only the GPU takes.

Numba's CUDA simulator rejects ``max_registers``, ``lineinfo`` and ``launch_bounds``; kernels
write ``@cuda.jit(**gpu_options(max_registers=64))`` so that one source serves both.
"""

from numba import cuda



def gpu_options(**options):
    """``options`` on the GPU; nothing in the simulator."""
    return {} if cuda.config.ENABLE_CUDASIM else options


def pure_device(fn):
    """A device function that uses no ``cuda.*``: ``cuda.jit(device=True)`` on the GPU, the plain
    Python function in the simulator. (The simulator wraps every device-function call in a
    per-module lock that swaps the module's ``cuda`` global; for a function called per element,
    such as ``fast_exp``, 64 threads queueing on that lock made whole test runs minutes slower.)
    """
    return fn if cuda.config.ENABLE_CUDASIM else cuda.jit(device=True)(fn)
