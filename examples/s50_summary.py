"""§50 — the summary: tiling + online softmax + no N² writes to HBM, and the tour covers §1–50.

The lesson's conclusion. FlashAttention is exact attention (not sparse, not low-rank) with the
same O(N²d) arithmetic, made fast by cutting HBM traffic with three ideas:
tiling + online softmax + avoiding N² intermediate writes to HBM.

What you will see: first the tour's own coverage — every example's ``SECTIONS``, read from
the files ``flashlesson.tour.find_examples`` finds (``tour.declared_sections``: read, not
run), against the lesson's 50 sections; the check fails, naming each missing §, until every
one has an example. Then each of the three ideas, with the examples that showed it and one
small demonstration here: (1) tiling — §32's tiled loop (``reference.flash_attention_tiled``,
3×5 tiles) equals softmax(QKᵀ/√d)V in float64; (2) online softmax — one pass of running
(m, l) over a row with a +1000 outlier (§20) equals the three-pass softmax; (3) no N² HBM
writes — the IO model (``flashlesson.traffic``) at N = 4096, d = 64: naive writes S and P
(N² each), flash only O and the LSE. Last, the three together in the flash kernel, checked
against the oracle.

Run: ``python examples/s50_summary.py`` (or ``flashlesson section 50``).
"""

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson import traffic
from flashlesson.tour import (LESSON_SECTIONS, RTOL, Check, attention_inputs, check_close,
                              declared_sections, example_rng, lesson_rows)
from flashlesson.reference import attention, flash_attention_tiled, softmax_online, softmax_stable

SECTIONS = (50,)
TOPIC = "summary"

# The three ideas of §50 and the sections whose examples show them.
IDEAS = (
    ("tiling", "Q, K, V cut into tiles that live on chip; S a tile at a time", (23, 24, 32, 38)),
    ("online softmax", "running (m, l, acc), rescaled per tile: exact without the whole row",
     (17, 18, 19, 20, 21, 22, 33, 49)),
    ("no N² HBM writes", "only O (and the LSE) reach HBM; S and P never do",
     (14, 25, 28, 29, 31)),
)


def main(verbose=True):
    rng, seed = example_rng()
    checks = []

    # The tour covers the lesson: every § has an example.
    declared = declared_sections()
    missing = [s for s in LESSON_SECTIONS if s not in declared]
    files = sorted({f for names in declared.values() for f in names})
    checks.append(Check("50", TOPIC, "tour", None, not missing,
                        f"{len(files)} examples cover {len(declared)} of the lesson's "
                        f"{len(LESSON_SECTIONS)} sections" + (
                            "; missing: " + ", ".join(f"§{s}" for s in missing) if missing
                            else "")))
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\ncoverage: {len(declared)} of §1–{LESSON_SECTIONS[-1]} have an example"
              + (f"; MISSING: {', '.join(f'§{s}' for s in missing)}" if missing else ""))

    # The three ideas, each with its examples and a demonstration.
    table = []
    for name, what, secs in IDEAS:
        shown = sorted({f for s in secs for f in declared.get(s, [])})
        lacking = [s for s in secs if s not in declared]
        checks.append(Check("50", TOPIC, name, None, not lacking,
                            f"{what}: " + (", ".join(shown) or "no example") + (
                                f" (no example yet for §{', §'.join(map(str, lacking))})"
                                if lacking else "")))
        table.append([name, what, "\n".join(shown)])
    if verbose:
        print("\nthe three ideas and the examples that showed them")
        print(tabulate(table, headers=["idea", "what", "examples"], disable_numparse=True))

    # (1) tiling: the tiled loop is the formula, not an approximation of it.
    q, k, v = (x.astype(np.float64) for x in attention_inputs(rng, 1, 2, 11, 13, 8))
    want_o, want_lse = attention(q, k, v)
    o, lse = flash_attention_tiled(q, k, v, 3, 5)
    checks.append(check_close("50", TOPIC, "numpy (tiled)", o, want_o,
                              "tiling: 3×5 tiles of §32's loop = softmax(QKᵀ/√d)V, float64, "
                              "Nq=11 Nk=13 d=8", rtol=1e-12, atol=1e-12))

    # (2) online softmax: one pass of (m, l) = the three-pass answer, outlier row included.
    x = lesson_rows(rng, 4, 1000).astype(np.float64)
    checks.append(check_close("50", TOPIC, "numpy (online)", softmax_online(x),
                              softmax_stable(x), "online softmax: one pass of (m, l) over "
                              "rows of 1000 (+1000 outlier row) = stable softmax",
                              rtol=1e-12, atol=1e-15))

    # (3) no N² writes: the IO model of both methods at N = 4096, d = 64.
    n, d = 4096, 64
    written = {m: {a: acc.writes for a, acc in
                   traffic.attention_traffic(1, 1, n, n, d, m).items() if acc.writes}
               for m in ("naive", "flash")}
    ok = (written["flash"] == {"o": n * d, "lse": n}
          and written["naive"].get("s") == n * n and written["naive"].get("p") == n * n)
    checks.append(Check("50", TOPIC, "formula", None, ok,
                        f"no N² writes, N={n} d={d}, elements written: naive " + ", ".join(
                            f"{a} {w:,}" for a, w in written["naive"].items()) + "; flash "
                        + ", ".join(f"{a} {w:,}" for a, w in written["flash"].items())))

    # The three together: the flash kernel against the oracle.
    b, h, nq, nk, d = (1, 2, 21, 37, 16) if flashlesson.SIMULATOR else (2, 16, 1000, 4096, 64)
    q, k, v = attention_inputs(rng, b, h, nq, nk, d)
    want_o, _ = attention(q, k, v)
    got = flashlesson.attention(q, k, v)
    checks.append(check_close("50", TOPIC, "flash", got, want_o,
                              f"all three in one kernel: B={b} H={h} Nq={nq} Nk={nk} d={d}",
                              atol=RTOL * float(np.abs(want_o).max())))
    if verbose:
        print(f"\n(random inputs: seed {seed}) tiling: max |Δ| {checks[-4].max_err:.1e}; online "
              f"softmax: {checks[-3].max_err:.1e}; IO model at N = {n}: naive writes "
              f"{sum(written['naive'].values()):,} elements, flash "
              f"{sum(written['flash'].values()):,}; flash kernel vs oracle: "
              f"{checks[-1].max_err:.1e}")
        print("\ntiling + online softmax + no N² intermediate writes to HBM: the same O(N²d) "
              "FLOPs, exact, with HBM traffic and memory O(N·d) instead of O(N²)")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
