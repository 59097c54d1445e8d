"""The Hopper (wgmma) fp16 forward against flash_tc and torch SDPA flash (and cuDNN), with the
configurations it was chosen among: kernel-only, each method checked against float64 in the
same run. GPU only (sm_90, torch with CUDA); on the device machine, after
``. scripts/gpu_env.sh``:

    python3 scripts/bench_hopper.py --json OUT.json   # the ladder's steps, flash_tc, torch flash
    python3 scripts/bench_hopper.py --cudnn       # the default vs torch flash and cuDNN only
    python3 scripts/bench_hopper.py --overlap     # OVERLAP (FA3's pipelining) vs the default
    python3 scripts/bench_hopper.py --cwg3        # CWG = 3 (Br = 192, d = 64) vs the default
    python3 scripts/bench_hopper.py --wide        # K/V tiles of 176 and 192 keys vs the default
    python3 scripts/bench_hopper.py --pingpong    # PINGPONG (FA3's ping-pong) vs the default
    python3 scripts/bench_hopper.py --cwg3 --tc   # … and flash_tc's default in the same run
    python3 scripts/bench_hopper.py --swizzle --tc  # the swizzled default vs unswizzled, schedules

``flashlesson bench attention --tc`` times flash_tc in fp16/bf16/3xTF32 against SDPA flash,
cuDNN and efficient; this script times flash_wgmma (the default on Hopper) and its
configurations, which that command does not.

Per shape and causal mode: the inputs as fp16 torch tensors; each method is checked first (head
(0, 0) against float64 SDPA on the same fp16 values: its max error beside torch flash's own),
then timed with ``bench.time_gpu_adaptive`` (CUDA events, launches queued behind a sleeping
kernel: the GPU's time, not Python's). TFLOP/s = ``reference.attention_flops`` / time
(4·B·H·N²·d, half when causal). ``--overlap`` times torch flash, the default config and the
OVERLAP configs only (no flash_tc, no ladder steps), at the two larger shapes unless --shapes
says otherwise, each method's kernels compiled first (at N = 256: compiling inside the budget
of the first shape would skip shapes), with a "× default" column; ``--cwg3`` the same with the
CWG = 3 configs (FA3's block of 192 query rows at d = 64), at the two d = 64 shapes; ``--wide``
the same with the wide K/V tiles (FA3's d = 128 forward: Bc = 176, 2 stages), each at its head
dim, beside that head dim's default config, at all three shapes; ``--pingpong`` with the
PINGPONG configs (the consumer warpgroups take turns issuing their wgmmas) on each head dim's
default block and on the wide tiles, with and without OVERLAP. ``--wide --pingpong``: both
lists in one table (the default and torch once). A method that fails (an exception, NaN, or
an error above 2× torch flash's + 1e-3) is reported and not timed. The table comes last.
"""

import json
import sys
import time

import flashlesson
from flashlesson import WgmmaConfig
from flashlesson.bench import budget_cases, check_and_time, cuda_torch, picked_shapes, \
    script_parser, versus_table
from flashlesson.reference.attention import attention_flops

SHAPES = ((4, 16, 1024, 64), (2, 16, 4096, 64), (1, 16, 8192, 128))
WGMMA = {   # the ladder's steps (flashlesson/ladder.py, attention_wgmma)
    "wgmma STAGES=1": WgmmaConfig(Bc=128, CWG=2, STAGES=1, PRODUCER=False),
    "wgmma STAGES=2 (§42)": WgmmaConfig(Bc=128, CWG=2, STAGES=2, PRODUCER=False),
    "wgmma PRODUCER (§43)": WgmmaConfig(Bc=128, CWG=2, STAGES=2, PRODUCER=True),
}


# The lists below (--sweep, --overlap, --cwg3, --wide, --pingpong) hold unswizzled configs;
# "wgmma default" (config None) is the default (swizzled, tc_methods.default_wgmma_config), and
# --swizzle times the schedules with the swizzle.
# --sweep: more shapes of the block and the ring than the ladder's steps
SWEEP = {
    "wgmma Bc64 CWG2 ST2 P": WgmmaConfig(Bc=64, CWG=2, STAGES=2, PRODUCER=True),
    "wgmma Bc64 CWG2 ST3 P": WgmmaConfig(Bc=64, CWG=2, STAGES=3, PRODUCER=True),
    "wgmma Bc128 CWG1 ST2 P": WgmmaConfig(Bc=128, CWG=1, STAGES=2, PRODUCER=True),
    "wgmma Bc128 CWG1 ST3 P": WgmmaConfig(Bc=128, CWG=1, STAGES=3, PRODUCER=True),
    "wgmma Bc128 CWG2 ST3 P": WgmmaConfig(Bc=128, CWG=2, STAGES=3, PRODUCER=True),
}


# --overlap: FA3's intra-warpgroup pipelining (WgmmaConfig.OVERLAP) beside the default it
# would replace; STAGES = 2 holds the ring back (a stage is freed one tile later), Bc = 64
# halves the registers S and P take
CUDNN = {"wgmma default": None}     # --cudnn: the default beside SDPA cuDNN (target ≥ 0.8×)
OVERLAP = {
    "wgmma default": None,
    "wgmma OVERLAP ST3": WgmmaConfig(OVERLAP=True),
    "wgmma OVERLAP ST2": WgmmaConfig(STAGES=2, OVERLAP=True),
    "wgmma OVERLAP Bc64 ST3": WgmmaConfig(Bc=64, OVERLAP=True),
}


# --cwg3: three consumer warpgroups of 64 rows (Br = 192; with the producer 512 threads, 160
# registers a consumer) — FA3's block for d = 64 — beside today's default
CWG3 = {
    "wgmma default": None,
    "wgmma CWG3 ST3": WgmmaConfig(Bc=128, CWG=3, STAGES=3, PRODUCER=True),
    "wgmma CWG3 ST2": WgmmaConfig(Bc=128, CWG=3, STAGES=2, PRODUCER=True),
    "wgmma CWG3 Bc64 ST3": WgmmaConfig(Bc=64, CWG=3, STAGES=3, PRODUCER=True),
}


# --wide: K/V tiles wider than 128 keys beside each head dim's default (config None: CWG = 2 at d =
# 128, CWG = 3 at d = 64, Bc = 128, swizzled), a config timed at the head dims it is
# listed for. d = 128: FA3's Bc = 176 and 192 with 2 stages (3 exceed 227 KB), 176 with OVERLAP (192
# with OVERLAP is refused: its consumers spill, attention_wgmma.widest_bc); d = 64: the widest for
# CWG = 3 (176; 192 refused) and CWG = 2 (192)
WIDE = {
    "wgmma default": {64: None, 128: None},
    "wgmma Bc176 ST2": {128: WgmmaConfig(Bc=176, STAGES=2)},
    "wgmma Bc192 ST2": {128: WgmmaConfig(Bc=192, STAGES=2)},
    "wgmma Bc176 ST2 OVERLAP": {128: WgmmaConfig(Bc=176, STAGES=2, OVERLAP=True)},
    "wgmma CWG3 Bc176 ST3": {64: WgmmaConfig(Bc=176, CWG=3, STAGES=3)},
    "wgmma CWG2 Bc192 ST3": {64: WgmmaConfig(Bc=192, CWG=2, STAGES=3)},
}


# --pingpong: FA3's inter-warpgroup ping-pong (WgmmaConfig.PINGPONG) on each head dim's default
# block — d = 128: CWG = 2 (FA3's own d = 128 configuration is OVERLAP + ping-pong); d = 64:
# CWG = 3, Br = 192 — beside that d's default (config=None); a config per head dim
_CWG3 = {"Bc": 128, "CWG": 3, "STAGES": 3, "PRODUCER": True}
PINGPONG = {
    "wgmma default": {64: None, 128: None},
    "wgmma PINGPONG": {128: WgmmaConfig(PINGPONG=True),
                       64: WgmmaConfig(**_CWG3, PINGPONG=True)},
    "wgmma OVERLAP PINGPONG": {128: WgmmaConfig(OVERLAP=True, PINGPONG=True),
                               64: WgmmaConfig(**_CWG3, OVERLAP=True, PINGPONG=True)},
    "wgmma Bc176 PINGPONG": {128: WgmmaConfig(Bc=176, STAGES=2, PINGPONG=True),   # (the
                             64: WgmmaConfig(**dict(_CWG3, Bc=176), PINGPONG=True)},  # wide
    "wgmma Bc176 OVERLAP PINGPONG": {128: WgmmaConfig(Bc=176, STAGES=2, OVERLAP=True,  # tiles)
                                                      PINGPONG=True)},
}


# --swizzle: the 128-byte swizzled tiles (WgmmaConfig.SWIZZLE: a quarter-warp's copies one line
# on both sides, against the L2 tag requests that bound the unswizzled kernel, docs/results.md)
# — the default since 2026-12-02 (docs/logs/2026-12-02_swizzle_forward_h200.log) — beside the unswizzled block
# it replaced, and with it the schedules that measured no faster without it (three stages,
# OVERLAP, PINGPONG, the wide d = 128 tile); torch's cuDNN backend too
_NOSW = {128: WgmmaConfig(), 64: WgmmaConfig(**_CWG3)}
SWIZZLE = {
    "wgmma default": {64: None, 128: None},
    "wgmma no SWIZZLE": _NOSW,
    **{f"wgmma SWIZZLE{name}": {d: WgmmaConfig(**{**vars(c), "SWIZZLE": True, **extra})
                                for d, c in _NOSW.items()}
       for name, extra in ((" ST3", {}), (" OVERLAP", {"OVERLAP": True}),
                           (" PINGPONG ST2", {"PINGPONG": True, "STAGES": 2}),
                           (" OVERLAP PINGPONG", {"OVERLAP": True, "PINGPONG": True}))},
    "wgmma SWIZZLE Bc176 ST2": {128: WgmmaConfig(Bc=176, STAGES=2, SWIZZLE=True)},
}


def methods(torch, sweep=False, only=None, tc=False):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def torch_flash(q, k, v, causal):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return sdpa(q, k, v, is_causal=causal)

    def ours(method, config):
        by_d = isinstance(config, dict)             # (--wide, --pingpong: {d: config})

        def run(q, k, v, causal):
            cfg = config[q.shape[-1]] if by_d else config
            return flashlesson.attention(q, k, v, causal=causal, method=method, config=cfg)
        run.head_dims = tuple(config) if by_d else None
        return run

    def torch_cudnn(q, k, v, causal):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return sdpa(q, k, v, is_causal=causal)

    out = {"torch sdpa flash": torch_flash}
    if only is SWIZZLE or only is CUDNN:
        out["torch sdpa cudnn"] = torch_cudnn
    if only is not None:                        # --overlap, --cwg3, --wide, --pingpong
        if tc:                                  # (--tc: flash_tc's default beside them)
            out["flash_tc"] = ours("flash_tc", None)
        out.update({name: ours("flash_wgmma", cfg) for name, cfg in only.items()})
        return out
    out["flash_tc"] = ours("flash_tc", None)
    out.update({name: ours("flash_wgmma", cfg) for name, cfg in WGMMA.items()})
    if sweep:
        out.update({name: ours("flash_wgmma", cfg) for name, cfg in SWEEP.items()})
    return out


def warm(torch, fns, shapes):
    """Compile every method's kernels for the head dims of ``shapes``, both causal modes, at
    B1 H1 N256 (an error is left for the timed run to report)."""
    start = time.time()
    for d in sorted({s[3] for s in shapes}):
        x = torch.randn(1, 1, 256, d, device="cuda").half()
        for causal in (False, True):
            for name, fn in fns.items():
                if not runs_at(fn, d):
                    continue
                try:
                    fn(x, x, x, causal)
                except Exception as exc:        # (reported where it is timed)
                    print(f"warm-up {name} d{d} causal={causal}: {type(exc).__name__}: "
                          f"{str(exc)[:200]}", flush=True)
    torch.cuda.synchronize()
    print(f"warm-up (compiling) {time.time() - start:.1f} s", flush=True)


def runs_at(fn, d):
    """Whether a method is timed at head dim d (--wide: only where its config is listed)."""
    dims = getattr(fn, "head_dims", None)
    return dims is None or d in dims


def head_error(o, ref):
    return float((o[0, 0].double() - ref).abs().max())


def main():
    ap = script_parser()
    ap.add_argument("--sweep", action="store_true", help="also the configs of SWEEP")
    ap.add_argument("--overlap", action="store_true", help="torch flash, the default and the "
                    "OVERLAP configs only (default shapes: 1,2)")
    ap.add_argument("--cwg3", action="store_true", help="torch flash, the default and the "
                    "CWG = 3 configs only (default shapes: 0,1)")
    ap.add_argument("--wide", action="store_true", help="torch flash, each head dim's default "
                    "and the wide K/V tiles (Bc 176, 192) only (default shapes: all)")
    ap.add_argument("--pingpong", action="store_true", help="torch flash, the default and the "
                    "PINGPONG configs only (default shapes: all); with --wide: both lists")
    ap.add_argument("--swizzle", action="store_true", help="torch flash and cuDNN, each head "
                    "dim's default (swizzled), the unswizzled block and the SWIZZLE configs "
                    "only (default shapes: all)")
    ap.add_argument("--cudnn", action="store_true", help="torch flash, torch cuDNN and the "
                    "default only (default shapes: all)")
    ap.add_argument("--tc", action="store_true", help="with --overlap, --cwg3, --wide, "
                    "--pingpong or --swizzle: flash_tc's default too (where wgmma_is_default "
                    "chooses between them, both in one run)")
    args = ap.parse_args()
    if args.overlap + args.cwg3 + (args.wide or args.pingpong) + args.swizzle + args.cudnn > 1:
        raise SystemExit("--overlap, --cwg3, --wide/--pingpong, --swizzle, --cudnn: one at a "
                         "time")
    only = OVERLAP if args.overlap else CWG3 if args.cwg3 else SWIZZLE if args.swizzle else \
        CUDNN if args.cudnn else None
    if args.wide or args.pingpong:
        only = {**(WIDE if args.wide else {}), **(PINGPONG if args.pingpong else {})}
    picks = args.shapes or ("1,2" if args.overlap else "0,1" if args.cwg3 else None)
    shapes = picked_shapes(SHAPES, picks)
    torch = cuda_torch()
    if torch is None or flashlesson.SIMULATOR:
        raise SystemExit("bench_hopper.py needs a CUDA GPU and torch")
    start = time.time()
    fns = methods(torch, args.sweep, only, args.tc)
    if only is not None:
        warm(torch, fns, shapes)
    rows = []
    for (b, h, n, d, causal) in budget_cases(shapes, start, args.budget_s):
        g = torch.Generator(device="cuda").manual_seed(1000 * n + d + causal)
        q, k, v = (torch.randn(b, h, n, d, device="cuda", generator=g).half()
                   for _ in range(3))
        ref = torch.nn.functional.scaled_dot_product_attention(
            *(x[:1, :1].double() for x in (q, k, v)), is_causal=causal)[0, 0]
        flops = attention_flops(b, h, n, n, d, causal)
        torch_err = None                    # (torch's row comes first: its error bounds ours)
        for name, fn in fns.items():
            if not runs_at(fn, d):
                continue
            row = {"shape": f"B{b} H{h} N{n} d{d}", "causal": causal, "method": name}
            err = check_and_time(
                row, lambda fn=fn: (lambda: fn(q, k, v, causal)),
                lambda o: (head_error(o, ref), bool(torch.isnan(o).any())), flops,
                None if torch_err is None else 2 * torch_err + 1e-3)
            if name == "torch sdpa flash":
                torch_err = err
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print()
    bases = ("torch sdpa flash",) if only is None else ("torch sdpa flash", "torch sdpa cudnn") \
        if only is CUDNN else ("torch sdpa flash", "wgmma default")
    print("\n".join(versus_table(rows, bases, width=24 if args.wide else 22)))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
