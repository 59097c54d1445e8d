"""§49 — what online softmax keeps per query row: m, l and a d-vector.

The lesson's claim: for one query row the whole state is m_i (the running max, a scalar), l_i
(the rescaled sum of exponentials, a scalar) and a_i ∈ R^d (the un-normalized output) — not
the row of N probabilities. With d ≪ N that is a large saving.

What you will see: the per-row state table from ``reference.attention_state_sizes`` for
d ∈ {64, 128} and N ∈ {1024, 4096, 65536} — d + 2 values against N, per row and per head, in
float32 — with the numbers asserted; how the flash kernel holds that state (a row's acc is
spread over the TC threads that share the row, each with its own copy of m and l, in
registers); and the claim checked on data: the state (m, l, acc) of ``reference.attention_state``
alone gives O = acc / l and LSE = m + ln l, and the flash kernel, which keeps only that state,
returns the same O and LSE.

Run: ``python examples/s49_state_size.py`` (or ``flashlesson section 49``).
"""

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.configs import default_config
from flashlesson.tour import Check, RTOL, attention_inputs, check_close, example_rng
from flashlesson.reference import attention_state, attention_state_sizes

SECTIONS = (49,)
TOPIC = "per-row state"
FP32 = 4
KiB, MiB = 2 ** 10, 2 ** 20


def main(verbose=True):
    rng, seed = example_rng()
    checks = []

    rows, ok = [], True
    for d in (64, 128):
        for n in (1024, 4096, 65536):
            s = attention_state_sizes(n, d, dtype_bytes=FP32)
            ok &= (s["flash_row_values"] == d + 2 and s["p_row_values"] == n
                   and s["flash_row_bytes"] == (d + 2) * FP32 and s["p_row_bytes"] == n * FP32
                   and s["flash_head_bytes"] == n * (d + 2) * FP32
                   and s["p_head_bytes"] == n * n * FP32 and s["ratio"] == n / (d + 2))
            rows.append([d, f"{n:,}", s["flash_row_values"], f"{s['p_row_values']:,}",
                         f"{s['flash_row_bytes']:,}", f"{s['p_row_bytes']:,}",
                         f"{s['flash_head_bytes'] / KiB:,.0f}", f"{s['p_head_bytes'] / MiB:,.0f}",
                         f"{s['ratio']:,.0f}×"])
    s = attention_state_sizes(4096, 64, dtype_bytes=FP32)
    ok &= s["flash_row_values"] == 66 and round(s["ratio"]) == 62
    checks.append(Check("49", TOPIC, "formula", None, bool(ok),
                        "per row: d + 2 values (m, l, acc) instead of N; N = 4096, d = 64: "
                        f"66 vs 4096, {s['ratio']:.0f}× less"))
    if verbose:
        print(__doc__.split("\n\n")[1])
        print("\nper query row, float32: the flash state (m, l, acc) vs a row of P")
        print(tabulate(rows, headers=["d", "N", "state values (d+2)", "P row values (N)",
                                      "state B", "P row B", "state KiB / head",
                                      "P MiB / head", "P / state"], disable_numparse=True))

    # How the kernel holds it.
    if verbose:
        table = []
        for d in ((16,) if flashlesson.SIMULATOR else (64, 128, 256)):
            c = default_config(d)
            dn, rm = c.head_dim(d) // c.TC, c.Br // c.TR
            table.append([d, f"Br={c.Br} Bc={c.Bc} TR={c.TR} TC={c.TC}", rm, c.TC, dn,
                          rm * (2 + dn), c.Br * (d + 2)])
        print("\nin the flash kernel (registers, cuda.local.array): thread (tr, tc) owns RM rows; "
              "a row's acc is split over its TC threads, D/TC values each, and every one of them "
              "keeps the row's m and l")
        print(tabulate(table, headers=["d", "config", "rows per thread RM", "threads per row TC",
                                       "acc values per thread", "state floats per thread "
                                       "RM·(2 + D/TC)", "state floats per Q tile Br·(d+2)"],
                       disable_numparse=True))

    # On data: the state alone gives O and LSE; the kernel, which keeps only it, agrees.
    b, h, nq, nk, d = (1, 2, 16, 40, 16) if flashlesson.SIMULATOR else (1, 8, 1024, 4096, 64)
    q, k, v = attention_inputs(rng, b, h, nq, nk, d)
    q *= 1.5
    m, l, acc = attention_state(q, k, v)                      # float64, per row: m, l, acc
    state_o, state_lse = acc / l[..., None], m + np.log(l)
    o, lse = flashlesson.attention(q, k, v, return_lse=True)
    shape = f"B={b} H={h} Nq={nq} Nk={nk} d={d}"
    checks.append(check_close("49", TOPIC, "flash", o, state_o,
                              f"{shape}: kernel O = acc / l of the state",
                              atol=RTOL * float(np.abs(state_o).max())))
    checks.append(check_close("49", TOPIC, "flash", lse, state_lse,
                              f"{shape}: kernel LSE = m + ln l of the state"))
    if verbose:
        print(f"\nrandom inputs: seed {seed}; {shape}: from (m, l, acc) alone, O = acc / l and "
              f"LSE = m + ln l; the flash kernel: max |ΔO| {checks[-2].max_err:.1e}, "
              f"max |ΔLSE| {checks[-1].max_err:.1e}")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
