"""Launching kernels: one cached *plan* per launch, a fast path past Numba's dispatcher, and the
opt-in above 48 KB of shared memory. Every public function launches through ``launch`` here.

A call of a Numba kernel, ``kernel[grid, block, stream, shmem](*args)``, costs 100–400 µs of
Python on the H200 (type matching, a ``DeviceNDArray`` per array, ~8 driver calls). Most of
that is the same from one call to the next. So a launch is looked up by its *key* — the kernel,
grid, block, shared bytes, and per argument its type (arrays: dtype and shape; they are always
C-contiguous here) — and the first launch with a key builds a :class:`Plan`:

- the grid and shared-memory limits checked once;
- the kernel compiled once for these argument types (``CUDADispatcher.compile``), and from the
  compiled overload the driver function (``overload._codelibrary.get_cufunc().kernel``, a
  ``cuda.core`` ``Kernel``: private Numba attributes, guarded);
- the launch configuration (``cuda.core.LaunchConfig``) and a parameter template in Numba's
  kernel ABI (``_Kernel._prepare_args``): an array is (meminfo = 0, parent = 0, nitems,
  itemsize, data pointer, shape…, strides in bytes…), each a pointer-sized int; an integer
  scalar is its ctypes type (``c_int64``, ``c_uint32``), float32 ``c_float``, float64
  ``c_double``, a bool the Python bool. Anything else (records, tuples, complex) keeps the plan
  on Numba's own launch.

Later calls with the key only put the arrays' data pointers and the scalars into a copy of the
template and call ``cuda.core.launch(stream, config, kernel, *params)``.

Guards: ``FLASHLESSON_FAST_LAUNCH=0`` (or ``launch.FAST = False``) sends every plan through
Numba's call instead, ``kernel[grid, block, stream, shmem](*args)``. If building the fast part
of a plan fails (a Numba that moved its private attributes), or the first fast launch raises,
or the one-time self-test at the first fast launch (a small kernel launched both ways, results
compared) disagrees, a warning is printed once on stderr and Numba's call is used from then on:
slower, never wrong. The simulator always takes Numba's (simulated) launch, through the same
plan objects, so plan reuse is tested there too.

Packed launches: a call replayed from its call plan (``flashlesson.calls``) launches each of its
plans through a :class:`Packed` launch instead — the parameters packed once into 8-byte slots,
only the data pointers written per call, libcuda's ``cuLaunchKernel`` called through ctypes with
the plan's ``CUkernel`` — since ``cuda.core.launch`` converts every parameter on every call.
They check themselves once (the small kernel again, launched with a pointer swapped in) and
fall back to ``cuda.core`` if that fails, or if the driver refuses a launch;
``FLASHLESSON_PACKED_LAUNCH=0`` turns them off.

Streams: a launch goes to ``arrays.current_stream()``, which the public functions set with
``with arrays.using(operand):`` — torch's current stream when their inputs are torch tensors (so
``torch.cuda.stream(s)`` blocks and CUDA-graph capture work), the legacy default stream 0
otherwise.

CUDA gives a kernel at most 48 KB of dynamic shared memory unless the kernel is opted in with
``cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)`` (up to 227 KB on the H100/H200). Numba has
no public API for it (feature request NVIDIA/numba-cuda#94); the plan sets the attribute once
per compiled kernel through the handle above. In the simulator there is no limit to lift.
"""

import ctypes
import os
import struct
import sys
import threading

import numpy as np
from numba import cuda

from . import arrays, checks, device
from .arrays import DevArray

_opted_in = {}

# The fast path: on unless FLASHLESSON_FAST_LAUNCH=0 (tests switch it per test).
FAST = os.environ.get("FLASHLESSON_FAST_LAUNCH", "1").strip() != "0"
# Counters (tests read them): plans built, launches by path.
STATS = {"plans": 0, "fast": 0, "numba": 0}
MAX_PLANS = 4096                # the cache is cleared past this many keys
_PLANS = {}
_STATE = {"broken": None, "self_tested": False, "warned": False}


# Device facts asked once per process (each ask goes through Numba's context lookup and the
# driver: several µs, and the config checks ask on every call). All GPUs of one process are
# taken to be of one kind.
_FACTS = {}


def max_shared_bytes():
    """The most dynamic shared memory one block may opt in to on this device."""
    if device.SIMULATOR:
        return 227 * 1024
    n = _FACTS.get("smem")
    if n is None:
        n = _FACTS["smem"] = cuda.get_current_device().MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    return n


def compute_capability():
    """The device's (major, minor) compute capability (asked once)."""
    cc = _FACTS.get("cc")
    if cc is None:
        cc = _FACTS["cc"] = tuple(cuda.get_current_device().compute_capability)
    return cc


def sm_count():
    """The device's number of SMs (asked once)."""
    n = _FACTS.get("sms")
    if n is None:
        n = _FACTS["sms"] = cuda.get_current_device().MULTIPROCESSOR_COUNT
    return n


def _set_max_shared(cufunc, nbytes):
    if _opted_in.get(cufunc.handle, 0) < nbytes:
        from numba.cuda.cudadrv.driver import binding, driver
        attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        driver.cuKernelSetAttribute(attr, nbytes, cufunc.handle, cufunc.device.id)
        _opted_in[cufunc.handle] = nbytes


def _opt_in(kernel, args, nbytes):
    """Numba's path: a specialization for these argument types, opted in to ``nbytes``."""
    spec = kernel.specialize(*args)                 # compiled for these argument types
    overload = next(iter(spec.overloads.values()))
    _set_max_shared(overload._codelibrary.get_cufunc(), nbytes)
    return spec


# --- the context of a thread ------------------------------------------------------------------
# The driver launches in the calling thread's current context. A thread that has not used CUDA
# through Numba has none (torch's autograd runs a backward on its own thread): cuLaunchKernel
# then answers CUDA_ERROR_INVALID_CONTEXT. Numba's current_context() makes the device's primary
# context current on the thread; done once per thread.
_THREAD = threading.local()


def ensure_context():
    """Make the device's context current on the calling thread, once per thread."""
    if not getattr(_THREAD, "ready", False):
        cuda.current_context()
        _THREAD.ready = True


# --- streams ---------------------------------------------------------------------------------
# The stream of a call is chosen by ``arrays.using(operand)`` (torch's current stream for torch
# tensors, else 0), which the public functions enter; launches read it here.
current_stream = arrays.current_stream
_CORE_STREAMS = {}


def _core_stream(handle):
    s = _CORE_STREAMS.get(handle)
    if s is None:
        from cuda.core import Stream
        s = _CORE_STREAMS[handle] = Stream.from_handle(handle)
    return s


# --- plans ---------------------------------------------------------------------------------
class _Unsupported(Exception):
    """An argument kind the fast path does not flatten: Numba's launch is used."""


def _arg_key(a):
    t = type(a)
    if t is DevArray:
        return (a.dtype, a.shape)
    shape = getattr(a, "shape", None)
    if shape is not None and hasattr(a, "dtype") and not isinstance(a, np.generic):
        return (t, np.dtype(a.dtype), tuple(shape))
    return t


def _scalar_converter(ty):
    from numba.cuda import types
    if isinstance(ty, types.Integer):
        return getattr(ctypes, f"c_{ty}")
    if ty == types.float32:
        return ctypes.c_float
    if ty == types.float64:
        return ctypes.c_double
    if ty == types.boolean:
        return bool
    raise _Unsupported(f"argument type {ty}")


def _pointer(a):
    if type(a) is DevArray:
        return a.ptr
    return a.__cuda_array_interface__["data"][0] or 0


def param_template(argument_types, args):
    """(template, arrays, scalars): the kernel's parameters in Numba's ABI for ``args`` of
    these Numba types, and where each array's data pointer and each scalar go in it."""
    from numba.cuda import types
    template, arrays, scalars = [], [], []
    for i, (ty, a) in enumerate(zip(argument_types, args)):
        if isinstance(ty, types.Array):
            if ty.layout != "C":
                raise _Unsupported(f"argument {i}: layout {ty.layout}")
            v = a if type(a) is DevArray else DevArray.from_interface(a)
            template += [0, 0, v.size, v.dtype.itemsize]
            arrays.append((i, len(template)))
            template += [v.ptr, *v.shape, *v.strides]
        else:
            conv = _scalar_converter(ty)
            scalars.append((i, len(template), conv))
            template.append(conv(a))
    return template, tuple(arrays), tuple(scalars)


class Plan:
    """One launch's fixed part: kernel, grid, block, shared bytes, and on the GPU the compiled
    function, launch configuration and parameter template (see the module docstring)."""

    __slots__ = ("kernel", "grid", "block", "shared", "fast", "numba_kernel", "cu_kernel",
                 "config", "template", "arrays", "scalars", "why_slow", "calls")

    def __init__(self, kernel, grid, block, shared, args):
        STATS["plans"] += 1
        grid, block = tuple(int(n) for n in grid), tuple(int(n) for n in block)
        self.kernel, self.grid, self.block, self.shared = kernel, grid, block, shared
        self.fast, self.numba_kernel, self.why_slow, self.calls = False, None, "", 0
        checks.grid(grid)                   # (callers name the argument first where they can)
        if shared > max_shared_bytes():
            raise ValueError(f"the launch needs {shared} bytes of shared memory per block; "
                             f"this device allows {max_shared_bytes()}")
        if device.SIMULATOR:
            self.why_slow = "the simulator"
        elif not FAST or _STATE["broken"] is not None:
            self.why_slow = "fast launch off" if not FAST else "fast launch failed"
        else:
            try:
                self._build_fast(args)
                self.fast = True
            except _Unsupported as exc:
                self.why_slow = str(exc)
            except Exception as exc:            # noqa: BLE001 - said once, then Numba's call
                _disable(f"building a launch plan failed ({exc!r})")
                self.why_slow = "fast launch failed"

    def _build_fast(self, args):
        from cuda.core import LaunchConfig
        kernel = self.kernel
        argtypes = tuple(kernel.typeof_pyval(a) for a in args)
        overload = kernel.compile(argtypes)
        if overload.debug or overload.cooperative or overload.extensions:
            raise _Unsupported("a debug, cooperative or extended kernel")
        cufunc = overload._codelibrary.get_cufunc()
        if self.shared:                 # (static shared arrays count against 48 KB too:
            _set_max_shared(cufunc, self.shared)    # opt in to the dynamic size every time)
        template, arrays, scalars = param_template(overload.argument_types, args)
        self.cu_kernel = cufunc.kernel
        self.config = LaunchConfig(grid=self.grid, block=self.block, shmem_size=self.shared)
        self.template, self.arrays, self.scalars = template, arrays, scalars

    def params(self, args):
        """The kernel's parameters for these arguments (fast path)."""
        p = self.template.copy()
        for i, j in self.arrays:
            p[j] = _pointer(args[i])
        for i, j, conv in self.scalars:
            p[j] = conv(args[i])
        return p

    def __call__(self, args, stream=0):
        self.calls += 1
        if self.fast and _STATE["broken"] is None:
            if not _STATE["self_tested"]:
                _self_test()
            if _STATE["broken"] is None:
                core_launch = _CORE["launch"] or _load_core_launch()
                ensure_context()
                try:
                    core_launch(_core_stream(stream), self.config, self.cu_kernel,
                                *self.params(args))
                    STATS["fast"] += 1
                    return
                except Exception as exc:        # noqa: BLE001 - said once, then Numba's call
                    if self.calls > 1:
                        raise                   # (it worked before: a real launch error)
                    self.numba_launch(args, stream)     # raises if the launch itself is wrong:
                    _disable(f"the first fast launch of {self.name} raised {exc!r}")   # (the
                    return                      # fast path stays on then; here only it failed)
        self.numba_launch(args, stream)

    def launch_params(self, params, stream):
        """The fast launch with its parameters ready (``flashlesson.calls`` replays: a plan
        that has launched before, on a fast path that is still on)."""
        self.calls += 1
        STATS["fast"] += 1
        ensure_context()
        (_CORE["launch"] or _load_core_launch())(_core_stream(stream), self.config,
                                                 self.cu_kernel, *params)

    def numba_launch(self, args, stream=0):
        """Numba's own call, ``kernel[grid, block, stream, shared](*args)``."""
        STATS["numba"] += 1
        if device.SIMULATOR:
            self.kernel[self.grid, self.block, 0, self.shared](*args)
            return
        kernel = self.numba_kernel
        if kernel is None:
            kernel = self.kernel
            if self.shared:
                kernel = _opt_in(kernel, args, self.shared)
            self.numba_kernel = kernel
        kernel[self.grid, self.block, _core_stream(stream) if stream else 0,
               self.shared](*args)

    @property
    def name(self):
        return getattr(getattr(self.kernel, "py_func", None), "__name__", repr(self.kernel))


_CORE = {"launch": None}                        # cuda.core.launch, imported at first use


def _load_core_launch():
    from cuda.core import launch as core_launch
    _CORE["launch"] = core_launch
    return core_launch


def _disable(why):
    """Turn the fast path off for the rest of the process, said once on stderr."""
    _STATE["broken"] = why
    if not _STATE["warned"]:
        _STATE["warned"] = True
        print(f"flashlesson: warning: {why}; kernels are launched through Numba's call from now "
              "on (slower, same results)", file=sys.stderr)


# --- packed launches (the call plans' replays) ------------------------------------------------
# FLASHLESSON_PACKED_LAUNCH=0 (or PACKED = False): replays launch through cuda.core too.
PACKED = os.environ.get("FLASHLESSON_PACKED_LAUNCH", "1").strip() != "0"
_CU = {"launch": None, "state": None}     # libcuda's cuLaunchKernel; None / "ok" / why not
_MASK64 = (1 << 64) - 1


def _slot_bits(p):
    """The 8-byte slot of one kernel parameter: its value's bytes, little-endian (the driver
    copies the parameter's own size from the slot's start). Python ints are Numba's intp
    fields, bools one byte, ctypes scalars their C type."""
    if type(p) is bool:
        return int(p)
    if type(p) is int:
        return p & _MASK64
    if isinstance(p, ctypes.c_float):
        return struct.unpack("<I", struct.pack("<f", p.value))[0]
    if isinstance(p, ctypes.c_double):
        return struct.unpack("<Q", struct.pack("<d", p.value))[0]
    if isinstance(p, ctypes._SimpleCData) and type(p.value) is int:
        return p.value & _MASK64
    raise _Unsupported(f"a parameter of type {type(p).__name__}")


def cu_function(name, argtypes):
    """libcuda's function ``name`` through ctypes, returning its CUresult as an int (the GIL
    released during the call): the packed launches' cuLaunchKernel, the side stream's stream
    and event calls."""
    fn = getattr(ctypes.CDLL("libcuda.so.1"), name)
    fn.restype, fn.argtypes = ctypes.c_int, argtypes
    return fn


def _load_cu_launch():
    """libcuda's ``cuLaunchKernel`` (``cu_function``). The H200 timed ctypes.PyDLL (the GIL
    kept) and cuda.bindings' binding within noise of it, 2026-12-01 (docs/results.md, "Host
    overhead per call")."""
    fn = cu_function("cuLaunchKernel",
                     [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3)
    _CU["launch"] = fn
    return fn


# A packed launch names its kernel by the CUfunction of the current context (asked once,
# cuKernelGetFunction), so that cuLaunchKernel need not look it up from the CUkernel on every
# launch; FLASHLESSON_CUFUNCTION=0 passes the CUkernel's handle instead (both are valid).
CUFUNCTION = os.environ.get("FLASHLESSON_CUFUNCTION", "1").strip() != "0"


def function_handle(kernel):
    """The handle a packed launch passes for cuda.core's ``kernel``: its CUfunction in the
    current context where ``CUFUNCTION`` and the driver give one, else its CUkernel's."""
    handle = int(kernel.handle)
    if CUFUNCTION:
        try:
            from cuda.bindings import driver as drv
            err, func = drv.cuKernelGetFunction(drv.CUkernel(handle))
            if int(err) == 0 and int(func):
                return int(func)
        except Exception:                       # noqa: BLE001 - the CUkernel works as well
            pass
    return handle


class Packed:
    """One launch of a fast plan with its parameters packed once: an 8-byte slot per kernel
    parameter and the ``void*`` array ``cuLaunchKernel``'s ``kernelParams`` points to. A call
    writes only the data pointers into their slots and calls the driver through ctypes —
    cuda.core's ``launch`` packs every parameter on every call instead. The kernel is the
    plan's ``CUkernel``, which ``cuLaunchKernel`` takes in place of a ``CUfunction`` (the
    context then comes from the stream, or is the current one for stream 0). A lock makes
    the slot writes and the launch one step (threads may share a call plan)."""

    __slots__ = ("plan", "func", "dims", "slots", "argv", "addr", "lock")

    def __init__(self, plan, params):
        n = max(len(params), 1)
        self.slots = (ctypes.c_uint64 * n)(*map(_slot_bits, params))
        base = ctypes.addressof(self.slots)
        self.argv = (ctypes.c_void_p * n)(*(base + 8 * j for j in range(n)))
        self.addr = ctypes.addressof(self.argv)
        self.func = function_handle(plan.cu_kernel)
        self.dims = (plan.grid + (1, 1))[:3] + (plan.block + (1, 1))[:3] + (plan.shared,)
        self.plan, self.lock = plan, threading.Lock()

    def __call__(self, where, ptrs, stream):
        """Launch with ``slots[j] = ptrs[k] + offset`` for each (j, k, offset) of ``where``;
        returns the driver's status (0: launched)."""
        launch = _CU["launch"] or _load_cu_launch()
        ensure_context()                        # (a thread of its own: autograd's backward)
        slots = self.slots
        with self.lock:
            for j, k, offset in where:
                slots[j] = ptrs[k] + offset
            rc = launch(self.func, *self.dims, stream, self.addr, None)
        if not rc:
            self.plan.calls += 1
            STATS["fast"] += 1
        return rc


def packed(plan, params):
    """A :class:`Packed` launch of ``plan`` (fast, launched before) with these parameters, or
    None where packed launches are off or failed their self-test (the replay then launches
    through cuda.core)."""
    if not PACKED or device.SIMULATOR:
        return None
    if _CU["state"] is None:
        _packed_self_test()
    if _CU["state"] != "ok":
        return None
    try:
        return Packed(plan, params)
    except Exception:                           # noqa: BLE001 - an unusual parameter type
        return None


# --- plan lookup and launch -----------------------------------------------------------------
def _dims(d):
    if isinstance(d, tuple):
        return d
    if isinstance(d, list):
        return tuple(d)
    return (int(d),)


def plan_for(kernel, grid, block, args, shared_bytes=0):
    """The plan of this launch: cached per key, built on first use."""
    grid, block = _dims(grid), _dims(block)
    key = (kernel, grid, block, shared_bytes) + tuple(map(_arg_key, args))
    plan = _PLANS.get(key)
    if plan is None:
        device.announce()                       # (once a process: the first launch says where)
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.clear()
        plan = _PLANS[key] = Plan(kernel, grid, block, int(shared_bytes), args)
    return plan


def launch(kernel, grid, block, args, shared_bytes=0):
    """Launch ``kernel`` on ``args`` (a tuple) through its cached plan, on the stream of the
    enclosing ``arrays.using`` (0 by default); opts in above 48 KB of shared memory. Inside
    ``arrays.recording_into(events)`` the launch is noted there (``flashlesson.calls``)."""
    args = tuple(args)
    plan = plan_for(kernel, grid, block, args, shared_bytes)
    plan(args, current_stream())
    events = arrays.recording()
    if events is not None:
        events.append(("launch", (plan, args)))


# --- two kernels side by side (a backward's dK/dV and dQ kernels) -------------------------------
# Two kernels that read the same inputs and write disjoint outputs need not wait for each other:
# launched back to back on one stream, the first one's last wave leaves SMs idle that the second
# could fill. ``launch_beside`` puts the second on a side stream forked from the current one (an
# event recorded there, the side stream waiting for it: it starts after everything queued before)
# and joins it back (an event on the side stream that the current one waits for: everything queued
# after waits for both). Measured on the H200 (2026-12-02, the public call's launches replayed both
# ways, docs/results.md): the fp16 wgmma backward 1–6 % faster, bitwise the same gradients. Per
# thread: one non-blocking side stream and two events (no timing), made at first use and kept for
# the process's life (per thread, so that a capture on one thread never takes in another thread's
# side launches, and one thread's fork never waits on another's event). Host cost: four driver
# calls through ctypes a call (the fp16 backward's replay on the H200, 2026-12-02: 49 µs, no
# context lookup per call; docs/results.md). A CUDA-graph capture on the current stream takes the
# fork in (the documented fork/join pattern). FLASHLESSON_SIDE_STREAM=0 (or SIDE = False), and
# always the simulator: one after the other.
SIDE = os.environ.get("FLASHLESSON_SIDE_STREAM", "1").strip() != "0"
_SIDE_LOCAL = threading.local()
_CU_SIDE = {}                   # libcuda's functions for it, loaded at first use


def _cu_side():
    if not _CU_SIDE:
        ptr, ptrp = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
        for name, argtypes in (("cuStreamCreate", [ptrp, ctypes.c_uint]),
                               ("cuEventCreate", [ptrp, ctypes.c_uint]),
                               ("cuEventRecord", [ptr, ptr]),
                               ("cuStreamWaitEvent", [ptr, ptr, ctypes.c_uint])):
            _CU_SIDE[name] = cu_function(name, argtypes)
    return _CU_SIDE


def _cu_failed(rc, what):
    raise RuntimeError(f"flashlesson: {what} failed with CUDA error {rc}")


def side_stream():
    """(side stream, fork event, join event) of this thread, made at its first use in the
    thread's context (the launch layer works in one context a thread: ``ensure_context``)."""
    handles = getattr(_SIDE_LOCAL, "handles", None)
    if handles is None:
        ensure_context()
        cu = _cu_side()
        stream, ev_fork, ev_join = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        rc = cu["cuStreamCreate"](ctypes.byref(stream), 1)          # CU_STREAM_NON_BLOCKING
        if rc:
            _cu_failed(rc, "cuStreamCreate (a side stream)")
        for ev in (ev_fork, ev_join):
            rc = cu["cuEventCreate"](ctypes.byref(ev), 2)           # CU_EVENT_DISABLE_TIMING
            if rc:
                _cu_failed(rc, "cuEventCreate")
        handles = _SIDE_LOCAL.handles = (stream.value, ev_fork.value, ev_join.value)
    return handles


def fork(stream):
    """This thread's side-stream handles (side stream, fork event, join event), the side
    stream made to wait for everything queued on ``stream`` so far."""
    handles = getattr(_SIDE_LOCAL, "handles", None) or side_stream()
    cu = _CU_SIDE
    rc = cu["cuEventRecord"](handles[1], stream or None) or \
        cu["cuStreamWaitEvent"](handles[0], handles[1], 0)
    if rc:
        _cu_failed(rc, "the fork (cuEventRecord, cuStreamWaitEvent)")
    return handles


def join(stream, handles):
    """Make ``stream`` wait for everything queued on the side stream of ``handles`` (fork's)
    so far."""
    cu = _CU_SIDE
    rc = cu["cuEventRecord"](handles[2], handles[0]) or \
        cu["cuStreamWaitEvent"](stream or None, handles[2], 0)
    if rc:
        _cu_failed(rc, "the join (cuEventRecord, cuStreamWaitEvent)")


def beside():
    """True where ``launch_beside`` forks (GPU, SIDE on)."""
    return SIDE and not device.SIMULATOR


def pair_on(stream, first, x1, second, x2):
    """``first(x1, stream)``, then ``second(x2, side)`` on the side stream between a fork and
    a join — or on ``stream`` too where ``beside()`` is False. first and second: anything
    called as f(x, stream) (a Plan with its args; flashlesson.calls' replayed steps with
    their pointers)."""
    if beside():
        handles = fork(stream)
        first(x1, stream)
        second(x2, handles[0])
        join(stream, handles)
    else:
        first(x1, stream)
        second(x2, stream)


def launch_beside(first, second):
    """Launch two independent kernels, each given as (kernel, grid, block, args,
    shared_bytes): ``first`` on the current stream, ``second`` on the side stream between a
    fork and a join (``pair_on``); one after the other where ``beside()`` is False. Both
    plans are built (and their grids checked) before either launches. Inside
    ``arrays.recording_into(events)`` the pair is noted as ("beside", ((plan, args), (plan,
    args)))."""
    pair = []
    for kernel, grid, block, args, shared in (first, second):
        args = tuple(args)
        pair.append((plan_for(kernel, grid, block, args, shared), args))
    (p1, a1), (p2, a2) = pair
    pair_on(current_stream(), p1, a1, p2, a2)
    events = arrays.recording()
    if events is not None:
        events.append(("beside", tuple(pair)))


def fast_state():
    """None while the fast path is usable, else why it was turned off."""
    return _STATE["broken"]


_ON_CLEAR = []


def on_clear(fn):
    """Call ``fn()`` whenever the plans are cleared (``flashlesson.calls`` forgets its call
    plans then: they hold launch plans)."""
    _ON_CLEAR.append(fn)


def clear_plans():
    """Forget every plan, and every call plan built on them (tests: count builds from zero)."""
    _PLANS.clear()
    for fn in _ON_CLEAR:
        fn()


# --- the self-test of the fast path ----------------------------------------------------------
_PROBE = None


def _probe_kernel():
    global _PROBE
    if _PROBE is None:
        @cuda.jit
        def probe(out, a, s, n, u, flag, m):
            i = cuda.grid(1)
            if i < out.shape[0]:
                out[i] = a[i // a.shape[1], i % a.shape[1]] * s + n + u + \
                    (100.0 if flag else 0.0) + m[i]
        _PROBE = probe
    return _PROBE


def _self_test():
    """Launch a small kernel (2-D and 1-D arrays, float32, int64, uint32 and bool scalars)
    through the fast path and compare with the expected values; disagreement turns the fast
    path off. Runs once, before the first fast launch (one synchronisation)."""
    _STATE["self_tested"] = True
    try:
        from cuda.core import launch as core_launch
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        m = np.arange(12, dtype=np.float32) * 1000
        da = DevArray.from_interface(cuda.to_device(a))
        dm = DevArray.from_interface(cuda.to_device(m))
        dout = cuda.device_array(12, np.float32)
        out = DevArray.from_interface(dout)
        args = (out, da, np.float32(0.5), 7, np.uint32(3), True, dm)
        plan = Plan(_probe_kernel(), (1,), (32,), 0, args)
        STATS["plans"] -= 1                     # (not a plan of the library's calls)
        if not plan.fast:
            raise RuntimeError(plan.why_slow)
        core_launch(_core_stream(0), plan.config, plan.cu_kernel, *plan.params(args))
        got = dout.copy_to_host()
        want = a.reshape(-1) * np.float32(0.5) + 7 + 3 + 100 + m
        if not np.array_equal(got, want.astype(np.float32)):
            raise RuntimeError(f"the fast launch computed {got[:4]}…, expected {want[:4]}…")
    except Exception as exc:                    # noqa: BLE001 - said once, then Numba's call
        _disable(f"the fast launch path failed its self-test ({exc!r})")


def _packed_self_test():
    """The probe kernel through a :class:`Packed` launch — packed with one output, launched
    with another written into its slot — compared with the expected values; a failure says so
    once on stderr and leaves the replays on cuda.core's launch."""
    _CU["state"] = "testing"
    try:
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        m = np.arange(12, dtype=np.float32) * 1000
        da = DevArray.from_interface(cuda.to_device(a))
        dm = DevArray.from_interface(cuda.to_device(m))
        douts = [cuda.device_array(12, np.float32) for _ in range(2)]
        outs = [DevArray.from_interface(x) for x in douts]
        args = (outs[0], da, np.float32(0.5), -7, np.uint32(3), True, dm)
        plan = Plan(_probe_kernel(), (1,), (32,), 0, args)
        STATS["plans"] -= 1                     # (not a plan of the library's calls)
        if not plan.fast:
            raise RuntimeError(plan.why_slow)
        launcher = Packed(plan, plan.params(args))
        rc = launcher(((plan.arrays[0][1], 0, 0),), [outs[1].ptr], 0)
        if rc:
            raise RuntimeError(f"cuLaunchKernel returned CUDA error {rc}")
        got = douts[1].copy_to_host()
        want = (a.reshape(-1) * np.float32(0.5) - 7 + 3 + 100 + m).astype(np.float32)
        if not np.array_equal(got, want):
            raise RuntimeError(f"the packed launch computed {got[:4]}…, expected {want[:4]}…")
        _CU["state"] = "ok"
    except Exception as exc:                    # noqa: BLE001 - said once, then cuda.core
        _CU["state"] = f"failed its self-test ({exc!r})"
        print(f"flashlesson: warning: the packed launch {_CU['state']}; replayed calls launch "
              "through cuda.core (slower, same results)", file=sys.stderr)


def packed_state():
    """None until the first packed launch, "ok", or why packed launches are off."""
    return _CU["state"] if PACKED else "off (FLASHLESSON_PACKED_LAUNCH=0)"


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


# Placeholders and alignment shared by the attention launchers
_DUMMIES = {}


def dummy(kind):
    """Placeholders for the arguments a kernel specialization does not use (made once, kept
    for the life of the process)."""
    if kind not in _DUMMIES:
        arr = cuda.to_device({"mask": np.zeros((1, 1), np.uint8),
                              "acc": np.zeros((1, 1, 1), np.float32)}.get(kind,
                                                                        np.zeros(2, np.int32)))
        _DUMMIES[kind] = arr if device.SIMULATOR else DevArray.from_interface(arr)
    return _DUMMIES[kind]


def is_placeholder(a):
    """True if ``a`` is one of ``dummy``'s placeholders (a fixed address)."""
    return any(a is d for d in _DUMMIES.values())


def aligned16(*arrays):
    """True if every array's data starts on a 16-byte boundary (then rows of d % 4 == 0 floats
    can be read 16 bytes at a time). Fresh allocations always do; a view into a bigger tensor
    may not."""
    if device.SIMULATOR:
        return True
    return all((a.ptr if type(a) is DevArray else a.__cuda_array_interface__["data"][0]) % 16
               == 0 for a in arrays)


def rows16(width, *arrays):
    """Whether rows of ``width`` 4-byte elements (float32, or uint32 pairs of halves) of these
    C-contiguous arrays can be read 16 bytes at a time (the kernels' VEC): width % 4 == 0, so
    every row starts on a multiple of four elements, and the data on a 16-byte boundary
    (``aligned16``)."""
    return width % 4 == 0 and aligned16(*arrays)
