"""Check the error model of ``flashlesson.tolerance`` against many seeds: observed max error /
bound, per case. Every ratio must stay below 1 / SAFETY (≤ 0.5); the module docstring quotes
this script's output.

The kernels' float32 arithmetic is emulated in NumPy, one rounding at a time, as the GPU
does it (the simulator computes in float64 and would understate the error):
  - S = Q Kᵀ·scale: products and sums over d in float32, one term at a time (no FMA: one more
    rounding than the GPU, so the emulation errs on the high side);
  - the tiled online softmax over Bc-wide K/V tiles: m, l, acc in float32, acc and l rescaled
    by correction = e^{m_old − m_new} once a tile; e^x as ex2.approx(x·log₂e) with a random
    relative error of up to 2^-22.5 (PTX's bound for ex2.approx.f32);
  - fp16/bf16: P rounded to 16 bits before P·V (l keeps the float32 P), O rounded on output;
  - softmax rows: one float32 pass of max, e^{x−m} (same e^x), sum, divide;
  - the backward (FA2 order) from the emulated forward's O and LSE: P = e^{S − LSE} (S rebuilt
    as above), dP = dO Vᵀ, D = rowsum(dO∘O), dS = P∘(dP − D), dV = Pᵀ dO, dK = dSᵀ Q·scale,
    dQ = dS K·scale, each sum one term at a time; fp16/bf16: P and dS rounded to 16 bits.

    python3 scripts/tolerance_check.py [--seeds 200] [--big]

``--big`` adds the GPU shape of §42 (B=1 H=4 Nq=500 Nk=2000 d=128, causal, Q row 0 × 30)
and a 1000 × 1000 causal backward: about a minute.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from flashlesson import tolerance  # noqa: E402
from flashlesson.reference import attention, attention_backward_intermediates, causal_mask, \
    linear_attention, merge_attention, softmax_stable  # noqa: E402

F32 = np.float32
LOG2E = F32(np.log2(np.e))


def ex2_exp(x, rng):
    """e^x as the GPU's __expf: ex2.approx(x·log₂e), float32, with ex2's ≤ 2^-22.5 error."""
    t = (x.astype(F32) * LOG2E).astype(F32)
    with np.errstate(over="ignore"):
        r = np.exp2(t.astype(np.float64)) * (1 + rng.uniform(-1, 1, t.shape) * 2 ** -22.5)
    return r.astype(F32)


def round16(x, half):
    if half == "float16":
        return x.astype(np.float16).astype(F32)
    b = x.astype(F32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16          # round to nearest even
    return b.astype(np.uint32).view(F32)


def dot_rows(a, b):
    """a bᵀ in float32, Σ_t a_t b_t one product and one sum rounded at a time."""
    s = np.zeros((a.shape[0], b.shape[0]), F32)
    for t in range(a.shape[1]):
        s = (s + (a[:, t:t + 1] * b[None, :, t]).astype(F32)).astype(F32)
    return s


def emulate_forward(q, k, v, causal, Bc, rng, half=None, scale=None):
    """Tiled float32 forward of one head: q [Nq, d], k, v [Nk, d] → (O, LSE) float32."""
    nq, d = q.shape
    nk = k.shape[0]
    scale = F32(d ** -0.5 if scale is None else scale)
    s = (dot_rows(q, k) * scale).astype(F32)
    if causal:
        s = np.where(causal_mask(nq, nk), s, F32(-np.inf))
    m = np.full(nq, -np.inf, F32)
    l = np.zeros(nq, F32)
    acc = np.zeros((nq, d), F32)
    for j0 in range(0, nk, Bc):
        st = s[:, j0:j0 + Bc]
        new_m = np.maximum(m, st.max(axis=1))
        safe = np.where(np.isneginf(new_m), F32(0), new_m)
        corr = ex2_exp((m - safe).astype(F32), rng)
        p = ex2_exp((st - safe[:, None]).astype(F32), rng)
        l = (l * corr).astype(F32)
        acc = (acc * corr[:, None]).astype(F32)
        pv = round16(p, half) if half else p
        for jj in range(st.shape[1]):
            l = (l + p[:, jj]).astype(F32)
            acc = (acc + (pv[:, jj:jj + 1] * v[None, j0 + jj]).astype(F32)).astype(F32)
        m = new_m
    inv = np.where(l > 0, (F32(1) / np.where(l > 0, l, F32(1))).astype(F32), F32(0))
    o = (acc * inv[:, None]).astype(F32)
    if half:
        o = round16(o, half)
    with np.errstate(divide="ignore"):
        lse = (m + np.log(l.astype(np.float64)).astype(F32)).astype(F32)
    return o, lse


def emulate_backward(q, k, v, do, o, lse, causal, rng, half=None, scale=None):
    """Float32 backward of one head (FA2 order): P = e^{S − LSE} (S rebuilt as the forward
    did, one rounding a product and a sum), dP = dO Vᵀ, D = rowsum(dO∘O), dS = P∘(dP − D),
    dV = Pᵀ dO, dK = dSᵀ Q·scale, dQ = dS K·scale, every sum one term at a time; fp16/bf16:
    P and dS rounded to 16 bits before their products. → (dq, dk, dv) float32."""
    nq, d = q.shape
    nk = k.shape[0]
    scale = F32(d ** -0.5 if scale is None else scale)
    s = (dot_rows(q, k) * scale).astype(F32)
    fin = np.isfinite(lse)
    p = ex2_exp((s - np.where(fin, lse, F32(0))[:, None]).astype(F32), rng)
    vis = np.ones((nq, nk), bool) if not causal else causal_mask(nq, nk)
    p = np.where(vis & fin[:, None], p, F32(0))
    dp = dot_rows(do, v)
    dd = np.zeros(nq, F32)
    for c in range(d):
        dd = (dd + (do[:, c] * o[:, c]).astype(F32)).astype(F32)
    ds = (p * (dp - dd[:, None]).astype(F32)).astype(F32)
    pm, dsm = (round16(p, half), round16(ds, half)) if half else (p, ds)
    dv = np.zeros((nk, d), F32)
    dk = np.zeros((nk, d), F32)
    for i in range(nq):
        dv = (dv + (pm[i][:, None] * do[i][None, :]).astype(F32)).astype(F32)
        dk = (dk + (dsm[i][:, None] * q[i][None, :]).astype(F32)).astype(F32)
    dq = np.zeros((nq, d), F32)
    for j in range(nk):
        dq = (dq + (dsm[:, j:j + 1] * k[j][None, :]).astype(F32)).astype(F32)
    return (dq * scale).astype(F32), (dk * scale).astype(F32), dv


def emulate_softmax(x, rng):
    m = x.max(axis=1)
    e = ex2_exp((x - m[:, None]).astype(F32), rng)
    lsum = np.zeros(x.shape[0], F32)
    for j in range(x.shape[1]):
        lsum = (lsum + e[:, j]).astype(F32)
    return (e * (F32(1) / lsum)[:, None]).astype(F32)


def emulate_phi(x, rng):
    """φ(x) = elu(x) + 1 in float32: x + 1 (one rounding) for x > 0, else __expf(x)."""
    return np.where(x > 0, (x + F32(1)).astype(F32), ex2_exp(np.minimum(x, F32(0)), rng))


def emulate_linear(q, k, v, causal, rng, splits=2):
    """Linear attention of one head in float32, as kernels_numba/linear_attention.py: the
    state KV' = φ(K)ᵀ[V | 1] summed one key at a time (``splits`` partial states, then their
    sum; causal: one prefix, each query answered from the state after its last key), then
    φ(q)·KV' one row of D at a time and num / den. → O float32 [Nq, d]."""
    nq, d = q.shape
    nk = k.shape[0]
    fq, fk = emulate_phi(q, rng), emulate_phi(k, rng)
    v1 = np.concatenate([v, np.ones((nk, 1), F32)], axis=1)

    def answer(state, rows):
        acc = np.zeros((len(rows), d + 1), F32)
        for a in range(d):
            acc = (acc + (fq[rows, a:a + 1] * state[a][None, :]).astype(F32)).astype(F32)
        den = np.where(acc[:, d] > 0, acc[:, d], F32(1))
        return np.where(acc[:, d:] > 0, (acc[:, :d] / den[:, None]).astype(F32), F32(0))

    o = np.zeros((nq, d), F32)
    if not causal:
        state = np.zeros((d, d + 1), F32)
        for part in np.array_split(np.arange(nk), splits):
            s = np.zeros((d, d + 1), F32)
            for j in part:
                s = (s + (fk[j][:, None] * v1[j][None, :]).astype(F32)).astype(F32)
            state = (state + s).astype(F32)
        return answer(state, np.arange(nq))
    state = np.zeros((d, d + 1), F32)
    for j in range(nk):
        state = (state + (fk[j][:, None] * v1[j][None, :]).astype(F32)).astype(F32)
        i = j - (nk - nq)                       # the query whose last visible key is j
        if 0 <= i < nq:
            o[i] = answer(state, [i])[0]
    return o


def linear_case(rng, b, h, nq, nk, d, causal):
    """max error / bound of the emulated linear attention against the float64 oracle."""
    q, k, v = (rng.standard_normal((b, h, n, d)).astype(F32) for n in (nq, nk, nk))
    o = np.empty((b, h, nq, d), F32)
    for i in range(b):
        for j in range(h):
            o[i, j] = emulate_linear(q[i, j], k[i, j], v[i, j], causal, rng)
    want = linear_attention(q, k, v, causal)
    return float(ratio(np.abs(o - want), tolerance.linear_attention_tol(q, k, v,
                                                                         causal=causal)).max())


def merge_case(rng, parts, rows, d, spread):
    """(o, lse) max error / bound of an emulated float32 merge_attention (§22)."""
    o_parts = rng.standard_normal((parts, rows, d)).astype(F32)
    lse = (rng.standard_normal((parts, rows)) * spread).astype(F32)
    big = lse.max(axis=0)
    e = ex2_exp((lse - big).astype(F32), rng)
    total = np.zeros(rows, F32)
    for p in range(parts):
        total = (total + e[p]).astype(F32)
    inv = (F32(1) / total).astype(F32)
    o = np.zeros((rows, d), F32)
    for p in range(parts):
        w = (e[p] * inv).astype(F32)
        o = (o + (w[:, None] * o_parts[p]).astype(F32)).astype(F32)
    log = np.log(total.astype(np.float64)).astype(F32)       # logf: correctly rounded here
    got_lse = (big + log).astype(F32)
    o_ref, lse_ref = merge_attention(o_parts, lse)
    tol = tolerance.merge_tol(o_parts, lse)
    return (float(ratio(np.abs(o - o_ref), tol.o).max()),
            float(ratio(np.abs(got_lse - lse_ref), tol.lse).max()))


def ratio(err, bound):
    """err / bound elementwise; 0 where both are 0 (a row that sees no key: O = 0 exactly)."""
    err, bound = np.broadcast_arrays(err, bound)
    out = np.where(err == 0, 0.0, np.inf)
    np.divide(err, bound, out=out, where=bound > 0)
    return out


def attention_case(rng, b, h, nq, nk, d, causal, Bc, half=None, boost=4.0):
    q, k, v = (rng.standard_normal((b, h, n, d)).astype(F32) for n in (nq, nk, nk))
    q[..., 0, :] *= boost
    if half:
        q, k, v = (round16(x, half) for x in (q, k, v))
    o = np.empty_like(q)
    lse = np.empty(q.shape[:3], F32)
    for i in range(b):
        for j in range(h):
            o[i, j], lse[i, j] = emulate_forward(q[i, j], k[i, j], v[i, j], causal, Bc, rng, half)
    o_ref, lse_ref, p = attention(q.astype(np.float64), k.astype(np.float64),
                                  v.astype(np.float64), causal=causal, return_p=True)
    tol = tolerance.attention_tol(q, k, v, dtype=half or "float32", p=p, o=o_ref)
    ratio_o = ratio(np.abs(o - o_ref), tol.o)
    fin = np.isfinite(lse_ref)
    ratio_l = ratio(np.abs(lse[fin] - lse_ref[fin]), np.broadcast_to(tol.lse, lse.shape)[fin])
    return float(ratio_o.max()), float(ratio_o[..., 0, :].max()), float(ratio_l.max(initial=0))


def grad_ratios(grads, refs, tol, extra=(0.0, 0.0, 0.0)):
    """error / bound per gradient, as tests/conftest's checks measure (tolerance.backward_errors;
    a gradient that vanishes analytically against 1e-3 of the problem's largest; extra: the
    16-bit backward's rounded_o_tol, element by element)."""
    floor = 1e-3 * max(np.max(np.abs(r)) for r in refs)
    return [e / tol for e in tolerance.backward_errors(grads, refs, tol, extra, (floor,) * 3)]


def backward_case(rng, b, h, nq, nk, d, causal, Bc, half=None, outliers=0, scale=None):
    """(worst of dq, dk, dv) error / bound of the emulated backward, given the emulated
    forward's O and LSE (the tests give the oracle's, rounded: smaller errors)."""
    q, k, v, do = (rng.standard_normal((b, h, n, d)).astype(F32) for n in (nq, nk, nk, nq))
    if outliers:
        q[..., 0, :] *= outliers
        k[..., -1, :] *= outliers
    if half:
        q, k, v, do = (round16(x, half) for x in (q, k, v, do))
    grads = [np.empty_like(x) for x in (q, k, v)]
    for i in range(b):
        for j in range(h):
            o, lse = emulate_forward(q[i, j], k[i, j], v[i, j], causal, Bc, rng, half, scale)
            if half:
                o = o.astype(F32)           # the tc backward gets O in fp16; D from it
            g = emulate_backward(q[i, j], k[i, j], v[i, j], do[i, j], o, lse, causal, rng,
                                 half, scale)
            for gg, x in zip(grads, g):
                gg[i, j] = x
    x64 = [x.astype(np.float64) for x in (do, q, k, v)]
    ref = attention_backward_intermediates(*x64, causal=causal, scale=scale)
    refs = ref["dq"], ref["dk"], ref["dv"]
    tol = tolerance.backward_tol(q, k, v, do, scale=scale, dtype=half or "float32")
    extra = (0.0, 0.0, 0.0)
    if half:
        extra = tolerance.rounded_o_tol(ref["P"], ref["O"], x64[1], x64[2], x64[0],
                                        scale=scale, dtype=half)
    return grad_ratios(grads, refs, tol, extra)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--big", action="store_true")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(12345)
    rows = []

    worst = worst32 = 0.0
    for n in (7, 33, 1000, 4096):
        r = 0.0
        for _ in range(max(args.seeds // 10, 3)):
            x = (rng.standard_normal((8, n)) * 3).astype(F32)
            x[0] += 1000
            x[np.arange(8), rng.integers(0, n, 8)] += 20
            want = softmax_stable(x.astype(np.float64))
            for half in (None, "float16"):
                got = emulate_softmax(x, rng)
                if half:
                    got = got.astype(np.float16).astype(F32)
                rtol, atol = tolerance.softmax_tol(n, half or "float32")
                r = max(r, float(np.max(np.abs(got - want) / (atol + rtol * np.abs(want)))))
        rows.append((f"softmax n={n} (f32 and f16)", r, float("nan"), float("nan")))
        worst = max(worst, r)

    cases = [(1, 2, 21, 35, 32, False, 16), (1, 1, 37, 9, 16, True, 16),
             (1, 2, 40, 50, 16, True, 16), (1, 1, 64, 300, 64, False, 64)]
    if args.big:
        cases.append((1, 4, 500, 2000, 128, True, 64))
    for shape in cases:
        for half, boost in ((None, 4.0), (None, 30.0), ("float16", 4.0), ("bfloat16", 4.0)):
            seeds = args.seeds if shape[2] * shape[3] < 5000 else max(args.seeds // 50, 2)
            if args.big and shape[3] == 2000:
                seeds = 2
            got = np.zeros(3)
            for _ in range(seeds):
                got = np.maximum(got, attention_case(rng, *shape, half=half, boost=boost))
            rows.append((f"attention {shape[:5]}{' causal' if shape[5] else ''} "
                         f"{half or 'float32'} Q0×{boost:g}", *got))
            worst = max(worst, got.max())
            if half is None:
                worst32 = max(worst32, got.max())
    bwd_cases = [((1, 2, 20, 20, 16), False, 0, None), ((2, 1, 17, 5, 80), True, 0, None),
                 ((1, 1, 5, 33, 3), False, 0, None), ((1, 1, 45, 45, 24), True, 0, None),
                 ((1, 2, 24, 19, 8), False, 5, 0.7), ((1, 2, 24, 19, 8), False, 30, 0.7),
                 ((1, 1, 100, 100, 64), False, 0, None), ((1, 1, 257, 130, 80), True, 0, None),
                 ((1, 1, 77, 300, 96), False, 0, None), ((1, 1, 200, 65, 256), True, 0, None),
                 ((1, 2, 9, 13, 1), True, 0, None)]
    if args.big:
        bwd_cases.append(((1, 1, 1000, 1000, 64), True, 0, None))
    bwd_rows = []
    for shape, causal, outliers, scale in bwd_cases:
        for half in (None, "float16", "bfloat16"):
            if half and outliers:
                continue        # (the tensor-core backward's tests have no outlier rows)
            size = shape[2] * shape[3]
            seeds = args.seeds // 10 if size < 5000 else max(args.seeds // 100, 1)
            got = np.zeros(3)
            for _ in range(max(seeds, 1)):
                got = np.maximum(got, backward_case(rng, *shape, causal, 16, half, outliers,
                                                    scale))
            bwd_rows.append((f"backward {shape}{' causal' if causal else ''}"
                             f"{f' outliers ×{outliers}' if outliers else ''} {half or 'float32'}",
                             *got))
            worst = max(worst, got.max())
            if half is None:
                worst32 = max(worst32, got.max())
    lin_cases = [(1, 2, 13, 13, 16, False), (1, 2, 13, 13, 16, True), (2, 1, 9, 9, 40, True),
                 (1, 1, 17, 17, 3, False), (1, 1, 7, 11, 24, True), (1, 1, 11, 7, 24, True),
                 (1, 1, 300, 300, 64, False), (1, 1, 300, 300, 64, True)]
    if args.big:
        lin_cases += [(1, 1, 1000, 1000, 64, False), (1, 1, 1000, 1000, 64, True),
                      (1, 1, 4097, 4097, 3, False), (1, 1, 1500, 1500, 128, False)]
    lin_rows = []
    for shape in lin_cases:
        size = shape[2] * shape[3]
        seeds = args.seeds // 10 if size < 5000 else max(args.seeds // 100, 1)
        r = max(linear_case(rng, *shape) for _ in range(max(seeds, 1)))
        lin_rows.append((f"linear attention {shape[:5]}{' causal' if shape[5] else ''}", r))
        worst = max(worst, r)
        worst32 = max(worst32, r)
    for parts, spread in ((2, 4.0), (3, 4.0), (8, 30.0)):
        r = np.zeros(2)
        for _ in range(max(args.seeds // 10, 3)):
            r = np.maximum(r, merge_case(rng, parts, 64, 16, spread))
        lin_rows.append((f"merge_attention P={parts} |lse| ~ {spread:g}: o, lse", *r))
        worst = max(worst, r.max())
        worst32 = max(worst32, r.max())
    print(f"{'case':60s} {'O all rows':>11s} {'O row 0':>9s} {'LSE':>9s}   (max error / bound)")
    for name, a, b, c in rows:
        print(f"{name:60s} {a:11.3f} {b:9.3f} {c:9.3f}")
    print(f"{'case':60s} {'dq':>11s} {'dk':>9s} {'dv':>9s}   (max error / bound)")
    for name, a, b, c in bwd_rows:
        print(f"{name:60s} {a:11.3f} {b:9.3f} {c:9.3f}")
    print(f"{'case':60s} {'O':>11s} {'LSE':>9s}   (max error / bound)")
    for name, *vals in lin_rows:
        print(f"{name:60s} " + " ".join(f"{x:11.3f}" if i == 0 else f"{x:9.3f}"
                                         for i, x in enumerate(vals)))
    print(f"worst ratio {worst:.3f} (must be ≤ 1: the 16-bit roundings are exact bounds, "
          f"taken without a safety factor); float32 attention {worst32:.3f} (the "
          f"probabilistic model times SAFETY = {tolerance.SAFETY:g}: must be ≤ "
          f"{1 / tolerance.SAFETY:.2f})")
    return 0 if worst <= 1 and worst32 <= 1 / tolerance.SAFETY else 1


if __name__ == "__main__":
    raise SystemExit(main())
