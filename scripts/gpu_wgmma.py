"""Issue 16, items 2–3: flash_wgmma's ladder variants against flash_tc and torch SDPA flash,
kernel-only, checked against torch in the same run (H200; ``scripts/gpu_wgmma.sh`` runs it).

    python3 scripts/gpu_wgmma.py --json OUT.json

Per shape and causal mode: the inputs as fp16 torch tensors; each method is checked first (head
(0, 0) against float64 SDPA on the same fp16 values: its max error beside torch flash's own),
then timed with ``bench.time_gpu_adaptive`` (CUDA events, launches queued behind a sleeping
kernel: the GPU's time, not Python's). TFLOP/s = ``reference.attention_flops`` / time
(4·B·H·N²·d, half when causal). A method that fails (an exception, NaN, or an error above 2×
torch flash's + 1e-3) is reported and not timed. The table comes last.
"""

import argparse
import json
import sys
import time
import traceback

import flashlesson
from flashlesson import WgmmaConfig
from flashlesson.bench import cuda_torch, time_gpu_adaptive, versus_table
from reference.attention import attention_flops

SHAPES = ((4, 16, 1024, 64), (2, 16, 4096, 64), (1, 16, 8192, 128))
WGMMA = {   # the ladder's steps (flashlesson/ladder.py, attention_wgmma)
    "wgmma STAGES=1": WgmmaConfig(Bc=128, CWG=2, STAGES=1, PRODUCER=False),
    "wgmma STAGES=2 (§42)": WgmmaConfig(Bc=128, CWG=2, STAGES=2, PRODUCER=False),
    "wgmma PRODUCER (§43)": WgmmaConfig(Bc=128, CWG=2, STAGES=2, PRODUCER=True),
}


# --sweep: more shapes of the block and the ring (d = 64: the ladder's config loses to flash_tc)
SWEEP = {
    "wgmma Bc64 CWG2 ST2 P": WgmmaConfig(Bc=64, CWG=2, STAGES=2, PRODUCER=True),
    "wgmma Bc64 CWG2 ST3 P": WgmmaConfig(Bc=64, CWG=2, STAGES=3, PRODUCER=True),
    "wgmma Bc128 CWG1 ST2 P": WgmmaConfig(Bc=128, CWG=1, STAGES=2, PRODUCER=True),
    "wgmma Bc128 CWG1 ST3 P": WgmmaConfig(Bc=128, CWG=1, STAGES=3, PRODUCER=True),
    "wgmma Bc128 CWG2 ST3 P": WgmmaConfig(Bc=128, CWG=2, STAGES=3, PRODUCER=True),
}


def methods(torch, sweep=False):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def torch_flash(q, k, v, causal):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return sdpa(q, k, v, is_causal=causal)

    def ours(method, config):
        def run(q, k, v, causal):
            return flashlesson.attention(q, k, v, causal=causal, method=method, config=config)
        return run

    out = {"torch sdpa flash": torch_flash, "flash_tc": ours("flash_tc", None)}
    out.update({name: ours("flash_wgmma", cfg) for name, cfg in WGMMA.items()})
    if sweep:
        out.update({name: ours("flash_wgmma", cfg) for name, cfg in SWEEP.items()})
    return out


def head_error(o, ref):
    return float((o[0, 0].double() - ref).abs().max())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--budget-s", type=float, default=150.0, help="stop starting new shapes "
                    "after this many seconds")
    ap.add_argument("--sweep", action="store_true", help="also the configs of SWEEP")
    ap.add_argument("--shapes", default=None, help="indices into SHAPES, e.g. 0,1")
    args = ap.parse_args()
    shapes = SHAPES if args.shapes is None else [SHAPES[int(i)] for i in args.shapes.split(",")]
    torch = cuda_torch()
    if torch is None or flashlesson.SIMULATOR:
        raise SystemExit("gpu_wgmma.py needs a CUDA GPU and torch")
    start = time.time()
    fns = methods(torch, args.sweep)
    rows = []
    for (b, h, n, d) in shapes:
        for causal in (False, True):
            if time.time() - start > args.budget_s:
                print(f"budget spent: B{b} H{h} N{n} d{d} causal={causal} skipped", flush=True)
                continue
            g = torch.Generator(device="cuda").manual_seed(1000 * n + d + causal)
            q, k, v = (torch.randn(b, h, n, d, device="cuda", generator=g).half()
                       for _ in range(3))
            ref = torch.nn.functional.scaled_dot_product_attention(
                *(x[:1, :1].double() for x in (q, k, v)), is_causal=causal)[0, 0]
            flops = attention_flops(b, h, n, n, d, causal)
            torch_err = None
            for name, fn in fns.items():
                row = {"shape": f"B{b} H{h} N{n} d{d}", "causal": causal, "method": name}
                try:
                    o = fn(q, k, v, causal)
                    torch.cuda.synchronize()
                    err = head_error(o, ref)
                    if name == "torch sdpa flash":
                        torch_err = err
                    nan = bool(torch.isnan(o).any())
                    row["err"] = err
                    row["ok"] = (not nan and (torch_err is None or
                                              err <= 2 * torch_err + 1e-3))
                    if not row["ok"]:
                        row["why"] = "NaN in O" if nan else f"error {err:.2e} > 2 × torch's"
                    else:
                        ms = time_gpu_adaptive(lambda: fn(q, k, v, causal))
                        row["ms"] = ms
                        row["TFLOP/s"] = flops / ms / 1e9
                except Exception as exc:        # reported, the next method still runs
                    row["ok"] = False
                    row["why"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                    traceback.print_exc()
                rows.append(row)
                print(json.dumps(row), flush=True)
            del q, k, v
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print()
    print("\n".join(versus_table(rows)))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
