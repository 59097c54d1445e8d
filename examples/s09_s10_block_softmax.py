"""§9–10 — block softmax for long rows, and its two-level reduction.

The lesson's claims.
§9:  when a row is too long for one warp (too many values per thread, too little parallelism
     to hide latency), give it a whole block: e.g. 256 threads for a row of 4096 elements,
     each thread handling 4096 / 256 = 16 of them.
§10: the block max is found in two levels — each thread's local max m_t; a warp shuffle
     reduces each warp's 32 values; lane 0 of each warp writes its warp's partial to shared
     memory; after a barrier the first warp reduces the partials. The sum is reduced the same
     way: thread sums → warp sums → shared memory → the row's sum.

What you will see: the ``block`` method (``block_kernel(K, T)``, thread t holding x_t,
x_{t+T}, … in registers) on the lesson's shape — 256 threads × 16 values, N = 4096 — on a GPU,
and on 64 threads × 16 values, N = 1024, in the simulator (every simulated thread is a Python
thread); the two-level reduction of one row in NumPy (thread-local values, one partial per
warp, the final value); and the kernel against the oracle on that shape and on an N that is
not a multiple of the block size.

Run: ``python examples/s09_s10_block_softmax.py`` (or ``flashlesson section 9``).
"""

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.softmax_methods import block_shape
from flashlesson.tour import Check, check_close, example_rng, lesson_rows, softmax_tiers
from flashlesson.reference import softmax_stable

SECTIONS = (9, 10)
TOPIC = "block softmax"
WARP = 32
VALUES_PER_THREAD = 16                          # the lesson's 4096 / 256


def two_level(x_row, threads, per_thread):
    """§10 in NumPy, for one row on a block of ``threads`` threads.

    Thread t holds x[t + k·T] for k < K (−inf past N): the columns of x reshaped to [K, T].
    Returns (thread-local max m_t [T], per-warp max [T/32], row max, thread-local sum [T],
    per-warp sum [T/32], row sum), the sums taken with the row max subtracted.
    """
    n = len(x_row)
    v = np.full(threads * per_thread, -np.inf)
    v[:n] = x_row
    v = v.reshape(per_thread, threads)             # v[k, t] = x[t + k·T]
    m_t = v.max(axis=0)                            # level 0: each thread's local max
    m_w = m_t.reshape(-1, WARP).max(axis=1)        # level 1: a warp shuffle per warp
    m = m_w.max()                                  # level 2: warp 0 reduces the partials
    e = np.exp(v - m)                              # e^{x − m}, 0 past N
    l_t = e.sum(axis=0)
    l_w = l_t.reshape(-1, WARP).sum(axis=1)
    return m_t, m_w, m, l_t, l_w, l_w.sum()


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    # The two tiers: the lesson kernel (kernels_numba/lesson/softmax.py) first, then the
    # fast one (kernels_numba/softmax.py), each against the oracle; timed against each other on a GPU.
    shape = (3, 300) if flashlesson.SIMULATOR else (4096, 8000)
    if verbose:
        print(f"\nlesson tier, then fast tier — method 'block', rows {list(shape)}:")
    checks += softmax_tiers("9–10", TOPIC, "block", lesson_rows(rng, *shape), verbose)
    threads = 64 if flashlesson.SIMULATOR else 256
    n = threads * VALUES_PER_THREAD
    k, t = block_shape(n, np.float32, threads)
    checks.append(Check("9", TOPIC, "block_shape", None, (k, t) == (VALUES_PER_THREAD, threads),
                        f"N = {n} on {threads} threads → K = {k} values per thread"))
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\n§9: N = {n}, T = {t} threads, K = {k} values per thread (the lesson: 256 × 16 "
              f"= 4096{'; the simulator runs a smaller block' if flashlesson.SIMULATOR else ''})")
        print(tabulate([[f"thread {i}", ", ".join(str(i + j * t) for j in range(3)) +
                         f", …, {i + (k - 1) * t}"] for i in (0, 1, t - 1)],
                       headers=["thread", "indices it holds (stride T, coalesced)"]))

    # §10 on one row, in NumPy, then the kernel.
    x = lesson_rows(rng, 2 if flashlesson.SIMULATOR else 256, n)
    x_row = x[1].astype(np.float64)
    m_t, m_w, m, l_t, l_w, l = two_level(x_row, t, k)
    ok = bool(m == x_row.max() and np.isclose(l, np.exp(x_row - x_row.max()).sum(), rtol=1e-12))
    checks.append(Check("10", TOPIC, "numpy", None, ok,
                        f"thread → {len(m_w)} warp partials → row: max and Σ as one pass gives"))
    if verbose:
        print(f"\n§10 on row 1 (seed {seed}): {t} thread-local values → {len(m_w)} warp "
              "partials in shared memory → the row's value")
        print(tabulate([[f"warp {w}", f"{w * WARP}–{w * WARP + WARP - 1}", m_w[w], l_w[w]]
                        for w in range(len(m_w))] + [["row (warp 0 reduces)", "", m, l]],
                       headers=["level", "threads", "max", "Σ e^{x−m}"], floatfmt=".6g"))
        print("  first threads' local values: m_t = "
              + ", ".join(f"{v:.3g}" for v in m_t[:4]) + ", …;  Σ_t = "
              + ", ".join(f"{v:.3g}" for v in l_t[:4]) + ", …")
        print("  (the kernel's block_max/block_sum let every warp reduce the partials, not only "
              "warp 0: the same value everywhere, one barrier fewer; see reductions.py)")

    y = flashlesson.softmax(x, method="block", threads=threads)
    checks.append(check_close("9", TOPIC, "block", y, softmax_stable(x),
                              f"[{x.shape[0]}, {n}], {threads} threads × {k}"))
    # An N that is not a multiple of T: the last values of some threads are −inf padding.
    n2 = n - 37
    x2 = lesson_rows(rng, x.shape[0], n2)
    y2 = flashlesson.softmax(x2, method="block", threads=threads)
    checks.append(check_close("9", TOPIC, "block", y2, softmax_stable(x2),
                              f"[{x2.shape[0]}, {n2}], {threads} threads, padded"))
    if verbose:
        print("\nblock vs oracle (row 0 near 1000):")
        print(tabulate([[f"[{x.shape[0]}, {n}]", checks[-2].max_err, checks[-2].passed],
                        [f"[{x2.shape[0]}, {n2}]", checks[-1].max_err, checks[-1].passed]],
                       headers=["shape", "max |error|", "pass"], floatfmt=".2e"))
        if not flashlesson.SIMULATOR:
            from flashlesson.kernels_numba import softmax as K
            smem = K.block_kernel(k, t).get_shared_mem_per_block()     # {signature: bytes}
            smem = ", ".join(map(str, sorted(set(smem.values())))) if isinstance(smem, dict) \
                else smem
            print(f"compiled block_kernel({k}, {t}): static shared memory {smem} B "
                  "(the 32 warp partials of §10)")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
