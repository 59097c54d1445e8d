"""kernels_numba/sim/: the one place that chooses between the GPU and the simulator.

Kernel files hold kernels and the device functions they use; they never branch on the
simulator. The PTX helpers (mma.py, vector.py) and fast_exp (reductions.py) are the GPU's
@intrinsics / libdevice calls on a GPU and their twins from kernels_numba/sim/ in the
simulator, picked by ``sim.helper_chooser``.
"""

import ast
import pathlib

import pytest
from conftest import SIM

from flashlesson.kernels_numba import mma, reductions, sim, vector
from flashlesson.kernels_numba.sim import mma as sim_mma
from flashlesson.kernels_numba.sim import reductions as sim_reductions
from flashlesson.kernels_numba.sim import vector as sim_vector

KERNELS = pathlib.Path(__file__).resolve().parent.parent / "kernels_numba"

MMA = ["mma_f16", "mma_bf16", "mma_tf32", "pack_f16", "pack_bf16", "tf32", "ex2", "pair_lo",
       "pair_hi", "unpack_f16", "unpack_bf16", "ldsm_x4", "ldsm_x4_trans"]
VECTOR = ["load4", "store4", "load1", "store1", "cp_async16", "cp_async4", "cp_async_wait_all"]


def test_no_kernel_file_branches_on_the_simulator():
    """Only kernels_numba/sim/ reads ENABLE_CUDASIM or touches numba.cuda.simulator."""
    offenders = []
    for path in sorted(KERNELS.rglob("*.py")):
        if "sim" in path.relative_to(KERNELS).parts[:-1]:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "ENABLE_CUDASIM":
                offenders.append(f"{path.name}:{node.lineno} reads ENABLE_CUDASIM")
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if any("simulator" in n for n in names):
                offenders.append(f"{path.name}:{node.lineno} imports the simulator")
    assert not offenders, offenders


@pytest.mark.parametrize("module, twins, names", [(mma, sim_mma, MMA),
                                                  (vector, sim_vector, VECTOR),
                                                  (reductions, sim_reductions, ["fast_exp"])])
def test_each_helper_is_the_twin_exactly_in_the_simulator(module, twins, names):
    for name in names:
        gpu_or_twin, twin = getattr(module, name), getattr(twins, name)
        assert (gpu_or_twin is twin) == SIM, f"{module.__name__}.{name}"


@pytest.mark.skipif(not SIM, reason="on a GPU the chooser returns the GPU helper unchanged")
def test_the_chooser_refuses_a_helper_without_a_twin():
    def not_a_helper():
        pass

    with pytest.raises(AttributeError, match="no simulator twin of not_a_helper"):
        sim.helper_chooser("mma")(not_a_helper)
    with pytest.raises(ValueError, match="twins: expected one of"):
        sim.helper_chooser("softmax")
