"""The lesson's ``numba.cuda`` kernels and the device functions they share.

Files, by lesson §:
- ``reductions.py`` — §6 warp shuffles, §10 block reductions, §19 the (m, l) merge.
- ``softmax.py`` — §1–§11, §18–§20: one kernel per softmax method.
- ``simwarp.py`` — warp operations for Numba's CUDA simulator, installed here automatically
  when the simulator is on, so the same kernel source runs on the GPU and on the CPU.
- ``simraces.py`` — the simulator's race mode: shared-memory races between warps raise,
  shared memory starts each block poisoned.

This package imports numba, numpy and math only (never ``flashlesson``).
"""

from numba import cuda

if cuda.config.ENABLE_CUDASIM:
    from . import simraces, simwarp

    simwarp.install()
    simraces.install()      # race mode (FLASHLESSON_SIM_RACES=1 or simraces.race_mode())
