"""§38 — why the tile size matters: too small wastes reuse, too large runs out of chip.

The lesson's claim. Small tiles: little data reuse, more loop steps and barriers, K and V
re-read from HBM once per Q tile. Large tiles: more shared memory and registers per block,
fewer blocks per SM (occupancy), and past some size spills or no launch at all. The right
size is a balance, and it changes with d, N, dtype and GPU.

What you will see: the forward kernel's configurations ``FlashConfig(Br, Bc, TR, TC, KU,
GROUP)`` of ``flashlesson.sweeps.TILE_CONFIGS`` at d = 64, from 32×32 tiles to two that
``FlashConfig.check`` refuses (one needs 228 KB of shared memory, one would keep 192 values
per thread in registers), with what each implies before it runs: shared memory from the tile
layout, values per thread (scores + outputs), FMAs per 16-byte shared load (the register
tile's reuse), K/V passes over HBM at N = 4096 (N/Br), and blocks per SM from threads and
shared memory with the H200's limits (``flashlesson.occupancy``). Then every configuration
that runs is checked against the float64 oracle on a shape that is not a multiple of any tile.
On a GPU the same configurations are timed at B2 H16 N4096 d64 with their registers and local
memory (spills) from Numba's queries, and the occupancy redone with the real registers; in the
simulator those columns need a GPU (``python3 scripts/bench_sweeps.py tiles`` there).

Run: ``python examples/s38_tile_size.py`` (or ``flashlesson section 38``).
"""

import datetime

import flashlesson
from flashlesson import sweeps
from flashlesson.configs import GPU_CONFIGS
from flashlesson.occupancy import blocks_per_sm
from flashlesson.tour import Check, example_rng

SECTIONS = (38,)
TOPIC = "tile size"
MODEL_COLUMNS = ("config", "threads", "smem KB", "values/thread", "FMA/load", "K/V passes",
                 "blocks/SM", "limited by", "occupancy", "refused")


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    d, (b, h, n) = sweeps.TILE_D, sweeps.TILE_SHAPE
    configs = sweeps.TILE_CONFIGS

    # The model: what each tile size costs on chip, before anything runs.
    model = [{**sweeps.config_model(c, d, n), "refused": sweeps.refusal(c, d) or ""}
             for c in configs]
    runnable = [c for c, m in zip(configs, model) if not m["refused"]]
    refused = [m["refused"] for m in model if m["refused"]]
    default = dict(GPU_CONFIGS)[64]
    dm = sweeps.config_model(default, d, n)
    with_regs = blocks_per_sm(default.threads, default.smem_bytes(d), regs=255)
    ok = (any("shared memory" in r for r in refused) and any("registers" in r for r in refused)
          and all(m["K/V passes"] == -(-n // m["Br"]) for m in model)
          and dm["blocks/SM"] == 2 and with_regs["blocks"] == 2
          and with_regs["limited by"] == "registers")
    checks.append(Check("38", TOPIC, "formula", None, ok,
                        f"d={d}: {len(refused)} of {len(configs)} tiles refused (shared memory; "
                        f"registers); default {dm['config']}: {dm['smem KB']:.0f} KB smem → 2 "
                        "blocks/SM, and 255 registers also → 2"))
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\nthe model at d = {d}, N = {n} (H200: 65536 registers, 228 KB shared memory, "
              "2048 threads, 32 blocks per SM; registers unknown until compiled on a GPU)")
        print(sweeps.table(model, MODEL_COLUMNS))
        print("small tiles read K and V from HBM N/Br times and do few FMAs per shared load; "
              "big ones need more shared memory and registers per block, so fewer blocks fit")

    # Every configuration that runs gives the oracle's answer (GPU: the real shape, timed).
    shape = (b, h, n) if not flashlesson.SIMULATOR else (1, 1, 40)
    with_time = not flashlesson.SIMULATOR
    rows = sweeps.sweep_tiles(rng, shape, d, runnable, log=lambda line: None, timing=with_time)
    for cfg, row in zip(runnable, rows):
        err = row.get("rel err")
        checks.append(Check("38", TOPIC, f"flash {row['config']}", err,
                            err is not None and err <= sweeps.REL_TOL,
                            row.get("error", f"B={shape[0]} H={shape[1]} N={shape[2]} d={d}: "
                                    "max|ΔO| / max|O| vs the float64 oracle")))
    if verbose:
        print(f"\nchecked against the float64 oracle at B={shape[0]} H={shape[1]} N={shape[2]} "
              f"d={d} (random inputs: seed {seed}): largest relative error "
              f"{max(r.get('rel err', float('nan')) for r in rows):.1e}")
    if flashlesson.SIMULATOR:
        if verbose:
            print("measured columns (time, registers, local memory = spills, occupancy with real "
                  "registers): skipped — they need a GPU; there: python3 scripts/bench_sweeps.py "
                  "tiles")
        return checks

    measured = [r for r in rows if "TFLOP/s" in r]
    best = max(measured, key=lambda r: r["TFLOP/s"])
    mine = next(r for r, c in zip(rows, runnable) if c == default)
    checks.append(Check.measured("38", TOPIC, "flash",
                                 f"fastest {best['config']}: {best['TFLOP/s']:.1f} TFLOP/s; the "
                                 f"default {mine['TFLOP/s']:.1f} "
                                 f"({mine['TFLOP/s'] / best['TFLOP/s']:.0%} of it; GPU_CONFIGS "
                                 "comes from this sweep; a shared GPU's timing, not pass/fail)"))
    if verbose:
        dev = flashlesson.device.describe()["device"]
        print(f"\n{dev}, {datetime.date.today()}: B={b} H={h} N={n} d={d} float32, CUDA-event "
              "medians; registers and local memory from Numba")
        print(sweeps.table(rows, sweeps.TILE_COLUMNS))
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
