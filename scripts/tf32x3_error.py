"""Where the 3xTF32 kernels' error comes from: a NumPy emulation of their
arithmetic, step by step, on the tensor core as NVIDIA's hardware computes it.

The H200 measured the 3xTF32 forward 3–94× and the backward 12–100× less accurate than torch's
fp32 "efficient" SDPA backend on the same inputs (docs/results.md), while the simulator saw
float32-level errors. The simulator's twin of ``mma.sync…tf32`` summed in float64 and rounded
once; the tensor core does not. Two models of one m16n8k8 tf32 mma, D = A·B + C per element
(8 products and c):

  ieee  the products summed exactly, rounded once to float32 (the simulator's old twin);
  tc    Hopper's tensor core as measured by Khattak & Mikaitis, "Accurate Models of NVIDIA
        Tensor Cores" (arXiv 2512.07004; MATLAB models: github.com/north-numerical-computing/
        MATLAB-tensor-core, models/H100TC.m, tf32: fma = 8, neab = 2, frmode = 'rz'): the
        products are exact, all 9 addends are aligned to the largest one's exponent E and cut
        to the grid 2^(E − 23 − 2) (2 extra alignment bits, truncation toward zero, no sticky
        bit), summed exactly, and the sum rounded toward zero to float32 — the simulator's
        twin, ``kernels_numba/sim/mma.tf32_block_fma``, used here as it is.

The model reproduces the H200's measurements at B4 H16 N1024 d64 (one head, randn): the
kernels as they were 2.7e-6 max |error| of O (H200: 2.9e-6), torch's efficient 6.3e-7 (H200:
6.8e-7, docs/results.md).

Every mma of a long accumulation into one register (P·V over all Nk keys, dV and dK over all
Nq queries, dQ over all Nk keys) then truncates toward zero, an error of the order of an ulp of
the accumulator, with one sign; three mmas a k8 step, 3·N/8 of them: the error grows as N, not
as √N. torch's kernels (CUTLASS ``OpMultiplyAddFastF32``, the same three mmas) avoid it by
*staged accumulation*: the mmas of one main-loop step (32 of k) go into fresh zero registers,
added to the running accumulator on the CUDA cores (round to nearest):
aten/src/ATen/native/transformers/cuda/mem_eff_attention/gemm/custom_mma_multistage.h and
mma_from_smem.h ("tf32x3 kernels use staging accumulation"); Triton's tf32x3 has done the same
since triton-lang/triton#4934 (triton-lang/triton#4603: "accumulating the small parts directly into C …
pretty much negates the 3xtf32 effect").

The emulation, one head (B = H = 1), mirrors the kernels line by line: S = Q Kᵀ over d per
K/V tile of Bc keys (k8 steps, three mmas each: small·big, big·small, big·big), S·(scale·log₂e)
in float32, the online softmax (m, l, the correction 2^(m − m_new), P = 2^(S − m) by ex2.approx
with a random relative error ≤ 2^-22.5, PTX's bound), acc·correction, acc += P V, O = acc·(1/l),
LSE = m·ln 2 + ln l; the backward (FA2 order, from the emulated forward's O and LSE):
P = 2^(S·scale·log₂e − LSE·log₂e), dP = dO Vᵀ, D = rowsum(dO∘O) in float32, dS = P∘(dP − D),
dV = Pᵀ dO, dK = dSᵀ Q·scale, dQ = dS K·scale, over tiles of Bq queries / Bk keys. Each step
can be exact (float64) or as the GPU does it, so the table shows what each step adds alone.

    python3 scripts/tf32x3_error.py [--n 1024] [--d 64] [--causal] [--seed 0] [--summary]
    python3 scripts/tf32x3_error.py --accumulation [--seed 0] [--d 128 --tile 16]
                                                   (dV's sum alone, ~1 min at N = 4096, d = 64)

(N = 1024, d = 64: about 15 minutes on one core, --summary 7.)

Errors: max |x − x_ref| / max |x_ref| against float64 (the backward: the worst of dq, dk,
dv, as tests/conftest.check_grads measures), the same inputs for every row; the last rows
emulate torch's efficient backend (CUTLASS's split: big = tf32 toward zero, small rounded to
nearest; staged accumulation every 4 k8 steps; exp2f).
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from flashlesson.kernels_numba.sim.mma import tf32_block_fma as mma_tc  # noqa: E402  (Hopper's block FMA)
from flashlesson.reference import attention, attention_backward  # noqa: E402

F32 = np.float32
LOG2E = F32(np.log2(np.e))
LN2 = F32(np.log(2.0))
EX2_ERR = 2.0 ** -22.5  # ex2.approx.f32's relative error bound (PTX)


# --- TF32 and the tensor core -------------------------------------------------------------------
def tf32_rna(x):
    """cvt.rna.tf32.f32: nearest, ties away from zero, to 10 mantissa bits (NaN/inf kept)."""
    b = np.asarray(x, F32).view(np.uint32)
    fin = (b & 0x7F800000) != 0x7F800000
    return np.where(fin, (b + np.uint32(0x1000)) & np.uint32(0xFFFFE000), b).view(F32)


def tf32_rz(x):
    """Truncation to tf32 (CUTLASS's round_toward_zero big part; what the mma reads of an
    unrounded float32 register)."""
    return (np.asarray(x, F32).view(np.uint32) & np.uint32(0xFFFFE000)).view(F32)


def split(x, big="rna", small="rna"):
    """x = big + small: big = tf32(x) (rna, or rz as CUTLASS), small = x − big (exact in
    float32), rounded to tf32 (rna), left as it is (None: the mma truncates it), or 0
    ("zero": plain 1xTF32)."""
    x = np.asarray(x, F32)
    hi = tf32_rna(x) if big == "rna" else tf32_rz(x)
    lo = (x - hi).astype(F32)
    if small == "rna":
        lo = tf32_rna(lo)
    elif small == "zero":
        lo = np.zeros_like(lo)
    else:
        lo = tf32_rz(lo)           # the tensor core ignores the low 13 bits
    return hi.astype(np.float64), lo.astype(np.float64)


def mma_ieee(a, b, c):
    """The products summed exactly, rounded once to float32 (the simulator's old twin)."""
    return (a @ b + np.asarray(c, np.float64)).astype(F32)


def tc_product(a, b, c=None, *, mma=mma_tc, big="rna", small="rna", stage=None, sep=False):
    """c + a·b with 3xTF32, k8 step by k8 step (small·big, big·small, big·big) — a [M, K],
    b [K, N], float32. stage None: every mma into c (the kernels as they were); G: the mmas of
    G k8 steps into a zeroed register, then added to c in float32 (staged accumulation). sep:
    the two small terms into a register of their own, added at each stage (or at the end).
    mma None: exact (float64, no rounding)."""
    m, kk = a.shape
    n = b.shape[1]
    if mma is None:
        out = a.astype(np.float64) @ b.astype(np.float64)
        return out if c is None else out + c
    pad = -kk % 8
    a = np.pad(np.asarray(a, F32), ((0, 0), (0, pad)))
    b = np.pad(np.asarray(b, F32), ((0, pad), (0, 0)))
    ab, asm = split(a, big, small)
    bb, bs = split(b, big, small)
    acc = np.zeros((m, n), F32) if c is None else np.asarray(c, F32)
    steps = a.shape[1] // 8
    reg = acc if stage is None else np.zeros((m, n), F32)   # the register the mmas go into
    lo = np.zeros((m, n), F32)                              # (sep: the small terms' register)
    for s in range(steps):
        k = slice(8 * s, 8 * s + 8)
        if sep:
            lo = mma(ab[:, k], bs[k], mma(asm[:, k], bb[k], lo))
        else:
            reg = mma(ab[:, k], bs[k], mma(asm[:, k], bb[k], reg))   # small·big, big·small
        reg = mma(ab[:, k], bb[k], reg)                              # big·big
        if stage is not None and ((s + 1) % stage == 0 or s + 1 == steps):
            acc = (acc + reg).astype(F32)               # on the CUDA cores: to nearest
            reg = np.zeros((m, n), F32)
            if sep:
                acc = (acc + lo).astype(F32)
                lo = np.zeros((m, n), F32)
    if stage is None:
        acc = (reg + lo).astype(F32) if sep else reg
    return acc


# --- the arithmetic of one configuration ---------------------------------------------------------
class Arith:
    """What each step of the kernels does: ``mma`` for the products (a dict of tc_product's
    keywords, or None: exact) — S/dP over d ("qk"), P·V and the gradients over the tile ("pv"),
    ``f32``: the CUDA-core steps in float32 (else float64), ``ex2``: 'approx' (ex2.approx's
    error), 'exact', ``exp_f32``: the exponent's argument S·scale·log₂e − m in float32."""

    def __init__(self, qk=None, pv=None, f32=False, ex2="exact", exp_f32=False, rng=None):
        self.qk, self.pv, self.f32, self.ex2, self.exp_f32 = qk, pv, f32, ex2, exp_f32
        self.rng = rng or np.random.default_rng(0)

    def r(self, x):
        return np.asarray(x, F32).astype(np.float64) if self.f32 else np.asarray(x, np.float64)

    def rx(self, x):
        return np.asarray(x, F32).astype(np.float64) if self.exp_f32 else x

    def exp2(self, x):
        with np.errstate(over="ignore", invalid="ignore"):
            y = np.exp2(np.asarray(x, np.float64))
        if self.ex2 == "approx":
            y = y * (1 + self.rng.uniform(-1, 1, np.shape(y)) * EX2_ERR)
            y = y.astype(F32).astype(np.float64)
        return y

    def prod(self, which, a, b, c=None):
        kw = self.qk if which == "qk" else self.pv
        if kw is None:
            out = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
            return out if c is None else out + c
        return tc_product(a, b, None if c is None else np.asarray(c, F32), **kw).astype(
            np.float64)


def forward(q, k, v, ar, Bc=64, causal=False):
    """One head's 3xTF32 forward under ``ar`` (module docstring) → (O, LSE) float64."""
    nq, d = q.shape
    nk = k.shape[0]
    scale = F32(d ** -0.5)
    scale2 = ar.rx(F32(scale * LOG2E)) if ar.exp_f32 else float(scale) / np.log(2)
    m = np.full(nq, -np.inf)
    l = np.zeros(nq)
    acc = np.zeros((nq, d))
    rows = np.arange(nq)[:, None] + (nk - nq)
    for j0 in range(0, nk, Bc):
        kt, vt = k[j0:j0 + Bc], v[j0:j0 + Bc]
        s = ar.rx(ar.prod("qk", q, kt.T) * scale2)                    # S·scale·log₂e
        if causal:
            s = np.where(np.arange(j0, j0 + kt.shape[0])[None, :] <= rows, s, -np.inf)
        new_m = np.maximum(m, s.max(axis=1))
        safe = np.where(np.isneginf(new_m), 0.0, new_m)
        corr = ar.exp2(ar.rx(m - safe))                               # 2^(m − m_new)
        p = ar.exp2(ar.rx(s - safe[:, None]))                         # P = 2^(S − m)
        l = ar.r(ar.r(corr * l) + ar.r(p.sum(axis=1)))
        acc = ar.r(acc * corr[:, None])
        acc = ar.prod("pv", p, vt, acc)                               # acc += P V
        m = new_m
    inv = ar.r(1.0 / np.where(l > 0, l, 1.0))
    o = ar.r(acc * inv[:, None])
    with np.errstate(divide="ignore"):
        lse = ar.rx(ar.rx(m * LN2) + ar.rx(np.log(l))) if ar.exp_f32 else \
            m * np.log(2) + np.log(l)                                 # LSE = m·ln 2 + ln l
    return o, lse


def backward(q, k, v, do, o, lse, ar, causal=False, tile=32):
    """One head's 3xTF32 backward under ``ar`` from (O, LSE) → (dq, dk, dv) float64. The
    products over the tile accumulate over tiles of ``tile`` queries (dV, dK) / keys (dQ)."""
    nq, d = q.shape
    nk = k.shape[0]
    scale = F32(d ** -0.5)
    scale2 = F32(scale * LOG2E) if ar.exp_f32 else float(scale) / np.log(2)
    lse2 = ar.rx(F32(lse) * LOG2E) if ar.exp_f32 else lse / np.log(2)
    s = ar.prod("qk", q, k.T)
    x = ar.rx(s * scale2 - lse2[:, None])                 # (S·scale − LSE)·log₂e, one FFMA
    p = ar.exp2(x)
    if causal:
        p = np.where(np.arange(nk)[None, :] <= np.arange(nq)[:, None] + (nk - nq), p, 0.0)
    dp = ar.prod("qk", do, v.T)
    dd = np.zeros(nq)
    for c in range(d):                                    # D = Σ_c dO∘O, one FMA a column
        dd = ar.r(dd + do[:, c].astype(np.float64) * o[:, c])
    ds = ar.r(p * ar.r(dp - dd[:, None]))
    dv = dk = dq = None
    for i0 in range(0, nq, tile):                        # dV += Pᵀ dO, dK += dSᵀ Q a Q tile
        dv = ar.prod("pv", p[i0:i0 + tile].T, do[i0:i0 + tile], dv)
        dk = ar.prod("pv", ds[i0:i0 + tile].T, q[i0:i0 + tile], dk)
    for j0 in range(0, nk, tile):                        # dQ += dS K a K/V tile
        dq = ar.prod("pv", ds[:, j0:j0 + tile], k[j0:j0 + tile], dq)
    return ar.r(dq * scale), ar.r(dk * scale), dv


def rel(x, ref):
    return float(np.max(np.abs(np.asarray(x, np.float64) - ref)) / np.max(np.abs(ref)))


def err(x, ref):
    return float(np.max(np.abs(np.asarray(x, np.float64) - ref)))


def configurations():
    """(name, Arith keywords, summary?) of the table's rows: each step of the kernels as they
    were alone (the rest exact), the variants of the products over the tile (the
    suspects), then everything at once: before, the simulator's old twin, now, torch."""
    was = dict(mma=mma_tc)                               # three mmas a k8 step into C
    now = dict(mma=mma_tc, stage=1)                      # each k8 step from zero, added in f32
    cuda_cores = dict(f32=True, ex2="approx", exp_f32=True)
    return [
        ("S = Q Kᵀ, dP = dO Vᵀ over d on the tensor core, as it was", dict(qk=was), False),
        ("exponent in float32 (S·scale·log₂e − m, LSE·log₂e; folded)", dict(exp_f32=True),
         False),
        ("ex2.approx (≤ 2^-22.5)", dict(ex2="approx"), False),
        ("l, correction, 1/l, D = Σ dO∘O, dS in float32", dict(f32=True), False),
        ("P V; dV, dK, dQ on the tensor core, as it was", dict(pv=was), False),
        ("  (a) small part left unrounded (the mma truncates it)",
         dict(pv=dict(was, small=None)), False),
        ("  (a) big toward zero, small to nearest (CUTLASS's split)",
         dict(pv=dict(was, big="rz")), False),
        ("  (b) 1xTF32: small parts dropped (an operand not split)",
         dict(pv=dict(was, small="zero")), False),
        ("  (e) small terms into a register of their own", dict(pv=dict(was, sep=True)),
         False),
        ("  staged every 4 k8 steps (torch's 32 keys/queries)", dict(pv=dict(was, stage=4)),
         False),
        ("  staged: each k8 step from zero, added in float32 (now)", dict(pv=now), False),
        ("all, as it was", dict(qk=was, pv=was, **cuda_cores), True),
        ("all, as it was, the backward from the exact O and LSE",
         dict(qk=was, pv=was, exact_forward=True, **cuda_cores), True),
        ("all, the simulator's old twin (products summed exactly, one rounding)",
         dict(qk=dict(mma=mma_ieee), pv=dict(mma=mma_ieee), **cuda_cores), True),
        ("all, now (staged over d and over the tile)", dict(qk=now, pv=now, **cuda_cores),
         True),
        ("torch efficient, emulated (CUTLASS split, staged every 4 k8 steps)",
         dict(qk=dict(was, big="rz", stage=4), pv=dict(was, big="rz", stage=4),
              **cuda_cores), True),
    ]


def run(n=1024, d=64, causal=False, seed=0, summary=False, log=print):
    """The table: (name, forward rel, backward rel, forward abs, backward abs) rows, errors
    against float64 (rel: max |err| / max |ref|); inputs standard normal float32; the
    backward from the configuration's own forward O and LSE (D from that O), as the benchmark
    and the tests run it, unless the row says otherwise."""
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((n, d)).astype(F32) for _ in range(4))
    x64 = [x.astype(np.float64) for x in (q, k, v)]
    o_ref, lse_ref = attention(*x64, causal=causal)
    refs = attention_backward(do.astype(np.float64), *x64, causal=causal)
    out = []
    for name, kw, in_summary in configurations():
        if summary and not in_summary:
            continue
        t0 = time.time()
        kw = dict(kw)
        exact_forward = kw.pop("exact_forward", False)
        ar = Arith(rng=np.random.default_rng(seed + 1), **kw)
        o, lse = forward(q, k, v, ar, causal=causal)
        o_b, lse_b = (o_ref, lse_ref) if exact_forward else (o, lse)
        grads = backward(q, k, v, do, o_b, lse_b, ar, causal=causal)
        row = (name, rel(o, o_ref), max(rel(g, r) for g, r in zip(grads, refs)),
               err(o, o_ref), max(err(g, r) for g, r in zip(grads, refs)))
        out.append(row)
        log(f"{name:<70} {row[1]:9.2e} {row[2]:9.2e} {row[3]:9.2e} {row[4]:9.2e}  "
            f"({time.time() - t0:.0f} s)")
    return out


def accumulation(n=4096, d=64, causal=True, seed=0, tile=32, log=print):
    """dV = Pᵀ dO over n queries alone, ways of summing its k8 steps (--accumulation): the
    products exact (P and dO split, small·small dropped), each k8 step's sum cut toward zero
    once (an mma from zero), then added in float32 to nearest — into dV at once (one level),
    into a partial of ``tile`` queries added to dV once a tile (two levels; the tiles in
    order, the causal diagonal's first, or last to first, as the dK/dV kernel takes them), or chained on the tensor core over 4 steps before the add (torch's staging).
    → {name: max |error|} against float64."""
    rng = np.random.default_rng(seed)
    q, k, do = (rng.standard_normal((n, d)).astype(F32) for _ in range(3))
    x = (q.astype(np.float64) @ k.T.astype(np.float64)) * d ** -0.5
    if causal:
        x = np.where(np.tril(np.ones((n, n), bool)), x, -np.inf)
    p = np.exp(x - x.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    ref = p.T @ do.astype(np.float64)
    pb, ps = split(p.astype(F32))
    db, ds = split(do)

    def rz(y):                                          # float32, toward zero
        r = y.astype(F32)
        return np.where(np.abs(r.astype(np.float64)) > np.abs(y), np.nextafter(r, F32(0)), r)

    def steps(i0, i1, c):                               # k8 steps i0 … i1 chained on the TC
        for i in range(i0, i1, 8):
            w = slice(i, i + 8)
            c = rz(pb[w].T @ db[w] + pb[w].T @ ds[w] + ps[w].T @ db[w] + c)
        return c.astype(np.float64)

    def run(chain, tile, backwards=False):
        acc = np.zeros((n, d), F32)
        if tile is None:                                # one level: dV += each chain's sum
            for i in range(0, n, 8 * chain):
                acc = (acc + steps(i, min(n, i + 8 * chain), np.zeros((n, d)))).astype(F32)
            return float(np.max(np.abs(acc - ref)))
        starts = range(0, n, tile)                      # two levels: a partial a tile, the
        for t0 in (reversed(starts) if backwards else starts):  # tiles in order or backwards
            part = np.zeros((n, d), F32)
            for i in range(t0, min(n, t0 + tile), 8 * chain):
                part = (part + steps(i, min(n, i + 8 * chain), np.zeros((n, d)))).astype(F32)
            acc = (acc + part).astype(F32)
        return float(np.max(np.abs(acc - ref)))

    out = {}
    for name, chain, t, backwards in (
            ("one level (a k8 step at a time)", 1, None, False),
            ("torch: 4 k8 steps chained, then added", 4, None, False),
            (f"two levels, a partial of {tile} queries", 1, tile, False),
            (f"two levels, {tile} queries, last tile first", 1, tile, True),
            ("two levels, a partial of 128 queries", 1, 128, False)):
        out[name] = run(chain, t, backwards)
        log(f"{name:<45} {out[name]:9.2e}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--summary", action="store_true", help="the 'all' rows only")
    ap.add_argument("--accumulation", action="store_true", help="dV's sum over the queries "
                    "alone, one level / torch's staging / two levels (default N 4096, causal)")
    ap.add_argument("--tile", type=int, default=32, help="--accumulation: queries a partial "
                    "(the dK/dV kernel's Bq: 32 at d = 64, 16 at d = 128)")
    a = ap.parse_args(argv)
    if a.accumulation:
        n = 4096 if a.n == 1024 else a.n
        print(f"dV = Pᵀ dO alone, N = {n}, d = {a.d}, causal, seed {a.seed}: max |error| "
              f"against float64")
        accumulation(n, a.d, True, a.seed, a.tile)
        return
    print(f"N = {a.n}, d = {a.d}, causal = {a.causal}, seed {a.seed}: error against float64 "
          f"(rel: max |err| / max |ref|; backward: the worst of dq, dk, dv)")
    print(f"{'step alone (the rest exact) / configuration':<70} {'fwd rel':>9} {'bwd rel':>9} "
          f"{'fwd abs':>9} {'bwd abs':>9}")
    run(a.n, a.d, a.causal, a.seed, a.summary)


if __name__ == "__main__":
    main()
