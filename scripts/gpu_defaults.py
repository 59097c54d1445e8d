"""Issue 16's targets as a user meets them (H200): the public calls with their default methods on
fp16 torch tensors — ``flashlesson.attention(q, k, v, causal=c)`` and ``attention_backward(do, q,
k, v, o, lse, causal=c)`` — against torch SDPA's flash backend in the same process, kernel-only
and end to end.

    python3 scripts/gpu_defaults.py [--json OUT.json] [--shapes 0,1,2]

Per shape and causal mode: each call is checked first against float64 SDPA (autograd for the
backward) on head (0, 0): a NaN, or an error above 2 × torch flash's + 1e-3·(1 + max |value|),
fails the row and it is not timed. Kernel-only: ``bench.time_gpu_adaptive`` (launches queued
behind a sleeping kernel: the GPU's time); end to end: ``bench.time_end_to_end`` (calls back to
back, host time included). TFLOP/s: ``reference.attention_flops`` (4·B·H·N²·d, half causal)
and ``attention_backward_flops`` (2.5 × that). torch's backward is ``autograd.grad`` of a kept
graph. Which method the default ran is printed beside each row. The table comes last.
"""

import json
import sys

import flashlesson
from flashlesson import tc_methods
from flashlesson.bench import check_and_time, cuda_torch, picked_shapes, script_parser
from flashlesson.reference.attention import attention_flops
from flashlesson.reference.attention_backward import attention_backward_flops

SHAPES = ((4, 16, 1024, 64), (2, 16, 4096, 64), (1, 16, 8192, 128))


def main():
    args = script_parser(budget=False).parse_args()
    torch = cuda_torch()
    if torch is None or flashlesson.SIMULATOR:
        raise SystemExit("gpu_defaults.py needs a CUDA GPU and torch")
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rows = []
    for (b, h, n, d) in picked_shapes(SHAPES, args.shapes):
        for causal in (False, True):
            rows += _case(torch, sdpa, b, h, n, d, causal)
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print()
    base = {(r["shape"], r["causal"], r["way"]): r for r in rows
            if r["method"].startswith("torch") and r.get("TFLOP/s")}
    print(f"{'shape':18} {'causal':6} {'way':8} {'method':26} {'TFLOP/s':>8} {'e2e':>8} "
          f"{'× torch':>8} {'e2e ×':>8} {'e2e/kern':>8}  check")
    for r in rows:
        t = base.get((r["shape"], r["causal"], r["way"]))
        tf, e2e = r.get("TFLOP/s", float("nan")), r.get("e2e TFLOP/s", float("nan"))
        print(f"{r['shape']:18} {str(r['causal']):6} {r['way']:8} {r['method']:26} {tf:8.1f} "
              f"{e2e:8.1f} {tf / t['TFLOP/s'] if t else float('nan'):8.2f} "
              f"{e2e / t['e2e TFLOP/s'] if t else float('nan'):8.2f} {e2e / tf:8.3f}  "
              f"{'ok' if r['ok'] else 'FAIL'}")
    return 0 if all(r["ok"] for r in rows) else 1


def _case(torch, sdpa, b, h, n, d, causal):
    """The four rows (torch and flashlesson, forward and backward) of one shape and mode."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    g = torch.Generator(device="cuda").manual_seed(7 * n + d + causal)
    q, k, v, do = (torch.randn(b, h, n, d, device="cuda", generator=g).half()
                   for _ in range(4))
    x64 = [x[:1, :1].double().requires_grad_(True) for x in (q, k, v)]
    o64 = sdpa(*x64, is_causal=causal)
    refs = [o64[0, 0]] + [r[0, 0] for r in
                          torch.autograd.grad(o64, x64, do[:1, :1].double())]
    o, lse = flashlesson.attention(q, k, v, causal=causal, return_lse=True)
    fwd_method = "flash_wgmma" if tc_methods.wgmma_is_default(q, 0.0) \
        else "flash_tc"
    bwd_method = "flash_wgmma" if tc_methods.wgmma_bwd_is_default(q, 0.0) \
        else "flash_tc"
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        xs = [x.detach().requires_grad_(True) for x in (q, k, v)]
        out = sdpa(*xs, is_causal=causal)
    calls = {
        ("forward", "torch sdpa flash"): (
            lambda: _flash(torch, sdpa_kernel, SDPBackend, sdpa, q, k, v, causal),
            lambda r: [r]),
        ("forward", f"flashlesson ({fwd_method})"): (
            lambda: flashlesson.attention(q, k, v, causal=causal), lambda r: [r]),
        ("backward", "torch sdpa flash"): (
            lambda: torch.autograd.grad(out, xs, do, retain_graph=True), list),
        ("backward", f"flashlesson ({bwd_method})"): (
            lambda: flashlesson.attention_backward(do, q, k, v, o, lse, causal=causal),
            list),
    }
    torch_err = {}                  # (torch's rows come first: their errors bound ours)
    for (way, name), (fn, parts) in calls.items():
        flops = (attention_flops if way == "forward" else attention_backward_flops)(
            b, h, n, n, d, causal)
        want = refs[:1] if way == "forward" else refs[1:]
        big = max(float(r.abs().max()) for r in want)

        def measure(result, want=want, parts=parts):
            got = parts(result)
            return (max(float((x[0, 0].double() - r).abs().max()) for x, r in zip(got, want)),
                    any(bool(torch.isnan(x).any()) for x in got))
        row = {"shape": f"B{b} H{h} N{n} d{d}", "causal": causal, "way": way, "method": name}
        limit = 2 * torch_err[way] + 1e-3 * (1 + big) if way in torch_err else None
        err = check_and_time(row, lambda fn=fn: fn, measure, flops, limit, e2e=True)
        if name.startswith("torch"):
            torch_err[way] = err if err is not None else float("inf")
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _flash(torch, sdpa_kernel, SDPBackend, sdpa, q, k, v, causal):
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return sdpa(q, k, v, is_causal=causal)


if __name__ == "__main__":
    sys.exit(main())
