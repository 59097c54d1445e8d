"""``flashlesson.traffic``: global-memory traffic, predicted (the model) and counted (the counter).

The lesson's argument is about bytes moved (§4, §14–16, §25). This module makes the claim a
number twice, and the tests hold the two numbers to each other exactly:

- the **model**: for every softmax method and for naive and flash attention, the element reads
  and writes of each global array, as formulas of the shape, the dtype and the launch
  parameters (taken from the same functions and config objects the launchers use);
- the **counter**: the library's own public functions, run unchanged in Numba's CUDA simulator
  with every device array they allocate replaced by a counting one (GPU-Puzzles style).

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
from dataclasses import dataclass, field

import numpy as np

from . import device
from .attention_methods import GEMM_TILES, FlashConfig, default_config
from .softmax_methods import (METHODS as SOFTMAX_METHODS, _threads_for_block_methods,
                              choose)


# ---------------------------------------------------------------------------------------------
# One array's traffic (model and counter alike)
# ---------------------------------------------------------------------------------------------
@dataclass
class Access:
    """Element reads and writes of one global array; ``elements`` is its size."""
    reads: int = 0
    writes: int = 0
    itemsize: int = 4
    elements: int = 0
    by_kernel: dict = field(default_factory=dict, compare=False)   # kernel → [reads, writes]

    @property
    def bytes(self):
        return (self.reads + self.writes) * self.itemsize

    @property
    def read_bytes(self):
        return self.reads * self.itemsize

    @property
    def write_bytes(self):
        return self.writes * self.itemsize


def total_bytes(arrays):
    return sum(a.bytes for a in arrays.values())


def _cdiv(a, b):
    return -(-a // b)


# ---------------------------------------------------------------------------------------------
# The model: softmax (§1–§11, §18–20)
# ---------------------------------------------------------------------------------------------
def softmax_traffic(rows, n, method="auto", dtype=np.float32, threads=None, x="x", y="y"):
    """Element reads/writes of each global array of ``softmax(x[rows, n], method=…)``.

    Every method reads each x element ``Method.reads`` times (the registry's count) and writes
    each y element once; the block-per-row loops ``for j in range(tid, N, T)`` and the warp
    kernels' guards (``j < N``, ``row < rows``) issue no load past the row. three_pass adds
    its per-row m and l (§3): row_max writes m (thread 0), row_sum_exp reads m[row] in each of
    its T threads and writes l, normalize reads m[row] and l[row] in each of its T threads —
    T is the launcher's block size (``_threads_for_block_methods``). ``x``, ``y``: the names
    to give the two arrays (the naive attention calls them s and p).
    """
    name = choose(n, dtype) if method == "auto" else method
    if name not in SOFTMAX_METHODS:
        raise ValueError(f"method: expected auto or one of {', '.join(SOFTMAX_METHODS)}; "
                         f"got {method!r}")
    m = SOFTMAX_METHODS[name]
    m.check_n(n)
    size = np.dtype(dtype).itemsize
    e = rows * n
    out = {x: Access(m.reads * e, 0, size, e), y: Access(0, m.writes * e, size, e)}
    if name == "three_pass":
        t = _threads_for_block_methods(n, threads)
        out["m"] = Access(2 * t * rows, rows, 4, rows)   # read by every thread of passes 2, 3
        out["l"] = Access(t * rows, rows, 4, rows)       # read by every thread of pass 3
    return out


# ---------------------------------------------------------------------------------------------
# The model: attention (§14 naive, §23–24/§32/§34 flash)
# ---------------------------------------------------------------------------------------------
def _gemm(Z, M, N, K, tiles):
    """``gemm.matmul_kernel``, grid (ceil(N/BN), ceil(M/BM), Z): each block loads its BM rows
    of A and BN columns of op(B) over the whole K (guards: nothing past M, N, K), so A is read
    once per column block and B once per row block; C is written once."""
    BM, BN = tiles[0], tiles[1]
    return Z * _cdiv(N, BN) * M * K, Z * _cdiv(M, BM) * N * K, Z * M * N


def naive_attention_traffic(B, H, nq, nk, d, causal=False, return_lse=True, tiles=None):
    """§14: S = QKᵀ·scale (GEMM) → P = softmax(S) (``auto``) → O = PV (GEMM) [→ LSE of S].

    tiles: the GEMM tiles (BM, BN, TY, TX), default ``GEMM_TILES``. Causal changes nothing:
    the GEMM computes every tile and writes −inf above the diagonal. Returns name → Access for
    q, k, v, s, p, o (and lse when ``return_lse``: ``row_lse`` reads S once more).
    """
    bh = B * H
    tiles = tiles or GEMM_TILES
    q_r, k_r, s_w = _gemm(bh, nq, nk, d, tiles)            # S[z] = Q[z] K[z]ᵀ
    p_r, v_r, o_w = _gemm(bh, nq, d, nk, tiles)            # O[z] = P[z] V[z]
    sm = softmax_traffic(bh * nq, nk, "auto", np.float32, x="s", y="p")
    e_s = bh * nq * nk
    out = {
        "q": Access(q_r, 0, 4, bh * nq * d),
        "k": Access(k_r, 0, 4, bh * nk * d),
        "v": Access(v_r, 0, 4, bh * nk * d),
        "s": Access(sm["s"].reads, s_w, 4, e_s),
        "p": Access(p_r, sm["p"].writes, 4, e_s),
        "o": Access(0, o_w, 4, bh * nq * d),
    }
    if return_lse:
        out["s"].reads += e_s                               # row_lse: one more pass over S
        out["lse"] = Access(0, bh * nq, 4, bh * nq)
    return out


def flash_tiles_visited(nq, nk, causal, config):
    """(q0, number of K/V tiles) for each Q tile of one head, as ``flash_forward_kernel``
    computes them: every tile, or (causal, bottom-right) those up to the diagonal."""
    Br, Bc = config.Br, config.Bc
    n_tiles = _cdiv(nk, Bc)
    out = []
    for q0 in range(0, nq, Br):
        t = n_tiles
        if causal:
            last_key = q0 + Br - 1 + nk - nq            # the last key the tile's last row sees
            t = min(n_tiles, last_key // Bc + 1) if last_key >= 0 else 0
        out.append((q0, t))
    return out


def flash_attention_traffic(B, H, nq, nk, d, causal=False, config=None):
    """§23–24, §32, §34: one kernel, one block per (Q tile, head).

    Q: each Q tile loaded once (``load_Qt``), its rows < Nq, columns < d: Nq·d per head.
    K, V: each visited K/V tile loaded once per Q tile, min(Bc, Nk − k0) rows of d — the
    zeros past Nk and past d are written into shared memory, not loaded. Causal: a Q tile
    stops at the diagonal (``flash_tiles_visited``). O: Nq·d writes, LSE: Nq writes (one
    thread per row). config: default ``default_config(d, Nq, B·H)``, as the launcher.
    """
    bh = B * H
    cfg = config or default_config(d, nq, bh)
    if not isinstance(cfg, FlashConfig):
        raise TypeError(f"config: expected a FlashConfig, got {type(cfg).__name__}")
    # the first t tiles of keys hold min(t·Bc, Nk) keys (only the last tile is partial)
    kv_rows = sum(min(t * cfg.Bc, nk) for _, t in flash_tiles_visited(nq, nk, causal, cfg))
    return {
        "q": Access(bh * nq * d, 0, 4, bh * nq * d),
        "k": Access(bh * kv_rows * d, 0, 4, bh * nk * d),
        "v": Access(bh * kv_rows * d, 0, 4, bh * nk * d),
        "o": Access(0, bh * nq * d, 4, bh * nq * d),
        "lse": Access(0, bh * nq, 4, bh * nq),
    }


def attention_traffic(B, H, nq, nk, d, method="flash", causal=False, config=None,
                      return_lse=True):
    """The model of ``attention(…, method=method)``: name → Access."""
    if method == "flash":
        return flash_attention_traffic(B, H, nq, nk, d, causal, config)
    if method == "naive":
        if config is not None:
            raise ValueError("config: only method 'flash' takes a configuration")
        return naive_attention_traffic(B, H, nq, nk, d, causal, return_lse)
    raise ValueError(f"method: expected naive or flash; got {method!r}")


def attention_flops(B, H, nq, nk, d, causal=False):
    """§16: matmul FLOPs, the reference's convention (4·B·H·Nq·Nk·d, halved when causal)."""
    from reference.attention import attention_flops as flops
    return flops(B, H, nq, nk, d, causal)


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
                    return_lse=True, seed=0):
    """Run ``flashlesson.attention`` on random q, k, v inside ``count_traffic()``.
    Returns (Counter, o[, lse])."""
    from .attention_methods import attention
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((B, H, n, d)).astype(np.float32) for n in (nq, nk, nk))
    with count_traffic() as t:
        result = attention(q, k, v, method=method, causal=causal, config=config,
                           return_lse=return_lse)
    return t, result


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
           "count_attention", "softmax_traffic", "naive_attention_traffic",
           "flash_attention_traffic", "attention_traffic", "flash_tiles_visited",
           "attention_flops", "compare", "total_bytes"]
