"""Numba's CUDA simulator, as far as the kernels need it — and the one place that chooses between
the GPU and the simulator.

Every kernel in ``kernels_numba`` is one source for both: on a GPU Numba compiles it; with
``NUMBA_ENABLE_CUDASIM=1`` the simulator runs it as Python threads. What the simulator lacks
lives here, so that kernel files hold kernels and the device functions they use and never
branch on the simulator:

- ``warp.py`` — warp operations (``cuda.shfl_*_sync``, votes, ballot, match, ``syncwarp``,
  ``activemask``) and ``warp_collective``, the whole-warp rendezvous behind the twins below.
- ``races.py`` — race mode: shared-memory races between warps raise, shared memory starts
  each block poisoned (``FLASHLESSON_SIM_RACES=1`` or ``with races.race_mode():``).
- ``mma.py`` — twins of ``kernels_numba/mma.py``'s inline-PTX helpers (mma.sync, ldmatrix,
  cvt packing, ex2): warp-collective, computed in NumPy.
- ``vector.py`` — twins of ``kernels_numba/vector.py``'s (vector loads/stores, cp.async held
  back until the thread waits).
- ``reductions.py`` — the twin of ``fast_exp`` (libdevice's ``__expf``): NumPy's float32 exp.
- ``hopper.py`` — twins of ``kernels_numba/hopper.py``'s (mbarriers with phases, arrival and
  transaction counts; named barriers; setmaxnreg; wgmma as a warpgroup rendezvous reading its
  operands through the descriptors; the bulk copy landing on its mbarrier's phase), with waits
  that can never end reported as errors.

The choice, made here only:

- :data:`SIMULATOR` — whether Numba runs kernels in its simulator.
- :func:`install` — adds ``warp.py``'s operations and ``races.py``'s race mode to the simulator;
  ``import kernels_numba`` calls it once (nothing on a GPU).
- :func:`helper_chooser` — a helper file (``mma.py``, ``vector.py``, ``reductions.py``,
  ``hopper.py``)
  defines each GPU helper (an ``@intrinsic`` of inline PTX, a libdevice call) and passes it
  through ``helper = helper_chooser("mma")`` (its twins' module here): on the GPU
  ``helper(f)`` is ``f`` itself, in the simulator the twin of the same name in ``sim/mma.py``.
- :func:`gpu_options`, :func:`pure_device` — compile options and device functions that differ
  (re-exported by ``kernels_numba/jit.py``).

This package imports numba, numpy and the standard library only; no module here imports a
kernel file.
"""

from numba import cuda

SIMULATOR = bool(cuda.config.ENABLE_CUDASIM)

__all__ = ["SIMULATOR", "install", "helper_chooser", "gpu_options", "pure_device"]


def install():
    """Add the warp operations and race mode to Numba's simulator (idempotent); nothing on a
    GPU."""
    if SIMULATOR:
        from . import races, warp

        warp.install()
        races.install()      # race mode (FLASHLESSON_SIM_RACES=1 or races.race_mode())


def _twin_module(twins):
    """This package's module ``twins`` (its simulator twins of a helper file's helpers)."""
    from . import hopper, mma, reductions, vector

    modules = {"hopper": hopper, "mma": mma, "reductions": reductions, "vector": vector}
    if twins not in modules:
        raise ValueError(f"twins: expected one of {sorted(modules)} (a module of "
                         f"kernels_numba/sim holding simulator twins); got {twins!r}")
    return modules[twins]


def helper_chooser(twins):
    """The decorator that picks a helper: on a GPU the helper itself (an inline-PTX
    ``@intrinsic``, a libdevice call), in the simulator its twin of the same ``__name__`` in
    ``kernels_numba/sim/<twins>.py`` (``twins``: "mma", "vector", "reductions" or "hopper")."""
    if not SIMULATOR:
        def helper(gpu):
            return gpu
        return helper

    module = _twin_module(twins)

    def helper(gpu):
        name = gpu.__name__
        twin = getattr(module, name, None)
        if twin is None:
            raise AttributeError(f"{module.__name__} has no simulator twin of {name}")
        return twin
    return helper


def gpu_options(**options):
    """``options`` on the GPU; nothing in the simulator (it rejects ``max_registers``,
    ``lineinfo``, ``launch_bounds``)."""
    return {} if SIMULATOR else options


def pure_device(fn):
    """A device function that uses no ``cuda.*``: ``cuda.jit(device=True)`` on the GPU, the plain
    Python function in the simulator. (The simulator wraps every device-function call in a
    per-module lock that swaps the module's ``cuda`` global; for a function called per element,
    such as ``fast_exp``, 64 threads queueing on that lock made whole test runs minutes slower.)
    """
    return fn if SIMULATOR else cuda.jit(device=True)(fn)
