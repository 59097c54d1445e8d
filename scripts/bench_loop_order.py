"""§41–43 on the GPU: FlashAttention-2's order (``flash``) vs FlashAttention-1's (``flash_fa1``),
the double-buffered K/V variant (``flash_db``), the producer/consumer one, and both on Hopper's
machinery (``flash_async``) — checked, then timed.

For each shape (B2 H16 N4096 d64 and B1 H16 N8192 d128, two of the main shapes) and causal
mode, every variant is first checked against the float64 oracle (``reference.attention`` on
head (0, 0), the whole head), then timed with ``flashlesson.bench``'s CUDA-event medians (warm-up first: the first
call compiles; the launches of a sample enqueued behind a sleeping kernel). TFLOP/s from
4·B·H·N²·d (halved when causal); "vs flash" is flash's time / the variant's time (> 1: faster).

Variants (all with the forward kernel's default tiles, ``default_config``):
- ``flash``                    FA2 order, the reference (kernels_numba/attention.py)
- ``flash_fa1``                Algorithm 1: one block per (batch, head), O, m, l through HBM
- ``flash_fa1 (Q-tile grid)``  the same kernel with one Q tile per block: FA2's grid with FA1's
                               traffic — the gap to ``flash`` is the HBM round trips alone
- ``flash_db``                 §42: next K/V tile prefetched through registers, one barrier a tile
- ``flash_db (1 producer)``    §43: one extra warp loads, the others compute
- ``flash_async``              §42 on mbarriers: bulk copies into two stages, warp 0 issues them
- ``flash_async (warpgroup)``  §43 on mbarriers: a producer warpgroup, 2–4 stages, setmaxnreg
                               (the launcher's default ring; in the simulator its default tiles)

Output: a table on stdout; ``$OUT/bench_loop_order.json`` (or ``--out DIR``) with every row
(times, TFLOP/s, relative errors, registers and local memory of the compiled kernels), the
device and the date. ``--tiny``: tiny shapes in the simulator (no GPU), wall-clock times —
to check that the script itself runs.

    FLASHLESSON_DEVICE=gpu python3 scripts/bench_loop_order.py [--out DIR]
    python3 scripts/bench_loop_order.py --tiny            # CPU, Numba's simulator
"""

import argparse
import datetime
import json
import os
import sys
import time

import numpy as np

SHAPES = ((2, 16, 4096, 64), (1, 16, 8192, 128))
TINY_SHAPES = ((1, 2, 40, 8), (1, 1, 33, 16))
VARIANTS = ("flash", "flash_fa1", "flash_fa1 (Q-tile grid)", "flash_db",
            "flash_db (1 producer)", "flash_async", "flash_async (warpgroup)")


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="tiny shapes in the simulator")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"),
                   help="folder for bench_loop_order.json (default $OUT)")
    return p.parse_args()


def main():
    args = parse()
    if args.tiny:
        os.environ["FLASHLESSON_DEVICE"] = "sim"
    import flashlesson
    from numba import cuda

    from flashlesson import attention, loop_order
    from flashlesson.arrays import empty
    from flashlesson.configs import default_config
    from flashlesson.bench import attention_flops, time_gpu, time_gpu_adaptive
    from flashlesson.reference import attention as oracle

    if flashlesson.SIMULATOR and not args.tiny:
        print("bench_loop_order: no GPU here (pass --tiny to run tiny shapes in the simulator)",
              file=sys.stderr)
        return 2

    def timer(fn, slow):
        if flashlesson.SIMULATOR:                       # wall clock: checks the plumbing only
            t0 = time.perf_counter()
            fn()
            return 1e3 * (time.perf_counter() - t0)
        if slow:                                        # FA1 at one block a head: ~0.1–1 s
            return time_gpu(fn, samples=3, inner=1, warmup=1)
        return time_gpu_adaptive(fn, samples=7)

    def resources(kernel):
        from flashlesson.launch import kernel_resources
        res = kernel_resources(kernel)
        return {"registers": max((r["registers"] for r in res), default=None),
                "local bytes": max((r["local bytes"] for r in res), default=None)}

    rng = np.random.default_rng(0)
    rows = []
    t_start = time.perf_counter()
    for (b, h, n, d) in (TINY_SHAPES if args.tiny else SHAPES):
        qh, kh, vh = (rng.standard_normal((b, h, n, d)).astype(np.float32) for _ in range(3))
        q, k, v = (cuda.to_device(x) for x in (qh, kh, vh))
        flat = [x.reshape(-1) for x in (q, k, v)]
        o = empty(b * h * n * d, np.float32)
        lse = empty(b * h * n, np.float32)
        cfg = default_config(d, n, b * h)
        n_qt = -(-n // cfg.Br)
        for causal in (False, True):
            want = oracle(qh[:1, :1], kh[:1, :1], vh[:1, :1], causal=causal)[0][0, 0]
            flops = attention_flops(b, h, n, n, d, causal)

            def launched(launch, config=cfg, **variant):
                """A run of ``launch`` (launch_fa1: q_blocks=…, launch_db and launch_async:
                producers=…)."""
                def run():
                    launch(*flat, o, lse, d=d, n_q=n, n_k=n, heads=h, bh=b * h, causal=causal,
                           scale=d ** -0.5, config=config, **variant)
                    return o
                return run

            def fa1(qb):
                return launched(loop_order.launch_fa1, q_blocks=qb)

            def db(p):
                return launched(loop_order.launch_db, producers=p)

            runs = {"flash": lambda: attention(q, k, v, causal=causal),
                    "flash_fa1": fa1(1), "flash_fa1 (Q-tile grid)": fa1(n_qt),
                    "flash_db": db(0), "flash_db (1 producer)": db(1),
                    "flash_async": launched(loop_order.launch_async, producers=0),
                    "flash_async (warpgroup)": launched(loop_order.launch_async, config=None,
                                                        producers=1)}
            row = {"B": b, "H": h, "N": n, "d": d, "causal": causal,
                   "tiles": f"Br={cfg.Br} Bc={cfg.Bc} TR={cfg.TR} TC={cfg.TC}"}
            for name in VARIANTS:
                fn = runs[name]
                o[:] = np.float32(np.nan)              # poison: an unwritten element fails
                got = fn()
                head = got.copy_to_host().reshape(b, h, n, d)[0, 0]
                err = float(np.max(np.abs(head - want)) / np.max(np.abs(want)))
                ms = timer(fn, slow=name == "flash_fa1")
                row[f"{name} ms"] = ms
                row[f"{name} TFLOP/s"] = flops / ms / 1e9
                row[f"{name} rel err"] = err
                print(f"B{b} H{h} N{n} d{d} causal={causal} {name:24s} {ms:9.3f} ms "
                      f"{flops / ms / 1e9:7.2f} TFLOP/s  rel err {err:.1e}  "
                      f"({time.perf_counter() - t_start:.0f} s)", flush=True)
            for name in VARIANTS[1:]:
                row[f"{name} vs flash"] = row["flash ms"] / row[f"{name} ms"]
            if not flashlesson.SIMULATOR:
                from flashlesson.kernels_numba import attention as KA
                from flashlesson.kernels_numba import attention_db as KDB
                from flashlesson.kernels_numba import attention_fa1 as KF1
                D = cfg.head_dim(d)
                # (the launchers' exact factory arguments: lru_cache keys are positional)
                tiles = (D, cfg.Br, cfg.Bc, cfg.TR, cfg.TC, causal, True, cfg.KU)
                row["resources"] = {
                    "flash": resources(KA.flash_forward_kernel(*tiles, cfg.GROUP, False, False,
                                                               False)),
                    "flash_fa1": resources(KF1.flash_fa1_kernel(*tiles, False, False)),
                    "flash_db": resources(KDB.flash_db_kernel(*tiles, False, False, 0)),
                    "flash_db (1 producer)": resources(KDB.flash_db_kernel(*tiles, False, False,
                                                                           1))}
                from flashlesson.kernels_numba import attention_async as KAS
                for name, p in (("flash_async", 0), ("flash_async (warpgroup)", 1)):
                    c, st = loop_order.async_config(d, n, b * h, cfg if p == 0 else None, p)
                    row["resources"][name] = resources(KAS.flash_async_kernel(
                        c.head_dim(d), c.Br, c.Bc, c.TR, c.TC, causal, c.KU, False, False, p,
                        st))
            rows.append(row)

    from tabulate import tabulate
    cols = ["shape", "causal"] + [f"{v} TFLOP/s" for v in VARIANTS] + \
        [f"{v} vs flash" for v in VARIANTS[1:]]
    table = [[f"B{r['B']} H{r['H']} N{r['N']} d{r['d']}", r["causal"]] +
             [r[c] for c in cols[2:]] for r in rows]
    print()
    print(tabulate(table, headers=[c.replace(" TFLOP/s", "\nTFLOP/s").replace(" vs flash",
                                                                              "\nvs flash")
                                   for c in cols], floatfmt=".3g"))
    bad = [(r["N"], r["causal"], v) for r in rows for v in VARIANTS
           if not r[f"{v} rel err"] < 1e-4]
    dev = flashlesson.device.describe()
    result = {"device": dev.get("device"), "mode": flashlesson.MODE,
              "date": str(datetime.date.today()), "tiny": args.tiny,
              "seconds": time.perf_counter() - t_start, "rows": rows, "failed checks": bad}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "bench_loop_order.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1, default=str)
    print(f"\n{dev.get('device')}, {result['date']}, {result['seconds']:.0f} s; wrote {path}")
    if bad:
        print(f"correctness check failed (rel err ≥ 1e-4): {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
