"""§34 — causal attention: mask the diagonal tiles, skip the tiles above them.

The lesson's claim: in an autoregressive model token i may not see a later token, so
s_ij = −∞ for j > i and, after the softmax, e^{−∞} = 0. A tiled kernel knows each tile's
query and key positions, so it can skip every tile entirely above the diagonal and apply the
element mask only to tiles that straddle it. The lesson draws square tiles (Br = Bc, Nq = Nk):
Q tile 0 visits K tile 0, Q tile 1 K tiles 0–1, Q tile 2 K tiles 0–2, … — about half the work.

What the grids below really do: they use the flash kernel's own tiles, which are not square
(Br = 32, Bc = 16 in the simulator; Br = 128, Bc = 64 for d = 64 on the H200). Q tile i holds
rows i·Br … (i+1)·Br − 1 and its last row sees keys up to (i+1)·Br − 1, so it visits K tiles
0 … (i+1)·Br/Bc − 1: with Br = 2·Bc, Q tile 0 visits two K tiles, both straddling the diagonal
(masked), Q tile 1 four, and so on. The skipped fraction still tends to one half; with
Nq ≠ Nk the diagonal moves (bottom-right alignment, below).

What you will see: the tiles of a causal run drawn as a grid (■ computed without a mask,
◩ computed with the mask, · skipped), from the pseudocode's trace
(``reference.flash_attention_tiled``) with the flash kernel's own Br and Bc; the same for
Nq ≠ Nk, where the mask is aligned bottom-right (query i sees key j iff j ≤ i + Nk − Nq, as
flash-attn ≥ 2.1 does; the last query sees every key), including queries that see no key at
all; the fraction of tiles computed for n × n tiles, n(n+1)/2 of n², tending to one half;
and the causal kernel against the oracle on those shapes — rows that see no key must give
O = 0 and LSE = −inf. On a GPU, causal and full attention are then timed on the same input:
the skipped tiles show as time saved. In the simulator that timing is skipped.

Run: ``python examples/s34_causal_tiles.py`` (or ``flashlesson section 34``).
"""

import datetime

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.configs import default_config
from flashlesson.tolerance import attention_tol
from flashlesson.tour import Check, attention_inputs, attention_tiers, check_close, example_rng
from flashlesson.reference import attention, causal_mask, flash_attention_tiled

SECTIONS = (34,)
TOPIC = "causal tiles"
FULL, MASKED, SKIPPED = "■", "◩", "·"


def tile_grid(nq, nk, br, bc):
    """The causal run's tiles as text rows (one per Q tile), the pseudocode's stats, and
    whether every tile's kind agrees with the mask itself (``reference.causal_mask``): skipped
    iff no query of the tile sees any of its keys, masked iff computed but not all pairs seen."""
    z_q, z_k = np.zeros((nq, 1)), np.zeros((nk, 1))
    trace, stats = [], {}
    flash_attention_tiled(z_q, z_k, z_k, br, bc, causal=True, trace=trace, stats=stats)
    grid = [[SKIPPED] * stats["kv_tiles"] for _ in range(stats["q_tiles"])]
    for t in trace:
        grid[t["i"]][t["j"]] = MASKED if t["masked"] else FULL
    sees = causal_mask(nq, nk)
    agrees = all(
        grid[i][j] == (SKIPPED if not tile.any() else FULL if tile.all() else MASKED)
        for i in range(stats["q_tiles"]) for j in range(stats["kv_tiles"])
        for tile in [sees[i * br:(i + 1) * br, j * bc:(j + 1) * bc]])
    return ["".join(f"{c} " for c in row).rstrip() for row in grid], stats, agrees


def draw(title, nq, nk, br, bc):
    lines, stats, agrees = tile_grid(nq, nk, br, bc)
    out = [title]
    for i, line in enumerate(lines):
        r0, r1 = i * br, min((i + 1) * br, nq)
        sees = r1 - 1 + nk - nq                       # the last key this tile's last row sees
        out.append(f"  Q{i:<2} rows {r0:>4}–{r1 - 1:<4} {line}   "
                   + (f"keys ≤ {sees}" if sees >= 0 else "sees no key"))
    out.append(f"  computed {stats['computed']} of {stats['total']} tiles "
               f"({stats['masked']} with the mask), skipped {stats['skipped']}")
    return "\n".join(out), stats, agrees


def lse_check(kernel, got, want, note):
    """LSE against the oracle: −inf (no key seen) exactly where the oracle has it, the rest
    compared as usual."""
    inf = np.isneginf(want)
    if not np.array_equal(np.isneginf(got), inf):
        return Check("34", TOPIC, kernel, None, False, f"{note}: −inf in other rows than the "
                     "oracle's")
    return check_close("34", TOPIC, kernel, got[~inf], want[~inf], note)


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    d_kernel = 16 if flashlesson.SIMULATOR else 64
    cfg = default_config(d_kernel)
    br, bc = cfg.Br, cfg.Bc

    # The two tiers, causal: the lesson kernel (kernels_numba/lesson/attention.py, the
    # same §34 tile skipping in five lines) first, then the fast one, against the oracle
    shape = (1, 2, 40, 40, 16) if flashlesson.SIMULATOR else (1, 16, 4096, 4096, 64)
    if verbose:
        print(f"\nlesson tier, then fast tier, causal, [B, H, Nq, Nk, d] = {list(shape)}:")
    checks += attention_tiers("34", TOPIC, *attention_inputs(rng, *shape), verbose, causal=True)

    # Pictures with the kernel's tiles.
    n = 8 * max(br, bc)
    pictures = [draw(f"Nq = Nk = {n}, Br = {br}, Bc = {bc}:", n, n, br, bc),
                draw(f"Nq = {2 * br + 5} < Nk = {2 * br + 3 * bc + 12} (bottom-right: the last "
                     "query sees every key):", 2 * br + 5, 2 * br + 3 * bc + 12, br, bc),
                draw(f"Nq = {4 * br} > Nk = {2 * br + 5} (the first {2 * br - 5} queries see no "
                     "key):", 4 * br, 2 * br + 5, br, bc)]
    checks.append(Check("34", TOPIC, "numpy", None, all(a for _, _, a in pictures),
                        "every tile of the 3 pictures: skipped iff no query sees its keys, "
                        "masked iff only some pairs are seen (against causal_mask)"))
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\n{FULL} computed, no mask needed   {MASKED} computed with the mask (straddles "
              f"the diagonal)   {SKIPPED} skipped (above the diagonal)\n")
        print("\n\n".join(p for p, _, _ in pictures))

    # Work saved: n × n tiles.
    rows, ok = [], True
    for n in (1, 2, 4, 8, 16, 64):
        _, st, _ = tile_grid(2 * n, 2 * n, 2, 2)      # n × n tiles of 2 × 2
        ok &= st["computed"] == n * (n + 1) // 2 and st["masked"] == n and \
            st["skipped"] == n * (n - 1) // 2
        rows.append([n, st["total"], st["computed"], st["masked"], st["skipped"],
                     f"{st['computed'] / st['total']:.3f}"])
    checks.append(Check("34", TOPIC, "numpy", None, bool(ok),
                        "n × n tiles: n(n+1)/2 computed (n with the mask), n(n−1)/2 skipped; "
                        f"{rows[-1][-1]} of the work at n = 64"))
    if verbose:
        print("\ntiles computed in a causal run, Nq = Nk, n tiles per side:")
        print(tabulate(rows, headers=["n", "tiles", "computed", "with mask", "skipped",
                                      "fraction computed"], disable_numparse=True))
        print("(n+1)/(2n) → 1/2: FlashAttention's causal pass does about half the work "
              "(attention_flops(causal=True) counts exactly half).")

    # The causal kernel against the oracle.
    cases = ([(1, 1, 40, 40, 16), (1, 1, 24, 40, 8), (1, 2, 40, 24, 8)]
             if flashlesson.SIMULATOR else
             [(2, 8, 1024, 1024, 64), (1, 4, 500, 2000, 64), (1, 4, 2000, 500, 128)])
    table = []
    for b, h, nq, nk, d in cases:
        q, k, v = attention_inputs(rng, b, h, nq, nk, d)
        q *= 1.5
        want_o, want_lse = attention(q, k, v, causal=True)
        o, lse = flashlesson.attention(q, k, v, causal=True, return_lse=True)
        shape = f"B={b} H={h} Nq={nq} Nk={nk} d={d}, causal"
        co = check_close("34", TOPIC, "flash", o, want_o, f"{shape}: O",
                         atol=attention_tol(q, k, v).o)
        cl = lse_check("flash", lse, want_lse, f"{shape}: LSE")
        checks += [co, cl]
        blind = ~causal_mask(nq, nk).any(axis=1)      # queries that see no key
        if blind.any():
            ok = bool(np.all(o[..., blind, :] == 0) and np.all(np.isneginf(lse[..., blind])))
            checks.append(Check("34", TOPIC, "flash", None, ok,
                                f"{shape}: the {int(blind.sum())} queries that see no key give "
                                "O = 0, LSE = −inf"))
        table.append([shape, int(blind.sum()), f"{co.max_err:.1e}", f"{cl.max_err:.1e}"
                      if cl.max_err is not None else "—"])
    if verbose:
        print(f"\nrandom inputs: seed {seed}; the causal kernel vs "
              "reference.attention(causal=True)")
        print(tabulate(table, headers=["shape", "queries with no key", "max |ΔO|",
                                       "max |ΔLSE| (finite rows)"], disable_numparse=True))

    if flashlesson.SIMULATOR:
        if verbose:
            print("\ntiming causal vs full: skipped in the simulator (it would time Python). On "
                  "a GPU this example times both at N = 4096.")
        return checks
    checks += _timed(rng, verbose)
    return checks


def _timed(rng, verbose):
    """GPU only: causal vs full flash at the same size; skipped tiles are time saved."""
    from numba import cuda

    from flashlesson.bench import time_gpu
    b, h, n, d = 1, 32, 4096, 64
    q, k, v = (cuda.to_device(rng.standard_normal((b, h, n, d)).astype(np.float32))
               for _ in range(3))
    ms = {}
    with cuda.defer_cleanup():                        # no cuMemFree (a sync) while timing
        for causal in (False, True):
            ms[causal] = time_gpu(lambda: flashlesson.attention(q, k, v, causal=causal),
                                  samples=7, inner=3)
    ratio = ms[True] / ms[False]
    _, st, _ = tile_grid(n, n, default_config(d).Br, default_config(d).Bc)
    frac = st["computed"] / st["total"]
    if verbose:
        dev = flashlesson.device.describe()["device"]
        print(f"\n{dev}, {datetime.date.today()}: B={b} H={h} N={n} d={d}: full {ms[False]:.3f} "
              f"ms, causal {ms[True]:.3f} ms, ratio {ratio:.2f} (tiles computed: {frac:.3f})")
    # a shared GPU's timing, printed as a measurement (the expected ratio, ≈ the fraction of
    # tiles computed, is less than 2× away from 1: not a margin to pass or fail on)
    return [Check.measured("34", TOPIC, "flash",
                           f"B={b} H={h} N={n} d={d}: causal {ms[True]:.2f} ms vs full "
                           f"{ms[False]:.2f} ms = {ratio:.2f} (tiles computed {frac:.2f})")]


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
