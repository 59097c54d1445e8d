"""Where the kernels run: the GPU, or Numba's CUDA simulator on the CPU.

The choice has to be made before Numba's CUDA target is imported (Numba reads
``NUMBA_ENABLE_CUDASIM`` once), so ``import flashlesson`` makes it first thing:

- ``FLASHLESSON_DEVICE=gpu``: a CUDA GPU is required; none present is an error.
- ``FLASHLESSON_DEVICE=sim``: the simulator, even when a GPU is present.
- unset: ``NUMBA_ENABLE_CUDASIM=1`` if the user set it, else the GPU when the CUDA driver
  reports one, else the simulator.

Whichever it is, it is said once on stderr, at the first kernel launch (``announce``). There
is never a silent fallback: a GPU that was asked for and is missing raises :class:`DeviceError`.
"""

import ctypes
import os
import sys

MODES = ("gpu", "sim")


class DeviceError(RuntimeError):
    """The requested device cannot be used."""


def _driver_gpu_count():
    """Number of CUDA devices the driver reports, asked through libcuda directly.

    Asking the driver (and not ``numba.cuda``) keeps the choice possible before Numba's
    CUDA target is imported. Returns ``(count, reason)``; ``reason`` says why it is 0.
    """
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        return 0, "no CUDA driver (libcuda) found"
    rc = lib.cuInit(0)
    if rc != 0:
        return 0, f"cuInit failed with CUDA error {rc}"
    count = ctypes.c_int(0)
    rc = lib.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0:
        return 0, f"cuDeviceGetCount failed with CUDA error {rc}"
    if count.value == 0:
        return 0, "the CUDA driver reports no device"
    return count.value, ""


def _choose():
    want = os.environ.get("FLASHLESSON_DEVICE", "").strip().lower()
    if want not in ("",) + MODES:
        raise DeviceError(
            f"FLASHLESSON_DEVICE={want!r}: expected 'gpu', 'sim' or unset (auto)")
    numba_sim = os.environ.get("NUMBA_ENABLE_CUDASIM", "0").strip() not in ("", "0")

    if "numba.cuda" in sys.modules:
        # Too late to choose: Numba's CUDA target is already loaded one way or the other.
        from numba.cuda import config as cuda_config
        have = "sim" if cuda_config.ENABLE_CUDASIM else "gpu"
        if want and want != have:
            raise DeviceError(
                f"FLASHLESSON_DEVICE={want} but numba.cuda was imported before flashlesson "
                f"in {have} mode; import flashlesson first or set NUMBA_ENABLE_CUDASIM="
                f"{'1' if want == 'sim' else '0'}")
        if have == "gpu" and os.environ.get("NUMBA_ENABLE_CUDASIM", "").strip() == "0":
            # set to 0 on purpose: Numba's GPU target without a GPU (a fake driver's harness)
            return have, "numba.cuda was already imported, with NUMBA_ENABLE_CUDASIM=0"
        if have == "gpu":
            count, reason = _driver_gpu_count()
            if count == 0:
                raise DeviceError(
                    f"numba.cuda was imported before flashlesson, for a GPU, and there is none "
                    f"({reason}); import flashlesson before numba.cuda (it then chooses the "
                    f"simulator), or set NUMBA_ENABLE_CUDASIM=1")
            return have, f"numba.cuda was already imported; the CUDA driver reports {count} device(s)"
        return have, "numba.cuda was already imported in simulator mode"

    if want == "sim":
        return "sim", "FLASHLESSON_DEVICE=sim"
    if want == "gpu":
        if numba_sim:
            raise DeviceError("FLASHLESSON_DEVICE=gpu conflicts with NUMBA_ENABLE_CUDASIM=1")
        count, reason = _driver_gpu_count()
        if count == 0:
            raise DeviceError(f"FLASHLESSON_DEVICE=gpu but no CUDA GPU is usable: {reason}")
        return "gpu", "FLASHLESSON_DEVICE=gpu"
    if numba_sim:
        return "sim", "NUMBA_ENABLE_CUDASIM=1"
    count, reason = _driver_gpu_count()
    if count:
        return "gpu", f"the CUDA driver reports {count} device(s)"
    return "sim", reason


def _apply(mode):
    if mode == "sim" and "numba.cuda" not in sys.modules:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        if "numba" in sys.modules:
            # numba core is loaded but not its CUDA target: make it read the variable again.
            from numba.core import config as numba_config
            numba_config.reload_config()


def _run_as_command():
    """Whether this process is the ``flashlesson`` command (the console script, or ``python -m
    flashlesson``): then a device error is one line on stderr and exit status 2, not a
    traceback. The package is imported before the command's ``main`` can catch anything,
    so the choice is made here, from the command line."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    if "-m" in argv:
        i = argv.index("-m")
        if i + 1 < len(argv) and argv[i + 1] == "flashlesson":
            return True
    return os.path.basename(sys.argv[0]) in ("flashlesson", "flashlesson.exe")


try:
    MODE, REASON = _choose()
except DeviceError as _exc:
    if not _run_as_command():
        raise
    print(f"flashlesson: {_exc}", file=sys.stderr)
    raise SystemExit(2) from None
_apply(MODE)
SIMULATOR = MODE == "sim"
_announced = False


def banner():
    """The line that says which device runs the kernels, and why."""
    if SIMULATOR:
        return (f"flashlesson: running kernels in Numba's CUDA simulator on the CPU ({REASON}); "
                "small shapes only. Set FLASHLESSON_DEVICE=gpu to require a GPU.")
    return f"flashlesson: running kernels on the CUDA GPU ({REASON})."


def announce(stream=None):
    """Say once per process, on stderr, which device runs the kernels (``banner``). Importing
    flashlesson says nothing: the first kernel launch does (``flashlesson.launch.plan_for``), or
    the ``flashlesson`` command when it starts one that runs kernels."""
    global _announced
    if _announced:
        return
    _announced = True
    print(banner(), file=stream or sys.stderr)


def announced_elsewhere():
    """Mark the device as said by the caller in its own place (pytest's header,
    tests/conftest.py), so that no launch says it again."""
    global _announced
    _announced = True


def describe():
    """A dict of facts about the device and the software, for ``flashlesson info``."""
    import numba
    import numpy
    from numba import cuda

    facts = {"mode": MODE, "why": REASON, "python": sys.version.split()[0],
             "numpy": numpy.__version__, "numba": numba.__version__}
    try:
        from importlib.metadata import version
        facts["numba-cuda"] = version("numba-cuda")
    except Exception as exc:  # noqa: BLE001 - reported, not hidden
        facts["numba-cuda"] = f"unknown ({exc})"
    if SIMULATOR:
        facts["device"] = "Numba CUDA simulator (CPU, one Python thread per CUDA thread)"
    else:
        dev = cuda.get_current_device()
        name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
        facts["device"] = name
        facts["compute capability"] = "%d.%d" % dev.compute_capability
        facts["SMs"] = dev.MULTIPROCESSOR_COUNT
        facts["shared memory per block (bytes)"] = dev.MAX_SHARED_MEMORY_PER_BLOCK
        try:
            facts["driver"] = cuda.cudadrv.driver.driver.get_version()
        except Exception as exc:  # noqa: BLE001
            facts["driver"] = f"unknown ({exc})"
    try:
        import torch
        facts["torch"] = torch.__version__
    except ImportError:
        facts["torch"] = "not installed"
    return facts


def gpu_only(what):
    """Raise a clear error when a GPU-only command runs in the simulator."""
    if SIMULATOR:
        raise DeviceError(f"{what} needs a CUDA GPU; this process runs the simulator ({REASON})")
