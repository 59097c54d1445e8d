"""§28–29 — compute still grows as N², extra memory only as N.

The lesson's claims. §28: FlashAttention's arithmetic is still O(N²d): it does not make
attention linear, so when N doubles the work — and, on a GPU busy with it, the time — grows
about 4×. §29: the naive forward keeps S and P, O(N²) extra memory; FlashAttention keeps only
Q, K, V, O and a row statistic (the max or the LSE), so the extra memory is O(N).

What you will see: the model first — ``reference.attention_flops`` (4·B·H·N²·d) and the tile
steps of the pseudocode (``reference.flash_attention_tiled`` stats) growing 4× per doubling,
and the extra memory of each path (S and P: 2·B·H·N² floats; LSE: B·H·N floats) growing 4×
and 2× — with the kernel checked on a small case. On a GPU the example then measures it:
``flashlesson.attention`` timed with ``time_gpu`` (CUDA events) for N = 1024 … 8192, the ratio
of successive times (≈ 4) and the TFLOP/s from the FLOP formula; and the device memory each
method holds at its peak (what this process allocates, frees deferred), whose growth per doubling
is ≈ 4× for naive and ≈ 2× for flash. In the simulator the measurements are skipped: a time
there measures Python, and there is no device memory.

Run: ``python examples/s28_s29_time_and_memory.py`` (or
``flashlesson section 28``).
"""

import datetime
import math

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.configs import default_config
from flashlesson.tolerance import attention_tol
from flashlesson.tour import Check, check_close, example_rng
from flashlesson.reference import attention, attention_flops, flash_attention_tiled

SECTIONS = (28, 29)
TOPIC = "time ∝ N², memory ∝ N"
FP32 = 4
MiB = 2 ** 20
B, H, D = 1, 32, 64                      # the GPU measurement's batch, heads, head dimension
NS = (1024, 2048, 4096, 8192)


def extra_bytes(method, b, h, n, d):
    """§29: memory a forward pass keeps beyond Q, K, V and O (float32): naive S and P
    [B,H,N,N]; flash one LSE per row [B,H,N]."""
    return 2 * b * h * n * n * FP32 if method == "naive" else b * h * n * FP32


def main(verbose=True):
    rng, seed = example_rng()
    checks = []

    # The model: FLOPs and tile steps ∝ N², extra memory ∝ N² (naive) or N (flash).
    br, bc = default_config(D).Br, default_config(D).Bc
    rows, flops, steps, naive_mem, flash_mem = [], [], [], [], []
    # tile steps per head: ceil(N/Br)·ceil(N/Bc), as the pseudocode counts them (checked below
    # on a small N that is not a multiple of the tile)
    tile_steps = lambda n: (-(-n // br)) * (-(-n // bc))                # noqa: E731
    stats, n_small = {}, 4 * max(br, bc) + 3
    z = np.zeros((n_small, 1))
    flash_attention_tiled(z, z, z, br, bc, stats=stats)
    for n in NS:
        flops.append(attention_flops(B, H, n, n, D))
        steps.append(tile_steps(n))
        naive_mem.append(extra_bytes("naive", B, H, n, D))
        flash_mem.append(extra_bytes("flash", B, H, n, D))
        rows.append([n, f"{flops[-1]:.3g}", f"{steps[-1]:,}", f"{naive_mem[-1] / MiB:,.0f}",
                     f"{flash_mem[-1] / MiB:.3f}"])
    ratio = lambda xs: [b / a for a, b in zip(xs, xs[1:])]              # noqa: E731
    ok = all(r == 4 for r in ratio(flops) + ratio(steps) + ratio(naive_mem)) and \
        all(r == 2 for r in ratio(flash_mem)) and stats["computed"] == tile_steps(n_small)
    checks.append(Check("28–29", TOPIC, "formula", None, ok,
                        f"per doubling of N: FLOPs ×4, tile steps ×4 (Br = {br}, Bc = {bc}); extra "
                        "memory naive ×4, flash ×2"))
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\nthe model, B = {B}, H = {H}, d = {D}, float32 (tile steps per head, "
              f"Br = {br}, Bc = {bc}; extra memory: beyond Q, K, V, O)")
        print(tabulate(rows, headers=["N", "FLOPs 4·B·H·N²·d", "tile steps", "naive extra MiB "
                                      "(S, P)", "flash extra MiB (LSE)"], disable_numparse=True))

    # The kernel whose time and memory are measured, checked on a small case first.
    n, d = (32, 16) if flashlesson.SIMULATOR else (1024, D)
    q, k, v = (rng.standard_normal((1, 2, n, d)).astype(np.float32) for _ in range(3))
    want_o, want_lse = attention(q, k, v)
    o, lse = flashlesson.attention(q, k, v, return_lse=True)
    checks.append(check_close("28–29", TOPIC, "flash", o, want_o, f"[1, 2, {n}, {d}]: O",
                              atol=attention_tol(q, k, v).o))
    checks.append(check_close("28–29", TOPIC, "flash", lse, want_lse, f"[1, 2, {n}, {d}]: LSE"))

    if flashlesson.SIMULATOR:
        if verbose:
            print(f"\nmeasured time and memory: skipped — they need a GPU (the simulator runs "
                  f"every CUDA thread as a Python thread and has no device memory). On a GPU "
                  f"this example times flash for N = {', '.join(map(str, NS))} and measures the "
                  f"memory both methods hold. (random inputs: seed {seed})")
        return checks
    checks += _measured(rng, verbose)
    return checks


# ---------------------------------------------------------------------------------------------
# GPU only
# ---------------------------------------------------------------------------------------------
# held_bytes(fn): device memory taken by fn() at its peak — this process's allocations across the call,
# frees deferred, outputs kept alive (flashlesson.bench.device_bytes_held, shared with the bench)
from flashlesson.bench import device_bytes_held as held_bytes  # noqa: E402
from flashlesson.bench import flush_frees  # noqa: E402


def _measured(rng, verbose):
    from numba import cuda

    from flashlesson.bench import time_gpu
    checks, table = [], []
    times, mem = [], {"naive": [], "flash": []}
    for n in NS:
        q, k, v = (cuda.to_device(rng.standard_normal((B, H, n, D)).astype(np.float32))
                   for _ in range(3))

        def flash():
            return flashlesson.attention(q, k, v, method="flash", return_lse=True)

        def naive():
            return flashlesson.attention(q, k, v, method="naive", return_lse=True)

        # frees deferred while timing: a cuMemFree would wait for the GPU mid-measurement
        with cuda.defer_cleanup():
            ms = time_gpu(flash, samples=5, inner=3)
        flush_frees(cuda.current_context())
        times.append(ms)
        for name, fn in (("naive", naive), ("flash", flash)):
            held_bytes(fn)                                  # warm-up (compile, local memory)
            mem[name].append(held_bytes(fn))
        tflops = attention_flops(B, H, n, n, D) / ms / 1e9
        table.append([n, f"{ms:.3f}", f"{times[-1] / times[-2]:.2f}" if len(times) > 1 else "",
                      f"{tflops:.1f}", f"{mem['naive'][-1] / MiB:,.0f}",
                      f"{mem['flash'][-1] / MiB:,.1f}"])
        del q, k, v
    t_ratio = times[-1] / times[-2]
    checks.append(Check.measured("28", TOPIC, "flash",   # (a shared GPU's timing: measured)
                                 f"B={B} H={H} d={D}: time ×{t_ratio:.2f} from N = {NS[-2]} to "
                                 f"{NS[-1]} (×4 expected); {times[-1]:.2f} ms at N = {NS[-1]}"))
    grow = {m: math.log2(mem[m][-1] / mem[m][-2]) for m in mem}
    checks.append(Check("29", TOPIC, "naive", None, abs(grow["naive"] - 2) < 0.2,
                        f"memory held ∝ N^{grow['naive']:.2f} ({mem['naive'][-1] / MiB:,.0f} MiB "
                        f"at N = {NS[-1]}): S and P"))
    checks.append(Check("29", TOPIC, "flash", None, abs(grow["flash"] - 1) < 0.2,
                        f"memory held ∝ N^{grow['flash']:.2f} ({mem['flash'][-1] / MiB:,.1f} MiB "
                        f"at N = {NS[-1]}): O and LSE only"))
    if verbose:
        dev = flashlesson.device.describe()["device"]
        print(f"\n{dev}, {datetime.date.today()}: B={B} H={H} d={D} float32; flash timed with "
              "CUDA events (median); memory = device bytes this process holds at the peak of one call")
        print(tabulate(table, headers=["N", "flash ms", "× previous", "TFLOP/s (4·B·H·N²·d)",
                                       "naive MiB held", "flash MiB held"],
                       disable_numparse=True))
        print("the time grows like the FLOPs (N²); the memory held by naive like N² (S and P), "
              "by flash like N (its outputs).")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
