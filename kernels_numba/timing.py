"""A kernel that only waits: it keeps the GPU busy while Python enqueues the launches to be
timed, so that CUDA events measure GPU time and not Numba's launch overhead (≈ 16 µs a launch
on the H200 machine, a sizeable share of a 60 µs fp16 softmax). Used by ``flashlesson.bench``.
"""

from numba import cuda


@cuda.jit
def gpu_sleep(microseconds):
    """One thread sleeps about ``microseconds`` µs (in 1 ms naps; nanosleep is approximate)."""
    for _ in range(microseconds // 1000 + 1):
        cuda.nanosleep(1000000)
