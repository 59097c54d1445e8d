"""Diagnostic (session 15): the backward's first launch, D_i = Σ_c dO_ic·O_ic (one thread a row),
read 16 bytes a load (VEC) against a word a load, H200.

    python3 scripts/diag15_drows.py [--json OUT.json] [--shapes 0,1,…: indices into CASES]

Per case — fp16: ``attention_tc_backward.tc_bwd_preprocess(LSE2=True)``, the wgmma backward's
first launch; float32: ``attention_wgmma_tf32_backward.stats_kernel``, the 3xTF32 wgmma
backward's D and LSE launch — each form alone, kernel-only (``bench.time_gpu_adaptive``), with
its bytes per second (O and dO read once, D and the LSE column written) and whether both forms
write the same bits. Then the public backward (the default method for fp16, "flash_wgmma"
for float32 — run 3 of session 15 ran float32's default, the CUDA-core flash, whose D launch
is another; torch tensors in, call plans on) with the factory's VEC forced off and as it is, kernel-only and end to end
(``bench.time_end_to_end``), beside torch SDPA's backward (flash for fp16, efficient for float32)
in the same process, ours checked bitwise off against on. The table comes last.
"""

import numpy as np

import flashlesson  # noqa: I001 - first: it picks the device before numba.cuda is imported
from flashlesson import calls
from flashlesson.bench import backward_cases, gpu_torch, save_rows, script_parser, \
    time_end_to_end, time_gpu_adaptive, torch_sdpa_backward
from flashlesson.launch import stride_grid
from flashlesson.kernels_numba import attention_tc_backward as KB
from flashlesson.kernels_numba import attention_wgmma_tf32_backward as KWFB
from numba import cuda
from flashlesson.reference.attention_backward import attention_backward_flops

CASES = [(4, 16, 1024, 64, "fp16"), (2, 16, 4096, 64, "fp16"), (1, 16, 8192, 128, "fp16"),
         (4, 16, 1024, 64, "fp32"), (2, 16, 4096, 64, "fp32"), (1, 16, 8192, 128, "fp32")]


def d_kernels(torch, B, H, N, d, fmt, o, do, lse):
    """Each form of the D launch alone: {vec: ms}, GB/s, same bits."""
    rows = B * H * N
    times, outs = {}, {}
    for vec in (False, True):
        if fmt == "fp16":
            o2, do2 = (cuda.as_cuda_array(x.reshape(rows, d)).view(np.uint32)
                       for x in (o, do))          # (words: pairs of halves)
            dvec, lse2 = (torch.full((rows,), float("nan"), device="cuda") for _ in range(2))
            kern = KB.tc_bwd_preprocess(False, LSE2=True, VEC=vec)
            grid = stride_grid(rows)
            args = (o2, do2, dvec, lse.reshape(rows), lse2)

            def run(kern=kern, grid=grid, args=args):
                kern[grid](*args)
            outs[vec] = (dvec, lse2)
            written = 2 * rows * 4
        else:
            pad = KWFB.pad_rows(N)
            lse_p, d_p = (torch.full((B * H, pad), float("nan"), device="cuda")
                          for _ in range(2))
            kern = KWFB.stats_kernel(vec)
            args = (o.reshape(rows, d), do.reshape(rows, d), lse.reshape(B * H, N), lse_p, d_p,
                    N)

            def run(kern=kern, args=args, pad=pad):
                kern[(pad // 128, B * H), 128](*args)
            outs[vec] = (d_p, lse_p)
            written = 2 * B * H * pad * 4
        run()
        torch.cuda.synchronize()
        times[vec] = time_gpu_adaptive(run)
    same = all(torch.equal(a.view(torch.int32), b.view(torch.int32))
               for a, b in zip(outs[False], outs[True]))
    nbytes = 2 * o.numel() * o.element_size() + written
    return times, {v: nbytes / t / 1e6 for v, t in times.items()}, same


def main():
    args = script_parser(budget=False).parse_args()      # --json, --shapes (into CASES)
    torch = gpu_torch("diag15_drows.py")
    pre, stats = KB.tc_bwd_preprocess, KWFB.stats_kernel
    rows = []
    for B, H, N, d, fmt, causal, (q, k, v, do), (o, lse) in backward_cases(torch, CASES,
                                                                             args.shapes):
        t_d, gbs, same_d = d_kernels(torch, B, H, N, d, fmt, o, do, lse)
        t, grads = {}, {}
        method = {"method": "flash_wgmma"} if fmt == "fp32" else {}
        for vec in (False, True):
            calls.forget()          # (a plan recorded with the other form is not replayed)
            if not vec:             # the factories' VEC forced off
                KB.tc_bwd_preprocess = lambda *a, **kw: pre(*a, **{**kw, "VEC": False})
                KWFB.stats_kernel = lambda vec_: stats(False)
            try:
                def call():             # (float32: the 3xTF32 wgmma backward, whose D
                    return flashlesson.attention_backward(   # launch is stats_kernel)
                        do, q, k, v, o, lse, causal=causal, **method)
                grads[vec] = [g.clone() for g in call()]
                t[vec] = (time_gpu_adaptive(call), time_end_to_end(call))
            finally:
                KB.tc_bwd_preprocess, KWFB.stats_kernel = pre, stats
        same = all(torch.equal(a, b) for a, b in zip(grads[False], grads[True]))
        back = torch_sdpa_backward(torch, "flash" if fmt == "fp16" else "efficient",
                                   q, k, v, do, causal)
        t_torch = (time_gpu_adaptive(back), time_end_to_end(back))
        flops = attention_backward_flops(B, H, N, N, d, causal)
        row = {"shape": f"B{B} H{H} N{N} d{d} {fmt}", "causal": causal,
               "D ms word": t_d[False], "D ms 16B": t_d[True], "D GB/s word": gbs[False],
               "D GB/s 16B": gbs[True], "D bitwise": same_d,
               "torch ms": t_torch[0], "torch e2e ms": t_torch[1],
               "word ms": t[False][0], "word e2e ms": t[False][1],
               "16B ms": t[True][0], "16B e2e ms": t[True][1], "grads bitwise": same,
               "16B TFLOP/s": flops / t[True][0] / 1e9}
        rows.append(row)
        print(row, flush=True)
        del grads, back
    save_rows(args.json, rows)
    print()
    print(f"{'shape':24} {'c':1} {'D word':>7} {'D 16B':>7} {'GB/s':>11} {'same':>5}  "
          f"{'torch':>7} {'word':>7} {'16B':>7}  × torch word → 16B (e2e)        grads same")
    for r in rows:
        tw, t16 = r["torch ms"] / r["word ms"], r["torch ms"] / r["16B ms"]
        ew, e16 = r["torch e2e ms"] / r["word e2e ms"], r["torch e2e ms"] / r["16B e2e ms"]
        print(f"{r['shape']:24} {int(r['causal'])} {r['D ms word']:7.4f} {r['D ms 16B']:7.4f} "
              f"{r['D GB/s word']:5.0f}→{r['D GB/s 16B']:5.0f} {str(r['D bitwise']):>5}  "
              f"{r['torch ms']:7.3f} {r['word ms']:7.3f} {r['16B ms']:7.3f}  "
              f"{tw:.3f} → {t16:.3f} ({ew:.3f} → {e16:.3f})  {r['grads bitwise']}")


if __name__ == "__main__":
    main()
