"""``flashlesson.traffic``: global-memory traffic, predicted (the model) and counted (the counter).

(The model's formulas are in ``flashlesson.io_model``, which runs no kernel; this module holds
the counter, which runs the operations, and re-exports the model beside it.)

The lesson's argument is about bytes moved (§4, §14–16, §25). This module makes the claim a
number twice, and the tests hold the two numbers to each other exactly:

- the **model**: for every softmax method and for naive and flash attention — forward and
  backward (§30 flash, §31 naive), causal, with a key padding mask, packed varlen (§35) — the
  element reads and writes of each global array, as formulas of the shape, the dtype and the
  launch parameters (taken from the same functions and config objects the launchers use);
- the **counter**: the library's own public functions, run unchanged in Numba's CUDA simulator
  with every device array they allocate replaced by a counting one (GPU-Puzzles style).

Also here: ``compulsory_traffic`` (§46: each array a kernel touches, once — what DRAM should
see at sizes ≫ L2, compared with Nsight Compute by ``scripts/profile_io.py``) and the §48 ASIC
view, ``sram_model`` / ``sram_sweep`` (HBM traffic vs on-chip SRAM size against the paper's
bounds; ``flashlesson traffic sram``). Run: ``flashlesson traffic softmax|attention|sram …``,
``pytest tests/test_traffic.py``.

What is counted. An *element access by a thread*: each ``a[i, j]`` a kernel thread evaluates
is one read, each ``a[i, j] = …`` one write (``load4``/``store4`` are four). A read of the same
element twice counts twice (traffic, not footprint), and an element that all T threads of a
block read (three_pass's m[row]) counts T times — on a GPU that is one broadcast transaction,
and caches make DRAM bytes smaller still; those are measured by Nsight Compute, not here.
Shared memory, registers and host↔device copies are not counted: only accesses made by
simulated threads while a kernel runs. Zero padding the kernels write into shared memory
(past N, past d) is not traffic: those global loads are not issued.

    >>> with count_traffic() as t:                        # doctest: +SKIP
    ...     flashlesson.attention(q, k, v, method="naive", return_lse=True)
    >>> print(t.table())                                  # q, k, v, s, p, o, lse
    >>> naive_attention_traffic(1, 1, 40, 24, 8)          # the same numbers, from formulas

How the counter works (numba-cuda's simulator, ``simulator/cudadrv/devicearray.py`` and
``simulator/kernel.py``): a simulator device array is a ``FakeCUDAArray`` wrapping a NumPy array
``_ary``; a kernel receives it wrapped once more (``FakeWithinKernelCUDAArray``), and every
element access ends in ``_ary.__getitem__`` / ``_ary.__setitem__``, every ``reshape(-1)`` (load4)
in ``_ary.reshape``. Inside ``count_traffic()``, ``numba.cuda.to_device``, ``device_array`` and
``device_array_like`` (which ``flashlesson.arrays.empty`` and the launchers call) return
``FakeCUDAArray``s whose ``_ary`` is a ``CountingArray``: an ndarray subclass whose element
accesses add to its allocation's counts, and whose views (reshape, slices) inherit the
allocation. ``FakeCUDAKernel.__call__`` is wrapped to know which kernel is running, so the
counts are also split by kernel. Arrays are named after the variable the library assigns them
to (``o3 = empty(…)`` → ``o``; trailing digits dropped) or, for inputs copied by an
``Operand``, the argument's name (``q``); ``Counter.to_device(a, name)`` names one explicitly.
Everything is restored on exit. The counter needs the simulator (``DeviceError`` on a GPU;
``flashlesson traffic`` selects the simulator itself); the model works on either, with the
launch parameters of the device this process runs on.
"""

import linecache
import os
import re
import sys
import threading
from contextlib import contextmanager

import numpy as np

# §16, §30–31: the FLOP counts are the reference's (it owns them), named here for the CLI
from .reference.attention import attention_flops
from .reference.attention_backward import attention_backward_flops as backward_flops

from . import device
# The model lives in io_model; its names are re-exported here (``__all__``) so that
# ``traffic.flash_attention_traffic`` and the counter's ``compare`` sit side by side.
from .io_model import (DEFAULT_SRAM_KIB, KERNEL_ARRAYS, SRAM_HEADERS, Access, attention_traffic,
                       backward_traffic, compulsory_traffic, flash_attention_traffic,
                       flash_backward_traffic, flash_tiles_visited, kernel_sram_point,
                       naive_attention_traffic, naive_backward_traffic, softmax_traffic,
                       sram_command, sram_model, sram_sweep, sram_table_rows, sram_tiles,
                       total_bytes, varlen_traffic)


# ---------------------------------------------------------------------------------------------
# The counter
# ---------------------------------------------------------------------------------------------
class _Allocation:
    """One counted device allocation: its name and counts."""

    def __init__(self, counter, name, base):
        self.counter = counter
        self.name = name
        self.access = Access(itemsize=base.dtype.itemsize, elements=base.size)


def _elements(arr, idx):
    """How many elements ``arr[idx]`` selects (1 for a full integer index)."""
    if isinstance(idx, tuple):
        if len(idx) == arr.ndim and all(isinstance(i, (int, np.integer)) for i in idx):
            return 1
    elif arr.ndim == 1 and isinstance(idx, (int, np.integer)):
        return 1
    return int(np.size(np.ndarray.__getitem__(arr, idx)))


class CountingArray(np.ndarray):
    """An ndarray whose element reads and writes, made by kernel threads, are counted.

    Views (reshape, slices) share the allocation's counts; a slice itself is not an access.
    """
    _alloc = None

    def __array_finalize__(self, obj):
        # a view of a counted array counts into the same allocation; a new array
        # (np.empty_like in copy_to_host) does not
        self._alloc = getattr(obj, "_alloc", None) if self.base is not None else None

    def __getitem__(self, idx):
        value = super().__getitem__(idx)
        alloc = self._alloc
        if alloc is not None and alloc.counter.kernel is not None \
                and not isinstance(value, np.ndarray):
            alloc.counter.add(alloc, 1, 0)
        return value

    def __setitem__(self, idx, value):
        alloc = self._alloc
        if alloc is not None and alloc.counter.kernel is not None:
            alloc.counter.add(alloc, 0, _elements(self, idx))
        super().__setitem__(idx, value)

    def __array_function__(self, func, types, args, kwargs):
        # NumPy functions (np.empty_like in copy_to_host, np.copyto) see plain views: host
        # copies come back as plain ndarrays, inside the counting block or after it
        return func(*_plain(args), **_plain(kwargs))


def _plain(obj):
    if isinstance(obj, CountingArray):
        return obj.view(np.ndarray)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_plain(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


_HERE = os.path.abspath(__file__)
_ARRAYS = os.path.join(os.path.dirname(_HERE), "arrays.py")
_ASSIGN = re.compile(r"\s*([A-Za-z_]\w*)\s*=[^=]")


def _name_from_caller():
    """The name of the variable the allocation is assigned to, found in the calling source."""
    from .arrays import Operand
    numba_dirs = tuple(os.path.dirname(sys.modules[m].__file__)
                       for m in ("numba", "numba.cuda") if m in sys.modules)
    f = sys._getframe(2)
    while f is not None:
        path = os.path.abspath(f.f_code.co_filename)
        if path == _HERE or path.startswith(numba_dirs):
            f = f.f_back
            continue
        owner = f.f_locals.get("self")
        if isinstance(owner, Operand):
            return owner.name
        match = _ASSIGN.match(linecache.getline(f.f_code.co_filename, f.f_lineno))
        if match:
            return match.group(1).rstrip("0123456789") or match.group(1)
        if path != _ARRAYS:                      # arrays.empty: name it after its caller
            return f"{f.f_code.co_name}:{f.f_lineno}"
        f = f.f_back
    return "array"


class Counter:
    """What ``count_traffic()`` yields: the counted allocations, by name."""

    def __init__(self):
        self._allocs = []
        self._lock = threading.Lock()
        self.kernel = None          # the kernel being simulated (None: count nothing)
        self.launches = []          # kernel names, in launch order

    def add(self, alloc, reads, writes):
        with self._lock:            # simulated threads are Python threads: += is not atomic
            a = alloc.access
            a.reads += reads
            a.writes += writes
            k = a.by_kernel.setdefault(self.kernel, [0, 0])
            k[0] += reads
            k[1] += writes

    def _register(self, fake, name=None):
        base = fake._ary
        counted = base.view(CountingArray)
        names = {a.name for a in self._allocs}
        name = name or _name_from_caller()
        unique, n = name, 1
        while unique in names:
            n += 1
            unique = f"{name}#{n}"
        counted._alloc = _Allocation(self, unique, base)
        self._allocs.append(counted._alloc)
        return type(fake)(counted, stream=fake.stream)

    def to_device(self, ary, name):
        """A counted device copy of host array ``ary``, called ``name``."""
        from numba.cuda.simulator.cudadrv.devicearray import to_device   # (not the patched one)
        return self._register(to_device(np.ascontiguousarray(ary)), name)

    @property
    def arrays(self):
        """name → Access, for every allocation a kernel touched."""
        return {a.name: a.access for a in self._allocs if a.access.reads or a.access.writes}

    @property
    def total_bytes(self):
        return total_bytes(self.arrays)

    def table(self, fmt="simple"):
        from tabulate import tabulate
        rows = [[n, a.elements, a.reads, a.writes, a.bytes] for n, a in self.arrays.items()]
        rows.append(["total", "", sum(r[2] for r in rows), sum(r[3] for r in rows),
                     self.total_bytes])
        return tabulate(rows, headers=["array", "elements", "reads", "writes", "bytes"],
                        tablefmt=fmt)


_active = []


@contextmanager
def count_traffic():
    """Count the global-memory element accesses of every kernel launched inside the block.

    Device arrays allocated inside (by ``cuda.to_device``, ``cuda.device_array``,
    ``cuda.device_array_like``, hence by ``flashlesson.arrays.empty`` and every launcher)
    are counting arrays (views of them count into the same allocation); results copied to
    the host are plain ndarrays. Arrays made inside stop counting when the block ends.
    Simulator only.
    """
    if not device.SIMULATOR:
        raise device.DeviceError(
            "the traffic counter runs kernels in Numba's CUDA simulator, and this process "
            "uses the GPU: run with FLASHLESSON_DEVICE=sim (flashlesson traffic does)")
    if _active:
        raise RuntimeError("count_traffic() does not nest")
    import numba.cuda as cuda
    from numba.cuda.simulator import kernel as sim_kernel

    counter = Counter()
    saved = {name: getattr(cuda, name) for name in ("to_device", "device_array",
                                                      "device_array_like")}
    call = sim_kernel.FakeCUDAKernel.__call__

    def allocator(original):
        def allocate(*args, **kwargs):
            out = original(*args, **kwargs)
            if kwargs.get("to") is not None or (len(args) > 3 and args[3] is not None):
                return out                        # to_device(…, to=existing): a copy, no alloc
            return counter._register(out)
        return allocate

    def counted_call(self, *args):
        if self._device or sim_kernel._kernel_context is not None:
            return call(self, *args)              # a device function: inside a kernel already
        name = self.fn.__name__                   # a kernel launched again: name#2, #3, …
        n = sum(1 for k in counter.launches if k.split("#")[0] == name)
        counter.kernel = name if n == 0 else f"{name}#{n + 1}"
        counter.launches.append(counter.kernel)
        try:
            return call(self, *args)
        finally:
            counter.kernel = None

    _active.append(counter)
    try:
        for name, fn in saved.items():
            setattr(cuda, name, allocator(fn))
        sim_kernel.FakeCUDAKernel.__call__ = counted_call
        yield counter
    finally:
        for name, fn in saved.items():
            setattr(cuda, name, fn)
        sim_kernel.FakeCUDAKernel.__call__ = call
        counter.kernel = None
        _active.pop()


# ---------------------------------------------------------------------------------------------
# Counting the library's own calls, on random inputs
# ---------------------------------------------------------------------------------------------
def count_softmax(rows, n, method="auto", dtype=np.float32, threads=None, seed=0):
    """Run ``flashlesson.softmax`` on a random [rows, n] array inside ``count_traffic()``.
    Returns (Counter, result)."""
    from .softmax_methods import softmax
    x = np.random.default_rng(seed).standard_normal((rows, n)).astype(dtype)
    with count_traffic() as t:
        y = softmax(x, method=method, threads=threads)
    return t, y


def count_attention(B, H, nq, nk, d, method="flash", causal=False, config=None,
                    return_lse=True, seed=0, key_padding_mask=None):
    """Run ``flashlesson.attention`` on random q, k, v inside ``count_traffic()``.
    Returns (Counter, o[, lse])."""
    from .attention_methods import attention
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((B, H, n, d)).astype(np.float32) for n in (nq, nk, nk))
    with count_traffic() as t:
        mask = _counted_mask(t, key_padding_mask)
        result = attention(q, k, v, method=method, causal=causal, config=config,
                           return_lse=return_lse, key_padding_mask=mask)
    return t, result


def _counted_mask(t, key_padding_mask):
    # one name for the mask in the forward and the backward (which would call its uint8 view
    # "pad"): a counted device copy handed to the library as a device array
    if key_padding_mask is None:
        return None
    return t.to_device(np.asarray(key_padding_mask, bool), "key_padding_mask")


def count_backward(B, H, nq, nk, d, method="flash", causal=False, config=None, seed=0,
                   key_padding_mask=None):
    """Run ``flashlesson.attention_backward`` inside ``count_traffic()`` on random q, k, v, dO
    and the O, LSE of a flash forward run before the block (not counted).
    Returns (Counter, (dq, dk, dv))."""
    from .attention_methods import attention
    from .backward_methods import attention_backward
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((B, H, n, d)).astype(np.float32) for n in (nq, nk, nk))
    do = rng.standard_normal((B, H, nq, d)).astype(np.float32)
    o, lse = attention(q, k, v, causal=causal, return_lse=True,
                       key_padding_mask=key_padding_mask)
    with count_traffic() as t:
        # device inputs (the backward wants the mask on q's side), named as the host path
        # would name them; the gradients come back as device arrays
        ins = [t.to_device(a, n) for a, n in zip((do, q, k, v, o, lse),
                                                  ("do", "q", "k", "v", "o", "lse"))]
        mask = _counted_mask(t, key_padding_mask)
        grads = attention_backward(*ins, causal=causal, method=method, config=config,
                                   key_padding_mask=mask)
    return t, tuple(g.copy_to_host() for g in grads)


def count_varlen(seqlens_q, seqlens_k, H, d, causal=False, backward=False, config=None,
                 seed=0):
    """Run ``flashlesson.varlen_attention`` (or, ``backward``, ``varlen_attention_backward`` on
    the O, LSE of a forward run before the block) on random packed q, k, v inside
    ``count_traffic()``. Returns (Counter, result)."""
    from .attention_methods import varlen_attention
    from .backward_methods import varlen_attention_backward
    rng = np.random.default_rng(seed)
    cu_q = np.concatenate([[0], np.cumsum(seqlens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(seqlens_k)]).astype(np.int32)
    q = rng.standard_normal((int(cu_q[-1]), H, d)).astype(np.float32)
    k, v = (rng.standard_normal((int(cu_k[-1]), H, d)).astype(np.float32) for _ in range(2))
    lengths = dict(max_seqlen_q=max(max(seqlens_q), 1), max_seqlen_k=max(max(seqlens_k), 1))
    if not backward:
        with count_traffic() as t:
            result = varlen_attention(q, k, v, cu_q, cu_k, causal=causal, config=config,
                                      return_lse=True, **lengths)
        return t, result
    o, lse = varlen_attention(q, k, v, cu_q, cu_k, causal=causal, return_lse=True, **lengths)
    do = rng.standard_normal(q.shape).astype(np.float32)
    with count_traffic() as t:
        # device inputs, as count_backward (a host dO would be copied twice: the launcher
        # views it as rows for D and flat for the kernels)
        ins = [t.to_device(a, n) for a, n in zip((do, q, k, v, o, lse, cu_q, cu_k),
                                                  ("do", "q", "k", "v", "o", "lse",
                                                   "cu_seqlens_q", "cu_seqlens_k"))]
        result = varlen_attention_backward(*ins, causal=causal, config=config, **lengths)
    return t, tuple(g.copy_to_host() for g in result)


def padding_mask(B, nk, valid):
    """A key padding mask bool [B, Nk] whose first ``valid[b]`` keys of batch row b take part
    (one length for every row, or one per row); None when ``valid`` is None (the CLI's
    ``--key-padding``)."""
    if valid is None:
        return None
    valid = list(valid) * B if len(valid) == 1 else list(valid)
    if len(valid) != B or min(valid) < 0 or max(valid) > nk:
        raise ValueError(f"--key-padding: expected 1 or B = {B} lengths in 0 … Nk = {nk}; got "
                         f"{valid}")
    return np.arange(nk)[None, :] < np.asarray(valid)[:, None]


def attention_functions(backward):
    """(model, counter) of the forward or the backward, called alike: f(B, H, Nq, Nk, d,
    method, causal, key_padding_mask=…)."""
    return (backward_traffic, count_backward) if backward else \
        (attention_traffic, count_attention)


def compare(model, counted):
    """Rows [array, model reads, counted reads, model writes, counted writes, model bytes,
    counted bytes, agree] over the union of names, and a total row."""
    rows = []
    for name in list(model) + [n for n in counted if n not in model]:
        m, c = model.get(name, Access()), counted.get(name, Access())
        rows.append([name, m.reads, c.reads, m.writes, c.writes, m.bytes, c.bytes,
                     "yes" if (m.reads, m.writes) == (c.reads, c.writes) else "NO"])
    tot = [sum(r[i] for r in rows) for i in range(1, 7)]
    rows.append(["total", *tot, "yes" if all(r[-1] == "yes" for r in rows) else "NO"])
    return rows


COMPARE_HEADERS = ["array", "reads (model)", "reads (counted)", "writes (model)",
                   "writes (counted)", "bytes (model)", "bytes (counted)", "agree"]

__all__ = ["Access", "Counter", "CountingArray", "count_traffic", "count_softmax",
           "count_attention", "count_backward", "count_varlen", "softmax_traffic",
           "naive_attention_traffic", "flash_attention_traffic", "attention_traffic",
           "flash_backward_traffic", "naive_backward_traffic", "backward_traffic",
           "varlen_traffic", "flash_tiles_visited", "attention_flops", "backward_flops",
           "compare", "total_bytes", "compulsory_traffic", "sram_model", "sram_sweep",
           "sram_tiles", "kernel_sram_point", "padding_mask", "attention_functions",
           "COMPARE_HEADERS", "DEFAULT_SRAM_KIB", "KERNEL_ARRAYS", "SRAM_HEADERS",
           "sram_table_rows", "sram_command"]
