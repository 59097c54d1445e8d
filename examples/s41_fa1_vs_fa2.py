"""§41 — FlashAttention-2's loop order: Q tiles outside, so O is written once.

The lesson's claim, about two papers (its own §32 pseudocode is already FlashAttention-2's
order; the order this section contrasts with it is FlashAttention-1's, Algorithm 1 of Dao et al.
2022, not the lesson's): FlashAttention-1 loops over K/V tiles outside and Q tiles inside, so
every K/V tile reads Qi, Oi, mi, li from HBM and writes Oi, mi, li back — Tc = ⌈Nk/Bc⌉ round
trips of O, m and l per query row — and it can only run one block per (batch, head), since
different K/V tiles update the same rows. FlashAttention-2 swaps the loops: each block owns a Q
tile, keeps m, l and acc on chip while K/V stream past, writes O once, and has ⌈Nq/Br⌉ × B·H
independent blocks (and it normalizes acc once, at the end, instead of at every step).

What you will see: FA1's order as a lesson-tier kernel (``kernels_numba/lesson/loop_order.py``:
``flash_fa1``, Algorithm 1 line by line, one thread a query row) and then as the fast kernel
(``kernels_numba/attention_fa1.py``), both against the float64 oracle and (on a GPU) timed; both
orders run on the same input in the simulator with their global arrays instrumented
(``flashlesson.traffic.count_attention``), each array's reads and writes beside the models
(``loop_order.fa1_attention_traffic``, ``traffic.flash_attention_traffic``) — equal, exactly —
with FA1's O written Tc + 1 times (zeros, then once per K/V tile) and read Tc times, Q read Tc
times, m and l going back and forth, against FA2's one write of O; the model's bytes at real
sizes (N up to 16384) with the GPU's tiles; both kernels against the float64 oracle. On a GPU:
both timed, plus FA1 with one Q tile per block (FA2's grid, FA1's traffic), which splits the gap
into what the HBM round trips cost and what the lost parallelism costs.

Run: ``python examples/s41_fa1_vs_fa2.py`` (or ``flashlesson section 41``).
"""

import datetime

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson import loop_order
from flashlesson.configs import GPU_CONFIGS, default_config
from flashlesson.sweeps import inputs, timing_rows, timing_table
from flashlesson.tour import Check, attention_check, attention_inputs, attention_tiers, \
    example_rng, in_simulator
from flashlesson.traffic import compare, count_attention, flash_attention_traffic, total_bytes

SECTIONS = (41,)
TOPIC = "FA1 vs FA2 loop order"
# the two tiers' causal cases: causal only in the simulator (keeps the tour short on CPU)
TIER_CASES = (True,) if flashlesson.SIMULATOR else (False, True)


def counted_table(verbose):
    """FA1 and FA2 on one tiny input, counted, beside their models (simulator only: ``main``
    runs it through ``tour.in_simulator``, in a simulator subprocess on a GPU run)."""
    checks = []
    B, H, nq, nk, d = 1, 1, 64, 64, 8
    cfg = default_config(d)
    tc, tr = -(-nk // cfg.Bc), -(-nq // cfg.Br)
    e, r = B * H * nq * d, B * H * nq
    got = {}
    for method, model in (("flash_fa1", loop_order.fa1_attention_traffic(B, H, nq, nk, d)),
                          ("flash", flash_attention_traffic(B, H, nq, nk, d))):
        counter, _ = count_attention(B, H, nq, nk, d, method=method)
        rows = compare(model, counter.arrays)
        got[method] = counter.arrays
        checks.append(Check("41", TOPIC, method, None, rows[-1][-1] == "yes",
                            f"B={B} H={H} N={nq} d={d}: every array's reads and writes, "
                            f"counted = model ({rows[-1][5]} bytes)"))
        if verbose:
            print(f"\n{method}: counted in the simulator (Br = {cfg.Br}, Bc = {cfg.Bc}: "
                  f"Tr = {tr} Q tiles, Tc = {tc} K/V tiles)")
            print(tabulate(rows, headers=["array", "reads (model)", "reads (counted)",
                                          "writes (model)", "writes (counted)", "bytes (model)",
                                          "bytes (counted)", "agree"]))
    f1, f2 = got["flash_fa1"], got["flash"]
    ok = (f1["o"].writes == (tc + 1) * e and f1["o"].reads == tc * e and
          f1["q"].reads == tc * e and f1["m"].writes == (tc + 1) * r and
          f1["l"].reads == (tc + 1) * r and f1["k"].reads == B * H * nk * d and
          f2["o"].writes == e and f2["o"].reads == 0 and f2["q"].reads == e and
          "m" not in f2 and f2["k"].reads == tr * B * H * nk * d)
    checks.append(Check("41", TOPIC, "counter", None, bool(ok),
                        f"Tc = {tc}: FA1 writes O {tc + 1}× (zeros + once per K/V tile), reads "
                        f"O and Q {tc}×, m and l {tc + 1}× each way, K/V once; FA2 writes O "
                        f"once, reads Q once, K/V Tr = {tr}×"))
    return checks


def model_table(verbose):
    """The models at real sizes, with the GPU's tiles (d = 64)."""
    cfg = dict(GPU_CONFIGS)[64]
    rows, ok = [], True
    for n in (1024, 4096, 16384):
        b, h, d = 1, 16, 64
        fa1 = loop_order.fa1_attention_traffic(b, h, n, n, d, False, cfg)
        fa2 = flash_attention_traffic(b, h, n, n, d, False, cfg)
        o_round = (fa1["o"].bytes + fa1["m"].bytes + fa1["l"].bytes + fa1["q"].bytes)
        ratio = total_bytes(fa1) / total_bytes(fa2)
        tc = n // cfg.Bc
        ok &= fa1["o"].writes == (tc + 1) * b * h * n * d and ratio > 1
        rows.append([n, tc, n // cfg.Br, f"{total_bytes(fa1) / 2**20:,.0f}",
                     f"{o_round / 2**20:,.0f}", f"{total_bytes(fa2) / 2**20:,.0f}",
                     f"{ratio:.2f}"])
    if verbose:
        print(f"\nthe models at B=1 H=16 d=64, the GPU's tiles Br = {cfg.Br}, Bc = {cfg.Bc} "
              "(MiB of global traffic, float32):")
        print(tabulate(rows, headers=["N", "Tc", "Tr", "FA1 MiB", "of which Q, O, m, l",
                                      "FA2 MiB", "FA1 / FA2"], disable_numparse=True))
        print("FA1's Q, O, m, l traffic grows as N²·d/Bc (the paper's Θ(N²d²/M) with "
              "Bc ~ M/d); FA2 re-reads K and V instead, N²·d/Br — both quadratic, but FA1's "
              "share is three passes (Q, O read; O written) to FA2's two (K, V), and FA2's "
              "tile of Br = 128 rows is twice Bc = 64.")
    return [Check("41", TOPIC, "model", None, bool(ok),
                  f"N = 1024 … 16384, d = 64: FA1 / FA2 bytes {rows[0][-1]} … {rows[-1][-1]}")]


def main(verbose=True):
    rng, seed = example_rng()
    if verbose:
        print(__doc__.split("\n\n")[1])
    # The two tiers: the lesson kernel (lesson/loop_order.py's flash_fa1: Algorithm 1's
    # lines beside the code) first, then the fast one, against the oracle; the measured gap
    shape = (1, 2, 40, 24, 8) if flashlesson.SIMULATOR else (1, 4, 512, 512, 64)
    q, k, v = attention_inputs(rng, *shape)
    checks = []
    for causal in TIER_CASES:
        if verbose:
            print(f"\nflash_fa1, lesson tier then fast tier{' (causal)' if causal else ''}, "
                  f"B, H, Nq, Nk, d = {shape}:")
        checks += attention_tiers("41", TOPIC, q, k, v, verbose, method="flash_fa1",
                                  causal=causal)
    counted, where = in_simulator(__file__, "counted_table", verbose)
    if verbose:
        print(f"(the counts above: the traffic counter, run in {where})")
    checks += counted + model_table(verbose)

    # (simulator: one head each — eight runs on the CPU; the tiers above run two)
    cases = ([(1, 1, 40, 40, 16), (1, 1, 24, 56, 8)] if flashlesson.SIMULATOR else
             [(2, 8, 1024, 1024, 64), (1, 4, 500, 2000, 128)])
    table = []
    for b, h, nq, nk, d in cases:
        q, k, v = attention_inputs(rng, b, h, nq, nk, d)
        for causal in (False, True):
            for method in ("flash_fa1", "flash"):
                o, lse = flashlesson.attention(q, k, v, causal=causal, method=method,
                                               return_lse=True)
                shape = (f"B={b} H={h} Nq={nq} Nk={nk} d={d}"
                         f"{', causal' if causal else ''}")
                got, _, _ = attention_check("41", TOPIC, method, o, lse, q, k, v,
                                            causal=causal, note=shape)
                checks += got
                table.append([shape, method, f"{got[0].max_err:.1e}", f"{got[1].max_err:.1e}",
                              "yes" if not any(c.failed for c in got) else "NO"])
    if verbose:
        print(f"\nrandom inputs: seed {seed}; both orders vs reference.attention, within the "
              "bounds of flashlesson.tolerance.attention_tol")
        print(tabulate(table, headers=["shape", "method", "max |ΔO|", "max |ΔLSE|",
                                       "within bound"], disable_numparse=True))
    if flashlesson.SIMULATOR:
        if verbose:
            print("\ntiming: skipped in the simulator. On a GPU this example times flash, "
                  "flash_fa1 and FA1 with one Q tile per block at B=2 H=16 N=2048 d=64 "
                  "(scripts/bench_loop_order.py: the issue's sizes).")
        return checks
    return checks + _timed(rng, verbose)


def _timed(rng, verbose):
    """GPU only: FA2 vs FA1 (one block per head) vs FA1 with FA2's grid."""
    from flashlesson.arrays import empty
    from flashlesson.bench import attention_flops, time_gpu_adaptive
    b, h, n, d = 2, 16, 2048, 64
    (q, k, v), _ = inputs(rng, b, h, n, d)
    o, lse = empty(b * h * n * d, np.float32), empty(b * h * n, np.float32)
    cfg = default_config(d, n, b * h)
    flat = [x.reshape(-1) for x in (q, k, v)]

    def fa1(qb):
        return lambda: loop_order.launch_fa1(*flat, o, lse, d=d, n_q=n, n_k=n, heads=h,
                                             bh=b * h, causal=False, scale=d ** -0.5,
                                             config=cfg, q_blocks=qb)

    ms = {"flash": time_gpu_adaptive(lambda: flashlesson.attention(q, k, v)),
          "flash_fa1 (1 block per head)": time_gpu_adaptive(fa1(1)),
          "flash_fa1 (1 Q tile per block)": time_gpu_adaptive(fa1(-(-n // cfg.Br)))}
    flops = attention_flops(b, h, n, n, d, False)
    rows = timing_rows(ms, flops)
    if verbose:
        dev = flashlesson.device.describe()["device"]
        print(f"\n{dev}, {datetime.date.today()}: B={b} H={h} N={n} d={d}, fp32")
        print(timing_table(rows))
    ratio = ms["flash_fa1 (1 block per head)"] / ms["flash"]
    note = ("measured (a shared GPU's timings: not pass/fail): " +
            ", ".join(f"{r[0]} {r[1]} ms" for r in rows) +
            f"; FA1 (1 block per head) / FA2 time {ratio:.2f}")
    return [Check.measured("41", TOPIC, "flash", note)]


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
