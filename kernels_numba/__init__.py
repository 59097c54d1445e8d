"""The lesson's ``numba.cuda`` kernels and the device functions they share.

Files, by lesson §:
- ``reductions.py`` — §6 warp shuffles, §10 block reductions, §19 the (m, l) merge.
- ``softmax.py`` — §1–§11, §18–§20: one kernel per softmax method.
- ``mma.py``, ``vector.py`` — inline-PTX helpers (§37 mma.sync/ldmatrix; vector loads, cp.async).
- ``hopper.py`` — Hopper (sm_90a) inline-PTX helpers for a FlashAttention-3 forward: mbarriers,
  named barriers, setmaxnreg, wgmma with shared-memory descriptors, the bulk copy.
- ``sim/`` — Numba's CUDA simulator as the kernels need it, and the one place that chooses
  between the GPU and the simulator: warp operations (``sim/warp.py``), race mode
  (``sim/races.py``), the twins of the PTX helpers (``sim/mma.py``, ``sim/vector.py``,
  ``sim/hopper.py``,
  ``sim/reductions.py``). Kernel files never branch on the simulator; ``sim.install()`` below
  adds the warp operations and race mode when the simulator is on, so the same kernel source
  runs on the GPU and on the CPU.

This package imports numba, numpy and math only (never ``flashlesson``).
"""

from . import sim

sim.install()       # the simulator's warp operations and race mode; nothing on a GPU
