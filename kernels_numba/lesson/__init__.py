"""The lesson tier: one plain kernel per idea of the lesson, read top to bottom (issue 13).

- ``backward.py`` — §30: D = rowsum(dO∘O), the dK/dV kernel (K/V tile outside), the dQ kernel.
- ``tensor_core.py`` — §37: one warp on ``mma.sync`` m16n8k16 fp16 per 16-row Q block.
- ``loop_order.py`` — §41 FlashAttention-1's loop order, §42 double buffering, §43
  producer/consumer warps.

The tuned kernels stay in ``kernels_numba/*.py``; each opens with a ladder from its lesson
kernel. This package imports numba, numpy, math and ``kernels_numba`` only.
"""
