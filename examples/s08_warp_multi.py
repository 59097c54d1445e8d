"""§8 — a warp per row when N > 32: each lane holds several elements, in registers.

The lesson's claim: with N = 128 and 32 lanes, lane 0 handles elements 0, 32, 64, 96, lane 1
handles 1, 33, 65, 97, …; each lane first takes the max of its own elements in registers,
m_t = max(x_t, x_{t+32}, x_{t+64}, x_{t+96}), then the warp reduces the 32 local maxima; the
sum likewise. Still one warp per row, at the price of more registers per thread.

The ``warp_multi`` method generalizes the layout with launch-time constants (K, R, G): a row
gets G lanes (G = 32 is the lesson's layout; for short rows G = 8 or 16 and the warp holds
32/G rows side by side), lane t of the group holds x_t, x_{t+G}, …, K values in all, and a
warp does R rounds of rows. ``warp_multi_shape(N, dtype)`` picks them.

What you will see: which lane holds which indices, for the lesson's N = 128 in the lesson's
layout and in the one the launcher picks; the local maxima m_t and the warp's max; the
(K, R, G) the launcher picks for several N; and ``warp_multi`` against the oracle for
N = 33, 100, 128, 1000 (row counts that leave the last warp partly empty).

Run: ``python examples/s08_warp_multi.py`` (or ``flashlesson section 8``).
"""

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.softmax_methods import warp_multi_shape
from flashlesson.tour import Check, check_close, example_rng, lesson_rows, softmax_tiers
from flashlesson.reference import softmax_stable

SECTIONS = (8,)
TOPIC = "warp, N > 32"
WARP = 32


def lane_indices(n, k, g):
    """{lane t of a G-lane group: [t, t+G, …] below N} — the kernel's j = t + k·G for k < K."""
    return {t: [t + i * g for i in range(k) if t + i * g < n] for t in range(g)}


def show_layout(n, k, g, title, x_row=None):
    idx = lane_indices(n, k, g)
    shown = [0, 1, 2, g - 1]
    rows = []
    for t in shown:
        cols = [f"lane {t}", ", ".join(map(str, idx[t]))]
        if x_row is not None:
            cols.append(f"{max(x_row[j] for j in idx[t]):.4g}")  # m_t: max of this lane's values
        rows.append(cols)
    rows.insert(3, ["…", "…"] + (["…"] if x_row is not None else []))
    headers = ["lane", "indices it holds"] + (["m_t (local max)"] if x_row is not None else [])
    print(f"\n{title}")
    print(tabulate(rows, headers=headers, floatfmt=".4g"))
    if g < WARP:
        print(f"lanes {g}–{WARP - 1} of the warp hold the next {WARP // g - 1} row(s) the same way")


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    if verbose:
        print(__doc__.split("\n\n")[1])
    # The two tiers: the lesson kernel (kernels_numba/lesson/softmax.py) first, then the
    # fast one (kernels_numba/softmax.py), each against the oracle; timed against each other on a GPU.
    shape = (3, 100) if flashlesson.SIMULATOR else (4096, 1000)
    if verbose:
        print(f"\nlesson tier, then fast tier — method 'warp_multi', rows {list(shape)}:")
    checks += softmax_tiers("8", TOPIC, "warp_multi", lesson_rows(rng, *shape), verbose)

    # The lesson's example, N = 128, in its own layout (G = 32, K = 4).
    n = 128
    x_row = lesson_rows(rng, 1, n)[0] - 1000.0
    idx = lane_indices(n, 4, 32)
    m_t = np.array([max(x_row[j] for j in idx[t]) for t in range(32)])
    flat = sorted(j for js in idx.values() for j in js)
    checks.append(Check("8", TOPIC, "numpy", None,
                        flat == list(range(n)) and m_t.max() == x_row.max(),
                        "lane t holds t, t+32, t+64, t+96: each index once; max of m_t = max x"))
    k, r, g = warp_multi_shape(n, np.float32)
    idx_k = lane_indices(n, k, g)
    flat_k = sorted(j for js in idx_k.values() for j in js)
    checks.append(Check("8", TOPIC, "numpy", None, flat_k == list(range(n)),
                        f"launcher's layout for N = {n} (K={k}, G={g}) covers each index once"))
    if verbose:
        show_layout(n, 4, 32, f"the lesson's layout, N = {n}: G = 32 lanes, K = 4 values each "
                    f"(seed {seed})", x_row)
        print(f"warp max of the 32 m_t = {m_t.max():.4g} = max x")
        show_layout(n, k, g, f"the launcher's layout, N = {n}: warp_multi_shape → "
                    f"K={k}, R={r}, G={g}")

        shapes = []
        for nn in (33, 64, 100, 128, 256, 1000, 1024):
            kk, rr, gg = warp_multi_shape(nn, np.float32)
            shapes.append([nn, kk, rr, gg, WARP // gg * rr, kk, "the lesson's" if gg == 32 else ""])
        print("\n(K, R, G) from warp_multi_shape (fp32"
              + (", simulator: R = 1" if flashlesson.SIMULATOR else "") + ")")
        print(tabulate(shapes, headers=["N", "K", "R", "G", "rows per warp",
                                        "values per lane (registers)", "layout"]))

    table = []
    for n in (33, 100, 128, 1000):
        k, r, g = warp_multi_shape(n, np.float32)
        per_warp = WARP // g * r
        # rows: more than one block's worth, and not a multiple of a warp's rows
        rows = (2 * per_warp + 1) if flashlesson.SIMULATOR else 1000
        x = lesson_rows(rng, rows, n)
        y = flashlesson.softmax(x, method="warp_multi")
        c = check_close("8", TOPIC, "warp_multi", y, softmax_stable(x),
                        f"[{rows}, {n}], K={k} R={r} G={g}")
        checks.append(c)
        table.append([n, f"({k}, {r}, {g})", rows, c.max_err, "pass" if c.passed else "FAIL"])
    if verbose:
        print("\nwarp_multi vs oracle (row 0 near 1000):")
        print(tabulate(table, headers=["N", "(K, R, G)", "rows", "max |error|", "result"],
                       floatfmt=".2e"))
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
