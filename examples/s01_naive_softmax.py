"""§1 — why naive softmax fails.

The lesson's claim: p_i = e^{x_i} / Σ_j e^{x_j}, computed as written, overflows. In float32,
e^x is inf once x > ln(FLT_MAX) ≈ 88.72, so e^{100} is already inf, and for the inputs
1000, 999, 998 every numerator and the sum are inf: p = inf / inf = NaN.

What you will see: the overflow threshold ln(FLT_MAX); the lesson's inputs [100, 99, 98] and
[1000, 999, 998] through the ``naive`` kernel (``kernels_numba/softmax.py: softmax_naive``)
next to the float32 and float64 naive oracles and the stable oracle; and a random row whose
largest entry crosses the threshold (entries that did not overflow give finite / inf = 0,
the overflowing one NaN). The checks pass when the kernel shows the NaN the lesson predicts,
and agrees with the stable oracle on small inputs, where the naive formula is fine.

Run: ``python examples/s01_naive_softmax.py`` (or ``flashlesson section 1``).
"""

import warnings

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.tour import Check, check_close, example_rng
from flashlesson.reference import softmax_naive, softmax_stable

SECTIONS = (1,)
TOPIC = "naive softmax overflows"

FLT_MAX = float(np.finfo(np.float32).max)
LN_FLT_MAX = float(np.log(FLT_MAX))             # 88.72: e^x = inf in float32 beyond this


def run_naive(x):
    """The §1 kernel on host rows. Overflow is the point, so the overflow warnings NumPy raises
    in the simulator (which runs the kernel's float32 arithmetic on NumPy scalars) are silenced.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return flashlesson.softmax(x, method="naive")


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    if verbose:
        print(__doc__.split("\n\n")[1])
        print()
        print(tabulate([["FLT_MAX", f"{FLT_MAX:.6e}"],
                        ["ln(FLT_MAX): largest x with e^x finite in float32", f"{LN_FLT_MAX:.4f}"],
                        ["e^88 in float32", f"{_exp32(np.float32(88)):.4e}"],
                        ["e^89 in float32", f"{_exp32(np.float32(89)):.4e}"],
                        ["e^100 in float64", f"{np.exp(100.0):.4e}  (> FLT_MAX)"]],
                       tablefmt="simple", disable_numparse=True))
        print(f"\nrandom inputs: seed {seed} (FLASHLESSON_SEED={seed} replays them)")

    # The lesson's inputs, plus a random row that crosses the threshold by a little.
    big = rng.standard_normal(5) + 85.0
    big[rng.integers(0, 5)] = 89.0 + rng.random() * 5    # one entry past ln(FLT_MAX)
    cases = [("lesson: x = 100", np.array([[100.0, 99.0, 98.0]], np.float32)),
             ("lesson: 1000, 999, 998", np.array([[1000.0, 999.0, 998.0]], np.float32)),
             ("random, max > 88.72", big[None, :].astype(np.float32))]
    for name, x in cases:
        y = run_naive(x)
        want32 = softmax_naive(x, np.float32)           # the same formula in float32: NaN too
        want64 = softmax_naive(x, np.float64)
        stable = softmax_stable(x)
        if verbose:
            print(f"\n{name}")
            print(tabulate({"x": x[0], "e^x (float32)": _exp32(x[0]),
                            "naive kernel": y[0], "naive oracle float32": want32[0],
                            "naive oracle float64": want64[0], "stable oracle": stable[0]},
                           headers="keys", floatfmt=".6g"))
        # §1's claim: the kernel's row is NaN exactly where the float32 formula gives NaN
        # (every entry that overflowed: inf / inf), and 0 where e^x was finite (finite / inf).
        same = bool(np.array_equal(np.isnan(y), np.isnan(want32))
                    and np.all(np.nan_to_num(y, nan=0) == np.nan_to_num(want32, nan=0)))
        shows_nan = bool(np.isnan(y).any())
        note = f"x max {x.max():g}: kernel gives NaN as predicted" if same and shows_nan else \
            f"kernel {y[0]} vs float32 formula {want32[0]}"
        checks.append(Check("1", TOPIC, "naive", None, same and shows_nan, note))

    # Below the threshold the naive formula is fine: same answer as the stable oracle.
    x = (rng.standard_normal((2, 50)) * 3).astype(np.float32)
    y = run_naive(x)
    if verbose:
        print("\nsmall inputs (|x| < 20): the naive kernel is correct there, max |error| "
              f"{np.max(np.abs(y - softmax_stable(x))):.2e}")
    checks.append(check_close("1", TOPIC, "naive", y, softmax_stable(x),
                              "small inputs: naive is right when nothing overflows"))
    return checks


def _exp32(x):
    with np.errstate(over="ignore"):
        return np.exp(x.astype(np.float32))


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
