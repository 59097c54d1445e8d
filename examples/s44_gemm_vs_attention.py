"""§44 — FlashAttention is not two GEMMs glued together: GEMM's tiles are independent, attention's
are tied by the row's max and sum.

The lesson's claim: in C = AB every output tile can be computed on its own, and inside a tile
the K dimension is a plain sum, so its pieces can be added in any order, even by different
blocks (split-K), and each piece could be written out as soon as it is known. In attention,
QKᵀ's tile cannot be written out: the softmax needs the whole row's statistics, which change
with every K tile, so the accumulator must be rescaled (the correction e^{m_old − m_new}) —
GEMM, reductions and exponentials mixed in one loop.

What you will see: a tiled GEMM in NumPy (float64) whose output tiles are computed in a random
order, each tile's K loop in its own random order, and also as split-K (every K tile's product
computed alone, then summed) — equal to A @ B to rounding; the project's tiled GEMM kernel
(``kernels_numba/gemm.py`` ``matmul_kernel``, launched by ``flashlesson.attention_methods.gemm``)
against the float64 product. Then attention done the GEMM way — each K tile's contribution
e^{S_j − m_j} V_j and sum computed alone, with its own max, and added: wrong, because nothing
rescales the earlier tiles when a later tile raises the max; the same for two halves of the keys
averaged. The fixes, both with (m, l): ``reference.flash_attention_tiled`` (§32: the state
carried tile to tile, with the correction), exact even when the K tiles come in a shuffled order
— the order never mattered, the carried state does — and ``reference.merge_attention`` (§22:
halves combined by their LSE), and the flash kernel against the oracle. Last, the dependence
counted: in how many (row, tile) steps the correction was < 1, i.e. the already accumulated
output had to be rescaled; in the GEMM that number is zero by construction.

Run: ``python examples/s44_gemm_vs_attention.py`` (or ``flashlesson section 44``).
"""

import numpy as np

import flashlesson  # before numba.cuda: it chooses the GPU or the simulator
from numba import cuda
from flashlesson.attention_methods import gemm
from flashlesson.configs import GEMM_TILES, default_config
from flashlesson.tour import RTOL, Check, attention_inputs, check_close, example_rng
from flashlesson.reference import attention, flash_attention_tiled, merge_attention

SECTIONS = (44,)
TOPIC = "GEMM vs attention"


def gemm_tiled(a, b, BM, BN, BK, rng=None):
    """C = A @ B by tiles, in float64. With ``rng``: the output tiles in a random order, and
    each tile's K tiles in its own random order. Nothing flows between output tiles, and inside
    a tile each K step only adds: C_tile += A[rows, ks] @ B[ks, cols]."""
    m, kdim = a.shape
    n = b.shape[1]
    c = np.full((m, n), np.nan)
    tiles = [(i, j) for i in range(0, m, BM) for j in range(0, n, BN)]
    if rng is not None:
        tiles = [tiles[t] for t in rng.permutation(len(tiles))]
    for i, j in tiles:                                   # any order: independent tiles
        acc = np.zeros((min(BM, m - i), min(BN, n - j)))
        ks = list(range(0, kdim, BK))
        if rng is not None:
            ks = [ks[t] for t in rng.permutation(len(ks))]
        for k0 in ks:                                    # any order: a plain sum
            acc += a[i:i + BM, k0:k0 + BK] @ b[k0:k0 + BK, j:j + BN]
        c[i:i + BM, j:j + BN] = acc                      # written once, never revisited
    return c


def attention_gemm_style(q, k, v, Bc, scale):
    """Attention tiled the way GEMM is: each K tile's contribution computed alone with its own
    max m_j (e^{S_j − m_j} V_j and its row sum) and added — no state shared between tiles, so
    nothing rescales the earlier tiles when a later tile has a larger max. Wrong."""
    num = 0.0
    den = 0.0
    for c0 in range(0, k.shape[-2], Bc):
        s = (q @ np.swapaxes(k[..., c0:c0 + Bc, :], -1, -2)) * scale
        p = np.exp(s - s.max(axis=-1, keepdims=True))    # the tile's own max
        num = num + p @ v[..., c0:c0 + Bc, :]
        den = den + p.sum(axis=-1, keepdims=True)
    return num / den


def rel(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - b)) / np.max(np.abs(b)))


def main(verbose=True):
    rng, seed = example_rng()
    checks = []
    sim = flashlesson.SIMULATOR

    # GEMM: independent tiles, K in any order, split-K
    bm, bn = GEMM_TILES[0], GEMM_TILES[1]
    BK = 16                                              # kernels_numba/gemm.py's BK
    m, n, kd = (20, 18, 41) if sim else (300, 200, 517)
    a = rng.standard_normal((m, kd))
    b = rng.standard_normal((kd, n))
    want = a @ b
    shuffled = gemm_tiled(a, b, bm, bn, BK, rng)
    err = rel(shuffled, want)
    checks.append(Check("44", TOPIC, "numpy GEMM", err, err < 1e-13,
                        f"A {m}×{kd} @ B {kd}×{n}, tiles {bm}×{bn}×{BK}: output tiles in a "
                        "random order, each K loop shuffled == A @ B"))
    parts = [a[:, k0:k0 + BK] @ b[k0:k0 + BK] for k0 in range(0, kd, BK)]
    split = sum(parts[t] for t in rng.permutation(len(parts)))
    err = rel(split, want)
    checks.append(Check("44", TOPIC, "numpy GEMM", err, err < 1e-13,
                        f"split-K: {len(parts)} K-tile products computed alone, summed in a "
                        "random order == A @ B"))
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    c = cuda.to_device(np.full((1, m, n), np.nan, np.float32))
    gemm(cuda.to_device(a32[None]), cuda.to_device(b32[None]), c, 1.0)
    want32 = a32.astype(np.float64) @ b32.astype(np.float64)
    checks.append(check_close("44", TOPIC, "matmul_kernel", c.copy_to_host()[0], want32,
                              f"the GEMM kernel, tiles {GEMM_TILES[:2]}, vs float64 A @ B",
                              atol=RTOL * float(np.abs(want32).max())))

    # Attention the GEMM way, and the fixes with (m, l)
    bb, h, nq, nk, d = (1, 2, 8, 40, 16) if sim else (2, 4, 256, 1000, 64)
    q, k, v = attention_inputs(rng, bb, h, nq, nk, d)
    q *= 2.0                                             # sharper rows: tile maxima differ more
    k[..., -3, :] += 0.5 * q[..., 0:1, :].squeeze(-2)    # a late key many rows like (§17)
    scale = 1.0 / np.sqrt(d)
    o_true, lse_true = attention(q, k, v)
    Bc = default_config(d).Bc
    err = rel(attention_gemm_style(q.astype(np.float64), k.astype(np.float64),
                                   v.astype(np.float64), Bc, scale), o_true)
    checks.append(Check("44", TOPIC, "numpy, no (m, l)", err, err > 1e-2,
                        f"K tiles of {Bc}, each with its own max, added like GEMM's K pieces: "
                        f"{100 * err:.0f}% off (checked > 1%)"))
    half = nk // 2
    (o1, l1), (o2, l2) = attention(q, k[..., :half, :], v[..., :half, :]), \
        attention(q, k[..., half:, :], v[..., half:, :])
    err = rel((o1 + o2) / 2, o_true)
    checks.append(Check("44", TOPIC, "numpy, no (m, l)", err, err > 1e-2,
                        f"split-KV done like split-K: the halves' outputs averaged: "
                        f"{100 * err:.0f}% off (checked > 1%)"))
    o_merged, _ = merge_attention(np.stack([o1, o2]), np.stack([l1, l2]))
    err = rel(o_merged, o_true)
    checks.append(Check("44", TOPIC, "numpy §22 merge", err, err < 1e-12,
                        "the halves combined by their LSE (weights e^{lse_p − lse}) == oracle"))
    trace = []
    o_tiled, _ = flash_attention_tiled(q, k, v, 4, Bc, trace=trace)
    err = rel(o_tiled, o_true)
    checks.append(Check("44", TOPIC, "numpy §32", err, err < 1e-12,
                        "(m, l, acc) carried through the K tiles, rescaled == oracle"))
    starts = list(range(0, nk, Bc))
    order = rng.permutation(len(starts))
    perm = np.concatenate([np.arange(starts[t], min(starts[t] + Bc, nk)) for t in order])
    o_perm, _ = flash_attention_tiled(q, k[..., perm, :], v[..., perm, :], 4, Bc)
    err = rel(o_perm, o_true)
    checks.append(Check("44", TOPIC, "numpy §32", err, err < 1e-12,
                        f"K tiles visited in a shuffled order {order.tolist()[:8]}"
                        f"{'…' if len(order) > 8 else ''}: still exact — what GEMM lacks is the "
                        "carried state, not an order"))
    o = flashlesson.attention(q, k, v)
    checks.append(check_close("44", TOPIC, "flash", o, o_true,
                              f"B={bb} H={h} Nq={nq} Nk={nk} d={d}: the kernel that carries "
                              "(m, l, acc)", atol=RTOL * float(np.abs(o_true).max())))

    # The dependence, counted: (row, tile) steps whose correction e^{m_old − m_new} < 1
    rescaled = steps = 0
    for t in trace:
        if t["j"] == 0:
            m_prev = t["m"]
            continue
        steps += t["m"].size
        rescaled += int(np.sum(t["m"] > m_prev))
        m_prev = t["m"]
    checks.append(Check("44", TOPIC, "numpy §32", None, rescaled > 0,
                        f"{rescaled} of {steps} (row, later K tile) steps rescaled the "
                        "accumulated output (a new row max); GEMM: 0 by construction"))

    if verbose:
        print(__doc__.split("\n\n")[1])
        print(f"\nrandom inputs: seed {seed}")
        for c in checks:
            err = "—" if c.max_err is None else f"{c.max_err:.1e}"
            print(f"  {c.kernel:18s} {err:>8s}  {'ok' if c.passed else 'FAILED'}  {c.note}")
        print("\nGEMM's K loop adds independent pieces; attention's K loop updates a state: "
              "m = max(m, row max of S_j), l and acc rescaled by e^{m_old − m} before the "
              "new tile is added. That state is the dependence between tiles.")
    return checks


if __name__ == "__main__":
    raise SystemExit(1 if any(c.failed for c in main()) else 0)
