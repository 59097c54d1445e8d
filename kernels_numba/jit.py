"""Compile options that only the GPU takes, and device functions that need no ``cuda.*``.

Numba's CUDA simulator rejects ``max_registers``, ``lineinfo`` and ``launch_bounds``; kernels
write ``@cuda.jit(**gpu_options(max_registers=64))`` so that one source serves both.
``@pure_device`` marks a device function that uses no ``cuda.*`` (plain Python in the
simulator). Both are decided in ``kernels_numba/sim/__init__.py``, the one place that chooses
between the GPU and the simulator.
"""

from .sim import gpu_options, pure_device

__all__ = ["gpu_options", "pure_device"]
