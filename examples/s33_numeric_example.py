"""§33 — the lesson's numeric example, every number reproduced.

The lesson's claim: one row of scores arrives in two tiles, [2, 1] then [4, 3]. After the
first, m₁ = 2 and l₁ = e^{2−2} + e^{1−2} = 1 + e^{−1}. The second brings a larger max, m₂ = 4,
so the old sum is rescaled by e^{2−4} and the new tile adds e^{4−4} + e^{3−4}:
l₂ = e^{−2}(1 + e^{−1}) + 1 + e^{−1} — equal to e^{2−4} + e^{1−4} + e^{4−4} + e^{3−4}
computed at once, without reading the first tile again.

What you will see: each number in closed form, then as the pseudocode computes it
(``reference.flash_attention_tiled`` with one query, tiles of Bc = 2, its ``trace`` giving m
and l after each tile), then as the flash kernel computes it. For the kernel the scores must
come out exactly 2, 1, 4, 3: one query q = (1, 0, 0, 0), keys k_j = (s_j, 0, 0, 0), scale = 1
(``scale=1.0``), so s_j = q·k_j exactly; values v = the 4×4 identity, so the output row O is
the row of probabilities P itself. The kernel returns O and LSE = m + ln l, from which
l = e^{LSE − m}. Its K/V tiles are wider than 2 keys, so the lesson's two steps are made the
way split-KV makes them: the kernel runs on [2, 1] alone (m₁, l₁) and on [4, 3] alone, and
§22's merge (``flashlesson.merge_attention``) combines the two — the rescale by e^{m₁ − m₂}
included — into l₂ and P; the kernel on the whole row gives the same. (If the kernel accepts a
configuration with Bc = 2, the example also runs it with the lesson's own tiles.)

Run: ``PYTHONPATH=src:. python3 examples/s33_numeric_example.py`` (or ``flashlesson section 33``).
"""

import math

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson import FlashConfig
from flashlesson.tour import Check, check_close
from reference import flash_attention_tiled, softmax_stable

SECTIONS = (33,)
TOPIC = "numeric example"
SCORES = (2.0, 1.0, 4.0, 3.0)
# The lesson's tiles in the kernel, Bc = 2 keys per K/V tile (32 threads, a row's 2 lanes), if
# the kernel's layout allows tiles that narrow.
LESSON_TILES = FlashConfig(Br=16, Bc=2, TR=16, TC=2)
F32 = dict(rtol=1e-6, atol=1e-7)        # float32 kernel vs the closed form


def lesson_tiles_ok(d):
    """None if the kernel takes Bc = 2 tiles for head dimension d, else the reason it does not."""
    try:
        LESSON_TILES.check(d)
    except ValueError as exc:
        return str(exc)
    return None


def main(verbose=True):
    checks = []
    e = math.exp
    # closed forms, as the lesson writes them
    m1, l1 = 2.0, 1 + e(-1)
    corr = e(2 - 4)                                           # e^{m₁ − m₂}
    m2 = 4.0
    l2 = e(-2) * (1 + e(-1)) + 1 + e(-1)
    direct = e(2 - 4) + e(1 - 4) + e(4 - 4) + e(3 - 4)
    p = np.array([e(s - m2) for s in SCORES]) / l2
    lse = m2 + math.log(l2)
    checks.append(Check("33", TOPIC, "formula", abs(l2 - direct), math.isclose(l2, direct,
                        rel_tol=1e-15), f"l₂ = e^-2(1 + e^-1) + 1 + e^-1 = {l2:.6f} = the four "
                        "terms at once"))

    # the pseudocode, tile by tile
    q = np.array([[1.0, 0, 0, 0]])
    k = np.zeros((4, 4))
    k[:, 0] = SCORES
    v = np.eye(4)
    trace = []
    o_ref, lse_ref = flash_attention_tiled(q, k, v, Br=1, Bc=2, scale=1.0, trace=trace)
    t1, t2 = trace
    got = [float(t1["m"][0]), float(t1["l"][0]), float(t2["m"][0]), float(t2["l"][0])]
    ok = got[0] == m1 and got[2] == m2 and math.isclose(got[1], l1, rel_tol=1e-15) and \
        math.isclose(got[3], l2, rel_tol=1e-15) and np.allclose(o_ref[0], p, rtol=1e-15) and \
        math.isclose(lse_ref[0], lse, rel_tol=1e-15)
    checks.append(Check("33", TOPIC, "numpy", abs(got[3] - l2), bool(ok),
                        f"pseudocode trace, Bc = 2: m₁ = {got[0]:g}, l₁ = {got[1]:.6f}, "
                        f"m₂ = {got[2]:g}, l₂ = {got[3]:.6f}"))
    checks.append(check_close("33", TOPIC, "numpy", o_ref[0], softmax_stable(np.array(SCORES)),
                              "O row = softmax([2, 1, 4, 3])", rtol=1e-15, atol=1e-16))

    # the kernel, float32: each tile alone, the two merged (§22), and the whole row
    q32, k32, v32 = (a[None, None].astype(np.float32) for a in (q, k, v))
    run = lambda kk, vv, **kw: flashlesson.attention(q32, kk, vv, scale=1.0,      # noqa: E731
                                                     return_lse=True, **kw)
    o1, lse1 = run(k32[:, :, :2], v32[:, :, :2])                 # tile [2, 1]
    o_b, lse_b = run(k32[:, :, 2:], v32[:, :, 2:])               # tile [4, 3]
    o_m, lse_m = flashlesson.merge_attention(np.stack([o1, o_b]), np.stack([lse1, lse_b]))
    o, lse_k = run(k32, v32)                                     # the whole row
    l1_k = math.exp(float(lse1[0, 0, 0]) - m1)                   # l = e^{LSE − m}
    l2_m = math.exp(float(lse_m[0, 0, 0]) - m2)
    l2_k = math.exp(float(lse_k[0, 0, 0]) - m2)
    checks += [
        check_close("33", TOPIC, "flash", [float(lse1[0, 0, 0]), l1_k], [m1 + math.log(l1), l1],
                    "tile [2, 1] alone: LSE₁ = 2 + ln(1 + e^-1), l₁ = e^{LSE₁ − 2}", **F32),
        check_close("33", TOPIC, "flash + merge", [float(lse_m[0, 0, 0]), l2_m], [lse, l2],
                    "[2, 1] then [4, 3], merged by §22: LSE = 4 + ln l₂, l₂ = e^{LSE − 4}",
                    **F32),
        check_close("33", TOPIC, "flash + merge", o_m[0, 0, 0], p,
                    "[2, 1] then [4, 3], merged: O = P = e^{s − 4} / l₂", **F32),
        check_close("33", TOPIC, "flash", [float(lse_k[0, 0, 0]), l2_k, *o[0, 0, 0]],
                    [lse, l2, *p], "the whole row at once: the same LSE, l₂ and P", **F32),
    ]
    why_not = lesson_tiles_ok(q.shape[-1])
    if why_not is None:                                          # the lesson's tiles, Bc = 2
        o_t, lse_t = run(k32, v32, config=LESSON_TILES)
        checks.append(check_close("33", TOPIC, "flash", [float(lse_t[0, 0, 0]), *o_t[0, 0, 0]],
                                  [lse, *p], f"{LESSON_TILES}: the kernel's own loop over "
                                  "[2, 1], [4, 3]", **F32))
    if verbose:
        print(__doc__.split("\n\n")[1])
        rows = [
            ["m₁ = max(2, 1)", "2", m1, got[0], "(given: the scores)"],
            ["l₁ = e^{2−2} + e^{1−2}", "1 + e^-1", l1, got[1], l1_k],
            ["LSE₁ = m₁ + ln l₁", "2 + ln(1 + e^-1)", m1 + math.log(l1),
             got[0] + math.log(got[1]), float(lse1[0, 0, 0])],
            ["m₂ = max(m₁, 4, 3)", "4", m2, got[2], "(given)"],
            ["correction = e^{m₁ − m₂}", "e^-2", corr, e(got[0] - got[2]), ""],
            ["rescaled old sum e^{m₁−m₂} l₁", "e^-2 (1 + e^-1)", corr * l1, "", ""],
            ["second tile e^{4−4} + e^{3−4}", "1 + e^-1", 1 + e(-1), "",
             math.exp(float(lse_b[0, 0, 0]) - m2)],
            ["l₂", "e^-2(1 + e^-1) + 1 + e^-1", l2, got[3], l2_m],
            ["l₂ all at once", "e^-2 + e^-3 + e^0 + e^-1", direct, "", l2_k],
            ["LSE = m₂ + ln l₂", "4 + ln l₂", lse, float(lse_ref[0]), float(lse_m[0, 0, 0])],
        ] + [[f"p{j} = e^{{{s:g} − 4}} / l₂", f"e^{s - 4:g} / l₂", p[j], o_ref[0, j],
              float(o_m[0, 0, 0, j])] for j, s in enumerate(SCORES)]
        print()
        print(tabulate([[f"{x:.7f}" if isinstance(x, float) else x for x in r] for r in rows],
                       headers=["quantity", "closed form", "value", "pseudocode (float64)",
                                "kernel (float32)"], disable_numparse=True))
        print("\nkernel column: each tile run alone (l₁ from [2, 1], the second tile's sum from "
              "[4, 3]), then merged by flashlesson.merge_attention (l₂, LSE, p); 'all at once' is "
              "the kernel on the whole row.")
        if why_not is None:
            print(f"with the lesson's own tiles, {LESSON_TILES}: the kernel's loop saw [2, 1] "
                  f"then [4, 3], max |error| {checks[-1].max_err:.1e}")
        else:
            print(f"a run with the lesson's own tiles (Bc = 2) is not possible with this kernel: "
                  f"{why_not}")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
