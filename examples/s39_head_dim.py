"""§39 — the head dimension d changes the tiles, the registers and the shared memory.

The lesson's claim. Common head dimensions are 64, 80, 96, 128 and 256. d sets the length of
each Q/K/V row, the inner loop of QKᵀ, the output accumulator each thread keeps, and the size
of every shared-memory tile; going from 64 to 128 doubles the FLOPs per score and the tile
bytes, so the block configuration may have to change.

What you will see: for each d, the tiles the H200 runs (``GPU_CONFIGS`` in
``flashlesson/configs.py``), D (d rounded up to a multiple of 4·TC: 80 runs as 96,
its last 16 columns zeros), the shared memory of the tiles, the values each thread keeps in
registers and the blocks per SM that shared memory and threads allow (H200 limits); then each
d checked against the float64 oracle with exactly those tiles, on a tiny N that is not a
multiple of them. On a GPU the sweep runs at B1 H16 N4096: TFLOP/s per d next to torch SDPA's
math and efficient backends timed in the same run on the same tensors, and the registers
and local memory (spills) Numba reports; in the simulator those need a GPU
(``python3 scripts/bench_sweeps.py headdim`` there).

Run: ``python examples/s39_head_dim.py`` (or ``flashlesson section 39``).
"""

import datetime
import math

import flashlesson
from flashlesson import sweeps
from flashlesson.configs import MAX_HEAD_DIM
from flashlesson.tour import Check, example_rng

SECTIONS = (39,)
TOPIC = "head dimension"
MODEL_COLUMNS = ("d", "D", "config", "threads", "smem KB", "values/thread", "blocks/SM",
                 "limited by")


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    dims = sweeps.HEAD_DIMS
    b, h, n = sweeps.HEAD_DIM_SHAPE

    # The model: tiles per d (the H200's choice), and what they cost on chip.
    model = [{"d": d, **sweeps.config_model(sweeps.h200_config(d), d)} for d in dims]
    supported = all(sweeps.refusal(sweeps.h200_config(d), d) is None for d in dims)
    padded = {m["d"]: m["D"] for m in model}
    ok = supported and max(dims) <= MAX_HEAD_DIM and padded == {64: 64, 80: 96, 96: 96,
                                                                128: 128, 256: 256}
    checks.append(Check("39", TOPIC, "formula", None, ok,
                        "d = " + ", ".join(map(str, dims)) + ": every one has H200 tiles that "
                        "FlashConfig.check accepts; D = " + ", ".join(
                            str(padded[d]) for d in dims) + " (d padded to 4·TC)"))
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\nthe H200's tiles per head dimension (GPU_CONFIGS) and their cost on chip, "
              "float32 (registers unknown until compiled on a GPU)")
        print(sweeps.table(model, MODEL_COLUMNS))
        small = sweeps.h200_config(128)                     # the d ≤ 128 tiles, at d = 256
        big = sweeps.config_model(small, 256)
        print(f"why d = 256 has its own tiles: the d ≤ 128 ones at d = 256 would take "
              f"{big['smem KB']:.0f} KB and {big['values/thread']} values per thread — "
              f"{sweeps.refusal(small, 256) or 'accepted'}")

    # Each d, with the H200's tiles, gives the oracle's answer (GPU: B1 H16 N4096, timed).
    shape = (b, h, n) if not flashlesson.SIMULATOR else (1, 1, 37)
    with_time = not flashlesson.SIMULATOR
    rows = sweeps.sweep_head_dims(rng, dims, shape, log=lambda line: None, timing=with_time)
    for row in rows:
        err = row.get("rel err")
        checks.append(Check("39", TOPIC, f"flash d={row['d']}", err,
                            err is not None and err <= sweeps.REL_TOL,
                            row.get("error", f"{row['config']}, B={shape[0]} H={shape[1]} "
                                    f"N={shape[2]}: max|ΔO| / max|O| vs the float64 oracle")))
    if verbose:
        print(f"\nchecked against the float64 oracle at B={shape[0]} H={shape[1]} N={shape[2]} "
              f"(random inputs: seed {seed}): " + ", ".join(
                  f"d={r['d']} {r.get('rel err', math.nan):.1e}" for r in rows))
    if flashlesson.SIMULATOR:
        if verbose:
            print("measured columns (TFLOP/s vs torch SDPA math and efficient, registers, local "
                  "memory): skipped — they need a GPU; there: python3 scripts/bench_sweeps.py "
                  "headdim")
        return checks

    measured = [r for r in rows if "TFLOP/s" in r]
    checks.append(Check.measured("39", TOPIC, "flash", "TFLOP/s per d (registers): " + ", ".join(
        f"d={r['d']} {r['TFLOP/s']:.1f} ({r['regs']})" +
        (f" ({r['flash / efficient']:.2f}× efficient)" if r.get("flash / efficient") else "")
        for r in measured) + "; a shared GPU's timing, not pass/fail"))
    if verbose:
        dev = flashlesson.device.describe()["device"]
        print(f"\n{dev}, {datetime.date.today()}: B={b} H={h} N={n} float32, CUDA-event medians; "
              "TFLOP/s = 4·B·H·N²·d / time; torch SDPA in the same run")
        print(sweeps.table(rows, sweeps.HEAD_DIM_COLUMNS))
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
