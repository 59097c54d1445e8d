"""§26 — why an on-chip tile is faster: registers > shared memory > L2 > HBM, measured.

The lesson's claim: the GPU's memories form a hierarchy — registers (fastest, smallest), shared
memory / L1, L2, HBM (largest, slowest) — and naive attention moves its N² intermediates through
the slowest one, while FlashAttention keeps them on chip and pays with extra on-chip work
("trade compute for IO").

What you will see: the four small kernels of ``kernels_numba/membw.py`` — an HBM copy and read
over gigabytes, the same read over a working set that fits in L2, a shared-memory ping-pong
with a barrier per round, and independent FMA chains (the register file's view) — each checked
against its NumPy twin on fresh random data: the copy bit for bit and its checksum, the read's
partial sums exactly (integer-valued floats), the shared-memory result bitwise (the same float32
operations in the same order), the FMA chains against a float64 closed form. On a GPU the
example then measures them with CUDA events (``flashlesson.hierarchy.measure``, the same as
``flashlesson bench hierarchy``) and checks the order shared memory > HBM, registers > shared
memory and L2 > HBM, with GB/s from the byte formulas in ``flashlesson.hierarchy``. In the
simulator the timing is skipped: a time there measures Python.

Run: ``python examples/s26_memory_hierarchy.py`` (or ``flashlesson section 26``).
"""

import numpy as np

import flashlesson  # before numba.cuda: it chooses the GPU or the simulator
from numba import cuda
from flashlesson import hierarchy as HY
from flashlesson.tour import Check, example_rng, max_abs_err

SECTIONS = (26,)
TOPIC = "memory hierarchy"


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    sim = flashlesson.SIMULATOR
    T = HY.threads_per_block()

    # HBM copy: bit for bit, and the checksum of dst equals NumPy's.
    n = 4 * T * (2 if sim else 4096)
    xh = rng.integers(0, 8, n).astype(np.float32)         # integers: every sum exact in fp32
    x = cuda.to_device(xh)
    dst = cuda.to_device(np.full(n, np.nan, np.float32))  # poisoned: an unwritten element shows
    HY.copy(x, dst)
    got = dst.copy_to_host()
    ok = bool(np.array_equal(got, xh)) and float(got.sum(dtype=np.float64)) == float(xh.sum())
    checks.append(Check("26", TOPIC, "copy_kernel", max_abs_err(got, xh), ok,
                        f"n = {n}: dst == src bit for bit; checksum {got.sum():.0f}"))

    # read: the partial sums (rotated reps) equal the NumPy twin exactly
    grid = T * (1 if sim else 64)
    reps, rot = 3, 4 * int(rng.integers(1, n // 4))
    part = cuda.to_device(np.full(grid, np.nan, np.float32))
    HY.read(x, part, reps, rot)
    want = HY.read_twin(xh, grid, reps, rot)
    got = part.copy_to_host()
    checks.append(Check("26", TOPIC, "read_kernel", max_abs_err(got, want),
                        bool(np.array_equal(got, want)),
                        f"n = {n}, {grid} threads, {reps} reps rotated by {rot}: partial sums "
                        "== NumPy, exactly"))

    # shared memory: the ping-pong result equals the NumPy twin bit for bit
    k, rounds, blocks = (4, 5, 2) if sim else (HY.SMEM_K, 64, 32)
    tile = T * k
    xh = rng.standard_normal(blocks * tile).astype(np.float32)
    out = cuda.to_device(np.full(xh.shape, np.nan, np.float32))
    HY.smem(cuda.to_device(xh), out, rounds, k=k)
    got, want = out.copy_to_host(), HY.smem_twin(xh, tile, rounds)
    checks.append(Check("26", TOPIC, f"smem_kernel(T={T}, K={k})", max_abs_err(got, want),
                        bool(np.array_equal(got, want)),
                        f"{blocks} blocks, {rounds} rounds of A ← (A + roll(A)) / 2: bitwise "
                        "== NumPy float32"))

    # registers: FMA chains against the float64 closed form
    iters, nthreads = (20, 2 * T) if sim else (HY.FMA_ITERS, 64 * T)
    xh = rng.uniform(-1, 1, nthreads).astype(np.float32)
    out = cuda.to_device(np.full(nthreads, np.nan, np.float32))
    HY.fma(cuda.to_device(xh), out, iters)
    got, want = out.copy_to_host(), HY.fma_twin(xh, iters)
    rel = float(np.max(np.abs(got - want) / np.abs(want)))
    checks.append(Check("26", TOPIC, f"fma_kernel(CH={HY.FMA_CHAINS})", rel, rel <= 1e-3,
                        f"{nthreads} threads × {HY.FMA_CHAINS} chains × {iters} steps of "
                        "a ← 0.999·a + 0.25: relative error vs closed form ≤ 1e-3"))

    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\nrandom inputs: seed {seed}; the kernels on small arrays, checked:")
        for c in checks:
            print(f"  {c.kernel:24s} {'ok' if c.passed else 'FAILED'}  {c.note}")
        print("\nbytes each launch moves, by formula (flashlesson.hierarchy), at the GPU sizes:")
        print(f"  copy  2·4·n            n = 2^28: "
              f"{HY.copy_bytes(HY.HBM_COPY_ELEMENTS) / 1e9:.2f} GB")
        print(f"  read  4·n·reps         HBM n = 2^29, reps 1: "
              f"{HY.read_bytes(HY.HBM_READ_ELEMENTS) / 1e9:.2f} GB; L2 n = 2^21, reps "
              f"{HY.L2_REPS}: {HY.read_bytes(HY.L2_ELEMENTS, HY.L2_REPS) / 1e9:.2f} GB")
        print("  smem  12·blocks·T·K·rounds (2 reads + 1 write of 4 B per element and round)")
        print("  fma   16·threads·CH·iters  (3 operands read + 1 written per multiply-add)")

    if sim:
        if verbose:
            print("\nmeasured bandwidth: skipped in the simulator (a time there measures "
                  "Python). On a GPU: `flashlesson bench hierarchy`, or this example.")
        return checks
    return checks + _measured(verbose)


def _measured(verbose):
    result = HY.measure(log=(print if verbose else (lambda *a, **k: None)))
    best = result["best GB/s"]
    checks = [Check("26", TOPIC, "membw (all)", None, result["ok"]["checks"],
                    "each measured kernel's output checked before timing")]
    for claim, (hi, lo) in (("shared > HBM", ("shared", "HBM")),
                            ("registers > shared", ("registers", "shared")),
                            ("L2 > HBM", ("L2", "HBM"))):
        # a shared GPU's timing: a measurement, not pass/fail (the margins are not all ≥ 2×)
        checks.append(Check.measured("26", TOPIC, "measured",
                                     f"{claim}: {best[hi]:.0f} vs {best[lo]:.0f} GB/s "
                                     f"({best[hi] / best[lo]:.1f}×; "
                                     f"{'as claimed' if result['ok'][claim] else 'NOT as claimed'})"))
    if verbose:
        print(f"\n{result['device']}, {result['SMs']} SMs, {result['date']}")
        print(HY.table(result))
        print("\nper level, the best GB/s: " + ", ".join(f"{k} {v:,.0f}" for k, v in best.items())
              + f". Shared memory moves {best['shared'] / best['HBM']:.0f}× the bytes per "
              f"second of HBM, the register file {best['registers'] / best['HBM']:.0f}×: an S "
              "or P tile kept on chip is read and rewritten many times for the price of one "
              "trip to HBM.")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
