"""Sweep FlashConfig (Br, Bc, TR, TC) of the forward kernel on the GPU (§38–39), per head dim.

For each candidate: check against the float64 oracle on one head, time it (CUDA events,
medians), and report TFLOP/s with the kernel's registers, local memory (spills), shared memory
and blocks per SM (``flashlesson.sweeps.measure_config``; ``scripts/bench_sweeps.py`` runs the
§38 sweep at one shape). ``flashlesson.configs.GPU_CONFIGS`` (the defaults) come from
this sweep.

    python scripts/tune_attention.py [--d 64 128 256] [--n 4096]
"""

import argparse

import numpy as np

import flashlesson  # noqa: F401 - chooses the device
from flashlesson import sweeps
from flashlesson.configs import FlashConfig
from flashlesson.bench import attention_flops

# (Br, Bc, TR, TC, KU, GROUP)
CANDIDATES = {
    64: [(128, 64, 16, 8, 1, 4), (128, 64, 16, 8, 2, 4), (128, 64, 16, 8, 1, 2),
         (128, 64, 16, 8, 2, 2), (64, 64, 16, 8, 1, 4), (128, 32, 16, 8, 1, 4),
         (64, 64, 8, 8, 1, 4), (32, 64, 8, 8, 1, 4), (32, 32, 8, 4, 1, 4), (64, 32, 16, 4, 1, 4),
         (64, 64, 16, 8, 2, 2)],
    128: [(128, 32, 16, 8, 1, 4), (128, 32, 16, 8, 2, 4), (128, 32, 16, 8, 2, 2),
          (128, 32, 16, 8, 1, 2), (64, 32, 16, 8, 1, 4), (128, 64, 16, 16, 1, 4),
          (64, 64, 16, 16, 1, 4)],
    256: [(64, 64, 16, 16, 1, 4), (64, 64, 16, 16, 2, 4), (32, 64, 8, 16, 1, 4)],
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--d", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--b", type=int, default=1)
    p.add_argument("--h", type=int, default=16)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for d in a.d:
        # each candidate checked against the float64 oracle on head (0, 0), then timed
        # (flashlesson.sweeps.measure_config, shared with §38–39 and scripts/bench_sweeps.py)
        (q, k, v), head = sweeps.inputs(rng, a.b, a.h, a.n, d)
        want = sweeps.oracle(head)
        flops = attention_flops(a.b, a.h, a.n, a.n, d, False)
        for c in CANDIDATES[d]:
            row = sweeps.measure_config(FlashConfig(*c), d, q, k, v, want, flops)
            rows.append(row)
            print(sweeps.log_line("tune", row), flush=True)
        del q, k, v
    print(sweeps.table(rows, ("d",) + sweeps.TILE_COLUMNS))


if __name__ == "__main__":
    main()
