"""Issue 16, item 4's speed target: float32 attention forward through 3xTF32 — ``attention(q32,
k32, v32, method="flash_wgmma")`` (wgmma, kernels_numba/attention_wgmma_tf32.py) and
``method="flash_tc"`` (mma.sync) — against torch SDPA's EFFICIENT_ATTENTION backend (fp32,
3xTF32 too) in the same process, kernel-only and end to end (H200).

    python3 scripts/gpu_wgmma_tf32.py [--json OUT.json] [--shapes 0,1,2] [--sweep] [--backward]

Per shape and causal mode: float32 torch tensors q, k, v (torch.randn); each method checked
first on head (0, 0) against float64 SDPA: a NaN, or a max |error| above 2 × torch efficient's
own, fails the row and it is not timed. Kernel-only: ``bench.time_gpu_adaptive`` (launches queued
behind a sleeping kernel: the GPU's time; ours includes the packing kernel's three launches);
end to end: ``bench.time_end_to_end``. TFLOP/s: ``reference.attention_flops`` (4·B·H·N²·d, half
when causal). --sweep: the other WgmmaTf32Config tiles as well. The table comes last.

--backward: the same for the gradients — ``attention_backward(do, q, k, v, o, lse,
method="flash_wgmma")`` (kernels_numba/attention_wgmma_tf32_backward.py, d = 64, 128) and
``method="flash_tc"`` against torch efficient's fp32 backward (``torch.autograd.grad`` on one
graph, retained); the error is the largest max |error| of dq, dk, dv on head (0, 0) against
float64 SDPA's gradients; TFLOP/s = 10·B·H·N²·d / time (2.5 × the forward's, half when causal).
"""

import json
import sys

import flashlesson
from flashlesson import WgmmaTf32BwdConfig, WgmmaTf32Config, tc_methods
from flashlesson.bench import check_and_time, cuda_torch, picked_shapes, print_built, \
    script_parser
from flashlesson.reference.attention import attention_flops

SHAPES = ((4, 16, 1024, 64), (2, 16, 4096, 64), (1, 16, 8192, 128))
SWEEP = {64: {"wgmma Bc32 CWG2": WgmmaTf32Config(Bc=32, CWG=2),
              "wgmma Bc32 CWG2 S3": WgmmaTf32Config(Bc=32, CWG=2, STAGES=3),
              "wgmma Bc64 S3": WgmmaTf32Config(Bc=64, CWG=1, STAGES=3),
              "wgmma Bc32 CWG1": WgmmaTf32Config(Bc=32, CWG=1)},
         128: {"wgmma Bc64 S1": WgmmaTf32Config(Bc=64, CWG=1, STAGES=1),
               "wgmma Bc32 S1": WgmmaTf32Config(Bc=32, CWG=1, STAGES=1)}}


def checked_rows(rows, calls, base, measure, flops):
    """One row per call (torch's first): checked by measure (its max |error| on head (0, 0),
    a NaN fails) within 2 × torch's own error, then timed kernel-only and end to end
    (``bench.check_and_time``); appended to rows and printed."""
    torch_err = None
    for name, fn in calls.items():
        row = dict(base, method=name)
        err = check_and_time(row, lambda fn=fn: fn, measure, flops,
                             None if torch_err is None else 2 * torch_err, e2e=True)
        if name.startswith("torch"):
            torch_err = err if err is not None else float("inf")
        row["torch err"] = torch_err
        rows.append(row)
        print(json.dumps(row), flush=True)


BWD_SHAPES = ((4, 16, 1024, 64), (2, 16, 4096, 64), (1, 16, 8192, 64), (1, 16, 8192, 128))
BWD_SWEEP = {64: {"wgmma Q_CWG1": WgmmaTf32BwdConfig(Q_CWG=1),
                  "wgmma 1 stage": WgmmaTf32BwdConfig(STAGES=1)},
             128: {"wgmma Bq32 S1": WgmmaTf32BwdConfig(Q_CWG=1, Bq=32, Bk=16, STAGES=1)}}


def backward_rows(torch, args):
    """--backward: one row per shape, causal mode and method (module docstring)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rows = []
    for (b, h, n, d) in picked_shapes(BWD_SHAPES, args.shapes):
        for causal in (False, True):
            g = torch.Generator(device="cuda").manual_seed(13 * n + d + causal)
            q, k, v, do = (torch.randn(b, h, n, d, device="cuda", generator=g)
                           for _ in range(4))
            xs64 = [x[:1, :1].double().requires_grad_(True) for x in (q, k, v)]
            refs = torch.autograd.grad(sdpa(*xs64, is_causal=causal), xs64,
                                       do[:1, :1].double())
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                xs = [x.detach().requires_grad_(True) for x in (q, k, v)]
                out = sdpa(*xs, is_causal=causal)
            o, lse = flashlesson.attention(q, k, v, causal=causal, return_lse=True,
                                           method="flash_wgmma")

            def efficient():
                return torch.autograd.grad(out, xs, do, retain_graph=True)

            def ours(method, cfg=None):
                return lambda: flashlesson.attention_backward(
                    do, q, k, v, o, lse, causal=causal, method=method, config=cfg)

            calls = {"torch sdpa efficient": efficient, "flash_tc (mma.sync)": ours("flash_tc"),
                     "flash_wgmma": ours("flash_wgmma")}
            if args.sweep:
                for name, cfg in BWD_SWEEP[d].items():
                    calls[name] = ours("flash_wgmma", cfg)
            def measure(gs):
                err = max(float((gi[0, 0].double() - r[0, 0]).abs().max())
                          for gi, r in zip(gs, refs))
                return err, any(bool(torch.isnan(gi).any()) for gi in gs)
            checked_rows(rows, calls, {"shape": f"B{b} H{h} N{n} d{d}", "causal": causal,
                                       "pass": "backward"}, measure,
                         2.5 * attention_flops(b, h, n, n, d, causal))
            torch.cuda.empty_cache()
    from flashlesson.kernels_numba.attention_wgmma_tf32 import BUILT
    print_built(BUILT)
    return rows


def main():
    ap = script_parser(budget=False)
    ap.add_argument("--sweep", action="store_true", help="also the other tiles")
    ap.add_argument("--backward", action="store_true", help="the backward instead")
    args = ap.parse_args()
    torch = cuda_torch()
    if torch is None or flashlesson.SIMULATOR:
        raise SystemExit("gpu_wgmma_tf32.py needs a CUDA GPU and torch")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rows = backward_rows(torch, args) if args.backward else []
    for (b, h, n, d) in ([] if args.backward else picked_shapes(SHAPES, args.shapes)):
        for causal in (False, True):
            g = torch.Generator(device="cuda").manual_seed(11 * n + d + causal)
            q, k, v = (torch.randn(b, h, n, d, device="cuda", generator=g) for _ in range(3))
            ref = sdpa(*(x[:1, :1].double() for x in (q, k, v)), is_causal=causal)[0, 0]

            def efficient():
                with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                    return sdpa(q, k, v, is_causal=causal)

            calls = {"torch sdpa efficient": efficient,
                     "flash_tc (mma.sync)": lambda: flashlesson.attention(
                         q, k, v, causal=causal, method="flash_tc"),
                     "flash_wgmma": lambda: flashlesson.attention(
                         q, k, v, causal=causal, method="flash_wgmma")}
            if args.sweep:
                for name, cfg in SWEEP[d].items():
                    calls[name] = (lambda cfg=cfg: flashlesson.attention(
                        q, k, v, causal=causal, method="flash_wgmma", config=cfg))
            calls["(packing alone)"] = lambda: tc_methods.pack_for_wgmma_tf32(q, k, v)

            def measure(o):
                if isinstance(o, tuple):                # (the packing: nothing to compare)
                    return 0.0, False
                return float((o[0, 0].double() - ref).abs().max()), bool(torch.isnan(o).any())
            checked_rows(rows, calls, {"shape": f"B{b} H{h} N{n} d{d}", "causal": causal},
                         measure, attention_flops(b, h, n, n, d, causal))
            torch.cuda.empty_cache()
    if not args.backward:
        from flashlesson.kernels_numba.attention_wgmma_tf32 import BUILT
        print_built(BUILT)                  # registers and spills of what ran
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print()
    base = {(r["shape"], r["causal"]): r for r in rows
            if r["method"].startswith("torch") and r.get("TFLOP/s")}
    print(f"{'shape':18} {'causal':6} {'method':22} {'ms':>7} {'TFLOP/s':>8} {'e2e':>8} "
          f"{'× torch':>8} {'e2e ×':>8} {'err':>9} {'× err':>6}  check")
    for r in rows:
        t = base.get((r["shape"], r["causal"]))
        tf, e2e = r.get("TFLOP/s", float("nan")), r.get("e2e TFLOP/s", float("nan"))
        err = r.get("err") or float("nan")
        ms = r.get("ms", float("nan"))
        print(f"{r['shape']:18} {str(r['causal']):6} {r['method']:22} {ms:7.3f} "
              f"{tf:8.1f} {e2e:8.1f} "
              f"{tf / t['TFLOP/s'] if t else float('nan'):8.2f} "
              f"{e2e / t['e2e TFLOP/s'] if t else float('nan'):8.2f} {err:9.2e} "
              f"{err / r['torch err'] if r.get('torch err') else float('nan'):6.2f}  "
              f"{'ok' if r['ok'] else 'FAIL ' + r.get('why', '')}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
