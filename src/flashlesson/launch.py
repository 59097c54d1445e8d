"""Launching kernels that need more than 48 KB of dynamic shared memory.

CUDA gives a kernel at most 48 KB of dynamic shared memory unless the kernel is opted in with
``cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)`` (up to 227 KB on the H100/H200). Numba has
no public API for it (numba-cuda issue 94); the workaround below reaches the compiled function's
handle through the dispatcher, as suggested there, and sets the attribute once per kernel.
In the simulator there is no limit to lift.
"""

import numpy as np
from numba import cuda

from . import checks, device

DEFAULT_SMEM = 48 * 1024
_opted_in = {}


def max_shared_bytes():
    """The most dynamic shared memory one block may opt in to on this device."""
    if device.SIMULATOR:
        return 227 * 1024
    dev = cuda.get_current_device()
    return dev.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN


def _opt_in(kernel, args, nbytes):
    spec = kernel.specialize(*args)                 # compiled for these argument types
    overload = next(iter(spec.overloads.values()))
    cufunc = overload._codelibrary.get_cufunc()
    if _opted_in.get(cufunc.handle, 0) < nbytes:
        from numba.cuda.cudadrv.driver import binding, driver
        attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        driver.cuKernelSetAttribute(attr, nbytes, cufunc.handle, cufunc.device.id)
        _opted_in[cufunc.handle] = nbytes
    return spec


def launch(kernel, grid, block, args, shared_bytes=0):
    """kernel[grid, block, 0, shared_bytes](*args), opting in above 48 KB of shared memory."""
    shared_bytes = int(shared_bytes)
    checks.grid(grid)                   # (callers name the argument first where they can)
    if shared_bytes > max_shared_bytes():
        raise ValueError(f"the launch needs {shared_bytes} bytes of shared memory per block; "
                         f"this device allows {max_shared_bytes()}")
    if shared_bytes > DEFAULT_SMEM and not device.SIMULATOR:
        kernel = _opt_in(kernel, args, shared_bytes)
    kernel[grid, block, 0, shared_bytes](*args)


# Element-wise kernels with grid-stride loops (the naive paths' masks, dropout, D = rowsum):
# (threads per block, most blocks). One warp in the simulator, where each thread is a Python
# thread.
STRIDE_LAUNCH = (32, 1) if device.SIMULATOR else (256, 8192)


def stride_grid(n):
    """(blocks, threads) for a grid-stride kernel over n items."""
    threads, most = STRIDE_LAUNCH
    return min(max(-(-n // threads), 1), most), threads


def kernel_resources(kernel):
    """Registers, local memory (spills) and static shared memory per compiled overload of
    ``kernel`` — including the specializations made by the shared-memory opt-in — as a list
    of dicts (empty in the simulator, which compiles nothing)."""
    if device.SIMULATOR:
        return []
    overloads = list(kernel.overloads.values())
    for spec in getattr(kernel, "specializations", {}).values():
        overloads.extend(spec.overloads.values())
    return [{"registers": ov.regs_per_thread, "local bytes": ov.local_mem_per_thread,
             "static shared bytes": ov.shared_mem_per_block,
             "max threads": ov.max_threads_per_block} for ov in overloads]


def as_float32(value):
    return np.float32(value)
