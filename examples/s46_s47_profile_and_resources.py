"""§46–47 — what a profiler shows, and what flash pays for its IO savings.

The lesson's claims. §46: under Nsight Compute naive attention is three kernels (plus the LSE
pass here) with heavy DRAM traffic — S and P, N × N each, written and read back — and flash is
one long kernel moving about Q, K, V and O once. §47: flash buys that with registers (S, m, l,
acc per thread) and shared memory (the tiles), so fewer blocks fit on an SM: lower occupancy,
less IO.

What you will see: (1) the kernels each method launches and the arrays they touch — counted in
the simulator (``flashlesson.traffic.count_traffic``), or recorded on a GPU
(``flashlesson.resources.record_launches``): naive 4 launches with [N, N] arrays S and P,
flash 1 launch with nothing N × N; the backward likewise (naive 8 launches over P and dP, flash
3); (2) how the bytes grow with N, from the model: what DRAM must move at sizes ≫ L2 (each
array once per kernel, ``traffic.compulsory_traffic``) grows as N² for naive and as N for
flash — 4× vs 2× per doubling; (3) the §47 table: on a GPU each kernel's registers, local
memory (spills), shared memory and occupancy from Numba's own queries; in the simulator, which
compiles nothing, the part that needs no compiler (threads, tile shared memory, the occupancy
they allow) and a sentence saying why.

The hardware numbers — DRAM bytes read and written per kernel, duration, achieved occupancy,
measured next to this model — come from ``python3 scripts/profile_io.py --out DIR`` on a GPU
with Nsight Compute (docs/gpu.md).

Run: ``python examples/s46_s47_profile_and_resources.py`` (or
``flashlesson section 46``).
"""

from tabulate import tabulate

import flashlesson
from flashlesson import resources, traffic
from flashlesson.configs import GPU_CONFIGS
from flashlesson.tour import Check

SECTIONS = (46, 47)
TOPIC = "profile: kernels, bytes, resources"


def _launches(kind, method, shape):
    """(kernel launches, name → Access) of one call: counted in the simulator (tiny shape), or
    recorded on a GPU with the model's arrays."""
    B, H, n, d = shape
    if flashlesson.SIMULATOR:
        count = traffic.count_backward if kind == "backward" else traffic.count_attention
        t, _ = count(B, H, n, n, d, method)
        return [k.split("#")[0] for k in t.launches], t.arrays
    w = resources.Workload(kind, method, shape)
    run = w.prepare()
    with resources.record_launches() as rec:
        run()
    return [x.name for x in rec.launches], w.model()


def main(verbose=True):
    checks = []
    shape = (1, 1, 40, 8) if flashlesson.SIMULATOR else (1, 16, 1024, 64)
    B, H, n, d = shape
    nn = B * H * n * n
    table = []
    for kind, method, want in (("attention", "naive", 4), ("attention", "flash", 1),
                               ("backward", "naive", 8), ("backward", "flash", 3)):
        names, arrays = _launches(kind, method, shape)
        square = sorted(k for k, a in arrays.items() if a.elements == nn)
        table.append([kind, method, len(names), ", ".join(dict.fromkeys(names)),
                      ", ".join(square) or "none", f"{traffic.total_bytes(arrays):,}"])
        ok = len(names) == want and (bool(square) == (method == "naive"))
        what = (f"{want} launches, N × N arrays {', '.join(square)}" if method == "naive"
                else f"{want} launch{'es' if want > 1 else ''}, nothing N × N")
        checks.append(Check("46", TOPIC, method, None, ok,
                            f"{kind} {method}, B{B} H{H} N{n} d{d}: {what} "
                            f"({'counted' if flashlesson.SIMULATOR else 'recorded'})"))
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\nlaunches and arrays, B{B} H{H} N = {n} d = {d} "
              f"({'simulator: counted' if flashlesson.SIMULATOR else 'GPU: recorded'}):")
        print(tabulate(table, headers=["pass", "method", "launches", "kernels",
                                       "N × N arrays", "bytes accessed by threads"]))

    # how the DRAM bytes grow with N (model; sizes ≫ L2: each array once per kernel)
    growth, rows = {}, []
    for method in ("naive", "flash"):
        comp = []
        for n_ in (4096, 8192, 16384):
            model = traffic.attention_traffic(1, 16, n_, n_, 64, method, config=(
                GPU_CONFIGS[0][1] if method == "flash" else None))     # (H200 tiles, d = 64)
            comp.append(sum(r + w for _, r, w in traffic.compulsory_traffic("attention", method,
                                                                            model)))
        growth[method] = [b / a for a, b in zip(comp, comp[1:])]
        rows.append([method] + [f"{c / 1e6:,.0f}" for c in comp] +
                    [" ".join(f"{g:.2f}×" for g in growth[method])])
    ok = all(3.9 < g <= 4.0 for g in growth["naive"]) and all(g == 2.0 for g in growth["flash"])
    checks.append(Check("46", TOPIC, "model", None, ok,
                        "DRAM bytes (each array once per kernel), B1 H16 d64: ×"
                        f"{growth['naive'][-1]:.2f} per doubling of N for naive (∝ N²), "
                        f"×{growth['flash'][-1]:.2f} for flash (∝ N)"))
    if verbose:
        print("\nwhat DRAM must move at sizes ≫ L2 (MB), B1 H16 d64:")
        print(tabulate(rows, headers=["method", "N = 4096", "8192", "16384", "per doubling"]))

    # §47: resources
    if flashlesson.SIMULATOR:
        try:
            resources.resource_report()
            said = False
        except resources.ResourcesUnavailable as exc:
            said = "only known on a GPU" in str(exc)
        cfg = resources.config_rows(64)
        ok = said and cfg[0][4] == 2 and cfg[0][5] == "shared memory"
        checks.append(Check("47", TOPIC, "model", None, ok,
                            "simulator: registers and spills need a compiled kernel (said so); "
                            f"from its H200 tiles alone, flash_forward d=64 ({cfg[0][3]:,} B of "
                            f"shared memory) fits {cfg[0][4]} blocks per SM, "
                            f"{cfg[0][6]} occupancy at most"))
        if verbose:
            print(f"\n§47 in the simulator: {resources.SIMULATOR_MESSAGE}")
            print(tabulate(cfg, headers=resources.CONFIG_HEADERS))
    else:
        rows = resources.resource_report(workloads=[        # (compiled above already)
            resources.Workload(kind, method, shape) for kind in ("attention", "backward")
            for method in ("naive", "flash")])
        flash = [r for r in rows if r["kernel"] == "flash_forward"]
        naive = [r for r in rows if r["kernel"] == "matmul"]
        ok = bool(flash and naive) and all(0 < (r["registers"] or 0) <= 255 for r in rows) and \
            min(r["blocks / SM"] for r in flash) <= min(r["blocks / SM"] for r in naive)
        checks.append(Check("47", TOPIC, "flash", None, ok,
                            f"flash_forward: {flash[0]['registers']} registers, "
                            f"{flash[0]['dynamic smem B']:,} B shared, "
                            f"{flash[0]['occupancy']} occupancy vs the naive GEMM's "
                            f"{naive[0]['occupancy']}: fewer resident warps, far fewer bytes"
                            if ok else "resource report incomplete"))
        if verbose:
            print("\n§47, Numba's queries of the kernels that ran (H200 limits):")
            print(tabulate([[r[h] for h in resources.RESOURCE_HEADERS] for r in rows],
                           headers=resources.RESOURCE_HEADERS))
    if verbose:
        print("\nDRAM bytes as measured: python3 scripts/profile_io.py --out DIR (a GPU with "
              "Nsight Compute) — per kernel, next to these models, with the ratio.")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
