"""§3 — the three passes of a stable softmax, and what they cost in memory traffic.

The lesson's claim: a simple stable softmax walks the row three times —
    pass 1  read x              m = max_i x_i
    pass 2  read x again        l = Σ_i e^{x_i − m}
    pass 3  read x a third time p_i = e^{x_i − m} / l, write p
so x is read three times and e^{x_i − m} computed twice; storing e^{x_i − m} instead would
add a write and a read of an N-vector.

What you will see: the ``three_pass`` method (three kernel launches, ``row_max`` →
``row_sum_exp`` → ``normalize``, m and l handed over through global memory) on fresh random
rows next to the float64 oracles (``softmax_three_pass``, written as the same three loops, and
``softmax_stable``), with m and l per row; then a table of the global-memory traffic per row of
every method of the registry, read from its ``reads`` and ``writes`` (shown as its ``traffic``
text, "3 reads + 1 write") and turned
into bytes by the formula below.

Run: ``python examples/s03_three_pass.py`` (or ``flashlesson section 3``).
"""


import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.tour import Check, check_close, example_rng, lesson_rows, softmax_tiers
from flashlesson.reference import softmax_stable, softmax_three_pass

SECTIONS = (3,)
TOPIC = "three passes"


def row_bytes(method, n, itemsize):
    """Global bytes one row moves: (reads + writes) · N · itemsize, plus the three-pass
    method's hand-over through global memory: m written once and read by passes 2 and 3,
    l written once and read by pass 3, 4 bytes each (20 bytes, whatever N)."""
    r, w = method.reads, method.writes
    extra = (1 + 2 + 1 + 1) * 4 if method.name == "three_pass" else 0
    return (r + w) * n * itemsize + extra


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    # The two tiers: the lesson kernel (kernels_numba/lesson/softmax.py) first, then the
    # fast one (kernels_numba/softmax.py), each against the oracle; timed against each other on a GPU.
    shape = (3, 100) if flashlesson.SIMULATOR else (4096, 3000)
    if verbose:
        print(f"\nlesson tier, then fast tier — method 'three_pass', rows {list(shape)}:")
    checks += softmax_tiers("3", TOPIC, "three_pass", lesson_rows(rng, *shape), verbose)
    rows, n = (3, 100) if flashlesson.SIMULATOR else (256, 3000)
    x = lesson_rows(rng, rows, n)
    y = flashlesson.softmax(x, method="three_pass")
    want3 = softmax_three_pass(x)
    want = softmax_stable(x)
    x64 = x.astype(np.float64)
    m = x64.max(axis=-1)                                     # pass 1
    l = np.exp(x64 - m[:, None]).sum(axis=-1)                # pass 2
    checks.append(check_close("3", TOPIC, "three_pass", y, want3,
                              f"random [{rows}, {n}] vs softmax_three_pass"))
    checks.append(check_close("3", TOPIC, "oracle", want3, want,
                              "the three loops = softmax_stable", rtol=1e-12, atol=1e-15))
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\nthree_pass on random rows [{rows}, {n}] (seed {seed}); first rows shown")
        show = min(rows, 4)
        print(tabulate({"row": range(show), "m (pass 1)": m[:show], "l (pass 2)": l[:show],
                        "max |kernel − three-pass oracle|":
                            np.abs(y[:show] - want3[:show]).max(axis=-1),
                        "max |three-pass − stable oracle|":
                            np.abs(want3[:show] - want[:show]).max(axis=-1)},
                       headers="keys", floatfmt=".4g"))

    # The traffic table: every method of the registry, for this N, in float32 and float16.
    table = []
    ideal32 = 2 * n * 4
    for meth in flashlesson.SOFTMAX_METHODS.values():
        r, w = meth.reads, meth.writes
        b32, b16 = row_bytes(meth, n, 4), row_bytes(meth, n, 2)
        table.append([meth.name, f"§{meth.sections}", meth.traffic, r, w, b32, b16,
                      f"{b32 / ideal32:.2f}×"])
    three = flashlesson.SOFTMAX_METHODS["three_pass"]
    r3 = three.reads
    checks.append(Check("3", TOPIC, "registry", None, r3 == 3,
                        f"three_pass reads x {r3}× per row: {row_bytes(three, n, 4)} B "
                        f"vs {ideal32} B ideal at N = {n} fp32"))
    if verbose:
        print(f"\nglobal traffic per row, N = {n}: bytes = (reads + writes) · N · itemsize "
              "(+ 20 B for three_pass's m and l)")
        print(tabulate(table, headers=["method", "§", "traffic (registry)", "reads", "writes",
                                       "bytes fp32", "bytes fp16", "vs 1 read + 1 write"]))
        print("Storing e^{x−m} between passes 2 and 3 would trade the third read of x for a "
              f"write and a read of the exponentials: 5 · N · 4 = {5 * n * 4} B per fp32 row.")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
