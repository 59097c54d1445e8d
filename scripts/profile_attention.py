"""Run one attention forward under Nsight Compute (§46–47): the program ncu profiles.

    ncu --clock-control none -k regex:flash_forward --launch-skip 1 --launch-count 1 \
        python scripts/profile_attention.py --b 2 --h 16 --n 4096 --d 64 [--causal]
    … --dtype fp16 --method flash_wgmma      (ncu -k regex:flash_wgmma)
    … --dtype fp16 --method torch            (torch SDPA's flash backend, the same inputs)
    … --dtype fp16 --method flash_wgmma --backward   (the backward after one forward:
                 ncu -k regex:"dkdv|dq_kernel" --launch-skip 2 --launch-count 2)
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
    p.add_argument("--method", default="flash", help="a flashlesson method, or 'torch' (SDPA's "
                   "flash backend)")
    p.add_argument("--dtype", default="fp32", choices=("fp32", "fp16", "bf16"))
    p.add_argument("--backward", action="store_true", help="profile the backward (torch: "
                   "autograd of SDPA flash; ours: attention_backward after its forward)")
    a = p.parse_args()
    rng = np.random.default_rng(0)
    x = [rng.standard_normal((a.b, a.h, a.n, a.d), dtype=np.float32) for _ in range(3)]
    if a.method == "torch" or a.dtype == "bf16":
        import torch
        dt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
        q, k, v = (torch.tensor(y, device="cuda", dtype=dt) for y in x)
    else:
        q, k, v = (cuda.to_device(y.astype(np.float16 if a.dtype == "fp16" else np.float32))
                   for y in x)
    if a.backward:
        return backward(a, q, k, v)
    for _ in range(2):
        if a.method == "torch":
            from torch.nn.attention import SDPBackend, sdpa_kernel
            from torch.nn.functional import scaled_dot_product_attention as sdpa
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                sdpa(q, k, v, is_causal=a.causal)
        else:
            flashlesson.attention(q, k, v, causal=a.causal, method=a.method)
    cuda.synchronize()


def backward(a, q, k, v):
    """Two backward calls on a random dO of O's shape; the forward once, first."""
    if a.method == "torch":
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention as sdpa
        xs = [x.detach().requires_grad_(True) for x in (q, k, v)]
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            o = sdpa(*xs, is_causal=a.causal)
        do = torch.randn_like(o)
        for _ in range(2):
            torch.autograd.grad(o, xs, do, retain_graph=True)
        torch.cuda.synchronize()
        return
    o, lse = flashlesson.attention(q, k, v, causal=a.causal, return_lse=True)
    if a.dtype == "bf16":                       # (torch tensors in, torch tensors out)
        import torch
        do = torch.randn_like(o)
    else:
        do = cuda.to_device(np.random.default_rng(1).standard_normal(o.shape).astype(o.dtype))
    for _ in range(2):
        flashlesson.attention_backward(do, q, k, v, o, lse, causal=a.causal, method=a.method)
    cuda.synchronize()


if __name__ == "__main__":
    main()
