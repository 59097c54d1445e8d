"""The sweeps of §38–40: tile sizes, head dimensions, and the crossover at small N.

Shared by the examples (``examples/s38_tile_size.py``, ``s39_head_dim.py``, ``s40_crossover.py``),
``scripts/bench_sweeps.py`` (one GPU run of all three) and ``scripts/tune_attention.py``.

Every sweep checks before it times: each result against the float64 oracle
(``reference.attention``) on head (0, 0), relative error max|Δ| / max|O| ≤ ``REL_TOL``. On a GPU
a time is a CUDA-event median (``bench.time_gpu_adaptive``: GPU time only) with Python's cost
of one call beside it (``host ms``); registers and local memory (spills) are Numba's queries of
the compiled kernel (``launch.kernel_resources``). In the simulator the same code runs on tiny
shapes: the checks mean what they say, the "ms" is the simulator's wall time (it measures
Python, not a GPU) and there are no registers to ask for.

The models beside the measurements need no GPU: shared memory from the kernel's tile layout
(``FlashConfig.smem_bytes``), values held per thread in registers, K/V passes over HBM
(``traffic.flash_attention_traffic``), blocks per SM (``occupancy.blocks_per_sm``, H200 limits).
"""

import contextlib
import datetime
import math
import time

import numpy as np

from .reference.attention import attention_flops

from . import device
from .attention_methods import attention
from .configs import GPU_CONFIGS, SMALL_GRID_CONFIGS, FlashConfig
from .occupancy import blocks_per_sm

REL_TOL = 1e-4
H200_SMS = 132
H200_GEMM_TILES = (64, 64, 16, 16)          # configs.GEMM_TILES on a GPU

# §38: one head dimension, one shape, configurations from small to large tiles — the last two
# are refused by FlashConfig.check (too much shared memory; too many values per thread).
# (Br, Bc, TR, TC, KU, GROUP); the first eight are candidates of scripts/tune_attention.py.
TILE_D = 64
TILE_SHAPE = (2, 16, 4096)                  # B, H, N (B2 H16 N4096 d64: a main benchmark shape)
TILE_CONFIGS = tuple(FlashConfig(*c) for c in (
    (32, 32, 8, 4, 1, 4), (32, 64, 8, 8, 1, 4), (64, 32, 16, 4, 1, 4), (64, 64, 8, 8, 1, 4),
    (64, 64, 16, 8, 1, 4), (128, 32, 16, 8, 1, 4), (128, 64, 16, 8, 1, 4),
    (128, 64, 16, 8, 2, 2),
    (256, 128, 32, 8, 1, 4), (128, 128, 16, 8, 1, 4)))

# §39: the head dimensions the lesson names, at one shape.
HEAD_DIMS = (64, 80, 96, 128, 256)
HEAD_DIM_SHAPE = (1, 16, 4096)              # B, H, N

# §40: small N, one head and sixteen, d = 64.
CROSSOVER_NS = (16, 32, 64, 128, 256, 512, 1024)
CROSSOVER_HEADS = (1, 16)
CROSSOVER_D = 64

# The simulator's shapes (tiny; N not a multiple of any tile, so partial tiles are exercised).
# (--tiny in scripts/bench_sweeps.py: the plumbing, in seconds.)
TINY = {"tile shape": (1, 1, 40), "tile configs": TILE_CONFIGS[:1] + TILE_CONFIGS[7:9],
        "head dims": (64, 96), "head dim shape": (1, 1, 37), "crossover ns": (16, 24),
        "crossover heads": (1,)}


# ---------------------------------------------------------------------------------------------
# Models (no GPU needed)
# ---------------------------------------------------------------------------------------------
def h200_config(d, nq=None, bh=None, sms=H200_SMS):
    """The configuration ``configs.default_config`` picks on the H200 (GPU_CONFIGS,
    or SMALL_GRID_CONFIGS when the grid leaves three quarters of the SMs idle) — computable in
    the simulator, where default_config gives the simulator's tiles. On a GPU the bench checks
    the two agree."""
    cfg = next(c for limit, c in GPU_CONFIGS if d <= limit)
    if nq is not None and bh is not None and 4 * -(-nq // cfg.Br) * bh <= sms:
        cfg = next(c for limit, c in SMALL_GRID_CONFIGS if d <= limit)
    return cfg


def refusal(cfg, d):
    """FlashConfig.check's reason for refusing ``cfg`` at head dimension d, or None."""
    try:
        cfg.check(d)
    except ValueError as exc:
        return str(exc).split(": ", 1)[-1]
    return None


def config_model(cfg, d, n=None, regs=None, smem_static=0):
    """What the tile sizes imply, before any run: threads, D (d padded to 4·TC), dynamic shared
    memory, the values each thread keeps in registers (its RM×CN scores and RM×DN outputs: a
    lower bound on its registers), FMAs per 16-byte shared load in QKᵀ (4·RM·CN/(RM + CN): the
    register tile's reuse), the times K and V are read from HBM (once per Q tile: N/Br, given n)
    and blocks per SM (from threads and shared memory, and registers when ``regs`` is given)."""
    D = cfg.head_dim(d)
    rm, cn, dn = cfg.Br // cfg.TR, cfg.Bc // cfg.TC, D // cfg.TC
    smem = cfg.smem_bytes(d)
    occ = blocks_per_sm(cfg.threads, smem + smem_static, regs)
    row = {"config": f"Br={cfg.Br} Bc={cfg.Bc} TR={cfg.TR} TC={cfg.TC} KU={cfg.KU} "
                     f"G={cfg.GROUP}",
           "Br": cfg.Br, "Bc": cfg.Bc, "TR": cfg.TR, "TC": cfg.TC, "KU": cfg.KU,
           "GROUP": cfg.GROUP, "threads": cfg.threads, "D": D, "smem KB": smem / 1024,
           "values/thread": rm * (cn + dn), "FMA/load": 4 * rm * cn / (rm + cn),
           "blocks/SM": occ["blocks"], "limited by": occ["limited by"],
           "occupancy": occ["occupancy"]}
    if n is not None:
        row["K/V passes"] = -(-n // cfg.Br)
    return row


# ---------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------
def inputs(rng, b, h, n, d):
    """q, k, v float32 [b, h, n, d] on the device, and head (0, 0) on the host (float64)."""
    from numba import cuda
    host = [rng.standard_normal((b, h, n, d)).astype(np.float32) for _ in range(3)]
    return [cuda.to_device(a) for a in host], [a[:1, :1].astype(np.float64) for a in host]


def oracle(head):
    from .reference import attention as ref_attention
    return ref_attention(*head)[0][0, 0]                   # (O, LSE): O of head (0, 0)


def rel_err(o, want):
    """max |o[0, 0] − want| / max |want| for a device array o (NaN anywhere in o[0, 0], such
    as a poisoned element no thread wrote, gives NaN)."""
    got = o[0, 0].copy_to_host().astype(np.float64)
    if np.isnan(got).any():
        return math.nan
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


@contextlib.contextmanager
def poisoned():
    """While checking: result arrays allocated full of NaN (``flashlesson.arrays.POISON``), so
    an element the kernel does not write fails the check instead of passing on old memory."""
    from . import arrays
    saved, arrays.POISON = arrays.POISON, True
    try:
        yield
    finally:
        arrays.POISON = saved


def timed(fn):
    """(ms per call, Python's ms per call). GPU: CUDA-event median of GPU time, and the host's
    time to issue one call (``time_gpu.host_ms``). Simulator: one call's wall time, twice."""
    if device.SIMULATOR:
        t0 = time.perf_counter()
        fn()
        ms = 1e3 * (time.perf_counter() - t0)
        return ms, ms
    from .bench import time_gpu, time_gpu_adaptive
    ms = time_gpu_adaptive(fn)
    return ms, time_gpu.host_ms


def resources(cfg, d):
    """(registers, local bytes, static shared bytes) of the forward kernel compiled for cfg
    and d (non-causal, 16-byte loads when d % 4 == 0: what ``measure_config`` ran, the same
    dispatcher as ``attention``'s); (None, None, 0) in the simulator."""
    from .attention_methods import forward_kernel
    from .launch import kernel_resources
    res = kernel_resources(forward_kernel(cfg, d, False, d % 4 == 0))
    if not res:
        return None, None, 0
    return res[0]["registers"], res[0]["local bytes"], res[0]["static shared bytes"]


def measure_config(cfg, d, q, k, v, want, flops, timing=True):
    """Check one configuration (relative error on head (0, 0)), then (``timing``) time it;
    with its registers, spills and occupancy. Returns the row dict (``error`` set if it
    failed)."""
    row = {"d": d}
    t0 = time.perf_counter()
    try:
        with poisoned():
            o = attention(q, k, v, config=cfg)
        row["rel err"] = rel_err(o, want)                  # first call: compile, then check
    except Exception as exc:  # noqa: BLE001 - a config that fails is a row that says why
        row.update(config_model(cfg, d), error=f"{type(exc).__name__}: {str(exc)[:160]}")
        return row
    row["first call s"] = time.perf_counter() - t0         # compile + run + check
    regs, lmem, static = resources(cfg, d)
    row.update(config_model(cfg, d, q.shape[2], regs, static))
    row["regs"], row["local B"] = regs, lmem
    if timing:
        row["ms"], row["host ms"] = timed(lambda: attention(q, k, v, config=cfg))
        row["TFLOP/s"] = flops / row["ms"] / 1e9
    return row


def _attention_flops(b, h, n, d):
    return attention_flops(b, h, n, n, d, False)            # §16: 4·B·H·N²·d


def sweep_tiles(rng, shape=TILE_SHAPE, d=TILE_D, configs=TILE_CONFIGS, log=print, timing=True):
    """§38: every configuration at one shape: refused ones with the reason, the others
    checked, timed, with registers, spills, shared memory and occupancy."""
    b, h, n = shape[:3]
    (q, k, v), head = inputs(rng, b, h, n, d)
    want = oracle(head)
    rows = []
    for cfg in configs:
        why = refusal(cfg, d)
        if why:
            row = {"d": d, **config_model(cfg, d, n), "refused": why}
        else:
            row = measure_config(cfg, d, q, k, v, want, _attention_flops(b, h, n, d), timing)
        rows.append(row)
        log(log_line("tile", row))
    return rows


def sweep_head_dims(rng, dims=HEAD_DIMS, shape=HEAD_DIM_SHAPE, log=print, timing=True):
    """§39: for each d, the H200's configuration for it (GPU_CONFIGS) checked and timed, with
    torch SDPA's math and efficient backends timed on the same tensors (GPU, torch
    installed)."""
    b, h, n = shape[:3]
    torch = _torch() if timing else None
    rows = []
    for d in dims:
        (q, k, v), head = inputs(rng, b, h, n, d)
        flops = _attention_flops(b, h, n, d)
        row = measure_config(h200_config(d), d, q, k, v, oracle(head), flops, timing)
        if torch is not None and "error" not in row:
            for name, (ms, _) in _sdpa_times(torch, q, k, v).items():
                row[f"sdpa {name} TFLOP/s"] = flops / ms / 1e9 if ms else None
                if ms:
                    row[f"flash / {name}"] = row["TFLOP/s"] / row[f"sdpa {name} TFLOP/s"]
        rows.append(row)
        log(log_line("head dim", row))
        del q, k, v
    return rows


def sweep_crossover(rng, ns=CROSSOVER_NS, heads=CROSSOVER_HEADS, d=CROSSOVER_D, log=print,
                    timing=True):
    """§40: naive and flash (and torch SDPA's backends, GPU) at small N: each checked, then
    (``timing``) its GPU time and Python's time per call. Flash runs the H200's choice of
    tiles for the shape (``h200_config``; on a GPU, what ``attention`` picks itself)."""
    from .configs import default_config
    torch = _torch() if timing else None
    rows = []
    for h in heads:
        for n in ns:
            cfg = h200_config(d, n, h)
            if not device.SIMULATOR and default_config(d, n, h) != cfg:
                raise RuntimeError(f"h200_config({d}, {n}, {h}) = {cfg} but this device's "
                                   f"default_config is {default_config(d, n, h)}: the two "
                                   "rules have drifted apart")
            (q, k, v), head = inputs(rng, 1, h, n, d)
            want = oracle(head)
            row = {"B": 1, "H": h, "N": n, "d": d, "flash tiles": f"{cfg.Br}×{cfg.Bc}"}
            calls = {"flash": lambda: attention(q, k, v, config=cfg),
                     "naive": lambda: attention(q, k, v, method="naive")}
            for method, call in calls.items():
                with poisoned():
                    o = call()
                row[f"{method} rel err"] = rel_err(o, want)
                if timing:
                    row[f"{method} ms"], row[f"{method} host ms"] = timed(call)
            if torch is not None:
                for name, (ms, host) in _sdpa_times(torch, q, k, v).items():
                    row[f"sdpa {name} ms"], row[f"sdpa {name} host ms"] = ms, host
            for m in ("flash", "naive", "sdpa math", "sdpa efficient"):
                if row.get(f"{m} ms") is not None:      # calls in a loop: the slower side sets
                    row[f"{m} call ms"] = max(row[f"{m} ms"], row[f"{m} host ms"])  # the pace
            rows.append(row)
            log(log_line("crossover", row))
    return rows


def _torch():
    if device.SIMULATOR:
        return None
    from .bench import cuda_torch
    return cuda_torch()


def _sdpa_times(torch, q, k, v):
    """{backend: (ms, host ms)} of torch SDPA per fp32 backend on the same tensors; (None,
    None) for a backend that refuses (e.g. out of memory)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    tq, tk, tv = (torch.as_tensor(a, device="cuda") for a in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    out = {}
    for name, backend in (("math", SDPBackend.MATH),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                out[name] = timed(lambda: sdpa(tq, tk, tv))
        except RuntimeError:
            out[name] = (None, None)
        torch.cuda.empty_cache()
    return out


def log_line(what, row):
    """One progress line for a row (the tile fields are in its "config" already)."""
    return what + ": " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                  for k, v in row.items() if k not in _TILE_FIELDS)


_TILE_FIELDS = ("Br", "Bc", "TR", "TC", "KU", "GROUP")


# ---------------------------------------------------------------------------------------------
# Reading the crossover
# ---------------------------------------------------------------------------------------------
def crossover(rows, fast, slow, key="ms"):
    """Where ``fast`` (a method key: "flash") stops beating ``slow`` ("naive", "sdpa
    efficient") as N shrinks, per head count, from the measured ``"<method> <key>"`` columns.

    Returns {H: dict(wins_from=N or None, wins=[N…], loses=[N…])}: wins_from is the smallest N
    from which ``fast`` is faster at that N and every larger N measured (None if it is not
    faster at the largest N); wins and loses list every N by its own comparison.
    """
    out = {}
    for h in sorted({r["H"] for r in rows}):
        pts = sorted((r["N"], r[f"{fast} {key}"], r[f"{slow} {key}"]) for r in rows
                     if r["H"] == h and r.get(f"{fast} {key}") and r.get(f"{slow} {key}"))
        wins = [n for n, a, b in pts if a < b]
        loses = [n for n, a, b in pts if a >= b]
        wins_from = None
        for n, a, b in reversed(pts):
            if a >= b:
                break
            wins_from = n
        out[h] = {"wins_from": wins_from, "wins": wins, "loses": loses}
    return out


def describe_crossover(result, fast, slow):
    """One sentence per head count for ``crossover``'s result."""
    lines = []
    for h, c in result.items():
        if not c["wins"] and not c["loses"]:
            lines.append(f"H={h}: no {fast} vs {slow} measurement")
        elif c["wins_from"] is None:
            lines.append(f"H={h}: {fast} is not faster than {slow} at the largest N measured")
        elif not c["loses"]:
            lines.append(f"H={h}: {fast} is faster than {slow} at every N measured "
                         f"(from N = {c['wins_from']}): no crossover in range")
        else:
            lines.append(f"H={h}: {fast} is faster than {slow} from N = {c['wins_from']} up; "
                         f"slower or equal at N = {', '.join(map(str, c['loses']))}")
    return lines


# ---------------------------------------------------------------------------------------------
# §40's launch/overhead model
# ---------------------------------------------------------------------------------------------
LAUNCH_US = 16.0      # Python's cost of one Numba launch, H200 machine (kernels_numba/timing.py)
COPY_GBS = 4214.0     # device-to-device copy, H200 (bytes read + written; docs/results.md, "Softmax")
FLASH_TFLOPS = 28.9   # the d = 64 tiles at B1 H16 N4096 on the H200 (configs.py)


def overhead_model(n, b=1, h=1, d=CROSSOVER_D, sms=H200_SMS):
    """§40's terms for one call at small N, from formulas and three H200 anchors (above):

    - launches: flash 1, naive 3 (QKᵀ, softmax, PV), each ``LAUNCH_US`` of Python;
    - flash's grid: ⌈N/Br⌉·B·H blocks (the tiles ``h200_config`` picks) against the SMs, and
      the share of its tile work that is real: N² of ⌈N/Br⌉·Br × ⌈N/Bc⌉·Bc scores (the rest is
      padding past N, computed and masked);
    - flash work: 4·B·H·N²·d FLOPs at ``FLASH_TFLOPS`` × SMs busy × useful share;
    - HBM: each method's bytes (``traffic``: naive moves S and P) at ``COPY_GBS``.
    """
    from . import traffic
    cfg = h200_config(d, n, b * h)
    bh = b * h
    flash_blocks = -(-n // cfg.Br) * bh
    useful = n * n / (-(-n // cfg.Br) * cfg.Br * -(-n // cfg.Bc) * cfg.Bc)
    busy = min(1.0, flash_blocks / sms)
    flops = _attention_flops(b, h, n, d)
    naive_bytes = traffic.total_bytes(traffic.naive_attention_traffic(
        b, h, n, n, d, return_lse=False, tiles=H200_GEMM_TILES))
    flash_bytes = traffic.total_bytes(traffic.flash_attention_traffic(b, h, n, n, d,
                                                                      config=cfg))
    return {"N": n, "H": h, "flash tiles": f"{cfg.Br}×{cfg.Bc}", "flash blocks": flash_blocks,
            "SMs busy": busy, "useful share": useful, "FLOPs": flops,
            "flash work µs": flops / (FLASH_TFLOPS * 1e6 * busy * useful),
            "flash HBM µs": flash_bytes / (COPY_GBS * 1e3),
            "naive HBM µs": naive_bytes / (COPY_GBS * 1e3),
            "flash launch µs": LAUNCH_US, "naive launch µs": 3 * LAUNCH_US}


# ---------------------------------------------------------------------------------------------
# Tables (the examples and scripts/bench_sweeps.py print the same ones)
# ---------------------------------------------------------------------------------------------
TILE_COLUMNS = ("config", "threads", "smem KB", "values/thread", "FMA/load", "K/V passes",
                "regs", "local B", "blocks/SM", "limited by", "occupancy", "TFLOP/s", "ms",
                "rel err", "first call s", "refused")
HEAD_DIM_COLUMNS = ("d", "D", "config", "threads", "smem KB", "values/thread", "regs",
                    "local B", "blocks/SM", "limited by", "TFLOP/s", "sdpa math TFLOP/s",
                    "sdpa efficient TFLOP/s", "flash / math", "flash / efficient", "rel err")
CROSSOVER_COLUMNS = ("H", "N", "flash tiles", "flash µs", "naive µs", "sdpa math µs",
                     "sdpa efficient µs", "flash host µs", "naive host µs",
                     "sdpa efficient host µs", "flash rel err", "naive rel err")


def table(rows, columns):
    """A text table of ``rows`` (dicts); a "<x> µs" column a row lacks shows its "<x> ms"
    value × 1000; columns no row has are left out."""
    from tabulate import tabulate

    def get(row, col):
        if col.endswith(" µs") and col not in row:
            ms = row.get(col[:-3] + " ms")
            return None if ms is None else 1e3 * ms
        return row.get(col)
    cols = [c for c in columns if any(get(r, c) is not None for r in rows)]
    return tabulate([["" if get(r, c) is None else get(r, c) for c in cols] for r in rows],
                    headers=cols, floatfmt=".3g")


def timing_rows(ms, flops):
    """[name, ms, TFLOP/s, time / flash] per timed run, as printed; ms: name → milliseconds,
    "flash" among them; flops: the work of one run."""
    return [[name, f"{t:.3f}", f"{flops / t / 1e9:.1f}", f"{t / ms['flash']:.2f}"]
            for name, t in ms.items()]


def timing_table(rows):
    """``timing_rows`` as a text table."""
    from tabulate import tabulate
    return tabulate(rows, headers=["kernel", "ms", "TFLOP/s", "time / flash"],
                    disable_numparse=True)


def stamp():
    """Device, versions and date for a JSON record."""
    facts = device.describe()
    return {"device": facts.get("device"), "date": datetime.date.today().isoformat(),
            **{k: facts.get(k) for k in ("numba", "numba-cuda", "torch", "driver")}}


__all__ = ["CROSSOVER_COLUMNS", "CROSSOVER_D", "CROSSOVER_HEADS", "CROSSOVER_NS",
           "HEAD_DIMS", "HEAD_DIM_COLUMNS", "HEAD_DIM_SHAPE", "REL_TOL", "TILE_COLUMNS",
           "TILE_CONFIGS", "TILE_D", "TILE_SHAPE", "TINY", "config_model", "crossover",
           "describe_crossover", "h200_config", "inputs", "log_line", "measure_config",
           "oracle", "overhead_model", "poisoned", "refusal", "rel_err", "resources", "stamp",
           "sweep_crossover", "sweep_head_dims", "sweep_tiles", "table", "timed", "timing_rows",
           "timing_table"]
