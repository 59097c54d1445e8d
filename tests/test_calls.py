"""flashlesson.calls: a torch call seen before replays the launches its first call
recorded. Replays need the library's GPU path; here it runs on ``scripts/profile_host.py``'s
fake driver (no GPU, a fake torch): every case of ``profile_host.check_cases`` — softmax's
methods and tiers, attention and its backward in float32, float16 and bf16 with masks, scales,
LSE, an unaligned view, the naive and lesson paths that stay on the full path, a
flashlesson.torch step — launches the same kernels with the same parameters whether it takes
the full path, is recorded, or is replayed; and a recorded key does not let through an option
the full path refuses (``causal=1``, ``scale=True``, ...). On the GPU,
``scripts/gpu_overhead_check.py`` compares the replayed results bitwise.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SIM

from flashlesson import calls

ROOT = Path(__file__).resolve().parents[1]


def test_replayed_calls_launch_what_the_full_path_launches():
    env = {k: v for k, v in os.environ.items()
           if k not in ("FLASHLESSON_DEVICE", "NUMBA_ENABLE_CUDASIM", "FLASHLESSON_CALL_PLANS",
                        "FLASHLESSON_FAST_LAUNCH", "FLASHLESSON_PACKED_LAUNCH",
                        "FLASHLESSON_SIDE_STREAM")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "profile_host.py"), "--check"],
                         env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    tail = run.stdout[-4000:] + run.stderr[-4000:]
    assert run.returncode == 0, tail
    assert "0 failure(s)" in run.stdout and " of the cases replayed" in run.stdout, tail
    assert "FAIL" not in run.stdout, tail


@pytest.mark.skipif(not SIM, reason="the simulator's own rule (a GPU replays)")
def test_no_replay_in_the_simulator():
    """The simulator launches through Numba's (simulated) call: no call plans."""
    assert calls.tensor_facts(()) == (None, None)
    assert calls.lookup(("softmax",)) is None
