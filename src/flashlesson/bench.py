"""Benchmarks (GPU only): ``flashlesson bench softmax``.

Method, as the lesson's claims need it (§4: softmax is bound by memory, not by arithmetic):
- every variant is first checked against the float64 oracle on the benchmark's own data;
- times are CUDA-event medians after a warm-up (the first call compiles), each sample the mean
  of ``INNER`` back-to-back launches, enqueued while a sleeping kernel holds the GPU, so the
  events see GPU time only, not Python's launch overhead (the same for torch and for Numba);
- tensors of ≈2^26 elements (256 MB in fp32), 5× the H200's 50 MB L2, so each launch goes to HBM;
- bandwidth = (one read + one write of the tensor) / time — the bytes the ideal kernel moves,
  whatever the kernel really re-reads — next to the device-to-device copy measured in the same
  run (the ceiling), and ``torch.softmax`` measured in the same run when torch is installed.
"""

import contextlib
import math
import statistics
import sys
import time
import traceback

import numpy as np
from numba import cuda

# §16, §30–31: the FLOP counts are the reference's (it owns them)
from .reference.attention import attention_flops
from .reference.attention_backward import attention_backward_flops

from . import arrays, device
from . import softmax_methods as sm

INNER = 10          # launches per timing sample
SAMPLES = 15        # samples; the median is reported
WARMUP = 2
DEFAULT_NS = tuple(2 ** p for p in range(5, 16))     # 32 … 32768
DEFAULT_ELEMENTS = 2 ** 26


def softmax_bytes(rows, n, itemsize):
    """§4: the bytes an ideal softmax moves: read x once, write y once."""
    return 2 * rows * n * itemsize


def time_gpu(fn, samples=SAMPLES, inner=INNER, warmup=WARMUP, defer=True):
    """Median milliseconds per call of ``fn`` (which launches GPU work on the default stream).

    Before each sample a kernel sleeps on the GPU while the ``inner`` calls are enqueued behind
    it, so the start event fires when the GPU reaches the first of them and the events time the
    GPU only. The sleep is made longer than Python takes to enqueue the ``inner`` calls (measured
    first: a flash attention call costs the host ≈ 0.1–0.2 ms, more than a small kernel runs),
    and frees are deferred during a sample: Numba frees device memory in batches, and
    ``cuMemFree`` waits for the whole GPU, which would drain the queue mid-sample. (``defer``
    False for calls that allocate gigabytes, such as naive attention's S and P: ten of them held
    at once would not fit, and their kernels run long enough for a drain not to matter.)
    """

    from .kernels_numba.timing import gpu_sleep
    for _ in range(warmup):
        fn()
    gpu_sleep[1, 1](1)
    cuda.synchronize()
    host = []
    with (cuda.defer_cleanup() if defer else contextlib.nullcontext()):
        gpu_sleep[1, 1](5000)
        for _ in range(3):                      # host time of one call, with the GPU busy
            t0 = time.perf_counter()
            fn()
            host.append(time.perf_counter() - t0)
        cuda.synchronize()
    sleep_us = int(max(1000, 1.5e6 * inner * min(host) + 500))
    time_gpu.host_ms = 1e3 * min(host)
    times = []
    for _ in range(samples):
        with (cuda.defer_cleanup() if defer else contextlib.nullcontext()):
            gpu_sleep[1, 1](sleep_us)
            times.append(_events_ms(fn, inner))
    return statistics.median(times)


time_gpu.host_ms = float("nan")     # the last call's host time per fn() call, in ms


def _events_ms(fn, calls):
    """One sample of time_gpu / time_end_to_end: CUDA events around ``calls`` calls of fn,
    synchronised on the second; milliseconds per call."""
    start, stop = cuda.event(timing=True), cuda.event(timing=True)
    start.record()
    for _ in range(calls):
        fn()
    stop.record()
    stop.synchronize()
    return cuda.event_elapsed_time(start, stop) / calls


def time_end_to_end(fn, calls=INNER, warmup=WARMUP, samples=5):
    """Milliseconds per call of ``fn`` as a user sees it: ``calls`` calls back to back (host
    time, allocations and launches included, nothing sleeping in front), CUDA events around
    them, one synchronisation at the end; the median of ``samples`` such runs, as the
    kernel-only figure is a median (until 2026-12-02 one run was the figure). Beside
    ``time_gpu``'s kernel-only figure it shows what the launch layer costs: end to end ≈
    kernel-only when the host keeps ahead."""
    for _ in range(warmup):
        fn()
    cuda.synchronize()
    return statistics.median(_events_ms(fn, calls) for _ in range(samples))


def cuda_torch():
    """torch when it is installed and sees a GPU, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _check(y_dev, x_host, n_check=32):
    """Max abs error of the first and last rows against the float64 oracle (NaN if unwritten)."""
    from .reference import softmax_stable
    rows = x_host.shape[0]
    errs = []
    for lo in sorted({0, max(0, rows - n_check)}):
        hi = min(rows, lo + n_check)
        got = y_dev[lo:hi].copy_to_host().astype(np.float64)
        want = softmax_stable(x_host[lo:hi].astype(np.float64))
        errs.append(np.max(np.abs(got - want)))
    return float(max(errs))


def bench_softmax(ns=DEFAULT_NS, dtypes=("float32", "float16"), methods=None,
                  elements=DEFAULT_ELEMENTS, log=print):
    """Time every method × N × dtype. Returns a list of result dicts (one per measurement)."""
    device.gpu_only("flashlesson bench softmax")
    torch = cuda_torch()
    methods = list(methods or (["auto"] + [m for m in sm.METHODS if m != "naive"]))
    rng = np.random.default_rng(0)
    results = []
    # the ceiling: a device-to-device copy of the same number of bytes (cuMemcpyDtoD through
    # Numba, and torch's copy_ when torch is there; the faster one is the ceiling)
    copy_bw = {}
    for dt in dtypes:
        a = cuda.to_device(rng.standard_normal(elements).astype(dt))
        b = cuda.device_array_like(a)
        ms = time_gpu(lambda: b.copy_to_device(a))
        if torch is not None:
            ta, tb = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")
            ms = min(ms, time_gpu(lambda: tb.copy_(ta)))
            del ta, tb
        copy_bw[dt] = 2 * a.nbytes / ms / 1e6
        log(f"copy {dt}: {copy_bw[dt]:.0f} GB/s")
        del a, b
    for dt in dtypes:
        itemsize = np.dtype(dt).itemsize
        for n in ns:
            rows = max(1, elements // n)
            x_host = (rng.standard_normal((rows, n)) * 3).astype(dt)
            x = cuda.to_device(x_host)
            y = cuda.device_array_like(x)
            nbytes = softmax_bytes(rows, n, itemsize)
            torch_ms = None
            if torch is not None:
                tx = torch.as_tensor(x, device="cuda")
                ty = torch.empty_like(tx)
                torch_ms = time_gpu(lambda: torch.softmax(tx, dim=-1, out=ty))
            for name in methods:
                real = sm.choose(n) if name == "auto" else name
                meth = sm.METHODS[real]
                if meth.max_n is not None and n > meth.max_n:
                    continue
                y[:] = np.nan                       # poison: unwritten elements fail the check
                meth.launch(x, y, None)
                err = _check(y, x_host)
                ms = time_gpu(lambda: meth.launch(x, y, None))
                gbs = nbytes / ms / 1e6
                row = {"dtype": dt, "N": n, "rows": rows, "method": name, "runs": real,
                       "ms": ms, "GB/s": gbs, "% copy": 100 * gbs / copy_bw[dt],
                       "max err": err}
                if torch_ms is not None:
                    row["torch GB/s"] = nbytes / torch_ms / 1e6
                    row["vs torch"] = torch_ms / ms
                # end to end: the public call (torch tensors in when torch is there)
                xin = tx if torch is not None else x
                e2e = time_end_to_end(lambda: sm.softmax(xin, method=name))
                row["e2e GB/s"] = nbytes / e2e / 1e6
                row["e2e/kernel"] = ms / e2e
                results.append(row)
                log(f"{dt} N={n:6d} {name:12s} {ms:8.4f} ms {gbs:7.0f} GB/s "
                    f"err {err:.1e}" + (f"  torch {row['torch GB/s']:.0f} GB/s "
                                        f"ratio {row['vs torch']:.2f}" if torch_ms else ""))
            del x, y
    return results, copy_bw


def geomean(values):
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summarize(results, method="auto"):
    """Per dtype: min and geometric mean of the ratio vs torch for one method."""
    out = {}
    for dt in sorted({r["dtype"] for r in results}):
        ratios = [r["vs torch"] for r in results
                  if r["dtype"] == dt and r["method"] == method and "vs torch" in r]
        if ratios:
            out[dt] = (min(ratios), geomean(ratios))
    return out


def plot_softmax(results, copy_bw, path):
    """Bandwidth vs N for each method, torch and the copy roofline (needs matplotlib; drawn by
    ``flashlesson.plots``, which also draws it again from the saved JSON)."""
    from .plots import plot_softmax_bench
    return plot_softmax_bench({"copy GB/s": copy_bw, "results": results}, path)


# ---------------------------------------------------------------------------------------------
# Attention (§14, §23–24, §28–29, §34): TFLOP/s of naive and flash vs torch SDPA per backend
# ---------------------------------------------------------------------------------------------
ATTENTION_SHAPES = (            # (B, H, N, d): the three main shapes, then an N sweep
    (4, 16, 1024, 64),
    (2, 16, 4096, 64),
    (1, 16, 8192, 128),
)
ATTENTION_SWEEP = tuple((1, 16, n, 64) for n in (256, 512, 1024, 2048, 4096, 8192, 16384))
# §37 head dims (``bench attention --tc``; ``--headdims`` replaces the list): d = 80, 96, 111
# beside 64 and 128 at one shape; the tensor-core kernels run D = d padded to a multiple of 16
TC_HEADDIMS = (64, 80, 96, 111, 128)


def tc_headdim_shapes(headdims=TC_HEADDIMS, b=2, h=16, n=4096):
    """(B, H, N, d) rows of the head-dim sweep of ``bench attention --tc``."""
    return tuple((b, h, n, d) for d in headdims)


def time_gpu_adaptive(fn, target_ms=20.0, samples=7, defer=True):
    """time_gpu with as many launches per sample as make ~target_ms (1 … 10)."""
    fn()
    cuda.synchronize()
    one = time_gpu(fn, samples=1, inner=1, warmup=0, defer=defer)
    inner = int(min(10, max(1, target_ms // max(one, 1e-3))))
    return time_gpu(fn, samples=samples, inner=inner, warmup=1, defer=defer)


def flush_frees(ctx):
    """Numba frees device memory lazily (a queue of pending frees): release them now."""
    for owner in (ctx, getattr(ctx, "memory_manager", None)):
        pending = getattr(owner, "deallocations", None)
        if pending is not None:
            pending.clear()


def _numba_bytes(ctx):
    """Bytes of device memory Numba's allocator holds for this process: its live allocations
    plus the frees it has queued and not yet made; None where Numba's bookkeeping (private
    attributes of numba-cuda's memory manager, read with a guard) is not there to read."""
    manager = getattr(ctx, "memory_manager", None)
    live = getattr(manager, "allocations", None)
    pending = getattr(getattr(manager, "deallocations", None), "_size", None)
    if not isinstance(live, dict) or not isinstance(pending, int):
        return None
    return sum(getattr(m, "size", 0) for m in list(live.values())) + pending


def _torch_peak(reset=False):
    """torch's caching allocator: bytes allocated at the peak since the last reset (0 when
    torch is not in use): results the library returns as torch tensors come from it."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return 0
    if reset:
        torch.cuda.reset_peak_memory_stats()
    return torch.cuda.max_memory_allocated()


def device_bytes_held(fn):
    """Device memory taken by ``fn()`` at its peak (§15, §29, §31), counted in this process's
    own books, so that another process on the same GPU cannot move it: what Numba's allocator
    newly holds across the call with frees deferred (``cuda.defer_cleanup``: what ``fn``
    allocated and dropped on the way — the naive path's S and P — is still counted, its
    outputs kept alive until then), plus the peak in use of the stream-ordered pool
    (``arrays.pool_usage``) and of torch's allocator. Where Numba's books cannot be read, the
    drop in the device's free memory (cuMemGetInfo) stands in for them: the driver's pages,
    and disturbed by other processes."""
    ctx = cuda.current_context()
    cuda.synchronize()
    flush_frees(ctx)
    numba0, free0 = _numba_bytes(ctx), ctx.get_memory_info()[0]
    used0, reserved0 = arrays.pool_usage(reset_peak=True)
    torch0 = _torch_peak(reset=True)
    with cuda.defer_cleanup():
        out = fn()
        cuda.synchronize()
        numba1, free1 = _numba_bytes(ctx), ctx.get_memory_info()[0]
    peak, reserved1 = arrays.pool_usage()
    torch_extra = max(_torch_peak() - torch0, 0)
    del out
    flush_frees(ctx)
    if numba0 is not None and numba1 is not None:
        return numba1 - numba0 + max(peak - used0, 0) + torch_extra
    # the pool serves results from memory it already holds, which free memory does not show:
    # count its peak in use, not what it newly reserved
    return free0 - free1 - (reserved1 - reserved0) + max(peak - used0, 0)


def _time_sdpa_backends(torch, make_fn, flops, row, key, log, what):
    """row[key.format(backend)] = TFLOP/s of torch SDPA per fp32 backend (math, efficient):
    ``make_fn()`` builds, under that backend, the call to time."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for name, backend in (("math", SDPBackend.MATH),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                ms = time_gpu_adaptive(make_fn())
            row[key.format(name)] = flops / ms / 1e9
        except RuntimeError as exc:                  # e.g. out of memory for math
            log(f"sdpa {name} {what}: {str(exc)[:80]}")
        torch.cuda.empty_cache()


def _naive_fits(b, h, n):
    """Whether naive attention's S and P (float32, [B·H, N, N] each) fit in 40 GB."""
    return n * n * b * h * 4 * 2 <= 40e9


def _rel_err(got, want):
    """The largest, over the outputs, of max|got − want| / max|want| on head (0, 0)."""
    return max(float(np.max(np.abs(g[0, 0].copy_to_host() - w)) / np.max(np.abs(w)))
               for g, w in zip(got, want))


def _measure(row, method, key, fn, flops, check):
    """One method of a row: the device memory ``fn()`` holds, ``check(fn())`` (relative error,
    when there is a reference), then the CUDA-event time → row["<key> ms"], "<key> TFLOP/s",
    "<key> MB held", "<key> host ms" and row["<method> rel err"]."""
    device_bytes_held(fn)                               # warm-up: compile, load, reserve
    peak_extra = device_bytes_held(fn)
    row[f"{method} rel err"] = None if check is None else check(fn())
    ms = time_gpu_adaptive(fn, defer=method != "naive")
    row[f"{key} ms"] = ms
    row[f"{key} TFLOP/s"] = flops / ms / 1e9
    row[f"{key} MB held"] = peak_extra / 2 ** 20
    row[f"{key} host ms"] = time_gpu.host_ms            # Python's cost of one call


def _finish(row, suffix, results, log):
    """flash / torch ratios per SDPA backend, then the row into results and the log."""
    for base in ("math", "efficient"):
        theirs, ours = row.get(f"sdpa {base}{suffix} TFLOP/s"), row.get(f"flash{suffix} TFLOP/s")
        if theirs and ours:
            row[f"flash / {base}"] = ours / theirs
    results.append(row)
    log(" ".join(f"{key}={val:.4g}" if isinstance(val, float) else f"{key}={val}"
                 for key, val in row.items()))


def bench_attention(shapes=ATTENTION_SHAPES + ATTENTION_SWEEP, causal_modes=(False, True),
                    methods=("flash", "naive"), long_check=True, log=print):
    """Check, then time every method on every shape; torch SDPA (math, efficient) beside it."""
    from .attention_methods import attention as fl_attention
    device.gpu_only("flashlesson bench attention")
    torch = cuda_torch()
    results = []
    rng = np.random.default_rng(0)
    for (b, h, n, d) in shapes:
        shape = (b, h, n, d)
        qh, kh, vh = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
        q, k, v = cuda.to_device(qh), cuda.to_device(kh), cuda.to_device(vh)
        for causal in causal_modes:
            flops = attention_flops(b, h, n, n, d, causal)
            ref = None
            row = {"B": b, "H": h, "N": n, "d": d, "causal": causal}
            if torch is not None:
                tq, tk, tv = (torch.as_tensor(a, device="cuda") for a in (q, k, v))
                # float64 reference for head (0, 0), from torch's math backend
                ref = torch.nn.functional.scaled_dot_product_attention(
                    tq[:1, :1].double(), tk[:1, :1].double(), tv[:1, :1].double(),
                    is_causal=causal)[0, 0].cpu().numpy()
                _time_sdpa_backends(
                    torch, lambda: (lambda: torch.nn.functional.scaled_dot_product_attention(
                        tq, tk, tv, is_causal=causal)),
                    flops, row, "sdpa {} TFLOP/s", log, f"{shape} causal={causal}")
            for method in methods:
                if method == "naive" and not _naive_fits(b, h, n):
                    continue                            # S and P would not fit: flash only
                _measure(row, method, method,
                         lambda: fl_attention(q, k, v, causal=causal, method=method), flops,
                         None if ref is None else (lambda o: _rel_err([o], [ref])))
            if row.get("flash TFLOP/s"):            # end to end: the public call, torch in
                ins = (tq, tk, tv) if torch is not None else (q, k, v)
                e2e = time_end_to_end(lambda: fl_attention(*ins, causal=causal))
                row["flash e2e TFLOP/s"] = flops / e2e / 1e9
                row["e2e/kernel"] = row["flash e2e TFLOP/s"] / row["flash TFLOP/s"]
            _finish(row, "", results, log)
        del q, k, v
    if long_check:
        n = 65536
        q, k, v = (cuda.to_device(rng.standard_normal((1, 1, n, 64)).astype(np.float32))
                   for _ in range(3))
        for causal in (False, True):
            ms = time_gpu(lambda: fl_attention(q, k, v, causal=causal), samples=3, inner=1)
            flops = attention_flops(1, 1, n, n, 64, causal)
            results.append({"B": 1, "H": 1, "N": n, "d": 64, "causal": causal, "flash ms": ms,
                            "flash TFLOP/s": flops / ms / 1e9})
            log(f"flash B1 H1 N{n} d64 causal={causal}: {ms:.2f} ms, {flops / ms / 1e9:.1f} TFLOP/s")
    return results


# ---------------------------------------------------------------------------------------------
# Attention backward (§30–31): recompute (flash) vs stored P (naive) vs torch SDPA backward
# ---------------------------------------------------------------------------------------------
def bench_attention_backward(shapes=ATTENTION_SHAPES, causal_modes=(False, True),
                             methods=("flash", "naive"), log=print):
    """Check (against torch's float64 autograd on one head), then time ``attention_backward``
    per method and torch SDPA's backward per fp32 backend, in the same process."""
    from .attention_methods import attention as fl_attention
    from .backward_methods import attention_backward
    device.gpu_only("flashlesson bench attention --backward")
    torch = cuda_torch()
    results = []
    rng = np.random.default_rng(0)
    for (b, h, n, d) in shapes:
        shape = (b, h, n, d)
        q, k, v, do = (cuda.to_device(rng.standard_normal(shape).astype(np.float32))
                       for _ in range(4))
        for causal in causal_modes:
            flops = attention_backward_flops(b, h, n, n, d, causal)
            row = {"B": b, "H": h, "N": n, "d": d, "causal": causal}
            o, lse = fl_attention(q, k, v, causal=causal, return_lse=True)
            ref = None
            if torch is not None:
                F = torch.nn.functional
                tq, tk, tv, tdo = (torch.as_tensor(a, device="cuda") for a in (q, k, v, do))
                # float64 gradients of head (0, 0) from torch autograd of the math backend
                q64, k64, v64 = (t[:1, :1].double().requires_grad_() for t in (tq, tk, tv))
                out = F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal)
                ref = [g[0, 0].cpu().numpy() for g in torch.autograd.grad(
                    out, (q64, k64, v64), tdo[:1, :1].double())]

                def backward_of_sdpa():
                    xq, xk, xv = (t.clone().requires_grad_() for t in (tq, tk, tv))
                    out = F.scaled_dot_product_attention(xq, xk, xv, is_causal=causal)
                    return lambda: torch.autograd.grad(out, (xq, xk, xv), tdo, retain_graph=True)

                _time_sdpa_backends(torch, backward_of_sdpa, flops, row, "sdpa {} bwd TFLOP/s",
                                    log, f"backward {shape} causal={causal}")
            for method in methods:
                if method == "naive" and not _naive_fits(b, h, n):
                    continue
                _measure(row, method, f"{method} bwd",
                         lambda: attention_backward(do, q, k, v, o, lse, causal=causal,
                                                    method=method), flops,
                         None if ref is None else (lambda grads: _rel_err(grads, ref)))
            _finish(row, " bwd", results, log)
        del q, k, v, do
    return results


# ---------------------------------------------------------------------------------------------
# §37: tensor cores — flash_tc (fp16, bf16, 3xTF32) vs torch SDPA's flash / cuDNN / efficient
# ---------------------------------------------------------------------------------------------
def tc_kernel_report(log=print):
    """Registers, local memory (spills) and HMMA count of every compiled tensor-core kernel."""
    from .kernels_numba import attention_tc as KT

    from .launch import kernel_resources
    rows = []
    for key, kernel in KT.BUILT.items():
        try:            # (kernels above 48 KB of shared memory run as opt-in specializations)
            parts = [kernel] + list(getattr(kernel, "specializations", {}).values())
            sass = "\n".join(s for p in parts for s in p.inspect_sass().values())
            hmma, ldl = sass.count("HMMA"), sass.count("LDL") + sass.count("STL")
        except Exception as exc:                       # nvdisasm missing: say so
            hmma = ldl = f"n/a ({type(exc).__name__}: {str(exc)[:60]})"
        for res in kernel_resources(kernel):
            row = {"kernel": key[0], "(D, Bc, WARPS, CAUSAL, PAD[, BF16])": key[1:], **res,
                   "HMMA in SASS": hmma, "LDL/STL in SASS": ldl}
            rows.append(row)
            log(" ".join(f"{k}={v}" for k, v in row.items()))
    return rows


def _torch_sdpa(what):
    """(torch, SDPBackend, sdpa_kernel, scaled_dot_product_attention) for a GPU command that
    compares with torch; a clear exit without a GPU or without torch."""
    device.gpu_only(what)
    torch = cuda_torch()
    if torch is None:
        raise SystemExit(f"{what} compares with torch SDPA: install torch")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return torch, SDPBackend, sdpa_kernel, torch.nn.functional.scaled_dot_product_attention


def _padded_row(row, fmt):
    """The cost of padding the head dimension, named: D (the tensor-core kernels' d rounded up
    to 16) and the rate the tensor cores ran at, counting the padded columns' FLOPs too
    (TFLOP/s × D/d; the row's TFLOP/s counts the true d's)."""
    d, D = row["d"], row["D"]
    if f"tc {fmt} TFLOP/s" in row:
        row[f"tc {fmt} TFLOP/s at D"] = row[f"tc {fmt} TFLOP/s"] * D / d


def bench_attention_tc(shapes=ATTENTION_SHAPES + tc_headdim_shapes(),
                       causal_modes=(False, True), log=print):
    """Check (one head against float64), then time flash_tc in fp16, bf16 and 3xTF32 with
    torch SDPA's flash and cuDNN backends (fp16, bf16) and efficient (fp32) in the same run.
    FLOPs with the true d (attention_flops); "D" is the kernels' padded head dimension and
    "tc fp16 TFLOP/s at D" the rate counting the padded columns (the padding's cost: d/D of
    the tensor-core work is useful). 3xTF32 (multiples of 8 only) is skipped at other d."""
    from .kernels_numba.attention_tc import padded_head_dim

    from .attention_methods import attention as fl_attention
    from .tc_methods import BFloat16
    torch, SDPBackend, sdpa_kernel, sdpa = _torch_sdpa("flashlesson bench attention --tc")
    results = []
    for (b, h, n, d) in shapes:
        t32 = [torch.randn(b, h, n, d, device="cuda") for _ in range(3)]
        for causal in causal_modes:
            flops = attention_flops(b, h, n, n, d, causal)
            row = {"B": b, "H": h, "N": n, "d": d, "D": padded_head_dim(d), "causal": causal}
            ref = sdpa(*(x[:1, :1].double() for x in t32), is_causal=causal)[0, 0].cpu().numpy()
            for fmt, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16),
                            ("fp32", torch.float32)):
                if fmt == "fp32" and d % 8:
                    continue                    # (3xTF32: multiples of 8)
                tq, tk, tv = (x.to(dt) for x in t32)
                backends = ((("flash", SDPBackend.FLASH_ATTENTION),
                             ("cudnn", SDPBackend.CUDNN_ATTENTION)) if fmt != "fp32" else
                            (("efficient", SDPBackend.EFFICIENT_ATTENTION),))
                for name, backend in backends:
                    try:
                        with sdpa_kernel(backend):
                            ms = time_gpu_adaptive(lambda: sdpa(tq, tk, tv, is_causal=causal))
                            err = float(np.max(np.abs(
                                sdpa(tq[:1, :1], tk[:1, :1], tv[:1, :1], is_causal=causal)[0, 0]
                                .double().cpu().numpy() - ref)))
                        row[f"sdpa {name} {fmt} TFLOP/s"] = flops / ms / 1e9
                        row[f"sdpa {name} {fmt} err"] = err
                    except RuntimeError as exc:
                        log(f"sdpa {name} {fmt}: {str(exc)[:80]}")
                if fmt == "bf16":
                    args = [BFloat16(cuda.as_cuda_array(x.view(torch.int16)).view(np.uint16))
                            for x in (tq, tk, tv)]
                else:
                    args = [cuda.as_cuda_array(x) for x in (tq, tk, tv)]

                def run(args=args):
                    return fl_attention(*args, causal=causal, method="flash_tc")

                def err_of(o):
                    o = o.bits if isinstance(o, BFloat16) else o
                    got = o[0, 0].copy_to_host()
                    got = ((got.astype(np.uint32) << 16).view(np.float32) if fmt == "bf16"
                           else got.astype(np.float64))
                    return float(np.max(np.abs(got - ref)))
                _measure(row, f"tc {fmt}", f"tc {fmt}", run, flops, err_of)
                row[f"tc {fmt} err"] = row.pop(f"tc {fmt} rel err")
                if fmt != "fp32":
                    _padded_row(row, fmt)
                for name in ("flash", "cudnn", "efficient"):
                    theirs = row.get(f"sdpa {name} {fmt} TFLOP/s")
                    if theirs:
                        row[f"tc {fmt} / {name}"] = row[f"tc {fmt} TFLOP/s"] / theirs
                del tq, tk, tv, args
            results.append(row)
            log(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in row.items()))
        del t32
        torch.cuda.empty_cache()
    return results


def _tf32x3_backward_row(row, torch, SDPBackend, sdpa_kernel, sdpa, t16, causal, flops, refs,
                         err_of, log):
    """The 3xTF32 backward and torch's fp32 efficient backward on the row's inputs as float32."""
    from .attention_methods import attention as fl_attention
    from .backward_methods import attention_backward as fl_backward
    t32 = [x.float() for x in t16]
    try:
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            xs = [x.detach().requires_grad_(True) for x in t32[:3]]
            out = sdpa(*xs, is_causal=causal)
            ms = time_gpu_adaptive(lambda: torch.autograd.grad(out, xs, t32[3],
                                                               retain_graph=True))
            g = torch.autograd.grad(out, xs, t32[3], retain_graph=True)
        row["sdpa efficient fp32 bwd TFLOP/s"] = flops / ms / 1e9
        row["sdpa efficient fp32 bwd err"] = max(float(np.max(np.abs(
            gi[0, 0].double().cpu().numpy() - r))) for gi, r in zip(g, refs))
    except RuntimeError as exc:
        log(f"sdpa efficient fp32 backward: {str(exc)[:80]}")
    q, k, v, do = (cuda.as_cuda_array(x) for x in t32)
    o, lse = fl_attention(q, k, v, causal=causal, return_lse=True, method="flash_tc")

    def run():
        return fl_backward(do, q, k, v, o, lse, causal=causal, method="flash_tc")

    _measure(row, "tf32x3 bwd", "tf32x3 bwd", run, flops, err_of)
    row["tf32x3 bwd err"] = row.pop("tf32x3 bwd rel err")
    theirs = row.get("sdpa efficient fp32 bwd TFLOP/s")
    if theirs:
        row["tf32x3 bwd / efficient"] = row["tf32x3 bwd TFLOP/s"] / theirs


def bench_attention_tc_backward(shapes=ATTENTION_SHAPES + tc_headdim_shapes(),
                                causal_modes=(False, True), log=print):
    """fp16 tensor-core backward (``attention_backward`` on fp16 inputs) against torch SDPA's
    flash and cuDNN backward in fp16, and the 3xTF32 backward (float32 inputs, method
    "flash_tc") against torch's fp32 efficient backward; same process; FLOPs counted as 2.5 ×
    the forward's. Checked first: max |error| of dq, dk, dv on one head against torch's float64
    autograd (the fp32 inputs are the fp16 ones, exactly). d and the padded D as in
    ``bench_attention_tc`` ("tc bwd TFLOP/s at D"); 3xTF32 only at multiples of 8."""
    from .kernels_numba.attention_tc import padded_head_dim

    from .attention_methods import attention as fl_attention
    from .backward_methods import attention_backward as fl_backward
    torch, SDPBackend, sdpa_kernel, sdpa = _torch_sdpa(
        "flashlesson bench attention --tc --backward")
    results = []
    for (b, h, n, d) in shapes:
        t16 = [torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(4)]
        q, k, v, do = (cuda.as_cuda_array(x) for x in t16)
        for causal in causal_modes:
            flops = attention_backward_flops(b, h, n, n, d, causal)
            row = {"B": b, "H": h, "N": n, "d": d, "D": padded_head_dim(d), "causal": causal}
            x64 = [x[:1, :1].double().requires_grad_(True) for x in t16[:3]]
            refs = torch.autograd.grad(sdpa(*x64, is_causal=causal), x64, t16[3][:1, :1].double())
            refs = [r[0, 0].cpu().numpy() for r in refs]
            for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                                  ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                try:
                    with sdpa_kernel(backend):
                        xs = [x.detach().requires_grad_(True) for x in t16[:3]]
                        out = sdpa(*xs, is_causal=causal)
                        ms = time_gpu_adaptive(lambda: torch.autograd.grad(
                            out, xs, t16[3], retain_graph=True))
                        g = torch.autograd.grad(out, xs, t16[3], retain_graph=True)
                    row[f"sdpa {name} bwd TFLOP/s"] = flops / ms / 1e9
                    row[f"sdpa {name} bwd err"] = max(float(np.max(np.abs(
                        gi[0, 0].double().cpu().numpy() - r))) for gi, r in zip(g, refs))
                except RuntimeError as exc:
                    log(f"sdpa {name} backward: {str(exc)[:80]}")
            o, lse = fl_attention(q, k, v, causal=causal, return_lse=True)

            def run():
                return fl_backward(do, q, k, v, o, lse, causal=causal)

            def err_of(grads):
                return max(float(np.max(np.abs(gi[0, 0].copy_to_host().astype(np.float64) - r)))
                           for gi, r in zip(grads, refs))
            _measure(row, "tc bwd", "tc bwd", run, flops, err_of)
            row["tc bwd err"] = row.pop("tc bwd rel err")
            _padded_row(row, "bwd")
            for name in ("flash", "cudnn"):
                theirs = row.get(f"sdpa {name} bwd TFLOP/s")
                if theirs:
                    row[f"tc bwd / {name}"] = row["tc bwd TFLOP/s"] / theirs
            if d % 8 == 0:                      # (3xTF32: multiples of 8)
                _tf32x3_backward_row(row, torch, SDPBackend, sdpa_kernel, sdpa, t16, causal,
                                     flops, refs, err_of, log)
            results.append(row)
            log(" ".join(f"{key}={val:.4g}" if isinstance(val, float) else f"{key}={val}"
                         for key, val in row.items()))
        del t16, q, k, v, do
        torch.cuda.empty_cache()
    return results


# ---------------------------------------------------------------------------------------------
# Host overhead per public call: ``flashlesson bench overhead``
# ---------------------------------------------------------------------------------------------
def host_us_per_call(fn, calls=200, warmup=3, busy_us=None):
    """Host µs per call of ``fn``: after ``warmup`` calls (compiling, building plans), a kernel
    sleeps on the GPU while ``calls`` calls are timed with ``time.perf_counter`` (so the GPU
    never drains the queue and only the host is timed), then one synchronisation. The sleep is
    sized from one timed call (×1.5 ×calls, at least 2 ms)."""

    from .kernels_numba.timing import gpu_sleep
    for _ in range(warmup):
        fn()
    cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    one = time.perf_counter() - t0
    cuda.synchronize()
    sleep = int(busy_us or max(2000, 1.5e6 * calls * one))
    gpu_sleep[1, 1](min(sleep, 2_000_000))
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = time.perf_counter() - t0
    cuda.synchronize()
    return 1e6 * host / calls


def overhead_cases(torch):
    """[(function, flashlesson call, torch's equivalent or None)] on torch CUDA tensors."""
    import flashlesson as fl
    from flashlesson import torch as flt
    f = torch.nn.functional
    dev = "cuda"
    x = torch.randn(64, 1024, device=dev)
    q, k, v = (torch.randn(1, 2, 128, 64, device=dev) for _ in range(3))
    q16, k16, v16 = (t.half() for t in (q, k, v))
    o, lse = fl.attention(q, k, v, return_lse=True)
    o16, lse16 = fl.attention(q16, k16, v16, return_lse=True)
    do, do16 = torch.randn_like(o), torch.randn_like(o16)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    qt, kt, vt = (t.clone().requires_grad_() for t in (q, k, v))

    def fl_step():
        flt.scaled_dot_product_attention(qg, kg, vg).backward(do)

    def torch_step():
        f.scaled_dot_product_attention(qt, kt, vt).backward(do)

    return [
        ("softmax", lambda: fl.softmax(x), lambda: torch.softmax(x, -1)),
        ("attention fp32", lambda: fl.attention(q, k, v),
         lambda: f.scaled_dot_product_attention(q, k, v)),
        ("attention fp16 (flash_tc)", lambda: fl.attention(q16, k16, v16),
         lambda: f.scaled_dot_product_attention(q16, k16, v16)),
        ("attention_backward fp32", lambda: fl.attention_backward(do, q, k, v, o, lse), None),
        ("attention_backward fp16", lambda: fl.attention_backward(do16, q16, k16, v16, o16,
                                                                  lse16), None),
        ("flashlesson.torch forward+backward B1 H2 N128 d64", fl_step, torch_step),
    ]


def bench_overhead(calls=200, log=print):
    """Host µs per call of each public function on torch tensors, beside torch's equivalent
    measured the same way in the same process. Returns records with ``function``, ``host_us``,
    ``torch_host_us`` (None where torch has no single equivalent call) and ``fast_launch``."""
    device.gpu_only("flashlesson bench overhead")
    torch = cuda_torch()
    if torch is None:
        raise RuntimeError("flashlesson bench overhead needs torch with CUDA (the public calls "
                           "are timed on torch tensors, beside torch's own)")
    from . import calls as call_plans
    from . import launch
    records = []
    for name, fn, tfn in overhead_cases(torch):
        us = host_us_per_call(fn, calls)
        tus = host_us_per_call(tfn, calls) if tfn is not None else None
        records.append({"function": name, "host_us": round(us, 2),
                        "torch_host_us": None if tus is None else round(tus, 2),
                        "fast_launch": launch.FAST and launch.fast_state() is None,
                        "call_plans": call_plans.ENABLED,
                        "packed_launch": launch.packed_state()})
        log(f"{name:52s} {us:9.1f} µs" + (f"   torch {tus:8.1f} µs" if tus else ""))
    return records


def script_parser(budget=True):
    """The kernel-only GPU script's options (``scripts/bench_hopper.py``): --json (write the
    rows there), --shapes (indices into the script's SHAPES, e.g. 0,1: ``picked_shapes``) and,
    budget, --budget-s (``budget_cases``); the script adds its own."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    if budget:
        ap.add_argument("--budget-s", type=float, default=150.0, help="stop starting new "
                        "shapes after this many seconds")
    ap.add_argument("--shapes", default=None, help="indices into the script's shapes (its "
                    "SHAPES or CASES), e.g. 0,1")
    return ap


def picked_shapes(shapes, picks):
    """shapes[i] for the comma-separated indices of picks ("0,2"), or all of them (None)."""
    return list(shapes) if picks is None else [shapes[int(i)] for i in picks.split(",")]


def budget_cases(shapes, start, budget_s):
    """The kernel-only GPU script's cases: (b, h, n, d, causal) for each shape, not causal then
    causal; one that would begin more than budget_s seconds after start (time.time()) is
    skipped, and said (the device call's time limit is the budget's reason)."""
    for (b, h, n, d) in shapes:
        for causal in (False, True):
            if time.time() - start > budget_s:
                print(f"budget spent: B{b} H{h} N{n} d{d} causal={causal} skipped", flush=True)
                continue
            yield b, h, n, d, causal


def check_and_time(row, make, measure, flops, limit=None):
    """One method's row of the kernel-only GPU script (``scripts/bench_hopper.py``): fn =
    make(), fn() once, measure(its result) → (max |error| against the float64 reference,
    whether it holds a NaN); the row passes with no NaN and, given a limit (the script: 2 ×
    torch's own error plus slack), an error within it. A passing row is timed kernel-only
    (``time_gpu_adaptive``: "ms", "TFLOP/s" = flops / time); a failing or raising one says why
    (the script goes on). Returns the error (None when make or fn raised)."""
    try:
        fn = make()
        err, nan = measure(fn())
        row["err"] = err
        row["ok"] = not nan and (limit is None or err <= limit)
        if not row["ok"]:
            row["why"] = "NaN in the result" if nan else f"error {err:.2e} > {limit:.2e}"
            return err
        ms = time_gpu_adaptive(fn)
        row.update({"ms": ms, "TFLOP/s": flops / ms / 1e9})
        return err
    except Exception as exc:                    # reported, the next method still runs
        row["ok"] = False
        row["why"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        traceback.print_exc()
        return None


def versus_table(rows, bases=("torch sdpa flash",), width=22):
    """The closing table of the kernel-only script (``scripts/bench_hopper.py``; its rows from
    ``check_and_time``): per row shape, causal, method, ms, TFLOP/s, the ratio to each of
    ``bases`` (the methods of the same shape and causal mode), the error and the check."""
    rate = {(r["shape"], r["causal"], r["method"]): r["TFLOP/s"] for r in rows
            if r.get("TFLOP/s") and r["method"] in bases}
    nan = float("nan")
    head = (f"{'shape':22} {'causal':6} {'method':{width}} {'ms':>8} {'TFLOP/s':>8} "
            + " ".join(f"{'× ' + b.split()[-1]:>8}" for b in bases) + f" {'err':>9}  check")
    lines = [head]
    for r in rows:
        tf = r.get("TFLOP/s")
        ratios = []
        for b in bases:
            base = rate.get((r["shape"], r["causal"], b))
            ratios.append(f"{tf / base if tf and base else nan:8.2f}")
        lines.append(f"{r['shape']:22} {str(r['causal']):6} {r['method']:{width}} "
                     f"{r.get('ms', nan):8.4f} {tf or nan:8.1f} " + " ".join(ratios)
                     + f" {r.get('err', nan):9.2e}  {'ok' if r['ok'] else 'FAIL: ' + r['why']}")
    return lines

