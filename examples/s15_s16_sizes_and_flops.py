"""§15–16 — how big the N×N matrices are, and FLOPs against bytes.

The lesson's claims. §15: at N = 4096 one score matrix has N² = 16,777,216 elements, 32 MB in
FP16 (2 bytes each) — for one batch, one head, one matrix; 32 heads make 32 × 32 MB = 1024 MB,
about 1 GB (the lesson's MB are 2^20 bytes). §16: QKᵀ and PV each cost O(N²d) FLOPs;
FlashAttention keeps that compute and removes the N×N traffic — an IO-aware algorithm, not an
approximation with less arithmetic.

What you will see: the size table for N from 1024 to 32768, from
``reference.naive_attention_bytes`` (its ``S_bytes`` is one head's S), with the lesson's
numbers asserted; the FLOP count 4·N²·d (``reference.attention_flops``) checked against the
two matrix products counted one by one; and FLOPs next to HBM bytes for naive and flash
(``reference.flash_attention_bytes``), as arithmetic intensity (FLOP per byte): the naive
path's is stuck near d/2 whatever N, the fused kernel's grows with N (or, when K and V are
re-read once per Q tile of Br rows, levels off at about Br). On a GPU the example then measures
the device memory each ``flashlesson.attention`` method holds at its peak, for a few N, and
compares it with S + P (naive) and O + LSE (flash); in the simulator that measurement is
skipped (it has no device memory to measure).

Run: ``python examples/s15_s16_sizes_and_flops.py`` (or
``flashlesson section 15``).
"""

import datetime

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.configs import GPU_CONFIGS
from flashlesson.tour import Check, example_rng
from flashlesson.reference import attention, attention_flops, flash_attention_bytes, naive_attention_bytes

SECTIONS = (15, 16)
TOPIC = "N×N sizes, FLOPs vs bytes"
MiB, GiB = 2 ** 20, 2 ** 30
FP16, FP32 = 2, 4
# H200 SXM datasheet: dense FP16 tensor-core peak and HBM3e bandwidth; their ratio is the
# intensity (FLOP per byte) above which a kernel is limited by arithmetic, not by memory.
PEAK_FP16_FLOPS = 989e12
PEAK_HBM_BYTES = 4.8e12
RIDGE = PEAK_FP16_FLOPS / PEAK_HBM_BYTES


def gpu_config(d):
    """The flash kernel's tiles on a GPU for head dimension d (also when run in the simulator,
    whose own tiles are small)."""
    return next(cfg for limit, cfg in GPU_CONFIGS if d <= limit)


def matmul_flops(m, n, k):
    """An [m, k] @ [k, n] product: m·n dot products of length k, a multiply and an add each."""
    return 2 * m * n * k


def main(verbose=True):
    rng, seed = example_rng()
    checks = []

    # §15: the size table.
    table = []
    for n in (1024, 2048, 4096, 8192, 16384, 32768):
        one = naive_attention_bytes(1, 1, n, n, 64, dtype_bytes=FP16)["S_bytes"]
        heads = naive_attention_bytes(1, 32, n, n, 64, dtype_bytes=FP16)["write_S"]
        table.append([n, f"{n * n:,}", f"{one / MiB:,.0f}", f"{heads / GiB:,.2f}",
                      f"{2 * heads / GiB:,.2f}"])
    s_4096 = naive_attention_bytes(1, 1, 4096, 4096, 64, dtype_bytes=FP16)["S_bytes"]
    s_32 = naive_attention_bytes(1, 32, 4096, 4096, 64, dtype_bytes=FP16)["write_S"]
    lesson = (4096 ** 2 == 16_777_216 and s_4096 == 16_777_216 * 2 == 32 * MiB
              and s_32 == 32 * 32 * MiB == 1024 * MiB == GiB)
    checks.append(Check("15", TOPIC, "formula", None, lesson,
                        f"N = 4096: N² = {4096 ** 2:,}; S = {s_4096:,} B = {s_4096 / MiB:g} MiB "
                        f"per head in FP16; 32 heads {s_32:,} B = {s_32 / GiB:g} GiB"))
    if verbose:
        print(__doc__.split("\n\n")[1])
        print("\n§15: one N×N matrix (S, or P) in FP16, batch 1 (MiB = 2^20 B, GiB = 2^30 B)")
        print(tabulate(table, headers=["N", "N² elements", "MiB per head", "GiB, 32 heads",
                                       "GiB, S and P, 32 heads"], disable_numparse=True))

    # §16: FLOPs, counted product by product, against the formula.
    d = 64
    ok = True
    for nq, nk in ((4096, 4096), (1000, 3000), (1, 1)):
        counted = matmul_flops(nq, nk, d) + matmul_flops(nq, d, nk)    # QKᵀ, then PV
        ok &= attention_flops(1, 1, nq, nk, d) == counted == 4 * nq * nk * d
    checks.append(Check("16", TOPIC, "formula", None, bool(ok),
                        "attention_flops = 2·Nq·Nk·d (QKᵀ) + 2·Nq·Nk·d (PV) = 4·Nq·Nk·d"))

    # §16: FLOPs vs bytes, FP16, d = 64, Br = the GPU kernel's Q tile for d = 64.
    br = gpu_config(d).Br
    rows, naive_ai, flash_ai, flash_br_ai = [], [], [], []
    for n in (1024, 4096, 16384, 65536):
        f = attention_flops(1, 1, n, n, d)
        nb = naive_attention_bytes(1, 1, n, n, d, dtype_bytes=FP16)["total"]
        fb = flash_attention_bytes(1, 1, n, n, d, dtype_bytes=FP16)["total"]
        fbr = flash_attention_bytes(1, 1, n, n, d, dtype_bytes=FP16, Br=br)["total"]
        naive_ai.append(f / nb)
        flash_ai.append(f / fb)
        flash_br_ai.append(f / fbr)
        rows.append([n, f"{f:.3g}", f"{nb / MiB:,.1f}", f"{fb / MiB:,.2f}", f"{fbr / MiB:,.1f}",
                     f"{f / nb:.1f}", f"{f / fb:,.0f}", f"{f / fbr:.1f}"])
    checks.append(Check("16", TOPIC, "formula", None,
                        bool(max(naive_ai) < d / 2 < RIDGE and min(flash_ai[1:]) > RIDGE
                             and abs(flash_br_ai[-1] - br) < 1),
                        f"FLOP/B, FP16, d = {d}: naive ≤ d/2 = {d // 2} for every N, below the "
                        f"ridge {RIDGE:.0f}; flash {flash_ai[0]:.0f} → {flash_ai[-1]:,.0f} "
                        f"(K, V read once), ≈ Br = {br} when re-read per Q tile"))
    if verbose:
        print(f"\n§16: FP16, d = {d}, B = H = 1. FLOPs 4·N²·d are the same for both paths; "
              "the bytes are not")
        print(tabulate(rows, headers=["N", "FLOPs", "naive MiB", "flash MiB (K,V once)",
                                      f"flash MiB (Br={br})", "naive FLOP/B",
                                      "flash FLOP/B", f"flash FLOP/B (Br={br})"],
                       disable_numparse=True))
        print(f"H200 ridge point: {PEAK_FP16_FLOPS / 1e12:.0f} TFLOP/s FP16 ÷ "
              f"{PEAK_HBM_BYTES / 1e12:.1f} TB/s = {RIDGE:.0f} FLOP/B. The naive path moves "
              "4·N² elements for 4·N²·d FLOPs: d/2 FLOP per FP16 byte, whatever N, so it stays "
              "bound by memory; the fused kernel's bytes grow like N (or N²/Br), its FLOPs "
              "like N². (The Br column is the pessimistic model: K and V fetched from HBM "
              "again by every Q tile; on a GPU the Q tiles that run at once share them in L2.)")

    if flashlesson.SIMULATOR:
        if verbose:
            print("\npeak device memory per call: skipped in the simulator (no device memory "
                  "to measure). On a GPU this example measures naive vs flash for "
                  "N = 1024, 2048, 4096 with B = 1, H = 32, d = 64.")
        return checks
    checks += _measured_memory(rng, verbose)
    return checks


# ---------------------------------------------------------------------------------------------
# GPU only: device memory held by one call
# ---------------------------------------------------------------------------------------------
# held_bytes(fn): device memory taken by fn() at its peak — this process's allocations across the call,
# frees deferred, outputs kept alive (flashlesson.bench.device_bytes_held, shared with the bench)
from flashlesson.bench import device_bytes_held as held_bytes  # noqa: E402


def _measured_memory(rng, verbose):
    from numba import cuda
    b, h, d = 1, 32, 64
    checks, table = [], []
    for n in (1024, 2048, 4096):
        q, k, v = (cuda.to_device(rng.standard_normal((b, h, n, d)).astype(np.float32))
                   for _ in range(3))
        o_lse = b * h * n * (d + 1) * FP32                  # O [B,H,N,d] + LSE [B,H,N], fp32
        s_p = 2 * b * h * n * n * FP32                      # S and P [B,H,N,N], fp32
        for method, predicted in (("naive", s_p + o_lse), ("flash", o_lse)):
            def call():
                return flashlesson.attention(q, k, v, method=method, return_lse=True)
            held_bytes(call)                                # warm-up: compile, load, reserve
            got = held_bytes(call)
            # within 5% + 4 MiB of the prediction (pages are 2 MiB; small arrays share them)
            ok = abs(got - predicted) <= 0.05 * predicted + 4 * MiB
            checks.append(Check("15–16", TOPIC, method, None, bool(ok),
                                f"B={b} H={h} N={n} d={d}: held {got / MiB:,.1f} MiB at peak, "
                                f"predicted {predicted / MiB:,.1f} MiB "
                                f"({'S + P + O + LSE' if method == 'naive' else 'O + LSE'})"))
            table.append([n, method, f"{got / MiB:,.1f}", f"{predicted / MiB:,.1f}"])
        # the outputs are right, too: the first 64 queries of head 0, against the oracle
        o = flashlesson.attention(q, k, v)[0, 0, :64].copy_to_host()
        want = attention(q[0, 0, :64].copy_to_host(), k[0, 0].copy_to_host(),
                         v[0, 0].copy_to_host())[0]
        err = float(np.max(np.abs(o - want)))
        checks.append(Check("15–16", TOPIC, "flash", err,
                            bool(err <= 1e-5 * np.abs(want).max() + 1e-6),
                            f"N={n}: first 64 rows of head 0 vs oracle"))
        del q, k, v
    if verbose:
        dev = flashlesson.device.describe()["device"]
        print(f"\n{dev}, {datetime.date.today()}: device memory held by one call, measured "
              f"as the device bytes this process holds at the peak (frees deferred), B={b} H={h} d={d}, float32")
        print(tabulate(table, headers=["N", "method", "held MiB", "predicted MiB"],
                       disable_numparse=True))
        print("naive holds S and P, 2·B·H·N² floats: ×4 each time N doubles; flash holds only "
              "its outputs O and LSE: ×2.")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
