"""§37 — tensor cores: QKᵀ and PV on mma.sync, the softmax on the CUDA cores.

The lesson's claim: on a modern GPU the two products of attention belong on the tensor cores
(MMA instructions), while max, exp, sum and the rescale stay on the ordinary cores; the online
softmax is what lets the two sit in one kernel. Numba has no tensor-core API, so the project
emits the PTX instruction itself (kernels_numba/mma.py: ``mma.sync.aligned.m16n8k16`` as LLVM
inline assembly, with a warp-collective twin for the simulator).

What you will see:
0. the lesson-tier kernel (``kernels_numba/lesson/tensor_core.py``: one warp, one 16-row block,
   plain loads, natural logs) and then the fast one, in fp16, against the float64 oracle, and
   (on a GPU) the time of each;
1. one mma alone against NumPy, and the fragment layout proved on data: with B a one-hot
   matrix, D = A·B copies chosen columns of A, so every lane's registers land where the table
   in mma.py says;
2. the tensor-core FlashAttention (method "flash_tc") in fp16, bf16 and 3xTF32 against the
   float64 oracle;
3. who does what in one K/V tile: mma instructions and their FLOPs against the CUDA-core work
   (exp, max, sum, rescale), from the kernel's own loop bounds — and, on a GPU, counted in the
   compiled SASS (HMMA vs MUFU.EX2 vs FFMA/FMUL/FADD) and timed against the fp32 CUDA-core
   kernel on the same input.

Run: ``python examples/s37_tensor_cores.py`` (or ``flashlesson section 37``).
"""

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson import BFloat16, attention
from flashlesson.tour import Check, attention_check, example_rng, tier_timing
from flashlesson.kernels_numba import mma

SECTIONS = (37,)
TOPIC = "tensor cores"
# the two tiers' causal cases: causal only in the simulator (keeps the tour short on CPU)
TIER_CASES = (True,) if flashlesson.SIMULATOR else (False, True)


def _err(got, want):
    return float(np.max(np.abs(np.asarray(got, np.float64) - want)) /
                 max(float(np.max(np.abs(want))), 1e-30))


def tile_work(d, Bc, Br):
    """Per K/V tile and block: tensor-core mmas and FLOPs vs CUDA-core operations."""
    mmas = (Bc // 8) * (d // 16) + (Bc // 16) * (d // 8)          # S = QKᵀ, then PV
    tc_flops = mmas * (Br // 16) * 2 * 16 * 8 * 16
    # per score: scale, mask test, max, subtract, exp, sum, pack to fp16; per acc: rescale
    cuda_core = Br * Bc * 7 + Br * d
    return mmas * (Br // 16), tc_flops, cuda_core


def main(verbose=True):
    rng, seed = example_rng()
    checks = []

    # 1. one instruction, one warp
    a = rng.standard_normal((16, 16)).astype(np.float32)
    b = rng.standard_normal((16, 8)).astype(np.float32)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    d = np.full((16, 8), np.nan, np.float32)
    mma.mma_f16_kernel[1, 32](a, b, c, d)
    want = a.astype(np.float16).astype(np.float64) @ b.astype(np.float16).astype(np.float64) + c
    e = _err(d, want)
    checks.append(Check("37", TOPIC, "mma_f16", e, e <= 1e-5,
                        "one m16n8k16 mma (fp16 in, fp32 accumulate) = NumPy on the same halves"))
    ids = (np.arange(256, dtype=np.float32).reshape(16, 16) % 64)    # exact in fp16
    pick = [3, 0, 15, 8, 7, 12, 1, 10]                                # D[:, n] = A[:, pick[n]]
    onehot = np.zeros((16, 8), np.float32)
    onehot[pick, np.arange(8)] = 1
    mma.mma_f16_kernel[1, 32](ids, onehot, np.zeros((16, 8), np.float32), d)
    ok = np.array_equal(d, ids[:, pick])
    checks.append(Check("37", TOPIC, "mma_f16", None, bool(ok),
                        "fragment layout: A·(one-hot B) returns A's chosen columns exactly"))
    if verbose:
        print("Fragment layout (lane = 4g + t): a0 = A[g, 2t:2t+2], a1 = A[g+8, 2t:2t+2], "
              "a2 = A[g, 2t+8:2t+10], a3 = A[g+8, 2t+8:2t+10]; b0 = B[2t:2t+2, g], "
              "b1 = B[2t+8:2t+10, g]; c0,c1 = C[g, 2t:2t+2], c2,c3 = C[g+8, 2t:2t+2]")

    # The two tiers (fp16): the lesson kernel (kernels_numba/lesson/tensor_core.py: one
    # warp, one 16-row block, plain loads, natural logs) first, then the fast one; the gap
    checks += lesson_and_fast(rng, verbose)

    # 2. the attention kernel, three input formats (simulator: one head — six runs on the CPU;
    # more than one head is tests/test_attention_tc.py's)
    B, H, nq, nk, dh = (1, 1, 21, 35, 32) if flashlesson.SIMULATOR else (2, 8, 1000, 777, 64)
    q, k, v = (rng.standard_normal((B, H, n, dh)).astype(np.float32) for n in (nq, nk, nk))
    rows = []
    for fmt in ("fp16", "bf16", "3xTF32"):
        if fmt == "fp16":
            args = [x.astype(np.float16) for x in (q, k, v)]
            seen = [x.astype(np.float64) for x in args]
        elif fmt == "bf16":
            args = [BFloat16.from_float32(x) for x in (q, k, v)]
            seen = [x.to_float32().astype(np.float64) for x in args]
        else:
            args, seen = [q, k, v], [x.astype(np.float64) for x in (q, k, v)]
        dtype = {"fp16": "float16", "bf16": "bfloat16", "3xTF32": "tf32"}[fmt]
        for causal in (False, True):
            o = attention(*args, causal=causal, method="flash_tc")
            o = o.to_float32() if isinstance(o, BFloat16) else o
            (c,), want, _ = attention_check("37", TOPIC, f"flash_tc {fmt}", o, None, *seen,
                                            causal=causal, dtype=dtype,
                                            note=f"causal={causal}, vs the float64 oracle on "
                                            "the inputs as rounded (bound: tolerance model)")
            checks.append(c)
            rows.append([fmt, causal, f"{_err(o, want):.1e}", "yes" if c.passed else "NO"])
    if verbose:
        print(f"\nflash_tc against the float64 oracle, q [{B}, {H}, {nq}, {dh}], Nk = {nk}:")
        print(tabulate(rows, headers=["inputs", "causal", "relative error",
                                      "within flashlesson.tolerance's bound"]))

    # 3. who does what
    d_, Bc, Br = 64, 64, 64
    n_mma, tc_flops, cuda_ops = tile_work(d_, Bc, Br)
    share = tc_flops / (tc_flops + cuda_ops)
    checks.append(Check("37", TOPIC, "model", None, n_mma == 64 * Br // 16 and share > 0.95,
                        f"d={d_}, Bc={Bc}, Br={Br}: {n_mma} mmas = {tc_flops:,} FLOPs on tensor "
                        f"cores vs ~{cuda_ops:,} CUDA-core ops per tile ({share:.1%} of the "
                        "arithmetic on tensor cores)"))
    if verbose:
        print(f"\nOne K/V tile of one block (d={d_}, Bc={Bc}, Br={Br}): {n_mma} mma.sync "
              f"({tc_flops:,} FLOPs) on tensor cores; ~{cuda_ops:,} operations on CUDA cores "
              "(scale, mask, max, exp, sum, pack, rescale).")
    if not flashlesson.SIMULATOR:
        checks += _gpu_shares(rng, verbose)
    elif verbose:
        print("(simulator: the SASS counts and the timing against the fp32 kernel need a GPU)")
    return checks


def lesson_and_fast(rng, verbose):
    """fp16 flash_tc, tier "lesson" then "fast", each against the float64 oracle on the inputs
    as rounded (bound: ``tolerance.attention_tol`` for float16), then the measured gap."""
    from numba import cuda
    B, H, nq, nk, dh = (1, 1, 21, 35, 32) if flashlesson.SIMULATOR else (1, 4, 512, 512, 64)
    args = [rng.standard_normal((B, H, n, dh)).astype(np.float16) for n in (nq, nk, nk)]
    seen = [x.astype(np.float64) for x in args]
    checks = []
    for causal in TIER_CASES:
        got = []
        for tier in ("lesson", "fast"):
            o, lse = attention(*args, causal=causal, method="flash_tc", tier=tier,
                               return_lse=True)
            cs, _, _ = attention_check("37", TOPIC, f"flash_tc fp16 ({tier})", o, lse, *seen,
                                       causal=causal, dtype="float16",
                                       note=f"{tier} tier, causal={causal}")
            got += cs
        dev = [cuda.to_device(x) for x in args]
        got.append(tier_timing("37", TOPIC, "flash_tc fp16",
                               lambda tier, causal=causal: attention(*dev, causal=causal,
                                                                     method="flash_tc",
                                                                     tier=tier)))
        if verbose:
            print(f"\nflash_tc fp16, lesson tier then fast tier, q [{B}, {H}, {nq}, {dh}], "
                  f"Nk = {nk}, causal={causal}:")
            for c in got:
                print(f"  {c.kernel:>24}: {c.result}"
                      + (f", max err {c.max_err:.2e}" if c.max_err is not None else "")
                      + f" — {c.note}")
        checks += got
    return checks


def _gpu_shares(rng, verbose):
    """SASS instruction mix of the compiled fp16 kernel, and time vs the fp32 CUDA-core flash."""
    from flashlesson.kernels_numba import attention_tc as KT

    from flashlesson.bench import attention_flops, time_gpu_adaptive
    from numba import cuda
    checks = []
    shape = (2, 16, 4096, 64)
    q32 = [cuda.to_device(rng.standard_normal(shape).astype(np.float32)) for _ in range(3)]
    q16 = [cuda.to_device(x.copy_to_host().astype(np.float16)) for x in q32]
    ms16 = time_gpu_adaptive(lambda: attention(*q16))
    ms32 = time_gpu_adaptive(lambda: attention(*q32))
    flops = attention_flops(*shape[:3], shape[2], shape[3], False)
    checks.append(Check.measured("37", TOPIC, "flash_tc fp16",
                                 f"B2 H16 N4096 d64: tensor cores {flops / ms16 / 1e9:.0f} "
                                 f"TFLOP/s vs CUDA-core fp32 flash {flops / ms32 / 1e9:.0f} "
                                 f"TFLOP/s ({ms32 / ms16:.1f}× the speed; a shared GPU's "
                                 "timing, not pass/fail)"))
    from flashlesson.tc_methods import default_tc_config
    cfg = default_tc_config(64, False)
    kernel = KT.BUILT[("flash_tc_kernel", 64, cfg.Bc, cfg.WARPS, False, False, False, cfg.MT,
                       cfg.PF, cfg.ASYNC)]
    try:
        parts = [kernel] + list(getattr(kernel, "specializations", {}).values())
        sass = "\n".join(s for p in parts for s in p.inspect_sass().values())
    except Exception as exc:
        checks.append(Check.not_performed("37", TOPIC, "SASS",
                                          f"SASS not available here ({type(exc).__name__}: "
                                          f"{exc}); the instruction mix was not counted"))
        return checks
    ops = {name: sum(1 for line in sass.splitlines() if f" {name}" in line)
           for name in ("HMMA", "MUFU.EX2", "FFMA", "FMUL", "FADD", "FMNMX", "LDS", "SHFL")}
    mmas = 64 * cfg.MT                      # per warp and tile: S 8·4 and PV 4·8, MT row blocks
    checks.append(Check("37", TOPIC, "SASS", None, ops["HMMA"] == mmas and ops["MUFU.EX2"] > 0,
                        "static instructions: " + ", ".join(f"{k} {v}" for k, v in ops.items())))
    if verbose:
        print("\nCompiled fp16 kernel (d64), static instruction counts:", ops)
    return checks


if __name__ == "__main__":
    for ch in main():
        print(ch.result, ch.section, ch.kernel, ch.note)
