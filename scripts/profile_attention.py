"""Run one attention forward under Nsight Compute (§46–47): the program ncu profiles.

    ncu --clock-control none -k regex:flash_forward --launch-skip 1 --launch-count 1 \
        python scripts/profile_attention.py --b 2 --h 16 --n 4096 --d 64 [--causal]
The first call compiles and warms up; the second is the one profiled.
"""

import argparse

import numpy as np
from numba import cuda

import flashlesson


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--b", type=int, default=2)
    p.add_argument("--h", type=int, default=16)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--method", default="flash")
    a = p.parse_args()
    rng = np.random.default_rng(0)
    q, k, v = (cuda.to_device(rng.standard_normal((a.b, a.h, a.n, a.d), dtype=np.float32))
               for _ in range(3))
    for _ in range(2):
        flashlesson.attention(q, k, v, causal=a.causal, method=a.method)
    cuda.synchronize()


if __name__ == "__main__":
    main()
