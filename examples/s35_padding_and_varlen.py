"""§35 — padding: mask the padded keys with −∞, or pack the sequences and compute no padding.

The lesson's claim: sequences of different lengths are padded to one length; the padded key
positions are set to −∞ so that their softmax weight is e^{−∞} = 0 (in a kernel: bounds
predicates, a mask, each tile's valid range). But many irregular lengths waste work on the
padding — branches, useless scores, idle lanes — so frameworks also pack the sequences
(variable-length attention: the real tokens one sequence after another, with cumulative
offsets ``cu_seqlens`` saying where each starts) or group them by length.

What you will see: one batch of sequences of different lengths (one of them empty) laid out
both ways. Padded: q, k, v [B, H, max n, d] with a ``key_padding_mask`` [B, max n] (True = a
real key), through ``flashlesson.attention``. Packed: q, k, v [Σ n_b, H, d] with
``cu_seqlens`` = [0, n_0, n_0 + n_1, …], through ``flashlesson.varlen_attention``. Both give,
for every real query, exactly what the sequence gives when run alone (the float64 oracle on
that sequence only, and ``reference.varlen_attention``), causal and not; the padded batch row
of the empty sequence — no valid key at all — gives O = 0 and LSE = −∞, never NaN. Then the
bill: the padded layout computes B·max n² scores per head, the packed one Σ n_b², also counted
in the kernel's tiles (Br × Bc: the padded kernel visits every tile of the padded square, the
varlen kernel only the tiles of each sequence, and its blocks past a sequence's end exit at
once) — and for a batch of 256 lengths drawn uniformly from 1 … 2048, the padded layout wastes
about two thirds of its work. On a GPU the two layouts are then timed on such a batch.

Run: ``python examples/s35_padding_and_varlen.py`` (or
``flashlesson section 35``).
"""

import datetime

import numpy as np
from tabulate import tabulate

import flashlesson
from flashlesson.configs import default_config
from flashlesson.tolerance import attention_tol
from flashlesson.tour import Check, attention_tiers, check_close, example_rng
from flashlesson.reference import attention, cu_seqlens, pack, packed_to_padded, varlen_attention

SECTIONS = (35,)
TOPIC = "padding and varlen"
SIM_LENGTHS, SIM_H, SIM_D = (13, 5, 0, 20, 1), 2, 8
GPU_LENGTHS, GPU_H, GPU_D = (300, 77, 0, 1000, 1, 513), 4, 64


def lse_close(kernel, got, want, bar, note):
    """LSE vs the oracle: −inf exactly where the oracle has it, the rest within ``bar`` (the
    error model's LSE bound, flashlesson.tolerance.attention_tol: an LSE is a score-sized
    value, not a probability — a sequence of one key has LSE = its one score)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    inf = np.isneginf(want)
    if not np.array_equal(np.isneginf(got), inf):
        return Check("35", TOPIC, kernel, None, False, f"{note}: −inf in other places than the "
                     "oracle's")
    return check_close("35", TOPIC, kernel, got[~inf], want[~inf], note, rtol=0,
                       atol=np.broadcast_to(bar, want.shape)[~inf])


def tiles(n_q, n_k, br, bc):
    """Tiles Br × Bc of one head's n_q × n_k score matrix."""
    return -(-n_q // br) * -(-n_k // bc)


def bill(lengths, heads, br, bc):
    """Scores and tiles per batch, padded vs packed (not causal)."""
    n, batch = max(lengths), len(lengths)
    return {"padded scores": heads * batch * n * n,
            "packed scores": heads * sum(x * x for x in lengths),
            "padded tiles": heads * batch * tiles(n, n, br, bc),
            "packed tiles": heads * sum(tiles(x, x, br, bc) for x in lengths)}


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    lengths, heads, d = (SIM_LENGTHS, SIM_H, SIM_D) if flashlesson.SIMULATOR else \
        (GPU_LENGTHS, GPU_H, GPU_D)
    batch, n = len(lengths), max(lengths)
    # each sequence [H, n_b, d]; its last key scaled by 3, so that the true softmax is peaked
    # and a missing real key (a padding mask off by one) changes O visibly
    seqs = {name: [rng.standard_normal((heads, x, d)).astype(np.float32) for x in lengths]
            for name in "qkv"}
    for s in seqs["k"]:
        if s.shape[1]:
            s[:, -1] *= 3.0
    packed = {name: pack(seqs[name])[0].astype(np.float32) for name in "qkv"}   # [Σn, H, d]
    cu = cu_seqlens(lengths)                                                   # int32 [B + 1]
    padded, kpm = {}, None
    for name in "qkv":
        padded[name], kpm = packed_to_padded(packed[name], cu)                 # [B, H, n, d]
        padded[name] = padded[name].astype(np.float32)
        # the padding itself holds noise, not zeros: the mask alone must keep it out
        pad_rows = ~kpm[:, None, :, None].repeat(heads, 1).repeat(d, 3)
        padded[name][pad_rows] = rng.standard_normal(int(pad_rows.sum())).astype(np.float32)

    # The two tiers on the padded batch: the lesson kernel (kernels_numba/lesson/
    # attention.py: a padding key's score selected to −inf, its P = 0 term skipped) first,
    # then the fast one, against the oracle (varlen has no lesson kernel: fast tier only)
    if verbose:
        print(f"\nlesson tier, then fast tier, padded batch {list(padded['q'].shape)} with "
              "key_padding_mask:")
    checks += attention_tiers("35", TOPIC, padded["q"], padded["k"], padded["v"], verbose,
                              key_padding_mask=kpm)

    table = []
    for causal in (False, True):
        o_pad, lse_pad = flashlesson.attention(padded["q"], padded["k"], padded["v"],
                                               causal=causal, key_padding_mask=kpm,
                                               return_lse=True)
        o_var, lse_var = flashlesson.varlen_attention(
            packed["q"], packed["k"], packed["v"], cu, cu, max_seqlen_q=n, max_seqlen_k=n,
            causal=causal, return_lse=True)
        c = " (causal)" if causal else ""
        errs = {"padded": 0.0, "varlen": 0.0}
        passed = {"padded": True, "varlen": True}
        for b, x in enumerate(lengths):
            if x == 0:
                table.append([f"{b}{c}", x, "no key: O = 0, LSE = −inf", "no rows"])
                continue
            here = {}
            want_o, want_lse = attention(seqs["q"][b][None], seqs["k"][b][None],
                                         seqs["v"][b][None], causal=causal)
            want_o, want_lse = want_o[0], want_lse[0]           # [H, n_b, d]: the sequence alone
            bar = attention_tol(seqs["q"][b], seqs["k"][b], seqs["v"][b])     # error model
            rows = slice(cu[b], cu[b + 1])
            got = {"padded": (o_pad[b, :, :x], lse_pad[b, :, :x]),
                   "varlen": (np.swapaxes(o_var[rows], 0, 1), np.swapaxes(lse_var[rows], 0, 1))}
            for kind, (o, lse) in got.items():
                co = check_close("35", TOPIC, kind, o, want_o, f"sequence {b} (n = {x}){c}: O "
                                 "= the sequence alone", rtol=0, atol=bar.o)
                cl = lse_close(kind, lse, want_lse, bar.lse, f"sequence {b} (n = {x}){c}: LSE")
                here[kind] = co.max_err if co.max_err is not None else np.inf
                errs[kind] = max(errs[kind], here[kind])
                if not (co.passed and cl.passed):       # the details of what failed
                    passed[kind] = False
                    checks += [ch for ch in (co, cl) if not ch.passed]
            table.append([f"{b}{c}", x, f"{here['padded']:.1e}", f"{here['varlen']:.1e}"])
        for kind, how in (("padded", "padded + key_padding_mask"), ("varlen", "packed varlen")):
            checks.append(Check("35", TOPIC, kind, errs[kind], passed[kind],
                                f"{how}, lengths {list(lengths)}{c}: every real query's O and "
                                "LSE equal its sequence run alone"))
        want_var = varlen_attention(packed["q"], packed["k"], packed["v"], cu, cu,
                                    causal=causal)
        # the error model on the packed layout: every packed key counted as a key of every
        # sequence (more keys, the largest |k|: an upper bound)
        packed_bar = attention_tol(*(np.swapaxes(packed[x], 0, 1) for x in "qkv")).o
        checks.append(check_close("35", TOPIC, "varlen", o_var, want_var,
                                  f"packed O vs reference.varlen_attention{c}",
                                  rtol=0, atol=np.swapaxes(packed_bar, 0, 1)))
        empty = [b for b, x in enumerate(lengths) if x == 0]
        ok = all(np.all(o_pad[b] == 0) and np.all(np.isneginf(lse_pad[b])) for b in empty)
        checks.append(Check("35", TOPIC, "padded", None, bool(empty) and bool(ok),
                            f"batch row {empty} has no valid key{c}: O = 0 and LSE = −inf in "
                            "every row, no NaN"))
    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\n{batch} sequences of lengths {list(lengths)}, H = {heads}, d = {d}; padded to "
              f"{n}, cu_seqlens = {cu.tolist()} (random inputs: seed {seed}). Max |error| of O "
              "against the sequence run alone (float64):")
        print(tabulate(table, headers=["sequence", "n_b", "padded + mask", "packed varlen"],
                       disable_numparse=True))

    # The bill: scores and tiles computed.
    cfg = default_config(d, n, batch * heads)
    br, bc = cfg.Br, cfg.Bc
    mine = bill(lengths, heads, br, bc)
    ok = mine["padded scores"] == heads * batch * n ** 2 and \
        mine["packed scores"] == heads * sum(x ** 2 for x in lengths) and \
        o_var.shape[0] == sum(lengths) and o_pad.shape[2] == n     # no padding row is packed
    checks.append(Check("35", TOPIC, "formula", None, bool(ok),
                        f"scores per batch: padded H·B·max n² = {mine['padded scores']:,}, packed "
                        f"H·Σ n_b² = {mine['packed scores']:,}: "
                        f"{1 - mine['packed scores'] / mine['padded scores']:.0%} of the padded "
                        "work is padding"))
    draw = np.random.default_rng(seed % 2**32)
    big = tuple(int(x) for x in draw.integers(1, 2049, 256))
    big_bill = bill(big, 16, br, bc)
    waste = 1 - big_bill["packed scores"] / big_bill["padded scores"]
    # E[n²] / max² for n uniform on 1 … M is about 1/3: two thirds wasted (± 0.02, sampling)
    checks.append(Check("35", TOPIC, "formula", None, 0.55 < waste < 0.75,
                        f"256 lengths uniform in 1 … 2048: {waste:.0%} of the padded scores are "
                        "padding (≈ 2/3 expected)"))
    if verbose:
        print(f"\nwork per batch: score entries and Br × Bc tiles (the kernel's, Br = {br}, "
              f"Bc = {bc}); the padded kernel visits every tile of every batch row's "
              f"{n} × {n} square, the varlen kernel only each sequence's own tiles:")
        rows = []
        for name, ls, h, bl in (("this batch", lengths, heads, mine),
                                ("256 uniform in 1 … 2048, H = 16", big, 16, big_bill)):
            rows.append([name, f"{bl['padded scores']:,}", f"{bl['packed scores']:,}",
                         f"{1 - bl['packed scores'] / bl['padded scores']:.0%}",
                         f"{bl['padded tiles']:,}", f"{bl['packed tiles']:,}"])
        print(tabulate(rows, headers=["batch", "padded scores", "packed scores",
                                      "padding share", "padded tiles", "packed tiles"],
                       disable_numparse=True))

    if flashlesson.SIMULATOR:
        if verbose:
            print("\nmeasured time: skipped in the simulator. On a GPU this example times both "
                  "layouts on a batch of 16 sequences of random lengths 128 … 4096.")
        return checks
    checks += _measured(rng, verbose)
    return checks


# ---------------------------------------------------------------------------------------------
# GPU only
# ---------------------------------------------------------------------------------------------
def _measured(rng, verbose, heads=16, d=64):
    from numba import cuda

    from flashlesson.bench import time_gpu
    lengths = tuple(int(x) for x in rng.integers(128, 4097, 16))
    n, batch = max(lengths), len(lengths)
    cu = cu_seqlens(lengths)
    total = int(cu[-1])
    q, k, v = (cuda.to_device(rng.standard_normal((total, heads, d)).astype(np.float32))
               for _ in range(3))
    qp, kp, vp = (cuda.to_device(rng.standard_normal((batch, heads, n, d)).astype(np.float32))
                  for _ in range(3))
    kpm = np.zeros((batch, n), bool)
    for b, x in enumerate(lengths):
        kpm[b, :x] = True
    kpm_dev, cu_dev = cuda.to_device(kpm), cuda.to_device(cu)
    ms_pad = time_gpu(lambda: flashlesson.attention(qp, kp, vp, key_padding_mask=kpm_dev),
                      samples=5, inner=3)
    ms_var = time_gpu(lambda: flashlesson.varlen_attention(
        q, k, v, cu_dev, cu_dev, max_seqlen_q=n, max_seqlen_k=n), samples=5, inner=3)
    work = sum(x * x for x in lengths) / (batch * n * n)
    speedup = ms_pad / ms_var
    # a shared GPU's timing: printed as a measurement, not pass/fail
    checks = [Check.measured("35", TOPIC, "varlen",
                             f"B={batch} H={heads} d={d}, lengths 128 … 4096 (max {n}): padded "
                             f"{ms_pad:.2f} ms, packed {ms_var:.2f} ms (×{speedup:.2f}; the "
                             f"packed layout has {work:.0%} of the padded scores)")]
    if verbose:
        dev = flashlesson.device.describe()["device"]
        print(f"\n{dev}, {datetime.date.today()}: {batch} sequences, lengths {list(lengths)}, "
              f"H = {heads}, d = {d}, not causal; CUDA-event medians")
        print(tabulate([["padded + key_padding_mask", f"{ms_pad:.2f}", "100%"],
                        ["packed varlen", f"{ms_var:.2f}", f"{work:.0%}"]],
                       headers=["layout", "ms", "scores computed"], disable_numparse=True))
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
