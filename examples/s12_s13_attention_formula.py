"""§12–13 — the attention formula, and what each query does.

The lesson's claim (§12): single-head attention is S = QKᵀ/√d, P = softmax(S) row by row,
O = PV, with Q, K, V ∈ R^{N×d}, S, P ∈ R^{N×N}, O ∈ R^{N×d}. §13 reads it per query: query i
scores every key, s_ij = q_i·k_j/√d, takes the softmax of its whole row,
p_ij = e^{s_ij} / Σ_t e^{s_it}, and averages the values, o_i = Σ_j p_ij v_j — so every query
needs every key and every value.

What you will see: the three steps written out in NumPy on a tiny head (N = 4, d = 3) with
every matrix printed; then, on random [B, H, N, d] inputs, four computations of the same O:
the steps by hand, the whole-matrix oracle ``reference.attention``, the per-query oracle
``reference.attention_per_query`` (an explicit loop over i), and the two kernels,
``flashlesson.attention(method="flash")`` and ``method="naive"`` (float32), with their LSE
(log Σ_j e^{s_ij}) as well. Last, §13's "every query sees every key": changing the last value
vector alone changes every row of O.

Run: ``python examples/s12_s13_attention_formula.py`` (or
``flashlesson section 12``).
"""

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.attention_methods import FLOAT32_METHODS
from flashlesson.tolerance import attention_tol
from flashlesson.tour import Check, check_close, example_rng
from flashlesson.reference import attention, attention_per_query, softmax_stable

SECTIONS = (12, 13)
TOPIC = "attention formula"


def by_hand(q, k, v):
    """§12 as three lines of float64 NumPy: S = QKᵀ/√d, P = softmax(S), O = PV."""
    d = q.shape[-1]
    S = q @ np.swapaxes(k, -1, -2) / np.sqrt(d)       # S = QKᵀ / √d           [.., N, N]
    P = softmax_stable(S)                             # P = softmax(S), per row
    O = P @ v                                         # O = P V                [.., N, d]
    return S, P, O


def main(verbose=True):
    rng, seed = example_rng()
    checks = []

    # A head small enough to print: N = 4 queries and keys, d = 3.
    q, k, v = (rng.standard_normal((4, 3)).round(1) for _ in range(3))
    S, P, O = by_hand(q, k, v)
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\nrandom inputs: seed {seed}")
        print("\none head, N = 4, d = 3 (float64):")
        for name, mat in (("Q", q), ("K", k), ("V", v), ("S = QKᵀ/√3", S),
                          ("P = softmax(S)", P), ("O = PV", O)):
            print(f"\n{name}")
            print(tabulate(mat, floatfmt=".4f", tablefmt="plain"))
        print(f"\nrow sums of P: {P.sum(axis=-1)}")
    want_o, _ = attention(q, k, v)
    checks.append(check_close("12", TOPIC, "numpy", O, want_o,
                              "N = 4, d = 3: the three lines by hand = reference.attention",
                              rtol=1e-12, atol=1e-14))
    checks.append(Check("12", TOPIC, "numpy", float(np.max(np.abs(P.sum(-1) - 1))),
                        bool(np.allclose(P.sum(-1), 1, rtol=0, atol=1e-12) and np.all(P > 0)),
                        "every row of P is a probability distribution over the 4 keys"))

    # Random [B, H, N, d] heads through every route.
    b, h, n, d = (1, 2, 20, 8) if flashlesson.SIMULATOR else (2, 8, 1024, 64)
    q, k, v = (rng.standard_normal((b, h, n, d)).astype(np.float32) for _ in range(3))
    q *= 1.5                                          # scores of std ≈ 1.5: P clearly peaked
    S, P, O = by_hand(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))
    want_o, want_lse = attention(q, k, v)
    per_query = attention_per_query(q, k, v)
    shape = f"[{b}, {h}, {n}, {d}]"
    checks.append(check_close("12", TOPIC, "numpy", O, want_o, f"{shape}: by hand = oracle",
                              rtol=1e-12, atol=1e-14))
    checks.append(check_close("13", TOPIC, "numpy", per_query, want_o,
                              f"{shape}: per-query loop o_i = Σ_j p_ij v_j = whole-matrix "
                              "oracle", rtol=1e-12, atol=1e-14))
    rows = [["by hand (float64)", "—", "—", f"{checks[-2].max_err:.1e}", "—"],
            ["reference.attention_per_query", "—", "—", f"{checks[-1].max_err:.1e}", "—"]]
    # float32 kernels: |error| ≤ flashlesson.tolerance's bound for these q, k, v, row by row
    atol_o = attention_tol(q, k, v).o
    for method in FLOAT32_METHODS:           # (flash_wgmma takes fp16/bf16: §37, §42–43)
        o, lse = flashlesson.attention(q, k, v, method=method, return_lse=True)
        co = check_close("12–13", TOPIC, method, o, want_o, f"{shape}: O", atol=atol_o)
        cl = check_close("12–13", TOPIC, method, lse, want_lse,
                         f"{shape}: LSE = log Σ_j e^{{s_ij}}")
        checks += [co, cl]
        rows.append([f"flashlesson.attention(method={method!r})",
                     flashlesson.ATTENTION_METHODS[method].idea, "float32",
                     f"{co.max_err:.1e}", f"{cl.max_err:.1e}"])
    if verbose:
        print(f"\nrandom heads {shape} float32; every route against reference.attention "
              "(float64):")
        print(tabulate(rows, headers=["route", "how", "dtype", "max |ΔO|", "max |ΔLSE|"],
                       maxcolwidths=[None, 44, None, None, None]))

    # §13: each query needs every key and value — change v of the last key only.
    v2 = v.astype(np.float64)                         # in float64, so that v + 1 − v = 1
    v2[..., -1, :] += 1.0
    o2 = attention(q, k, v2)[0]
    moved = np.abs(o2 - want_o).max(axis=-1)          # per query row: how far o_i moved
    expect = P[..., -1]                               # o_i moves by exactly p_i,N−1 · (1, …, 1)
    checks.append(Check("13", TOPIC, "numpy", float(np.max(np.abs(moved - expect))),
                        bool(np.all(moved > 0) and np.allclose(moved, expect, rtol=1e-9)),
                        f"v of the last key + 1 moves every one of the {b * h * n} rows "
                        "o_i, each by p_i,last"))
    if verbose:
        print(f"\n§13: adding 1 to the last key's value vector moves every o_i (all {b * h * n} "
              f"rows), by p_i,last: smallest move {moved.min():.2e}, largest {moved.max():.2e}")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
