"""The one registry docs/methods.md, the CLI and the tests read: every kernel variant by lesson §.

``softmax_table()`` renders ``flashlesson.softmax_methods.METHODS`` (each method's fast kernel
and, beside it, its lesson-tier kernel: ``tier="lesson"``); docs/methods.md's section map embeds its
output verbatim, and tests/test_registry.py fails when the two drift apart.
"""

from tabulate import tabulate

from .attention_methods import METHODS as ATTENTION_METHODS
from .softmax_methods import AUTO_RULES, METHODS, SMEM_MAX_N


def softmax_rows():
    rows = []
    for m in METHODS.values():
        rows.append([f"`{m.name}`", f"§{m.sections}", m.idea, f"`{m.kernel}`",
                     f"`{m.lesson_kernel}`" if m.lesson_kernel else "—", m.traffic,
                     "any" if m.max_n is None else f"≤ {m.max_n}"])
    return rows


SOFTMAX_HEADERS = ["method", "§", "idea", "kernel (kernels_numba/softmax.py)",
                   "lesson kernel (kernels_numba/lesson/softmax.py)", "global traffic per row",
                   "N"]


def softmax_table(fmt="github"):
    return tabulate(softmax_rows(), headers=SOFTMAX_HEADERS, tablefmt=fmt)


ATTENTION_HEADERS = ["method", "§", "idea", "kernels (kernels_numba/)",
                     "lesson kernels (tier=\"lesson\")", "kept in HBM beyond Q, K, V, O"]


def attention_table(fmt="github"):
    rows = [[f"`{m.name}`", f"§{m.sections}", m.idea, f"`{m.kernels}`",
             f"`{m.lesson_kernels}`" if m.lesson_kernels != "—" else "—", m.hbm_extra]
            for m in ATTENTION_METHODS.values()]
    return tabulate(rows, headers=ATTENTION_HEADERS, tablefmt=fmt)


def auto_rules_text():
    parts = []
    lo = 1
    for limit, name in AUTO_RULES:
        parts.append(f"N ≥ {lo}: `{name}`" if limit is None else f"N ≤ {limit}: `{name}`")
        lo = (limit or 0) + 1
    return "; ".join(parts)


__all__ = ["softmax_table", "softmax_rows", "attention_table", "auto_rules_text", "SMEM_MAX_N"]
