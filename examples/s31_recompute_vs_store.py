"""§31 — why recomputing P can beat storing it: arithmetic is cheap, moving data is not.

The lesson's claim: the backward pass can either (A) read back the N × N probability matrix P
that the forward stored in HBM, or (B) recompute small tiles of QKᵀ on chip and rebuild P from
the saved LSE (§30). B does more arithmetic, yet on a modern GPU it can be faster: tensor cores
have arithmetic to spare, HBM bandwidth is scarce, the recomputation happens inside the tile
pipeline, and no N² activation is saved or read.

What you will see: the model first, from the shapes alone (B = 1, H = 16, d = 64, float32,
N = 1024 … 16384). A keeps P from the forward to the backward — B·H·N² floats, written once
and read back once (``reference.naive_attention_bytes``'s write_P and read_P terms); B keeps
the LSE — B·H·N floats — and pays for S = QKᵀ once more, 2·B·H·N²·d FLOPs (the difference
between ``reference.attention_backward_flops``'s five matmuls and the four that A needs). Both
costs grow as N², so which one wins does not depend on N but on the ratio, the trade's
intensity: extra FLOPs per byte of P not moved, d/4 in float32 (d/2 for a 16-bit P). Set
against a GPU's balance (peak FLOP/s over HBM bytes/s), it says: on CUDA cores in float32 the
two are about even (H200: 67 TFLOP/s over 4.8 TB/s = 14 FLOP/byte, against d/4 = 16); on
tensor cores in fp16/bf16 the recomputation is ~6× cheaper than the traffic (989 TFLOP/s over
4.8 TB/s = 206 against d/2 = 32) — the lesson's setting. What decides in every case is the
memory kept: at N = 16384 the stored P of 16 heads is 16 GiB. Then the two backward methods
of this repository, checked against each other and the oracle on a small case:
``attention_backward(method="naive")`` stores P (and dP, then dS) in global memory around five
GEMM launches; ``method="flash"`` keeps everything N × N on chip (its two kernels recompute S
and dP twice: 7 matmuls, no atomics). On a GPU it then measures both at B1 H16 d64, N = 1024,
2048, 4096: time (CUDA events) and device memory held at the peak (``device_bytes_held``);
the memory the naive method holds grows ×4 per doubling of N, the flash method's ×2. In the
simulator those measurements are skipped.

Run: ``python examples/s31_recompute_vs_store.py`` (or
``flashlesson section 31``).
"""

import datetime
import math

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.tolerance import backward_tol
from flashlesson.tour import Check, attention_inputs, check_close, example_rng
from flashlesson.reference import attention_backward, attention_backward_flops, attention_flops, \
    naive_attention_bytes

SECTIONS = (31,)
TOPIC = "recompute beats store"
FP32, FP16 = 4, 2
MiB, GiB = 2 ** 20, 2 ** 30
B, H, D = 1, 16, 64
MODEL_NS = (1024, 2048, 4096, 8192, 16384)
GPU_NS = (1024, 2048, 4096)
# H200 SXM datasheet: HBM3e bandwidth, FP32 on CUDA cores, dense FP16/BF16 on tensor cores.
HBM_BYTES_S = 4.8e12
PEAK_FP32 = 67e12
PEAK_FP16_TC = 989e12


def store_p(b, h, n, dtype_bytes=FP32):
    """A: P [B, H, N, N] kept from the forward to the backward; written once, read once."""
    kept = b * h * n * n * dtype_bytes
    return {"kept": kept, "moved": 2 * kept}


def recompute_p(b, h, n, d):
    """B: the LSE [B, H, N] (float32) kept; S = QKᵀ·scale computed again, 2·N²·d per head."""
    return {"kept": b * h * n * FP32, "flops": 2 * b * h * n * n * d}


def model_rows():
    rows, cells = [], []
    for n in MODEL_NS:
        a, r = store_p(B, H, n), recompute_p(B, H, n, D)
        t_moved = a["moved"] / HBM_BYTES_S * 1e3
        t_fp32 = r["flops"] / PEAK_FP32 * 1e3
        t_tc = r["flops"] / PEAK_FP16_TC * 1e3
        a16 = store_p(B, H, n, FP16)
        t_moved16 = a16["moved"] / HBM_BYTES_S * 1e3
        cells.append((n, a, r, a16))
        rows.append([n, f"{a['kept'] / MiB:,.0f}", f"{a['moved'] / MiB:,.0f}",
                     f"{r['kept'] / 2**10:,.0f}", f"{r['flops'] / 1e9:,.1f}",
                     f"{t_moved:.2f} / {t_fp32:.2f}", f"{t_moved16:.2f} / {t_tc:.3f}"])
    return rows, cells


def main(verbose=True):
    rng, seed = example_rng()
    checks = []

    # The model, and its numbers checked by formula.
    rows, cells = model_rows()
    ok = True
    for n, a, r, a16 in cells:
        nb = naive_attention_bytes(B, H, n, n, D, dtype_bytes=FP32)
        ok &= a["moved"] == nb["write_P"] + nb["read_P"] and a["kept"] == B * H * nb["S_bytes"]
        # B's extra work: the backward's 5 matmuls (attention_backward_flops) minus A's 4
        # (dV = Pᵀ dO, dP = dO Vᵀ, dQ = dS K, dK = dSᵀ Q), each 2·N²·d per head
        ok &= r["flops"] == attention_backward_flops(B, H, n, n, D) - 2 * attention_flops(
            B, H, n, n, D)
        ok &= r["flops"] / a["moved"] == D / 4 and r["flops"] / a16["moved"] == D / 2
        ok &= a["kept"] / r["kept"] == n
    grow = [c2[1]["kept"] / c1[1]["kept"] for c1, c2 in zip(cells, cells[1:])]
    grow_lse = [c2[2]["kept"] / c1[2]["kept"] for c1, c2 in zip(cells, cells[1:])]
    ok &= all(g == 4 for g in grow) and all(g == 2 for g in grow_lse)
    checks.append(Check("31", TOPIC, "formula", None, bool(ok),
                        "stored P: B·H·N² floats kept, written + read = naive_attention_bytes' "
                        "write_P + read_P; recompute: B·H·N LSE kept (N× less), 2·B·H·N²·d "
                        "FLOPs = attention_backward_flops − 4 matmuls; d/4 FLOP per byte saved"))
    balance32, balance16 = PEAK_FP32 / HBM_BYTES_S, PEAK_FP16_TC / HBM_BYTES_S
    checks.append(Check("31", TOPIC, "formula", None,
                        D / 2 < balance16 / 4 and abs(D / 4 - balance32) < 0.25 * balance32,
                        f"the trade costs d/2 = {D // 2} FLOP per byte not moved (fp16 P) "
                        f"against a tensor-core balance of {balance16:.0f}: recompute "
                        f"{balance16 / (D / 2):.1f}× cheaper; fp32 on CUDA cores, d/4 = "
                        f"{D // 4} against {balance32:.0f}: about even"))
    gib16 = cells[-1][1]["kept"] / GiB
    checks.append(Check("31", TOPIC, "formula", None, gib16 == 16.0,
                        f"N = {MODEL_NS[-1]}, B={B} H={H}: the stored P alone is {gib16:.0f} GiB "
                        f"(float32); the LSE {cells[-1][2]['kept'] / 2**10:.0f} KiB"))
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\nthe model, B = {B}, H = {H}, d = {D}; times from the H200's datasheet figures: "
              f"HBM {HBM_BYTES_S / 1e12:.1f} TB/s, FP32 {PEAK_FP32 / 1e12:.0f} TFLOP/s (CUDA "
              f"cores), FP16 {PEAK_FP16_TC / 1e12:.0f} TFLOP/s (tensor cores, dense)")
        print(tabulate(rows, headers=["N", "A: P kept MiB", "A: P moved MiB", "B: LSE kept KiB",
                                      "B: extra GFLOP", "fp32 ms A / B", "16-bit ms A / B (TC)"],
                       disable_numparse=True))
        print("A = store P (kept from forward to backward, written once + read once); B = "
              "recompute (keep the LSE, compute QKᵀ again); ms = A's traffic at HBM speed / "
              "B's extra FLOPs at peak (fp32 on CUDA cores; 16-bit P and tensor cores).")
        print(f"the trade's intensity, extra FLOPs per byte of P not moved: d/4 = {D / 4:.0f} "
              f"(fp32 P), d/2 = {D / 2:.0f} (16-bit P) — the same at every N. The machine's "
              f"balance: {balance32:.0f} FLOP/byte (fp32, CUDA cores), {balance16:.0f} "
              "(tensor cores). Recomputing costs less time than the traffic it replaces when "
              "the first is below the second; and it always saves the N² memory.")

    # The two backward methods of this repository on a small case: they agree.
    b, h, n, d = (1, 2, 24, 16) if flashlesson.SIMULATOR else (2, 4, 500, 64)
    q, k, v = attention_inputs(rng, b, h, n, n, d)
    do = rng.standard_normal((b, h, n, d)).astype(np.float32)
    agree = []
    rel = backward_tol(q, k)     # the error model's bound, relative to each gradient's max
    for causal in (False, True):
        o, lse = flashlesson.attention(q, k, v, causal=causal, return_lse=True)
        refs = attention_backward(do, q, k, v, causal=causal)
        got = {m: flashlesson.attention_backward(do, q, k, v, o, lse, causal=causal, method=m)
               for m in ("naive", "flash")}
        shape = f"{b}×{h}×{n}×{n}, d={d}{', causal' if causal else ''}"
        worst = {}
        for m in ("naive", "flash"):
            worst[m] = max(float(np.max(np.abs(g - r)) / np.max(np.abs(r)))
                           for g, r in zip(got[m], refs))
            checks.append(Check("31", TOPIC, f"{m} bwd", worst[m], worst[m] <= rel,
                                f"[{shape}] dQ, dK, dV vs the oracle: rel. {worst[m]:.1e} "
                                f"(bound {rel:.1e}, flashlesson.tolerance.backward_tol)"))
        top = max(float(np.max(np.abs(r))) for r in refs)
        flat = {m: np.concatenate([g.ravel() for g in got[m]]) for m in got}
        # kernel vs kernel: each within rel of the oracle, so within twice that of each other
        c = check_close("31", TOPIC, "naive vs flash", flat["naive"], flat["flash"],
                        f"[{shape}] stored-P and recomputed-P gradients agree", rtol=0,
                        atol=2 * rel * top)
        checks.append(c)
        agree.append([shape, f"{worst['naive']:.1e}", f"{worst['flash']:.1e}",
                      f"{c.max_err / top:.1e}"])
    if verbose:
        print("\nthis repository's two backward methods on one small case, max relative error "
              "over dQ, dK, dV:")
        print(tabulate(agree, headers=["B×H×Nq×Nk", "naive vs oracle", "flash vs oracle",
                                       "naive vs flash"], disable_numparse=True))

    if flashlesson.SIMULATOR:
        if verbose:
            print(f"\nmeasured time and memory: skipped — they need a GPU (the simulator runs "
                  f"every CUDA thread as a Python thread and has no device memory). On a GPU "
                  f"this example times both backward methods at B{B} H{H} d{D}, N = "
                  f"{', '.join(map(str, GPU_NS))}. (random inputs: seed {seed})")
        return checks
    checks += _measured(rng, verbose)
    return checks


# ---------------------------------------------------------------------------------------------
# GPU only
# ---------------------------------------------------------------------------------------------
def _measured(rng, verbose):
    from numba import cuda

    from flashlesson.bench import device_bytes_held, flush_frees, time_gpu
    checks, table = [], []
    ms = {"naive": [], "flash": []}
    held = {"naive": [], "flash": []}
    for n in GPU_NS:
        q, k, v, do = (cuda.to_device(rng.standard_normal((B, H, n, D)).astype(np.float32))
                       for _ in range(4))
        o, lse = flashlesson.attention(q, k, v, return_lse=True)
        for m in ("naive", "flash"):
            def run(m=m):
                return flashlesson.attention_backward(do, q, k, v, o, lse, method=m)
            device_bytes_held(run)                      # warm-up: compile, load, reserve
            held[m].append(device_bytes_held(run))
            # frees deferred while timing, except for naive's gigabytes of P and dP
            ms[m].append(time_gpu(run, samples=5, inner=3, defer=m != "naive"))
            flush_frees(cuda.current_context())
        table.append([n, f"{ms['naive'][-1]:.2f}", f"{ms['flash'][-1]:.2f}",
                      f"{ms['naive'][-1] / ms['flash'][-1]:.2f}",
                      f"{held['naive'][-1] / MiB:,.0f}", f"{held['flash'][-1] / MiB:,.1f}",
                      f"{store_p(B, H, n)['kept'] / MiB:,.0f}"])
    # a measurement, not a check: on CUDA cores in float32 the model puts the two about even
    # (d/4 = 16 FLOP/byte against a balance of 14), a margin no timing pass/fail can rest on
    speedup = ms["naive"][-1] / ms["flash"][-1]
    grow = {m: math.log2(held[m][-1] / held[m][-2]) for m in held}
    checks.append(Check("31", TOPIC, "naive bwd", None, abs(grow["naive"] - 2) < 0.2,
                        f"memory held ∝ N^{grow['naive']:.2f} ({held['naive'][-1] / MiB:,.0f} "
                        f"MiB at N = {GPU_NS[-1]}): P and dP, N × N each"))
    checks.append(Check("31", TOPIC, "flash bwd", None, abs(grow["flash"] - 1) < 0.2,
                        f"memory held ∝ N^{grow['flash']:.2f} ({held['flash'][-1] / MiB:,.1f} "
                        f"MiB at N = {GPU_NS[-1]}): dQ, dK, dV and D only"))
    if verbose:
        dev = flashlesson.device.describe()["device"]
        print(f"\n{dev}, {datetime.date.today()}: attention_backward, B={B} H={H} d={D} "
              "float32, not causal; CUDA-event medians; memory = device bytes this process "
              "holds at the peak of one call (frees deferred)")
        print(tabulate(table, headers=["N", "naive ms (P stored)", "flash ms (P recomputed)",
                                       "naive / flash", "naive MiB held", "flash MiB held",
                                       "P alone MiB"], disable_numparse=True))
        print(f"measured, not checked: at N = {GPU_NS[-1]} recompute (flash) "
              f"{ms['flash'][-1]:.2f} ms, stored P (naive) {ms['naive'][-1]:.2f} ms: "
              f"×{speedup:.2f}")
        print("both are CUDA-core float32 kernels here, where the model says the arithmetic "
              "and the traffic cost about the same; the naive path also writes and reads dP "
              "and dS, and holds them. The memory is what recomputation always wins.")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
