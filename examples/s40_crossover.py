"""§40 — FlashAttention is not always faster: at small N the fixed costs dominate.

The lesson's claim. For a very short sequence (N = 32, say) the naive path's N×N matrices are
small, and FlashAttention's tile scheduling, online rescaling, launch and boundary handling
take a large share; its advantage shows at medium and long sequences, big batches, training.
Where exactly it stops winning is a measurement, not a constant.

What you will see: first the terms of one call as a model, for N = 16 … 1024 at B1 H1 and
B1 H16 d64 (``flashlesson.sweeps.overhead_model``): launches (flash 1, naive 3) at Python's
≈ 16 µs each, the blocks of flash's grid against the H200's 132 SMs, the share of its tile
work that is real (N = 16 in 32×64 tiles: 1/8, the rest is padding), its arithmetic at the
kernel's full-GPU rate scaled by both, and the HBM time of each method's bytes. Then naive and
flash checked against the float64 oracle at small N. On a GPU the example measures naive,
flash and torch SDPA (math, efficient) at every N — GPU time by CUDA events, and Python's
time per call — and reports where flash stops beating naive and torch, from those numbers; in
the simulator that needs a GPU (``python3 scripts/bench_sweeps.py crossover`` there).

Run: ``python examples/s40_crossover.py`` (or ``flashlesson section 40``).
"""

import datetime

import flashlesson
from flashlesson import sweeps
from flashlesson.tour import Check, example_rng

SECTIONS = (40,)
TOPIC = "small N: overheads"
MODEL_COLUMNS = ("H", "N", "flash tiles", "flash blocks", "SMs busy", "useful share",
                 "flash work µs", "flash HBM µs", "naive HBM µs", "flash launch µs",
                 "naive launch µs")


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    ns, heads = sweeps.CROSSOVER_NS, sweeps.CROSSOVER_HEADS

    # The model: which term sets the time of one call at small N.
    model = [sweeps.overhead_model(n, h=h) for h in heads for n in ns]
    tiny = [m for m in model if m["H"] == 1 and m["N"] <= 256]
    first = model[0]
    ok = (all(m["flash work µs"] < m["flash launch µs"] for m in tiny)
          and all(m["naive HBM µs"] < m["naive launch µs"] for m in tiny)
          and first["useful share"] == 16 * 16 / (32 * 64) and first["flash blocks"] == 1)
    checks.append(Check("40", TOPIC, "formula", None, ok,
                        "model, B1 H1 N ≤ 256: flash's GPU work (≤ "
                        f"{max(m['flash work µs'] for m in tiny):.1f} µs) and naive's HBM time "
                        f"(≤ {max(m['naive HBM µs'] for m in tiny):.2f} µs) are below one "
                        f"launch ({sweeps.LAUNCH_US:.0f} µs of Python); N = 16: 1 block, 1/8 of "
                        "its tile work real"))
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\nthe model, d = {sweeps.CROSSOVER_D}, float32: flash work = FLOPs / "
              f"({sweeps.FLASH_TFLOPS} TFLOP/s × SMs busy × useful share); HBM at "
              f"{sweeps.COPY_GBS:.0f} GB/s; launches at {sweeps.LAUNCH_US:.0f} µs of Python "
              "each (H200 anchors)")
        print(sweeps.table(model, MODEL_COLUMNS))
        print("at small N every GPU-side term is a few µs, below the cost of one launch: the "
              "call is set by launches and Python (naive pays three), and a grid of a few "
              "blocks leaves most SMs idle; flash's tiles also compute padding past N")

    # Naive and flash give the oracle's answer at small N (GPU: every N, both H, timed).
    if flashlesson.SIMULATOR:
        ns, heads = (16, 32), (1, 2)
    rows = sweeps.sweep_crossover(rng, ns, heads, log=lambda line: None,
                                  timing=not flashlesson.SIMULATOR)
    for method in ("flash", "naive"):
        errs = [r[f"{method} rel err"] for r in rows]
        worst = max(errs)
        checks.append(Check("40", TOPIC, method, worst,
                            all(e <= sweeps.REL_TOL for e in errs),  # NaN fails
                            f"B1 H∈{{{', '.join(map(str, heads))}}} N ∈ {{"
                            f"{', '.join(map(str, ns))}}} d64: max|ΔO| / max|O| vs the oracle"))
    if verbose:
        print(f"\nnaive and flash checked against the float64 oracle at N = "
              f"{', '.join(map(str, ns))}, H = {', '.join(map(str, heads))} (random inputs: seed "
              f"{seed}; flash with the H200's tiles for each shape)")
    if flashlesson.SIMULATOR:
        if verbose:
            print("measured crossover (GPU time and time per call of naive, flash, torch SDPA): "
                  "skipped — it needs a GPU; there: python3 scripts/bench_sweeps.py crossover")
        return checks

    lines = []
    for slow in ("naive", "sdpa efficient"):
        for key, what in (("ms", "GPU time"), ("call ms", "time per call")):
            found = sweeps.crossover(rows, "flash", slow, key)
            lines += [f"flash vs {slow}, {what}: {line}"
                      for line in sweeps.describe_crossover(found, "flash", slow)]
    checks.append(Check.measured("40", TOPIC, "flash", "; ".join(
        line for line in lines if "vs naive, GPU time" in line) + " (a shared GPU's timing, "
        "not pass/fail)"))
    if verbose:
        dev = flashlesson.device.describe()["device"]
        print(f"\n{dev}, {datetime.date.today()}: d={sweeps.CROSSOVER_D} float32; µs per call: "
              "GPU time (CUDA events, calls queued back to back) and Python's time to issue one")
        print(sweeps.table(rows, sweeps.CROSSOVER_COLUMNS))
        print("\n".join(lines))
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
