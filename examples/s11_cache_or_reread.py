"""§11 — keep the row on chip, or read it again.

The lesson's claim: after the max is known, every x_i is needed again for e^{x_i − m}. A short
row can stay in registers (one global read, then max, sum and write from registers); a row
too long for that must be re-read from global memory, kept in shared memory, split in tiles,
or handled by online softmax (§18–20).

The four options, all one block per row, as methods of the registry:
    block         the row in registers (K values per thread)      1 read  + 1 write
    block_smem    the row in shared memory (N·4 bytes ≤ 48 KB)    1 read  + 1 write
    block_reread  nothing kept: x read in each of 3 passes        3 reads + 1 write
    online        (m, l) streamed in one pass, then normalize     2 reads + 1 write

What you will see: all four on the same random rows, against the oracle; the global bytes each
moves per row, from the formula (reads + writes) · N · itemsize; a row longer than registers
and shared memory can hold (N = 40000), which ``block`` and ``block_smem`` refuse and
``block_reread`` and ``online`` take. On a GPU, each is then timed (``time_gpu``) on a
2^26-element tensor and reported in GB/s; in the simulator the timing is skipped.

Run: ``python examples/s11_cache_or_reread.py`` (or ``flashlesson section 11``).
"""


import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.tour import Check, check_close, example_rng, lesson_rows, softmax_tiers
from flashlesson.reference import softmax_stable

SECTIONS = (11,)
TOPIC = "cache or re-read"
METHODS = ("block", "block_smem", "block_reread", "online")
LONG_N = 40000                                  # > block's 32·1024 and > shared memory's 12256
ELEMENTS = 2 ** 26


def row_bytes(method, n, itemsize=4):
    """Global bytes per row: (reads + writes) · N · itemsize."""
    r, w = method.reads, method.writes
    return (r + w) * n * itemsize


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    # The two tiers: the lesson kernel (kernels_numba/lesson/softmax.py) first, then the
    # fast one (kernels_numba/softmax.py), each against the oracle; timed against each other on a GPU.
    shape = (3, 300) if flashlesson.SIMULATOR else (4096, 4000)
    if verbose:
        print(f"\nlesson tier, then fast tier — §11's three variants, rows {list(shape)}:")
    for meth in ("block", "block_smem", "block_reread"):      # registers, shared memory, re-read
        checks += softmax_tiers("11", TOPIC, meth, lesson_rows(rng, *shape), verbose)
    reg = flashlesson.SOFTMAX_METHODS
    rows, n = (2, 1000) if flashlesson.SIMULATOR else (256, 4000)
    x = lesson_rows(rng, rows, n)
    want = softmax_stable(x)
    table = []
    for name in METHODS:
        y = flashlesson.softmax(x, method=name)
        c = check_close("11", TOPIC, name, y, want, f"[{rows}, {n}]")
        checks.append(c)
        table.append([name, f"§{reg[name].sections}", reg[name].traffic, row_bytes(reg[name], n),
                      f"{row_bytes(reg[name], n) / (2 * 4 * n):.1f}×",
                      "any" if reg[name].max_n is None else reg[name].max_n, c.max_err])
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\nthe same rows [{rows}, {n}] fp32 (seed {seed}) through each method; "
              "bytes per row = (reads + writes) · N · 4")
        print(tabulate(table, headers=["method", "§", "traffic", "bytes per row", "vs ideal",
                                       "largest N", "max |error|"], floatfmt=".2e"))

    # A row that fits neither registers nor shared memory.
    x_long = lesson_rows(rng, 1, LONG_N)
    want_long = softmax_stable(x_long)
    long_rows = []
    for name in METHODS:
        try:
            y = flashlesson.softmax(x_long, method=name)
        except ValueError as exc:                        # the registry's own limit, by name
            refused = reg[name].max_n is not None and LONG_N > reg[name].max_n
            checks.append(Check("11", TOPIC, name, None, refused,
                                f"N = {LONG_N} refused: {exc}"))
            long_rows.append([name, "refused", str(exc)])
            continue
        c = check_close("11", TOPIC, name, y, want_long, f"[1, {LONG_N}]: a long row")
        checks.append(c)
        long_rows.append([name, f"{c.max_err:.2e}", f"{row_bytes(reg[name], LONG_N)} B per row"])
    if verbose:
        print(f"\na long row, N = {LONG_N}:")
        print(tabulate(long_rows, headers=["method", "max |error|", "bytes / why not"]))

    if flashlesson.SIMULATOR:
        if verbose:
            print("\ntiming skipped: in the simulator every CUDA thread is a Python thread, so a "
                  "time would measure Python, not memory traffic. On a GPU this example times "
                  f"each method on {ELEMENTS:,} elements.")
        return checks
    checks += _timed(rng, verbose)
    return checks


def _timed(rng, verbose):
    """GPU only: time each method on a 2^26-element tensor; GB/s from the traffic formula."""
    import datetime

    from numba import cuda

    from flashlesson.bench import softmax_bytes, time_gpu
    from flashlesson.kernels_numba import softmax as K
    from flashlesson.softmax_methods import block_shape

    reg = flashlesson.SOFTMAX_METHODS
    checks, table = [], []
    for n in (4096, 65536):
        rows = ELEMENTS // n
        x = lesson_rows(rng, rows, n)
        xd = cuda.to_device(x)
        yd = cuda.device_array_like(xd)
        ideal = softmax_bytes(rows, n, 4)
        for name in METHODS:
            meth = reg[name]
            if meth.max_n is not None and n > meth.max_n:
                continue
            yd[:] = np.nan                                  # poison: unwritten rows fail
            flashlesson.softmax(xd, method=name, out=yd)
            got = yd[:16].copy_to_host()
            c = check_close("11", TOPIC, name, got, softmax_stable(x[:16]), f"timed [{rows}, {n}]")
            ms = time_gpu(lambda: flashlesson.softmax(xd, method=name, out=yd))
            moved = rows * row_bytes(meth, n)
            c.note += f": {ms:.3f} ms, {ideal / ms / 1e6:.0f} GB/s (1 read + 1 write)"
            checks.append(c)
            table.append([n, name, meth.traffic, ms, ideal / ms / 1e6, moved / ms / 1e6])
    if verbose:
        dev = flashlesson.device.describe()["device"]
        print(f"\n{dev}, {datetime.date.today()}: {ELEMENTS:,} fp32 elements per tensor; "
              "CUDA-event medians. 'GB/s ideal' counts 1 read + 1 write; 'GB/s moved' counts "
              "the method's own reads (re-reads may hit in L2)")
        print(tabulate(table, headers=["N", "method", "traffic", "ms", "GB/s ideal",
                                       "GB/s moved"], floatfmt=".4g"))
    # The register cache, from the compiled kernel: any local memory would mean the K values
    # per thread spilled out of registers (to memory that is cached, but not on chip for sure).
    k, t = block_shape(4096, np.float32)
    kern = K.block_kernel(k, t)
    regs = _only(kern.get_regs_per_thread())
    local = _only(kern.get_local_mem_per_thread())
    checks.append(Check("11", TOPIC, "block", None, local == 0,
                        f"block_kernel({k}, {t}): {regs} registers, {local} B local memory "
                        "per thread: the row stays in registers"))
    if verbose:
        print(f"block_kernel({k}, {t}) at N = 4096: {regs} registers and {local} B local memory "
              "per thread" + (" (the row stayed in registers)" if local == 0 else " (SPILLED)"))
    return checks


def _only(per_signature):
    """The one value of a {signature: value} dict Numba returns for a compiled kernel."""
    values = set(per_signature.values()) if isinstance(per_signature, dict) else {per_signature}
    if len(values) != 1:
        raise ValueError(f"expected one compiled signature, got {per_signature}")
    return values.pop()


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
