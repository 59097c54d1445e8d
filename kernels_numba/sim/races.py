"""Race mode for Numba's CUDA simulator: shared-memory races become errors.

The simulator runs a block's threads as Python threads that happen to interleave finely, so a
kernel missing a ``cuda.syncthreads()`` usually still computes the right answer there: no warp
ever runs far ahead of another. On a GPU it will, some day. Race mode makes such a bug fail
every time, whatever the interleaving, in two ways:

1. **Shadow memory (the detector).** Every shared array a kernel declares becomes a view that
   records, for each element, which warp last wrote it and which warps read it, and in which
   *barrier interval* (the block, and how many ``syncthreads()`` the thread has passed). Two
   accesses to one element by threads of **different warps** in the **same interval**, at
   least one a write, are a race: nothing orders them on a GPU. The access that completes the
   pair raises :class:`SharedRaceError` naming the kind (read after write, write after read,
   write after write), the element, both threads and the kernel's source line. This is what
   ``compute-sanitizer --tool racecheck`` checks on the GPU, decided per barrier interval, so
   the verdict does not depend on the simulator's schedule.
2. **Poison.** At the start of every block, each shared array (static and dynamic) is filled
   with 0xFF bytes: NaN as float32/fp16 pairs, 0xFFFFFFFF as uint32. A block that reads
   shared memory it never wrote (or that a previous block left there: the simulator keeps one
   allocation for the whole grid) computes NaN instead of a plausible value.

Switch it on with the environment variable ``FLASHLESSON_SIM_RACES=1`` (read at import), or
for a region of code with ``with sim.races.race_mode():`` (tests). Kernel files hold no
simulator branch: :func:`install` (called by ``import kernels_numba`` in the simulator, through
``kernels_numba.sim.install()``)
patches the simulator's ``cuda.shared.array`` and its block runner.

Limits
- Only races between warps are checked: lanes of one warp are assumed to be ordered by the
  warp operations between them (the simulator's warp operations are rendezvous), as racecheck
  reports intra-warp hazards only at a lower severity.
- Accesses are recorded at element granularity, keyed by byte offset: a float32 view and a
  uint32 view of the same dynamic shared memory share their records.
- Element accesses (``a[i]``, ``a[i, j]``, ``a[i] += x``) through any view (``smem[a:b]``,
  ``reshape``), slice writes (the cp.async twin) and short slice reads (at most
  ``SMALL_SLICE`` elements: the ldmatrix twin's 16-byte rows) are seen. A longer slice is a
  kernel carving its shared memory into tiles: taking it is no access. NumPy functions
  applied to a whole shared array are not seen (kernels cannot call them).
- Atomics on shared memory are not exempted (the kernels use none).
- Cost: every shared access goes through Python code; a block runs ~2-4× slower. Use it on
  small shapes.
"""

import contextlib
import os
import sys
import threading

import numpy as np

__all__ = ["SharedRaceError", "install", "race_mode", "enabled", "WARP_SIZE"]

WARP_SIZE = 32
POISON_BYTE = 0xFF
SMALL_SLICE = 8     # a slice of at most this many elements counts as read when taken

_on = os.environ.get("FLASHLESSON_SIM_RACES", "") not in ("", "0")
_lock = threading.Lock()
_alloc_lock = threading.Lock()
_serial = [0]          # block serial numbers: the simulator reuses shared arrays across blocks
_installed = False


class SharedRaceError(RuntimeError):
    """Two warps touched one shared element in one barrier interval, one of them writing."""


def enabled():
    """Whether race mode is on (new launches are checked)."""
    return _on


@contextlib.contextmanager
def race_mode(on=True):
    """Race mode on (or off) for the launches inside the ``with`` block."""
    global _on
    if not _installed:
        raise RuntimeError("race_mode: the simulator is not in use (race mode "
                           "checks simulated kernels only)")
    old, _on = _on, bool(on)
    try:
        yield
    finally:
        _on = old


class _Shadow:
    """Per-byte records of one shared allocation (its root buffer)."""

    def __init__(self, root):
        n = root.nbytes
        self.root = root
        self.ptr = root.__array_interface__["data"][0]
        self.nbytes = n
        self.w_interval = np.full(n, -1, np.int64)
        self.w_tid = np.full(n, -1, np.int64)
        self.r_interval = np.full(n, -1, np.int64)
        self.r_tid = np.full(n, -1, np.int64)       # one reader's thread id …
        self.r_many = np.zeros(n, np.bool_)        # … or readers from several warps

    def poison(self):
        self.root.view(np.uint8).fill(POISON_BYTE)


def _who():
    """(thread id in the block, warp, barrier interval) of the calling simulated thread."""
    t = threading.current_thread()
    tid = getattr(t, "thread_id", None)
    if tid is None:                 # host code touching a shared array: not a kernel access
        return None
    man = t._manager
    serial = getattr(man, "_simraces_serial", None)
    if serial is None:
        with _lock:
            serial = getattr(man, "_simraces_serial", None)
            if serial is None:
                _serial[0] += 1
                serial = man._simraces_serial = _serial[0]
    # interval: block serial in the high bits, barriers passed (simwarp counts them) below
    return tid, tid // WARP_SIZE, (serial << 24) + getattr(t, "_simwarp_barriers", 0)


def _source():
    """Where the access is: the first frame outside this module and NumPy and, when that is a
    helper (load4/store4, the ldmatrix twin …), the frame that called it — the kernel's line."""
    f = sys._getframe(1)
    while f is not None and (f.f_code.co_filename == __file__
                             or "numpy" in f.f_code.co_filename):
        f = f.f_back
    where = []
    while f is not None and len(where) < 2:
        where.append(f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno} "
                     f"({f.f_code.co_name})")
        f = f.f_back
    return " called from ".join(where) or "?"


def _race(kind, shadow, off, tid, other, interval):
    t = threading.current_thread()
    barriers = interval & ((1 << 24) - 1)
    raise SharedRaceError(
        f"shared-memory race ({kind}) at byte {off} of a {shadow.nbytes}-byte shared array, "
        f"block {tuple(t.blockIdx)}: thread {tid} (warp {tid // WARP_SIZE}) and thread "
        f"{other} (warp {other // WARP_SIZE}) with no cuda.syncthreads() between them "
        f"(both after barrier {barriers}); at {_source()}")


def _record(shadow, offsets, write):
    who = _who()
    if who is None:
        return
    tid, warp, iv = who
    with _lock:
        for off in offsets:
            if shadow.w_interval[off] == iv:
                wt = int(shadow.w_tid[off])
                if wt // WARP_SIZE != warp:
                    _race("write after write" if write else "read after write",
                          shadow, off, tid, wt, iv)
            if write:
                if shadow.r_interval[off] == iv:
                    rt = int(shadow.r_tid[off])
                    if shadow.r_many[off] or rt // WARP_SIZE != warp:
                        _race("write after read", shadow, off, tid, rt, iv)
                shadow.w_interval[off] = iv
                shadow.w_tid[off] = tid
            elif shadow.r_interval[off] != iv:
                shadow.r_interval[off] = iv
                shadow.r_tid[off] = tid
                shadow.r_many[off] = False
            elif int(shadow.r_tid[off]) // WARP_SIZE != warp:
                shadow.r_many[off] = True


def _is_scalar_key(key):
    if isinstance(key, (int, np.integer)):
        return True
    return isinstance(key, tuple) and all(isinstance(k, (int, np.integer)) for k in key)


class SharedArray(np.ndarray):
    """A shared array (or a view of one) whose element accesses are recorded."""

    def __array_finalize__(self, obj):
        shadow = getattr(obj, "_shadow", None)
        self._shadow = None
        if shadow is not None:
            start = self.__array_interface__["data"][0] - shadow.ptr
            if 0 <= start < shadow.nbytes:          # a view of the allocation, not a copy
                self._shadow = shadow
                self._start = start

    def _offsets(self, key):
        """Byte offsets (from the root) of the elements that ``self[key]`` touches."""
        if _is_scalar_key(key):
            idx = key if isinstance(key, tuple) else (key,)
            if len(idx) == self.ndim:
                off = self._start
                for k, n, s in zip(idx, self.shape, self.strides):
                    k = int(k)
                    off += (k + n if k < 0 else k) * s
                return (off,)
        part = np.ndarray.__getitem__(self, key)
        if isinstance(part, SharedArray) and part._shadow is self._shadow:
            return _view_offsets(part)              # a view: its own addresses
        # fancy indexing (a copy): the addresses of every element of self, picked by key
        return np.asarray(_view_offsets(self)).reshape(self.shape)[key].ravel().tolist()

    def __getitem__(self, key):
        val = np.ndarray.__getitem__(self, key)
        if self._shadow is not None and _on:
            if not isinstance(val, np.ndarray):
                _record(self._shadow, self._offsets(key), False)
            elif _has_slice(key) and val.size <= SMALL_SLICE:
                # a short slice is a read of its elements (the ldmatrix twin copies 4 words
                # out); a long one is a kernel carving its shared memory into tiles, recorded
                # when its elements are touched
                _record(self._shadow, _view_offsets(val), False)
        return val

    def __setitem__(self, key, value):
        np.ndarray.__setitem__(self, key, value)
        if self._shadow is not None and _on:
            _record(self._shadow, self._offsets(key), True)


def _view_offsets(view):
    """Byte offsets (from the root) of every element of a SharedArray view."""
    if view.ndim == 0:
        return [view._start]
    grid = np.indices(view.shape, dtype=np.int64)
    pos = view._start + sum(g * s for g, s in zip(grid, view.strides))
    return pos.ravel().tolist()


def _has_slice(key):
    return isinstance(key, slice) or (isinstance(key, tuple)
                                      and any(isinstance(k, slice) for k in key))


def _wrap(fake_shared, key, arr, root):
    """arr as a SharedArray whose records live with ``root`` (one per allocation)."""
    with _alloc_lock:       # the block's threads all declare it; the first one poisons it
        shadows = fake_shared.__dict__.setdefault("_simraces_shadows", {})
        shadow = shadows.get(key)
        if shadow is None or shadow.root is not root:
            shadow = shadows[key] = _Shadow(root)
            shadow.poison()
    view = arr.view(SharedArray)
    view._shadow, view._start = shadow, arr.__array_interface__["data"][0] - shadow.ptr
    return view


def install():
    """Patch the simulator's shared arrays and block runner (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        from numba.cuda.simulator import kernel, kernelapi

        from numba.cuda import types
        from numba.cuda.np import numpy_support

        shared_cls = kernelapi.FakeCUDAShared
        def array(self, shape, dtype, alignment=None):
            # The simulator's own array(), but it identifies a static allocation by the line
            # that declares it: its caller's caller would be this wrapper, one line for all
            if alignment is not None and (not isinstance(alignment, int) or alignment <= 0
                                          or alignment & (alignment - 1)):
                raise ValueError(f"cuda.shared.array: alignment must be a power of two, got "
                                 f"{alignment!r}")
            # (The simulator itself refuses alignment=; accepted here and left to the model:
            # the Hopper twins' shared window, sim/hopper.py, starts every shared array on a
            # 1024-byte boundary, the strictest alignment a kernel asks for: 128B swizzle.)
            if isinstance(dtype, types.Type):
                dtype = numpy_support.as_dtype(dtype)
            if shape == 0:      # dynamic: every view shares one byte buffer
                res = np.frombuffer(self._dynshared.data, dtype=dtype,
                                    count=self._dynshared_size // dtype.itemsize)
                return _wrap(self, "dynamic", res, self._dynshared) if _on else res
            f = sys._getframe(1)
            caller = (f.f_code.co_filename, f.f_lineno)
            res = self._allocations.get(caller)
            if res is None:     # the first threads to declare it: made once, under the lock
                with _alloc_lock:   # (unlocked, two threads can each make one, as the
                    res = self._allocations.get(caller)     # simulator's own array() can: a
                    if res is None:                         # CI run saw lane 1 of
                        res = self._allocations[caller] = np.empty(shape, dtype)
                        # tests/test_simwarp.py's syncwarp_kernel write to an array of its own)
            return _wrap(self, caller, res, res) if _on else res

        array.__doc__ = shared_cls.array.__doc__
        shared_cls.array = array

        orig_run = kernel.BlockManager.run

        def run(self, grid_point, *args):
            if _on:         # each block starts with poisoned shared memory (see module doc)
                ctx = kernel._get_kernel_context()
                fake_shared = getattr(ctx, "_shared", None)
                for shadow in getattr(fake_shared, "_simraces_shadows", {}).values():
                    shadow.poison()
            return orig_run(self, grid_point, *args)

        kernel.BlockManager.run = run
        _installed = True
