"""Tests of the warp operations (``kernels_numba/sim/warp.py``): shuffles, votes, ballot, match,
syncwarp, activemask, lanemask_lt, and the errors the simulator raises for misuse.

Each test launches a tiny kernel (at most 64 threads) and compares with results computed by
hand in NumPy. Blocks of 32 and 64 threads are full warps; 40 and 48 end with a partial warp.

- Non-error tests are plain CUDA: they run unchanged on a GPU (no simulator-only behaviour).
- Tests marked ``sim_only`` check what only the simulator can (errors, exact activemask,
  value types); they are skipped on a GPU.

Run (from the repository root; ``tests/conftest.py`` picks the device, the simulator when
there is no GPU, and ``NUMBA_ENABLE_CUDASIM=1`` forces it)::

    NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/test_simwarp.py -q
"""

import os
import threading
import time

if (
    "NUMBA_ENABLE_CUDASIM" not in os.environ
    and not os.path.exists(os.path.join(os.path.dirname(__file__), "conftest.py"))
    and not os.path.exists("/dev/nvidiactl")
):
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # no conftest to pick the device, no GPU: simulate

import numpy as np
import pytest
from numba import cuda

from flashlesson import kernels_numba  # noqa: F401  (installs the warp operations in the simulator)
from flashlesson.kernels_numba.sim import warp as simwarp

SIM = bool(cuda.config.ENABLE_CUDASIM)
if not SIM and not cuda.is_available():
    pytest.skip(
        "no CUDA GPU and the simulator is off (set NUMBA_ENABLE_CUDASIM=1)",
        allow_module_level=True,
    )

sim_only = pytest.mark.skipif(not SIM, reason="checks simulator-only behaviour")

FULL = 0xFFFFFFFF
SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR = 0, 1, 2, 3


@pytest.fixture(autouse=True)
def no_leftover_threads():
    """After each test, every simulated thread must have finished (none left hanging)."""
    yield
    if not SIM:
        return
    from numba.cuda.simulator.kernel import BlockThread

    deadline = time.monotonic() + 5.0
    for t in threading.enumerate():
        if isinstance(t, BlockThread):
            t.join(max(0.0, deadline - time.monotonic()))
    left = [t for t in threading.enumerate() if isinstance(t, BlockThread)]
    assert not left, f"{len(left)} simulated threads still running after the test"


# ---------------------------------------------------------------------------------------------
# Kernels (valid CUDA: every lane named in a mask calls the same operation with that mask)
# ---------------------------------------------------------------------------------------------
@cuda.jit(device=True)
def warp_mask():
    """Mask of the lanes of the caller's warp that exist (partial last warp)."""
    warp = cuda.threadIdx.x // 32
    n = min(32, cuda.blockDim.x - warp * 32)
    return FULL if n == 32 else (1 << n) - 1


@cuda.jit
def shuffle_kernel(values, out, mode, b):
    i = cuda.threadIdx.x
    mask = warp_mask()
    v = values[i]
    if mode == SHFL_IDX:
        r = cuda.shfl_sync(mask, v, b)
    elif mode == SHFL_UP:
        r = cuda.shfl_up_sync(mask, v, b)
    elif mode == SHFL_DOWN:
        r = cuda.shfl_down_sync(mask, v, b)
    else:
        r = cuda.shfl_xor_sync(mask, v, b)
    out[i] = r


@cuda.jit
def vote_kernel(pred, out_all, out_any, out_eq, out_ballot):
    i = cuda.threadIdx.x
    mask = warp_mask()
    p = pred[i]
    out_all[i] = cuda.all_sync(mask, p)
    out_any[i] = cuda.any_sync(mask, p)
    out_eq[i] = cuda.eq_sync(mask, p)
    out_ballot[i] = cuda.ballot_sync(mask, p)


@cuda.jit
def even_lanes_ballot_kernel(pred, out):
    """Only the even lanes vote, with a mask naming exactly them; odd lanes do nothing."""
    i = cuda.threadIdx.x
    if i % 2 == 0:
        out[i] = cuda.ballot_sync(0x55555555, pred[i])


@cuda.jit
def match_kernel(values, out_any, out_all_mask, out_all_pred):
    i = cuda.threadIdx.x
    v = values[i]
    out_any[i] = cuda.match_any_sync(FULL, v)
    m, p = cuda.match_all_sync(FULL, v)
    out_all_mask[i] = m
    out_all_pred[i] = p


@cuda.jit
def half_warp_kernel(values, out):
    """Lanes 0-15 and 16-31 shuffle in two separate groups (disjoint masks)."""
    i = cuda.threadIdx.x
    lane = i % 32
    v = values[i]
    if lane < 16:
        out[i] = cuda.shfl_up_sync(0x0000FFFF, v, 1)
    else:
        out[i] = cuda.shfl_xor_sync(0xFFFF0000, v, 3)


@cuda.jit
def syncwarp_kernel(out):
    """Each lane writes shared memory, syncwarp, then reads its neighbour's slot."""
    sh = cuda.shared.array(64, np.int32)
    i = cuda.threadIdx.x
    lane = i % 32
    base = i - lane
    sh[i] = 3 * i + 1
    cuda.syncwarp(warp_mask())
    n = min(32, cuda.blockDim.x - base)
    out[i] = sh[base + (lane + 1) % n]


@cuda.jit
def syncwarp_half_kernel(out):
    """Only lanes 0-15 synchronise (mask 0xffff); lanes 16-31 write nothing shared."""
    sh = cuda.shared.array(32, np.int32)
    lane = cuda.threadIdx.x
    if lane < 16:
        sh[lane] = 10 * lane
        cuda.syncwarp(0xFFFF)
        out[lane] = sh[15 - lane]
    else:
        out[lane] = -1


@cuda.jit
def lanemask_activemask_kernel(out_lt, out_active):
    i = cuda.threadIdx.x
    out_lt[i] = cuda.lanemask_lt()
    out_active[i] = cuda.activemask()


@cuda.jit
def warp_sum_tree_kernel(values, out):
    """§6 tree: shfl_down with offsets 16..1 leaves the sum in lane 0; shfl_sync broadcasts it."""
    i = cuda.threadIdx.x
    v = values[i]
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(FULL, v, offset)
        offset //= 2
    out[i] = cuda.shfl_sync(FULL, v, 0)


@cuda.jit
def butterfly_kernel(values, out_sum, out_max):
    """Butterfly: shfl_xor with offsets 16..1 gives every lane the warp's sum and max."""
    i = cuda.threadIdx.x
    s = values[i]
    m = values[i]
    offset = 16
    while offset > 0:
        s += cuda.shfl_xor_sync(FULL, s, offset)
        m = max(m, cuda.shfl_xor_sync(FULL, m, offset))
        offset //= 2
    out_sum[i] = s
    out_max[i] = m


@cuda.jit
def exit_then_syncwarp_kernel(out):
    """Lanes 16-31 return; 0-15 syncwarp with the full mask (exited lanes are excused)."""
    i = cuda.threadIdx.x
    if i >= 16:
        return
    cuda.syncwarp(FULL)
    out[i] = cuda.activemask()
    out[16 + i] = cuda.ballot_sync(FULL, i % 2 == 0)


# ---------------------------------------------------------------------------------------------
# NumPy expectations
# ---------------------------------------------------------------------------------------------
def values_for(dtype, n):
    """Distinct values per thread; floats not integral, so a wrong source lane shows."""
    rng = np.random.default_rng(1234 + n)
    if np.dtype(dtype).kind == "f":
        return (rng.standard_normal(n) * 100).astype(dtype)
    return rng.integers(-(2**31), 2**31 - 1, n).astype(dtype)


def expected_source(mode, b, n):
    """Source thread id of every thread of an n-thread block (PTX shfl.sync, c as numba)."""
    tid = np.arange(n)
    base, lane = tid - tid % 32, tid % 32
    bb = b & 31  # PTX: only b[4:0] is used
    if mode == SHFL_IDX:
        src = np.full(n, bb)
    elif mode == SHFL_UP:
        src = np.where(lane - bb >= 0, lane - bb, lane)  # below lane 0: own value
    elif mode == SHFL_DOWN:
        src = np.where(lane + bb <= 31, lane + bb, lane)  # above lane 31: own value
    else:
        src = lane ^ bb
    return base + src


def lanes_mask(lanes):
    return sum(1 << int(x) for x in lanes)


# ---------------------------------------------------------------------------------------------
# Shuffles
# ---------------------------------------------------------------------------------------------
FULL_WARP_CASES = (
    [(SHFL_IDX, b) for b in (0, 5, 31, 33, -1)]
    + [(SHFL_UP, b) for b in (0, 1, 5, 16, 31, 32)]
    + [(SHFL_DOWN, b) for b in (0, 1, 7, 16, 31, 32)]
    + [(SHFL_XOR, b) for b in (0, 1, 3, 16, 31)]
)
NAMES = {SHFL_IDX: "idx", SHFL_UP: "up", SHFL_DOWN: "down", SHFL_XOR: "xor"}


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_shuffles_full_warps(dtype):
    """64 threads = 2 full warps; every kind, deltas in and out of range (b keeps 5 bits)."""
    n = 64
    vals = values_for(dtype, n)
    for mode, b in FULL_WARP_CASES:
        out = np.zeros(n, dtype)
        shuffle_kernel[1, n](vals, out, mode, b)
        np.testing.assert_array_equal(
            out, vals[expected_source(mode, b, n)], err_msg=f"shfl {NAMES[mode]} b={b}"
        )


def test_shuffle_hand_checked_spots():
    """A few results written out by hand, independent of expected_source."""
    vals = np.arange(100, 132, dtype=np.int32)  # lane i holds 100 + i
    out = np.zeros(32, np.int32)
    shuffle_kernel[1, 32](vals, out, SHFL_DOWN, 16)
    assert (out[0], out[15], out[16], out[31]) == (116, 131, 116, 131)
    shuffle_kernel[1, 32](vals, out, SHFL_UP, 3)
    assert (out[0], out[2], out[3], out[31]) == (100, 102, 100, 128)
    shuffle_kernel[1, 32](vals, out, SHFL_XOR, 1)
    assert (out[0], out[1], out[30], out[31]) == (101, 100, 131, 130)
    shuffle_kernel[1, 32](vals, out, SHFL_IDX, 7)
    assert set(out.tolist()) == {107}


@pytest.mark.parametrize("n", [40, 48])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_shuffles_partial_warp(n, dtype):
    """Last warp has n-32 lanes, mask = those lanes; only reads from lanes that exist."""
    k = n - 32  # lanes in the partial warp: 8 or 16
    vals = values_for(dtype, n)
    cases = (
        [(SHFL_IDX, b) for b in (0, 3, k - 1)]
        + [(SHFL_UP, b) for b in (0, 1, 5, k - 1, 31)]
        + [(SHFL_XOR, b) for b in (0, 1, 2, k - 1)]
        + [(SHFL_DOWN, b) for b in (0, 32)]
    )
    for mode, b in cases:
        out = np.zeros(n, dtype)
        shuffle_kernel[1, n](vals, out, mode, b)
        np.testing.assert_array_equal(
            out, vals[expected_source(mode, b, n)], err_msg=f"n={n} {NAMES[mode]} b={b}"
        )


@pytest.mark.parametrize("dtype", [np.int64, np.float64])
def test_shuffle_64_bit_values(dtype):
    vals = values_for(dtype, 32)
    if dtype == np.int64:
        vals = vals * np.int64(2**31) + 7  # use the high half too
    out = np.zeros(32, dtype)
    shuffle_kernel[1, 32](vals, out, SHFL_XOR, 5)
    np.testing.assert_array_equal(out, vals[np.arange(32) ^ 5])


def test_disjoint_half_warp_groups():
    """Lanes 0-15 (mask 0xffff) and 16-31 (mask 0xffff0000) shuffle independently."""
    n = 64
    vals = values_for(np.float32, n)
    out = np.zeros(n, np.float32)
    half_warp_kernel[1, n](vals, out)
    tid = np.arange(n)
    lane = tid % 32
    src = np.where(lane == 0, tid, np.where(lane < 16, tid - 1, tid ^ 3))
    np.testing.assert_array_equal(out, vals[src])


# ---------------------------------------------------------------------------------------------
# Reductions built from shuffles
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_warp_sum_tree_and_broadcast(dtype):
    n = 64
    vals = np.arange(n, dtype=dtype) * dtype(3) - dtype(50)
    if dtype == np.float32:
        vals = values_for(dtype, n)
    out = np.zeros(n, dtype)
    warp_sum_tree_kernel[1, n](vals, out)
    for w in range(2):
        expect = vals[32 * w : 32 * w + 32].astype(np.float64).sum()
        np.testing.assert_allclose(out[32 * w : 32 * w + 32], expect, rtol=1e-5)


def test_butterfly_xor_reduction():
    n = 64
    vals = values_for(np.float32, n)
    out_sum = np.zeros(n, np.float32)
    out_max = np.zeros(n, np.float32)
    butterfly_kernel[1, n](vals, out_sum, out_max)
    for w in range(2):
        seg = slice(32 * w, 32 * w + 32)
        np.testing.assert_allclose(out_sum[seg], vals[seg].astype(np.float64).sum(), rtol=1e-5)
        np.testing.assert_array_equal(out_max[seg], vals[seg].max())
        # every lane of the butterfly holds the same bits of the sum
        assert len(set(out_sum[seg].tolist())) == 1


@cuda.jit
def grid_2d_butterfly_kernel(values, out):
    """2-D blocks, several of them: warps follow the linear id x + y * blockDim.x."""
    t = cuda.threadIdx.x + cuda.threadIdx.y * cuda.blockDim.x
    nthreads = cuda.blockDim.x * cuda.blockDim.y
    i = cuda.blockIdx.x * nthreads + t
    n = min(32, nthreads - (t - t % 32))  # lanes in this warp (a power of two here)
    mask = FULL if n == 32 else (1 << n) - 1
    s = values[i]
    offset = n // 2
    while offset > 0:
        s += cuda.shfl_xor_sync(mask, s, offset)
        offset //= 2
    out[i] = s


def test_grid_of_2d_blocks():
    """3 blocks of 16 x 3 = 48 threads: warp 0 is y = 0-1, warp 1 (16 lanes) is y = 2."""
    n = 3 * 48
    vals = np.arange(n, dtype=np.int32) * 7 % 101
    out = np.zeros(n, np.int32)
    grid_2d_butterfly_kernel[3, (16, 3)](vals, out)
    for b in range(3):
        w0 = slice(48 * b, 48 * b + 32)
        w1 = slice(48 * b + 32, 48 * b + 48)
        assert (out[w0] == vals[w0].sum()).all()
        assert (out[w1] == vals[w1].sum()).all()


# ---------------------------------------------------------------------------------------------
# Votes, ballot, match
# ---------------------------------------------------------------------------------------------
def pattern(name, n):
    tid = np.arange(n)
    lane = tid % 32
    return {
        "all": np.ones(n),
        "none": np.zeros(n),
        "every3": lane % 3 == 0,
        "lane31": lane == 31,
        "upper": lane >= 16,
        "lane0_x7": np.where(lane == 0, 7, 0),  # predicate is any nonzero int
    }[name].astype(np.int32)


@pytest.mark.parametrize("n", [64, 40, 48])
@pytest.mark.parametrize("name", ["all", "none", "every3", "lane31", "upper", "lane0_x7"])
def test_votes_and_ballot(n, name):
    pred = pattern(name, n)
    out_all, out_any, out_eq = (np.full(n, -1, np.int32) for _ in range(3))
    out_ballot = np.zeros(n, np.uint32)
    vote_kernel[1, n](pred, out_all, out_any, out_eq, out_ballot)
    for w in range((n + 31) // 32):
        seg = slice(32 * w, min(n, 32 * w + 32))
        p = pred[seg] != 0
        assert (out_all[seg] == int(p.all())).all()
        assert (out_any[seg] == int(p.any())).all()
        assert (out_eq[seg] == int(p.all() or not p.any())).all()
        assert (out_ballot[seg] == lanes_mask(np.flatnonzero(p))).all()


def test_ballot_hand_checked():
    pred = pattern("every3", 32)
    out = np.zeros(32, np.uint32)
    vote_kernel[1, 32](pred, *(np.zeros(32, np.int32) for _ in range(3)), out)
    assert out[0] == 0b01001001001001001001001001001001  # lanes 0, 3, ..., 30
    pred = pattern("lane31", 32)
    vote_kernel[1, 32](pred, *(np.zeros(32, np.int32) for _ in range(3)), out)
    assert out[5] == 0x80000000


def test_ballot_with_subset_mask():
    pred = pattern("every3", 32)
    out = np.full(32, 12345, np.uint32)
    even_lanes_ballot_kernel[1, 32](pred, out)
    expect = lanes_mask(i for i in range(0, 32, 2) if i % 3 == 0)  # 0, 6, 12, 18, 24, 30
    assert (out[0::2] == expect).all()
    assert (out[1::2] == 12345).all()


def test_match_any_and_all():
    values = (np.arange(32) // 4).astype(np.int32)  # groups of 4 lanes share a value
    out_any = np.zeros(32, np.uint32)
    out_all_mask = np.full(32, 99, np.uint32)
    out_all_pred = np.full(32, 99, np.int32)
    match_kernel[1, 32](values, out_any, out_all_mask, out_all_pred)
    for lane in range(32):
        assert out_any[lane] == 0xF << (4 * (lane // 4))
    assert (out_all_mask == 0).all() and (out_all_pred == 0).all()
    same = np.full(32, 2.5, np.float32)
    out_f = np.zeros(32, np.uint32)
    match_kernel[1, 32](same, out_f, out_all_mask, out_all_pred)
    assert (out_f == FULL).all()
    assert (out_all_mask == FULL).all() and (out_all_pred == 1).all()


# ---------------------------------------------------------------------------------------------
# syncwarp, lanemask_lt, activemask
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [64, 40])
def test_syncwarp_orders_shared_memory(n):
    out = np.zeros(n, np.int32)
    syncwarp_kernel[1, n](out)
    tid = np.arange(n)
    base = tid - tid % 32
    width = np.minimum(32, n - base)
    np.testing.assert_array_equal(out, 3 * (base + (tid % 32 + 1) % width) + 1)


def test_syncwarp_subset_mask():
    out = np.zeros(32, np.int32)
    syncwarp_half_kernel[1, 32](out)
    np.testing.assert_array_equal(out[:16], 10 * (15 - np.arange(16)))
    assert (out[16:] == -1).all()


@pytest.mark.parametrize("n", [64, 40])
def test_lanemask_lt_and_activemask(n):
    out_lt = np.zeros(n, np.uint32)
    out_active = np.zeros(n, np.uint32)
    lanemask_activemask_kernel[1, n](out_lt, out_active)
    lane = np.arange(n) % 32
    np.testing.assert_array_equal(out_lt, (1 << lane) - 1)
    existing = np.array([FULL if 32 * (t // 32) + 32 <= n else (1 << (n % 32)) - 1
                         for t in range(n)], dtype=np.uint64)
    active = out_active.astype(np.uint64)
    assert ((active >> lane.astype(np.uint64)) & 1 == 1).all()  # the caller is active
    assert (active & ~existing & FULL == 0).all()  # no lane past the end of the block
    if SIM:  # the simulator is exact: all lanes of the warp reach the call together
        np.testing.assert_array_equal(active, existing)


@cuda.jit
def divergent_activemask_kernel(out):
    lane = cuda.threadIdx.x
    if lane % 4 == 0:
        out[lane] = cuda.activemask()
    else:
        cuda.syncwarp(0xEEEEEEEE)
        out[lane] = cuda.activemask()


@sim_only
def test_activemask_divergent_branches():
    """The simulator's model of convergence: the lanes at the same call site together."""
    out = np.zeros(32, np.uint32)
    divergent_activemask_kernel[1, 32](out)
    assert (out[0::4] == 0x11111111).all()
    others = np.arange(32) % 4 != 0
    assert (out[others] == 0xEEEEEEEE).all()


def test_exited_lanes_are_excused_from_syncwarp_and_ballot():
    """CUDA: all *non-exited* lanes named in the mask must take part; exited ones do not."""
    out = np.zeros(32, np.uint32)
    exit_then_syncwarp_kernel[1, 32](out)
    assert (out[16:] == 0x5555).all()  # ballot: even lanes among 0-15
    if SIM:
        assert (out[:16] == 0xFFFF).all()  # after syncwarp, 16-31 are known to have exited


# ---------------------------------------------------------------------------------------------
# Simulator-only: types, installation
# ---------------------------------------------------------------------------------------------
@sim_only
def test_install_is_idempotent_and_reported():
    assert simwarp.installed()
    simwarp.install()
    simwarp.install()
    assert simwarp.installed()
    from numba.cuda.simulator.kernelapi import FakeCUDAModule

    for name in ("shfl_sync", "shfl_down_sync", "ballot_sync", "syncwarp", "activemask"):
        assert hasattr(FakeCUDAModule, name)
    out = np.zeros(32, np.float32)
    warp_sum_tree_kernel[1, 32](np.ones(32, np.float32), out)  # still works after reinstall
    assert (out == 32).all()


@sim_only
def test_value_types_are_kept():
    seen = {}

    @cuda.jit
    def types_kernel(f32, i32):
        i = cuda.threadIdx.x
        a = cuda.shfl_xor_sync(FULL, f32[i], 1)
        b = cuda.shfl_down_sync(FULL, i32[i], 1)
        c = cuda.shfl_sync(FULL, i, 0)
        if i == 0:
            seen["types"] = (type(a), type(b), type(c), type(cuda.all_sync(FULL, 1)))

    types_kernel[1, 32](np.ones(32, np.float32), np.ones(32, np.int32))
    assert seen["types"] == (np.float32, np.int32, int, bool)


# ---------------------------------------------------------------------------------------------
# Simulator-only: errors (each must end the launch promptly, leaving no thread behind)
# ---------------------------------------------------------------------------------------------
@cuda.jit
def early_return_kernel(values, out):
    i = cuda.threadIdx.x
    if i >= 16:
        return  # BUG: lanes 16-31 leave before the full-mask reduction
    v = values[i]
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(FULL, v, offset)
        offset //= 2
    out[i] = v


@sim_only
def test_error_lane_returned_early():
    t0 = time.monotonic()
    with pytest.raises(
        simwarp.WarpOpError,
        match=r"shfl_down_sync in block \(0,0,0\) warp 0 \(mask 0xffffffff\): "
        r"lanes 0-15 read from lanes 16-31, which did not take part: they have exited",
    ):
        early_return_kernel[1, 32](np.ones(32, np.float32), np.zeros(32, np.float32))
    assert time.monotonic() - t0 < 5


@sim_only
def test_error_full_mask_on_partial_warp():
    """40 threads: warp 1 has lanes 0-7 only, but the reduction names and reads lanes 16-31."""
    with pytest.raises(
        simwarp.WarpOpError,
        match=r"shfl_down_sync in block \(0,0,0\) warp 1 .*lanes 0-7 read from lanes 16-23, "
        r"which did not take part: they do not exist \(the block has 40 threads",
    ):
        warp_sum_tree_kernel[1, 40](np.ones(40, np.float32), np.zeros(40, np.float32))


@sim_only
def test_error_read_from_lane_not_in_mask():
    @cuda.jit
    def k(out):
        lane = cuda.threadIdx.x
        if lane < 8:
            out[lane] = cuda.shfl_sync(0xFF, lane, 20)  # lane 20 is not in the mask

    with pytest.raises(
        simwarp.WarpOpError,
        match=r"lanes 0-7 read from lane 20, which did not take part: it is not named",
    ):
        k[1, 32](np.zeros(32, np.int32))


@sim_only
def test_error_mismatched_operations():
    @cuda.jit
    def k(values, out):
        i = cuda.threadIdx.x
        if i == 5:
            out[i] = cuda.shfl_xor_sync(FULL, values[i], 1)
        else:
            out[i] = cuda.shfl_down_sync(FULL, values[i], 1)

    with pytest.raises(simwarp.WarpOpError, match=r"warp 0 .*called different operations"):
        k[1, 32](np.ones(32, np.float32), np.zeros(32, np.float32))


@sim_only
def test_error_caller_not_in_mask():
    @cuda.jit
    def k(out):
        i = cuda.threadIdx.x
        out[i] = cuda.ballot_sync(0xFFFFFFFE, 1)  # lane 0 calls without its own bit

    with pytest.raises(simwarp.WarpOpError, match=r"ballot_sync .*warp 0.*lane 0 called it"):
        k[1, 32](np.zeros(32, np.uint32))


@sim_only
def test_error_different_masks_deadlock():
    @cuda.jit
    def k(out):
        i = cuda.threadIdx.x
        mask = 0x3 if i == 0 else FULL  # lane 0 and lane 1 wait for each other
        out[i] = cuda.shfl_sync(mask, i, 0)

    t0 = time.monotonic()
    with pytest.raises(simwarp.WarpOpError, match=r"shfl_sync with mask 0x"):
        k[1, 32](np.zeros(32, np.int32))
    assert time.monotonic() - t0 < 5


@sim_only
def test_error_lane_waits_in_syncthreads():
    @cuda.jit
    def k(out):
        i = cuda.threadIdx.x
        if i == 3:
            cuda.syncthreads()  # BUG: lane 3 waits at the barrier, the others at a shuffle
        out[i] = cuda.shfl_xor_sync(FULL, i, 1)

    t0 = time.monotonic()
    with pytest.raises(
        simwarp.WarpOpError,
        match=r"wait for lane 3, named in the mask, .*lane 3 waits in cuda.syncthreads",
    ):
        k[1, 32](np.zeros(32, np.int32))
    assert time.monotonic() - t0 < 10


@sim_only
def test_error_elsewhere_does_not_hang_waiting_lanes():
    """A lane that raises makes the lanes waiting for it fail too, with the same error."""

    @cuda.jit
    def k(values, out):
        i = cuda.threadIdx.x
        if i == 40:
            raise ValueError("boom in thread 40")
        out[i] = cuda.shfl_xor_sync(FULL, values[i], 1)

    with pytest.raises(ValueError, match="boom in thread 40"):
        k[1, 64](np.ones(64, np.float32), np.zeros(64, np.float32))


@sim_only
def test_error_unsupported_value_type():
    @cuda.jit
    def k(out):
        i = cuda.threadIdx.x
        out[i] = cuda.shfl_sync(FULL, i > 3, 0)  # bool: numba-cuda rejects it too

    with pytest.raises(TypeError, match="shfl_sync only supports"):
        k[1, 32](np.zeros(32, np.int32))


@sim_only
def test_second_block_waits_for_lanes_still_being_created(monkeypatch):
    """The simulator creates a block's threads one by one: a lane not created yet counts as
    starting, never as exited. Here lane 31 of the second block is created 0.4 s late (as on a
    loaded machine, longer than the waiting lanes' first progress check), and its warp waits
    for it instead of finishing the shuffle without it."""
    from numba.cuda.simulator import kernel as sim_kernel

    init = sim_kernel.BlockThread.__init__

    def slow_init(self, f, manager, blockIdx, threadIdx, debug):
        if tuple(blockIdx)[0] == 1 and tuple(threadIdx)[0] == 31:
            time.sleep(0.4)                     # > POLL_S: the waiting lanes check progress
        init(self, f, manager, blockIdx, threadIdx, debug)

    monkeypatch.setattr(sim_kernel.BlockThread, "__init__", slow_init)
    values = np.arange(32, dtype=np.float64)
    out_sum, out_max = np.full(32, np.nan), np.full(32, np.nan)
    butterfly_kernel[2, 32](values, out_sum, out_max)      # (both blocks write the same out)
    np.testing.assert_array_equal(out_sum, values.sum())
    np.testing.assert_array_equal(out_max, 31.0)
