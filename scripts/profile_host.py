"""Host (Python) time per public call, with or without a GPU (the launch layer's cost).

    python scripts/profile_host.py            # no GPU needed: fake driver
    python scripts/profile_host.py --real     # on a GPU: real torch, real launches
    ... --profile [softmax|attention32|attention16|backward32|backward16|torch_step] [--top 40]
    python scripts/profile_host.py --check    # replayed calls == full path

Without ``--real`` the library's **GPU code path** runs (not the simulator's: numba.cuda is
imported with ``NUMBA_ENABLE_CUDASIM=0`` before flashlesson, so ``device.SIMULATOR`` is False)
with everything that touches the driver replaced by fakes, for profiling only:

- ``cuda.core.launch`` → a no-op; ``launch._core_stream`` → the handle itself;
  ``launch.ensure_context`` → a no-op; the one-time
  self-test of the fast path is skipped;
- ``Plan._build_fast`` → the real parameter template (``launch.param_template``) built from the
  argument types Numba infers (``typeof_pyval``) instead of a compiled overload's, with a dummy
  kernel handle and launch configuration (no NVVM, no driver);
- libcuda's ``cuLaunchKernel`` of the packed launches (``launch.Packed``, the call plans'
  replays) → a Python stand-in returning 0 (so ctypes' argument conversion, ~1 µs, is left
  out), their self-test skipped;
- the pool's ``cuMemAllocAsync`` (``arrays.PoolBlock``) → a counter;
- ``torch``, when it is not installed, by a minimal fake module (``FakeTensor``: dtype, shape,
  data_ptr, is_contiguous, view, detach; ``torch.empty``; ``torch.cuda.current_stream``;
  ``autograd.Function.apply``) — so a "torch" figure here is flashlesson's Python around a
  torch call, with torch's own C++ cost left out.

What is left is the library's own host cost: validation, plan lookup, parameter packing and
result wrapping. The table gives µs per call of each public call and of its stages
(``Operand``, ``plan_for``, ``Plan.params``, ``empty``/``result``), and ``--profile NAME``
prints cProfile's view sorted by cumulative time. With ``--real`` (a GPU) the same calls run
unfaked on torch CUDA tensors (GPU kept busy so that only the host is timed is not needed for
the Python profile; the per-call figure is host time measured back to back, synchronised at
the end).

CPU harness, Python only, not a GPU measurement. Python function calls per call (cProfile's
count: the 2-core shared CPU this was written on makes µs vary 2× from run to run), before and
after the first fixes (commit "launch/arrays hot paths"):

| call                                              | before | after |
|---------------------------------------------------|-------:|------:|
| softmax fp32 [4096, 1024]                         |    138 |   116 |
| attention fp32 causal B1 H2 N128 d64              |    428 |   343 |
| attention fp16 causal B1 H2 N128 d64              |    454 |   363 |
| attention_backward fp32 causal                    |    859 |   664 |
| attention_backward fp16 causal                    |    906 |   693 |
| flashlesson.torch forward + backward              |   1435 |  1149 |

Not visible in these counts (the fake device answers at once): the fp32 forward asked Numba
for the current device (a context lookup through the driver) once per call for the SM count,
and the fp32 backward twice per call for the shared-memory limit in its config check; both are
now asked once per process (``launch.sm_count``, ``launch.max_shared_bytes``) and a config's
check runs once per (config, d).

(µs on that CPU, fastest of 5 runs, before → after, quiet moments: softmax 27 → 22, attention
fp32 87 → ~80, backward fp32 ~280 → ~180; the H200 host's figures are in docs/results.md.)

Second round, call plans (``flashlesson.calls``: a torch call seen before replays its recorded
launches through packed launches). Python calls per call, and µs per call (the fastest of 7
interleaved runs of each side with this file; the garbage collector off while timing, as
timeit does — a full collection over Numba's objects costs ~50 ms and used to land inside the
fake torch step, whose Function kept a reference cycle):

| call                                              | calls before | after | µs before | after |
|---------------------------------------------------|-------------:|------:|----------:|------:|
| softmax fp32 [4096, 1024]                         |          116 |    34 |      23.1 |   5.1 |
| attention fp32 causal B1 H2 N128 d64              |          348 |    56 |      58.3 |   7.9 |
| attention fp16 causal B1 H2 N128 d64              |          361 |    56 |      67.9 |   7.8 |
| attention_backward fp32 causal                    |          664 |   106 |     120.8 |  15.7 |
| attention_backward fp16 causal                    |          686 |   106 |     139.0 |  15.8 |
| flashlesson.torch forward + backward              |         1154 |   196 |     200.6 |  34.9 |

(2-core CPU shared with other jobs, load 20–30: the µs are upper bounds. torch's own C++ —
``torch.empty``, accessors, autograd — and the driver's launch are not in them.)

``--check`` (no timing; tests/test_calls.py runs it) calls every case of ``check_cases`` — the
methods and tiers of softmax, attention and its backward in fp32/fp16/bf16 with masks, scales,
LSE, an unaligned view, the naive and lesson paths, a flashlesson.torch step — three times:
full path (``calls.ENABLED = False``), recorded, replayed; each launch's kernel, grid, block,
shared bytes, stream and parameters (pointers into this call's allocations as (ordinal,
offset)) and the results' shapes and dtypes must agree. Then options that the full path
refuses (``causal=1``, ``scale=True``, ...) must still raise after their key was recorded.
"""

import argparse
import cProfile
import ctypes
import gc
import os
import pstats
import sys
import time
import types

import numpy as np

REAL = "--real" in sys.argv
# call plans (flashlesson.calls) are off by default until their GPU check passes; the harness
# times and checks the path with them on
os.environ.setdefault("FLASHLESSON_CALL_PLANS", "1")
PACKED_SIZES = {}           # (--check) address of a packed launch's kernelParams → its length
FAKE = {}                   # the fake driver's counters and launch log


# --- a minimal fake torch (only when torch is not installed, or --fake-torch) -------------------
def _install_fake_torch():
    torch = types.ModuleType("torch")
    torch.__version__ = "fake"

    class dtype:
        def __init__(self, name, itemsize, fp):
            self.name, self.itemsize, self.is_floating_point = name, itemsize, fp

        def __repr__(self):
            return f"torch.{self.name}"

        __str__ = __repr__

    for name, size, fp in (("float32", 4, True), ("float16", 2, True), ("bfloat16", 2, True),
                           ("float64", 8, True), ("int32", 4, False), ("int64", 8, False),
                           ("uint8", 1, False), ("bool", 1, False), ("int16", 2, False)):
        setattr(torch, name, dtype(name, size, fp))

    class device:
        def __init__(self, spec="cuda:0"):
            self.type, self.index = "cuda", 0

    class Size(tuple):
        pass

    torch.contiguous_format = "contiguous_format"

    _next = [1 << 32]
    _clones = {}

    class Tensor:
        def __init__(self, shape, dt, ptr=None, requires_grad=False):
            self.shape = Size(int(n) for n in shape)
            self.dtype, self.device, self.is_cuda = dt, device(), True
            if ptr is None:                     # (torch's allocator: 512-byte aligned)
                _next[0] += -_next[0] % 512
                ptr = _next[0]
                _next[0] += max(self.numel() * dt.itemsize, 1) + 256
            self._ptr, self.requires_grad, self.grad = ptr, requires_grad, None

        def numel(self):
            n = 1
            for e in self.shape:
                n *= e
            return n

        def dim(self):
            return len(self.shape)

        def data_ptr(self):
            return self._ptr

        def get_device(self):
            return 0

        def element_size(self):
            return self.dtype.itemsize

        def is_contiguous(self):
            return True

        def is_neg(self):
            return False

        def is_conj(self):
            return False

        def contiguous(self):
            return self

        def detach(self):
            return Tensor(self.shape, self.dtype, self._ptr)

        def clone(self, memory_format=None):
            # a fresh allocation, the same one each time the same tensor is cloned: the check
            # compares a case's launches, pointers included, between its runs
            key = (self._ptr, tuple(self.shape), self.dtype.name)
            if key not in _clones:
                _clones[key] = Tensor(self.shape, self.dtype)._ptr
            return Tensor(self.shape, self.dtype, _clones[key])

        def stride(self):
            out, step = [], 1
            for e in reversed(self.shape):
                out.append(step)
                step *= e
            return tuple(reversed(out))

        def size(self, i=None):
            return self.shape if i is None else self.shape[i]

        def view(self, *spec):
            if len(spec) == 1 and isinstance(spec[0], dtype):
                dt = spec[0]
                last = self.shape[-1] * self.dtype.itemsize // dt.itemsize
                return Tensor(self.shape[:-1] + (last,), dt, self._ptr)
            shape = spec[0] if len(spec) == 1 and isinstance(spec[0], (tuple, list)) else spec
            return Tensor(shape, self.dtype, self._ptr)

        reshape = view

        def to(self, device=None, dtype=None):
            return self if dtype is None or dtype is self.dtype else Tensor(self.shape, dtype)

        def fill_(self, value):
            return self

        def float(self):
            return self.to(dtype=torch.float32)

        def half(self):
            return self.to(dtype=torch.float16)

        def item(self):
            return 12345

    for cls in (Tensor, Size, device, dtype):
        cls.__module__ = "torch"
    torch.Tensor, torch.Size, torch.device = Tensor, Size, device

    def empty(*shape, dtype=None, device=None, requires_grad=False):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return Tensor(shape, dtype or torch.float32, requires_grad=requires_grad)

    torch.empty = empty
    torch.empty_like = lambda t: Tensor(tuple(t.shape), t.dtype)
    torch.randn = empty
    torch.full = lambda shape, value, dtype=None, device=None: empty(shape, dtype=dtype)
    torch.randint = lambda lo, hi, shape, device=None: empty(shape, dtype=torch.int64)
    torch.as_tensor = lambda arr, device=None: arr
    torch.is_tensor = lambda x: isinstance(x, Tensor)

    class _Stream:
        cuda_stream = 0

    C = types.ModuleType("torch._C")
    C._cuda_getCurrentRawStream = lambda index: 0
    torch._C = C
    cuda_mod = types.ModuleType("torch.cuda")
    cuda_mod.current_stream = lambda device=None: _Stream()
    cuda_mod.is_available = lambda: True
    cuda_mod.synchronize = lambda: None
    torch.cuda = cuda_mod

    class _Ctx:
        def save_for_backward(self, *ts):
            self.saved_tensors = ts

    class Function:
        @classmethod
        def apply(cls, *args):
            ctx = _Ctx()
            out = cls.forward(ctx, *args)
            # (the harness calls backward by hand; kept on the class, not on out: ctx holds
            # out among its saved tensors, and a cycle would leave every step to the garbage
            # collector, whose full passes over Numba's objects then dominate the timing)
            Function.last = (cls, ctx)
            return out

    autograd = types.ModuleType("torch.autograd")
    autograd.Function = Function
    function = types.ModuleType("torch.autograd.function")
    function.once_differentiable = lambda backward: backward    # (no graph here to guard)
    autograd.function = function
    torch.autograd = autograd
    sys.modules.update({"torch": torch, "torch.cuda": cuda_mod, "torch.autograd": autograd,
                        "torch.autograd.function": function})
    return torch


def _have_torch():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


if not REAL:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    os.environ.pop("FLASHLESSON_DEVICE", None)
    if "--fake-torch" in sys.argv or "--check" in sys.argv or not _have_torch():
        _install_fake_torch()
    import numba.cuda  # noqa: E402,F401  (GPU mode chosen before flashlesson is imported)
else:
    import numba.cuda  # noqa: E402,F401

import torch  # noqa: E402

import flashlesson as fl  # noqa: E402
from flashlesson import arrays, launch  # noqa: E402
from flashlesson import torch as fl_torch  # noqa: E402


# --- the fake driver -------------------------------------------------------------------------
def _fake_driver():
    assert not fl.device.SIMULATOR, "the harness must run flashlesson's GPU path"
    import cuda.core

    calls = {"launch": 0, "alloc": 0, "log": None}

    def core_launch(stream, config, kernel, *params):
        calls["launch"] += 1
        if calls["log"] is not None:            # (--check: what each launch was given)
            grid, block, shared = config
            calls["log"].append((kernel.handle, (grid + (1, 1))[:3], (block + (1, 1))[:3],
                                 shared, stream, tuple(launch._slot_bits(p) for p in params)))

    cuda.core.launch = core_launch
    if hasattr(launch, "_CORE"):                # (the launch layer's cached cuda.core.launch)
        launch._CORE["launch"] = core_launch
    launch._core_stream = lambda handle: handle
    launch.ensure_context = lambda: None        # (no driver: no thread's context to make current)
    launch._STATE["self_tested"] = True

    def build_fast(self, args):
        from numba import from_dtype
        from numba.cuda import types as nbtypes
        argtypes = tuple(nbtypes.Array(from_dtype(a.dtype), len(a.shape), "C")
                         if hasattr(a, "__cuda_array_interface__") and hasattr(a, "shape")
                         else self.kernel.typeof_pyval(a) for a in args)
        self.template, self.arrays, self.scalars = launch.param_template(argtypes, args)
        self.cu_kernel = types.SimpleNamespace(handle=id(self.kernel))
        self.config = (self.grid, self.block, self.shared)

    launch.Plan._build_fast = build_fast

    def cu_launch(func, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        calls["launch"] += 1                    # (libcuda's cuLaunchKernel: a Python stand-in,
        if calls["log"] is not None:            # so ctypes' argument conversion is left out)
            n = PACKED_SIZES[params]            # (the kernel's parameters, read back from the
            argv = (ctypes.c_void_p * n).from_address(params)       # packed slots)
            values = tuple(ctypes.c_uint64.from_address(a).value for a in argv)
            calls["log"].append((func, (gx, gy, gz), (bx, by, bz), shared, stream, values))
        return 0

    if hasattr(launch, "Packed"):
        original_init = launch.Packed.__init__

        def packed_init(self, plan, params):
            original_init(self, plan, params)
            PACKED_SIZES[self.addr] = len(params)
        launch.Packed.__init__ = packed_init

    if hasattr(launch, "_CU"):                  # (the packed launches of the call plans)
        launch._CU.update(launch=cu_launch, state="ok")

    side = (0x51DE, 0, 0)                       # launch.launch_beside's side stream: its fork
    def fork(stream):                           # and join logged as launches are (--check:
        if calls["log"] is not None:            # a replay forks and joins as its full path)
            calls["log"].append(("fork", (), (), 0, stream, side[:1]))
        return side

    def join(stream, handles):
        if calls["log"] is not None:
            calls["log"].append(("join", (), (), 0, stream, handles[:1]))

    if hasattr(launch, "fork"):
        launch.fork, launch.join = fork, join
    launch.max_shared_bytes = lambda: 227 * 1024

    class FakeDevice:                           # (an H200's figures)
        id, MULTIPROCESSOR_COUNT, compute_capability = 0, 132, (9, 0)
        MAX_SHARED_MEMORY_PER_BLOCK, MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 48 * 1024, 227 * 1024

    numba.cuda.get_current_device = FakeDevice

    class FakeDeviceArray:                      # (cuda.to_device / device_array: one-time dummies)
        _next = [1 << 44]

        def __init__(self, shape, dtype):
            self.shape, self.dtype = tuple(shape), np.dtype(dtype)
            self.ptr = FakeDeviceArray._next[0]
            FakeDeviceArray._next[0] += self.dtype.itemsize * int(np.prod(self.shape)) + 256

        @property
        def __cuda_array_interface__(self):
            return {"shape": self.shape, "strides": None, "data": (self.ptr, False),
                    "typestr": self.dtype.str, "version": 3}

    numba.cuda.to_device = lambda a, stream=0: FakeDeviceArray(np.shape(a), np.asarray(a).dtype)
    numba.cuda.device_array = lambda shape, dtype=np.float32, stream=0: \
        FakeDeviceArray(shape if isinstance(shape, tuple) else (shape,), dtype)

    class FakeBlock:
        __slots__ = ("ptr", "nbytes")
        _next = [1 << 40]

        def __init__(self, nbytes):
            calls["alloc"] += 1
            self.ptr, self.nbytes = FakeBlock._next[0], nbytes
            FakeBlock._next[0] += max(int(nbytes), 1) + 256

    arrays.PoolBlock = FakeBlock
    arrays._POOL.update(ready=True, failed=None)
    FAKE["calls"] = calls
    return calls


# --- the calls ---------------------------------------------------------------------------------
def _tensor(shape, dt, grad=False):
    if REAL:
        return torch.randn(*shape, device="cuda", dtype=dt, requires_grad=grad)
    return torch.empty(shape, dtype=dt, requires_grad=grad)


def make_calls():
    """name → (label, zero-argument callable). Shapes of scripts/gpu_overhead_check.py."""
    x = _tensor((4096, 1024), torch.float32)
    shapes = {}
    for name, dt in (("32", torch.float32), ("16", torch.float16)):
        q, k, v = (_tensor((1, 2, 128, 64), dt) for _ in range(3))
        o, lse = fl.attention(q, k, v, causal=True, return_lse=True)
        do = _tensor((1, 2, 128, 64), dt)
        shapes[name] = (q, k, v, o, lse, do)
    tq, tk, tv = (_tensor((1, 2, 128, 64), torch.float32, grad=True) for _ in range(3))
    tdo = _tensor((1, 2, 128, 64), torch.float32)

    def torch_step():
        out = fl_torch.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
        if REAL:
            out.backward(tdo)
        else:                                   # the Function's backward, as autograd calls it
            fn, ctx = torch.autograd.Function.last
            fn.backward(ctx, tdo)

    def fwd(s):
        q, k, v = shapes[s][:3]
        return lambda: fl.attention(q, k, v, causal=True)

    def bwd(s):
        q, k, v, o, lse, do = shapes[s]
        return lambda: fl.attention_backward(do, q, k, v, o, lse, causal=True)

    return {
        "softmax": ("softmax fp32 [4096, 1024]", lambda: fl.softmax(x)),
        "attention32": ("attention fp32 causal B1 H2 N128 d64", fwd("32")),
        "attention16": ("attention fp16 causal B1 H2 N128 d64", fwd("16")),
        "backward32": ("attention_backward fp32 causal", bwd("32")),
        "backward16": ("attention_backward fp16 causal", bwd("16")),
        "torch_step": ("flashlesson.torch forward+backward B1 H2 N128 d64", torch_step),
    }


def per_call_us(fn, n, repeats=5):
    """Fastest of ``repeats`` runs of n back-to-back calls (one sync at the end with --real): the
    minimum, since a shared CPU only ever adds time; the garbage collector off meanwhile."""
    fn()
    fn()                                        # (warm: plans built, kernels compiled)
    runs = []
    gc.collect()
    gc.disable()                # (as timeit does: a full collection over Numba's objects
    try:                        # costs ~50 ms and lands on whichever call triggers it)
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            if REAL:
                torch.cuda.synchronize()
            runs.append((time.perf_counter() - t0) / n * 1e6)
    finally:
        gc.enable()
    return min(runs)


def python_calls(fn, n=20):
    """Python function calls per call (cProfile's count): a figure the shared CPU's noise does
    not move, for before/after comparisons."""
    fn()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    return pstats.Stats(prof).total_calls / n


def stage_table(n):
    """µs per call of the stages every public call goes through (torch fp32 [B1 H2 N128 d64])."""
    q = _tensor((1, 2, 128, 64), torch.float32)
    op = arrays.Operand(q, "q", (np.float32, np.float16))
    k = fl.softmax_methods.K.softmax_warp
    dv = op.obj.reshape((256, 64))
    args = (dv, dv)
    plan = launch.plan_for(k, 8, 128, args)
    rows = [
        ("Operand(torch tensor)", lambda: arrays.Operand(q, "q", (np.float32, np.float16))),
        ("using(op) enter+exit", lambda: arrays.using(op).__enter__().__exit__()),
        ("DevArray.reshape", lambda: op.obj.reshape((256, 64))),
        ("plan_for (cache hit)", lambda: launch.plan_for(k, 8, 128, args)),
        ("Plan.params", lambda: plan.params(args)),
        ("launch.launch (fake driver)", lambda: launch.launch(k, 8, 128, args)),
    ]
    with arrays.using(op):
        rows.append(("arrays.empty (torch)", lambda: arrays.empty((256, 64), np.float32)))
        e = arrays.empty((256, 64), np.float32)
        rows.append(("arrays.result (torch)", lambda: arrays.result(e, (1, 2, 128, 64))))
        out = [(label, per_call_us(fn, n)) for label, fn in rows]
    return out


# --- --check: a replayed call launches what its full path launches ----------------------------
def _logged(fn):
    """Run ``fn()`` with the fake driver's launches and torch.empty's allocations logged: the
    launches (kernel, grid, block, shared bytes, stream, parameters as slot bits, a pointer into
    an allocation of this call written as (its ordinal, offset)) and the results' (shape,
    dtype)."""
    log, allocs = [], []
    FAKE["calls"]["log"] = log
    empty = torch.empty

    def logged_empty(*shape, **kw):
        t = empty(*shape, **kw)
        allocs.append((t.data_ptr(), t.numel() * t.element_size()))
        return t
    empty_like = torch.empty_like

    def logged_empty_like(t0, **kw):            # (replays: an output shaped like an input)
        t = empty_like(t0, **kw)
        allocs.append((t.data_ptr(), t.numel() * t.element_size()))
        return t
    device_array = numba.cuda.device_array

    def logged_device_array(*a, **kw):          # (the naive methods' scratch arrays)
        arr = device_array(*a, **kw)
        allocs.append((arr.ptr, arr.dtype.itemsize * int(np.prod(arr.shape))))
        return arr
    torch.empty, numba.cuda.device_array = logged_empty, logged_device_array
    torch.empty_like = logged_empty_like
    try:
        result = fn()
    finally:
        torch.empty, numba.cuda.device_array = empty, device_array
        torch.empty_like = empty_like
        FAKE["calls"]["log"] = None

    def where(v):
        for i, (start, n) in enumerate(allocs):
            if start <= v < start + max(n, 1):
                return ("alloc", i, v - start)
        return v
    launches = [entry[:5] + (tuple(where(v) for v in entry[5]),) for entry in log]
    results = result if isinstance(result, tuple) else (result,)
    return launches, [(tuple(r.shape), str(r.dtype)) for r in results]


def check_cases():
    """name → call, over the paths of softmax, attention and attention_backward on (fake)
    torch tensors: methods, tiers, dtypes, masks, options, an unaligned view, the float32
    wgmma backward at d = 128 (its z grid), and two calls told apart by which input is off a
    16-byte boundary."""
    cases = {}
    for dt in (torch.float32, torch.float16):
        for n in (32, 300, 1000):
            x = _tensor((24, n), dt)
            for method in ("auto",) + tuple(fl.SOFTMAX_METHODS):
                most = fl.SOFTMAX_METHODS[method].max_n if method != "auto" else None
                if most and n > most:
                    continue
                cases[f"softmax {dt} N={n} {method}"] = \
                    lambda x=x, m=method: fl.softmax(x, method=m)
                if method not in ("auto", "naive"):
                    cases[f"softmax {dt} N={n} {method} lesson"] = \
                        lambda x=x, m=method: fl.softmax(x, method=m, tier="lesson")
        cases[f"softmax {dt} threads=256 block"] = \
            lambda x=_tensor((24, 1000), dt): fl.softmax(x, method="block", threads=256)
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        for d in (64, 40):
            q = _tensor((2, 3, 100, d), dt)
            k, v, do = (_tensor((2, 3, n, d), dt) for n in (130, 130, 100))
            o, lse = fl.attention(q, k, v, return_lse=True)
            kpm = _tensor((2, 130), torch.bool)
            for causal in (False, True):
                opts = dict(causal=causal)
                cases[f"attention {dt} d={d} {opts}"] = \
                    lambda q=q, k=k, v=v, o=opts: fl.attention(q, k, v, **o)
                cases[f"attention {dt} d={d} lse scale kpm {opts}"] = \
                    lambda q=q, k=k, v=v, o=opts, m=kpm: fl.attention(
                        q, k, v, return_lse=True, scale=0.3, key_padding_mask=m, **o)
                cases[f"attention_backward {dt} d={d} {opts}"] = \
                    lambda a=(do, q, k, v, o, lse), o=opts: fl.attention_backward(*a, **o)
                cases[f"attention_backward {dt} d={d} kpm {opts}"] = \
                    lambda a=(do, q, k, v, o, lse), o=opts, m=kpm: fl.attention_backward(
                        *a, key_padding_mask=m, scale=0.3, **o)
            if dt == torch.float32:
                for method in ("naive", "flash_fa1", "flash_db", "flash_tc") + \
                        (("flash_wgmma",) if d == 64 else ()):     # (3xTF32 on wgmma: d = 64)
                    cases[f"attention {dt} d={d} {method}"] = \
                        lambda q=q, k=k, v=v, m=method: fl.attention(q, k, v, method=m)
                if d == 64:                             # (its packing kernel reads the mask)
                    cases[f"attention {dt} d={d} flash_wgmma kpm causal"] = \
                        lambda q=q, k=k, v=v, m=kpm: fl.attention(
                            q, k, v, method="flash_wgmma", key_padding_mask=m, causal=True)
                cases[f"attention {dt} d={d} lesson"] = \
                    lambda q=q, k=k, v=v: fl.attention(q, k, v, causal=True, tier="lesson")
                for method in ("naive", "flash_tc") + (("flash_wgmma",) if d == 64 else ()):
                    cases[f"attention_backward {dt} d={d} {method}"] = \
                        lambda a=(do, q, k, v, o, lse), m=method: fl.attention_backward(
                            *a, method=m)
                cases[f"attention_backward {dt} d={d} lesson"] = \
                    lambda a=(do, q, k, v, o, lse): fl.attention_backward(*a, tier="lesson")
                # an unaligned view (4 bytes past a 16-byte boundary): no 16-byte loads
                qu = torch.Tensor((2, 3, 100, d), dt, ptr=q.data_ptr() + 4)
                cases[f"attention {dt} d={d} unaligned"] = \
                    lambda q=qu, k=k, v=v: fl.attention(q, k, v)
                if d == 64:         # (the wgmma backwards: float32's packing reads q, k, v, dO)
                    cases[f"attention_backward {dt} d={d} flash_wgmma unaligned"] = \
                        lambda a=(do, qu, k, v, o, lse): fl.attention_backward(
                            *a, method="flash_wgmma")
        if dt == torch.float32:     # 3xTF32 on wgmma at d = 128: its dK/dV grid's z axis
            q, k, v, do = (_tensor((1, 2, n, 128), dt) for n in (70, 90, 90, 70))  # (dK or dV
            o, lse = fl.attention(q, k, v, return_lse=True)                         #  blocks)
            for causal in (False, True):
                cases[f"attention_backward {dt} d=128 flash_wgmma causal={causal}"] = \
                    lambda a=(do, q, k, v, o, lse), c=causal: fl.attention_backward(
                        *a, causal=c, method="flash_wgmma")
        if dt == torch.float16:     # the key holds each input's address mod 16: LSE off its
            q, k, v, do = (_tensor((1, 2, 64, 64), dt) for _ in range(4))    # boundary, then O
            o, lse = fl.attention(q, k, v, return_lse=True)     # (the D launch's 16-byte loads
            lse_u = torch.Tensor((1, 2, 64), torch.float32,       # read o and dO: under an OR
                                 ptr=_tensor((1, 2, 68), torch.float32).data_ptr() + 4)
            o_u = torch.Tensor((1, 2, 64, 64), dt, ptr=_tensor((1, 2, 66, 64), dt).data_ptr() + 4)
            cases[f"attention_backward {dt} lse unaligned, then o unaligned"] = \
                lambda a=(do, q, k, v), b=(o, lse_u), c=(o_u, lse): (   # of all the bits the
                    fl.attention_backward(*a, *b), fl.attention_backward(*a, *c))[1]  # second
                                                            # replayed the first's plan)
    tq, tk, tv, tdo = (_tensor((1, 2, 128, 64), torch.float32, grad=True) for _ in range(4))

    def torch_step():                           # flashlesson.torch: forward, then backward
        out = fl_torch.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
        fn, ctx = torch.autograd.Function.last
        return (out,) + tuple(fn.backward(ctx, tdo)[:3])
    cases["flashlesson.torch forward + backward"] = torch_step
    return cases


def check(verbose=True):
    """Each case three times: the full path (``calls.ENABLED = False``), then a first call
    (recorded) and a second (replayed where replayable): the same launches with the same
    parameters, the same result shapes and dtypes. Then calls that a recorded key must not let
    through (``causal=1``, ``scale=True``, ``dropout_p=False``) still raise. Returns failures."""
    from flashlesson import calls as fl_calls
    failures, replayable = [], 0
    for name, fn in check_cases().items():
        launch.clear_plans()
        fl_calls.ENABLED = False
        full = _logged(fn)
        fl_calls.ENABLED = True
        launch.clear_plans()
        first = _logged(fn)
        before = fl_calls.STATS["replayed"]
        again = _logged(fn)
        replayed = fl_calls.STATS["replayed"] > before
        replayable += replayed
        ok = full == first == again and full[0]
        if verbose or not ok:
            print(f"{'ok  ' if ok else 'FAIL'} {'replayed' if replayed else 'full    '} "
                  f"{len(full[0])} launch(es)  {name}")
        if not ok:
            failures.append(name)
    q, k, v = (_tensor((1, 2, 64, 32), torch.float32) for _ in range(3))
    fl.attention(q, k, v, causal=True)
    fl.attention(q, k, v, causal=True)
    for bad, error in ((dict(causal=1), TypeError), (dict(scale=True), TypeError),
                       (dict(causal=True, dropout_p=False), TypeError),
                       (dict(return_lse=1), TypeError), (dict(method="flash "), ValueError),
                       (dict(config=[1]), TypeError)):
        try:
            fl.attention(q, k, v, **bad)
            failures.append(f"attention(**{bad}) was not refused")
        except error:
            pass
    print(f"{len(failures)} failure(s); {replayable} of the cases replayed")
    return failures


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--real", action="store_true", help="on a GPU: no fakes")
    ap.add_argument("--fake-torch", action="store_true", help="the fake torch even if installed")
    ap.add_argument("--profile", nargs="?", const="all", default=None,
                    help="cProfile one call (or all), sorted by cumulative time")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("-n", type=int, default=300, help="calls per timing run")
    ap.add_argument("--check", action="store_true",
                    help="no timing: check that replayed calls launch what the full path does")
    args = ap.parse_args(argv)
    calls = None if REAL else _fake_driver()
    if args.check:
        if REAL:
            raise SystemExit("--check runs on the fake driver (no --real)")
        return 1 if check() else 0
    table = make_calls()
    mode = "GPU, real launches" if REAL else "CPU harness, Python only, not a GPU measurement"
    print(f"# host µs per call ({mode}); torch {torch.__version__}")
    print(f"{'call':<52} {'µs/call':>8}  {'Python calls/call':>17}")
    for name, (label, fn) in table.items():
        print(f"{label:<52} {per_call_us(fn, args.n):8.1f}  {python_calls(fn):17.0f}   [{name}]")
    print("# stages")
    for label, us in stage_table(args.n * 3):
        print(f"  {label:<50} {us:8.2f} µs")
    if calls is not None:
        print(f"# fake driver: {calls['launch']} launches, {calls['alloc']} pool allocations")
    print(f"# plans built: {launch.STATS['plans']}; launches fast/numba: "
          f"{launch.STATS['fast']}/{launch.STATS['numba']}")
    if args.profile:
        names = list(table) if args.profile == "all" else [args.profile]
        Fn = fl_torch.FlashAttentionFunction
        original = Fn.__dict__["backward"]
        bprof = cProfile.Profile()

        def profiled_backward(ctx, do):         # torch runs backward on its own thread for
            bprof.enable()                      # CUDA tensors, which a cProfile of the main
            try:                                # thread does not see: profiled here
                return original.__func__(ctx, do)
            finally:
                bprof.disable()

        if REAL:                                # (fake torch: backward runs in this thread)
            Fn.backward = staticmethod(profiled_backward)
        for name in names:
            label, fn = table[name]
            fn()
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(200):
                fn()
            prof.disable()
            print(f"\n# cProfile: {label}, 200 calls, sorted by cumulative time")
            pstats.Stats(prof, stream=sys.stdout).sort_stats("cumulative").print_stats(args.top)
            if name == "torch_step" and REAL:
                print("\n# cProfile: the Function's backward on torch's autograd thread")
                pstats.Stats(bprof, stream=sys.stdout).sort_stats("cumulative").print_stats(
                    args.top)
        Fn.backward = original


if __name__ == "__main__":
    sys.exit(main())
