"""§33 — the lesson's numeric example, every number reproduced.

The lesson's claim: one row of scores arrives in two tiles, [2, 1] then [4, 3]. After the
first, m₁ = 2 and l₁ = e^{2−2} + e^{1−2} = 1 + e^{−1}. The second brings a larger max, m₂ = 4,
so the old sum is rescaled by e^{2−4} and the new tile adds e^{4−4} + e^{3−4}:
l₂ = e^{−2}(1 + e^{−1}) + 1 + e^{−1} — equal to e^{2−4} + e^{1−4} + e^{4−4} + e^{3−4}
computed at once, without reading the first tile again.

What you will see: each number in closed form, then as the pseudocode computes it
(``reference.flash_attention_tiled`` with one query, tiles of Bc = 2, its ``trace`` giving m
and l after each tile), then as the lesson's flash kernel computes it with the lesson's own tiles (Bc = 2): its m and l
after each K/V tile, read from the kernel itself (``flashlesson.attention_methods.attention_trace``
gives the kernel's trace array). For the kernel the scores must come out exactly 2, 1, 4, 3: one
query q = (1, 0, 0, 0), keys k_j = (s_j, 0, 0, 0), scale = 1 (``scale=1.0``), so s_j = q·k_j
exactly; values v = the 4×4 identity, so the output row O is the row of probabilities P
itself. The fast kernel (its own, wider tiles) is checked on the same row. Bars: the error
model of ``flashlesson.tolerance`` (m exact: the scores are exact in float32).

Run: ``python examples/s33_numeric_example.py`` (or ``flashlesson section 33``).
"""

import math

import numpy as np
from tabulate import tabulate

import flashlesson  # before numba.cuda: it chooses the GPU or the simulator
from numba import cuda
from flashlesson import LessonConfig
from flashlesson.attention_methods import attention_trace
from flashlesson.tolerance import attention_tol
from flashlesson.tour import Check, check_close, tier_timing
from flashlesson.reference import flash_attention_tiled, softmax_stable

SECTIONS = (33,)
TOPIC = "numeric example"
SCORES = (2.0, 1.0, 4.0, 3.0)
# The lesson's tiles in the lesson-tier kernel: one query row, K/V tiles of Bc = 2 keys.
LESSON_TILES = LessonConfig(Br=1, Bc=2)


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

    # the lesson kernel, float32, with the lesson's own tiles (Br = 1, Bc = 2): its (m, l)
    # after each K/V tile, read from the kernel (attention_trace), then the fast kernel
    q32, k32, v32 = (a[None, None].astype(np.float32) for a in (q, k, v))
    tol = attention_tol(q32, k32, v32, scale=1.0)                # the error model's bars
    bar_o, bar_lse = float(np.max(tol.o)), float(np.max(tol.lse))
    o_k, lse_k, tr = attention_trace(q32, k32, v32, config=LESSON_TILES, scale=1.0)
    (km1, kl1), (km2, kl2) = (tuple(map(float, tr[0, 0, 0, j])) for j in range(2))
    o_f, lse_f = flashlesson.attention(q32, k32, v32, scale=1.0, return_lse=True)
    checks += [
        Check("33", TOPIC, "flash (lesson)", abs(math.log(kl1) - math.log(l1)),
              km1 == m1 and abs(math.log(kl1) - math.log(l1)) <= bar_lse,
              f"{LESSON_TILES}, after tile [2, 1]: m₁ = {km1:g} (exact), l₁ = {kl1:.7f} "
              f"(|ln l₁ − ln(1 + e^-1)| ≤ {bar_lse:.1e}, the LSE bar)"),
        Check("33", TOPIC, "flash (lesson)", abs(math.log(kl2) - math.log(l2)),
              km2 == m2 and abs(math.log(kl2) - math.log(l2)) <= bar_lse,
              f"after tile [4, 3]: m₂ = {km2:g} (exact), l₂ = {kl2:.7f} (the rescale e^-2 "
              "inside the kernel)"),
        check_close("33", TOPIC, "flash (lesson)", [float(lse_k[0, 0, 0]), *o_k[0, 0, 0]],
                    [lse, *p], "the lesson kernel's LSE and O = P", rtol=0.0,
                    atol=[bar_lse] + [bar_o] * 4),
        check_close("33", TOPIC, "flash (fast)", [float(lse_f[0, 0, 0]), *o_f[0, 0, 0]],
                    [lse, *p], "the fast kernel's LSE and O = P (its own tiles: one K/V tile)",
                    rtol=0.0, atol=[bar_lse] + [bar_o] * 4),
    ]
    dev = [cuda.to_device(a) for a in (q32, k32, v32)]
    checks.append(tier_timing("33", TOPIC, "flash", lambda tier: flashlesson.attention(
        *dev, scale=1.0, tier=tier)))
    if verbose:
        print(__doc__.split("\n\n")[1])
        rows = [
            ["m₁ = max(2, 1)", "2", m1, got[0], km1],
            ["l₁ = e^{2−2} + e^{1−2}", "1 + e^-1", l1, got[1], kl1],
            ["LSE₁ = m₁ + ln l₁", "2 + ln(1 + e^-1)", m1 + math.log(l1),
             got[0] + math.log(got[1]), km1 + math.log(kl1)],
            ["m₂ = max(m₁, 4, 3)", "4", m2, got[2], km2],
            ["correction = e^{m₁ − m₂}", "e^-2", corr, e(got[0] - got[2]), e(km1 - km2)],
            ["rescaled old sum e^{m₁−m₂} l₁", "e^-2 (1 + e^-1)", corr * l1, "", ""],
            ["second tile e^{4−4} + e^{3−4}", "1 + e^-1", 1 + e(-1), "", ""],
            ["l₂", "e^-2(1 + e^-1) + 1 + e^-1", l2, got[3], kl2],
            ["l₂ all at once", "e^-2 + e^-3 + e^0 + e^-1", direct, "", ""],
            ["LSE = m₂ + ln l₂", "4 + ln l₂", lse, float(lse_ref[0]), float(lse_k[0, 0, 0])],
        ] + [[f"p{j} = e^{{{s:g} − 4}} / l₂", f"e^{s - 4:g} / l₂", p[j], o_ref[0, j],
              float(o_k[0, 0, 0, j])] for j, s in enumerate(SCORES)]
        print()
        print(tabulate([[f"{x:.7f}" if isinstance(x, float) else x for x in r] for r in rows],
                       headers=["quantity", "closed form", "value", "pseudocode (float64)",
                                "lesson kernel (float32)"], disable_numparse=True))
        print(f"\nlesson kernel column: kernels_numba/lesson/attention.py with the lesson's own "
              f"tiles ({LESSON_TILES}); m and l are the kernel's registers after each K/V tile "
              f"(its trace array), not rebuilt from LSEs. The fast kernel (its own tiles) gives "
              f"LSE {float(lse_f[0, 0, 0]):.7f}, O {np.round(o_f[0, 0, 0], 7).tolist()}. "
              f"Bars from flashlesson.tolerance: O {bar_o:.1e}, LSE {bar_lse:.1e}.")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
