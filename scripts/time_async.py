"""§42–43 on the GPU: ``flash_async`` (kernels_numba/attention_async.py) beside ``flash`` and
``flash_db``, at one shape, over the knobs the ladder does not turn — stages, tiles, one or two
consumer warpgroups — each checked against ``flash``'s output, then timed.

Time: kernel-only, ``bench.time_gpu_adaptive`` (CUDA events, launches queued behind a sleeping
kernel; median of 7 samples). TFLOP/s = 4·B·H·N²·d / time (half when causal:
``reference.attention_flops``). Registers and local memory (spills) per compiled kernel from
Numba (``launch.kernel_resources``). A measurement, not a claim: nothing here passes or fails on
time.

    FLASHLESSON_DEVICE=gpu python3 scripts/time_async.py [--shape 2 16 4096 64] [--causal]
        [--defaults] [--json F]
"""

import argparse
import datetime
import json
import sys

import numpy as np

import flashlesson  # noqa: I001 - first: it picks the device before numba.cuda is imported
from flashlesson import FlashConfig, loop_order
from flashlesson.arrays import empty
from flashlesson.bench import attention_flops, time_gpu_adaptive
from flashlesson.launch import kernel_resources
from flashlesson.kernels_numba import attention_async as KAS
from numba import cuda
from tabulate import tabulate

# (label, producers, stages, config): None = the launcher's default (flash's tiles). The two
# defaults (§42: 2 stages, §43: 4) are the ladder's steps 3 and 4 (``flashlesson bench ladder
# --only attention_db``); here the knobs around them.
VARIANTS = (
    ("§42, 3 stages", 0, 3, None),
    ("§42, Bc 32 (2 blocks/SM)", 0, 2, FlashConfig(128, 32, 16, 8, KU=2)),
    ("§42, Bc 32, 3 stages (2 blocks/SM)", 0, 3, FlashConfig(128, 32, 16, 8, KU=2)),
    ("§43, 2 stages", 1, 2, None),
    ("§43, 3 stages", 1, 3, None),
    ("§43, 2 consumer warpgroups", 1, 2, FlashConfig(256, 64, 32, 8, KU=2)),
)
DEFAULTS = (("§42, 2 stages (default)", 0, None, None), ("§43, 4 stages (default)", 1, None, None))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", type=int, nargs=4, default=(2, 16, 4096, 64),
                    metavar=("B", "H", "N", "D"))
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--defaults", action="store_true",
                    help="also the two defaults (the ladder's steps 3 and 4) and flash_db")
    args = ap.parse_args(argv)
    flashlesson.device.gpu_only("scripts/time_async.py")
    b, h, n, d = args.shape
    rng = np.random.default_rng(0)
    host = [rng.standard_normal((b, h, n, d)).astype(np.float32) for _ in range(3)]
    q, k, v = (cuda.to_device(x) for x in host)
    flops = attention_flops(b, h, n, n, d, args.causal)
    ref = flashlesson.attention(q, k, v, causal=args.causal).copy_to_host()
    flat = [x.reshape(-1) for x in (q, k, v)]
    o, lse = empty(b * h * n * d, np.float32), empty(b * h * n, np.float32)
    rows, results = [], []

    def into_o(_out):
        return o.copy_to_host().reshape(ref.shape)

    def record(label, fn, result=into_o, kernel=None):
        """Run once, compare O with flash's, then time (only what matched)."""
        try:
            o.copy_to_device(np.full(o.shape, np.nan, np.float32))     # (no stale result)
            out = fn()
            cuda.synchronize()
            err = float(np.max(np.abs(result(out) - ref)))
            ms = time_gpu_adaptive(fn) if err < 1e-4 else None
        except Exception as exc:        # a variant that cannot run here: say why, go on
            rows.append([label, "", "", "", f"{type(exc).__name__}: {str(exc)[:90]}"])
            results.append({"variant": label, "error": str(exc)})
            print(" | ".join(rows[-1]), flush=True)
            return
        res = kernel_resources(kernel) if kernel is not None else []
        regs = "/".join(sorted({str(r["registers"]) for r in res}))
        spill = "/".join(sorted({str(r["local bytes"]) for r in res}))
        rows.append([label, "" if ms is None else f"{ms:.3f}",
                     "" if ms is None else f"{flops / ms / 1e9:.1f}", f"{regs} {spill}",
                     f"max |ΔO| vs flash {err:.1e}" + ("" if ms is not None else ": NOT timed")])
        results.append({"variant": label, "ms": ms, "tflops": None if ms is None else
                        flops / ms / 1e9, "max err vs flash": err, "registers": regs,
                        "local bytes": spill})
        print(" | ".join(rows[-1]), flush=True)     # (as it goes: a time limit keeps these)

    record("flash (reference)", lambda: flashlesson.attention(q, k, v, causal=args.causal),
           lambda out: out.copy_to_host())
    if args.defaults:
        record("flash_db (§42, plain loads)",
               lambda: loop_order.launch_db(*flat, o, lse, d=d, n_q=n, n_k=n, heads=h,
                                            bh=b * h, causal=args.causal, scale=d ** -0.5))
    for label, producers, stages, cfg in (DEFAULTS if args.defaults else ()) + VARIANTS:
        c, st = loop_order.async_config(d, n, b * h, cfg, producers, stages)
        kernel = KAS.flash_async_kernel(c.head_dim(d), c.Br, c.Bc, c.TR, c.TC, args.causal, c.KU,
                                        False, False, producers, st)

        def fn(cfg=cfg, producers=producers, stages=stages):
            loop_order.launch_async(*flat, o, lse, d=d, n_q=n, n_k=n, heads=h, bh=b * h,
                                    causal=args.causal, scale=d ** -0.5, config=cfg,
                                    producers=producers, stages=stages)
        record(f"{label}: {c.Br}×{c.Bc}, {c.TR}×{c.TC}", fn, kernel=kernel)

    dev = flashlesson.device.describe()["device"]
    print(f"{dev}, {datetime.date.today()}: B{b} H{h} N{n} d{d} fp32"
          f"{' causal' if args.causal else ''}; TFLOP/s = 4·B·H·N²·d / time"
          f"{' / 2' if args.causal else ''}")
    print(tabulate(rows, headers=["variant", "ms", "TFLOP/s", "regs local B", "check"],
                   disable_numparse=True))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev, "date": str(datetime.date.today()),
                       "shape": [b, h, n, d], "causal": args.causal, "results": results}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
