"""§42 — asynchronous data flow: load the next K/V tile while computing on this one.

The lesson's claim: a tile's loads and its products need not take turns. With two buffers,
tile j+1 can be on its way from HBM while tile j is multiplied; Hopper does the copy in the
background (cp.async, the bulk copy / TMA) and signals its arrival (mbarrier). Numba's own API
has neither, but inline PTX reaches both: ``kernels_numba/hopper.py`` (mbarriers,
``cp.async.bulk``; cp.async: ``vector.py``, §37). Two kernels here, the before and the after:

- ``kernels_numba/attention_db.py`` (method ``flash_db``), what plain loads allow: each thread
  issues tile j+1's global loads into registers before computing on tile j and stores them into
  the other shared buffer after, one barrier per tile instead of ``flash_forward_kernel``'s four;
- ``kernels_numba/attention_async.py`` (method ``flash_async``), the lesson as Hopper runs it:
  warp 0 hands tile j+1 to the copy engine (one bulk copy per K and V row, straight into shared
  memory, no register holds it) before tile j is computed; FULL[s] mbarriers say a stage has
  landed (expect_tx + the copies' bytes), EMPTY[s] that every warp is done with it; no block
  barrier in the K/V loop at all.

What you will see: the idea as a lesson-tier kernel first (``kernels_numba/lesson/loop_order.py``:
``flash_double_buffer``, one thread a query row, tile j+1 written straight into the other
buffer before tile j's products, one barrier a tile), then the fast one, both against the
float64 oracle and (on a GPU) timed; the barriers inside each kernel's K/V loop, counted from
the source (AST);
what double-buffering costs — shared memory per block and blocks per SM by shared memory alone
(227 KB on the H200), registers per thread for the copy in flight — for the GPU's tiles; both
double-buffered kernels against the float64 oracle, and flash_db's global traffic, counted: the
same as ``flash``'s, element for element (prefetching changes when the loads happen, not how
many there are). On a GPU: the lesson kernel, flash, flash_db and flash_async timed on the same
input — printed as measurements, none a pass/fail: their margins are below 2× or near it
(lesson 16.2 ms, flash_db 7.25 ms, flash 4.37 ms on the H200, 2026-12-01), so a shared GPU's
noise or a tile choice could flip a claim; the tour's pass/fail timings need a 2× margin.

Run: ``python examples/s42_double_buffer.py`` (or ``flashlesson section 42``).
"""

import ast
import datetime
import inspect
import textwrap

from tabulate import tabulate

import flashlesson
from flashlesson import loop_order
from flashlesson.configs import GPU_CONFIGS
from flashlesson.sweeps import inputs
from flashlesson.tour import Check, attention_check, attention_inputs, attention_tiers, \
    example_rng, in_simulator
from flashlesson.traffic import compare, count_attention
from flashlesson.kernels_numba import attention as KA
from flashlesson.kernels_numba import attention_async as KAS
from flashlesson.kernels_numba import attention_db as KDB
from flashlesson.kernels_numba.lesson import loop_order as LL

SECTIONS = (42,)
TOPIC = "double-buffered K/V"
SMEM_SM = 227 * 1024        # H200: shared memory one SM gives its blocks
# the two tiers' causal cases: causal only in the simulator (keeps the tour short on CPU)
TIER_CASES = (True,) if flashlesson.SIMULATOR else (False, True)


def barriers_per_tile(factory):
    """cuda.syncthreads() calls inside the kernel's ``for j in range(n_tiles)`` loop."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(factory)))
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and \
                any(isinstance(a, ast.Name) and a.id == "n_tiles" for a in node.iter.args):
            return sum(1 for n in ast.walk(node) if isinstance(n, ast.Call)
                       and isinstance(n.func, ast.Attribute) and n.func.attr == "syncthreads")
    raise ValueError(f"{factory.__name__}: no K/V loop found")


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    if verbose:
        print(__doc__.split("\n\n")[1])
    # The two tiers: the lesson kernel first, then the fast one, against the oracle;
    # then the measured gap
    shape = (1, 2, 20, 45, 8) if flashlesson.SIMULATOR else (1, 4, 512, 512, 64)
    q, k, v = attention_inputs(rng, *shape)
    for causal in TIER_CASES:
        if verbose:
            print(f"\nflash_db, lesson tier then fast tier{' (causal)' if causal else ''}, "
                  f"B, H, Nq, Nk, d = {shape}:")
        checks += attention_tiers("42", TOPIC, q, k, v, verbose, method="flash_db",
                                  causal=causal)

    nb_flash, nb_db = barriers_per_tile(KA.flash_forward_kernel), \
        barriers_per_tile(KDB.flash_db_kernel)
    nb_lesson = barriers_per_tile(LL.flash_double_buffer)
    nb_async = barriers_per_tile(KAS.flash_async_kernel)
    checks.append(Check("42", TOPIC, "source", None,
                        (nb_flash, nb_db, nb_lesson, nb_async) == (4, 1, 1, 0),
                        f"cuda.syncthreads() per K/V tile: flash_forward_kernel {nb_flash}, "
                        f"flash_db_kernel {nb_db}, lesson flash_double_buffer {nb_lesson}, "
                        f"flash_async_kernel {nb_async} (mbarriers instead)"))
    if verbose:
        print(f"\nbarriers in the K/V loop (counted in the source): flash {nb_flash}, "
              f"flash_db {nb_db}, the lesson's flash_double_buffer {nb_lesson}, flash_async "
              f"{nb_async} (it waits on FULL[s], releases EMPTY[s]: mbarriers, per stage)")

    rows, ok = [], True
    for d, cfg in GPU_CONFIGS:
        db_cfg = cfg if loop_order.smem_bytes(loop_order.DB, cfg, d) <= SMEM_SM \
            else loop_order.DB_FALLBACK         # (as loop_order.config_for on the GPU)
        D = cfg.head_dim(d)
        f_b = 4 * KA.flash_smem_floats(D, cfg.Br, cfg.Bc)
        d_b = loop_order.smem_bytes(loop_order.DB, db_cfg, d)
        regs = 4 * -(-db_cfg.Bc * db_cfg.head_dim(d) // 4 // db_cfg.threads)
        ok &= d_b > f_b and d_b <= SMEM_SM
        a_b = loop_order.async_smem_bytes(cfg, d, 2)
        rows.append([d, f"{cfg.Br}×{cfg.Bc}", f"{f_b / 1024:.0f}", SMEM_SM // f_b,
                     f"{db_cfg.Br}×{db_cfg.Bc}", f"{d_b / 1024:.0f}", SMEM_SM // d_b, regs,
                     f"{a_b / 1024:.0f}" if a_b <= SMEM_SM else f"{a_b / 1024:.0f} (too big)",
                     SMEM_SM // a_b])
    checks.append(Check("42", TOPIC, "formula", None, bool(ok),
                        "the double buffers need more shared memory, and fit: " +
                        ", ".join(f"d={r[0]} {r[2]}→{r[5]} KB" for r in rows)))
    if verbose:
        print("\nthe price, with the GPU's tiles (shared memory per block, blocks per SM by "
              "shared memory alone, 227 KB an SM):")
        print(tabulate(rows, headers=["d", "flash tiles", "flash KB", "blocks/SM",
                                      "flash_db tiles", "flash_db KB", "blocks/SM",
                                      "floats in flight / thread", "flash_async KB (2 stages)",
                                      "blocks/SM"], disable_numparse=True))
        print("Double buffers halve the blocks an SM holds; the overlap must win back what "
              "the lost occupancy (other blocks' work hiding the loads) gave. flash_async "
              "holds no tile in registers (the copy engine writes shared memory) and one Pᵀ "
              "(each warp rewrites only its own rows).")

    # (simulator: one head each — the tiers above run two)
    cases = ([(1, 1, 40, 50, 16), (1, 1, 7, 70, 5)] if flashlesson.SIMULATOR else
             [(2, 8, 1024, 1024, 64), (1, 4, 500, 2000, 128)])
    table = []

    def check_method(method, b, h, nq, nk, d, label=""):
        """``method`` on fresh inputs (row 0 of Q × 30: scores near ±100), causal and not,
        against the float64 oracle; its checks and table rows."""
        q, k, v = attention_inputs(rng, b, h, nq, nk, d)
        q[..., 0, :] *= 30                      # one row of scores near ±100
        for causal in (False, True):
            o, lse = flashlesson.attention(q, k, v, causal=causal, method=method,
                                           return_lse=True)
            shape = f"{label}B={b} H={h} Nq={nq} Nk={nk} d={d}{', causal' if causal else ''}"
            (c, cl), _, _ = attention_check("42", TOPIC, method, o, lse, q, k, v,
                                            causal=causal, note=shape)
            checks.extend([c, cl])
            table.append([shape, f"{c.max_err:.1e}", f"{cl.max_err:.1e}",
                          "yes" if c.passed and cl.passed else "NO"])

    for case in cases:
        check_method("flash_db", *case)
    # flash_async (d % 4 == 0: the bulk copy moves 16-byte rows), the same oracle
    check_method("flash_async", *((1, 1, 40, 50, 16) if flashlesson.SIMULATOR else
                                  (2, 8, 1000, 1500, 64)), label="flash_async: ")
    if verbose:
        print(f"\nrandom inputs (row 0 of Q × 30): seed {seed}; bounds from "
              "flashlesson.tolerance.attention_tol")
        print(tabulate(table, headers=["shape", "max |ΔO|", "max |ΔLSE|", "within bound"],
                       disable_numparse=True))

    got, where = in_simulator(__file__, "counted", verbose)
    checks += got
    if verbose:
        print(f"(counted in {where})")
    if flashlesson.SIMULATOR:
        if verbose:
            print("\ntiming: skipped in the simulator (on a GPU: this example, "
                  "scripts/bench_loop_order.py, flashlesson bench ladder --only attention_db).")
        return checks
    return checks + _timed(rng, verbose)


def counted(verbose):
    """[Check]: flash_db's global reads and writes = flash's, array by array (simulator only:
    ``main`` runs it through ``tour.in_simulator``)."""
    shape = (1, 1, 40, 50, 8)
    db, _ = count_attention(*shape, method="flash_db")
    fl, _ = count_attention(*shape, method="flash")
    rows = compare(fl.arrays, db.arrays)        # flash's counts as the "model"
    if verbose:
        print("\nglobal traffic, counted: flash vs flash_db (same loads, other times)")
        print(tabulate([[r[0], r[1], r[2], r[3], r[4], r[-1]] for r in rows],
                       headers=["array", "reads flash", "reads flash_db", "writes flash",
                                "writes flash_db", "equal"]))
    return [Check("42", TOPIC, "counter", None, rows[-1][-1] == "yes",
                  f"B=1 H=1 Nq=40 Nk=50 d=8: flash_db's global reads and writes = flash's, "
                  f"array by array ({rows[-1][5]} bytes)")]


def _timed(rng, verbose):
    """GPU only: the lesson's §42 kernel, flash, flash_db and flash_async at B=2 H=16 N=4096
    d=64 — measurements, no pass/fail (the module's docstring says why)."""
    from flashlesson.bench import attention_flops, time_gpu_adaptive
    b, h, n, d = 2, 16, 4096, 64
    (q, k, v), _ = inputs(rng, b, h, n, d)
    runs = {"lesson §42": lambda: flashlesson.attention(q, k, v, method="flash_db",
                                                        tier="lesson"),
            "flash": lambda: flashlesson.attention(q, k, v, method="flash"),
            "flash_db": lambda: flashlesson.attention(q, k, v, method="flash_db"),
            "flash_async": lambda: flashlesson.attention(q, k, v, method="flash_async")}
    ms = {m: time_gpu_adaptive(fn) for m, fn in runs.items()}
    flops = attention_flops(b, h, n, n, d, False)
    text = ", ".join(f"{m} {t:.3f} ms ({flops / t / 1e9:.1f} TFLOP/s)" for m, t in ms.items())
    if verbose:
        dev = flashlesson.device.describe()["device"]
        print(f"\n{dev}, {datetime.date.today()}: B={b} H={h} N={n} d={d}: {text}; time / "
              f"flash's: flash_db {ms['flash_db'] / ms['flash']:.2f}, flash_async "
              f"{ms['flash_async'] / ms['flash']:.2f}")
    return [Check.measured("42", TOPIC, "flash_db, flash_async",
                           f"{text} (a shared GPU's timing: measurements, not claims; every "
                           "margin here is below or near 2×)")]


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
