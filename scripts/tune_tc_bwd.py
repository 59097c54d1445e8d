"""§30 + §37: sweep the tensor-core backward's tiles (TcBwdConfig: Bq, KV_WARPS, Bk, Q_WARPS) on
the GPU, fp16, next to torch SDPA's flash backward in the same process.

Each kernel is varied with the other at its default, so the change of the total is that
kernel's; every config's gradients are checked against torch's fp16 ones first (max |Δ| printed).
Then the best of each is timed together.

    PYTHONPATH=src FLASHLESSON_DEVICE=gpu python3 scripts/tune_tc_bwd.py [d64] [d128]
"""

import sys

from numba import cuda
from tabulate import tabulate

from flashlesson import TcBwdConfig, attention, attention_backward
from flashlesson.bench import attention_flops, time_gpu_adaptive
from flashlesson.launch import kernel_resources
from flashlesson.tc_methods import default_tc_bwd_config
from flashlesson.kernels_numba import attention_tc_backward as KB

SHAPES = [(2, 16, 4096, 64), (1, 16, 8192, 128)]
# (Bq, KV_WARPS, KV_ASYNC) and (Bk, Q_WARPS, Q_ASYNC); the first of each is the default
DKDV = {64: [(64, 8, True), (64, 4, True), (32, 8, True), (32, 4, True), (64, 8, False),
             (64, 4, False)],
        128: [(32, 8, True), (32, 4, True), (16, 8, True), (64, 8, True), (32, 8, False)]}
DQ = {64: [(64, 8, True), (64, 4, True), (32, 8, True), (128, 8, True), (64, 8, False)],
      128: [(64, 8, True), (32, 8, True), (32, 4, True), (16, 8, True), (64, 8, False)]}

def regs(name, d, tile, warps, asy):
    kern = KB.BUILT.get((name, d, tile, warps, False, False, False, asy))
    if kern is None:
        return "", ""
    res = kernel_resources(kern)[-1]
    return res["registers"], res["local bytes"]


def _cols(cfg):
    return [cfg.Bq, cfg.KV_WARPS, cfg.KV_ASYNC, cfg.Bk, cfg.Q_WARPS, cfg.Q_ASYNC]


def _kv_part(cfg):
    return cfg.Bq, cfg.KV_WARPS, cfg.KV_ASYNC


def _q_part(cfg):
    return cfg.Bk, cfg.Q_WARPS, cfg.Q_ASYNC


def main():
    shapes = [s for s in SHAPES if f"d{s[3]}" in sys.argv[1:]] or SHAPES   # e.g. d128 only
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rows = []
    for (b, h, n, d) in shapes:
        t = [torch.randn(b, h, n, d, device="cuda", dtype=torch.float16, requires_grad=True)
             for _ in range(3)]
        dout = torch.randn(b, h, n, d, device="cuda", dtype=torch.float16)
        flops = 2.5 * attention_flops(b, h, n, n, d, False)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = sdpa(*t)
            ms_t = time_gpu_adaptive(lambda: torch.autograd.grad(out, t, dout, retain_graph=True))
            want = torch.autograd.grad(out, t, dout, retain_graph=True)
        args = [cuda.as_cuda_array(x.detach()) for x in t]
        do = cuda.as_cuda_array(dout)
        o, lse = attention(*args, return_lse=True)
        base = default_tc_bwd_config(d)
        trials = [TcBwdConfig(bq, w, base.Bk, base.Q_WARPS, a, base.Q_ASYNC)
                  for bq, w, a in DKDV[d]]
        trials += [TcBwdConfig(base.Bq, base.KV_WARPS, bk, w, base.KV_ASYNC, a)
                   for bk, w, a in DQ[d][1:]]
        timed = []                                     # (ms, config) of the trials that ran
        for cfg in trials:
            try:
                grads = attention_backward(do, *args, o, lse, config=cfg)
                err = max(float((torch.as_tensor(g, device="cuda") - w).abs().max())
                          for g, w in zip(grads, want))
                ms = time_gpu_adaptive(lambda: attention_backward(do, *args, o, lse, config=cfg))
                r1 = regs("flash_tc_bwd_dkdv_kernel", d, cfg.Bq, cfg.KV_WARPS, cfg.KV_ASYNC)
                r2 = regs("flash_tc_bwd_dq_kernel", d, cfg.Bk, cfg.Q_WARPS, cfg.Q_ASYNC)
                rows.append([f"B{b} H{h} N{n} d{d}", *_cols(cfg),
                             f"{r1[0]}/{r2[0]}", f"{r1[1]}/{r2[1]}", f"{err:.1e}", ms,
                             flops / ms / 1e9, ms_t / ms])
                timed.append((ms, cfg))
            except Exception as exc:
                rows.append([f"B{b} H{h} N{n} d{d}", *_cols(cfg),
                             "", "", f"{type(exc).__name__}: {str(exc)[:60]}", "", "", ""])
            print(rows[-1], flush=True)
        # the dK/dV trials keep the dQ default and vice versa (the default is the first trial)
        kv = min((x for x in timed if _q_part(x[1]) == _q_part(base)), key=lambda x: x[0])[1]
        q = min((x for x in timed if _kv_part(x[1]) == _kv_part(base)), key=lambda x: x[0])[1]
        cfg = TcBwdConfig(kv.Bq, kv.KV_WARPS, q.Bk, q.Q_WARPS, kv.KV_ASYNC, q.Q_ASYNC)
        ms = time_gpu_adaptive(lambda: attention_backward(do, *args, o, lse, config=cfg))
        rows.append([f"B{b} H{h} N{n} d{d} best", *_cols(cfg), "", "", "", ms, flops / ms / 1e9, ms_t / ms])
        print(rows[-1], f"sdpa flash bwd {flops / ms_t / 1e9:.1f} TFLOP/s", flush=True)
    print(tabulate(rows, headers=["shape", "Bq", "KV_W", "KV_ASYNC", "Bk", "Q_W", "Q_ASYNC",
                                  "regs", "local B",
                                  "max |Δ| vs torch", "ms", "TFLOP/s", "× sdpa flash"],
                   floatfmt=".3g"))


if __name__ == "__main__":
    sys.exit(main())
