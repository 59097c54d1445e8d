"""The Hopper helpers of kernels_numba/hopper.py, each alone against NumPy: mbarrier phases and
arrival counts, the bulk copy's bytes landing on its mbarrier, named barriers between a producer
and a consumer warp, setmaxnreg, the wgmma descriptor's bit fields, and wgmma 64×N×16 (one k16
step, and a K loop of 4 steps in one commit group) in fp16 and bf16. Same tests on the GPU (an
H200: the real PTX, sm_90a) and in the simulator (the twins of kernels_numba/sim/hopper.py); the
simulator alone also checks that a wait which can never end is reported, not hung.

On a Hopper GPU (sm_90a, e.g. the H200): ``FLASHLESSON_DEVICE=gpu python -m pytest -q
tests/test_hopper.py``."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import SIM, by_device

import flashlesson  # noqa: F401 - picks the device first
from flashlesson.tc_methods import BFloat16
from numba import cuda, float32, uint64

from flashlesson.kernels_numba import hopper as H
from flashlesson.kernels_numba.hopper import (bar_sync, bulk_copy_g2s, mbar_arrive, mbar_arrive_expect_tx,
                                  mbar_init, mbar_try_wait_parity, setmaxnreg_dec)

ROOT = Path(__file__).resolve().parents[1]
sim_only = pytest.mark.skipif(not SIM, reason="the simulator's own check (on a GPU it hangs)")


def _sim_error():
    from flashlesson.kernels_numba.sim.hopper import HopperSimError
    return HopperSimError


# --- mbarrier: phases and arrival counts ------------------------------------------------------
def test_mbarrier_phases(rng):
    src = rng.standard_normal((3, 32)).astype(np.float32)
    out = np.full((6, 32), np.nan, np.float32)
    H.mbarrier_kernel[1, 64](src, out)
    np.testing.assert_array_equal(out[:3], src[:, np.roll(np.arange(32), -1)])
    np.testing.assert_array_equal(out[3:], -src[:, np.roll(np.arange(32), -3)])


# --- bulk copy: expect_tx, bytes landing, the phase flip ---------------------------------------
def test_bulk_copy_lands_on_the_mbarrier(rng):
    n0, n1 = 192, 128                   # 768 and 512 bytes; src offset 768 B, dst 256 B
    src = rng.standard_normal(n0 + n1).astype(np.float32)
    out = np.full((2, 256), np.nan, np.float32)
    early = np.zeros(1, np.float32)
    H.bulk_copy_kernel[1, 64](src, n0, n1, out, early, SIM)   # (probe: the GPU would race)
    want0 = np.full(256, -1.0, np.float32)
    want0[:n0] = src[:n0]
    want1 = want0.copy()
    want1[64:64 + n1] = src[n0:]
    np.testing.assert_array_equal(out[0], want0)
    np.testing.assert_array_equal(out[1], want1)
    if SIM:                             # the copy landed only when its phase completed
        assert early[0] == -1.0


# --- named barriers: producer and consumer warps -----------------------------------------------
def test_named_barriers_producer_consumer(rng):
    src = rng.standard_normal((4, 32)).astype(np.float32)
    out = np.full((4, 32), np.nan, np.float32)
    H.named_barrier_kernel[1, 64](src, out)
    np.testing.assert_array_equal(out, src[:, np.roll(np.arange(32), -1)])


# --- a semaphore in global memory -------------------------------------------------------------
def test_blocks_take_turns():
    """sem_wait_geq / sem_release_add alone: each block reads and writes a counter in its
    turn only, so the counter goes up by one a block, in block order (on the GPU: more blocks
    than fit at once, so turns also pass to blocks launched later)."""
    n = by_device(3, 5000)
    sem = np.zeros(2, np.int32)
    order = np.full(n, -1, np.int32)
    H.turns_kernel[n, 32](sem, order)
    np.testing.assert_array_equal(order, np.arange(n))
    assert sem[0] == n and sem[1] == n


@sim_only
def test_a_turn_never_given_is_an_error():
    sem = np.zeros(2, np.int32)
    sem[0] = -1                                 # block 0 waits for 0: never given
    with pytest.raises(_sim_error(), match=r"sem\[0\] is -1, this thread waits for ≥ 0"):
        H.turns_kernel[1, 32](sem, np.zeros(1, np.int32))


# --- setmaxnreg ---------------------------------------------------------------------------------
def test_setmaxnreg_runs(rng):
    x = rng.standard_normal(256).astype(np.float32)
    out = np.full(256, np.nan, np.float32)
    H.setmaxnreg_kernel[1, 256](x, out)
    np.testing.assert_array_equal(out, 2 * x)


@cuda.jit
def _bad_setmaxnreg_kernel(out):
    setmaxnreg_dec(100)
    out[cuda.threadIdx.x] = 1


def test_setmaxnreg_refuses_a_bad_count():
    """On the GPU a typing error at compile time; in the simulator an error at the call."""
    with pytest.raises(Exception, match="multiple of 8"):
        _bad_setmaxnreg_kernel[1, 128](np.zeros(128, np.float32))


# --- wgmma --------------------------------------------------------------------------------------
@cuda.jit
def _desc_kernel(addr, lbo, sbo, swizzle, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = H.wgmma_desc(addr[i], lbo[i], sbo[i], swizzle[i])


def test_wgmma_descriptor_fields():
    """The PTX ISA's table: start address >> 4 at bits 0‥13, LBO >> 4 at 16‥29, SBO >> 4 at
    32‥45, swizzle at 62‥63; each field (x & 0x3FFFF) >> 4. Its example (K-major, no swizzle,
    tf32): LBO 256 bytes encodes as 16, SBO 128 as 8."""
    addr = np.array([0x400, 0x3FFF0, 0x12340, 0x40010], np.uint32)
    lbo = np.array([256, 16, 1024, 2048], np.int64)
    sbo = np.array([128, 1024, 128, 0x40000 + 256], np.int64)
    swz = np.array([0, 1, 0, 1], np.int64)
    out = np.zeros(4, np.uint64)
    _desc_kernel[1, 32](addr, lbo, sbo, swz, out)
    o = out.astype(object)
    assert [int(x) & 0x3FFF for x in o] == [0x40, 0x3FFF, 0x1234, 0x1]   # 0x40010 wraps
    assert [(int(x) >> 16) & 0x3FFF for x in o] == [16, 1, 64, 128]
    assert [(int(x) >> 32) & 0x3FFF for x in o] == [8, 64, 8, 16]        # bit 18 dropped
    assert [int(x) >> 62 for x in o] == [0, 1, 0, 1]
    assert all(int(x) & 0x3FFF0000C000C000 == 0 for x in o)             # reserved bits 0


def _as_bits(x, kind):
    if kind == "f16":
        return x.astype(np.float16).view(np.uint16)
    return BFloat16.from_float32(x).bits


def _from_bits(bits, kind):
    if kind == "f16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


WGMMA_CASES = [      # kind, N, k16 steps, swizzle, first mma with scale_d = 0
    ("f16", 64, 1, H.SWIZZLE_NONE, False),
    ("bf16", 64, 1, H.SWIZZLE_NONE, False),
    ("f16", 128, 4, H.SWIZZLE_NONE, False),
    ("bf16", 128, 4, H.SWIZZLE_NONE, True),
    ("f16", 64, 4, H.SWIZZLE_128B, True),
    ("bf16", 128, 4, H.SWIZZLE_128B, False),
    ("f16", 176, 2, H.SWIZZLE_NONE, False),     # (attention_wgmma's wide K/V tile: N = Bc)
    pytest.param("f16", 256, 4, H.SWIZZLE_NONE, False, marks=pytest.mark.skipif(
        SIM, reason="N = 256 on the GPU only (the simulator covers 64 and 128)")),
    pytest.param("bf16", 256, 4, H.SWIZZLE_128B, True, marks=pytest.mark.skipif(
        SIM, reason="N = 256 on the GPU only (the simulator covers 64 and 128)")),
]


@pytest.mark.parametrize("kind, N, ksteps, swizzle, zero_first", WGMMA_CASES)
def test_wgmma(rng, kind, N, ksteps, swizzle, zero_first):
    """d = a·btᵀ (+ c) against float64. The products of fp16 (11 significant bits) or bf16
    (8) inputs are exact in fp32, so the only error is the fp32 accumulation of the K + 1 terms
    of each element: bound (K + 1)·2^-22·(|a|·|bt|ᵀ + |c|) — four times the round-to-nearest
    bound (K + 1)·2^-24·(…), room for a tensor-core adder that truncates. A misplaced element
    (a wrong fragment lane, descriptor field or layout index) is off by O(1)."""
    K = 16 * ksteps
    a = _as_bits(rng.standard_normal((64, K)).astype(np.float32), kind)
    bt = _as_bits(rng.standard_normal((N, K)).astype(np.float32), kind)
    c = np.full((64, N), np.nan, np.float32) if zero_first else \
        rng.standard_normal((64, N)).astype(np.float32)
    d = np.full((64, N), np.nan, np.float32)
    H.wgmma_kernel(kind, N, ksteps, swizzle, zero_first)[1, 128](a, bt, c, d)
    A, B = _from_bits(a, kind), _from_bits(bt, kind).T
    C = np.zeros((64, N)) if zero_first else c.astype(np.float64)
    want = A @ B + C
    bound = (K + 1) * 2.0 ** -22 * (np.abs(A) @ np.abs(B) + np.abs(C))
    err = np.abs(d - want)
    assert not np.isnan(d).any(), "NaN: an element not written (or c read with scale_d = 0)"
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (f"error {err[worst]:.2e} at {worst}, bound there "
                                  f"{bound[worst]:.2e} (largest error {err.max():.2e})")


# --- the two forms of P·V: B N-major (imm-trans-b 1) and A from registers (RS) --------------
def _read_b(smem, N, K, hypothesis):
    """B[k, n] (K × N) as wgmma would read it from ``smem`` (the flat halves the kernel wrote)
    under a hypothesis on the N-major no-swizzle layout, descriptor LBO = 16·N bytes, SBO =
    128 bytes, k16 step s at 16·N·s halves. "ptx": the PTX ISA's canonical layout
    ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)) — n-blocks SBO apart, k-blocks LBO apart, a core
    matrix's 16-byte rows one k each; "swapped": LBO and SBO exchanged; "kcore": core matrices
    read K-major (16-byte rows one n each); "both". Returns None if it reads past the tile."""
    lbo, sbo = 8 * N, 64                                       # in halves
    if hypothesis in ("swapped", "both"):
        lbo, sbo = sbo, lbo
    k = np.arange(K)[:, None]
    n = np.arange(N)[None, :]
    s, kk = k // 16, k % 16
    inner = (kk % 8) * 8 + n % 8 if hypothesis in ("ptx", "swapped") else (n % 8) * 8 + kk % 8
    at = 16 * N * s + (n // 8) * sbo + (kk // 8) * lbo + inner
    return None if at.max() >= smem.size else smem[at]


def _wgmma_ab(rng, kind, N, ksteps, rs, trans_b, sw128=False):
    K = 16 * ksteps
    a = _as_bits(rng.standard_normal((64, K)).astype(np.float32), kind)
    b = _as_bits(rng.standard_normal((K, N)).astype(np.float32), kind)
    c = rng.standard_normal((64, N)).astype(np.float32)
    d = np.full((64, N), np.nan, np.float32)
    H.wgmma_ab_kernel(kind, N, ksteps, rs, trans_b, sw128=sw128)[1, 128](a, b, c, d)
    return a, b, c, d


@pytest.mark.parametrize("kind, N, ksteps", [("f16", 64, 2), ("bf16", 128, 4)])
def test_wgmma_b_mn_major_128b_swizzle(rng, kind, N, ksteps):
    """B row-major (V[key][d]) stored with the 128-byte swizzle (hopper.sw128_index: a row of
    64 columns in one 128-byte line, chunks XOR key % 8) and read MN-major, imm-trans-b 1:
    SBO = 1024 (8 keys), LBO = 128·K (the next 64 columns, N = 128), the k16 step 2048 bytes on
    (docs/hopper_sw128.md, read from the PTX ISA and public code; the simulator's twin reads
    it so, and so did the H200, 2026-12-02)."""
    a, b, c, d = _wgmma_ab(rng, kind, N, ksteps, False, 1, sw128=True)
    assert not np.isnan(d).any(), "NaN: an element not written"
    ok, text = _within(d, _from_bits(a, kind), _from_bits(b, kind), c.astype(np.float64))
    assert ok, f"MN-major B, 128-byte swizzle: {text}"


@pytest.mark.parametrize("N, ksteps, rs", [(32, 2, False), (64, 1, True), (128, 2, True),
                                           (128, 2, False)])
def test_wgmma_tf32(rng, N, ksteps, rs):
    """The tf32 forms the 3xTF32 forward takes (attention_wgmma_tf32): m64nNk8, A from shared
    memory or from registers, B K-major, against float64 on tf32-rounded inputs. Products of
    two tf32 values (11 significant bits) are exact in float32, so the bound is test_wgmma's
    (the tensor core's sums cut toward zero, within it)."""
    from flashlesson.kernels_numba.sim.mma import tf32 as to_tf32     # (NumPy's cvt.rna.tf32)
    K = 8 * ksteps
    rnd = np.vectorize(lambda x: to_tf32(np.float32(x)), otypes=[np.float32])
    a = rnd(rng.standard_normal((64, K)))
    bt = rnd(rng.standard_normal((N, K)))
    c = rng.standard_normal((64, N)).astype(np.float32)
    d = np.full((64, N), np.nan, np.float32)
    H.wgmma_ab_kernel("tf32", N, ksteps, rs)[1, 128](a, np.ascontiguousarray(bt.T), c, d)
    assert not np.isnan(d).any(), "NaN: an element not written"
    ok, text = _within(d, a.astype(np.float64), bt.T.astype(np.float64), c.astype(np.float64))
    assert ok, f"tf32 wgmma (rs {rs}): {text}"


def _within(d, A, B, C):
    """(all within the bound of test_wgmma, the worst error as text)."""
    want = A @ B + C
    K = A.shape[1]
    bound = (K + 1) * 2.0 ** -22 * (np.abs(A) @ np.abs(B) + np.abs(C))
    err = np.abs(d - want)
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    return bool(np.all(err <= bound)), (f"error {err[worst]:.2e} at {worst}, bound there "
                                        f"{bound[worst]:.2e}")


@pytest.mark.parametrize("kind, N, ksteps", [("f16", 64, 2), ("bf16", 128, 4)])
def test_wgmma_b_n_major(rng, kind, N, ksteps):
    """B row-major (V[key][d]) in the N-major no-swizzle layout, imm-trans-b 1, A from shared
    memory. On a mismatch the message says which reading of the layout the hardware did
    (tests every hypothesis of ``_read_b`` against the same d): one GPU run tells."""
    a, b, c, d = _wgmma_ab(rng, kind, N, ksteps, False, 1)
    A, B = _from_bits(a, kind), _from_bits(b, kind)
    assert not np.isnan(d).any(), "NaN: an element not written"
    ok, text = _within(d, A, B, c.astype(np.float64))
    if not ok:
        smem = np.zeros(16 * ksteps * N, np.uint16)
        kk, nn = np.meshgrid(np.arange(16 * ksteps), np.arange(N), indexing="ij")
        smem[(kk // 8) * 8 * N + (nn // 8) * 64 + (kk % 8) * 8 + nn % 8] = b[kk, nn]
        seen = [h for h in ("swapped", "kcore", "both")
                if _read_b(smem, N, 16 * ksteps, h) is not None and
                _within(d, A, _from_bits(_read_b(smem, N, 16 * ksteps, h), kind),
                        c.astype(np.float64))[0]]
        pytest.fail(f"N-major B: {text}; the hardware's reading matches: "
                    f"{seen or 'none of swapped / kcore / both'}")


def _regs_of(a, perm):
    """The 64 × 16·s A a warpgroup means by the registers the kernel packs (register j holding
    what the table says register perm[j] holds): the identity is the layout as written."""
    out = np.zeros_like(a)
    tid = np.arange(128)
    w, g, t = tid // 32, (tid % 32) // 4, tid % 4
    offs = ((0, 0), (8, 0), (0, 8), (8, 8))
    for s in range(a.shape[1] // 16):
        for j in range(4):
            (dr, dk), (sr, sk) = offs[perm[j]], offs[j]
            for e in range(2):
                out[16 * w + g + dr, 16 * s + 2 * t + dk + e] = \
                    a[16 * w + g + sr, 16 * s + 2 * t + sk + e]
    return out


@pytest.mark.parametrize("kind, N, ksteps, trans_b", [("f16", 64, 2, 0), ("bf16", 128, 2, 0),
                                                      ("f16", 128, 4, 1), ("bf16", 64, 4, 1)])
def test_wgmma_a_from_registers(rng, kind, N, ksteps, trans_b):
    """The RS form: A as four words of half pairs per thread (mma.sync's A fragment on each
    warp's 16 rows), B K-major or N-major (the latter: P·V). On a mismatch the message names
    the register order (of the 24) the hardware's result matches, if any."""
    import itertools
    a, b, c, d = _wgmma_ab(rng, kind, N, ksteps, True, trans_b)
    A, B = _from_bits(a, kind), _from_bits(b, kind)
    assert not np.isnan(d).any(), "NaN: an element not written"
    ok, text = _within(d, A, B, c.astype(np.float64))
    if not ok:
        seen = [p for p in itertools.permutations(range(4)) if p != (0, 1, 2, 3) and
                _within(d, _from_bits(_regs_of(a, p), kind), B, c.astype(np.float64))[0]]
        pytest.fail(f"RS (trans_b {trans_b}): {text}; register orders matching the result: "
                    f"{seen or 'none'}")


def test_cp_async_completes_on_the_mbarrier(rng):
    src = rng.integers(0, 2**32, 3 * 256, dtype=np.uint32)
    out = np.zeros((3, 256), np.uint32)
    H.cp_async_mbarrier_kernel[1, 64](src, out)
    want = src.reshape(3, 64, 4).copy()
    want[:, 5] = 0                                  # thread 5's copies: the zero-fill form
    np.testing.assert_array_equal(out.reshape(3, 64, 4), np.roll(want, -7, axis=1))


# --- the simulator reports waits that can never end --------------------------------------------
@cuda.jit
def _missing_arrive_kernel(out):
    bars = cuda.shared.array(1, uint64)
    tid = cuda.threadIdx.x
    if tid == 0:
        mbar_init(bars, 0, 64)
    cuda.syncthreads()
    if tid >= 32:
        return                          # warp 1 never arrives
    mbar_arrive(bars, 0)
    mbar_try_wait_parity(bars, 0, 0)
    out[tid] = 1


@cuda.jit
def _missing_bytes_kernel(src, out):
    bars = cuda.shared.array(1, uint64)
    buf = cuda.shared.array(128, float32)
    tid = cuda.threadIdx.x
    if tid == 0:
        mbar_init(bars, 0, 1)
        mbar_arrive_expect_tx(bars, 0, 512)
        bulk_copy_g2s(buf, 0, src, 0, 256, bars, 0)     # 256 of the 512 bytes expected
    mbar_try_wait_parity(bars, 0, 0)
    out[tid] = buf[tid]


@cuda.jit
def _unfilled_named_kernel(out):
    tid = cuda.threadIdx.x
    if tid >= 32:
        return                          # the consumer warp is gone
    bar_sync(H.FULL, 64)
    out[tid] = 1


@sim_only
def test_simulator_reports_a_missing_arrival():
    with pytest.raises(_sim_error(), match=r"mbarrier .* 32 of 64 arrivals pending.*deadlock"):
        _missing_arrive_kernel[1, 64](np.zeros(64, np.float32))


@sim_only
def test_simulator_reports_missing_transaction_bytes():
    with pytest.raises(_sim_error(), match=r"tx-count 256 bytes.*missing 256 transaction bytes"):
        _missing_bytes_kernel[1, 32](np.zeros(64, np.float32), np.zeros(32, np.float32))


@sim_only
def test_simulator_reports_a_named_barrier_that_never_fills():
    with pytest.raises(_sim_error(), match=r"named barrier 1 never fills: 32 of 64"):
        _unfilled_named_kernel[1, 64](np.zeros(64, np.float32))


@sim_only
def test_simulator_reports_a_partial_warpgroup():
    z = np.zeros((64, 16), np.uint16)
    with pytest.raises(_sim_error(), match="warpgroup 0 needs threads 0-127"):
        H.wgmma_kernel("f16", 64, 1)[1, 64](z, z, np.zeros((64, 64), np.float32),
                                            np.zeros((64, 64), np.float32))


# --- the PTX: compiled for sm_90a (no GPU needed, but NVVM; ptxas when present) ----------------
PTX_SCRIPT = textwrap.dedent("""
    import sys
    from numba import cuda, types
    import numba.cuda.dispatcher

    class Hopper:                       # device functions compile for the current device's cc:
        compute_capability = (9, 0)     # without a GPU, say it is an H100/H200's

    if not cuda.is_available():
        numba.cuda.dispatcher.get_current_device = Hopper
    from flashlesson.kernels_numba import attention_wgmma as KW
    from flashlesson.kernels_numba import attention_wgmma_backward as KWB
    from flashlesson.kernels_numba import hopper as H

    def arr(dt, nd):
        return types.Array(dt, nd, "C")
    u16, f32, u32, u64, i64 = types.uint16, types.float32, types.uint32, types.uint64, types.int64
    kernels = {
        "wgmma_f16": (H.wgmma_kernel("f16", 64, 4).py_func,
                      (arr(u16, 2),) * 2 + (arr(f32, 2),) * 2),
        "wgmma_bf16_sw128": (H.wgmma_kernel("bf16", 128, 4, H.SWIZZLE_128B).py_func,
                             (arr(u16, 2),) * 2 + (arr(f32, 2),) * 2),
        "wgmma_tb": (H.wgmma_ab_kernel("f16", 64, 4, False, 1).py_func,
                     (arr(u16, 2),) * 2 + (arr(f32, 2),) * 2),
        "wgmma_rs_tb": (H.wgmma_ab_kernel("bf16", 128, 4, True, 1).py_func,
                        (arr(u16, 2),) * 2 + (arr(f32, 2),) * 2),
        "cp_async_mbar": (H.cp_async_mbarrier_kernel.py_func, (arr(u32, 1), arr(u32, 2))),
        "flash_wgmma": (KW.flash_wgmma_kernel(128, 128, 2, 2, True, True, True, True).py_func,
                        (arr(u32, 3),) * 4 + (arr(f32, 2), f32, i64, i64, i64,
                                              arr(types.uint8, 2))),
        "flash_wgmma_overlap": (KW.flash_wgmma_kernel(128, 128, 2, 3, True, False, False, False,
                                                      OVERLAP=True).py_func,
                                (arr(u32, 3),) * 4 + (arr(f32, 2), f32, i64, i64, i64,
                                                      arr(types.uint8, 2))),
        "flash_wgmma_cwg3": (KW.flash_wgmma_kernel(64, 128, 3, 3, True, True, False,
                                                   True).py_func,
                             (arr(u32, 3),) * 4 + (arr(f32, 2), f32, i64, i64, i64,
                                                   arr(types.uint8, 2))),
        "flash_wgmma_wide": (KW.flash_wgmma_kernel(128, 176, 2, 2, True, True, True,
                                                   True).py_func,
                             (arr(u32, 3),) * 4 + (arr(f32, 2), f32, i64, i64, i64,
                                                   arr(types.uint8, 2))),
        "flash_wgmma_pingpong": (KW.flash_wgmma_kernel(128, 128, 2, 3, True, True, True, True,
                                                       OVERLAP=True, PINGPONG=True).py_func,
                                 (arr(u32, 3),) * 4 + (arr(f32, 2), f32, i64, i64, i64,
                                                       arr(types.uint8, 2))),
        "flash_wgmma_cwg3_pingpong": (KW.flash_wgmma_kernel(64, 128, 3, 3, True, True, False,
                                                            False, OVERLAP=True,
                                                            PINGPONG=True).py_func,
                                      (arr(u32, 3),) * 4 + (arr(f32, 2), f32, i64, i64, i64,
                                                            arr(types.uint8, 2))),
        "wgmma_bwd_dkdv": (KWB.wgmma_bwd_dkdv_kernel(128, 64, 2, 2, True, True, True).py_func,
                           (arr(u32, 3),) * 4 + (arr(f32, 2),) * 2 + (arr(u32, 3),) * 2
                           + (arr(f32, 3), arr(types.int32, 1))
                           + (f32, i64, i64, i64, arr(types.uint8, 2))),
        "wgmma_bwd_fused": (KWB.wgmma_bwd_dkdv_kernel(128, 64, 2, 2, True, True, False,
                                                      True).py_func,
                            (arr(u32, 3),) * 4 + (arr(f32, 2),) * 2 + (arr(u32, 3),) * 2
                            + (arr(f32, 3), arr(types.int32, 1))
                            + (f32, i64, i64, i64, arr(types.uint8, 2))),
        "wgmma_bwd_dq": (KWB.wgmma_bwd_dq_kernel(128, 64, 2, 2, True, True, True).py_func,
                         (arr(u32, 3),) * 4 + (arr(f32, 2),) * 2 + (arr(u32, 3),)
                         + (f32, i64, i64, i64, arr(types.uint8, 2))),
        "mbarrier": (H.mbarrier_kernel.py_func, (arr(f32, 2), arr(f32, 2))),
        "bulk": (H.bulk_copy_kernel.py_func,
                 (arr(f32, 1), i64, i64, arr(f32, 2), arr(f32, 1), types.boolean)),
        "named": (H.named_barrier_kernel.py_func, (arr(f32, 2), arr(f32, 2))),
        "turns": (H.turns_kernel.py_func, (arr(types.int32, 1),) * 2),
        "setmaxnreg": (H.setmaxnreg_kernel.py_func, (arr(f32, 1), arr(f32, 1))),
    }
    out = sys.argv[1]
    for name, (fn, sig) in kernels.items():
        ptx, _ = cuda.compile_ptx(fn, sig, cc=(9, 0, "a"))
        with open(f"{out}/{name}.ptx", "w") as f:
            f.write(ptx)
    print("compiled", len(kernels))
""")

PTX_EXPECT = {
    "wgmma_f16": ["wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned",
                  "wgmma.wait_group.sync.aligned 0",
                  "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16",
                  "fence.proxy.async.shared::cta"],
    "wgmma_bf16_sw128": ["wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"],
    "wgmma_tb": ["wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"],
    "wgmma_rs_tb": ["wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"],
    "cp_async_mbar": ["cp.async.mbarrier.arrive.noinc.shared::cta.b64",
                      "cp.async.cg.shared.global"],
    "flash_wgmma": ["wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 ",
                    "cp.async.mbarrier.arrive.noinc.shared::cta.b64",
                    "setmaxnreg.dec.sync.aligned.u32 56", "setmaxnreg.inc.sync.aligned.u32 224"],
    "flash_wgmma_overlap": ["wgmma.wait_group.sync.aligned 1;", "wgmma.wait_group.sync.aligned 0;",
                            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "],
    "flash_wgmma_cwg3": ["wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 ",
                         "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 ",
                         "setmaxnreg.dec.sync.aligned.u32 32",
                         "setmaxnreg.inc.sync.aligned.u32 160"],
    "flash_wgmma_wide": ["wgmma.mma_async.sync.aligned.m64n176k16.f32.bf16.bf16 ",
                         "setmaxnreg.inc.sync.aligned.u32 224"],
    "flash_wgmma_pingpong": ["bar.sync %r", "bar.arrive %r", "wgmma.wait_group.sync.aligned 1;",
                             "setmaxnreg.inc.sync.aligned.u32 224"],
    "flash_wgmma_cwg3_pingpong": ["bar.sync %r", "bar.arrive %r",
                                  "setmaxnreg.inc.sync.aligned.u32 160"],
    "wgmma_bwd_dkdv": ["wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 ",
                       "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 ",
                       "cp.async.mbarrier.arrive.noinc.shared::cta.b64",
                       "wgmma.wait_group.sync.aligned 1;"],     # (Pᵀ under dPᵀ, dSᵀ under dV)
    "wgmma_bwd_fused": ["wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 ",
                        "ld.acquire.gpu.global.s32", "red.release.gpu.global.add.s32",
                        "bar.sync", "atom.global.add.f32"],
    "wgmma_bwd_dq": ["wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 ",
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 ",
                     "cp.async.mbarrier.arrive.noinc.shared::cta.b64",
                     "wgmma.wait_group.sync.aligned 1;"],       # (P under dP's products)
    "mbarrier": ["mbarrier.init.shared::cta.b64", "mbarrier.arrive.shared::cta.b64",
                 "mbarrier.try_wait.parity.shared::cta.b64", "fence.mbarrier_init.release.cluster"],
    "bulk": ["mbarrier.arrive.expect_tx.shared::cta.b64",
             "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"],
    "named": ["bar.sync %r", "bar.arrive %r"],
    "turns": ["ld.acquire.gpu.global.s32", "red.release.gpu.global.add.s32"],
    "setmaxnreg": ["setmaxnreg.dec.sync.aligned.u32 64", "setmaxnreg.inc.sync.aligned.u32 192"],
}


def _ptxas():
    found = shutil.which("ptxas")
    if found:
        return found
    for p in sys.path:      # the nvidia-cuda-nvcc wheel
        cand = Path(p) / "nvidia" / "cu13" / "bin" / "ptxas"
        if cand.is_file():
            return str(cand)
    return None


def test_ptx_for_sm90a(tmp_path):
    """compile_ptx(cc=(9, 0, "a")) in a process without the simulator: each kernel's PTX holds
    its instructions; when ptxas is found it assembles each for sm_90a (the PTX is valid).
    Needs NVVM (libnvvm, e.g. the nvidia-nvvm and nvidia-cuda-nvrtc wheels): skipped
    without it."""
    try:                                # cheap: no NVVM, no subprocess
        from cuda.pathfinder import load_nvidia_dynamic_lib
        load_nvidia_dynamic_lib("nvrtc")
        load_nvidia_dynamic_lib("nvvm")
    except Exception as e:              # (ImportError, DynamicLibNotFoundError)
        pytest.skip(f"no NVVM here: {type(e).__name__}: {str(e)[:150]}")
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_ENABLE_CUDASIM", "FLASHLESSON_DEVICE")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", PTX_SCRIPT, str(tmp_path)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    if r.returncode and ("nvvm" in r.stderr.lower() or "nvrtc" in r.stderr.lower()):
        pytest.skip("no NVVM here: " + r.stderr.strip().splitlines()[-1][:200])
    assert r.returncode == 0, r.stderr[-3000:]
    for name, wants in PTX_EXPECT.items():
        ptx = (tmp_path / f"{name}.ptx").read_text()
        assert ".target sm_90a" in ptx
        for w in wants:
            assert w in ptx, f"{name}: {w!r} not in its PTX"
    for name in ("wgmma_f16", "wgmma_bf16_sw128", "wgmma_tb", "wgmma_rs_tb"):   # (a report)
        local = ".local" in (tmp_path / f"{name}.ptx").read_text()
        print(f"{name}: the accumulator {'in local memory' if local else 'in registers'}")
    ptxas = _ptxas()
    if ptxas is None:
        return
    for name in PTX_EXPECT:
        cap = {"setmaxnreg": ["-maxrregcount", "128"],      # as their max_registers
               "flash_wgmma": ["-maxrregcount", "168"],
               "flash_wgmma_overlap": ["-maxrregcount", "168"],
               "flash_wgmma_wide": ["-maxrregcount", "168"],
               "flash_wgmma_cwg3": ["-maxrregcount", "128"],
               "flash_wgmma_pingpong": ["-maxrregcount", "168"],
               "flash_wgmma_cwg3_pingpong": ["-maxrregcount", "128"]}.get(name, [])
        a = subprocess.run([ptxas, "-arch=sm_90a", "-v", *cap, str(tmp_path / f"{name}.ptx"),
                            "-o", str(tmp_path / f"{name}.cubin")], capture_output=True, text=True)
        assert a.returncode == 0, f"ptxas {name}: {a.stderr[-2000:]}"
        # C7508: setmaxnreg ignored; the wgmma serialisation warnings: accumulator discipline
        assert "Performance Loss" not in a.stderr, f"ptxas {name}: {a.stderr[-2000:]}"
        if name.startswith("flash_wgmma"):      # no spills: the producer's code within its
            # setmaxnreg.dec (CWG = 3: 32), the consumers' within their .inc (CWG = 3: 160)
            assert " 0 bytes spill stores" in a.stderr, f"ptxas {name}: {a.stderr[-2000:]}"
        used = [line.split(":", 1)[1].strip() for line in a.stderr.splitlines() if "Used" in line]
        print(f"ptxas {name}: {'; '.join(used)}")
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump:                       # the tensor-core instruction in the machine code
        for name in ("wgmma_f16", "wgmma_bf16_sw128", "wgmma_tb", "wgmma_rs_tb"):
            sass = subprocess.run([cuobjdump, "-sass", str(tmp_path / f"{name}.cubin")],
                                  capture_output=True, text=True).stdout
            n = sass.count("HGMMA")
            print(f"{name}: {n} HGMMA in the SASS")
            assert n >= 4, f"{name}: no HGMMA in the SASS"
        # OVERLAP: the loop's softmax (Bc/2 + 2 ex2) between the wait for S (DEPBAR.LE 1) and
        # the next wait for P·V (DEPBAR.LE 0): ptxas did not hoist the wait over it
        sass = subprocess.run([cuobjdump, "-sass", str(tmp_path / "flash_wgmma_overlap.cubin")],
                              capture_output=True, text=True).stdout.splitlines()
        one = next(i for i, line in enumerate(sass) if "DEPBAR.LE gsb0, 0x1" in line)
        zero = next(i for i in range(one, len(sass)) if "DEPBAR.LE gsb0, 0x0" in sass[i])
        ex2 = sum("MUFU.EX2" in line for line in sass[one:zero])
        print(f"flash_wgmma_overlap: {ex2} MUFU.EX2 while P·V is in flight")
        assert ex2 >= 64, f"flash_wgmma_overlap: {ex2} ex2 between the waits: no overlap"
