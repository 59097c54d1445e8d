"""Diagnostic (session 15): the 3xTF32 wgmma dQ kernel at d = 128 with its mask tests apart
(``attention_tc_backward.ds_rows_steps(…, APART=True)``: one branch a tile around every test,
dS = 0 where a key is hidden) against element by element (APART=False, the d = 64 form), H200.

    python3 scripts/diag15_apart.py [--json OUT.json] [--shapes 0: indices into SHAPES]

Per shape, not causal and causal: ``attention_backward(..., method="flash_wgmma")`` on float32
torch tensors with the dQ kernel built each way (the factory's APART switched by wrapping
``ds_rows_steps`` and clearing the kernel factory's cache), kernel-only
(``bench.time_gpu_adaptive``) and end to end, beside torch SDPA's efficient backward in the same
process; both forms' gradients against each other (max |difference|: the same sums, so 0 is
expected) and the dQ kernels' registers and local memory. The table comes last.
"""

import flashlesson
from flashlesson import calls
from flashlesson.bench import backward_cases, gpu_torch, save_rows, script_parser, \
    time_end_to_end, time_gpu_adaptive, torch_sdpa_backward
from flashlesson.launch import kernel_resources
from flashlesson.kernels_numba import attention_wgmma_tf32_backward as KWFB

SHAPES = [(1, 16, 8192, 128, "fp32")]


def main():
    args = script_parser(budget=False).parse_args()
    torch = gpu_torch("diag15_apart.py")
    steps, factory = KWFB.ds_rows_steps, KWFB.wgmma_tf32_bwd_dq_kernel
    rows = []
    for B, H, N, d, _, causal, (q, k, v, do), (o, lse) in backward_cases(torch, SHAPES,
                                                                           args.shapes):
        row = {"shape": f"B{B} H{H} N{N} d{d}", "causal": causal}
        grads = {}
        for apart in (False, True):
            calls.forget()
            factory.cache_clear()
            KWFB.ds_rows_steps = lambda *a, apart=apart, **kw: steps(
                *a, **{**kw, "APART": apart})
            try:
                def call():
                    return flashlesson.attention_backward(do, q, k, v, o, lse,
                                                          causal=causal,
                                                          method="flash_wgmma")
                grads[apart] = [g.clone() for g in call()]
                row[f"apart={apart} ms"] = time_gpu_adaptive(call)
                row[f"apart={apart} e2e ms"] = time_end_to_end(call)
                row[f"apart={apart} dq kernel"] = [
                    kernel_resources(kern) for key, kern in KWFB.BUILT.items()
                    if key[0] == "wgmma_tf32_bwd_dq_kernel" and key[1] == d
                    and key[5] == causal]
            finally:
                KWFB.ds_rows_steps = steps
        factory.cache_clear()
        row["max diff"] = max(float((a - b).abs().max())
                              for a, b in zip(grads[False], grads[True]))
        back = torch_sdpa_backward(torch, "efficient", q, k, v, do, causal)
        row["torch ms"] = time_gpu_adaptive(back)
        row["torch e2e ms"] = time_end_to_end(back)
        rows.append(row)
        print(row, flush=True)
        del grads, back
    save_rows(args.json, rows)
    print()
    print(f"{'shape':18} {'c':1} {'torch':>7} {'tests per element':>18} {'apart':>7}  "
          f"× torch: per element → apart (e2e)      max diff")
    for r in rows:
        t0, t1 = r["apart=False ms"], r["apart=True ms"]
        e0, e1 = r["apart=False e2e ms"], r["apart=True e2e ms"]
        print(f"{r['shape']:18} {int(r['causal'])} {r['torch ms']:7.3f} {t0:18.3f} {t1:7.3f}  "
              f"{r['torch ms'] / t0:.3f} → {r['torch ms'] / t1:.3f} "
              f"({r['torch e2e ms'] / e0:.3f} → {r['torch e2e ms'] / e1:.3f})  "
              f"{r['max diff']:.1e}")


if __name__ == "__main__":
    main()
