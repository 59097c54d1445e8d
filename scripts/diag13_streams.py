"""Diagnostic (session 12): would the backward gain from running its dK/dV and dQ kernels side by
side on two streams? They read the same inputs and write disjoint outputs, so once the
preprocess has run they are independent; run back to back on one stream, each one's last wave
leaves SMs idle (the tail), which the other could fill.

    python3 scripts/diag13_streams.py [--json OUT.json] [--shapes 1,2: indices into CASES]

Per case: the public call's launches are recorded once (call plans off, so the launches are
seen; launch.SIDE off: the public call forks them itself since this session), then
replayed three ways and timed kernel-only (``bench.time_gpu_adaptive``: launches
queued behind a sleeping kernel): one stream ("seq"); the last two launches forked to the
side stream after the preprocess and joined back (``launch.pair_on``, the public call's own
fork; run 2 of session 12 forked by torch's Stream and Event, the same pattern) ("fork":
dK/dV first; "fork dq first"); also each of the two alone, and each launch
before them (the preprocess; float32: the packing and the D kernel) alone. torch SDPA's
backward (flash for fp16, efficient for float32) in the same process for the ratio. The
replays write the same outputs as the recorded call; the fork's gradients are compared
bitwise with the sequential ones. The table comes last.
"""

import json

import flashlesson
from flashlesson import arrays, calls, launch
from flashlesson.bench import cuda_torch, picked_shapes, script_parser, time_gpu_adaptive, \
    torch_sdpa_backward
from flashlesson.reference.attention_backward import attention_backward_flops

CASES = [(4, 16, 1024, 64, "fp16"), (2, 16, 4096, 64, "fp16"), (1, 16, 8192, 128, "fp16"),
         (4, 16, 1024, 64, "fp32"), (2, 16, 4096, 64, "fp32"), (1, 16, 8192, 128, "fp32")]


def main():
    args = script_parser(budget=False).parse_args()      # --json, --shapes (into CASES)
    torch = cuda_torch()
    calls.ENABLED = False
    rows = []
    for B, H, N, d, fmt in picked_shapes(CASES, args.shapes):
        dt = torch.float16 if fmt == "fp16" else torch.float32
        for causal in (False, True):
            q, k, v, do = (torch.randn(B, H, N, d, device="cuda", dtype=dt) for _ in range(4))
            o, lse = flashlesson.attention(q, k, v, causal=causal, return_lse=True)
            events = []
            method = "flash_wgmma"
            launch.SIDE = False         # (the recorded call on one stream)
            with arrays.recording_into(events):
                grads = flashlesson.attention_backward(do, q, k, v, o, lse, causal=causal,
                                                       method=method)
            launch.SIDE = True          # (pair_on forks)
            steps = []                  # (the pair is noted as one "beside" event, SIDE
            for kind, e in events:      #  off or on: its two launches, in order)
                if kind == "launch":
                    steps.append(e)
                elif kind == "beside":
                    steps.extend(e)
            head, (a, b) = steps[:-2], steps[-2:]
            torch.cuda.synchronize()
            ref = [g.clone() for g in grads]

            def seq():
                for plan, xs in steps:
                    plan(xs, 0)

            def fork(first, second):
                def run():
                    for plan, xs in head:
                        plan(xs, 0)
                    launch.pair_on(0, *first, *second)
                return run

            def alone(step):
                def run():
                    for plan, xs in head:
                        plan(xs, 0)
                    step[0](step[1], 0)
                return run

            for g in grads:
                g.fill_(float("nan"))
            fork(a, b)()
            torch.cuda.synchronize()
            same = all(torch.equal(g, r) for g, r in zip(grads, ref))
            t_torch = time_gpu_adaptive(torch_sdpa_backward(
                torch, "flash" if fmt == "fp16" else "efficient", q, k, v, do, causal))
            t = {"seq": time_gpu_adaptive(seq), "fork": time_gpu_adaptive(fork(a, b)),
                 "fork dq first": time_gpu_adaptive(fork(b, a)),
                 "pre+dkdv": time_gpu_adaptive(alone(a)), "pre+dq": time_gpu_adaptive(alone(b)),
                 "head": time_gpu_adaptive(lambda: [p(x, 0) for p, x in head])}
            for n, (p_, x_) in enumerate(head):           # each launch before the pair alone
                t[f"head {n} {p_.name}"] = time_gpu_adaptive(lambda p_=p_, x_=x_: p_(x_, 0))
            flops = attention_backward_flops(B, H, N, N, d, causal)
            row = {"shape": f"B{B} H{H} N{N} d{d} {fmt}", "causal": causal, "bitwise": same,
                   "torch_ms": t_torch, **{k_: v_ for k_, v_ in t.items()},
                   "tflops_fork": flops / t["fork"] / 1e9}
            rows.append(row)
            print(row, flush=True)
            del grads, ref
    for r in rows:
        print(r["shape"], int(r["causal"]), "  ".join(f"{k_} {v_:.3f}" for k_, v_ in r.items()
                                                     if k_.startswith("head ")))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print()
    print(f"{'shape':28} {'c':1} {'torch':>7} {'seq':>7} {'fork':>7} {'dq1st':>7} {'dkdv':>7} "
          f"{'dq':>7} {'head':>6}  seq×  fork×  bitwise")
    for r in rows:
        print(f"{r['shape']:28} {int(r['causal'])} {r['torch_ms']:7.3f} {r['seq']:7.3f} "
              f"{r['fork']:7.3f} {r['fork dq first']:7.3f} {r['pre+dkdv']:7.3f} "
              f"{r['pre+dq']:7.3f} {r['head']:6.3f}  {r['torch_ms'] / r['seq']:.2f}  "
              f"{r['torch_ms'] / min(r['fork'], r['fork dq first']):.2f}  {r['bitwise']}")


if __name__ == "__main__":
    main()
