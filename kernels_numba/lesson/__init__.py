"""The lesson tier: one plain kernel per idea of the lesson, read top to bottom.

Each file is the first thing to read for its sections; the fast tier (``kernels_numba/*.py``)
does the same work tuned, and each fast file's menu opens with a ladder from the lesson kernel.
Both tiers are checked by the same tests against the same float64 oracles (``reference/``), and
``flashlesson.softmax(…, tier="lesson")`` / ``flashlesson.attention(…, tier="lesson")`` run them.

Rules: the lesson's names (m, l, acc, correction, P, dP, dS, D, LSE, Br, Bc, Qi, Kj, Vj), the
formula beside each line, ≤ ~60 lines of body and ≤ 3 compile-time flags a kernel, every
``cuda.syncthreads()`` commented and never inside a thread-dependent branch; shared device
functions only for what the lesson names (§6, §10, §19: ``kernels_numba/reductions.py``; PTX:
``kernels_numba/mma.py``).

Menu
| file              | §                                   | kernels                                       |
|-------------------|-------------------------------------|-----------------------------------------------|
| ``softmax.py``    | 3, 6–7, 8, 9–10, 11, 18–20          | ``row_max`` → ``row_sum_exp`` → ``normalize``;  |
|                   |                                     | ``softmax_warp``; ``softmax_warp_multi(K)``;  |
|                   |                                     | ``softmax_block(K)``; ``softmax_block_smem``, |
|                   |                                     | ``softmax_block_reread``; ``softmax_online``  |
| ``attention.py``  | 14 (none needed), 23–24, 32, 33, 34, 35, 36 | ``flash_forward(D, Br, Bc, CAUSAL, PAD, DROPOUT)``; |
|                   |                                     | ``online_softmax`` (§19–20's tile step, shared |
|                   |                                     | with ``loop_order.py``);                      |
|                   |                                     | §14's naive path is GEMM (``gemm.py``, already |
|                   |                                     | plain) + the lesson softmax: no kernel of its own |
| ``backward.py``   | 30                                  | D = rowsum(dO∘O); dK/dV (K/V tile outside); dQ |
| ``tensor_core.py``| 37                                  | one warp on ``mma.sync`` m16n8k16 fp16         |
|                   |                                     | (d a multiple of 16; its fragments, row loads |
|                   |                                     | and quad softmax as named device functions)   |
| ``loop_order.py`` | 41, 42, 43                          | ``flash_fa1`` (FA1's order); ``flash_double_buffer``; |
|                   |                                     | ``flash_producer_consumer`` (warps that load) |
"""
