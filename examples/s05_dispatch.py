"""§5 — the parallel structure of softmax, and the dispatcher that picks it by N.

The lesson's claim: for a tensor [B, N] every row is independent, so a row maps onto one warp
or one block, "chosen by N". Here the choice is ``flashlesson.choose_softmax`` (``auto``): its
rules, ``AUTO_RULES`` in ``flashlesson/softmax_methods.py``, send a row to a warp while the
whole row fits in a warp's registers (32 lanes × 32 values), to a block while it fits in a
block's registers (1024 threads × 32 values), and to the online method (§18–20) beyond.

What you will see: the rules; then, for a list of N (round and awkward ones, both sides of
each limit), the rule that matched, the method ``auto`` runs, its launch shape, and a check
that ``auto`` gives bit for bit what the chosen method gives on the same data, and that both
match the float64 oracle.

Run: ``python examples/s05_dispatch.py`` (or ``flashlesson section 5``).
"""

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.softmax_methods import AUTO_RULES, block_shape, warp_multi_shape
from flashlesson.tour import Check, check_close, example_rng, lesson_rows
from flashlesson.reference import softmax_stable

SECTIONS = (5,)
TOPIC = "dispatch by N"

# Both sides of each rule's limit, N = 1, and sizes that are not multiples of 32.
N_SIM = (1, 32, 33, 100, 1024, 1025, 4096, 32769)
N_GPU = (1, 7, 32, 33, 100, 1000, 1024, 1025, 4096, 5000, 32768, 32769, 100000)


def matched_rule(n):
    """The first rule of AUTO_RULES whose limit admits N, as text."""
    for limit, name in AUTO_RULES:
        if limit is None or n <= limit:
            return f"N ≤ {limit}" if limit is not None else "any N"
    raise AssertionError("AUTO_RULES has no catch-all rule")


def launch_shape(name, n):
    """The launch shape the chosen method uses for N (as the launchers compute it)."""
    if name == "warp_multi":
        k, r, g = warp_multi_shape(n)
        return f"K={k} R={r} G={g}: {32 // g} rows per warp, {k} values per lane"
    if name == "block":
        try:
            k, t = block_shape(n)
        except ValueError as exc:
            return f"cannot launch: {exc}"
        return f"K={k} T={t}: a block of {t} threads, {k} values per thread"
    return "a block per row, (m, l) streamed"


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    ns = N_SIM if flashlesson.SIMULATOR else N_GPU
    if verbose:
        print(__doc__.split("\n\n")[1])
        print("\nAUTO_RULES, first match wins:")
        print(tabulate([[f"N ≤ {lim}" if lim else "any N", name,
                         f"§{flashlesson.SOFTMAX_METHODS[name].sections}",
                         flashlesson.SOFTMAX_METHODS[name].idea] for lim, name in AUTO_RULES],
                       headers=["rule", "method", "§", "idea"]))
    table = []
    for n in ns:
        name = flashlesson.choose_softmax(n, np.float32)
        rows = (2 if name == "warp_multi" else 1) if flashlesson.SIMULATOR else 64
        x = lesson_rows(rng, rows, n)
        y_auto = flashlesson.softmax(x)                 # method="auto"
        y_named = flashlesson.softmax(x, method=name)
        same = bool(np.array_equal(y_auto, y_named))
        c = check_close("5", TOPIC, f"auto→{name}", y_auto, softmax_stable(x),
                        f"N = {n}" + ("" if same else ": differs from method=" + name))
        c.passed = c.passed and same
        checks.append(c)
        table.append([n, matched_rule(n), name, launch_shape(name, n), rows,
                      "yes" if same else "NO", c.max_err])
    if verbose:
        print(f"\nauto on random rows (seed {seed}):")
        print(tabulate(table, headers=["N", "rule", "auto runs", "launch shape", "rows",
                                       "auto == method", "max |error| vs oracle"],
                       floatfmt=".2e"))
    # The rules and the registry agree: auto never sends a row to a method that refuses it.
    bad = [(lim, name) for lim, name in AUTO_RULES
           if flashlesson.SOFTMAX_METHODS[name].max_n is not None
           and (lim is None or lim > flashlesson.SOFTMAX_METHODS[name].max_n)]
    checks.append(Check("5", TOPIC, "registry", None, not bad,
                        "each rule's limit ≤ its method's max_n" if not bad
                        else f"rules beyond their method's max_n: {bad}"))
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
