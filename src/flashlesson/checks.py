"""``flashlesson.checks``: the argument checks every public function shares, one place per kind.

Each check takes the value and the argument's name and either returns the value in the form the
kernels take or raises a ``TypeError`` (wrong kind of value) or ``ValueError`` (right kind, bad
value) whose message starts with that name. They run before any allocation or launch, so a
refused call leaves nothing behind (no kernel compiled, no cache entry).

- ``config_fields(cfg)``: every ``int`` field of a configuration dataclass a positive int (not a
  bool, not a float), every ``bool`` field a bool, ``Optional[int]`` None or a positive int,
  ``Optional[bool]`` None or a bool; the configurations' ``__post_init__`` call it, so a bad
  one cannot even be built.
- ``tier(value, method, lesson_methods, operation)``: "fast" or "lesson" (the project's two
  tiers); "lesson" refused for a method without a lesson kernel.
- ``flag(value, name)``: a bool (``causal="False"`` is a TypeError, not True).
- ``scale(value, d)``: None → 1/√d, else a real number finite in float32 (the kernels' type).
- ``probability``, ``integer``: what ``flashlesson.dropout.dropout_args(p, seed)`` checks p in
  [0, 1) and the seed in [0, 2^64) with (the dropout arguments themselves live there).
- ``key_padding_mask(mask, batch, nk, ...)``: bool or uint8 [B, Nk], nonzero = the key takes part.
- ``grid(grid, what)``: CUDA's grid limits (x < 2^31, y and z ≤ 65535), before a launch.
- ``no_partial_overlap(out, x)``: ``out`` is ``x`` itself or shares no byte with it.
- ``lse_parts_values(lse)``: each LSE finite or −inf.
- ``empty_like_side`` / ``filled``: results of empty problems, on the inputs' side.
"""

import math
import numbers
import operator
import typing
from dataclasses import fields

import numpy as np
from numba import cuda

from . import device
from .arrays import DevArray, Operand, empty, is_device_array, numpy_to_torch, result

FLOAT32_MAX = float(np.finfo(np.float32).max)
GRID_X_MAX = 2**31 - 1
GRID_YZ_MAX = 65535


def integer(value, name, lo, hi):
    """An integer (NumPy ints too; not a bool, not a float) in [lo, hi), as a Python int."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected an integer, got a bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__}") from None
    if not lo <= v < hi:
        raise ValueError(f"{name}: expected an integer in [{lo}, {hi}), got {v}")
    return v


def probability(value, name, noun="probability"):
    """A real number (not a bool, not a string) in [0, 1), as a float; NaN is refused."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a real number in [0, 1), got {type(value).__name__}")
    p = float(value)
    if not 0.0 <= p < 1.0:                      # NaN fails this too
        raise ValueError(f"{name}: expected a {noun} in [0, 1), got {value!r}")
    return p


def positive_int(value, name):
    """An int ≥ 1 (NumPy ints too; not a bool, not a float), as a Python int."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a positive int, got a bool ({value!r})")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected a positive int, got {type(value).__name__} "
                        f"({value!r})") from None
    if v < 1:
        raise ValueError(f"{name}: expected a positive int, got {v}")
    return v


TIERS = ("fast", "lesson")


def tier(value, method, lesson_methods, operation):
    """``tier``: "fast" (the tuned kernels, the default) or "lesson" (kernels_numba/lesson/);
    "lesson" only for a method in ``lesson_methods`` (those with a lesson kernel)."""
    if not isinstance(value, str) or value not in TIERS:
        raise ValueError(f"tier: expected one of {', '.join(TIERS)}; got {value!r}")
    if value == "lesson" and method not in lesson_methods:
        raise ValueError(f"tier: {operation} method {method!r} has no lesson kernel (tier "
                         f"'lesson' runs {', '.join(lesson_methods)}); use tier='fast'")
    return value


def flag(value, name):
    """A bool (Python or NumPy), as a Python bool; anything else is a TypeError."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a bool (True or False), got {type(value).__name__} "
                        f"({value!r})")
    return bool(value)


def config_fields(cfg):
    """Check (and normalize to Python ints/bools) every field of a frozen config dataclass from
    its annotation: ``int`` → positive int, ``bool`` → bool, ``Optional[int]`` → None or a
    positive int, ``Optional[bool]`` → None or a bool. The error names the class and the
    field."""
    hints = typing.get_type_hints(type(cfg))
    cls = type(cfg).__name__
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        kind = hints.get(f.name)
        name = f"{cls}.{f.name}"
        if kind is bool:
            value = flag(value, name)
        elif kind is int:
            value = positive_int(value, name)
        elif kind == typing.Optional[int]:
            value = None if value is None else positive_int(value, name)
        elif kind == typing.Optional[bool]:
            value = None if value is None else flag(value, name)
        else:
            continue
        object.__setattr__(cfg, f.name, value)      # (frozen: normalize in place once)


def scale(value, d):
    """The softmax scale: None → 1/√d; else a real number (not a bool, not a string) whose
    float32 value is finite (1e300 overflows float32, the type the kernels compute in)."""
    if value is None:
        return 1.0 / math.sqrt(d)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"scale: expected a real number or None, got {type(value).__name__} "
                        f"({value!r})")
    v = float(value)
    if not math.isfinite(v) or abs(v) > FLOAT32_MAX:
        raise ValueError(f"scale: expected a finite number (finite in float32, |scale| ≤ "
                         f"{FLOAT32_MAX:.4g}), got {value!r}")
    return v


MASK_DTYPES = (np.bool_, np.uint8)


def dtype_name(x):
    """The dtype of an array argument as the messages write it ("float32", "float16",
    "bfloat16" for a ``BFloat16`` or a torch bfloat16 tensor), or None for a value that is no
    array (its own check names what it is)."""
    if type(x).__name__ == "BFloat16" and hasattr(x, "bits"):
        return "bfloat16"
    dt = getattr(x, "dtype", None)
    if dt is None or isinstance(x, np.generic):
        return None
    text = str(dt)
    if text.startswith("torch."):
        return text[len("torch."):]
    try:
        return np.dtype(dt).name
    except TypeError:
        return None


ATTENTION_DTYPES = ("float32", "float16", "bfloat16")


def one_dtype(*named, dtypes=ATTENTION_DTYPES):
    """(name, array) pairs that must share one dtype (attention's q, k, v; the backward's do,
    q, k, v, o): a TypeError naming every one's dtype where they differ. Only dtypes of
    ``dtypes`` take part: an array of another dtype, or a value that is no array, is left to
    its own check (which names the argument and what it takes)."""
    got = [(name, dtype_name(x)) for name, x in named]
    if any(d is not None and d not in dtypes for _, d in got):
        return
    if len({d for _, d in got if d is not None}) > 1:
        raise TypeError(f"{', '.join(name for name, _ in named)} must share one dtype; got "
                        + ", ".join(f"{name} {d}" for name, d in got if d is not None))


def key_padding_mask(mask, batch, nk, on_host=None):
    """§35's key padding mask as a device array [B, Nk] of bool or uint8 (True / nonzero = the
    key takes part), or None. The same dtypes everywhere (forward, backward, every method).
    ``on_host``: the side of q (the mask must be on it), or None to take either."""
    if mask is None:
        return None
    mo = Operand(mask, "key_padding_mask", MASK_DTYPES, ndim=2)
    if on_host is not None and mo.on_host != on_host:
        where = "a NumPy array" if on_host else "a device array"
        raise TypeError(f"key_padding_mask: must be {where}, like q, k, v")
    if mo.shape != (batch, nk):
        raise ValueError(f"key_padding_mask: expected shape (B, Nk) = {(batch, nk)}, got "
                         f"{mo.shape}")
    if not mo.obj.size:
        return None                             # (an empty problem: nothing to mask)
    view = mo.device_view(mo.shape)
    return view.view(np.uint8) if mo.dtype == np.bool_ else view


def grid(dims, what="the launch"):
    """Refuse a grid CUDA cannot launch (x ≥ 2^31, y or z > 65535) before launching it."""
    dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
    for axis, (n, most) in enumerate(zip(dims, (GRID_X_MAX, GRID_YZ_MAX, GRID_YZ_MAX))):
        if n > most:
            raise ValueError(f"{what}: needs {n} blocks along the grid's {'xyz'[axis]} axis "
                             f"(grid {dims}); CUDA allows at most {most} there")


def _byte_bounds(a):
    """np.byte_bounds (moved to np.lib.array_utils in NumPy 2)."""
    try:
        from numpy.lib.array_utils import byte_bounds
    except ImportError:                         # NumPy 1.x
        byte_bounds = np.byte_bounds
    return byte_bounds(a)


def _byte_range(arr):
    """(first byte, one past the last byte) of an array's memory, host or device (device
    arrays here are C-contiguous: ``Operand`` and ``check_out`` see to it)."""
    if isinstance(arr, np.ndarray):
        return _byte_bounds(arr)
    if device.SIMULATOR:                        # a FakeCUDAArray wraps a NumPy array
        return _byte_bounds(np.asarray(arr._ary if hasattr(arr, "_ary") else arr))
    start = arr.ptr if isinstance(arr, DevArray) else \
        cuda.as_cuda_array(arr).__cuda_array_interface__["data"][0]
    return start, start + arr.size * np.dtype(arr.dtype).itemsize


def no_partial_overlap(out, x, name="out", x_name="x"):
    """``out`` may be ``x`` itself (the same memory, shape and dtype: in place) or share no
    memory with it; a partial overlap would let one row's result overwrite another row's input
    before it is read."""
    if out is None or out.size == 0 or x.size == 0:
        return
    (a0, a1), (b0, b1) = _byte_range(out), _byte_range(x)
    if a1 <= b0 or b1 <= a0:
        return
    if a0 == b0 and a1 == b1 and tuple(out.shape) == tuple(x.shape):
        return
    raise ValueError(f"{name}: overlaps {x_name} partially (bytes {a0:#x}…{a1:#x} against "
                     f"{b0:#x}…{b1:#x}); pass {x_name} itself for in place, or a separate array")


def lse_parts_values(host_lse, name="lse_parts"):
    """Each part's LSE must be finite or −inf (−inf: the part saw no key); +inf and NaN have
    no meaning as a log-sum-exp and would make the merged row NaN."""
    bad = np.isnan(host_lse) | np.isposinf(host_lse)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name}: expected finite values or −inf (a part with no key); got "
                         f"{host_lse[where]!r} at index {where}")


def empty_like_side(shape, dtype, on_host, like=None):
    """An empty (or unwritten) result array of ``shape`` on the host or the device (a torch
    tensor when ``like``, an Operand, holds one)."""
    return np.empty(shape, dtype) if on_host else result(empty(shape, dtype, like=like))


def filled(shape, dtype, value, on_host, like=None):
    """A result array of ``shape`` filled with ``value``, on the host or the device (a torch
    tensor when ``like``, an Operand, holds one)."""
    if not on_host and getattr(like, "torch", None) is not None:
        import torch
        return torch.full(shape, value, dtype=numpy_to_torch(dtype), device=like.torch.device)
    host = np.full(shape, value, dtype)
    return host if on_host else cuda.to_device(host)


__all__ = ["integer", "probability", "positive_int", "flag", "config_fields", "scale", "key_padding_mask",
           "grid", "no_partial_overlap", "lse_parts_values", "empty_like_side", "filled",
           "is_device_array", "MASK_DTYPES", "GRID_X_MAX", "GRID_YZ_MAX"]
