"""§30 — the backward pass without P: save the LSE, recompute the tiles of QKᵀ, rebuild P.

The lesson's claim: a plain implementation saves P = softmax(S) for the backward pass, an
N × N matrix per head. FlashAttention saves one statistic per row instead, the LSE
(lse_i = ln Σ_j e^{S_ij}), and in the backward recomputes S = QKᵀ·scale tile by tile and rebuilds
P_ij = e^{S_ij − lse_i} on chip, then forms dQ, dK, dV from it ("recompute" or
"rematerialization"). The gradients of O = softmax(Q Kᵀ · scale) V for an upstream dO:

    D  = rowsum(dO ∘ O)              one number per query row (= Σ_j P_ij dP_ij)
    dV = Pᵀ dO
    dP = dO Vᵀ
    dS = P ∘ (dP − D)                the softmax Jacobian, row by row
    dQ = dS K · scale
    dK = dSᵀ Q · scale

What you will see: those formulas, and the float64 oracle ``reference.attention_backward``
(which computes them on whole matrices) checked against central finite differences of
L = Σ dO ∘ O on a tiny case, causal and not; then the flash backward kernel
(``flashlesson.attention_backward``, fed the O and LSE of the flash forward kernel) against the
oracle with Nq ≠ Nk both ways, causal and not — causal rows that see no key get dQ = 0
exactly; P recomputed from Q, K and the saved LSE alone against the forward's P (the oracle's
softmax, which a naive forward would have stored); and the backward run several times,
bitwise identical each time. flash-attn's default backward adds each K/V block's share of dQ
into global memory with atomicAdd, in whatever order the blocks finish, so its dQ changes in
the last bits from run to run (it offers ``deterministic=True`` at a cost); this kernel has no
atomics: one kernel sums dK and dV per K/V tile, a second sums dQ per Q tile, every gradient
element by one thread in a fixed order — the price is recomputing S and dP a second time, in
the dQ kernel.

Run: ``python examples/s30_backward_recompute.py`` (or
``flashlesson section 30``).
"""

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.tolerance import backward_tol
from flashlesson.tour import Check, attention_inputs, check_close, example_rng, tier_timing
from flashlesson.reference import attention, attention_backward, attention_backward_intermediates, \
    causal_mask

SECTIONS = (30,)
TOPIC = "backward without P"
REL = 1e-4            # kernel gradients vs oracle, relative to the largest |gradient| (tests' bar)
FD_REL = 1e-6         # oracle vs central differences (h = 1e-5: error ~h² + 1e-16/h)
RUNS = 3              # backward runs compared bit for bit

SIM_CASES = [  # (B, H, Nq, Nk, d, causal)
    (1, 2, 20, 33, 16, False),
    (1, 1, 33, 20, 8, True),       # Nq > Nk, bottom-right: the first 13 rows see no key
    (2, 1, 17, 40, 5, True),       # Nq < Nk, odd d
]
GPU_CASES = [
    (2, 4, 300, 500, 64, False),
    (1, 4, 513, 257, 128, True),
    (2, 2, 1000, 1000, 64, True),
    (1, 2, 77, 300, 80, False),
]
# the two tiers' causal cases: causal only in the simulator (keeps the tour short on CPU)
TIER_CASES = (True,) if flashlesson.SIMULATOR else (False, True)


def finite_differences(do, q, k, v, causal, h=1e-5):
    """∂L/∂q, ∂L/∂k, ∂L/∂v of L = Σ dO ∘ O(q, k, v) by central differences, element by element
    (float64, the forward oracle)."""
    def loss(q_, k_, v_):
        return float(np.sum(do * attention(q_, k_, v_, causal=causal)[0]))
    grads = []
    for which in range(3):
        args = [q.copy(), k.copy(), v.copy()]
        g = np.zeros_like(args[which])
        for idx in np.ndindex(g.shape):
            x0 = args[which][idx]
            args[which][idx] = x0 + h
            up = loss(*args)
            args[which][idx] = x0 - h
            down = loss(*args)
            args[which][idx] = x0
            g[idx] = (up - down) / (2 * h)
        grads.append(g)
    return grads


def rel_err(got, want):
    """max |got − want| / max |want| (0 if both are 0)."""
    top = float(np.max(np.abs(want), initial=0.0))
    err = float(np.max(np.abs(np.asarray(got, np.float64) - want), initial=0.0))
    return err / top if top else err


def lesson_and_fast(rng, verbose):
    """The two tiers of the backward: ``kernels_numba/lesson/backward.py`` (D, then dK/dV
    with the K/V tile outside, then dQ; ``tier="lesson"``) first, then the fast kernels, each
    against the float64 oracle within ``tolerance.backward_tol`` (relative to the largest
    |gradient|), fed the flash forward's O and LSE; then the measured gap."""
    from numba import cuda
    b, h, nq, nk, d = (1, 2, 20, 28, 8) if flashlesson.SIMULATOR else (1, 4, 512, 512, 64)
    q, k, v = attention_inputs(rng, b, h, nq, nk, d)
    do = rng.standard_normal((b, h, nq, d)).astype(np.float32)
    bar = backward_tol(q, k)
    checks = []
    for causal in TIER_CASES:
        shape = f"{b}×{h}×{nq}×{nk}, d={d}{', causal' if causal else ''}"
        o, lse = flashlesson.attention(q, k, v, causal=causal, return_lse=True)
        refs = attention_backward(do, q, k, v, causal=causal)
        got = []
        for tier in ("lesson", "fast"):
            grads = flashlesson.attention_backward(do, q, k, v, o, lse, causal=causal,
                                                   tier=tier)
            for name, g, ref in zip(("dQ", "dK", "dV"), grads, refs):
                top = float(np.max(np.abs(ref)))
                c = check_close("30", TOPIC, f"flash bwd ({tier})", g, ref,
                                f"{tier} tier [{shape}] {name}, bound {bar:.1e}·max|{name}|",
                                rtol=0, atol=bar * top)
                got.append(c)
        dev = [cuda.to_device(x) for x in (do, q, k, v, o, lse)]
        got.append(tier_timing("30", TOPIC, "flash bwd",
                               lambda tier, causal=causal: flashlesson.attention_backward(
                                   *dev, causal=causal, tier=tier)))
        if verbose:
            print(f"\nthe backward, lesson tier then fast tier [{shape}]:")
            for c in got:
                print(f"  {c.kernel:>20}: {c.result}"
                      + (f", max err {c.max_err:.2e}" if c.max_err is not None else "")
                      + f" — {c.note}")
        checks += got
    return checks


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    if verbose:
        print(__doc__.split("\n\n")[1])
        print("\n" + __doc__.split("\n\n")[2])

    # 1. The oracle against finite differences, and the identities the formulas rest on.
    fd_rows = []
    for b, h, nq, nk, d, causal in [(1, 1, 3, 4, 3, False), (1, 2, 4, 3, 2, True)]:
        q, k, v = (x.astype(np.float64) for x in attention_inputs(rng, b, h, nq, nk, d))
        do = rng.standard_normal((b, h, nq, d))
        want = finite_differences(do, q, k, v, causal)
        got = attention_backward(do, q, k, v, causal=causal)
        errs = [rel_err(g, w) for g, w in zip(got, want)]
        shape = f"{b}×{h}×{nq}×{nk}, d={d}{', causal' if causal else ''}"
        fd_rows.append([shape] + [f"{e:.1e}" for e in errs])
        checks.append(Check("30", TOPIC, "numpy", max(errs), max(errs) <= FD_REL,
                            f"oracle dQ, dK, dV vs central differences of Σ dO∘O [{shape}]: "
                            f"rel. {max(errs):.1e}"))
        r = attention_backward_intermediates(do, q, k, v, causal=causal)
        p_fwd = attention(q, k, v, causal=causal, return_p=True)[2]
        same = np.allclose(r["D"], np.sum(r["P"] * r["dP"], axis=-1), rtol=1e-12, atol=1e-12)
        same &= np.allclose(r["P"], p_fwd, rtol=1e-12, atol=1e-15)
        checks.append(Check("30", TOPIC, "numpy", None, bool(same),
                            f"[{shape}] D = rowsum(dO∘O) equals Σ_j P_ij dP_ij, and e^(S − lse) "
                            "equals softmax(S)"))
    if verbose:
        print(f"\nthe float64 oracle vs central differences (h = 1e-5), relative error "
              f"(random inputs: seed {seed}):")
        print(tabulate(fd_rows, headers=["B×H×Nq×Nk", "dQ", "dK", "dV"], disable_numparse=True))

    # The two tiers: the lesson backward first, then the fast one; the measured gap.
    checks += lesson_and_fast(rng, verbose)

    # 2. The flash backward kernel against the oracle, fed the flash forward's O and LSE.
    rows = []
    for n, (b, h, nq, nk, d, causal) in enumerate(SIM_CASES if flashlesson.SIMULATOR
                                                  else GPU_CASES):
        q, k, v = attention_inputs(rng, b, h, nq, nk, d)
        do = rng.standard_normal((b, h, nq, d)).astype(np.float32)
        o, lse = flashlesson.attention(q, k, v, causal=causal, return_lse=True)
        grads = flashlesson.attention_backward(do, q, k, v, o, lse, causal=causal)
        refs = attention_backward(do, q, k, v, causal=causal)
        shape = f"{b}×{h}×{nq}×{nk}, d={d}{', causal' if causal else ''}"
        errs = []
        for name, g, ref in zip(("dQ", "dK", "dV"), grads, refs):
            top = float(np.max(np.abs(ref)))
            c = check_close("30", TOPIC, "flash bwd", g, ref, f"[{shape}] {name}", rtol=0,
                            atol=REL * top)
            c.note += f" (rel. {c.max_err / top:.1e})"
            checks.append(c)
            errs.append(c.max_err / top)
        blind = np.isneginf(lse)                     # causal rows that see no key
        if blind.any():
            ok = bool(np.all(grads[0][blind] == 0.0))
            checks.append(Check("30", TOPIC, "flash bwd", None, ok,
                                f"[{shape}] {int(blind.sum())} rows see no key: LSE = −inf, "
                                "dQ = 0 exactly"))
        rows.append([shape, int(blind.sum())] + [f"{e:.1e}" for e in errs])

        # 3. P rebuilt from Q, K and the saved LSE alone equals the forward's P (the softmax a
        # naive forward would have stored). Masked entries are −inf in S, hence 0 in P.
        if n == 0:
            s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)) / np.sqrt(d)
            if causal:
                s = np.where(causal_mask(nq, nk), s, -np.inf)
            lse64 = np.where(blind, 0.0, lse.astype(np.float64))   # (a row that sees no key)
            p_rebuilt = np.exp(s - lse64[..., None])
            p_forward = attention(q, k, v, causal=causal, return_p=True)[2]
            checks.append(check_close("30", TOPIC, "flash fwd LSE", p_rebuilt, p_forward,
                                      f"[{shape}] P = e^(QKᵀ·scale − LSE) from the kernel's "
                                      "saved LSE equals the forward's softmax(S)", rtol=1e-5,
                                      atol=1e-6))
            rebuilt = (shape, p_forward.size * 4, lse.size * 4)

        # 4. Run to run: bitwise identical.
        if n == 1:
            again = [flashlesson.attention_backward(do, q, k, v, o, lse, causal=causal)
                     for _ in range(RUNS - 1)]
            same = all(np.array_equal(x, y) for run in again for x, y in zip(run, grads))
            checks.append(Check("30", TOPIC, "flash bwd", None, same,
                                f"[{shape}] {RUNS} backward runs: dQ, dK, dV bitwise identical "
                                "(no atomics; flash-attn's default dQ uses atomicAdd and is "
                                "not)"))
    if verbose:
        print("\nthe flash backward kernel vs reference.attention_backward (float64), "
              "relative error max|g − g_ref| / max|g_ref|; O and LSE from the flash forward:")
        print(tabulate(rows, headers=["B×H×Nq×Nk", "rows with no key", "dQ", "dK", "dV"],
                       disable_numparse=True))
        shape, p_bytes, lse_bytes = rebuilt
        print(f"\n[{shape}]: what the forward keeps for the backward is the LSE, "
              f"{lse_bytes:,} bytes, not P, {p_bytes:,} bytes (float32); P rebuilt from "
              "Q, K and that LSE matches the forward's P (checked above).")
        print(f"the backward run {RUNS} times gives bitwise identical gradients: no atomics.")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
