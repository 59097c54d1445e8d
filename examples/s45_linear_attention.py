"""§45 — linear attention is O(N·d²) because it is a different model; FlashAttention is exact.

The lesson's claim: linear attention lowers the cost from O(N²d) to about O(Nd²) by changing
the formula (a kernel feature map φ instead of e^{q·k}), so it may change what the model
computes; FlashAttention changes nothing in the formula — every query still meets every key,
O(N²d) FLOPs — and only cuts HBM traffic and memory.

What you will see: the FLOP counts of both (``reference.linear_attention_flops`` 2·(Nq+Nk)·d·(d+1)
against ``reference.attention_flops`` 4·Nq·Nk·d), their ratio N/(d+1) asserted; then on fresh
random data, each kernel against its own float64 oracle — ``flashlesson.linear_attention``
(φ(x) = elu(x) + 1, kernels_numba/linear_attention.py) against ``reference.linear_attention``,
causal and not, and ``flashlesson.attention`` (flash) against ``reference.attention`` — the
linear oracle's O(N·d²) form against its O(N²·d) form (the parentheses moved, same model), and
the distance between the two models on the same q, k, v: a relative error of tens of percent,
checked to be large (it is not a rounding difference). On a GPU the example also times both
at growing N: linear ∝ N, flash ∝ N², and linear faster at long sequences (checked on the
growth from N = 4096 to 16384: flash's time must grow ≥ 2× more than linear's, ~4× expected).

Run: ``python examples/s45_linear_attention.py`` (or ``flashlesson section 45``).
"""

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.tour import RTOL, Check, attention_inputs, check_close, example_rng
from flashlesson.reference import (attention, attention_flops, linear_attention, linear_attention_flops,
                       linear_attention_quadratic)

SECTIONS = (45,)
TOPIC = "linear attention"
D = 64
NS = (1024, 4096, 16384, 65536)


def rel(a, b):
    """max |a − b| / max |b|."""
    return float(np.max(np.abs(np.asarray(a, np.float64) - b)) / np.max(np.abs(b)))


def main(verbose=True):
    rng, seed = example_rng()
    checks = []

    # FLOPs: N·d² against N²·d
    rows, ok = [], True
    for n in NS:
        lin, soft = linear_attention_flops(1, 1, n, n, D), attention_flops(1, 1, n, n, D)
        ok &= lin == 2 * 2 * n * D * (D + 1) and soft == 4 * n * n * D and \
            abs(soft / lin - n / (D + 1)) < 1e-9 * n
        rows.append([f"{n:,}", f"{lin:.3g}", f"{soft:.3g}", f"{soft / lin:,.0f}×"])
    checks.append(Check("45", TOPIC, "formula", None, bool(ok),
                        f"per head, d = {D}: linear 4·N·d·(d+1), softmax 4·N²·d; ratio "
                        f"N/(d+1) = {NS[-1] / (D + 1):,.0f}× at N = {NS[-1]:,}"))
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\nFLOPs per head (Nq = Nk = N, d = {D}): linear attention's φ(K)ᵀ[V | 1] and "
              "φ(Q)·KV' vs softmax attention's QKᵀ and PV")
        print(tabulate(rows, headers=["N", "linear 2·2N·d·(d+1)", "softmax 4·N²·d",
                                      "softmax / linear"], disable_numparse=True))

    # On data: each kernel against its own oracle; the two models against each other.
    b, h, n, d = (1, 2, 24, 16) if flashlesson.SIMULATOR else (2, 4, 1024, D)
    q, k, v = attention_inputs(rng, b, h, n, n, d)
    shape = f"B={b} H={h} N={n} d={d}"
    for causal in (False, True):
        tag = "causal" if causal else "full"
        want = linear_attention(q, k, v, causal)
        got = flashlesson.linear_attention(q, k, v, causal=causal)
        checks.append(check_close("45", TOPIC, f"linear ({tag})", got, want,
                                  f"{shape}: vs reference.linear_attention",
                                  atol=RTOL * float(np.abs(want).max())))
        quad = linear_attention_quadratic(q, k, v, causal)
        err = rel(want, quad)
        checks.append(Check("45", TOPIC, "numpy", err, err < 1e-12,
                            f"{tag}: φ(Q)(φ(K)ᵀV)/… == (φ(Q)φ(K)ᵀ)V/… in float64 (the "
                            "parentheses moved: the same model)"))
        soft = attention(q, k, v, causal=causal)[0]
        o_flash = flashlesson.attention(q, k, v, causal=causal)
        checks.append(check_close("45", TOPIC, f"flash ({tag})", o_flash, soft,
                                  f"{shape}: vs reference.attention (exact, §27)",
                                  atol=RTOL * float(np.abs(soft).max())))
        gap = rel(got, soft)
        checks.append(Check("45", TOPIC, f"linear vs softmax ({tag})", gap, gap > 0.05,
                            f"the two models on the same q, k, v differ by {100 * gap:.0f}% of "
                            "max |O| (checked > 5%: a different model, not rounding)"))
    if verbose:
        print(f"\nrandom inputs: seed {seed}; {shape}")
        print(tabulate([[c.kernel, f"{c.max_err:.2e}", "ok" if c.passed else "FAILED", c.note]
                        for c in checks[1:]], headers=["what", "error", "", "note"],
                       disable_numparse=True))

    if flashlesson.SIMULATOR:
        if verbose:
            print("\ntiming: skipped in the simulator. On a GPU this example times linear "
                  f"and flash attention for N = {', '.join(map(str, NS[1:]))} (B = 1, H = 16, "
                  f"d = {D}).")
        return checks
    return checks + _timed(rng, verbose)


def flops(name, n):
    """The FLOP count of one timed call (B = 1, H = 16): each model's own."""
    return (linear_attention_flops(1, 16, n, n, D) if name.startswith("linear")
            else attention_flops(1, 16, n, n, D))


def _timed(rng, verbose):
    from numba import cuda

    from flashlesson.bench import time_gpu_adaptive
    big, small = 16384, 4096
    times, again = {}, {}
    for n in NS[1:]:
        q, k, v = (cuda.to_device(rng.standard_normal((1, 16, n, D)).astype(np.float32))
                   for _ in range(3))
        for name, fn in (("linear", lambda q=q, k=k, v=v: flashlesson.linear_attention(q, k, v)),
                         ("linear causal", lambda q=q, k=k, v=v:
                          flashlesson.linear_attention(q, k, v, causal=True)),
                         ("flash", lambda q=q, k=k, v=v: flashlesson.attention(q, k, v))):
            if name == "flash" and n > 16384:
                continue                            # 0.7 s a call: skipped
            times[name, n] = time_gpu_adaptive(fn)
            if name in ("linear", "flash") and n in (small, big):
                again[name, n] = fn
    # timing as pass/fail only with a large margin, on what the lesson claims: the cost's
    # growth. From N = 4096 to 16384 flash's time should grow ~16× (N²) and linear's ~4× (N),
    # a ratio of ~4; pass at ≥ 2. (The times themselves are a measurement: linear's kernel
    # walks each sequence in one block, and under other processes' load on the GPU its lead
    # at N = 16384 fell to 1.9× in one H200 run.) Each of the four times is the least of three
    # medians taken in turn: other processes' kernels only ever add time, and under the GPU
    # test run's twelve workers one median of flash at N = 4096 came out about 7× its own
    # cost (2026-12-02: 16 ms against 2.2 alone; ×2.8 from 4096 to 16384, the check failed).
    for _ in range(2):
        for key, fn in again.items():
            times[key] = min(times[key], time_gpu_adaptive(fn))
    table = [[f"{n:,}"] + [f"{times[name, n]:.3f} ms ({flops(name, n) / times[name, n] / 1e9:.2f}"
                           f" TFLOP/s)" if (name, n) in times else "—"
                           for name in ("linear", "linear causal", "flash")] for n in NS[1:]]
    gain = times["flash", big] / times["linear", big]
    growth = (times["flash", big] / times["flash", small]) / \
        (times["linear", big] / times["linear", small])
    checks = [Check("45", TOPIC, "measured", None, growth >= 2.0,
                    f"N = {small:,} → {big:,}, B·H = 16, d = {D}: flash ×"
                    f"{times['flash', big] / times['flash', small]:.1f}, linear ×"
                    f"{times['linear', big] / times['linear', small]:.1f} ({growth:.1f}× apart; "
                    f"pass/fail at ≥ 2×); at N = {big:,} linear {times['linear', big]:.2f} ms, "
                    f"flash {times['flash', big]:.2f} ms ({gain:.1f}×)")]
    if verbose:
        print(f"\nGPU time, B = 1, H = 16, d = {D}, float32 (CUDA events; TFLOP/s of each "
              "model's own FLOP count):")
        print(tabulate(table, headers=["N", "linear", "linear causal", "flash"],
                       disable_numparse=True))
        lin = [times["linear", n] for n in NS[1:]]
        print("linear time per ×4 of N: " + ", ".join(f"×{b / a:.1f}" for a, b in
                                                       zip(lin, lin[1:]))
              + f"; flash: ×{times['flash', 16384] / times['flash', 4096]:.1f} (≈ 16 for N²). "
              "The causal kernel walks each sequence in one block (B·H = 16 blocks): simple, "
              "and it shows.")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
