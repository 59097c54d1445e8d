"""Sweep BwdConfig of the fp32 FlashAttention backward on the GPU (§30, §38), per head dim.

For each candidate (the same tiles for the dK/dV and the dQ kernel): check against the default
configuration's gradients, time ``attention_backward`` (CUDA events, medians) and report TFLOP/s
(2.5 × the forward's 4·B·H·N²·d) and the kernels' shared memory.
``flashlesson.configs.BWD_GPU_CONFIGS`` (the defaults) come from this sweep.

    python scripts/tune_backward.py [--d 64 128] [--n 4096]
"""

import argparse

import numpy as np
from numba import cuda
from tabulate import tabulate

from flashlesson.attention_methods import attention
from flashlesson.backward_methods import attention_backward
from flashlesson.bench import time_gpu_adaptive
from flashlesson.configs import BwdConfig, bwd_default_config as default_config
from flashlesson.reference.attention_backward import attention_backward_flops

# (Bc, Br, TR, TC) for both kernels
CANDIDATES = {
    64: [(64, 64, 16, 8), (64, 32, 16, 8), (128, 64, 32, 8), (64, 64, 16, 16)],
    128: [(64, 64, 16, 16), (64, 32, 16, 8), (32, 64, 8, 16), (32, 32, 8, 8)],
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--d", type=int, nargs="+", default=[64, 128])
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--b", type=int, default=1)
    p.add_argument("--h", type=int, default=16)
    a = p.parse_args()
    rows = []
    rng = np.random.default_rng(0)
    for d in a.d:
        shape = (a.b, a.h, a.n, d)
        q, k, v, do = (cuda.to_device(rng.standard_normal(shape).astype(np.float32))
                       for _ in range(4))
        o, lse = attention(q, k, v, return_lse=True)
        want = [g.copy_to_host() for g in attention_backward(do, q, k, v, o, lse,
                                                             config=default_config(d))]
        flops = attention_backward_flops(a.b, a.h, a.n, a.n, d, False)
        for c in CANDIDATES[d]:
            cfg = BwdConfig(*c, *c)
            try:
                cfg.check(d)
                got = [g.copy_to_host() for g in attention_backward(do, q, k, v, o, lse,
                                                                    config=cfg)]
            except Exception as exc:  # noqa: BLE001 - reported
                print(d, cfg, "FAILED", str(exc)[:150], flush=True)
                continue
            err = max(float(np.max(np.abs(g - w)) / np.max(np.abs(w)))
                      for g, w in zip(got, want))
            ms = time_gpu_adaptive(lambda: attention_backward(do, q, k, v, o, lse, config=cfg))
            tf = flops / ms / 1e9
            rows.append([d, *c, c[2] * c[3], tf, ms, err, *cfg.smem_bytes(d)])
            print(f"d={d} {c}: {tf:.2f} TFLOP/s {ms:.3f} ms err vs default {err:.1e}",
                  flush=True)
        del q, k, v, do
    print(tabulate(rows, headers=["d", "Bc", "Br", "TR", "TC", "threads", "TFLOP/s", "ms",
                                  "rel err vs default", "smem dK/dV", "smem dQ"],
                   floatfmt=".3g"))


if __name__ == "__main__":
    main()
