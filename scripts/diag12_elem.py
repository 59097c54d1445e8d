"""One dv element: per-step attribution (stage 3 configs) and the one-level / two-level
accumulation's error split into the mma sums' truncation and the float32 adds' rounding.
J, C (environment): the element, key J and column C (default 3, 122: seed 12's at N 2048,
d 128); after stages 1–4 with the same SEED, N, D."""
import os, sys
import numpy as np
sys.path.insert(0, os.path.dirname(__file__))
import tf32x3_error as E
from diag12_stage2 import F32, OUT, N, BQ, do, do64, f32
from diag12_stage3 import P_of, S64, Sb, lse64, fw
J, C = int(os.environ.get("J", 3)), int(os.environ.get("C", 122))
z = np.load(os.path.join(OUT, "dv_err.npz"))
names = ["P64→f32", "S_b alone", "S_f alone", "LSE em (ex2 f32)", "LSE em (ex2 approx)",
         "LSE64→f32", "S_b+LSE", "S_f+LSE", "exponent fma·log2e", "ex2 approx random",
         "all but acc (ex2 f32)", "all but acc (ex2 approx)"]
print(f"element key {J} col {C}: error of dv (float64 sums) with one step emulated")
for i, n in enumerate(names):
    e = z[f"e{i}"]
    print(f"  {n:<28} {e[J, C]:+.2e}   (max over all {np.abs(e).max():.2e})")
for pname, P in (("P exact→f32", f32(P_of(S64, lse64))),
                 ("P all emulated (ex2 f32)", P_of(Sb, fw["lse_f32_fma"], "f32", "f32"))):
    p = P[:, J].astype(F32)                       # column J over queries
    pb, ps = E.split(p[:, None])
    db, dsm = E.split(do[:, C:C + 1])
    one = F32(0); part = F32(0); two = F32(0)
    tr1 = rd1 = 0.0; rd2 = 0.0
    exact = 0.0
    for s in range(0, N, 8):
        w = slice(s, s + 8)
        reg = E.mma_tc(ps[w].T, db[w], np.zeros((1, 1), F32))
        reg = E.mma_tc(pb[w].T, dsm[w], reg)
        reg = E.mma_tc(pb[w].T, db[w], reg)[0, 0]
        st_exact = float(p[w].astype(np.float64) @ do64[w, C])
        exact += st_exact
        tr1 += float(reg) - st_exact
        new = F32(one + reg); rd1 += float(new) - (float(one) + float(reg)); one = new
        newp = F32(part + reg); rd2 += float(newp) - (float(part) + float(reg)); part = newp
        if (s + 8) % BQ == 0:
            new = F32(two + part); rd2 += float(new) - (float(two) + float(part)); two = new
            part = F32(0)
    ref = float(P_of(S64, lse64)[:, J] @ do64[:, C])
    print(f"{pname}: one level err {float(one) - ref:+.2e} = P {exact - ref:+.2e} + mma sums "
          f"{tr1:+.2e} + f32 adds {rd1:+.2e};  two levels err {float(two) - ref:+.2e} "
          f"(f32 adds {rd2:+.2e})")
