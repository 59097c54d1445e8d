"""§17 — why plain fusion fails: one K tile's softmax is not the row's softmax.

The lesson's claim: fusing QKᵀ, softmax and PV into one kernel that walks K in tiles does not
work by itself, because a row's softmax needs the whole row's max and sum. After the first
K tile only, its probabilities are unknown: a later tile may hold a larger score and change
the row max, the denominator, and so every probability already computed.

What you will see: §33's row [2, 1, 4, 3] in tiles of 2, the first tile normalized alone
(``reference.softmax_of_first_tile_only``) next to the true softmax; then real attention
scores S = QKᵀ/√d, cut into K tiles of Bc keys (Bc of the flash kernel's default
configuration): for every row, the first tile's "softmax" against the true P of the oracle
(``reference.attention(return_p=True)``). Each of its probabilities is too large — the tile's
sum is 1 where the true sum is 1 minus the mass of the later tiles — and exactly by that mass
in total; rows whose max lies in a later tile are off the most. Last, the output a fusion
built on it gives (each tile normalized alone, Σ_tiles softmax(S_tile) V_tile) against the
oracle's O, and the flash kernel — the same tiles, with the running (m, l, acc) and the
correction of §18–22 — against the same O.

Run: ``python examples/s17_tile_softmax_is_wrong.py`` (or
``flashlesson section 17``).
"""

import math

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.configs import default_config
from flashlesson.tolerance import attention_tol
from flashlesson.tour import Check, attention_inputs, check_close, example_rng
from flashlesson.reference import attention, softmax_of_first_tile_only, softmax_stable

SECTIONS = (17,)
TOPIC = "tile softmax is wrong"


def main(verbose=True):
    rng, seed = example_rng()
    checks = []

    # The lesson's row, tiles of 2.
    row = np.array([2.0, 1.0, 4.0, 3.0])
    wrong = softmax_of_first_tile_only(row, 2)
    true = softmax_stable(row)
    sigma = np.array([1.0, math.exp(-1)]) / (1 + math.exp(-1))        # softmax of [2, 1]
    ok = np.allclose(wrong[:2], sigma, rtol=1e-15) and np.all(wrong[:2] - true[:2] > 0.2)
    checks.append(Check("17", TOPIC, "numpy", float(np.max(np.abs(wrong[:2] - true[:2]))),
                        bool(ok), "row [2, 1, 4, 3], tile 2: the first tile alone gives "
                        f"{wrong[0]:.3f}, {wrong[1]:.3f}; the row's softmax {true[0]:.3f}, "
                        f"{true[1]:.3f}"))
    if verbose:
        print(__doc__.split("\n\n")[1])
        print("\nthe row [2, 1, 4, 3], K tiles of 2: the first tile normalized alone vs the "
              "whole row")
        fmt = lambda xs: [f"{x:.4f}" for x in xs]                       # noqa: E731
        print(tabulate([["score", *fmt(row)], ["first tile alone", *fmt(wrong[:2]), "?", "?"],
                        ["true softmax", *fmt(true)]], disable_numparse=True))
        print("the first tile's max is 2 and its sum 1 + e^-1; the row's max is 4 (in tile 2) "
              "and its sum e^-2 + e^-3 + 1 + e^-1.")

    # Real attention scores, the flash kernel's K tile width.
    b, h, nq, nk, d = (1, 2, 16, 40, 16) if flashlesson.SIMULATOR else (1, 4, 256, 1000, 64)
    bc = default_config(d).Bc
    q, k, v = attention_inputs(rng, b, h, nq, nk, d)
    q *= 1.5
    k[..., -1, :] = 2 * q[..., 0, :]              # query 0: its largest score is in the last tile
    S = (q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)) / math.sqrt(d)
    want_o, _, P = attention(q, k, v, return_p=True)
    first = softmax_of_first_tile_only(S, bc)[..., :bc]       # tile 0, normalized alone
    true_first = P[..., :bc]
    later_mass = P[..., bc:].sum(axis=-1)                     # probability of the later tiles
    excess = (first - true_first).sum(axis=-1)                # = later mass, exactly
    row_err = np.abs(first - true_first).max(axis=-1)
    later_max = S[..., bc:].max(axis=-1) > S[..., :bc].max(axis=-1)
    # Σ over tile 0 of (first − true) = 1 − (1 − later mass); each term is positive (the
    # tile's sum is smaller than the row's); a later max has p ≥ 1/Nk, so the largest error
    # in such a row is at least 1/(Nk·Bc).
    ok = (np.allclose(excess, later_mass, rtol=0, atol=1e-12) and np.all(first >= true_first)
          and np.all(row_err[later_max] >= 1.0 / (nk * bc)))
    shape = f"B={b} H={h} Nq={nq} Nk={nk} d={d}, Bc={bc}"
    checks.append(Check("17", TOPIC, "numpy", float(row_err.max()), bool(ok),
                        f"{shape}: tile 0 alone overestimates every p, in total by the later "
                        f"tiles' mass; {int(later_max.sum())} of {later_max.size} rows have "
                        "their max in a later tile"))
    if verbose:
        print(f"\nrandom inputs: seed {seed}; {shape}; K tile 0 = keys 0–{bc - 1}")
        show = np.argsort(-row_err.reshape(-1))[:6]
        flat = [a.reshape(-1) for a in (later_max, S[..., :bc].max(-1), S.max(-1), later_mass,
                                         row_err)]
        print(tabulate([[f"{r // nq}, {r % nq}", bool(flat[0][r]), flat[1][r], flat[2][r],
                         flat[3][r], flat[4][r]] for r in show],
                       headers=["head, query", "max in a later tile", "tile-0 max", "row max",
                                "later tiles' mass", "max |p_tile0 − p|"], floatfmt=".4g"))
        print(f"(the 6 worst of {later_max.size} rows; over all rows the largest error is "
              f"{row_err.max():.3g}, the smallest {row_err.min():.3g})")

    # A fusion that normalizes each tile alone, against the oracle and against the flash kernel.
    n_tiles = -(-nk // bc)
    per_tile = softmax_of_first_tile_only(S, bc)              # every tile normalized alone
    o_wrong = per_tile @ v.astype(np.float64)                 # Σ_tiles softmax(S_tile) V_tile
    err_wrong = float(np.max(np.abs(o_wrong - want_o)))
    checks.append(Check("17", TOPIC, "numpy", err_wrong, err_wrong > 0.1,
                        f"{shape}: Σ_tiles softmax(S_tile)·V_tile over {n_tiles} tiles is not O "
                        f"(rows of weights sum to {n_tiles})"))
    o = flashlesson.attention(q, k, v, method="flash")
    c = check_close("17", TOPIC, "flash", o, want_o,
                    f"{shape}: {n_tiles} K/V tiles with the running (m, l, acc): O is right",
                    atol=attention_tol(q, k, v).o)
    checks.append(c)
    if verbose:
        print(f"\nO from {n_tiles} tiles: each normalized alone, max |error| {err_wrong:.3g}; "
              f"the flash kernel (running max, sum and accumulator, rescaled by the correction "
              f"e^(m_old − m_new)), max |error| {c.max_err:.2e}")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
