"""§32 — the pseudocode, the NumPy oracle written like it, and the kernel, line by line.

The lesson's claim: ignoring batch, heads and edges, FlashAttention's forward pass is this
loop, where correction = exp(m − new_m) rescales what was accumulated before a larger max
arrived::

    for each Q tile Qi:
        load Qi
        m = -∞;  l = 0;  acc = 0
        for each K/V tile Kj, Vj:
            load Kj, Vj
            S = Qi × Kjᵀ / sqrt(d)
            block_max = row_max(S);  new_m = max(m, block_max)
            P_local = exp(S - new_m)
            correction = exp(m - new_m)
            l = correction × l + row_sum(P_local)
            acc = correction × acc + P_local × Vj
            m = new_m
        Oi = acc / l;  store Oi

What you will see: every line of that pseudocode next to the line of
``reference.flash_attention_tiled`` (NumPy, float64) and the line of the numba.cuda kernel
``kernels_numba/lesson/attention.py: flash_forward`` (the lesson tier, one thread a query row)
and of the fast ``kernels_numba/attention.py: flash_forward_kernel`` that do it — both read from the source
files as they are now, so a line that drifts away fails the check — then the two run on the
same input with the kernel's own tile sizes (Br, Bc from ``default_config``), plain and causal:
their O and their LSE (the kernel writes LSE = m + log l; the pseudocode's final m and l are
taken from its trace), and both against the oracle ``reference.attention``.

Run: ``python examples/s32_pseudocode_and_kernel.py`` (or
``flashlesson section 32``).
"""

import ast
import inspect
import os
import re

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.configs import default_config
from flashlesson.tolerance import attention_tol
from flashlesson.tour import Check, attention_inputs, attention_tiers, check_close, example_rng
from flashlesson.kernels_numba import attention as KA
from flashlesson.kernels_numba.lesson import attention as LA
from flashlesson.reference import attention, flash_attention_tiled

SECTIONS = (32,)
TOPIC = "pseudocode and kernel"

# (pseudocode line, the oracle's line, the kernel's line): regular expressions searched in the
# code (comments and docstrings left out) of each function; "" = no line of its own there.
# They name the operation, not the memory layout, so that a change of layout in the kernel
# keeps matching while a change of algorithm does not.
SIDE_BY_SIDE = [
    ("for each Q tile Qi:", r"for i, r0 in enumerate\(range\(0, nq, Br\)\)",
     r"q0 = .*cuda\.blockIdx\..* \* Br|q0 = block_tile\(CAUSAL, Br\)"),
    ("    load Qi", r"Qi = q\[\.\.\., r0:r1, :\]", r"load_Qt\(q, q_base, row_stride, q0, n_q, d, Qt, scale\)"),
    ("    m = -∞", r"^m = np\.full\(.*-np\.inf\)", r"^m\[i\] = NEG_INF"),
    ("    l = 0", r"^l = np\.zeros\(", r"^l\[i\] = ZERO"),
    ("    acc = 0", r"^acc = np\.zeros\(", r"^acc\[i, c\] = ZERO"),
    ("    for each K/V tile Kj, Vj:", r"for j, c0 in enumerate\(range\(0, nk, Bc\)\)",
     r"^for j in range\(n_tiles\)"),
    ("        load Kj, Vj", r"Kj = k\[\.\.\., c0:c1, :\]", r"load_Kt\(k, k_base, row_stride, k0, n_k, d, KV, ONE\)"),
    ("", r"Vj = v\[\.\.\., c0:c1, :\]", r"load_V\(v, k_base, row_stride, k0, n_k, d, KV, ONE\)"),
    ("        S = Qi × Kjᵀ / sqrt(d)", r"S = \(Qi @ np\.swapaxes\(Kj, -1, -2\)\) \* scale",
     r"s\[i, jj\] \+= a\[i\] \* b\[jj\]"),
    ("        block_max = row_max(S)", r"block_max = np\.max\(S, axis=-1\)",
     r"row_max = max\(row_max, s\[i, jj\]\)"),
    ("        new_m = max(m, block_max)", r"new_m = np\.maximum\(m, block_max\)",
     r"new_m = max\(m\[i\], lanes_max\(row_max"),
    ("        P_local = exp(S - new_m)", r"P_local = np\.exp\(S - new_m_safe",
     r"s\[i, jj\] = fast_exp\(s\[i, jj\] - m_safe\)"),
    ("        correction = exp(m - new_m)", r"correction = np\.exp\(m - new_m_safe\)",
     r"correction = fast_exp\(m\[i\] - m_safe\)"),
    ("        l = correction × l + row_sum(P_local)",
     r"l = correction \* l \+ np\.sum\(P_local",
     r"l\[i\] = correction \* l\[i\] \+ lanes_sum\(row_sum"),
    ("        acc = correction × acc + P_local × Vj",
     r"acc = correction\[\.\.\., None\] \* acc \+ visible_product\(PZ, Vj",
     r"acc\[i, c\] \*= correction"),
    ("", "", r"^pv(_guarded)?\(acc, Pt, KV, r0, tc, a, b\)"),     # (flash_steps.pv_product: acc += P Vj)
    ("        m = new_m", r"^m = new_m", r"^m\[i\] = new_m"),
    ("    Oi = acc / l;  store Oi", r"o\[\.\.\., r0:r1, :\] = acc / l_safe",
     r"o\[q_base \+ row \* row_stride \+ col\] = acc\[i, c\] \* inv_l"),
    ("    (not in §32) LSE = m + log l", r"lse\[\.\.\., r0:r1\] = .*m \+ np\.log\(",
     r"lse\[at\] = .*m\[i\] \+ math\.log\(l\[i\]\)"),
]
# The lesson-tier kernel's line for each row of SIDE_BY_SIDE (kernels_numba/lesson/attention.py:
# flash_forward, thread i owning query row q0 + i, and its §19–20 step online_softmax): read
# first, it is the pseudocode almost word for word.
LESSON_LINES = [
    r"q0 = cuda\.blockIdx\.x \* Br", r"Qi\[c\] = q\[bh, row, c\] \* scale", r"^m = NEG_INF",
    r"^l = ZERO", r"acc\[c\] = ZERO", r"^for j in range\(n_tiles\)", r"Kj\[e // D, e % D\] = k\[",
    r"Vj\[e // D, e % D\] = v\[", r"s \+= Qi\[c\] \* Kj\[jj, c\]",
    r"row_max = max\(row_max, S\[jj\]\)", r"new_m = max\(m, row_max\)",
    r"S\[jj\] = math\.exp\(S\[jj\] - m_safe\)", r"correction = math\.exp\(m - m_safe\)",
    r"correction \* l \+ row_sum", r"acc\[c\] \*= correction", r"acc\[c\] \+= p \* Vj\[jj, c\]",
    r"^m, l, correction = online_softmax\(S, m, l\)",
    r"o\[bh, row, c\] = acc\[c\] \* inv_l", r"lse\[bh, row\] = .*m \+ math\.log\(l\)",
]


def source_lines(fn, name=None):
    """(file name, {line number: code without its comment}) of a function (or of the function
    ``name`` in fn's file), read from its file as it is now (by name, with ``ast``: the line
    numbers of already-imported code go stale when the file is edited), its docstring left out
    (the oracle's quotes the pseudocode)."""
    fn = inspect.unwrap(fn)                     # flash_forward_kernel is an lru_cache wrapper
    path = inspect.getsourcefile(fn)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    node = next(n for n in ast.parse(text).body
                if isinstance(n, ast.FunctionDef) and n.name == (name or fn.__name__))
    first = node.body[0]
    skip = first.end_lineno if ast.get_docstring(node) else node.lineno
    lines = text.splitlines()
    return (os.path.relpath(path),
            {n: lines[n - 1].split("  #")[0].strip()
             for n in range(skip + 1, node.end_lineno + 1)})


def find(pattern, lines):
    """The first line number whose code matches ``pattern`` ("" for no pattern, None if none
    matches)."""
    if not pattern:
        return ""
    return next((n for n, code in lines.items() if re.search(pattern, code)), None)


def main(verbose=True):
    rng, seed = example_rng()
    checks = []

    ref_file, ref_lines = source_lines(flash_attention_tiled)
    ker_file, ker_lines = source_lines(KA.flash_forward_kernel)
    les_file, les_lines = source_lines(LA.flash_forward)
    les_lines.update(source_lines(LA.flash_forward, "online_softmax")[1])   # its §19–20 step
    table, missing = [], []
    for (pseudo, ref_re, ker_re), les_re in zip(SIDE_BY_SIDE, LESSON_LINES, strict=True):
        rn, kn, ln = find(ref_re, ref_lines), find(ker_re, ker_lines), find(les_re, les_lines)
        missing += [f"{where}: {pat}" for where, pat, n in (("oracle", ref_re, rn),
                                                            ("lesson kernel", les_re, ln),
                                                            ("kernel", ker_re, kn)) if n is None]
        table.append([pseudo, rn if rn is not None else "MISSING", ref_lines.get(rn, ""),
                      ln if ln is not None else "MISSING", les_lines.get(ln, ""),
                      kn if kn is not None else "MISSING", ker_lines.get(kn, "")])
    checks.append(Check("32", TOPIC, "source", None, not missing,
                        f"all {len(SIDE_BY_SIDE)} pseudocode lines found in {ref_file}, "
                        f"{les_file} and {ker_file}" if not missing else f"not found: {missing}"))
    if verbose:
        print("\n\n".join(__doc__.split("\n\n")[1:3]))
        print(f"\nthe pseudocode beside {ref_file}: flash_attention_tiled, the lesson kernel "
              f"{les_file}: flash_forward and the fast kernel {ker_file}: flash_forward_kernel "
              "(line numbers in those files)")
        for row in table:                       # tabulate strips indentation: "· " per level
            text = row[0].lstrip(" ")
            row[0] = "· " * ((len(row[0]) - len(text)) // 4) + text
        print(tabulate(table, headers=["§32 pseudocode", "line", "NumPy oracle", "line",
                                       "lesson kernel", "line", "fast kernel"],
                       disable_numparse=True, maxcolwidths=[None, None, 30, None, 30, None, 30]))
        print("The fast kernel adds what the pseudocode (and the lesson kernel) leave out: scale folded into Qi once; a "
              "thread owns RM rows × CN columns of S, and a row's TC threads agree on its max "
              "and sum by shuffles (lanes_max, lanes_sum); P goes through shared memory for "
              "P × Vj; m_safe = 0 while a row has seen no key (so exp never sees −∞ − (−∞)); "
              "§34's causal mask and tile skipping.")

    # The two on the same input, with the kernel's tiles.
    b, h, nq, nk, d = (1, 1, 40, 40, 16) if flashlesson.SIMULATOR else (1, 4, 1000, 1000, 64)
    cfg = default_config(d)
    q, k, v = attention_inputs(rng, b, h, nq, nk, d)
    q *= 1.5
    # The two tiers: the lesson kernel first, then the fast one, against the oracle
    for causal in (False, True):
        if verbose:
            print(f"\nlesson tier, then fast tier{' (causal)' if causal else ''}:")
        checks += attention_tiers("32", TOPIC, q, k, v, verbose, causal=causal)
    rows = []
    for causal in (False, True):
        shape = f"B={b} H={h} N={nq} d={d}, Br={cfg.Br} Bc={cfg.Bc}" + \
            (", causal" if causal else "")
        trace = []
        t_o, t_lse = flash_attention_tiled(q, k, v, cfg.Br, cfg.Bc, causal=causal, trace=trace)
        o, lse = flashlesson.attention(q, k, v, causal=causal, return_lse=True, config=cfg)
        want_o, want_lse = attention(q, k, v, causal=causal)
        # the pseudocode's final (m, l) of each Q tile: the last trace entry of that tile
        m_l = np.empty(want_lse.shape)
        for t in trace:
            r0, r1 = t["rows"]
            m_l[..., r0:r1] = t["m"] + np.log(t["l"])
        atol = attention_tol(q, k, v).o
        pairs = [("kernel O vs pseudocode O", check_close("32", TOPIC, "flash", o, t_o,
                                                          f"{shape}: O, kernel = pseudocode",
                                                          atol=atol)),
                 ("kernel LSE vs pseudocode m + ln l", check_close(
                     "32", TOPIC, "flash", lse, m_l, f"{shape}: LSE = the pseudocode's m + ln l")),
                 ("pseudocode O vs oracle", check_close("32", TOPIC, "numpy", t_o, want_o,
                                                        f"{shape}: pseudocode = oracle",
                                                        rtol=1e-12, atol=1e-14)),
                 ("kernel O vs oracle", check_close("32", TOPIC, "flash", o, want_o,
                                                    f"{shape}: O", atol=atol)),
                 ("kernel LSE vs oracle", check_close("32", TOPIC, "flash", lse, want_lse,
                                                      f"{shape}: LSE"))]
        checks += [c for _, c in pairs]
        rows += [[shape if i == 0 else "", what, f"{c.max_err:.2e}"]
                 for i, (what, c) in enumerate(pairs)]
    if verbose:
        print(f"\nrandom inputs: seed {seed}; the pseudocode (float64) and the kernel (float32) "
              "with the same tiles:")
        print(tabulate(rows, headers=["input", "comparison", "max |error|"],
                       disable_numparse=True))
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
