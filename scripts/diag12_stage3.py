"""Seed 12 diagnosis, stage 3: dv = Pᵀ dO (float64 sums) with P computed under one emulated
step at a time; max |dv − dv64| and where."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from diag12_stage2 import LOG2E, OUT, SEED, do64, ex2, f32, k64, q64, tri, scale  # noqa: E402

fw = np.load(os.path.join(OUT, "fwd.npz"))
lse64 = fw["lse64"]
lse_em = fw["lse_f32_fma"]
Sb = np.load(os.path.join(OUT, "Sb.npy")).astype(np.float64)
Sf = np.load(os.path.join(OUT, "Sf.npy")).astype(np.float64)
S64 = q64 @ k64.T
L2E = float(LOG2E)


def P_of(S, lse, exponent="exact", e2="exact", rng=None):
    if exponent == "exact":
        x = (S * float(scale) - lse[:, None]) * np.log2(np.e)
    else:                                   # fma(S, scale, −LSE)·log2e, two float32 roundings
        x = f32(f32(S * float(scale) - lse[:, None]) * L2E)   # fma: one rounding
    x = np.where(tri, x, -np.inf)
    return ex2(x, e2, rng)


def report(name, P, dv64, store):
    dv = P.T @ do64
    e = dv - dv64
    j, c = np.unravel_index(np.argmax(np.abs(e)), e.shape)
    store[name] = e
    print(f"{name:<60} {np.max(np.abs(e)):9.2e}  at key {j:4d} col {c:2d} "
          f"(dv64 {dv64[j, c]:+.4f})", flush=True)
    return e


def main():
    P64 = P_of(S64, lse64)
    dv64 = P64.T @ do64
    np.save(os.path.join(OUT, "dv64.npy"), dv64)
    store = {}
    rng = np.random.default_rng(SEED + 7)
    cfgs = [
        ("P64 rounded to float32 (P's storage)", lambda: f32(P64)),
        ("S_b emulated (K·Qᵀ tc) alone", lambda: P_of(Sb, lse64)),
        ("S_f emulated alone (S_b := S_f, LSE exact)", lambda: P_of(Sf, lse64)),
        ("LSE emulated (fwd, ex2 f32-rounded, fma) alone", lambda: P_of(S64, lse_em)),
        ("LSE emulated (fwd, ex2 approx random) alone",
         lambda: P_of(S64, fw["lse_approx_fma"])),
        ("LSE64 rounded to float32 alone", lambda: P_of(S64, f32(lse64))),
        ("S_b + LSE emulated", lambda: P_of(Sb, lse_em)),
        ("S_f + LSE emulated (S recomputed identically)", lambda: P_of(Sf, lse_em)),
        ("exponent fma·log2e in float32 alone (S, LSE64 as float32)",
         lambda: P_of(f32(S64), f32(lse64), "f32")),
        ("ex2 approx random alone", lambda: P_of(S64, lse64, "exact", "approx", rng)),
        ("all but accumulation (ex2 f32-rounded)", lambda: P_of(Sb, lse_em, "f32", "f32")),
        ("all but accumulation (ex2 approx random)",
         lambda: P_of(Sb, fw["lse_approx_fma"], "f32", "approx", rng)),
    ]
    for name, fn in cfgs:
        report(name, fn(), dv64, store)
    np.savez(os.path.join(OUT, "dv_err.npz"), **{f"e{i}": store[n] for i, (n, _) in
                                                 enumerate(cfgs)})


if __name__ == "__main__":
    main()
