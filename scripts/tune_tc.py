"""§37: sweep the tensor-core kernel's tiles (TcConfig: Bc, WARPS, MT, PF, ASYNC) on the GPU, fp16.

Each config is checked against torch SDPA's float64 math on one head, then timed (CUDA events,
medians) next to torch SDPA's flash backend in the same process.

    PYTHONPATH=src FLASHLESSON_DEVICE=gpu python3 scripts/tune_tc.py [d64] [d128]
"""

import sys

import numpy as np
from numba import cuda
from tabulate import tabulate

import flashlesson
from flashlesson import TcConfig, attention
from flashlesson.bench import attention_flops, time_gpu_adaptive
from flashlesson.launch import kernel_resources
from flashlesson.kernels_numba import attention_tc as KT

SHAPES = [(2, 16, 4096, 64), (1, 16, 8192, 128)]
A = dict(ASYNC=True)    # cp.async + ldmatrix
CONFIGS = {64: [TcConfig(64, 4, 1, False), TcConfig(64, 4, 2, False), TcConfig(64, 8, 1, False),
                TcConfig(64, 4, 2, **A), TcConfig(64, 8, 1, **A), TcConfig(64, 4, 1, **A),
                TcConfig(128, 4, 1, **A), TcConfig(64, 8, 2, **A)],
           128: [TcConfig(64, 8, 1, False), TcConfig(32, 8, 1, False), TcConfig(32, 8, 1, True),
                 TcConfig(64, 8, 1, **A), TcConfig(32, 8, 1, **A), TcConfig(32, 4, 2, **A),
                 TcConfig(64, 4, 1, **A), TcConfig(128, 8, 1, **A)]}


def main():
    shapes = [s for s in SHAPES if f"d{s[3]}" in sys.argv[1:]] or SHAPES   # e.g. d128 only
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rows = []
    for (b, h, n, d) in shapes:
        t16 = [torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3)]
        args = [cuda.as_cuda_array(x) for x in t16]
        ref = sdpa(*(x[:1, :1].double() for x in t16))[0, 0].cpu().numpy()
        flops = attention_flops(b, h, n, n, d, False)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            ms_t = time_gpu_adaptive(lambda: sdpa(*t16))
        for cfg in CONFIGS[d]:
            try:
                o = attention(*args, config=cfg)
                err = float(np.max(np.abs(o[0, 0].copy_to_host().astype(np.float64) - ref)))
                ms = time_gpu_adaptive(lambda: attention(*args, config=cfg))
                kern = KT.BUILT[("flash_tc_kernel", d, cfg.Bc, cfg.WARPS, False, False, False,
                                 cfg.MT, cfg.PF, cfg.ASYNC)]
                res = kernel_resources(kern)[-1]
                rows.append([f"B{b} H{h} N{n} d{d}", cfg.Bc, cfg.WARPS, cfg.MT, cfg.PF,
                             cfg.ASYNC, res["registers"], res["local bytes"], f"{err:.1e}",
                             flops / ms / 1e9, flops / ms_t / 1e9, ms_t / ms])
            except Exception as exc:
                rows.append([f"B{b} H{h} N{n} d{d}", cfg.Bc, cfg.WARPS, cfg.MT, cfg.PF,
                             cfg.ASYNC, "", "", f"{type(exc).__name__}: {str(exc)[:60]}", "", "", ""])
            print(rows[-1], flush=True)
    print(tabulate(rows, headers=["shape", "Bc", "WARPS", "MT", "PF", "ASYNC", "regs", "local B",
                                  "max err", "TFLOP/s", "sdpa flash TFLOP/s", "× flash"],
                   floatfmt=".3g"))


if __name__ == "__main__":
    sys.exit(main())
