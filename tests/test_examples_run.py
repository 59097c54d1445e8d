"""Every example runs the way its user runs it: ``python examples/sNN_*.py`` in a new process,
from a folder that is not the checkout, importing whatever it imports first.

The examples' checks are the tour's (tests/test_tour.py runs them all in this process); here
the point is the start of a script run on its own: the device chosen (and never a GPU claimed
where there is none), the package's names imported from wherever it is installed, the inputs
built. In the simulator the cheap examples run to the end (exit status 0 and their summary);
the others stop at their first kernel launch, through a ``sitecustomize`` hook that only this
test puts on the path. On a GPU the cheap examples run to the end as scripts; the others, whose
``main()`` the tour test runs on the GPU in this process (about 9 minutes in all on the H200),
run as scripts too with ``FLASHLESSON_EXAMPLES_FULL=1``.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import flashlesson
from flashlesson import tour

EXAMPLES = sorted(tour.find_examples().glob("s[0-9]*.py"))
# The examples that take under 5 s each in the simulator (measured 2026-12-06 on a 2-core CPU
# box under load: `time python examples/sNN_*.py`; 42 s for the 14): run to the end there too.
CHEAP = {"s01_naive_softmax.py", "s02_stable_softmax.py", "s04_memory_bound.py",
         "s06_s07_warp_softmax.py", "s08_warp_multi.py", "s15_s16_sizes_and_flops.py",
         "s17_tile_softmax_is_wrong.py", "s26_memory_hierarchy.py", "s28_s29_time_and_memory.py",
         "s33_numeric_example.py", "s44_gemm_vs_attention.py", "s45_linear_attention.py",
         "s49_state_size.py", "s50_summary.py"}
STOPPED = 17          # the exit status of a run stopped at its first kernel launch
MARK = "flashlesson-example-test: first kernel launch reached"

# Stops the process at the first simulated kernel launch, once the example has chosen its
# device and built its inputs. It patches Numba's simulator kernel class when the simulator's
# module is loaded (never imports numba itself: that would choose the device before
# flashlesson does).
SITECUSTOMIZE = textwrap.dedent(f"""
    import importlib.abc, importlib.machinery, os, sys

    class _Stop(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "numba.cuda.simulator.kernel":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                def stop(self, *args, **kwargs):
                    print({MARK!r}, flush=True)
                    os._exit({STOPPED})
                module.FakeCUDAKernel.__call__ = stop
            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _Stop())
""")


def _run(path, tmp_path, stop_at_first_launch):
    env = dict(os.environ)
    package_home = str(Path(flashlesson.__file__).resolve().parents[1])
    paths = [package_home] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if stop_at_first_launch:
        hook = tmp_path / "hook"
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
        paths.insert(0, str(hook))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    for name in ("NUMBA_ENABLE_CUDASIM", "FLASHLESSON_DEVICE"):
        env.pop(name, None)                    # auto mode, as a user starts it
    if flashlesson.SIMULATOR:
        env["FLASHLESSON_DEVICE"] = "sim"      # the choice this process made (no GPU, or asked)
    return subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)


def test_the_examples_are_listed():
    assert len(EXAMPLES) >= 38 and CHEAP <= {p.name for p in EXAMPLES}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_as_a_script(path, tmp_path):
    stop = flashlesson.SIMULATOR and path.name not in CHEAP
    if (not flashlesson.SIMULATOR and path.name not in CHEAP
            and os.environ.get("FLASHLESSON_EXAMPLES_FULL") != "1"):
        pytest.skip("GPU: tests/test_tour.py runs this example; FLASHLESSON_EXAMPLES_FULL=1 "
                    "runs it here as a script too")
    run = _run(path, tmp_path, stop)
    out = run.stdout + run.stderr
    assert "Traceback" not in run.stderr, out[-3000:]
    if flashlesson.SIMULATOR:
        assert "running kernels on the CUDA GPU" not in out, out[-3000:]
    if stop:
        assert run.returncode == STOPPED and MARK in run.stdout, \
            f"exit status {run.returncode}, no kernel launched:\n{out[-3000:]}"
    else:
        assert run.returncode == 0, f"exit status {run.returncode}:\n{out[-3000:]}"
        assert run.stdout.strip(), "the example printed nothing"


def test_numba_cuda_imported_first_without_a_gpu_is_one_clear_line(tmp_path):
    """A user's program that imports numba.cuda before flashlesson, on a machine with no GPU:
    one line that says so and what to do, no claim of a GPU."""
    if not flashlesson.SIMULATOR:
        pytest.skip("a GPU is present: numba.cuda imported first is fine there")
    script = tmp_path / "user.py"
    script.write_text("from numba import cuda\nimport flashlesson\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_ENABLE_CUDASIM", "FLASHLESSON_DEVICE")}
    env["PYTHONPATH"] = str(Path(flashlesson.__file__).resolve().parents[1])
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    if flashlesson.device.REASON.startswith(("FLASHLESSON_DEVICE", "NUMBA_ENABLE_CUDASIM")) \
            and "CUDA driver reports" in run.stderr:
        pytest.skip("this machine has a GPU; the simulator was asked for")
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert "numba.cuda was imported before flashlesson" in last
    assert "import flashlesson before numba.cuda" in last and "NUMBA_ENABLE_CUDASIM=1" in last
    assert "running kernels on the CUDA GPU" not in run.stderr
