"""§23–25 — FlashAttention's data flow: Q tiles stay, K/V tiles stream, only O goes out.

The lesson's claims. §23: cut Q into tiles of Br×d and K, V into tiles of Bc×d, small enough
for shared memory and registers; on chip, compute a score tile Qi Kjᵀ, its softmax statistics,
multiply by Vj and update the output accumulator — no score or probability tile goes to HBM.
§24: per Q tile: load Qi; for every K/V tile, load Kj, Vj, compute S = Qi Kjᵀ, update each
row's m, l and acc; normalize once at the end; write only O. §25: against naive attention
(§14) this removes the full write and read of S and the full write and read of P.

What you will see: the flash kernel's tile sizes for this head dimension (``default_config``)
and its shared memory per block, next to the size of one head's S; the loop of §24 traced by
the NumPy pseudocode ``reference.flash_attention_tiled`` with the kernel's Br and Bc — for
each Q tile, which K/V tiles stream through and how one row's (m, l) moves — and the kernel
against that pseudocode and the oracle; then the HBM bytes of both data flows, from
``reference.naive_attention_bytes`` and ``reference.flash_attention_bytes`` in float32
(4 bytes per element), with the K/V traffic recounted from the trace, and the difference
between the two shown to be exactly the four N×N transfers of S and P.

Run: ``python examples/s23_s24_s25_flash_data_flow.py`` (or
``flashlesson section 23``).
"""

from tabulate import tabulate

import flashlesson
from flashlesson.configs import GPU_CONFIGS, default_config
from flashlesson.tolerance import attention_tol
from flashlesson.tour import Check, attention_inputs, attention_tiers, check_close, example_rng
from flashlesson.reference import (attention, flash_attention_bytes, flash_attention_tiled,
                       naive_attention_bytes)

SECTIONS = (23, 24, 25)
TOPIC = "flash data flow"
FP32 = 4
KiB, MiB = 2 ** 10, 2 ** 20


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    b, h, nq, nk, d = (1, 2, 36, 44, 16) if flashlesson.SIMULATOR else (1, 8, 2000, 2048, 64)
    cfg = default_config(d)
    br, bc = cfg.Br, cfg.Bc
    q, k, v = attention_inputs(rng, b, h, nq, nk, d)
    q *= 1.5
    shape = f"B={b} H={h} Nq={nq} Nk={nk} d={d}"
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\nrandom inputs: seed {seed}; {shape}")
        smem = cfg.smem_bytes(d)
        print(f"\n§23: the kernel's tiles for d = {d}: Br = {br} query rows × Bc = {bc} keys, "
              f"{cfg.threads} threads per block. Shared memory per block: Qi, Kj (then Vj in "
              f"the same place) and P, {smem:,} B = {smem / KiB:.1f} KiB; the Br×Bc score tile "
              "and each row's m, l, acc live in registers. For comparison one head's S at "
              f"N = 4096 in float32: {4096 * 4096 * FP32 / MiB:.0f} MiB.")

    # The two tiers: the lesson kernel (kernels_numba/lesson/attention.py: one thread a
    # query row, Kj and Vj in shared memory) first, then the fast one, against the oracle
    if verbose:
        print("\nlesson tier, then fast tier:")
    checks += attention_tiers("23–24", TOPIC, q, k, v, verbose)

    # §24: the loop, traced by the pseudocode with the kernel's own tiles.
    trace, stats = [], {}
    tiled_o, tiled_lse = flash_attention_tiled(q, k, v, br, bc, trace=trace, stats=stats)
    want_o, want_lse = attention(q, k, v)
    if verbose:
        print(f"\n§24: per Q tile, the K/V tiles that stream through (pseudocode, Br={br}, "
              f"Bc={bc}), and the running (m, l) of the tile's first row, head 0:")
        table = []
        nq_t, nk_t = stats["q_tiles"], stats["kv_tiles"]
        for t in trace:
            r0, r1 = t["rows"]
            c0, c1 = t["cols"]
            if 1 < t["i"] < nq_t - 1:               # long runs (GPU sizes): Q tiles 0, 1, last
                continue
            if 2 < t["j"] < nk_t - 2:               # … and K/V tiles 0–2 and the last two
                if t["j"] == 3:
                    table.append(["", f"… K/V tiles 3–{nk_t - 3} …", "", ""])
                continue
            table.append([f"Q{t['i']}: rows {r0}–{r1 - 1}" if t["j"] == 0 else "",
                          f"K{t['j']}, V{t['j']}: keys {c0}–{c1 - 1}",
                          f"{t['m'][0, 0, 0]:.4f}", f"{t['l'][0, 0, 0]:.4f}"])
            if c1 == nk:
                table.append(["", f"O rows {r0}–{r1 - 1} = acc / l → HBM", "", ""])
            if c1 == nk and t["i"] == 1 and nq_t > 3:
                table.append([f"… Q tiles 2–{nq_t - 2} …", "", "", ""])
        print(tabulate(table, headers=["Q tile (stays on chip)", "streamed / written",
                                       "m (row r0)", "l (row r0)"], disable_numparse=True))
    visits = stats["computed"]
    checks.append(Check("23–24", TOPIC, "numpy", None,
                        visits == stats["q_tiles"] * stats["kv_tiles"] == len(trace),
                        f"{shape}: {stats['q_tiles']} Q tiles × {stats['kv_tiles']} K/V tiles "
                        f"= {visits} tile steps, every Q tile sees every K/V tile once"))
    atol_o = attention_tol(q, k, v).o
    checks.append(check_close("24", TOPIC, "numpy", tiled_o, want_o,
                              f"{shape}: the tiled pseudocode = oracle", rtol=1e-12, atol=1e-14))
    o, lse = flashlesson.attention(q, k, v, method="flash", return_lse=True)
    checks.append(check_close("23–24", TOPIC, "flash", o, want_o, f"{shape}: O", atol=atol_o))
    checks.append(check_close("23–24", TOPIC, "flash", lse, want_lse, f"{shape}: LSE"))
    checks.append(check_close("23–24", TOPIC, "flash", o, tiled_o,
                              f"{shape}: kernel = pseudocode, same Br, Bc", atol=atol_o))

    # §25: bytes of both data flows, float32.
    naive = naive_attention_bytes(b, h, nq, nk, d, dtype_bytes=FP32)
    flash = flash_attention_bytes(b, h, nq, nk, d, dtype_bytes=FP32, Br=br)
    once = flash_attention_bytes(b, h, nq, nk, d, dtype_bytes=FP32, lse_bytes=0)
    # K and V bytes recounted from the trace: every computed tile loads Bc keys of K and of V
    kv_traced = sum(2 * (t["cols"][1] - t["cols"][0]) * d for t in trace) * b * h * FP32
    removed = naive["total"] - once["total"]
    ok = kv_traced == flash["read_K"] + flash["read_V"] and \
        removed == 4 * b * h * nq * nk * FP32 == sum(
            naive[t] for t in ("write_S", "read_S", "write_P", "read_P"))
    checks.append(Check("25", TOPIC, "formula", None, bool(ok),
                        f"{shape}: K/V bytes from the trace = model ({kv_traced:,} B); naive − "
                        f"flash = S and P written and read = 4·B·H·Nq·Nk·4 = {removed:,} B"))
    if verbose:
        print(f"\n§25: HBM bytes of one forward pass, {shape}, float32 (flash: K and V read "
              f"once per Q tile, {stats['q_tiles']} times, or once: the compulsory traffic)")
        terms = ["read_Q", "read_K", "read_V", "write_S", "read_S", "write_P", "read_P",
                 "write_O", "write_LSE", "total"]
        print(tabulate([[t, f"{naive.get(t, 0):,}", f"{flash.get(t, 0):,}",
                         f"{once.get(t, 0):,}"] for t in terms],
                       headers=["term", "naive", f"flash (Br={br})", "flash compulsory"],
                       disable_numparse=True))
        rows = []
        for n, dd in ((1024, 64), (4096, 64), (4096, 128), (16384, 128)):
            br_n = next(cfg for limit, cfg in GPU_CONFIGS if dd <= limit).Br   # the GPU's
            nb = naive_attention_bytes(1, 32, n, n, dd, dtype_bytes=FP32)["total"]
            fb = flash_attention_bytes(1, 32, n, n, dd, dtype_bytes=FP32, Br=br_n)["total"]
            fo = flash_attention_bytes(1, 32, n, n, dd, dtype_bytes=FP32)["total"]
            rows.append([n, dd, br_n, f"{nb / MiB:,.0f}", f"{fb / MiB:,.0f}", f"{fo / MiB:,.0f}",
                         f"{nb / fb:.1f}×", f"{nb / fo:.0f}×"])
        print("\nthe same at realistic sizes, B = 1, H = 32, float32 (MiB):")
        print(tabulate(rows, headers=["N", "d", "Br", "naive", "flash: K,V per Q tile",
                                      "flash: K,V once", "naive / per tile", "naive / once"],
                       disable_numparse=True))
        print("naive moves S and P, 4·N² floats per head, whatever the tiles. Flash never moves "
              "S or P; it moves Q and O once and K, V between once (the lower bound) and once "
              "per Q tile (the upper bound, 2·N²·d/Br floats: Br sets it, see §38). On a GPU "
              "the Q tiles that run at the same time share K and V in L2, so the HBM traffic "
              "is near the lower bound.")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
