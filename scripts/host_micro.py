"""GPU micro-costs behind a public call: torch accessors, stream lookups, one
Numba-compiled kernel launched through cuda.core and through a packed launch (``launch.Packed``:
on another output, another stream, a fresh thread), autograd.Function overhead, and where a
flashlesson.torch step spends its time (forward and backward bodies against the whole step; the
same with the GIL's switch interval at 1 µs, and with the garbage collector off).

    FLASHLESSON_DEVICE=gpu python scripts/host_micro.py
"""

import gc
import sys
import threading
import time

import numpy as np
import torch

import flashlesson as fl
from flashlesson import launch
from numba import cuda  # noqa: E402  (after flashlesson: it chooses the device)
from flashlesson.arrays import DevArray


def us(fn, n=2000):
    for _ in range(20):
        fn()
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def row(name, fn, n=2000):
    print(f"{name:<60} {us(fn, n):8.3f} µs", flush=True)


def accessors():
    print("# torch accessors", flush=True)
    x = torch.randn(64, 1024, device="cuda")
    dev = x.device
    row("x.shape", lambda: x.shape)
    row("tuple(x.shape)", lambda: tuple(x.shape))
    row("x.stride()", lambda: x.stride())
    row("x.dtype", lambda: x.dtype)
    row("x.device", lambda: x.device)
    row("x.get_device()", lambda: x.get_device())
    row("x.data_ptr()", lambda: x.data_ptr())
    row("x.is_contiguous()", lambda: x.is_contiguous())
    row("x.is_cuda", lambda: x.is_cuda)
    row("x.requires_grad", lambda: x.requires_grad)
    row("type(x) is torch.Tensor", lambda: type(x) is torch.Tensor)
    row("x.detach()", lambda: x.detach())
    row("x.view(64, 1024)", lambda: x.view(64, 1024))
    row("x.view((1, 64, 1024))", lambda: x.view((1, 64, 1024)))
    row("x.__cuda_array_interface__", lambda: x.__cuda_array_interface__, 200)
    row("torch.empty(shape, dtype=, device=dev)",
        lambda: torch.empty((64, 1024), dtype=torch.float32, device=dev))
    row("torch.empty(shape, dtype=, device=x.device)",
        lambda: torch.empty((64, 1024), dtype=torch.float32, device=x.device))
    row("torch.empty(*shape, dtype=, device=dev)",
        lambda: torch.empty(64, 1024, dtype=torch.float32, device=dev))
    row("x.new_empty(shape)", lambda: x.new_empty((64, 1024)))
    row("torch.empty_like(x)", lambda: torch.empty_like(x))
    row("torch.cuda.current_stream(dev).cuda_stream",
        lambda: torch.cuda.current_stream(dev).cuda_stream)
    row("torch.cuda.current_stream().cuda_stream", lambda: torch.cuda.current_stream().cuda_stream)
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        row("torch._C._cuda_getCurrentRawStream(0)", lambda: raw(0))
    row("threading.get_ident()", threading.get_ident)
    lock = threading.Lock()

    def locked():
        with lock:
            pass
    row("with lock: pass", locked)
    key = ((64, 1024), (1024, 1), torch.float32, 0, "auto", None, "fast")
    d = {key: 1}
    row("dict lookup of a built 7-tuple key",
        lambda: d.get(((64, 1024), (1024, 1), torch.float32, 0, "auto", None, "fast")))
    row("key from tensor: (x.shape, x.stride(), x.dtype, x.get_device())",
        lambda: d.get((x.shape, x.stride(), x.dtype, x.get_device(), "auto", None, "fast")))


@cuda.jit
def axpy(out, a, s, n):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = a[i] * s + n


def launches():
    print("# one kernel (out[i] = a[i]*s + n, 4096 floats): cuda.core vs a packed launch",
          flush=True)
    a = torch.arange(4096, dtype=torch.float32, device="cuda")
    out = torch.empty_like(a)
    da = DevArray(a.data_ptr(), (4096,), np.float32, a)
    do = DevArray(out.data_ptr(), (4096,), np.float32, out)
    args = (do, da, np.float32(0.5), 7)
    plan = launch.plan_for(axpy, 16, 256, args)
    plan(args, 0)
    torch.cuda.synchronize()
    print("plan.fast", plan.fast, plan.why_slow, flush=True)
    if not plan.fast:
        return
    from cuda.core import launch as core_launch
    stream0 = launch._core_stream(0)
    params = plan.params(args)
    row("launch.launch(kernel, grid, block, args) (the full layer)",
        lambda: launch.launch(axpy, 16, 256, args))
    row("plan.params(args)", lambda: plan.params(args))
    row("cuda.core.launch(stream, config, kernel, *params)",
        lambda: core_launch(stream0, plan.config, plan.cu_kernel, *params))
    packed = launch.packed(plan, params)
    print("packed launch:", launch.packed_state(), flush=True)
    if packed is None:
        return
    where = ((plan.arrays[0][1], 0, 0),)
    other = torch.empty_like(a)
    rc = packed(where, [other.data_ptr()], 0)
    torch.cuda.synchronize()
    print("packed launch into another output: rc", rc, "ok:", torch.equal(other, a * 0.5 + 7),
          flush=True)
    ptrs = [out.data_ptr()]
    row("launch.Packed (pointer slot written, cuLaunchKernel via ctypes)",
        lambda: packed(where, ptrs, 0))
    for cufunction in (False, True):            # the kernel named by CUkernel or CUfunction
        launch.CUFUNCTION = cufunction
        p2 = launch.packed(plan, params)
        other.zero_()
        rc = p2(where, [other.data_ptr()], 0)
        torch.cuda.synchronize()
        print(f"CUFUNCTION={cufunction}: rc {rc} ok: {torch.equal(other, a * 0.5 + 7)}",
              flush=True)
        row(f"launch.Packed, kernel as {'CUfunction' if cufunction else 'CUkernel'}",
            lambda: p2(where, ptrs, 0))
    launch.CUFUNCTION = True
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    other.zero_()
    with torch.cuda.stream(s):
        rc = packed(where, [other.data_ptr()], s.cuda_stream)
    torch.cuda.synchronize()
    print("packed launch on a side stream: rc", rc, "ok:", torch.equal(other, a * 0.5 + 7),
          flush=True)
    res = {}

    def fresh_thread():                 # (no context made current by anyone on it)
        res["rc"] = packed(where, ptrs, 0)
    t = threading.Thread(target=fresh_thread)
    t.start()
    t.join()
    print("packed launch from a fresh thread: rc", res, flush=True)


def autograd_costs():
    print("# autograd.Function overhead (B1 H2 N128 d64 fp32)", flush=True)
    q = torch.randn(1, 2, 128, 64, device="cuda", requires_grad=True)
    do = torch.randn(1, 2, 128, 64, device="cuda")

    class Nop(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = torch.empty_like(x)
            ctx.save_for_backward(x, y)
            return y

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            return torch.empty_like(x)

    row("Nop.apply(q) (forward only)", lambda: Nop.apply(q), 500)
    row("Nop.apply(q).backward(do)", lambda: Nop.apply(q).backward(do), 500)
    F = torch.nn.functional
    row("torch SDPA fwd+bwd", lambda: F.scaled_dot_product_attention(q, q, q).backward(do), 500)


def step_breakdown():
    print("# flashlesson.torch forward+backward: where the time goes", flush=True)
    from flashlesson import torch as flt
    q, k, v = (torch.randn(1, 2, 128, 64, device="cuda", requires_grad=True) for _ in range(3))
    do = torch.randn(1, 2, 128, 64, device="cuda")
    Fn = flt.FlashAttentionFunction
    fwd, bwd = Fn.__dict__["forward"].__func__, Fn.__dict__["backward"].__func__
    spent = {"fwd": 0.0, "bwd": 0.0}

    def tfwd(ctx, *a):
        t0 = time.perf_counter()
        r = fwd(ctx, *a)
        spent["fwd"] += time.perf_counter() - t0
        return r

    def tbwd(ctx, g):
        t0 = time.perf_counter()
        r = bwd(ctx, g)
        spent["bwd"] += time.perf_counter() - t0
        return r
    Fn.forward, Fn.backward = staticmethod(tfwd), staticmethod(tbwd)

    def step():
        flt.scaled_dot_product_attention(q, k, v).backward(do)
    for what, interval, collect in (("as is", 0.005, True), ("switch interval 1 µs", 1e-6, True),
                                    ("garbage collector off", 0.005, False)):
        sys.setswitchinterval(interval)
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        spent.update(fwd=0.0, bwd=0.0)
        n = 300
        gc.collect()
        if not collect:
            gc.disable()
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        torch.cuda.synchronize()
        total = (time.perf_counter() - t0) / n * 1e6
        gc.enable()
        print(f"{what}: step {total:.1f} µs, forward body {spent['fwd'] / n * 1e6:.1f}, "
              f"backward body {spent['bwd'] / n * 1e6:.1f}", flush=True)
    sys.setswitchinterval(0.005)
    Fn.forward, Fn.backward = staticmethod(fwd), staticmethod(bwd)
    print("threads alive:", [t.name for t in threading.enumerate()], flush=True)


if __name__ == "__main__":
    print(fl.device.MODE, torch.__version__, flush=True)
    accessors()
    launches()
    autograd_costs()
    step_breakdown()
