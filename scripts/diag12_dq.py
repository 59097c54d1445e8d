"""dq error diagnosis (issue 16, session 11: flash_tc's 3xTF32 at B1 H1 N2048 d128 causal failed
tests/test_tf32x3_accuracy.py at seed 20261211 with dq 3.11e-6 against torch efficient's
1.15e-6): float64 everywhere, then one step at a time as the kernels compute it — the forward's
LSE, S, the exponent and ex2.approx, D = rowsum(dO∘O) (float32 or float64 sums of O rounded to
float32), dP = dO Vᵀ on the tensor-core model (per k8 step from zero, as by_rows; or every 4
steps, as torch) — each alone against float64, then together. Needs diag12_stage1.py and
stage2.py's outputs for the same SEED, N, D (~2 min at N = 2048, d = 128; this one ~1 min).

    SEED=20261211 N=2048 D=128 python3 scripts/diag12_dq.py

Its answer at that seed (2026-12-02): D's float32 sum 1.23e-6 alone (9e-8 summed in float64),
dP 1.38e-6, all but dq's own sum 2.87e-6 (1.73e-6 with D in float64), all at row 3 (a query
that sees four keys: dS = P(dP − D) cancels) — hence bwd_preprocess's float64 sum.
"""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import tf32x3_error as E  # noqa: E402

F32 = np.float32
N, D = int(os.environ.get("N", 2048)), int(os.environ.get("D", 128))
SEED = int(os.environ.get("SEED", 20261211))
OUT = os.path.join(os.environ.get("DIAG_OUT", tempfile.gettempdir()), f"diag_out{SEED}_{N}_{D}")
LOG2E = float(E.LOG2E)


def f32(x):
    return np.asarray(x, np.float64).astype(F32).astype(np.float64)


def main():
    z = np.load(os.path.join(OUT, "inputs.npz"))
    q, k, v, do = z["q"], z["k"], z["v"], z["do"]
    Sf = np.load(os.path.join(OUT, "Sf.npy")).astype(np.float64)
    fw = np.load(os.path.join(OUT, "fwd.npz"))
    q64, k64, v64, do64 = (x.astype(np.float64) for x in (q, k, v, do))
    scale = float(F32(D ** -0.5))
    tri = np.tril(np.ones((N, N), bool))
    lse64 = fw["lse64"]

    def probs(S, lse, emulate):
        if emulate:     # NAT: fma(S, scale, −LSE) rounded, · log2e rounded, ex2.approx
            x = f32(f32(S * scale - lse[:, None]) * LOG2E)
            p = f32(np.exp2(x) * (1 + np.random.default_rng(1).uniform(-1, 1, x.shape)
                                  * E.EX2_ERR))
        else:
            p = np.exp(S * scale - lse[:, None])
        return np.where(tri, p, 0.0)

    P64 = probs(q64 @ k64.T, lse64, False)
    O64 = P64 @ v64
    D64 = (do64 * O64).sum(1)
    dP64 = do64 @ v64.T

    def dq_of(P, dP, Dv):
        return (P * (dP - Dv[:, None])) @ k64 * scale

    ref = dq_of(P64, dP64, D64)

    def report(name, x):
        e = np.abs(x - ref)
        i = np.unravel_index(e.argmax(), e.shape)
        print(f"{name:44s} {e.max():.2e} at {tuple(map(int, i))} (|dq| there "
              f"{abs(ref[i]):.2f})", flush=True)

    def dp_model(stage):
        out = np.zeros((N, N))
        for r0 in range(0, N, 256):
            out[r0:r0 + 256, :r0 + 256] = E.tc_product(do[r0:r0 + 256], v[:r0 + 256].T,
                                                       stage=stage)
        return out

    d32 = np.zeros(N)
    for c in range(D):                      # the kernel's sequential float32 sum
        d32 = f32(d32 + f32(do64[:, c] * f32(O64[:, c])))
    d64 = (do64 * f32(O64)).sum(1)          # the same products summed in float64
    lse = fw["lse_approx_fma"]
    report("LSE as the forward computes it", dq_of(probs(q64 @ k64.T, lse, False), dP64, D64))
    report("S, LSE, exponent and ex2 as the kernels", dq_of(probs(Sf, lse, True), dP64, D64))
    report("D: float32 sum of O rounded", dq_of(P64, dP64, d32))
    report("D: float64 sum of O rounded", dq_of(P64, dP64, d64))
    dpe = dp_model(1)
    report("dP on the tensor-core model (per k8 step)", dq_of(P64, dpe, D64))
    report("dP staged every 4 k8 steps (torch)", dq_of(P64, dp_model(4), D64))
    report("all but dq's sum, D float32", dq_of(probs(Sf, lse, True), dpe, d32))
    report("all but dq's sum, D float64", dq_of(probs(Sf, lse, True), dpe, d64))


if __name__ == "__main__":
    main()
