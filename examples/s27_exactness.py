"""§27 — FlashAttention is exact, not an approximation.

The lesson's claim: up to the order of floating-point operations, FlashAttention computes the
same softmax(QKᵀ/√d)V as standard attention. It drops no key, uses no low-rank or linear
form, and skips none of the QKᵀ work that matters; different implementations may differ in
the last bits from rounding, which is not an approximation.

What you will see: the flash kernel against the float64 oracle ``reference.attention`` on
shapes chosen to break tiling — one query and one key, Nq ≠ Nk both ways, odd head
dimensions, sizes that are not multiples of the tiles, causal masks (bottom-right, including
rows that see no key: O = 0, LSE = −inf), and §1's outliers (every score near 1000, where
e^x overflows float32). The error is reported relative to the largest output, next to the
error of the best float32 answer (the oracle rounded to float32) and float32's epsilon; the
check is the rounding bound of ``flashlesson.tolerance.attention_tol`` (from d, Nk and the
inputs' magnitudes: float32 rounding, nothing else), and the table gives the error / bound.
For contrast, an approximation that really is one: keep only the 8 largest scores of each row
(top-k attention) — its error is orders of magnitude above that bound.

Run: ``python examples/s27_exactness.py`` (or ``flashlesson section 27``).
"""

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.tolerance import attention_tol
from flashlesson.tour import Check, attention_check, example_rng
from flashlesson.reference import attention

SECTIONS = (27,)
TOPIC = "exact, not approximate"
APPROX = 100          # the contrast: an approximation's error, in units of the rounding bound
EPS32 = float(np.finfo(np.float32).eps)     # 1.19e-7

SIM_CASES = [  # (name, B, H, Nq, Nk, d, causal)
    ("one query, one key", 1, 1, 1, 1, 1, False),
    ("Nq = Nk, 3 × 3 tiles", 1, 1, 40, 40, 16, False),
    ("Nq < Nk, odd d, causal", 1, 1, 17, 33, 5, True),
    ("Nq > Nk, causal: rows see no key", 2, 1, 40, 24, 16, True),
    ("Nq > Nk, d = 7", 1, 1, 33, 17, 7, False),
    ("§1's outliers: scores ≈ 1000", 1, 1, 16, 24, 16, False),
]
GPU_CASES = [
    ("one query, one key", 1, 1, 1, 1, 1, False),
    ("Nq = Nk = 1024", 2, 8, 1024, 1024, 64, False),
    ("Nq < Nk, d = 128, causal", 1, 4, 1000, 3000, 128, True),
    ("Nq > Nk, d = 80, causal: rows see no key", 1, 2, 513, 257, 80, True),
    ("odd sizes, d = 256", 1, 2, 333, 777, 256, False),
    ("§1's outliers: scores ≈ 1000", 1, 2, 256, 512, 16, False),
]


def inputs(rng, name, b, h, nq, nk, d):
    """q, k, v float32. The outlier case uses small integers and d = 16 (scale 1/4 exact), so
    that every score is exact in float32: 1000 + a few quarters (q_i0 = 40, k_j0 = 100)."""
    if name.startswith("§1"):
        q = rng.integers(-2, 3, (b, h, nq, d)).astype(np.float32)
        k = rng.integers(-2, 3, (b, h, nk, d)).astype(np.float32)
        q[..., 0], k[..., 0] = 40.0, 100.0                 # 40 · 100 / √16 = 1000 in every score
    else:
        q = (rng.standard_normal((b, h, nq, d)) * 1.5).astype(np.float32)
        k = rng.standard_normal((b, h, nk, d)).astype(np.float32)
    v = rng.standard_normal((b, h, nk, d)).astype(np.float32)
    return q, k, v


def top_k_attention(q, k, v, keep):
    """An approximation, for contrast: each row's softmax over its `keep` largest scores only."""
    s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)) / np.sqrt(q.shape[-1])
    cut = np.sort(s, axis=-1)[..., -keep][..., None]
    s = np.where(s >= cut, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)


def main(verbose=True):
    rng, seed = example_rng()
    checks, table = [], []
    for name, b, h, nq, nk, d, causal in SIM_CASES if flashlesson.SIMULATOR else GPU_CASES:
        q, k, v = inputs(rng, name, b, h, nq, nk, d)
        o, lse = flashlesson.attention(q, k, v, causal=causal, return_lse=True)
        shape = f"{b}×{h}×{nq}×{nk}, d={d}{', causal' if causal else ''}"
        (co, cl), want_o, want_lse = attention_check("27", TOPIC, "flash", o, lse, q, k, v,
                                                     causal=causal, note=f"{name} [{shape}]")
        checks += [co, cl]
        p = attention(q, k, v, causal=causal, return_p=True)[2]     # the bound the check used
        tol = attention_tol(q, k, v, p=p, o=want_o)
        with np.errstate(divide="ignore", invalid="ignore"):        # 0/0: a row with no key
            of_bound = float(np.nanmax(np.abs(o - want_o) / tol.o, initial=0.0))
        big = float(np.max(np.abs(want_o)))
        best = float(np.max(np.abs(want_o.astype(np.float32) - want_o)))   # float32 rounding
        empty = int(np.isneginf(want_lse).sum())
        table.append([name, shape, empty, f"{co.max_err / big:.1e}" if co.max_err is not None
                      else "—", f"{best / big:.1e}", f"{(co.max_err or 0) / big / EPS32:.1f}",
                      f"{of_bound:.2f}", f"{cl.max_err:.1e}" if cl.max_err is not None else "—"])
        if empty:                                   # rows that see no key: exactly 0 and −inf
            rows0 = np.isneginf(want_lse)
            ok = bool(np.all(o[rows0] == 0) and np.all(np.isneginf(lse[rows0])))
            checks.append(Check("27", TOPIC, "flash", None, ok,
                                f"{name}: {empty} rows see no key: O = 0, LSE = −inf"))
        if name.startswith("§1"):
            with np.errstate(over="ignore"):
                overflow = bool(np.isinf(np.exp(np.float32(want_lse.min()))))
            checks.append(Check("27", TOPIC, "formula", None, overflow and co.passed,
                                f"{name}: e^LSE = e^{want_lse.min():.0f} is inf in float32, "
                                "and the kernel is still exact"))

    # An approximation for contrast: top-8 keys per row, on the second case's shape.
    name, b, h, nq, nk, d, causal = (SIM_CASES if flashlesson.SIMULATOR else GPU_CASES)[1]
    q, k, v = inputs(rng, name, b, h, nq, nk, d)
    want_o, _ = attention(q, k, v)
    approx = top_k_attention(q, k, v, keep=8)
    rel_approx = float(np.max(np.abs(approx - want_o)) / np.max(np.abs(want_o)))
    approx_bounds = float(np.max(np.abs(approx - want_o) / attention_tol(q, k, v).o))
    checks.append(Check("27", TOPIC, "numpy", rel_approx, approx_bounds > APPROX,
                        f"contrast: top-8-keys attention on {nq}×{nk} is off by {rel_approx:.1e} "
                        f"relative, {approx_bounds:.0f}× float32's rounding bound (> {APPROX}): "
                        "an approximation looks like this, flash does not"))
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\nrandom inputs: seed {seed}; the flash kernel vs reference.attention (float64). "
              f"'rel.' = max |error| / max |O|; float32 eps = {EPS32:.2e}")
        print(tabulate(table, headers=["case", "B×H×Nq×Nk", "rows with no key", "rel. error O",
                                       "float32 rounding of O", "error / eps",
                                       "O error / bound", "max |ΔLSE|"],
                       disable_numparse=True))
        print(f"\nfor contrast, top-8-keys attention (an approximation) on the "
              f"{nq}×{nk} case: rel. error {rel_approx:.1e}, {approx_bounds:.0f}× the bound")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
