"""§36 — dropout without storing the mask: a counter-based generator, regenerated in the backward.

The lesson's claim: in training the attention probabilities may go through dropout,
P̃_ij = M_ij P_ij / (1 − p) with a random keep-mask M. An efficient kernel does not want to
store an N × N mask; instead it uses a reproducible counter-based random number generator,
saves only the seed (and an offset), and regenerates the same mask in the backward pass — a
few bytes of generator state in place of the whole mask.

What you will see: Philox4x32-10 (Random123's counter-based generator: 10 rounds of two 32 × 32
→ 64-bit multiplies and XORs, no state carried from call to call) giving Random123's
known-answer vectors, from the device function in a tiny kernel and from its NumPy twin; the
keep-mask as a pure function of (seed, b, h, i, j) — word (j mod 4) of Philox(counter =
(j div 4, i, b·H + h, 0), key = the seed's two 32-bit halves), kept iff it is ≥ ⌊p·2^32⌋: the
same seed gives the same mask, a block of a bigger mask is the smaller mask, the kernel's mask
equals the twin's bit for bit, and the fraction kept is 1 − p within binomial bounds; the
forward kernel with dropout against the float64 oracle given ``dropout_keep_mask``'s mask;
and the backward kernel, given only the seed, against the oracle's gradients for that same
mask — it regenerated the forward's mask, and a backward given another seed does not match.
Last, what was not stored: the mask's size against the 8-byte seed (the counter is the
element's own position, so no offset needs saving either).

Run: ``python examples/s36_dropout_philox.py`` (or
``flashlesson section 36``).
"""

import math

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.tolerance import attention_tol, backward_tol
from flashlesson.tour import Check, attention_inputs, check_close, example_rng, tier_timing
from flashlesson.kernels_numba import philox as KP
from numba import cuda  # (after flashlesson, which picks the GPU or the simulator)
from flashlesson.reference import attention, attention_backward, philox4x32_10
from flashlesson.reference import dropout_keep_mask as twin_keep_mask
from flashlesson.reference.philox import KNOWN_ANSWERS

SECTIONS = (36,)
TOPIC = "dropout by Philox"
MiB = 2 ** 20
KAT = KNOWN_ANSWERS        # Random123's kat_vectors: (counter, key, expected)


def hexwords(words):
    return " ".join(f"{int(w):08x}" for w in words)


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    sim = flashlesson.SIMULATOR

    # 1. Known answers: the device function and the NumPy twin.
    c = np.array([x for x, _, _ in KAT], np.uint32)
    k = np.array([x for _, x, _ in KAT], np.uint32)
    want = np.array([x for _, _, x in KAT], np.uint32)
    out = cuda.to_device(np.zeros_like(want))
    KP.philox_rows_kernel[1, 32](cuda.to_device(c), cuda.to_device(k), out)
    dev = out.copy_to_host()
    twin = philox4x32_10(c, k)
    kat_rows = []
    for n, (cc, kk, ww) in enumerate(KAT):
        ok_dev = bool(np.array_equal(dev[n], want[n]))
        ok_twin = bool(np.array_equal(twin[n], want[n]))
        kat_rows.append([hexwords(cc), hexwords(kk), hexwords(dev[n]), "yes" if ok_dev and
                         ok_twin else "NO"])
        for who, ok in (("kernels_numba.philox", ok_dev), ("reference.philox", ok_twin)):
            checks.append(Check("36", TOPIC, who, None, ok,
                                f"Philox4x32-10 known answer: counter {hexwords(cc)}, key "
                                f"{hexwords(kk)} → {hexwords(ww)}"))
    if verbose:
        print(__doc__.split("\n\n")[1])
        print("\nPhilox4x32-10 known-answer vectors (Random123), from the device function in a "
              "kernel and from the NumPy twin:")
        print(tabulate(kat_rows, headers=["counter", "key", "device function", "= expected, "
                                          "both"], disable_numparse=True))

    # 2. The keep-mask: a pure function of (seed, b, h, i, j).
    s = int(rng.integers(2**32, 2**62)) * 2 + 1            # both 32-bit halves of the key used
    p = 0.3
    shape = (2, 3, 9, 22) if sim else (2, 8, 512, 1000)
    small = (1, 2, 5, 13) if sim else (2, 8, 100, 333)
    mask = flashlesson.dropout_keep_mask(s, *shape, p)
    again = flashlesson.dropout_keep_mask(s, *shape, p)
    sub = flashlesson.dropout_keep_mask(s, *small, p)
    other = flashlesson.dropout_keep_mask(s + 2, *shape, p)
    agree = float((mask == other).mean())
    checks += [
        Check("36", TOPIC, "dropout_keep_mask", None, bool(np.array_equal(mask, again)),
              f"seed {s}: the same seed gives the same mask {list(shape)}"),
        Check("36", TOPIC, "dropout_keep_mask", None,
              bool(np.array_equal(mask[:small[0], :small[1], :small[2], :small[3]], sub)),
              f"mask{list(small)} = the top-left block of mask{list(shape)}: each bit "
              "depends on (seed, b, h, i, j) only, not on the shape of the call"),
        Check("36", TOPIC, "dropout_keep_mask", None,
              bool(np.array_equal(mask, twin_keep_mask(s, *shape, p))),
              "the kernel's mask equals the NumPy twin's, bit for bit"),
        Check("36", TOPIC, "dropout_keep_mask", None,
              abs(agree - (p * p + (1 - p) ** 2)) < 0.1,
              f"another seed gives an unrelated mask: the two agree on {agree:.0%} of the "
              f"elements (p² + (1 − p)² = {p * p + (1 - p) ** 2:.0%} for independent masks)"),
    ]
    # the fraction kept: binomial, mean 1 − p, standard deviation √(p(1 − p)/n); the twin (bit
    # for bit the kernel's) gives a bigger sample in the simulator
    frac_rows = []
    for q_p in (0.1, 0.5, 0.9):
        big = twin_keep_mask(s, 2, 4, 128, 512, q_p) if sim else \
            flashlesson.dropout_keep_mask(s, 4, 16, 1024, 1024, q_p)
        kept = float(big.mean())
        sigma = math.sqrt(q_p * (1 - q_p) / big.size)
        ok = abs(kept - (1 - q_p)) <= 5 * sigma
        frac_rows.append([q_p, f"{big.size:,}", f"{kept:.5f}", f"{1 - q_p:.5f} ± "
                          f"{5 * sigma:.5f}"])
        checks.append(Check("36", TOPIC, "reference.philox" if sim else "dropout_keep_mask",
                            abs(kept - (1 - q_p)), ok,
                            f"p = {q_p}: kept {kept:.4f} of {big.size:,}, within 5σ of 1 − p"))
    if verbose:
        print(f"\nthe keep-mask: seed {s}, p = {p}; same seed → same mask, "
              f"a {list(small)} call = a block of the {list(shape)} call, kernel = twin; "
              f"another seed agrees on {agree:.0%}. Fraction kept:")
        print(tabulate(frac_rows, headers=["p", "elements", "kept", "1 − p ± 5σ"],
                       disable_numparse=True))

    # 3. Forward and backward with dropout: the oracle is given the mask, the kernels the seed.
    rows = []
    cases = [(1, 2, 20, 33, 16, False), (2, 1, 24, 17, 8, True)] if sim else \
        [(2, 4, 300, 500, 64, False), (1, 4, 513, 257, 128, True)]
    for b, h, nq, nk, d, causal in cases:
        q, k, v = attention_inputs(rng, b, h, nq, nk, d)
        do = rng.standard_normal((b, h, nq, d)).astype(np.float32)
        m = flashlesson.dropout_keep_mask(s, b, h, nq, nk, p)
        shape_s = f"{b}×{h}×{nq}×{nk}, d={d}{', causal' if causal else ''}"
        want_o, want_lse = attention(q, k, v, causal=causal, dropout_mask=m, dropout_p=p)
        tol = attention_tol(q, k, v, dropout_p=p)          # the error model's bars
        finite = ~np.isneginf(want_lse)
        top = float(np.abs(want_o).max())
        for tier in ("lesson", "fast"):                 # the lesson kernel first
            o, lse = flashlesson.attention(q, k, v, causal=causal, dropout_p=p, seed=s,
                                           return_lse=True, tier=tier)
            co = check_close("36", TOPIC, f"flash fwd ({tier})", o, want_o,
                             f"[{shape_s}] O with dropout p = {p} = the oracle's "
                             "(P∘M/(1 − p)) V, M = dropout_keep_mask(seed)", rtol=0, atol=tol.o)
            cl = check_close("36", TOPIC, f"flash fwd ({tier})", lse[finite], want_lse[finite],
                             f"[{shape_s}] LSE of the un-dropped softmax (what the backward "
                             "rebuilds P from)", rtol=0,
                             atol=np.broadcast_to(tol.lse, want_lse.shape)[finite])
            checks += [co, cl]
        dev = [cuda.to_device(a) for a in (q, k, v)]
        checks.append(tier_timing("36", TOPIC, "flash fwd", lambda tier: flashlesson.attention(
            *dev, causal=causal, dropout_p=p, seed=s, tier=tier)))
        refs = attention_backward(do, q, k, v, causal=causal, dropout_mask=m, dropout_p=p)
        grads = flashlesson.attention_backward(do, q, k, v, o, lse, causal=causal,
                                               dropout_p=p, seed=s)
        errs = [float(np.max(np.abs(g - r)) / np.max(np.abs(r))) for g, r in zip(grads, refs)]
        rel = backward_tol(q, k)                        # the error model's relative bar
        cb = Check("36", TOPIC, "flash bwd", max(errs), max(errs) <= rel,
                   f"[{shape_s}] dQ, dK, dV from the seed alone = the oracle's for the forward's "
                   f"mask: rel. {max(errs):.1e}")
        wrong = flashlesson.attention_backward(do, q, k, v, o, lse, causal=causal,
                                               dropout_p=p, seed=s + 2)
        off = max(float(np.max(np.abs(g - r)) / np.max(np.abs(r))) for g, r in zip(wrong, refs))
        cw = Check("36", TOPIC, "flash bwd", off, off > 100 * rel,
                   f"[{shape_s}] contrast: the backward with another seed is off by {off:.1e}")
        checks += [cb, cw]
        rows.append([shape_s, f"{co.max_err / top:.1e}", " ".join(f"{e:.1e}" for e in errs),
                     f"{off:.1e}"])
    if verbose:
        print(f"\nforward and backward with dropout p = {p}, seed {s}: the kernels get the seed, "
              "the float64 oracle the mask ``dropout_keep_mask`` returns (relative errors):")
        print(tabulate(rows, headers=["B×H×Nq×Nk", "O", "dQ dK dV", "bwd with another seed"],
                       disable_numparse=True))

    # 4. What was not stored.
    sizes, mib = [], {}
    for n in (1024, 4096, 16384):
        elements = 16 * n * n                                # B = 1, H = 16: one bit each
        mib[n] = (elements / 8 / MiB, elements / MiB)
        sizes.append([n, f"{mib[n][0]:,.0f}", f"{mib[n][1]:,.0f}", 8])
    checks.append(Check("36", TOPIC, "formula", None, mib[4096] == (32, 256),
                        "B = 1, H = 16, N = 4096: a stored keep-mask is 32 MiB as bits, 256 MiB "
                        "as bytes; the seed it is regenerated from, 8 bytes"))
    if verbose:
        print("\nwhat the kernels keep instead of the mask, B = 1, H = 16:")
        print(tabulate(sizes, headers=["N", "mask as bits MiB", "mask as bytes MiB",
                                       "seed bytes"], disable_numparse=True))
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
