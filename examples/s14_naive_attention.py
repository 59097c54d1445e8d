"""§14 — naive attention: three launches, S and P through global memory (HBM).

The lesson's claim: the direct implementation is three kernels (or library calls)::

    kernel 1  S = QKᵀ        read Q, K       → write S  [N, N] to HBM
    kernel 2  P = softmax(S) read S          → write P  [N, N] to HBM
    kernel 3  O = PV         read P, V       → write O  [N, d] to HBM

and its problem is the two N×N matrices written to HBM and read back.

What you will see: the three launches of ``method="naive"`` made one at a time, by hand —
``kernels_numba/gemm.py: matmul_kernel`` for the two products, the §1–§11 softmax kernels
(``flashlesson.softmax``) in between — with S and P kept in device arrays, copied back and
checked against the float64 oracle (``reference.attention(return_p=True)``); the bytes each
launch moves, from the model ``reference.naive_attention_bytes`` (float32 here, 4 bytes per
element, every matrix moved once per kernel that uses it), next to the sizes of the arrays
really allocated; then ``flashlesson.attention(method="naive")`` itself against the oracle:
its lesson tier first (the same GEMMs with the lesson's softmax kernels,
``kernels_numba/lesson/softmax.py``, between them), then the fast tier, plain and causal, and
on a GPU the measured difference of the two tiers. Q and K have different lengths on purpose
(Nq ≠ Nk, d not a multiple of the GEMM tile) so that the edge guards run.

Run: ``python examples/s14_naive_attention.py`` (or ``flashlesson section 14``).
"""

import math

import flashlesson  # first: it picks the GPU or the simulator before numba.cuda loads
import numpy as np
from numba import cuda
from tabulate import tabulate

from flashlesson.configs import GEMM_TILES
from flashlesson.tolerance import attention_tol
from flashlesson.tour import Check, RTOL, attention_check, attention_inputs, check_close, \
    example_rng, tier_timing
from flashlesson.kernels_numba import gemm as KG
from flashlesson.reference import attention, naive_attention_bytes

SECTIONS = (14,)
TOPIC = "naive attention"
FP32 = 4

# Which terms of the bytes model each launch moves (reference.naive_attention_bytes).
LAUNCHES = (
    ("1", "S = QKᵀ·scale", "gemm.matmul_kernel(TRANS_B)", ("read_Q", "read_K", "write_S")),
    ("2", "P = softmax(S)", "flashlesson.softmax (auto)", ("read_S", "write_P")),
    ("3", "O = PV", "gemm.matmul_kernel", ("read_P", "read_V", "write_O")),
)


def three_launches(q, k, v, scale):
    """§14 by hand on [BH, N, d] float32 host arrays: returns the device arrays S, P, O."""
    bh, nq, d = q.shape
    nk = k.shape[1]
    bm, bn, ty, tx = GEMM_TILES
    q3, k3, v3 = cuda.to_device(q), cuda.to_device(k), cuda.to_device(v)
    # kernel 1: S = QKᵀ·scale, [BH, Nq, Nk] — written to global memory
    s = cuda.device_array((bh, nq, nk), np.float32)
    gemm_qk = KG.matmul_kernel(True, False, bm, bn, ty, tx)
    gemm_qk[(-(-nk // bn), -(-nq // bm), bh), ty * tx](q3, k3, s, np.float32(scale), nk - nq)
    # kernel 2: P = softmax(S) row by row — S read back, P written to global memory
    p = cuda.device_array((bh, nq, nk), np.float32)
    flashlesson.softmax(s, out=p)
    # kernel 3: O = PV — P read back, V read, O written
    o = cuda.device_array((bh, nq, d), np.float32)
    gemm_pv = KG.matmul_kernel(False, False, bm, bn, ty, tx)
    gemm_pv[(-(-d // bn), -(-nq // bm), bh), ty * tx](p, v3, o, np.float32(1.0), 0)
    return s, p, o


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    b, h, nq, nk, d = (1, 1, 24, 40, 12) if flashlesson.SIMULATOR else (1, 8, 1000, 2000, 64)
    q, k, v = attention_inputs(rng, b, h, nq, nk, d)
    q *= 1.5
    scale = 1.0 / math.sqrt(d)
    shape = f"B={b} H={h} Nq={nq} Nk={nk} d={d}"
    want_o, want_lse, want_p = attention(q, k, v, return_p=True)
    want_s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)) * scale

    bh = b * h
    s, p, o = three_launches(q.reshape(bh, nq, d), k.reshape(bh, nk, d), v.reshape(bh, nk, d),
                             scale)
    got = {"S": s.copy_to_host().reshape(want_s.shape),
           "P": p.copy_to_host().reshape(want_p.shape),
           "O": o.copy_to_host().reshape(want_o.shape)}
    want = {"S": want_s, "P": want_p, "O": want_o}
    model = naive_attention_bytes(b, h, nq, nk, d, dtype_bytes=FP32)
    arrays = {"S": s.nbytes, "P": p.nbytes, "O": o.nbytes}
    rows = []
    for (num, what, kernel, terms), out in zip(LAUNCHES, "SPO"):
        c = check_close("14", TOPIC, f"launch {num}", got[out], want[out],
                        f"{shape}: {what}, kept in global memory and checked",
                        # O: the error model's bound; S and P (float32 scores, their
                        # softmax) are outside tolerance.py's attention model: 1e-5·max
                        atol=(attention_tol(q, k, v).o if out == "O" else
                              RTOL * float(np.max(np.abs(want[out])))))
        checks.append(c)
        moved = sum(model[t] for t in terms)
        rows.append([num, what, kernel, ", ".join(terms), f"{moved:,}", f"{arrays[out]:,}",
                     f"{c.max_err:.1e}"])
    rows.append(["", "total", "", "", f"{model['total']:,}", "", ""])
    nn = sum(model[t] for t in ("write_S", "read_S", "write_P", "read_P"))
    # the model and the arrays agree: S and P are [B·H, Nq, Nk] float32 each
    same = model["write_S"] == arrays["S"] and model["write_P"] == arrays["P"]
    checks.append(Check("14", TOPIC, "formula", None, same and nn == 4 * bh * nq * nk * FP32,
                        f"S, P: {arrays['S']:,} B each in global memory; the 4 N×N transfers "
                        f"are {nn / model['total']:.0%} of the {model['total']:,} B moved"))
    if verbose:
        print("\n\n".join(__doc__.split("\n\n")[1:4]))
        print(f"\nrandom inputs: seed {seed}; {shape}, float32; bytes from "
              "reference.naive_attention_bytes(dtype_bytes=4)")
        print(tabulate(rows, headers=["launch", "computes", "kernel", "moves", "bytes (model)",
                                      "array written (B)", "max |error|"],
                       disable_numparse=True))
        print(f"\nthe N×N terms (S written, S read, P written, P read) are {nn:,} of "
              f"{model['total']:,} bytes: {nn / model['total']:.0%}. At N = 4096, d = 64 they "
              f"are {_nn_share(4096, 64):.1%}: the intermediate matrices are the traffic.")

    # the public call with its LSE (one more read of S, see attention._naive). The two
    # tiers: §14 has no lesson kernel of its own (GEMM → softmax → GEMM), so its lesson tier is
    # the same GEMMs with the lesson softmax between them — first, against the same oracle and
    # bound (tour.attention_check); then the fast tier, plain and causal
    lesson, _, _ = attention_check("14", TOPIC, "naive (lesson)", *flashlesson.attention(
        q, k, v, method="naive", return_lse=True, tier="lesson"), q, k, v,
        note=f"{shape}, lesson tier")
    checks += lesson
    table = [["lesson", False, f"{lesson[0].max_err:.1e}", f"{lesson[1].max_err:.1e}"]]
    for causal in (False, True):
        wo, wl = attention(q, k, v, causal=causal)
        go, gl = flashlesson.attention(q, k, v, causal=causal, method="naive", return_lse=True)
        tag = f"{shape}{', causal' if causal else ''}"
        co = check_close("14", TOPIC, "naive", go, wo, f"{tag}: O",
                         atol=attention_tol(q, k, v).o)
        cl = check_close("14", TOPIC, "naive", gl, wl, f"{tag}: LSE")
        checks += [co, cl]
        table.append(["fast", causal, f"{co.max_err:.1e}", f"{cl.max_err:.1e}"])
    dev = [cuda.to_device(a) for a in (q, k, v)]
    timing = tier_timing("14", TOPIC, "naive", lambda tier: flashlesson.attention(
        *dev, method="naive", tier=tier))
    checks.append(timing)
    if verbose:
        print("\nflashlesson.attention(method='naive') against reference.attention, the lesson "
              "tier first:")
        print(tabulate(table, headers=["tier", "causal", "max |ΔO|", "max |ΔLSE|"],
                       disable_numparse=True))
        print(timing.note)
    return checks


def _nn_share(n, d):
    m = naive_attention_bytes(1, 1, n, n, d, dtype_bytes=FP32)
    return 4 * m["S_bytes"] / m["total"]


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
