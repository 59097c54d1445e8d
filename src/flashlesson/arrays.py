"""Input handling shared by every public function: validation and host/device conversion.

Rules (the same for softmax and attention):
- A NumPy array in → a NumPy array out. It is copied to the device, computed there, copied back.
- A torch CUDA tensor in → a torch tensor out (``torch.empty`` of the input's dtype, bf16 as
  torch.bfloat16; kernels on torch's current stream: ``using``), read by its data pointer.
- Another device array in — a Numba device array, or any object exposing
  ``__cuda_array_interface__`` (a CuPy array) — → a Numba device array out (memory from the
  device's stream-ordered pool), with no host copy (the input is viewed, not copied).
  DLPack-only objects are taken through CuPy or torch when one of them is installed.
- On the GPU device inputs and results travel inside the library as :class:`DevArray` (pointer,
  shape, dtype, owner), never as a Numba wrapper per call; ``result`` gives the caller's type.
- Anything else, a wrong dtype or a wrong rank raises an error naming the argument and what
  was expected (empty axes are allowed: the public functions return empty results for them). Nothing is converted silently except Python sequences, which
  are turned into NumPy arrays (and then follow the NumPy rule).
"""

import math
import os
import sys
import threading
import warnings

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


NOT_AN_ARRAY = "expected a NumPy array, a Numba device array or a torch tensor"


class Operand:
    """One validated array argument: where it lives, and a 2-D (or N-D) device view of it.

    On the GPU a device input is read through its pointer, shape and dtype (a torch tensor's
    own accessors, or ``__cuda_array_interface__``) into a :class:`DevArray`: no Numba wrapper
    per call. ``torch`` is the tensor when the input is one (outputs then are torch tensors)."""

    def __init__(self, obj, name, dtypes, min_ndim=1, ndim=None):
        self.name = name
        self.torch = None
        sequence = None                 # a list or tuple given: its type, for the messages
        if not device.SIMULATOR and _is_torch_cuda(obj):
            if obj.is_neg() or obj.is_conj():
                # torch's lazy negation (a -x view, also made inside autograd) or conjugation:
                # the memory holds x, so read a resolved copy, as torch's own kernels do
                obj = obj.resolve_neg().resolve_conj()
            dtype = torch_to_numpy(obj.dtype)
            self._check(name, dtype, tuple(obj.shape), dtypes, min_ndim, ndim,
                        shown=str(obj.dtype).replace("torch.", ""))
            if not obj.is_contiguous():
                raise ValueError(f"{name}: device arrays must be C-contiguous (got strides "
                                 f"{tuple(obj.stride())} elements for shape {self.shape}); "
                                 "make a contiguous copy")
            self.on_host = False
            self.torch = obj
            self.obj = DevArray(obj.data_ptr(), self.shape, self.dtype, obj)
            return
        if not isinstance(obj, np.ndarray) and not is_device_array(obj):
            if type(obj).__module__.startswith("torch") and \
                    getattr(getattr(obj, "device", None), "type", None) == "cpu":
                raise TypeError(f"{name}: a torch tensor on the CPU; pass torch CUDA tensors "
                                "(.cuda()) or NumPy arrays (.numpy()), every argument alike")
            if hasattr(obj, "__dlpack__") and not device.SIMULATOR:
                obj = _from_dlpack(obj, name)
            elif isinstance(obj, (list, tuple)):
                sequence = type(obj).__name__
                try:
                    obj = np.asarray(obj)
                except ValueError:              # ragged: no array at all
                    raise TypeError(f"{name}: {NOT_AN_ARRAY}, got a {sequence} that is no "
                                    "rectangular array") from None
            else:
                raise TypeError(f"{name}: {NOT_AN_ARRAY}, got {type(obj).__name__}")
        self.on_host = isinstance(obj, np.ndarray)
        if not self.on_host and not device.SIMULATOR:
            if _is_torch_cuda(obj):             # (a DLPack object that torch took)
                self.__init__(obj, name, dtypes, min_ndim, ndim)
                return
            obj = DevArray.from_interface(obj, name)
        self._check(name, np.dtype(obj.dtype), tuple(obj.shape), dtypes, min_ndim, ndim,
                    sequence=sequence)
        if self.on_host:
            obj = np.ascontiguousarray(obj)
        elif not device.SIMULATOR:
            pass                                # (DevArray.from_interface checked the layout)
        elif not _is_c_contiguous(obj):
            raise ValueError(f"{name}: device arrays must be C-contiguous (got strides "
                             f"{obj.strides} for shape {self.shape}); make a contiguous copy")
        self.obj = obj

    def _check(self, name, dtype, shape, dtypes, min_ndim, ndim, shown=None, sequence=None):
        self.dtype, self.shape = dtype, shape
        if dtype is None or dtype not in [np.dtype(d) for d in dtypes]:
            allowed = ", ".join(np.dtype(d).name for d in dtypes)
            if sequence is not None:            # a list whose values make no array of ours
                raise TypeError(f"{name}: {NOT_AN_ARRAY}, got {sequence} (as a NumPy array "
                                f"its dtype would be {dtype.name}; expected {allowed})")
            raise TypeError(f"{name}: dtype {shown or dtype.name} is not supported; expected "
                            f"{allowed}")
        if ndim is not None and len(shape) != ndim:
            raise ValueError(f"{name}: expected a {ndim}-D array, got shape {shape}")
        if len(shape) < min_ndim:
            raise ValueError(f"{name}: expected at least {min_ndim} dimension(s), got a "
                             f"{len(shape)}-D array")

    def device_view(self, shape):
        """The data on the device, reshaped (no copy for device inputs)."""
        if self.on_host:
            return cuda.to_device(self.obj.reshape(shape))
        return self.obj.reshape(shape)


# --- the call's stream and allocator -----------------------------------------------------------
_local = threading.local()


def current_stream():
    """The CUDA stream handle this call's kernels go to (0: the legacy default stream)."""
    return getattr(_local, "stream", 0)


class using:
    """``with using(operand):`` — the kernels launched and the arrays allocated inside follow
    ``operand`` (an Operand, or None): with a torch tensor, torch's current stream on its device
    and ``torch.empty``; otherwise those of the enclosing ``using`` (a call made inside another),
    at top level stream 0 and the memory pool. Nests (restores on exit)."""

    __slots__ = ("torch", "stream", "saved")

    def __init__(self, operand):
        t = getattr(operand, "torch", None)
        if t is None:                           # (nested inside a torch call: its stream)
            self.torch, self.stream = getattr(_local, "torch", None), current_stream()
        else:
            self.torch = t
            self.stream = 0 if device.SIMULATOR else torch_stream(t.get_device())

    def __enter__(self):
        self.saved = (getattr(_local, "stream", 0), getattr(_local, "torch", None))
        _local.stream, _local.torch = self.stream, self.torch
        return self

    def __exit__(self, *exc):
        _local.stream, _local.torch = self.saved
        return False


_RAW_STREAM = []


def torch_stream(index):
    """torch's current CUDA stream on device ``index``, as a handle (an int). Through
    ``torch._C._cuda_getCurrentRawStream`` where torch has it (what torch's own compiled code
    calls: no Stream object per call), else ``torch.cuda.current_stream(index).cuda_stream``;
    the function is looked up once."""
    if not _RAW_STREAM:
        torch = sys.modules["torch"]
        raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
        _RAW_STREAM.append(raw or (lambda i: torch.cuda.current_stream(i).cuda_stream))
    return _RAW_STREAM[0](index)


# --- recording a call (flashlesson.calls): the torch allocations and the launches it made ----
class recording_into:
    """``with recording_into(events):`` — ``empty`` appends ("alloc", tensor) for each torch
    result it allocates, ``launch.launch`` ("launch", (plan, args)) for each launch and
    ``launch.launch_beside`` ("beside", ((plan, args), (plan, args))) for each pair, in
    order, until the block ends (``flashlesson.calls`` builds a call plan from them)."""

    __slots__ = ("events", "saved")

    def __init__(self, events):
        self.events = events

    def __enter__(self):
        self.saved = getattr(_local, "events", None)
        _local.events = self.events
        return self.events

    def __exit__(self, *exc):
        _local.events = self.saved
        return False


def recording():
    """The event list of the recording in progress on this thread, or None."""
    return getattr(_local, "events", None)


# --- torch tensors, read without their __cuda_array_interface__ --------------------------------
def _is_torch_cuda(obj):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor) and obj.is_cuda


_TORCH_DTYPES = {}


def torch_to_numpy(tdtype):
    """The NumPy dtype a torch dtype is handled as (bfloat16: its bits, uint16), or None."""
    if not _TORCH_DTYPES:
        import torch
        _TORCH_DTYPES.update({torch.float32: np.dtype(np.float32),
                              torch.float16: np.dtype(np.float16),
                              torch.bfloat16: np.dtype(np.uint16),
                              torch.float64: np.dtype(np.float64),
                              torch.int32: np.dtype(np.int32), torch.int64: np.dtype(np.int64),
                              torch.uint8: np.dtype(np.uint8), torch.bool: np.dtype(np.bool_),
                              torch.int16: np.dtype(np.int16)})
    return _TORCH_DTYPES.get(tdtype)


_NUMPY_TO_TORCH = {}


def numpy_to_torch(dtype, bf16=False):
    """The torch dtype of a result in NumPy ``dtype`` (uint16 = bf16 bits when ``bf16``)."""
    if not _NUMPY_TO_TORCH:                     # (built once: this runs per result)
        import torch
        _NUMPY_TO_TORCH.update({
            np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16,
            np.dtype(np.float64): torch.float64, np.dtype(np.int32): torch.int32,
            np.dtype(np.int64): torch.int64, np.dtype(np.uint8): torch.uint8,
            np.dtype(np.bool_): torch.bool, np.dtype(np.int16): torch.int16,
            np.dtype(np.uint16): torch.int16, np.dtype(np.uint32): torch.int32,
            "bf16": torch.bfloat16})
    dtype = np.dtype(dtype)
    if bf16 and (dtype == np.uint16 or dtype == np.float16):
        return _NUMPY_TO_TORCH["bf16"]          # (bf16 bits, allocated as 16-bit halves)
    return _NUMPY_TO_TORCH[dtype]


class DevArray:
    """A C-contiguous device array seen as what a launch needs: its data pointer, shape and
    dtype, and ``owner``, the object that keeps the memory alive (a torch tensor, a pool
    block, a Numba device array). ``reshape`` and ``view`` make new views without the driver.
    Anything else (``copy_to_host``, indexing) goes to a Numba device array over the same
    memory, made once. Exposes ``__cuda_array_interface__`` (so Numba's own launch, torch and
    CuPy take it)."""

    __slots__ = ("ptr", "shape", "dtype", "owner", "_numba")

    def __init__(self, ptr, shape, dtype, owner):
        self.ptr = int(ptr)
        self.shape = tuple(map(int, shape))     # (map: no generator frame per element)
        self.dtype = dtype if type(dtype) is np.dtype else np.dtype(dtype)
        self.owner = owner
        self._numba = None

    @classmethod
    def from_interface(cls, obj, name="array"):
        """A DevArray over any ``__cuda_array_interface__`` object (C-contiguous only)."""
        if isinstance(obj, DevArray):
            return obj
        cai = obj.__cuda_array_interface__
        shape = tuple(cai["shape"])
        dtype = np.dtype(cai["typestr"])
        strides = cai.get("strides")
        if strides is not None and 0 not in shape:
            expected = dtype.itemsize
            for extent, stride in zip(reversed(shape), reversed(strides)):
                if extent > 1 and stride != expected:
                    raise ValueError(f"{name}: device arrays must be C-contiguous (got strides "
                                     f"{tuple(strides)} for shape {shape}); make a contiguous "
                                     "copy")
                expected *= extent
        return cls(cai["data"][0] or 0, shape, dtype, obj)

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    @property
    def strides(self):
        out, step = [], self.dtype.itemsize
        for extent in reversed(self.shape):
            out.append(step)
            step *= extent
        return tuple(reversed(out))

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = tuple(map(int, shape))
        if -1 in shape:
            known = 1
            for n in shape:
                if n != -1:
                    known *= n
            shape = tuple(self.size // max(known, 1) if n == -1 else n for n in shape)
        if _prod(shape) != self.size:
            raise ValueError(f"cannot reshape {self.shape} to {shape}")
        return DevArray(self.ptr, shape, self.dtype, self.owner)

    def view(self, dtype):
        """The same bytes as ``dtype`` (the last axis rescaled, as NumPy's view)."""
        dtype = np.dtype(dtype)
        last = self.shape[-1] * self.dtype.itemsize
        if last % dtype.itemsize:
            raise ValueError(f"cannot view {self.dtype} {self.shape} as {dtype}")
        return DevArray(self.ptr, self.shape[:-1] + (last // dtype.itemsize,), dtype,
                        self.owner)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "strides": None, "data": (self.ptr, False),
                "typestr": self.dtype.str, "version": 3, "stream": None}

    def numba(self):
        """A Numba device array over this memory (made once; it keeps ``self`` alive)."""
        if self._numba is None:
            self._numba = cuda.from_cuda_array_interface(self.__cuda_array_interface__,
                                                         owner=self, sync=False)
        return self._numba

    def __getattr__(self, name):                # copy_to_host, copy_to_device, …
        if name.startswith("__") or name in DevArray.__slots__:
            raise AttributeError(name)
        return getattr(self.numba(), name)

    def __getitem__(self, index):
        return self.numba()[index]

    def __setitem__(self, index, value):
        self.numba()[index] = value

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"DevArray(shape={self.shape}, dtype={self.dtype.name}, ptr={self.ptr:#x})"


def _prod(shape):
    return math.prod(shape)


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


def empty(shape, dtype, like=None, bf16=False):
    """A device array for a result (poisoned when ``POISON`` is set).

    In the simulator: a Numba (simulated) device array. On the GPU: a :class:`DevArray` —
    over ``torch.empty`` on ``like``'s device when ``like`` (an Operand; default: the one of the
    enclosing ``using``) holds a torch tensor
    (torch's caching allocator, ordered on torch's current stream, where the kernels run;
    ``bf16``: a uint16 result is a torch.bfloat16 tensor), else over a block of the device's
    stream-ordered memory pool (``cuMemAllocAsync``/``cuMemFreeAsync`` on the stream the
    kernels use: never a per-call cuMemAlloc, never a cuMemFree that waits for the GPU).
    ``result`` turns it into what the caller returns."""
    if device.SIMULATOR:
        return _numba_empty(shape, dtype)
    shape = tuple(map(int, shape)) if isinstance(shape, (tuple, list)) else (int(shape),)
    dtype = np.dtype(dtype)
    like = getattr(like, "torch", None) if like is not None else getattr(_local, "torch", None)
    if like is not None:
        torch = sys.modules["torch"]            # (imported: like is a torch tensor)
        t = torch.empty(shape, dtype=numpy_to_torch(dtype, bf16), device=like.device)
        if POISON:
            poison(t)
        events = getattr(_local, "events", None)
        if events is not None:
            events.append(("alloc", t))
        return DevArray(t.data_ptr(), shape, dtype, t)
    if POISON:
        arr = _numba_empty(shape, dtype)
        return DevArray(arr.device_ctypes_pointer.value or 0, shape, dtype, arr)
    return pool_array(shape, dtype)


def poison(t):
    """Fill a fresh torch result with NaN (floating point) or 0xAB bytes (``POISON``)."""
    if t.numel():
        t.fill_(float("nan")) if t.dtype.is_floating_point else \
            t.view(-1).view(sys.modules["torch"].uint8).fill_(0xAB)


def _numba_empty(shape, dtype):
    if not POISON:
        return cuda.device_array(shape, dtype=dtype)
    dtype = np.dtype(dtype)
    fill = np.full(shape, np.nan, dtype) if dtype.kind == "f" else \
        np.full(shape, 0xAB, np.uint8).view(dtype) if dtype.itemsize == 1 else \
        np.full(shape, -0x55555555, np.int64).astype(dtype)
    return cuda.to_device(fill)


def new_output(like, shape, dtype):
    """A device array for a result; every element is written by the kernel."""
    return empty(shape, dtype, like=like)


def result(arr, shape=None, bf16=False):
    """A result array as the caller gets it: a torch tensor when ``arr`` lives in one (of
    the tensor's dtype: bf16 stays torch.bfloat16), a Numba device array otherwise."""
    if shape is not None:
        arr = arr.reshape(shape)
    if not isinstance(arr, DevArray):
        return arr
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(arr.owner, torch.Tensor):
        t = arr.owner
        tdtype = numpy_to_torch(arr.dtype, bf16 or t.dtype == torch.bfloat16)
        if t.dtype != tdtype:
            t = t.view(tdtype)
        if t.data_ptr() == arr.ptr and t.numel() == arr.size:
            return t.view(arr.shape)
        return arr.numba()                      # (a part of a tensor: not made here)
    return arr.numba()


# --- the stream-ordered pool (GPU, no torch) ---------------------------------------------------
_POOL = {"ready": False, "stream": None, "failed": None, "pool": None}


class PoolBlock:
    """Device memory from the device's default memory pool, allocated and freed in stream
    order on the legacy default stream (where the kernels of non-torch calls run)."""

    __slots__ = ("ptr", "nbytes")

    def __init__(self, nbytes):
        from cuda.bindings import driver as drv
        err, ptr = drv.cuMemAllocAsync(max(int(nbytes), 1), _POOL["stream"])
        if err != drv.CUresult.CUDA_SUCCESS:
            raise MemoryError(f"cuMemAllocAsync({nbytes} bytes) failed: {err}")
        self.ptr, self.nbytes = int(ptr), nbytes

    def __del__(self):
        try:
            from cuda.bindings import driver as drv
            drv.cuMemFreeAsync(self.ptr, _POOL["stream"])
        except Exception:                        # noqa: BLE001 - interpreter shutdown
            pass


def _pool_ready():
    if not _POOL["ready"]:
        _POOL["ready"] = True
        try:
            from cuda.bindings import driver as drv
            ctx = cuda.current_context()         # (the primary context, current)
            _POOL["stream"] = drv.CUstream(0)
            err, pool = drv.cuDeviceGetDefaultMemPool(ctx.device.id)
            if err == drv.CUresult.CUDA_SUCCESS:  # keep freed blocks for reuse
                _POOL["pool"] = pool
                drv.cuMemPoolSetAttribute(
                    pool, drv.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                    drv.cuuint64_t(2**64 - 1))
            PoolBlock(16)                        # (allocate once, to know that it works)
        except Exception as exc:                 # noqa: BLE001 - said, then Numba's allocator
            _POOL["failed"] = exc
            warnings.warn(f"flashlesson: the stream-ordered memory pool is not usable "
                          f"({exc!r}); results are allocated by Numba instead",
                          RuntimeWarning, stacklevel=3)
    return _POOL["failed"] is None


def pool_usage(reset_peak=False):
    """(bytes in use at the peak since the last reset, bytes the pool holds from the driver) of
    the stream-ordered pool; (0, 0) where it is not in use (simulator, or not started yet).
    ``reset_peak`` starts a new peak at the bytes in use now. ``flashlesson.bench``'s memory
    measurement (§15, §29, §31) adds the peak to what Numba's allocator holds, since results
    come from memory the pool may already hold."""
    pool = _POOL["pool"]
    if pool is None or _POOL["failed"] is not None:
        return 0, 0
    from cuda.bindings import driver as drv
    attr = drv.CUmemPool_attribute
    if reset_peak:
        drv.cuMemPoolSetAttribute(pool, attr.CU_MEMPOOL_ATTR_USED_MEM_HIGH, drv.cuuint64_t(0))
    got = [drv.cuMemPoolGetAttribute(pool, a)
           for a in (attr.CU_MEMPOOL_ATTR_USED_MEM_HIGH, attr.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)]
    return tuple(int(v) if err == drv.CUresult.CUDA_SUCCESS else 0 for err, v in got)


def pool_array(shape, dtype):
    """A DevArray over a fresh pool block (Numba's allocator if the pool is unusable)."""
    dtype = np.dtype(dtype)
    if _pool_ready():
        n = _prod(shape) * dtype.itemsize
        block = PoolBlock(n)
        return DevArray(block.ptr, shape, dtype, block)
    arr = cuda.device_array(shape, dtype=dtype)
    return DevArray(arr.device_ctypes_pointer.value or 0, shape, dtype, arr)


def check_out(out, name, shape, dtype, on_host):
    """Validate a user-provided output array (on the GPU a device ``out`` comes back as a
    DevArray over its memory)."""
    where = "NumPy array" if on_host else "device array"
    if on_host and not isinstance(out, np.ndarray):
        raise TypeError(f"{name}: expected a NumPy array (the input is on the host), "
                        f"got {type(out).__name__}")
    if not on_host and not device.SIMULATOR and _is_torch_cuda(out):
        if not out.is_contiguous():
            raise ValueError(f"{name}: device arrays must be C-contiguous")
        nd = torch_to_numpy(out.dtype)
        if nd is None:
            raise TypeError(f"{name}: dtype {out.dtype} is not supported; expected "
                            f"{np.dtype(dtype).name}")
        out = DevArray(out.data_ptr(), tuple(out.shape), nd, out)
    elif not on_host and not is_device_array(out):
        raise TypeError(f"{name}: expected a device array (the input is on the device), "
                        f"got {type(out).__name__}")
    elif not on_host and not device.SIMULATOR:
        out = DevArray.from_interface(out, name)
    if tuple(out.shape) != tuple(shape) or np.dtype(out.dtype) != np.dtype(dtype):
        raise ValueError(f"{name}: expected a {where} of shape {tuple(shape)} and dtype "
                         f"{np.dtype(dtype).name}, got shape {tuple(out.shape)} and dtype "
                         f"{np.dtype(out.dtype).name}")
    if on_host and not out.flags.c_contiguous:
        raise ValueError(f"{name}: must be C-contiguous")
    if not on_host and device.SIMULATOR and not _is_c_contiguous(out):
        raise ValueError(f"{name}: device arrays must be C-contiguous")
    return out
