"""§38–40 measured on the GPU in one run: tile sizes, head dimensions, the crossover at small N.

    python3 scripts/bench_sweeps.py [tiles] [headdim] [crossover] [--out DIR] [--tiny]

- tiles (§38): the forward kernel's FlashConfigs of ``sweeps.TILE_CONFIGS`` at B2 H16 N4096
  d64 — each checked against the float64 oracle, then timed; registers and local memory
  (spills) from Numba's queries; shared memory and blocks per SM (H200 limits) beside them.
  The refused configurations (too much shared memory, too many values per thread) are listed
  with FlashConfig.check's reason.
- headdim (§39): d = 64, 80, 96, 128, 256 at B1 H16 N4096, the H200 tiles for each, TFLOP/s
  next to torch SDPA's math and efficient backends on the same tensors.
- crossover (§40): naive vs flash vs torch SDPA at N = 16 … 1024, B1 H1 and B1 H16 d64: GPU
  time (CUDA events) and Python's time per call; where flash stops beating naive, read from
  the measurements.

Tables on stdout; JSON per sweep as ``DIR/bench_sweeps_<what>.json`` (DIR: --out, else $OUT,
else the current folder). Exit status 1 if any result failed its check against the oracle.
About 2–3 minutes on the H200, most of it compiling 12 kernel specializations.
``--tiny`` runs the same code on tiny shapes (a few configurations) in the simulator: the
plumbing, not a measurement.
"""

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

WHATS = ("tiles", "headdim", "crossover")


def run(what, tiny, rng, log):
    """(rows, shape description) of one sweep."""
    from flashlesson import sweeps as S
    if what == "tiles":
        shape = S.TINY["tile shape"] if tiny else S.TILE_SHAPE
        configs = S.TINY["tile configs"] if tiny else S.TILE_CONFIGS
        return S.sweep_tiles(rng, shape, S.TILE_D, configs, log), \
            {"B": shape[0], "H": shape[1], "N": shape[2], "d": S.TILE_D}
    if what == "headdim":
        shape = S.TINY["head dim shape"] if tiny else S.HEAD_DIM_SHAPE
        dims = S.TINY["head dims"] if tiny else S.HEAD_DIMS
        return S.sweep_head_dims(rng, dims, shape, log), \
            {"B": shape[0], "H": shape[1], "N": shape[2], "d": list(dims)}
    ns = S.TINY["crossover ns"] if tiny else S.CROSSOVER_NS
    heads = S.TINY["crossover heads"] if tiny else S.CROSSOVER_HEADS
    return S.sweep_crossover(rng, ns, heads, S.CROSSOVER_D, log), \
        {"B": 1, "H": list(heads), "N": list(ns), "d": S.CROSSOVER_D}


def crossover_summary(rows):
    """The crossovers read from the measured rows: flash vs naive and vs torch's efficient
    backend, by GPU time and by time per call in a loop (the slower of GPU and Python)."""
    from flashlesson import sweeps as S
    out, lines = {}, []
    for slow in ("naive", "sdpa efficient", "sdpa math"):
        for key in ("ms", "call ms"):
            res = S.crossover(rows, "flash", slow, key)
            if not any(c["wins"] or c["loses"] for c in res.values()):
                continue
            name = f"flash vs {slow}, {'GPU time' if key == 'ms' else 'time per call'}"
            out[name] = res
            lines += [f"{name}: {line}" for line in S.describe_crossover(res, "flash", slow)]
    return out, lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", nargs="*", help=f"any of {', '.join(WHATS)} (default: all three)")
    p.add_argument("--out", help="folder for the JSON files (default: $OUT, else .)")
    p.add_argument("--tiny", action="store_true",
                   help="tiny shapes, a few configurations: runs in the simulator")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for what in args.what:
        if what not in WHATS:
            p.error(f"what: expected any of {', '.join(WHATS)}; got {what!r}")
    import numpy as np

    import flashlesson
    from flashlesson import sweeps as S
    if flashlesson.SIMULATOR and not args.tiny:
        print("bench_sweeps: the measurements need a GPU (this process runs Numba's CUDA "
              "simulator); --tiny runs the plumbing on tiny shapes", file=sys.stderr)
        return 2
    out = Path(args.out or os.environ.get("OUT") or ".")
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    stamp = S.stamp()
    print(f"{stamp['device']}, {stamp['date']}, numba-cuda {stamp['numba-cuda']}, torch "
          f"{stamp['torch']}" + (" — TINY: simulator plumbing, not measurements" if args.tiny
                                 else ""), flush=True)
    t_all = time.perf_counter()
    bad, tables = [], []
    for what in args.what or WHATS:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*Grid size \d+ will likely result in "
                                    "GPU under-utilization")
            rows, shape = run(what, args.tiny, rng,
                              lambda line: print(line[:400], flush=True))
        record = {**stamp, "tiny": args.tiny, "sweep": what, "shape": shape, "rows": rows,
                  "wall s": time.perf_counter() - t0}
        columns = {"tiles": S.TILE_COLUMNS, "headdim": S.HEAD_DIM_COLUMNS,
                   "crossover": S.CROSSOVER_COLUMNS}[what]
        text = S.table(rows, columns)
        if what == "crossover":
            record["crossover"], lines = crossover_summary(rows)
            text += "\n" + "\n".join(lines)
        tables.append(f"\n{what} {shape} ({record['wall s']:.0f} s)\n{text}")
        bad += [(what, r) for r in rows if "error" in r or not all(
            r[k] is not None and r[k] <= S.REL_TOL      # NaN and None fail
            for k in r if k.endswith("rel err"))]
        with open(out / f"bench_sweeps_{what}.json", "w") as f:
            json.dump(record, f, indent=1, default=str)
    print("\n".join(tables))
    print(f"\ntotal {time.perf_counter() - t_all:.0f} s; JSON under {out}/")
    for what, r in bad:
        print(f"FAILED check ({what}): {r.get('config', '')} {r.get('error', '')} "
              f"{ {k: v for k, v in r.items() if k.endswith('rel err')} }", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
