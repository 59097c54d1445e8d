"""§18–22 — online softmax: merging (m, l), then (m, l, acc), without re-reading.

The lesson's claims. §18: split a row of scores into parts A and B; each part gives its own
state m_A = max A, l_A = Σ_{x∈A} e^{x−m_A} (and m_B, l_B); the goal is the whole row's state
without reading A again. §19: m = max(m_A, m_B), l = e^{m_A−m} l_A + e^{m_B−m} l_B. §20: the
same one element at a time: m_{k+1} = max(m_k, x_{k+1}), l_{k+1} = e^{m_k−m_{k+1}} l_k +
e^{x_{k+1}−m_{k+1}}. §21: attention needs more than l: o = a / l with the un-normalized
accumulator a = Σ_j e^{s_j−m} v_j. §22: accumulators merge like l does,
a = e^{m_A−m} a_A + e^{m_B−m} a_B — the basis of FlashAttention's loop and of split-KV.

What you will see: a row of real attention scores cut at a random place, its two states and
their merge (``reference.merge_ml``) against the whole row; §20's stream printed step by step
on a short row and checked against ``reference.online_softmax_state``, and the single-pass
``online`` softmax kernel (``flashlesson.softmax(method="online")``: per-thread §20 streams,
merged with §19) against the stable oracle; §21's state ``reference.attention_state`` giving
O = acc / l and LSE = m + ln l; §22 by hand — the keys cut into three random contiguous parts,
one state each (``attention_state`` with a key mask), folded with ``reference.merge_states``
— and by kernel: ``flashlesson.attention(..., return_lse=True)`` on each part alone, the three
(O, LSE) merged by ``flashlesson.merge_attention`` (``merge_attention_kernel``), against
attention over all the keys; plus a part that saw no key (LSE = −inf, O = NaN garbage), which
must change nothing.

Run: ``python examples/s18_s19_s20_s21_s22_merging_states.py`` (or
``flashlesson section 18``).
"""

import math

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.tolerance import attention_tol
from flashlesson.tour import Check, attention_inputs, check_close, example_rng, lesson_rows, softmax_tiers
from flashlesson.reference import (attention, attention_state, merge_attention, merge_ml, merge_states,
                       online_softmax_state, softmax_stable)

SECTIONS = (18, 19, 20, 21, 22)
TOPIC = "merging softmax states"


def state(x):
    """§18: (m, l) of a part: m = max, l = Σ e^{x − m}."""
    m = float(np.max(x))
    return m, float(np.sum(np.exp(x - m)))


def stream(x):
    """§20 step by step: [(x_k, m_k, l_k, correction)] after each element."""
    m, l, steps = -math.inf, 0.0, []
    for xk in x:
        new_m = max(m, xk)                                  # m_{k+1} = max(m_k, x_{k+1})
        correction = math.exp(m - new_m)                    # e^{m_k − m_{k+1}} (0 at the start)
        l = correction * l + math.exp(xk - new_m)           # l_{k+1}
        m = new_m
        steps.append((xk, m, l, correction))
    return steps


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    b, h, nq, nk, d = (1, 2, 16, 40, 16) if flashlesson.SIMULATOR else (2, 8, 512, 3000, 64)
    q, k, v = attention_inputs(rng, b, h, nq, nk, d)
    q *= 1.5
    shape = f"B={b} H={h} Nq={nq} Nk={nk} d={d}"
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\nrandom inputs: seed {seed}; {shape}")
    # The two tiers: the lesson kernel (kernels_numba/lesson/softmax.py) first, then the
    # fast one (kernels_numba/softmax.py), each against the oracle; timed against each other on a GPU.
    rows_shape = (3, 100) if flashlesson.SIMULATOR else (4096, 40000)
    if verbose:
        print(f"\nlesson tier, then fast tier — method 'online', rows {list(rows_shape)}:")
    checks += softmax_tiers("18–20", TOPIC, "online", lesson_rows(rng, *rows_shape), verbose)

    # §18–19: one row of scores, cut in two.
    s = (q[0, 0, 0].astype(np.float64) @ k[0, 0].T.astype(np.float64)) / math.sqrt(d)
    cut = int(rng.integers(1, nk))
    (m_a, l_a), (m_b, l_b) = state(s[:cut]), state(s[cut:])
    m, l = merge_ml(m_a, l_a, m_b, l_b)
    m_ba, l_ba = merge_ml(m_b, l_b, m_a, l_a)
    m_row, l_row = state(s)
    by_hand = math.exp(m_a - max(m_a, m_b)) * l_a + math.exp(m_b - max(m_a, m_b)) * l_b
    # (to rounding: merge_ml may order its float64 operations differently from by_hand)
    ok = m == m_row == m_ba and math.isclose(l, l_row, rel_tol=1e-13) and \
        math.isclose(l, by_hand, rel_tol=1e-14) and math.isclose(l_ba, l, rel_tol=1e-14)
    checks.append(Check("18–19", TOPIC, "numpy", abs(l - l_row), bool(ok),
                        f"scores of query 0 cut at key {cut}: merge(A, B) = merge(B, A) = the "
                        "whole row's (m, l)"))
    if verbose:
        print(f"\n§18–19: query 0's {nk} scores, A = keys 0–{cut - 1}, B = keys {cut}–{nk - 1}")
        print(tabulate([["A", m_a, l_a, math.exp(m_a - m)], ["B", m_b, l_b, math.exp(m_b - m)],
                        ["merged: m = max, l = Σ e^{m_X − m} l_X", m, l, ""],
                        ["whole row at once", m_row, l_row, ""]],
                       headers=["part", "m", "l", "e^{m_X − m}"], floatfmt=".6g"))

    # §20: element by element.
    x = np.round(rng.standard_normal(8) * 2 + np.linspace(0, 6, 8), 1)   # a rising row:
    x[-1] = x.max() + 1.0                                 # the max grows at least once
    steps = stream(x)
    m20, l20 = online_softmax_state(x)
    ok = math.isclose(steps[-1][2], l20, rel_tol=1e-13) and steps[-1][1] == m20 == x.max() \
        and steps[-1][3] < 1
    checks.append(Check("20", TOPIC, "numpy", abs(steps[-1][2] - l20), bool(ok),
                        "element-wise stream = reference.online_softmax_state = (max x, "
                        "Σ e^{x − max})"))
    if verbose:
        print("\n§20: a row streamed one element at a time (correction = e^{m_k − m_{k+1}}: "
              "1 while the max stays, < 1 when it grows)")
        print(tabulate([[i + 1, *st] for i, st in enumerate(steps)],
                       headers=["k", "x_k", "m_k", "l_k", "correction"], floatfmt=".5g"))
    rows_x = lesson_rows(rng, 4, 300 if flashlesson.SIMULATOR else 100_000)
    y = flashlesson.softmax(rows_x, method="online")
    checks.append(check_close("19–20", TOPIC, "online", y, softmax_stable(rows_x),
                              f"softmax kernel: §20 streams per thread, §19 merges, "
                              f"[4, {rows_x.shape[1]}] rows incl. +1000"))

    # §21: the state (m, l, acc) of every row gives O and LSE.
    want_o, want_lse = attention(q, k, v)
    m21, l21, acc21 = attention_state(q, k, v)
    o21 = acc21 / l21[..., None]
    checks.append(check_close("21", TOPIC, "numpy", o21, want_o,
                              f"{shape}: o = acc / l, acc = Σ e^{{s−m}} v", rtol=1e-12,
                              atol=1e-14))
    checks.append(check_close("21", TOPIC, "numpy", m21 + np.log(l21), want_lse,
                              f"{shape}: LSE = m + ln l", rtol=1e-12, atol=1e-14))

    # §22 by hand: three contiguous parts, one state each, folded left to right.
    cuts = np.sort(rng.choice(np.arange(1, nk), size=2, replace=False))
    bounds = [(0, int(cuts[0])), (int(cuts[0]), int(cuts[1])), (int(cuts[1]), nk)]
    st = (np.full((b, h, nq), -np.inf), np.zeros((b, h, nq)), np.zeros((b, h, nq, d)))
    for lo, hi in bounds:
        part = np.zeros(nk, bool)
        part[lo:hi] = True
        st = merge_states(*st, *attention_state(q, k, v, key_padding_mask=part))
    m22, l22, acc22 = st
    ok = np.allclose(m22, m21, rtol=0, atol=0) and np.allclose(l22, l21, rtol=1e-12) and \
        np.allclose(acc22, acc21, rtol=1e-12, atol=1e-12)
    parts = ", ".join(f"{lo}–{hi - 1}" for lo, hi in bounds)
    checks.append(Check("22", TOPIC, "numpy", float(np.max(np.abs(acc22 - acc21))), bool(ok),
                        f"{shape}: (m, l, acc) of keys {parts}, merged = all keys' state"))

    # §22 by kernel: attention over each part alone, then the merge kernel.
    o_parts, lse_parts = [], []
    for lo, hi in bounds:
        o_p, lse_p = flashlesson.attention(q, np.ascontiguousarray(k[..., lo:hi, :]),
                                           np.ascontiguousarray(v[..., lo:hi, :]),
                                           return_lse=True)
        o_parts.append(o_p)
        lse_parts.append(lse_p)
    o_parts, lse_parts = np.stack(o_parts), np.stack(lse_parts)
    o, lse = flashlesson.merge_attention(o_parts, lse_parts)
    atol_o = attention_tol(q, k, v).o
    co = check_close("22", TOPIC, "flash + merge", o, want_o,
                     f"{shape}: 3 parts (keys {parts}) merged = attention over all keys",
                     atol=atol_o)
    cl = check_close("22", TOPIC, "flash + merge", lse, want_lse, f"{shape}: merged LSE")
    ref_o, ref_lse = merge_attention(o_parts, lse_parts)      # the same merge, in float64
    cm = check_close("22", TOPIC, "merge", o, ref_o,
                     "merge kernel = reference.merge_attention on the same parts", atol=atol_o)
    checks += [co, cl, cm]
    # a part that saw no key: LSE = −inf; its O may hold anything, NaN included
    empty_o = np.full_like(o_parts[:1], np.nan)
    empty_lse = np.full_like(lse_parts[:1], -np.inf)
    o4, lse4 = flashlesson.merge_attention(np.concatenate([o_parts, empty_o]),
                                           np.concatenate([lse_parts, empty_lse]))
    same = bool(np.array_equal(o4, o) and np.array_equal(lse4, lse))
    checks.append(Check("22", TOPIC, "merge", float(np.max(np.abs(o4 - o))), same,
                        "a 4th part with LSE = −inf and O = NaN changes nothing (weight 0)"))
    if verbose:
        w = np.exp(lse_parts - lse[None])                     # e^{lse_p − lse}: each part's weight
        print(f"\n§22 by kernel: keys cut into {parts}; each part through "
              "flashlesson.attention alone, then flashlesson.merge_attention")
        print(tabulate([[f"keys {lo}–{hi - 1}", float(w[i].mean()), float(w[i].min()),
                         float(w[i].max())] for i, (lo, hi) in enumerate(bounds)],
                       headers=["part", "mean weight e^{LSE_p − LSE}", "min", "max"],
                       floatfmt=".4f"))
        print(tabulate([["merged O vs attention over all keys", co.max_err],
                        ["merged LSE vs oracle LSE", cl.max_err],
                        ["merge kernel vs reference.merge_attention", cm.max_err],
                        ["+ an empty part (LSE = −inf, O = NaN)", float(np.max(np.abs(o4 - o)))]],
                       headers=["check", "max |error|"], floatfmt=".2e"))
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
