"""Quick GPU check of the launch layer (``flashlesson.launch``, ``flashlesson.calls``), < 60 s on
an H200:

1. both launch paths (the fast cuda.core path and Numba's call, FLASHLESSON_FAST_LAUNCH=0
   equivalent) agree bitwise with each other and with torch (within the dtype's error) on a
   few shapes: softmax fp32/fp16, attention forward fp32/fp16/bf16 (causal and not), backward;
   the fast side is each call's second call, replayed from its call plan through packed
   launches (``flashlesson.calls``), and equals its first call bitwise too;
2. host µs per call next to torch's (``flashlesson.bench.bench_overhead``);
3. a flashlesson.torch forward + backward captured in a CUDA graph, replayed on new inputs,
   equals the eager step.

Exits 1 on any mismatch (or if the fast path turned itself off), prints one line per check.

    FLASHLESSON_DEVICE=gpu python3 scripts/gpu_overhead_check.py [--json F]
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

# this script is the GPU check of call plans (flashlesson.calls), off by default until it passes
os.environ.setdefault("FLASHLESSON_CALL_PLANS", "1")

import torch  # noqa: E402

import flashlesson as fl  # noqa: E402
from flashlesson import bench, calls, launch  # noqa: E402

FAILS = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        FAILS.append(what)


def both_paths(fn):
    """fn() under the fast path and under Numba's call; returns (fast, numba) results."""
    out = {}
    for fast in (True, False):
        launch.FAST = fast
        launch.clear_plans()
        r = fn()
        out[fast] = [t.clone() for t in (r if isinstance(r, tuple) else (r,))]
        if fast:                                # the second call replays the recorded one
            r = fn()
            out["replay"] = [t.clone() for t in (r if isinstance(r, tuple) else (r,))]
    launch.FAST = True
    launch.clear_plans()
    check(all(torch.equal(a, b) for a, b in zip(out[True], out["replay"])),
          "  replayed call (flashlesson.calls) == its first call (bitwise)")
    return out["replay"], out[False]


def compare(name, fn, ref, tol):
    fast, slow = both_paths(fn)
    same = all(torch.equal(a, b) for a, b in zip(fast, slow))
    check(same, f"{name}: fast path == Numba's call (bitwise)")
    r = ref()
    refs = r if isinstance(r, tuple) else (r,)
    for i, (a, r) in enumerate(zip(fast, refs)):
        err = (a.double() - r.double()).abs().max().item()
        scale = max(r.double().abs().max().item(), 1.0)
        check(err <= tol * scale and a.dtype == r.dtype,
              f"{name}[{i}]: {a.dtype}, max err {err:.2e} vs torch (bar {tol * scale:.1e})")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="write the overhead records here")
    args = ap.parse_args(argv)
    t0 = time.time()
    g = torch.Generator(device="cuda").manual_seed(1)
    F = torch.nn.functional
    for dt, tol in ((torch.float32, 1e-5), (torch.float16, 2e-3)):
        x = torch.randn(37, 1000, device="cuda", generator=g).to(dt) * 3
        compare(f"softmax {dt}", lambda: fl.softmax(x), lambda: torch.softmax(x.float(), -1)
                .to(dt), tol)
    for dt, tol in ((torch.float32, 2e-5), (torch.float16, 4e-3), (torch.bfloat16, 3e-2)):
        for causal, (nq, nk) in ((False, (100, 130)), (True, (128, 128))):
            q = torch.randn(2, 3, nq, 64, device="cuda", generator=g).to(dt)
            k, v = (torch.randn(2, 3, nk, 64, device="cuda", generator=g).to(dt)
                    for _ in range(2))

            def ref():
                o = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                   is_causal=causal)
                return o.to(dt)
            compare(f"attention {dt} causal={causal} Nq={nq} Nk={nk}",
                    lambda: fl.attention(q, k, v, causal=causal), ref, tol)
        q, k, v, do = (torch.randn(1, 2, 128, 64, device="cuda", generator=g).to(dt)
                       for _ in range(4))

        def bwd():
            o, lse = fl.attention(q, k, v, causal=True, return_lse=True)
            return fl.attention_backward(do, q, k, v, o, lse, causal=True)

        def bwd_ref():
            t = [a.float().requires_grad_() for a in (q, k, v)]
            F.scaled_dot_product_attention(*t, is_causal=True).backward(do.float())
            return tuple(a.grad.to(dt) for a in t)
        compare(f"attention_backward {dt} causal", bwd, bwd_ref, 5 * tol)

    records = bench.bench_overhead(calls=100)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)

    # CUDA graph: flashlesson.torch forward + backward captured and replayed
    from flashlesson.torch import scaled_dot_product_attention as sdpa
    static = [torch.randn(1, 2, 128, 64, device="cuda", generator=g).requires_grad_()
              for _ in range(3)]
    sdo = torch.randn(1, 2, 128, 64, device="cuda", generator=g)

    def step():
        for t in static:
            t.grad = None
        out = sdpa(*static, is_causal=True)
        out.backward(sdo)
        return out
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            step()
            step()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            sout = step()
        sgrads = [t.grad for t in static]
        new = [torch.randn_like(t) for t in static]
        with torch.no_grad():
            for t, n in zip(static, new):
                t.copy_(n)
        graph.replay()
        torch.cuda.synchronize()
        eager = [n.clone().requires_grad_() for n in new]
        out = sdpa(*eager, is_causal=True)
        out.backward(sdo)
        same = torch.equal(sout, out) and all(torch.equal(a, b.grad)
                                              for a, b in zip(sgrads, eager))
        check(same, "CUDA graph: flashlesson.torch forward+backward replay == eager")
    except Exception as exc:                    # noqa: BLE001 - reported as a failure
        check(False, f"CUDA graph capture raised {exc!r}")
    check(launch.fast_state() is None, f"fast launch path still on ({launch.fast_state()})")
    check(calls.STATS["replayed"] > 0, f"calls replayed from their call plans ({calls.STATS})")
    check(launch.packed_state() == "ok", f"packed launches in use ({launch.packed_state()}; "
          "FLASHLESSON_PACKED_LAUNCH=0 turns them off)")
    print(f"{len(FAILS)} failure(s), {time.time() - t0:.1f} s")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
