"""Simulator twins of ``kernels_numba/vector.py``'s inline-PTX helpers: vector loads and
stores as four plain accesses of the flattened array, one-element loads and stores that refuse
a negative index, and ``cp.async`` copies held back until the thread's ``cp_async_wait_all()``,
so that a read that forgets to wait sees stale data and fails a test instead of passing by luck.

Chosen by ``kernels_numba/sim/__init__.py`` (``helper_chooser``): each name here replaces the
GPU helper of the same name when the simulator is on.
"""

import threading

import numpy as np


def _vector_at(a, i, what):
    """The GPU form's conditions, refused here as there: float32 or uint32 elements (its typing
    takes no other) and i a multiple of four (16 bytes on a 16-byte boundary, the array's data
    on one: the launcher's ``aligned16``)."""
    if a.dtype not in (np.float32, np.uint32) or i % 4:
        raise ValueError(f"{what}: a 16-byte access takes float32 or uint32 elements at a "
                         f"multiple of 4, got {a.dtype} at {i}")


def load4(a, i):
    """(a[i], a[i+1], a[i+2], a[i+3]) of the flattened array."""
    _vector_at(a, i, "load4")
    flat = a.reshape(-1) if a.ndim > 1 else a
    return flat[i], flat[i + 1], flat[i + 2], flat[i + 3]


def store4(a, i, x0, x1, x2, x3):
    """a[i], a[i+1], a[i+2], a[i+3] = x0, x1, x2, x3 (flattened array)."""
    _vector_at(a, i, "store4")
    flat = a.reshape(-1) if a.ndim > 1 else a
    flat[i], flat[i + 1], flat[i + 2], flat[i + 3] = x0, x1, x2, x3


def load1(a, i):
    """a[i] of the flattened array (i ≥ 0)."""
    if i < 0:
        raise IndexError(f"load1: negative index {i}")
    return (a.reshape(-1) if a.ndim > 1 else a)[i]


def store1(a, i, x):
    """a[i] = x, flattened array (i ≥ 0)."""
    if i < 0:
        raise IndexError(f"store1: negative index {i}")
    (a.reshape(-1) if a.ndim > 1 else a)[i] = x


_pending = threading.local()        # each simulated thread's copies not yet waited for


def _cp_async(dst, di, src, si, ok, n):
    if not hasattr(_pending, "copies"):
        _pending.copies = []
    flat = src.reshape(-1) if src.ndim > 1 else src
    _pending.copies.append((dst, di, flat[si:si + n].copy() if ok else None, n))


def cp_async16(dst, di, src, si, ok):
    """dst[di … di+3] = src[si … si+3] (zeros if not ok), once this thread waits."""
    _cp_async(dst, di, src, si, ok, 4)


def cp_async4(dst, di, src, si, ok):
    """dst[di] = src[si] (0 if not ok), once this thread waits."""
    _cp_async(dst, di, src, si, ok, 1)


def take_pending():
    """This thread's cp.async copies not yet landed, taken from it: what an
    ``cp_async_mbar_arrive`` (sim/hopper.py) hands to its mbarrier to land later."""
    copies = getattr(_pending, "copies", [])
    _pending.copies = []
    return copies


def land(copies):
    """Copies taken by ``take_pending`` land in shared memory."""
    for dst, di, words, n in copies:
        flat = dst.reshape(-1) if dst.ndim > 1 else dst
        flat[di:di + n] = 0 if words is None else words


def cp_async_wait_all():
    """Land this thread's copies."""
    land(take_pending())
