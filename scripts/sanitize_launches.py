"""Launch every kernel family once on small shapes: the workload of ``scripts/gpu_sanitize.sh``
(compute-sanitizer's racecheck and memcheck, which slow kernels down 10–100×, so a few small
launches, each synchronized; shapes cross tile edges: Nq ≠ Nk, neither a multiple of a tile).

Each launch's result is checked to be finite where it must be (a loose sanity check: the
accuracy is the tests' job). Prints one line per launch; exit status 1 if any launch raised or
gave a non-finite result.

    FLASHLESSON_DEVICE=gpu python3 scripts/sanitize_launches.py [--only softmax,fwd,bwd,tc,...]

Works in the simulator too (``FLASHLESSON_DEVICE=sim``, slow: use ``--only``), which checks
that the script itself runs.
"""

import argparse
import sys
import time
import traceback

import numpy as np

import flashlesson as fl
from numba import cuda


def _dev(*arrays):
    return [cuda.to_device(a) for a in arrays]


def _host(x):
    return x.copy_to_host() if hasattr(x, "copy_to_host") else np.asarray(x)


def launches(rng, small):
    """(group, name, thunk): thunk() runs one public call and returns arrays to check."""
    B, H, NQ, NK, D = (1, 2, 70, 90, 64) if not small else (1, 1, 20, 27, 16)
    q, k, v, do = (rng.standard_normal((B, H, n, D)).astype(np.float32) for n in (NQ, NK, NK, NQ))
    kpm = rng.random((B, NK)) > 0.3
    x = rng.standard_normal((3, 1000 if not small else 100)).astype(np.float32)
    out = []

    for m, meth in fl.SOFTMAX_METHODS.items():
        xm = np.ascontiguousarray(x[:, :meth.max_n or None])   # (warp: a row fits a warp)
        out.append(("softmax", m, lambda m=m, xm=xm: [fl.softmax(cuda.to_device(xm), method=m)]))
    out.append(("softmax", "block fp16",
                lambda: [fl.softmax(cuda.to_device(x.astype(np.float16)), method="block")]))

    qd, kd, vd, dod, kpmd = _dev(q, k, v, do, kpm)
    for m in ("naive", "flash", "flash_fa1", "flash_db"):
        out.append(("fwd", f"{m} causal", lambda m=m: list(
            fl.attention(qd, kd, vd, causal=True, method=m, return_lse=True))))
    out.append(("fwd", "flash pad+dropout+causal", lambda: list(fl.attention(
        qd, kd, vd, causal=True, key_padding_mask=kpmd, dropout_p=0.2, seed=7,
        return_lse=True))))
    out.append(("fwd", "merge", lambda: list(fl.merge_attention(
        np.stack([q, q]), rng.standard_normal((2, B, H, NQ)).astype(np.float32)))))

    def backward(method, **kw):
        o, lse = fl.attention(qd, kd, vd, return_lse=True, **kw)
        return list(fl.attention_backward(dod, qd, kd, vd, o, lse, method=method, **kw))

    out.append(("bwd", "flash causal", lambda: backward("flash", causal=True)))
    out.append(("bwd", "flash pad+dropout", lambda: backward(
        "flash", key_padding_mask=kpmd, dropout_p=0.2, seed=7)))
    out.append(("bwd", "naive causal", lambda: backward("naive", causal=True)))

    lens_q, lens_k = [NQ // 2, NQ - NQ // 2], [NK - 7, 7]
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    pq, pk, pv, pdo = (rng.standard_normal((n, H, D)).astype(np.float32)
                       for n in (NQ, NK, NK, NQ))
    vkw = dict(max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k), causal=True)

    def varlen():
        o, lse = fl.varlen_attention(pq, pk, pv, cu_q, cu_k, return_lse=True, **vkw)
        return [o, lse] + list(fl.varlen_attention_backward(pdo, pq, pk, pv, o, lse, cu_q,
                                                            cu_k, **vkw))
    out.append(("varlen", "forward+backward", varlen))
    out.append(("linear", "causal", lambda: [fl.linear_attention(q, k, v, causal=True)]))

    q16, k16, v16, do16 = (a.astype(np.float16) for a in (q, k, v, do))

    def tc(fmt, config=None, bconfig=None, causal=True):
        if fmt == "bf16":
            args = [fl.BFloat16.from_float32(a) for a in (q, k, v, do)]
        elif fmt == "f16":
            args = [q16, k16, v16, do16]
        else:
            args = [q, k, v, do]
        kw = dict(method="flash_tc") if fmt == "tf32" else {}
        o, lse = fl.attention(*args[:3], causal=causal, return_lse=True, config=config, **kw)
        grads = fl.attention_backward(args[3], *args[:3], o, lse, causal=causal,
                                      config=bconfig, **kw)
        conv = [g.to_float32() if isinstance(g, fl.BFloat16) else g for g in (o, *grads)]
        return conv + [lse]

    out.append(("tc", "f16 default", lambda: tc("f16")))
    out.append(("tc", "f16 ASYNC", lambda: tc("f16", fl.TcConfig(Bc=32, WARPS=2, ASYNC=True),
                                              fl.TcBwdConfig(32, 2, 32, 2, True, True))))
    out.append(("tc", "f16 prefetch, MT=2", lambda: tc("f16", fl.TcConfig(Bc=32, WARPS=2, MT=2,
                                                                          PF=True))))
    out.append(("tc", "bf16 default", lambda: tc("bf16", causal=False)))
    out.append(("tc", "3xTF32", lambda: tc("tf32")))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated groups: softmax,fwd,bwd,varlen,linear,tc")
    ap.add_argument("--small", action="store_true", help="tinier shapes (the simulator)")
    args = ap.parse_args(argv)
    groups = set(args.only.split(",")) if args.only else None
    rng = np.random.default_rng(0)
    print(f"device: {fl.MODE}", flush=True)
    bad = 0
    for group, name, thunk in launches(rng, args.small or fl.SIMULATOR):
        if groups is not None and group not in groups:
            continue
        t0 = time.time()
        try:
            res = [_host(r) for r in thunk()]
            cuda.synchronize()
            # NaN or +inf is wrong everywhere (−inf is an LSE of a row that sees no key)
            ok = not any(r.dtype.kind == "f" and (np.isnan(r).any() or np.isposinf(r).any())
                         for r in res)
            status = "ok" if ok else "NON-FINITE"
        except Exception:               # a launch that raises is reported, the others still run
            traceback.print_exc()
            status = "RAISED"
        bad += status != "ok"
        print(f"{group:8s} {name:28s} {status:10s} {time.time() - t0:6.1f} s", flush=True)
    print("all launches ok" if not bad else f"{bad} launch(es) failed", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
