"""Sweep FlashConfig (Br, Bc, TR, TC) of the forward kernel on the GPU (§38–39), per head dim.

For each candidate: check against torch's float64 math result on one head, time it (CUDA events,
medians), and report TFLOP/s with the kernel's registers, local memory (spills) and shared
memory. ``flashlesson.attention_methods.GPU_CONFIGS`` (the defaults) come from this sweep.

    python scripts/tune_attention.py [--d 64 128 256] [--n 4096]
"""

import argparse
import time

import torch
from numba import cuda
from tabulate import tabulate

import flashlesson  # noqa: F401 - chooses the device
from flashlesson.attention_methods import FlashConfig
from flashlesson.attention_methods import attention as fl_attention
from flashlesson.bench import attention_flops, time_gpu_adaptive
from flashlesson.launch import kernel_resources
from kernels_numba import attention as KA

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
    rows = []
    for d in a.d:
        shape = (a.b, a.h, a.n, d)
        q, k, v = (torch.randn(shape, device="cuda") for _ in range(3))
        ref = torch.nn.functional.scaled_dot_product_attention(q[:1, :1].double(),
                                                               k[:1, :1].double(),
                                                               v[:1, :1].double())[0, 0]
        flops = attention_flops(*shape[:3], a.n, d, False)
        for br, bc, tr, tc, ku, group in CANDIDATES[d]:
            cfg = FlashConfig(br, bc, tr, tc, ku, group)
            try:
                cfg.check(d)
                t0 = time.time()
                o = fl_attention(q, k, v, config=cfg)
                cuda.synchronize()
                compile_s = time.time() - t0
            except Exception as exc:  # noqa: BLE001 - reported
                print(d, cfg, "FAILED", str(exc)[:150], flush=True)
                continue
            got = torch.as_tensor(o, device="cuda")[0, 0].double()
            err = float((got - ref).abs().max() / ref.abs().max())
            ms = time_gpu_adaptive(lambda: fl_attention(q, k, v, config=cfg))
            kern = KA.flash_forward_kernel(cfg.head_dim(d), br, bc, tr, tc, False, True, ku,
                                           group)
            res = kernel_resources(kern)
            regs = res[0]["registers"] if res else -1
            lmem = res[0]["local bytes"] if res else -1
            tf = flops / ms / 1e9
            rows.append([d, br, bc, tr, tc, ku, group, cfg.threads, tf, ms, regs, lmem,
                         cfg.smem_bytes(d), err, compile_s])
            print(f"d={d} {cfg}: {tf:.2f} TFLOP/s {ms:.3f} ms regs {regs} lmem {lmem} "
                  f"smem {cfg.smem_bytes(d)} err {err:.1e} compile {compile_s:.1f}s", flush=True)
        del q, k, v
    print(tabulate(rows, headers=["d", "Br", "Bc", "TR", "TC", "KU", "GROUP", "threads", "TFLOP/s", "ms",
                                  "regs", "lmem", "smem", "rel err", "compile s"],
                   floatfmt=".3g"))


if __name__ == "__main__":
    main()
