"""Seed 12 diagnosis, stage 4: dV = Pᵀ dO on the tc model as the dK/dV kernel sums it (each k8
step of 8 queries: 3 mmas from zero; one level: dv += step; two levels: part += step, dv +=
part once a Q tile of BQ queries, or of 2, 4, 8 tiles), for P exact (float32) and P emulated. Max |dv − dv64| and where."""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import tf32x3_error as E  # noqa: E402
from diag12_stage2 import F32, OUT, SEED, do, f32, N, D, BQ  # noqa: E402
from diag12_stage3 import P_of, S64, Sb, lse64, fw  # noqa: E402

Bq = BQ


SPANS = (Bq, 2 * Bq, 4 * Bq, 8 * Bq)


def accumulate(P):
    """P [N, N] (rows queries) float32 values → {variant: dv float64}: one level (dv += each
    k8 step's 3-mma sum), two levels with a partial over `span` queries, and torch's staging
    (the k8 steps of a Q tile chained on the tensor core, then added)."""
    one = np.zeros((N, D), F32)
    two = {sp: np.zeros((N, D), F32) for sp in SPANS}
    part = {sp: np.zeros((N, D), F32) for sp in SPANS}
    chain = np.zeros((N, D), F32)
    db, ds = E.split(do)
    t0 = time.time()
    for i0 in range(0, N, Bq):
        kmax = i0 + Bq                       # causal: keys 0 … i0 + Bq − 1
        creg = np.zeros((kmax, D), F32)
        for s in range(i0, i0 + Bq, 8):
            a = P[s:s + 8, :kmax].T.astype(F32)         # A = Pᵀ [keys, 8 queries]
            ab, asm = E.split(a)
            w = slice(s, s + 8)
            reg = E.mma_tc(asm, db[w], np.zeros((kmax, D), F32))
            reg = E.mma_tc(ab, ds[w], reg)
            reg = E.mma_tc(ab, db[w], reg)
            one[:kmax] = (one[:kmax] + reg).astype(F32)
            for sp in SPANS:
                part[sp][:kmax] = (part[sp][:kmax] + reg).astype(F32)
            creg = E.mma_tc(ab, db[w], E.mma_tc(ab, ds[w], E.mma_tc(asm, db[w], creg)))
        chain[:kmax] = (chain[:kmax] + creg).astype(F32)
        for sp in SPANS:
            if (i0 + Bq) % sp == 0 or i0 + Bq == N:
                two[sp] = (two[sp] + part[sp]).astype(F32)
                part[sp][:] = 0
        if i0 % 512 == 0:
            print(f"  tile {i0} {time.time() - t0:.0f}s", flush=True)
    out = {"one level": one, f"torch-like: a tile's {Bq // 8} k8 steps chained on the TC": chain}
    out.update({f"two levels, partial of {sp} queries": two[sp] for sp in SPANS})
    return {k_: v_.astype(np.float64) for k_, v_ in out.items()}


def show(name, dv, dv64):
    e = dv - dv64
    j, c = np.unravel_index(np.argmax(np.abs(e)), e.shape)
    print(f"{name:<90} {np.max(np.abs(e)):9.2e} at key {j:4d} col {c:2d} (dv64 {dv64[j, c]:+.4f})",
          flush=True)


def main():
    dv64 = np.load(os.path.join(OUT, "dv64.npy"))
    rng = np.random.default_rng(SEED + 7)
    res = {}
    for name, fn in (("P exact→f32 (accumulation alone)", lambda: f32(P_of(S64, lse64))),
                     ("all, ex2 f32-rounded", lambda: P_of(Sb, fw["lse_f32_fma"], "f32", "f32")),
                     ("all, ex2 approx random",
                      lambda: P_of(Sb, fw["lse_approx_fma"], "f32", "approx", rng))):
        P = fn()
        outs = accumulate(P)
        del P
        for var, dv in outs.items():
            show(f"{name}; {var}", dv, dv64)
        res[name] = outs
    np.savez(os.path.join(OUT, "acc.npz"), **{f"{i}_{j}": dv for i, n in enumerate(res)
                                              for j, dv in enumerate(res[n].values())})


if __name__ == "__main__":
    main()
