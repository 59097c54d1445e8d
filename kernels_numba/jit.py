"""Compile options that only the GPU takes.

Numba's CUDA simulator rejects ``max_registers``, ``lineinfo`` and ``launch_bounds``; kernels
write ``@cuda.jit(**gpu_options(max_registers=64))`` so that one source serves both.
"""

from numba import cuda



def gpu_options(**options):
    """``options`` on the GPU; nothing in the simulator."""
    return {} if cuda.config.ENABLE_CUDASIM else options
