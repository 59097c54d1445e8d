"""Issue 16, item 2 (second half): the wgmma backward (``attention_backward(...,
method="flash_wgmma")``) against flash_tc's backward and torch SDPA's flash backward,
kernel-only, each checked against torch's float64 autograd in the same run (H200;
``scripts/gpu_wgmma_bwd.sh`` runs it).

    python3 scripts/gpu_wgmma_bwd.py --json OUT.json [--ladder] [--fused] [--sweep] [--swizzle]
                                     [--ahead] [--wait-for FILE]

Every kernel is compiled first (small inputs of each shape's d and Nk); with --wait-for the
timing then waits for FILE (scripts/gpu_wgmma_bwd.sh: the tests run meanwhile, so the
compilation of the two overlaps and the GPU is the timing's alone).

Per shape and causal mode: fp16 torch tensors q, k, v, dO; O and LSE from flashlesson's forward
(its default method). Each backward is checked first: dq, dk, dv of head (0, 0) against float64
autograd of SDPA on the same fp16 values (max |error| over the three, beside torch flash's
own); a method with NaN, an exception, or an error above 2 × torch flash's + 1e-3·(1 +
max|gradient|) is reported and not timed. Then timed with ``bench.time_gpu_adaptive`` (CUDA
events, launches queued behind a sleeping kernel: the GPU's time; ours includes the D
preprocess; torch's is ``autograd.grad`` of a kept graph: its preprocess and its dq
conversion too). TFLOP/s = ``reference.attention_backward_flops`` / time: 2.5 × the forward's
4·B·H·N²·d = 10·B·H·N²·d, half when causal. --ladder: also the ladder's STAGES = 1 step; --fused: the FUSED variants (measured slower,
2026-12-01); --sweep: the SWEEP configurations (those a head dim refuses are left out);
--swizzle: the SWIZZLE configurations (the 128-byte swizzled tiles, session 6); --ahead: AHEAD
off and in both kernels (session 9).
The table comes last.
"""

import json
import os
import sys
import time
import traceback

import flashlesson
from flashlesson import WgmmaBwdConfig
from flashlesson.bench import budget_cases, check_and_time, cuda_torch, picked_shapes, \
    print_built, script_parser, torch_sdpa_backward, versus_table
from flashlesson.reference.attention_backward import attention_backward_flops

SHAPES = ((1, 16, 8192, 128), (2, 16, 4096, 64), (4, 16, 1024, 64))    # (the ladder's first)
LADDER = {"wgmma STAGES=1": WgmmaBwdConfig(Bq=64, Bk=64, CWG=2, STAGES=1)}
FUSED = {"wgmma fused": WgmmaBwdConfig(STAGES=2, FUSED=True),  # --fused: dQ in the dK/dV kernel
         "wgmma fused S3": WgmmaBwdConfig(STAGES=3, FUSED=True)}
SWEEP = {                     # --sweep: other blocks and rings (session 5; not since the lean loop)
    "wgmma CWG1": WgmmaBwdConfig(CWG=1, STAGES=2),          # 64-key / 64-query blocks
    "wgmma CWG1 S3": WgmmaBwdConfig(CWG=1, STAGES=3),
    "wgmma S2": WgmmaBwdConfig(STAGES=2),                  # (the default has three)
    "wgmma Bk128": WgmmaBwdConfig(Bk=128, STAGES=2),        # the dQ kernel's K/V tiles (three
                                                            #  stages at d = 128: 256 KB)
    "wgmma Bq128": WgmmaBwdConfig(Bq=128),                  # (d = 64 only)
}
AHEAD = {                     # --ahead: the next tile's first products behind this tile's
    "wgmma AHEAD off": WgmmaBwdConfig(AHEAD=False),     # last, in neither kernel or in both
    "wgmma AHEAD both": WgmmaBwdConfig(AHEAD=True),     # (the default: both at d = 128, the
}                                                       #  dK/dV kernel alone at d = 64)
SWIZZLE = {                   # --swizzle: every tile in the 128-byte swizzle (0.94–1.02×)
    "wgmma SWIZZLE": WgmmaBwdConfig(STAGES=2, SWIZZLE=True),
    "wgmma SWIZZLE S3": WgmmaBwdConfig(STAGES=3, SWIZZLE=True),
}


def methods(torch, ladder=False, fused=False, sweep=False, swizzle=False, ahead=False):
    def torch_flash(q, k, v, do, o, lse, causal):
        return torch_sdpa_backward(torch, "flash", q, k, v, do, causal)

    def ours(method, config=None):
        def prepare(q, k, v, do, o, lse, causal):
            return lambda: flashlesson.attention_backward(do, q, k, v, o, lse, causal=causal,
                                                          method=method, config=config)
        prepare.config = config                 # (a config that refuses a head dim: skipped)
        return prepare

    out = {"torch sdpa flash": torch_flash, "flash_tc": ours("flash_tc"),
           "flash_wgmma": ours("flash_wgmma")}
    for wanted, configs in ((fused, FUSED), (sweep, SWEEP), (ladder, LADDER),
                            (swizzle, SWIZZLE), (ahead, AHEAD)):
        if wanted:
            out.update({name: ours("flash_wgmma", cfg) for name, cfg in configs.items()})
    return out


def fits(prepare, d):
    """False if the method's config refuses head dimension d (WgmmaBwdConfig.check)."""
    cfg = getattr(prepare, "config", None)
    if cfg is None:
        return True
    try:
        cfg.check(d)
    except ValueError:
        return False
    return True


def warm(fns, shapes, torch):
    """Compile every kernel the timed loop will run, on small inputs of the same head dim and
    key count (the kernels depend on flags only; the shapes are the timed loop's)."""
    for (_, _, n, d) in shapes:
        for causal in (False, True):
            q, do = (torch.randn(1, 1, 64, d, device="cuda").half() for _ in range(2))
            k, v = (torch.randn(1, 1, n, d, device="cuda").half() for _ in range(2))
            o, lse = flashlesson.attention(q, k, v, causal=causal, return_lse=True)
            for name, prepare in fns.items():
                if name.startswith("torch") or not fits(prepare, d):    # (torch: nothing to
                    continue                    # compile, and SDPA flash refuses causal Nq ≠ Nk)
                try:
                    prepare(q, k, v, do, o, lse, causal)()
                except Exception:               # (reported again by the timed loop)
                    traceback.print_exc()
    torch.cuda.synchronize()


def main():
    ap = script_parser()
    ap.add_argument("--ladder", action="store_true", help="also the ladder's STAGES = 1 step")
    ap.add_argument("--fused", action="store_true", help="also the FUSED variants")
    ap.add_argument("--sweep", action="store_true", help="also the SWEEP configurations")
    ap.add_argument("--swizzle", action="store_true", help="also the SWIZZLE configurations")
    ap.add_argument("--ahead", action="store_true", help="also the AHEAD configurations")
    ap.add_argument("--wait-for", default=None, help="compile first, then wait until this file "
                    "exists before timing (the tests run on the GPU meanwhile)")
    args = ap.parse_args()
    shapes = picked_shapes(SHAPES, args.shapes)
    torch = cuda_torch()
    if torch is None or flashlesson.SIMULATOR:
        raise SystemExit("gpu_wgmma_bwd.py needs a CUDA GPU and torch")
    sdpa = torch.nn.functional.scaled_dot_product_attention
    start = time.time()
    fns = methods(torch, args.ladder, args.fused, args.sweep, args.swizzle, args.ahead)
    warm(fns, shapes, torch)
    print(f"compiled in {time.time() - start:.0f} s", flush=True)
    from flashlesson.kernels_numba.attention_wgmma import BUILT
    print_built(BUILT)                      # registers and spills of what ran
    if args.wait_for:
        while not os.path.exists(args.wait_for):
            time.sleep(0.5)
        print(f"timing from {time.time() - start:.0f} s", flush=True)
    rows = []
    for (b, h, n, d, causal) in budget_cases(shapes, start, args.budget_s):
        g = torch.Generator(device="cuda").manual_seed(1000 * n + d + causal)
        q, k, v, do = (torch.randn(b, h, n, d, device="cuda", generator=g).half()
                       for _ in range(4))
        x64 = [x[:1, :1].double().requires_grad_(True) for x in (q, k, v)]
        refs = torch.autograd.grad(sdpa(*x64, is_causal=causal), x64, do[:1, :1].double())
        refs = [r[0, 0] for r in refs]
        big = max(float(r.abs().max()) for r in refs)
        o, lse = flashlesson.attention(q, k, v, causal=causal, return_lse=True)
        flops = attention_backward_flops(b, h, n, n, d, causal)
        torch_err = None                    # (torch's row comes first: its error bounds ours)

        def measure(grads):
            return (max(float((gr[0, 0].double() - r).abs().max())
                        for gr, r in zip(grads, refs)),
                    any(bool(torch.isnan(gr).any()) for gr in grads))
        for name, prepare in fns.items():
            if not fits(prepare, d):
                continue
            row = {"shape": f"B{b} H{h} N{n} d{d}", "causal": causal, "method": name}
            err = check_and_time(
                row, lambda prepare=prepare: prepare(q, k, v, do, o, lse, causal), measure,
                flops, None if torch_err is None else 2 * torch_err + 1e-3 * (1 + big))
            if name == "torch sdpa flash":
                torch_err = err
            rows.append(row)
            print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print()
    print("\n".join(versus_table(rows, ("torch sdpa flash", "flash_tc"), width=18)))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
