"""§4, §14–16, §25: the traffic model (formulas) against the counter (the library's own calls run in
the simulator with counting device arrays), exactly, per array: reads, writes, size, item size.

Tiny shapes (the counter needs the simulator, ~0.3 s a block) that break the tiling on purpose:
N = 1, N not a multiple of 32, of Bc or of the GEMM tiles, Nq ≠ Nk both ways, d not a multiple
of 4 (scalar tile loads instead of load4), a causal Q tile that sees no key at all.
"""

import numpy as np
import pytest
from conftest import SIM, needs_sim
from numba import cuda

from flashlesson import FlashConfig, SOFTMAX_METHODS, attention, traffic
from flashlesson.configs import GEMM_TILES, SIM_CONFIG
from flashlesson.cli import main
from flashlesson.kernels_numba.vector import load4, store4
from flashlesson.reference.attention import attention as attention_oracle
from flashlesson.reference.attention import flash_attention_bytes, naive_attention_bytes



def same(model, counted):
    """Exactly the same arrays, each with the same reads, writes, size and item size."""
    assert set(model) == set(counted), (sorted(model), sorted(counted))
    for name in model:
        m, c = model[name], counted[name]
        assert (m.reads, m.writes, m.elements, m.itemsize) == \
            (c.reads, c.writes, c.elements, c.itemsize), (name, m, c)


# ---------------------------------------------------------------------------------------------
# the counter counts: a kernel that reads its input several times cannot pass as "1 read"
# ---------------------------------------------------------------------------------------------
@cuda.jit
def _reread(x, y):
    i = cuda.grid(1)
    if i < x.size:
        y[i] = x[i] + x[i] + x[0]          # x[i] twice, x[0] once more: 3 reads per thread


@cuda.jit
def _vector_and_slices(a, b):
    if cuda.grid(1) == 0:
        x0, x1, x2, x3 = load4(a, 4)       # a.reshape(-1)[4 … 7]: 4 reads (the simulator's load4)
        store4(b, 0, x0, x1, x2, x3)       # 4 writes
        row = a[1]                         # a view: not an access …
        b[1, 0] = row[2]                   # … its element is: 1 read, 1 write
        n = len(a) + a.shape[1] + a.size   # metadata: no access
        b[1, 1] = n


@needs_sim
def test_counter_counts_rereads_and_writes():
    n = 10
    with traffic.count_traffic() as t:
        x = t.to_device(np.arange(n, dtype=np.float32), "x")
        y = cuda.device_array(n, np.float32)            # named after the variable: y
        _reread[1, 32](x, y)
    assert t.launches == ["_reread"]
    assert (t.arrays["x"].reads, t.arrays["x"].writes) == (3 * n, 0)
    assert (t.arrays["y"].reads, t.arrays["y"].writes) == (0, n)
    assert t.arrays["x"].by_kernel == {"_reread": [3 * n, 0]}
    assert t.total_bytes == (3 * n + n) * 4
    out = y.copy_to_host()
    assert type(out) is np.ndarray                      # results are plain on the host
    np.testing.assert_array_equal(out, 2 * np.arange(n) + 0)


@needs_sim
def test_counter_load4_slices_and_metadata():
    with traffic.count_traffic() as t:
        a = t.to_device(np.arange(12, dtype=np.float32).reshape(3, 4), "a")
        b = t.to_device(np.zeros((2, 4), np.float32), "b")
        _vector_and_slices[1, 32](a, b)
    assert (t.arrays["a"].reads, t.arrays["a"].writes) == (5, 0)
    assert (t.arrays["b"].reads, t.arrays["b"].writes) == (0, 6)
    np.testing.assert_array_equal(b.copy_to_host(), [[4, 5, 6, 7], [6, 3 + 4 + 12, 0, 0]])


@needs_sim
def test_counter_restores_the_simulator_and_counts_only_inside():
    from numba.cuda.simulator import kernel as sim_kernel
    before = (cuda.to_device, cuda.device_array, sim_kernel.FakeCUDAKernel.__call__)
    with traffic.count_traffic() as t:
        x = t.to_device(np.ones(4, np.float32), "x")
        y = cuda.device_array(4, np.float32)
    _reread[1, 32](x, y)                                # after the block: nothing counted
    assert t.arrays == {}
    assert before == (cuda.to_device, cuda.device_array, sim_kernel.FakeCUDAKernel.__call__)


@pytest.mark.skipif(SIM, reason="on a GPU the counter refuses")
def test_counter_refuses_the_gpu():
    from flashlesson import DeviceError
    with pytest.raises(DeviceError, match="simulator"):
        with traffic.count_traffic():
            pass


# ---------------------------------------------------------------------------------------------
# softmax: every method of the registry
# ---------------------------------------------------------------------------------------------
def _softmax_cases():
    for name, m in SOFTMAX_METHODS.items():
        n = 19 if m.max_n == 32 else 37
        yield name, 3, n, np.float32, None
        yield name, 2, 1, np.float32, None                  # N = 1
    yield "warp_multi", 2, 33, np.float16, None             # fp16: 2-byte x and y
    yield "three_pass", 2, 33, np.float16, None             # m, l stay float32
    yield "three_pass", 2, 5, np.float32, 32                # m, l read by each of T threads
    yield "auto", 5, 70, np.float32, None


@needs_sim
@pytest.mark.parametrize("method,rows,n,dtype,threads", list(_softmax_cases()))
def test_softmax_model_equals_count(method, rows, n, dtype, threads):
    t, y = traffic.count_softmax(rows, n, method, dtype, threads)
    same(traffic.softmax_traffic(rows, n, method, dtype, threads), t.arrays)
    assert y.dtype == dtype and np.allclose(y.astype(np.float64).sum(-1), 1, atol=1e-2)


def test_softmax_model_follows_the_registry():
    for name, m in SOFTMAX_METHODS.items():
        a = traffic.softmax_traffic(4, 8, name)
        assert (a["x"].reads, a["y"].writes) == (m.reads * 32, m.writes * 32)


# ---------------------------------------------------------------------------------------------
# attention: naive (§14) and flash (§23–24, §34)
# ---------------------------------------------------------------------------------------------
SHAPES = [  # B, H, Nq, Nk, d, causal
    (1, 1, 40, 24, 8, False),       # two Q tiles, Nk not a multiple of Bc or of the GEMM tile
    (1, 1, 40, 24, 8, True),        # causal: the first Q tile visits 1 K tile of 2
    (1, 2, 40, 4, 6, True),         # the first Q tile sees no key; d % 4 ≠ 0 (scalar loads)
    (2, 1, 7, 37, 5, True),         # Nq < Nk, one partial Q tile, three K tiles
]


@needs_sim
@pytest.mark.parametrize("shape", SHAPES)
def test_flash_model_equals_count(shape):
    B, H, nq, nk, d, causal = shape
    t, (o, lse) = traffic.count_attention(B, H, nq, nk, d, "flash", causal)
    same(traffic.flash_attention_traffic(B, H, nq, nk, d, causal), t.arrays)
    assert t.launches == ["flash_forward"]


@needs_sim
def test_flash_model_follows_the_config():
    cfg = FlashConfig(Br=16, Bc=32, TR=4, TC=8)
    t, _ = traffic.count_attention(1, 1, 40, 45, 4, "flash", True, config=cfg)
    same(traffic.flash_attention_traffic(1, 1, 40, 45, 4, True, cfg), t.arrays)
    # query row i sees keys ≤ i + 5: the tile of rows 0–15 stops at key 20 (K tile 0 of 2)
    assert traffic.flash_tiles_visited(40, 45, True, cfg) == [(0, 1), (16, 2), (32, 2)]


@needs_sim
@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[2], SHAPES[3]])
def test_naive_model_equals_count(shape):
    B, H, nq, nk, d, causal = shape
    t, (o, lse) = traffic.count_attention(B, H, nq, nk, d, "naive", causal)
    same(traffic.naive_attention_traffic(B, H, nq, nk, d, causal), t.arrays)
    # who moves S and P: written by the first GEMM, read by the softmax (and the LSE), P by
    # the second GEMM — the round trips through HBM that §25 removes
    assert t.launches == ["matmul", "softmax_warp_multi", "matmul#2", "row_lse"]
    assert set(t.arrays["s"].by_kernel) == {"matmul", "softmax_warp_multi", "row_lse"}
    assert set(t.arrays["p"].by_kernel) == {"softmax_warp_multi", "matmul#2"}


@needs_sim
def test_naive_without_lse_and_results_unchanged(rng):
    q, k, v = (rng.standard_normal((1, 1, n, 3)).astype(np.float32) for n in (9, 20, 20))
    with traffic.count_traffic() as t:
        o = attention(q, k, v, method="naive", causal=True)
    same(traffic.naive_attention_traffic(1, 1, 9, 20, 3, True, return_lse=False), t.arrays)
    o_ref, _ = attention_oracle(q.astype(np.float64), k, v, causal=True)
    assert np.max(np.abs(o - o_ref)) < 1e-5                # counting changes no value


# ---------------------------------------------------------------------------------------------
# the model against the lesson's own byte formulas (reference/attention.py), any size
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("nq,nk,d", [(40, 24, 8), (4096, 4096, 64), (1000, 3000, 80)])
def test_flash_model_is_the_lessons_formula_when_not_causal(nq, nk, d):
    cfg = SIM_CONFIG
    model = traffic.flash_attention_traffic(2, 3, nq, nk, d, False, cfg)
    ref = flash_attention_bytes(2, 3, nq, nk, d, dtype_bytes=4, Br=cfg.Br, lse_bytes=4)
    assert traffic.total_bytes(model) == ref["total"]
    causal = traffic.flash_attention_traffic(2, 3, nq, nk, d, True, cfg)
    assert traffic.total_bytes(causal) < ref["total"]      # §34: skipped tiles are not loaded


@pytest.mark.parametrize("nq,nk,d", [(40, 24, 8), (4096, 4096, 64), (7, 37, 5)])
def test_naive_model_is_the_ideal_plus_gemm_rereads(nq, nk, d):
    """The §14 ideal (each matrix moved once per kernel) plus what the tiled GEMMs re-read
    (A once per column block, B once per row block) and the LSE pass over S."""
    BM, BN = GEMM_TILES[:2]
    cd = lambda a, b: -(-a // b)                            # noqa: E731
    bh = 6
    model = traffic.naive_attention_traffic(2, 3, nq, nk, d, False)
    ideal = naive_attention_bytes(2, 3, nq, nk, d, dtype_bytes=4)["total"]
    extra = bh * ((cd(nk, BN) - 1) * nq * d + (cd(nq, BM) - 1) * nk * d      # Q, K in S = QKᵀ
                  + (cd(d, BN) - 1) * nq * nk + (cd(nq, BM) - 1) * nk * d    # P, V in O = PV
                  + nq * nk + nq)                                           # row_lse: S, LSE
    assert traffic.total_bytes(model) == ideal + 4 * extra


# ---------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------
@needs_sim
def test_cli_softmax(capsys):
    assert main(["traffic", "softmax", "--method", "online", "--shape", "2", "33"]) == 0
    out = capsys.readouterr().out
    assert "simulator" in out and "NO" not in out and "total" in out


@needs_sim
def test_cli_attention(capsys):
    assert main(["traffic", "attention", "--method", "flash", "--shape", "1", "1", "20", "9",
                 "4", "--causal"]) == 0
    out = capsys.readouterr().out
    assert "naive / flash" in out and "NO" not in out


def test_cli_model_only_and_errors(capsys):
    assert main(["traffic", "attention", "--method", "naive", "--shape", "1", "16", "4096",
                 "4096", "64", "--model-only"]) == 0
    assert "naive / flash" in capsys.readouterr().out
    assert main(["traffic", "attention", "--shape", "1", "2", "3"]) == 2
    assert "expected 5 positive integers" in capsys.readouterr().err
    assert main(["traffic", "softmax", "--method", "warp", "--shape", "2", "40",
                 "--model-only"]) == 2
    assert "at most N = 32" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# key padding (§35), the backward (§30 flash, §31 naive), packed varlen (§35)
# ---------------------------------------------------------------------------------------------
def _mask(rng, B, nk):
    """A random key padding mask with at least one padded and one valid key per batch row
    (when Nk ≥ 2), and a batch row with no valid key at all when B > 1."""
    mask = rng.random((B, nk)) < 0.6
    mask[:, 0], mask[:, -1] = True, False
    if B > 1:
        mask[-1] = False
    return mask


PAD_SHAPES = [  # B, H, Nq, Nk, d, causal
    (2, 1, 7, 37, 5, True),         # Nq < Nk, three K tiles; batch row 1 all padding
    (1, 2, 40, 24, 8, False),       # two Q tiles, the second partial (its rows past Nq test too)
]


@needs_sim
@pytest.mark.parametrize("method", ["flash", "naive"])
def test_padding_forward_model_equals_count(method, rng):
    B, H, nq, nk, d, causal = PAD_SHAPES[0] if method == "naive" else PAD_SHAPES[1]
    mask = _mask(rng, B, nk)
    t, _ = traffic.count_attention(B, H, nq, nk, d, method, causal, key_padding_mask=mask)
    model = traffic.attention_traffic(B, H, nq, nk, d, method, causal, key_padding_mask=mask)
    same(model, t.arrays)
    assert model["key_padding_mask"].itemsize == 1                 # bytes, not floats
    if method == "naive":                                          # −inf written per padded key
        extra = model["s"].writes - traffic.naive_attention_traffic(B, H, nq, nk, d)["s"].writes
        assert extra == H * nq * int((~mask).sum()) > 0


@needs_sim
@pytest.mark.parametrize("method,shape,pad", [
    ("flash", (1, 1, 40, 24, 8, False), False),     # dQ: two Q tiles; dK/dV: Nk < Bc
    ("flash", (2, 1, 7, 37, 5, True), True),        # causal Nq < Nk, padding, d % 4 ≠ 0
    ("flash", (1, 2, 40, 4, 6, True), False),       # causal: Q tiles that see no key
    ("naive", (2, 1, 9, 13, 4, True), True),        # stored P and dP, padding
])
def test_backward_model_equals_count(method, shape, pad, rng):
    B, H, nq, nk, d, causal = shape
    mask = _mask(rng, B, nk) if pad else None
    t, (dq, dk, dv) = traffic.count_backward(B, H, nq, nk, d, method, causal,
                                             key_padding_mask=mask)
    model = traffic.backward_traffic(B, H, nq, nk, d, method, causal, key_padding_mask=mask)
    same(model, t.arrays)
    if method == "flash":
        assert t.launches == ["bwd_preprocess", "flash_bwd_dkdv", "flash_bwd_dq"]
        assert all(a.elements <= B * H * max(nq, nk) * d for a in model.values())   # no N × N
    else:
        assert t.launches == ["bwd_preprocess", "matmul", "naive_probs", "matmul#2",
                              "naive_ds", "matmul#3", "matmul#4", "matmul#5"]
        assert model["p"].elements == model["dp"].elements == B * H * nq * nk
    assert np.all(np.isfinite(dq)) and np.all(np.isfinite(dk)) and np.all(np.isfinite(dv))


@needs_sim
@pytest.mark.parametrize("backward", [False, True])
def test_varlen_model_equals_count(backward):
    lq, lk = [5, 0, 19], [7, 3, 30]           # an empty query sequence; grid sized by 19, 30
    t, _ = traffic.count_varlen(lq, lk, 2, 4, causal=True, backward=backward)
    same(traffic.varlen_traffic(lq, lk, 2, 4, causal=True, backward=backward), t.arrays)


def test_backward_models_any_size_flash_moves_no_n_squared():
    """At B1 H16 N4096 d64 the naive backward moves P and dP (N² each) several times; the flash
    backward's traffic is K/V and Q/dO tiles re-read, O(N²d/B) — far less."""
    naive = traffic.total_bytes(traffic.backward_traffic(1, 16, 4096, 4096, 64, "naive"))
    flash = traffic.total_bytes(traffic.backward_traffic(1, 16, 4096, 4096, 64, "flash"))
    assert naive > 16 * 4096 * 4096 * 4 * 6 and flash < naive / 2
    causal = traffic.total_bytes(traffic.backward_traffic(1, 16, 4096, 4096, 64, "flash", True))
    assert causal < 0.7 * flash                               # §34: tiles above the diagonal


def test_padding_mask_and_errors():
    m = traffic.padding_mask(2, 5, [3])
    assert m.tolist() == [[True] * 3 + [False] * 2] * 2
    assert traffic.padding_mask(2, 5, None) is None
    with pytest.raises(ValueError, match="--key-padding"):
        traffic.padding_mask(2, 5, [1, 2, 3])
    with pytest.raises(ValueError, match="key_padding_mask"):
        traffic.flash_attention_traffic(1, 1, 8, 8, 4, key_padding_mask=np.ones((2, 8), bool),
                                        config=SIM_CONFIG)


@needs_sim
def test_cli_backward_with_padding(capsys):
    assert main(["traffic", "attention", "--backward", "--method", "flash", "--shape", "2", "1",
                 "9", "13", "4", "--causal", "--key-padding", "5", "13"]) == 0
    out = capsys.readouterr().out
    assert "backward" in out and "key_padding_mask" in out and "NO" not in out


# ---------------------------------------------------------------------------------------------
# §48: the SRAM sweep
# ---------------------------------------------------------------------------------------------
def test_sram_model_follows_the_paper():
    n, d = 4096, 64
    rows = traffic.sram_sweep(n, d, [2.0 ** e for e in range(0, 15)])
    naive = {r["naive bytes"] for r in rows}
    assert naive == {(4 * n * n + 4 * n * d) * 4}                 # standard attention: no M
    for r in rows:
        assert r["fa2_Bc"] == min(r["fa2_Br"], d) and r["fa1_Br"] == min(r["fa1_Bc"], d)
        assert r["fa2 bytes"] >= r["floor bytes"]                  # Q, K, V read, O written
        assert 4.0 <= r["naive / bound"] < 4.1
    small = [r for r in rows if 4 * d * r["fa2_Br"] <= r["M"] and r["fa2_Br"] * 64 <= n]
    assert len(small) >= 6
    for r in small:                                                # ∝ 1/M: ratio to N²d²/M
        assert 8.0 <= r["fa2 / bound"] < 8.6 and 12.2 < r["fa1 / bound"] < 13.1
    big = [r for r in rows if r["fa2_Br"] == n]                    # one Q tile: the floor
    assert big and all(r["fa2"] == 4 * n * d + n for r in big)
    # halving M doubles the traffic while tiles are far from N
    assert rows[1]["fa2"] * 2 == pytest.approx(rows[0]["fa2"], rel=1e-3)
    # the model of the real kernel at its tiles equals the FA2 sweep's formula at Br = 128
    cfg, smem, kbytes = traffic.kernel_sram_point(n, d)
    assert kbytes == 4 * (n * d + 2 * n * d * (n // cfg.Br) + n * d + n) and smem < 227 * 1024


def test_cli_sram(capsys):
    assert main(["traffic", "sram", "--shape", "1024", "64", "--sram", "16", "64", "1024"]) == 0
    out = capsys.readouterr().out
    assert "N²d²/M" in out and "floor" in out and out.count("\n") > 5
    assert main(["traffic", "sram", "--shape", "1024"]) == 2
    assert "expected 2 positive integers" in capsys.readouterr().err
