"""§6–7 — warp softmax for rows of N ≤ 32: one warp per row, registers only.

The lesson's claims.
§6: lane i reads x_i; a ``__shfl_down_sync`` tree with offsets 16, 8, 4, 2, 1 leaves the max
    in lane 0 (each step, lane i takes lane i+offset's value), ``__shfl_sync(…, 0)`` broadcasts
    it to every lane; each lane computes e^{x_i − m}, and the same tree gives the sum.
§7: the whole flow — read, max tree, exp, sum tree, divide, write — runs in registers: no
    shared memory and no ``__syncthreads()``.

What you will see: for one row, what lane 0 holds after each shuffle step (computed in NumPy
as the lesson draws it, lanes past N holding −inf for the max and 0 for the sum), and the
broadcast; the ``warp`` method (``softmax_warp``) against the oracle for N = 1, 20 and 32;
then the kernel's source, step by step, and a check of §7 read from the source itself: no
function the kernel calls declares shared memory or waits at a barrier (on a GPU, also the
compiled kernel's shared memory: 0 bytes). ``block`` (§9–10) is shown for contrast.

Run: ``python examples/s06_s07_warp_softmax.py`` (or ``flashlesson section 6``).
"""

import ast
from pathlib import Path

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.kernels_numba import softmax as K
from flashlesson.tour import Check, check_close, example_rng, lesson_rows, softmax_tiers
from flashlesson.reference import softmax_stable

SECTIONS = (6, 7)
TOPIC = "warp softmax"
WARP = 32
OFFSETS = (16, 8, 4, 2, 1)


def shfl_down_tree(lanes, op):
    """The lesson's §6 loop over 32 lanes in NumPy; returns the history of (offset, lanes).

    shfl_down_sync(v, offset): lane i receives lane i+offset's v, or its own v when
    i+offset > 31. After offsets 16, 8, 4, 2, 1 only lane 0 is guaranteed to hold the result.
    """
    v = np.array(lanes, np.float64)
    history = []
    for offset in OFFSETS:
        src = np.arange(WARP) + offset
        received = np.where(src < WARP, v[np.minimum(src, WARP - 1)], v)
        v = op(v, received)
        history.append((offset, v.copy()))
    return history


def covered_by_lane0(offsets_so_far):
    """The lanes whose original values lane 0 has combined after the given steps."""
    lanes = {0}
    for offset in offsets_so_far:
        lanes |= {lane + offset for lane in lanes}
    return sorted(lanes)


def _lanes_text(lanes):
    return ", ".join(map(str, lanes)) if len(lanes) <= 4 else \
        f"{lanes[0]}, {lanes[1]}, …, {lanes[-1]} ({len(lanes)} lanes)"


def show_tree(x_row):
    """Print the max and sum trees for one row; returns (m, l) as lane 0 ends with them."""
    n = len(x_row)
    v = np.full(WARP, -np.inf)
    v[:n] = x_row                                        # lanes ≥ N hold −inf (neutral for max)
    hist_max = shfl_down_tree(v, np.maximum)
    m = hist_max[-1][1][0]
    e = np.zeros(WARP)
    e[:n] = np.exp(x_row.astype(np.float64) - m)         # lanes ≥ N hold 0 (neutral for sum)
    hist_sum = shfl_down_tree(e, np.add)
    rows = [["start", "", "", x_row[0], e[0], "0"]]
    for step, ((off, vm), (_, vs)) in enumerate(zip(hist_max, hist_sum), 1):
        lanes = covered_by_lane0(OFFSETS[:step])
        rows.append([f"{step}", off, f"lane {off}", vm[0], vs[0], _lanes_text(lanes)])
    rows.append(["shfl_sync(v, 0)", "", "(broadcast)", m, hist_sum[-1][1][0],
                 "every lane now holds lane 0's value"])
    print(tabulate(rows, headers=["step", "offset", "lane 0 takes", "lane 0: max",
                                  "lane 0: Σ e^{x−m}", "lanes combined in lane 0"],
                   floatfmt=".6g"))
    return m, hist_sum[-1][1][0]


# ---------------------------------------------------------------------------------------------
# §7 from the source: which functions does the kernel reach, and do any of them use shared
# memory or a barrier?
# ---------------------------------------------------------------------------------------------
def _functions(*modules):
    """{name: (FunctionDef, file)} for every function (nested ones too) of the modules."""
    found = {}
    for mod in modules:
        path = Path(mod.__file__)
        src = path.read_text()
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.FunctionDef):
                found.setdefault(node.name, (node, path, src))
    return found


def reached(kernel_name):
    """[(function name, file, shuffles, shared memory?, barrier?)] for every function the
    kernel calls, transitively, among the project's kernel files."""
    from flashlesson.kernels_numba import reductions
    funcs = _functions(K, reductions)
    out, todo, seen = [], [kernel_name], set()
    while todo:
        name = todo.pop(0)
        if name in seen or name not in funcs:
            continue
        seen.add(name)
        node, path, _ = funcs[name]
        attrs = [a.attr for a in ast.walk(node) if isinstance(a, ast.Attribute)]
        shuffles = sum(a.startswith("shfl") for a in attrs)
        shared = "shared" in attrs
        barrier = any(a.startswith("syncthreads") for a in attrs)
        out.append((name, path.name, shuffles, shared, barrier))
        todo += [c.func.id for c in ast.walk(node)
                 if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)]
    return out


def kernel_source(name):
    """The function's full source lines, decorators and trailing comments included."""
    node, _, src = _functions(K)[name]
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return "\n".join(src.splitlines()[first - 1:node.end_lineno])


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    if verbose:
        print(__doc__.split("\n\n")[1])
    # The two tiers: the lesson kernel (kernels_numba/lesson/softmax.py) first, then the
    # fast one (kernels_numba/softmax.py), each against the oracle; timed against each other on a GPU.
    shape = (3, 20) if flashlesson.SIMULATOR else (4096, 32)
    if verbose:
        print(f"\nlesson tier, then fast tier — method 'warp', rows {list(shape)}:")
    checks += softmax_tiers("6–7", TOPIC, "warp", lesson_rows(rng, *shape), verbose)

    # §6: the tree on one row of N = 20 (12 lanes hold the neutral element).
    x_row = (rng.standard_normal(20) * 3).astype(np.float32)
    x_row[rng.integers(0, 20)] += 10
    if verbose:
        print(f"\n§6 on one row, N = 20 (seed {seed}): lane i holds x_i, lanes 20–31 hold −inf / 0")
        m, l = show_tree(x_row)
    else:
        m = shfl_down_tree(np.concatenate([x_row, np.full(12, -np.inf)]), np.maximum)[-1][1][0]
        l = np.exp(x_row.astype(np.float64) - m).sum()
    checks.append(Check("6", TOPIC, "numpy", None,
                        bool(m == x_row.max() and np.isclose(l, np.exp(x_row - m).sum())),
                        "the shfl_down tree leaves max and Σ in lane 0"))

    table = []
    for n in (1, 20, 32):
        rows = 3                                   # two rows per block in the simulator: 2 blocks
        x = lesson_rows(rng, rows, n) if n > 1 else np.array([[5.0], [-1e30], [1000.0]], np.float32)
        y = flashlesson.softmax(x, method="warp")
        c = check_close("6", TOPIC, "warp", y, softmax_stable(x), f"[{rows}, {n}]")
        checks.append(c)
        table.append([n, rows, f"{32 - n} idle lanes", c.max_err, "pass" if c.passed else "FAIL"])
    if verbose:
        print("\nwarp kernel vs oracle (row 0 near 1000):")
        print(tabulate(table, headers=["N", "rows", "lanes past N", "max |error|", "result"],
                       floatfmt=".2e"))

    # §7: registers only.
    warp_fns = reached("softmax_warp")
    clean = not any(shared or barrier for _, _, _, shared, barrier in warp_fns)
    shuffles = sum(s for _, _, s, _, _ in warp_fns)
    note = f"{len(warp_fns)} functions reached, {shuffles} shuffle sites, no shared, no barrier"
    if not flashlesson.SIMULATOR:
        smem = K.softmax_warp.get_shared_mem_per_block()
        smem = set(smem.values()) if isinstance(smem, dict) else {smem}
        clean = clean and smem == {0}
        note += f"; compiled: {sorted(smem)} B shared"
    checks.append(Check("7", TOPIC, "warp", None, clean,
                        note if clean else "shared memory or a barrier found: " + str(warp_fns)))
    if verbose:
        print("\n§7, the kernel step by step (kernels_numba/softmax.py):\n")
        print(kernel_source("softmax_warp"))
        block_fns = reached("softmax_block")
        print("\nfunctions each kernel reaches, read from the source:")
        print(tabulate([["warp (§6–7)", *f] for f in warp_fns] +
                       [["block (§9–10)", *f] for f in block_fns],
                       headers=["kernel", "function", "file", "shuffle sites", "shared memory",
                                "__syncthreads"]))
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
