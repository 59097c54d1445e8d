"""§4 — softmax is bound by memory, not by arithmetic.

The lesson's claim: a float32 row of N elements needs at least 4N bytes read and 4N bytes
written (more if x is read again), while each element costs only a handful of operations
(a compare, a subtract, an exp, an add, a multiply by 1/l). So its arithmetic intensity
(FLOP per byte) is far below the H200's ridge point, 67 TFLOP/s ÷ 4.8 TB/s ≈ 14 FLOP/byte:
the time is set by HBM bandwidth.

What you will see: the bytes per fp32 row for a few N (ideal, and with x read three times),
the FLOP count per element and the arithmetic intensity next to the ridge point, the time
each limit predicts for a 2^26-element tensor, and ``auto`` checked against the oracle. On a
GPU, ``auto`` is then timed on that tensor (``flashlesson.bench.time_gpu``) and reported in
GB/s next to a device-to-device copy (the ceiling) and ``torch.softmax`` (if torch is
installed). In the simulator the timing is skipped: it would measure Python, not memory.

Run: ``python examples/s04_memory_bound.py`` (or ``flashlesson section 4``).
"""

import datetime

from tabulate import tabulate

import flashlesson
from flashlesson.bench import softmax_bytes, time_gpu
from flashlesson.tour import Check, check_close, example_rng, lesson_rows
from flashlesson.reference import softmax_stable

SECTIONS = (4,)
TOPIC = "memory-bound"

# H200 datasheet ceilings (SXM): FP32 on CUDA cores, HBM3e bandwidth.
PEAK_FP32_FLOPS = 67e12
PEAK_HBM_BYTES = 4.8e12
RIDGE = PEAK_FP32_FLOPS / PEAK_HBM_BYTES         # FLOP/byte where the two limits meet: ≈ 14

# Operations per element of a one-read softmax (the fast kernels of §8–§11):
#   max: 1 compare;  e^{x − m}: 1 subtract + 1 exp;  l: 1 add;  p = e · (1/l): 1 multiply.
# The exp is counted as one operation (on the GPU __expf is a multiply and an ex2.approx on the
# special-function unit); the one reciprocal per row is left out.
FLOPS_PER_ELEMENT = 5
ELEMENTS = 2 ** 26                               # 256 MB in fp32: 5× the H200's 50 MB L2


def intensity(itemsize, reads=1, writes=1, flops=FLOPS_PER_ELEMENT):
    """FLOP per byte of global traffic: flops / ((reads + writes) · itemsize)."""
    return flops / ((reads + writes) * itemsize)


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    if verbose:
        print(__doc__.split("\n\n")[1])
        table = [[n, 4 * n, 4 * n, 8 * n, 3 * 4 * n + 4 * n] for n in (32, 1024, 4096, 32768)]
        print("\nbytes per fp32 row: ≥ 4N read + 4N written; 16N if x is read three times (§3)")
        print(tabulate(table, headers=["N", "read (4N)", "written (4N)", "ideal total (8N)",
                                       "three reads + write (16N)"]))

    # three reads (§3) also compute x − m and e^{x−m} twice: 2 more operations per element
    ai32, ai32_3 = intensity(4), intensity(4, reads=3, flops=FLOPS_PER_ELEMENT + 2)
    ai16 = intensity(2)
    t_mem = softmax_bytes(1, ELEMENTS, 4) / PEAK_HBM_BYTES
    t_flop = FLOPS_PER_ELEMENT * ELEMENTS / PEAK_FP32_FLOPS
    if verbose:
        print(f"\narithmetic intensity = {FLOPS_PER_ELEMENT} FLOP per element / bytes per element")
        print(tabulate([["fp32, 1 read + 1 write", f"{FLOPS_PER_ELEMENT} / 8", ai32],
                        ["fp32, 3 reads + 1 write", f"{FLOPS_PER_ELEMENT + 2} / 16", ai32_3],
                        ["fp16, 1 read + 1 write", f"{FLOPS_PER_ELEMENT} / 4", ai16],
                        ["H200 ridge point", "67e12 / 4.8e12", RIDGE]],
                       headers=["case", "FLOP / byte", "value"], floatfmt=".3g"))
        print(f"\n2^26 fp32 elements: memory limit {t_mem * 1e3:.3f} ms "
              f"({softmax_bytes(1, ELEMENTS, 4) / 1e6:.0f} MB at 4.8 TB/s), arithmetic limit "
              f"{t_flop * 1e3:.4f} ms ({FLOPS_PER_ELEMENT}·2^26 FLOP at 67 TFLOP/s): memory "
              f"takes {t_mem / t_flop:.0f}× longer")
    checks.append(Check("4", TOPIC, "formula", None, max(ai32, ai32_3, ai16) < RIDGE / 10,
                        f"intensity {ai32:.3g} FLOP/B (fp32) ≪ ridge {RIDGE:.3g} FLOP/B"))

    # The kernel `auto` runs, checked before anything is timed.
    rows, n = (2, 1024) if flashlesson.SIMULATOR else (ELEMENTS // 1024, 1024)
    x = lesson_rows(rng, rows, n)
    check_rows = slice(0, min(rows, 64))
    if flashlesson.SIMULATOR:
        y = flashlesson.softmax(x)
        checks.append(check_close("4", TOPIC, f"auto→{flashlesson.choose_softmax(n)}",
                                  y, softmax_stable(x), f"[{rows}, {n}] (seed {seed})"))
        if verbose:
            print(f"\nauto on [{rows}, {n}]: max |error| {checks[-1].max_err:.2e}. Timing "
                  "skipped: the simulator runs each CUDA thread as a Python thread, so a time "
                  "here would measure Python, not memory.")
        return checks
    checks.append(_timed(x, check_rows, verbose))
    return checks


def _timed(x, check_rows, verbose):
    """GPU only: check `auto` on the big tensor, then time it, a copy and torch.softmax."""
    from numba import cuda

    rows, n = x.shape
    nbytes = softmax_bytes(rows, n, x.itemsize)
    xd = cuda.to_device(x)
    yd = cuda.device_array_like(xd)
    flashlesson.softmax(xd, out=yd)
    got = yd[check_rows].copy_to_host()
    c = check_close("4", TOPIC, f"auto→{flashlesson.choose_softmax(n)}", got,
                    softmax_stable(x[check_rows]), "")
    ms = time_gpu(lambda: flashlesson.softmax(xd, out=yd))
    copy_ms = time_gpu(lambda: yd.copy_to_device(xd))
    results = [["auto (" + flashlesson.choose_softmax(n) + ")", ms, nbytes / ms / 1e6],
               ["device-to-device copy (ceiling)", copy_ms, nbytes / copy_ms / 1e6]]
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        tx = torch.as_tensor(xd, device="cuda")
        ty = torch.empty_like(tx)
        t_ms = time_gpu(lambda: torch.softmax(tx, dim=-1, out=ty))
        results.append(["torch.softmax", t_ms, nbytes / t_ms / 1e6])
    gbs = nbytes / ms / 1e6
    tflops = FLOPS_PER_ELEMENT * rows * n / ms / 1e9
    c.note = (f"[{rows}, {n}] fp32: {gbs:.0f} GB/s = {100 * copy_ms / ms:.0f}% of "
              f"copy, {tflops:.2f} TFLOP/s = {100 * tflops * 1e12 / PEAK_FP32_FLOPS:.1f}% of peak")
    if verbose:
        dev = flashlesson.device.describe()["device"]
        print(f"\n{dev}, {datetime.date.today()}: [{rows}, {n}] fp32, bytes = 1 read + 1 write "
              f"= {nbytes / 1e6:.0f} MB; CUDA-event medians")
        print(tabulate(results, headers=["what", "ms", "GB/s"], floatfmt=".4g"))
        print(f"auto reaches {100 * copy_ms / ms:.0f}% of the copy's bandwidth but only "
              f"{tflops:.2f} TFLOP/s, {100 * tflops * 1e12 / PEAK_FP32_FLOPS:.1f}% of the FP32 "
              "peak: the arithmetic units mostly wait for memory.")
    return c


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
