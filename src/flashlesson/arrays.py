"""Input handling shared by every public function: validation and host/device conversion.

Rules (the same for softmax and attention):
- A NumPy array in → a NumPy array out. It is copied to the device, computed there, copied back.
- A device array in — a Numba device array, or any object exposing
  ``__cuda_array_interface__`` (a torch CUDA tensor, a CuPy array) — → a Numba device array out,
  with no host copy (the input is viewed, not copied). DLPack-only objects are taken through
  CuPy or torch when one of them is installed.
- Anything else, a wrong dtype or a wrong rank raises an error naming the argument and what
  was expected (empty axes are allowed: the public functions return empty results for them). Nothing is converted silently except Python sequences, which
  are turned into NumPy arrays (and then follow the NumPy rule).
"""

import os

import numpy as np
from numba import cuda

from . import device


def is_device_array(obj):
    """True for Numba device arrays and other ``__cuda_array_interface__`` objects."""
    if device.SIMULATOR:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
        return isinstance(obj, FakeCUDAArray)
    return cuda.is_cuda_array(obj)


def _from_dlpack(obj, name):
    try:
        import cupy
        return cupy.from_dlpack(obj)
    except ImportError:
        pass
    try:
        import torch
        return torch.from_dlpack(obj)
    except ImportError:
        pass
    raise TypeError(f"{name}: a DLPack object needs CuPy or torch installed to be read; "
                    "pass a NumPy array or a __cuda_array_interface__ object instead")


class Operand:
    """One validated array argument: where it lives, and a 2-D (or N-D) device view of it."""

    def __init__(self, obj, name, dtypes, min_ndim=1, ndim=None):
        self.name = name
        if not isinstance(obj, np.ndarray) and not is_device_array(obj):
            if hasattr(obj, "__dlpack__") and not device.SIMULATOR:
                obj = _from_dlpack(obj, name)
            elif isinstance(obj, (list, tuple)):
                obj = np.asarray(obj)
            else:
                raise TypeError(f"{name}: expected a NumPy array or a CUDA device array "
                                f"(__cuda_array_interface__), got {type(obj).__name__}")
        self.on_host = isinstance(obj, np.ndarray)
        if not self.on_host and not device.SIMULATOR:
            obj = cuda.as_cuda_array(obj)
        self.dtype = np.dtype(obj.dtype)
        if self.dtype not in [np.dtype(d) for d in dtypes]:
            allowed = ", ".join(np.dtype(d).name for d in dtypes)
            raise TypeError(f"{name}: dtype {self.dtype.name} is not supported; expected {allowed}")
        self.shape = tuple(obj.shape)
        if ndim is not None and len(self.shape) != ndim:
            raise ValueError(f"{name}: expected a {ndim}-D array, got shape {self.shape}")
        if len(self.shape) < min_ndim:
            raise ValueError(f"{name}: expected at least {min_ndim} dimension(s), got a "
                             f"{len(self.shape)}-D array")
        if self.on_host:
            obj = np.ascontiguousarray(obj)
        elif not _is_c_contiguous(obj):
            raise ValueError(f"{name}: device arrays must be C-contiguous (got strides "
                             f"{obj.strides} for shape {self.shape}); make a contiguous copy")
        self.obj = obj

    def device_view(self, shape):
        """The data on the device, reshaped (no copy for device inputs)."""
        if self.on_host:
            return cuda.to_device(self.obj.reshape(shape))
        return self.obj.reshape(shape)


def _is_c_contiguous(arr):
    if 0 in tuple(arr.shape):           # an empty array has no layout to get wrong
        return True
    expected = arr.dtype.itemsize
    for extent, stride in zip(reversed(arr.shape), reversed(arr.strides)):
        if extent > 1 and stride != expected:
            return False
        expected *= extent
    return True


# Tests set this (tests/conftest.py; or FLASHLESSON_POISON=1): every result array is then
# allocated full of NaN (float) or 0xAB bytes (integer), so an element a kernel forgot to write
# fails the comparison with the oracle instead of passing on leftover memory.
POISON = os.environ.get("FLASHLESSON_POISON") == "1"


def empty(shape, dtype):
    """A device array for a result (poisoned when ``POISON`` is set)."""
    if not POISON:
        return cuda.device_array(shape, dtype=dtype)
    dtype = np.dtype(dtype)
    fill = np.full(shape, np.nan, dtype) if dtype.kind == "f" else \
        np.full(shape, 0xAB, np.uint8).view(dtype) if dtype.itemsize == 1 else \
        np.full(shape, -0x55555555, np.int64).astype(dtype)
    return cuda.to_device(fill)


def new_output(like, shape, dtype):
    """A device array for a result; every element is written by the kernel."""
    return empty(shape, dtype)


def check_out(out, name, shape, dtype, on_host):
    """Validate a user-provided output array."""
    where = "NumPy array" if on_host else "device array"
    if on_host and not isinstance(out, np.ndarray):
        raise TypeError(f"{name}: expected a NumPy array (the input is on the host), "
                        f"got {type(out).__name__}")
    if not on_host and not is_device_array(out):
        raise TypeError(f"{name}: expected a device array (the input is on the device), "
                        f"got {type(out).__name__}")
    if not on_host and not device.SIMULATOR:
        out = cuda.as_cuda_array(out)
    if tuple(out.shape) != tuple(shape) or np.dtype(out.dtype) != np.dtype(dtype):
        raise ValueError(f"{name}: expected a {where} of shape {tuple(shape)} and dtype "
                         f"{np.dtype(dtype).name}, got shape {tuple(out.shape)} and dtype "
                         f"{np.dtype(out.dtype).name}")
    if on_host and not out.flags.c_contiguous:
        raise ValueError(f"{name}: must be C-contiguous")
    if not on_host and not _is_c_contiguous(out):
        raise ValueError(f"{name}: device arrays must be C-contiguous")
    return out
