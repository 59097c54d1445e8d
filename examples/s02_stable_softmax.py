"""§2 — stable softmax.

The lesson's claim: e^{x_i − c} / Σ_j e^{x_j − c} = e^{x_i} / Σ_j e^{x_j} for any c (numerator
and denominator are both multiplied by e^{−c}); with c = m = max_j x_j every exponent is ≤ 0,
so 0 < e^{x_i − m} ≤ 1 and nothing overflows. The inputs 1000, 999, 998 that gave NaN in §1
now give the exact finite answer e^{0, −1, −2} / (1 + e^{−1} + e^{−2}).

What you will see: for [1000, 999, 998], x − m and e^{x − m} (all in (0, 1], the max's exactly
1), then the output of ``auto`` (the §5 dispatcher) and of ``three_pass`` (§3) next to the
float64 oracle and the closed form; then the same on fresh random rows with an outlier row
shifted by +1000.

Run: ``python examples/s02_stable_softmax.py`` (or ``flashlesson section 2``).
"""

import math

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.tour import Check, check_close, example_rng, lesson_rows
from flashlesson.reference import softmax_stable

SECTIONS = (2,)
TOPIC = "stable softmax"
METHODS = ("auto", "three_pass")


def main(verbose=True):
    rng, seed = example_rng()
    checks = []

    # The lesson's inputs. m = 1000; x − m = 0, −1, −2 exactly in float32.
    x = np.array([[1000.0, 999.0, 998.0]], np.float32)
    m = x.max(axis=-1, keepdims=True)
    e = np.exp((x - m).astype(np.float64))                  # e^{x − m} ∈ (0, 1]
    closed = np.exp([0.0, -1.0, -2.0]) / (1 + math.exp(-1) + math.exp(-2))
    oracle = softmax_stable(x)
    outs = {meth: flashlesson.softmax(x, method=meth) for meth in METHODS}
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\n[1000, 999, 998], m = {m[0, 0]:g}; `auto` runs "
              f"`{flashlesson.choose_softmax(x.shape[-1])}` for N = {x.shape[-1]}")
        cols = {"x": x[0], "x − m": (x - m)[0], "e^{x−m}": e[0]}
        cols.update({f"{meth} kernel": y[0] for meth, y in outs.items()})
        cols.update({"oracle (float64)": oracle[0], "closed form": closed,
                     "|auto − oracle|": np.abs(outs["auto"][0] - oracle[0])})
        print(tabulate(cols, headers="keys", floatfmt=".9g"))
    in_range = bool(np.all((e > 0) & (e <= 1)) and np.max(e) == 1.0)
    checks.append(Check("2", TOPIC, "numpy", None, in_range,
                        "0 < e^{x−m} ≤ 1, and = 1 at the max, for 1000, 999, 998"))
    checks.append(check_close("2", TOPIC, "oracle", oracle[0], closed,
                              "oracle = e^{0,−1,−2} / (1 + e^−1 + e^−2)"))
    for meth, y in outs.items():
        checks.append(check_close("2", TOPIC, meth, y, oracle, "1000, 999, 998: finite, exact"))

    # Fresh random rows: row 0 sits near 1000 (naive would be NaN there), N not a multiple of 32.
    rows, n = (3, 45) if flashlesson.SIMULATOR else (64, 1000)
    x = lesson_rows(rng, rows, n)
    oracle = softmax_stable(x)
    m = x.max(axis=-1, keepdims=True)
    e = np.exp((x - m).astype(np.float64))
    table = []
    for meth in METHODS:
        y = flashlesson.softmax(x, method=meth)
        c = check_close("2", TOPIC, meth, y, oracle, f"random [{rows}, {n}], row 0 near 1000")
        checks.append(c)
        table.append([meth, flashlesson.choose_softmax(n) if meth == "auto" else meth,
                      c.max_err, np.abs(y.sum(axis=-1) - 1).max(), "pass" if c.passed else "FAIL"])
    in_range = bool(np.all((e > 0) & (e <= 1)))
    checks.append(Check("2", TOPIC, "numpy", None, in_range,
                        f"0 < e^{{x−m}} ≤ 1 on random [{rows}, {n}]"))
    if verbose:
        print(f"\nrandom rows [{rows}, {n}] (seed {seed}): row 0 max = {x[0].max():.2f}; "
              f"e^{{x−m}} ranges over [{e.min():.3g}, {e.max():.3g}]")
        print(tabulate(table, headers=["method", "runs", "max |error| vs oracle",
                                       "max |Σp − 1|", "result"], floatfmt=".2e"))
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
