"""§42–43 on Hopper's machinery (``kernels_numba/attention_async.py``, method "flash_async"):
K/V tiles by bulk copies into a ring of stages, FULL/EMPTY mbarriers; §42 (warp 0 issues and
computes, two stages) and §43 (a producer warpgroup, 2–4 stages), against the float64 oracle on
shapes that break tiling, with every output poisoned (NaN) before the kernel runs
(``conftest``: ``flashlesson.arrays.POISON``), and NaN/±inf in the K/V rows of masked keys.

In the simulator the mbarriers, the bulk copies (landing when a thread waits on their
mbarrier), the named barrier and setmaxnreg are ``kernels_numba/sim/hopper.py``'s twins; a
wait that can never end raises there. On an H200 (sm_90) the same tests run the real
instructions (``bash scripts/gpu_green.sh``, or this file alone with FLASHLESSON_DEVICE=gpu)."""

import numpy as np
import pytest
from conftest import by_device, check_attention
from numba import cuda

from flashlesson import FlashConfig, attention, checks, loop_order
from flashlesson.arrays import empty
from flashlesson.dropout import dropout_args
from flashlesson.reference import attention as ref_attention
from flashlesson.reference.philox import dropout_keep_mask

ASYNC = loop_order.ASYNC
# §42: the simulator's default tiles (Br 32, Bc 16, 32 threads); on the GPU small tiles of
# 64 threads, so that tiny shapes still have several tiles
SMALL = by_device(None, FlashConfig(Br=32, Bc=32, TR=8, TC=8))
# §43: one consumer warpgroup (128 threads): Br 64, Bc 32
WS = FlashConfig(Br=64, Bc=32, TR=16, TC=8)


def _qkv(rng, B, H, nq, nk, d):
    return (rng.standard_normal((B, H, n, d)).astype(np.float32) for n in (nq, nk, nk))


def _launch(q, k, v, causal, config, scale=None, **kw):
    """launch_async on fresh device outputs, poisoned (NaN) first; host (o, lse)."""
    B, H, nq, d = q.shape
    o = empty(B * H * nq * d, np.float32)
    lse = empty(B * H * nq, np.float32)
    o.copy_to_device(np.full(o.shape, np.nan, np.float32))
    lse.copy_to_device(np.full(lse.shape, np.nan, np.float32))
    loop_order.launch_async(*(cuda.to_device(x.reshape(-1)) for x in (q, k, v)), o, lse, d=d,
                            n_q=nq, n_k=k.shape[2], heads=H, bh=B * H, causal=causal,
                            scale=scale or d ** -0.5, config=config, **kw)
    return o.copy_to_host().reshape(q.shape), lse.copy_to_host().reshape(q.shape[:3])


# (B, H, Nq, Nk, d, causal): N = 1; N < a tile; N not a multiple of Bc (3 K/V tiles, the ring
# of 2 wraps); causal with the last key a Q tile sees on a K/V tile's edge (row 15 sees key
# 15 + 16 = 31, the last of tile 1); d = 12 < D = 16 (K's pad columns zeroed); Nq > Nk causal
# (rows that see no key); d = D: V's tile in one bulk copy (else one a row)
SHAPES_42 = [(1, 1, 1, 1, 8, False), (1, 1, 5, 7, 8, True), (1, 2, 37, 45, 8, False),
             (1, 1, 16, 32, 8, True), (1, 1, 37, 45, 12, True), (1, 1, 40, 21, 4, True),
             (1, 1, 37, 45, by_device(16, 32), False)]


@pytest.mark.parametrize("shape", SHAPES_42, ids=str)
def test_double_buffer_on_mbarriers(shape, rng):
    """§42 through the public call: method "flash_async", two stages, against the oracle."""
    B, H, nq, nk, d, causal = shape
    q, k, v = _qkv(rng, B, H, nq, nk, d)
    o, lse = attention(q, k, v, causal=causal, method=ASYNC, config=SMALL, return_lse=True)
    check_attention(o, lse, *ref_attention(q, k, v, causal=causal), q, k, v)


@pytest.mark.parametrize("stages,d", [(2, 8), (3, 32)])
def test_producer_warpgroup(stages, d, rng):
    """§43: a producer warpgroup, 2 or 3 stages; 4 K/V tiles (the last partial: the ring wraps),
    causal and not, Nq ≠ Nk; d = 8 < D = 32 (V by rows) and d = D (V's tile in one copy).
    (One Q tile of 64 rows: the simulator runs 256 threads a block.)"""
    q, k, v = _qkv(rng, 1, 1, 40, 100, d)
    for causal in (False, True):
        o, lse = _launch(q, k, v, causal, WS, producers=1, stages=stages)
        check_attention(o, lse, *ref_attention(q, k, v, causal=causal), q, k, v)


def _poisoned(rng, B, H, nq, nk, d):
    """q, k, v with NaN/±inf in the K and V rows of padded keys; the padding mask; the same
    k, v with those rows zeroed (for the oracle and the error bound: a masked key contributes
    nothing, so the finite result is the same)."""
    q, k, v = _qkv(rng, B, H, nq, nk, d)
    kpm = rng.random((B, nk)) > 0.3
    kpm[:, :2] = True                           # (every batch row sees some key)
    kpm[0, 13:16] = False                       # keys 13–15: the stage slots that the last
    kpm[0, 45:48 if nk >= 48 else nk] = False   # tile's rows past Nk reuse (stale NaN rows)
    kc, vc = k.copy(), v.copy()
    for b in range(B):
        for j in np.flatnonzero(~kpm[b]):
            k[b, :, j] = (np.nan, np.inf, -np.inf)[j % 3]
            v[b, :, j] = (np.inf, np.nan, -np.inf)[j % 3]
            kc[b, :, j] = vc[b, :, j] = 0
    return q, k, v, kc, vc, kpm


@pytest.mark.parametrize("causal", [False, True])
def test_masked_keys_hold_nan(causal, rng):
    """§42: padded keys' K/V rows hold NaN/±inf, Nk = 45 is not a multiple of Bc = 16: the
    last tile's rows past Nk hold the NaN rows of tile 0 (the same stage). Nothing reaches O
    or LSE."""
    B, H, nq, nk, d = 2, 1, 20, 45, 8
    q, k, v, kc, vc, kpm = _poisoned(rng, B, H, nq, nk, d)
    o, lse = attention(q, k, v, causal=causal, method=ASYNC, config=SMALL,
                       key_padding_mask=kpm, return_lse=True)
    check_attention(o, lse, *ref_attention(q, kc, vc, causal=causal, key_padding_mask=kpm),
                    q, kc, vc)


def test_producer_warpgroup_padding_and_dropout(rng):
    """§43 with a padding mask (NaN/±inf in the padded rows), §36 dropout, causal, 4 stages."""
    B, H, nq, nk, d = 2, 1, 21, 70, 8
    q, k, v, kc, vc, kpm = _poisoned(rng, B, H, nq, nk, d)
    _, drop = dropout_args(0.2, 7)
    o, lse = _launch(q, k, v, True, WS, producers=1, stages=4,
                     kpm=checks.key_padding_mask(kpm, B, nk), dropout=drop)
    mask = dropout_keep_mask(7, B, H, nq, nk, 0.2)
    check_attention(o, lse, *ref_attention(q, kc, vc, causal=True, key_padding_mask=kpm,
                                           dropout_mask=mask, dropout_p=0.2), q, kc, vc,
                    dropout_p=0.2)


def test_refusals(rng):
    """What the kernels cannot run is refused with its reason, before any launch."""
    q, k, v = _qkv(rng, 1, 1, 4, 4, 6)
    with pytest.raises(ValueError, match="d must be a multiple of 4, got d = 6"):
        attention(q, k, v, method=ASYNC)
    q, k, v = _qkv(rng, 1, 1, 4, 4, 8)
    with pytest.raises(ValueError, match="producers: method 'flash_async' takes 0"):
        _launch(q, k, v, False, None, producers=2)
    with pytest.raises(ValueError, match="stages: expected an int from 2 to 4"):
        _launch(q, k, v, False, None, stages=5)
    with pytest.raises(ValueError, match="whole warpgroups"):
        _launch(q, k, v, False, FlashConfig(Br=32, Bc=16, TR=8, TC=4), producers=1)
    with pytest.raises(ValueError, match="shared memory"):
        _launch(*_qkv(rng, 1, 1, 4, 4, 128), False, FlashConfig(Br=128, Bc=64, TR=32, TC=8),
                producers=1, stages=4)
    with pytest.raises(ValueError, match="tier: attention method 'flash_async' has no lesson"):
        attention(q, k, v, method=ASYNC, tier="lesson")


def test_register_split_and_ring_sizes():
    """§43's register budgets conserve the block's pool and fit the SM's 64 K registers; the
    ring's shared memory at d = 64 with flash's tiles."""
    from flashlesson.kernels_numba.attention_async import async_smem_floats, register_split
    assert register_split(128) == (40, 248, 144) and register_split(256) == (40, 232, 168)
    for consumers, (p, c, cap) in ((128, register_split(128)), (256, register_split(256))):
        assert 128 * p + consumers * c == (128 + consumers) * cap     # the pool is conserved
        assert (128 + consumers) * cap <= 65536
    # the ring at d = 64 with flash's tiles: 2 stages 135 KB, 4 stages 203 KB (≤ 227 KB)
    assert 4 * async_smem_floats(64, 128, 64, 2) == 135_296
    assert 4 * async_smem_floats(64, 128, 64, 4) <= 227 * 1024


# --- the PTX for sm_90a: compiled and assembled without a GPU (NVVM and ptxas needed) --------
PTX_SCRIPT = """
import sys
from numba import cuda, types
import numba.cuda.dispatcher

class Hopper:                       # device functions compile for the current device's cc:
    compute_capability = (9, 0)     # without a GPU, say it is an H100/H200's

if not cuda.is_available():
    numba.cuda.dispatcher.get_current_device = Hopper
from flashlesson.kernels_numba import attention_async as KAS

arr = lambda dt, nd=1: types.Array(dt, nd, "C")
f32, i64, u32 = types.float32, types.int64, types.uint32
sig = (arr(f32),) * 5 + (f32, i64, i64, i64, i64, arr(types.uint8, 2), u32, u32, u32, f32)
for name, producers, stages, causal in (("s42", 0, 2, True), ("s43", 1, 4, True)):
    k = KAS.flash_async_kernel(64, 128, 64, 16, 8, causal, 2, True, True, producers, stages)
    ptx, _ = cuda.compile_ptx(k.py_func, sig, cc=(9, 0, "a"))
    open(f"{sys.argv[1]}/{name}.ptx", "w").write(ptx)
"""


def test_ptx_for_sm90a(tmp_path):
    """§42 and §43 at d = 64 with flash's tiles (causal, padding, dropout: every path) compiled
    with ``compile_ptx(cc=(9, 0, "a"))`` in a process without the simulator: the PTX holds the
    bulk copies, the mbarrier protocol, §43's named barrier and setmaxnreg; where ptxas is
    found, it assembles for sm_90a (§43 under its register cap) and says what spills."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from flashlesson.kernels_numba.attention_async import register_split
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        load_nvidia_dynamic_lib("nvrtc")
        load_nvidia_dynamic_lib("nvvm")
    except Exception as e:              # (ImportError, DynamicLibNotFoundError)
        pytest.skip(f"no NVVM here: {type(e).__name__}: {str(e)[:150]}")
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_ENABLE_CUDASIM", "FLASHLESSON_DEVICE")}
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "src"),
                                         env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", PTX_SCRIPT, str(tmp_path)], cwd=root, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    s42, s43 = ((tmp_path / f"{n}.ptx").read_text() for n in ("s42", "s43"))
    for ptx in (s42, s43):
        assert ".target sm_90a" in ptx
        for want in ("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
                     "mbarrier.arrive.expect_tx.shared::cta.b64", "mbarrier.try_wait.parity",
                     "mbarrier.init.shared::cta.b64", "fence.mbarrier_init"):
            assert want in ptx
    pregs, cregs, cap = register_split(128)
    assert f"setmaxnreg.dec.sync.aligned.u32 {pregs}" in s43
    assert f"setmaxnreg.inc.sync.aligned.u32 {cregs}" in s43 and "bar.sync %r" in s43
    assert "setmaxnreg" not in s42
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        return
    for name, cap_args in (("s42", []), ("s43", ["-maxrregcount", str(cap)])):
        a = subprocess.run([ptxas, "-arch=sm_90a", "-v", *cap_args, str(tmp_path / f"{name}.ptx"),
                            "-o", str(tmp_path / f"{name}.cubin")], capture_output=True, text=True)
        assert a.returncode == 0, f"ptxas {name}: {a.stderr[-2000:]}"
        assert "Performance Loss" not in a.stderr, a.stderr[-2000:]    # C7508: setmaxnreg ignored
        used = [line.split(":", 1)[1].strip() for line in a.stderr.splitlines() if "Used" in line]
        spills = [line.strip() for line in a.stderr.splitlines() if "spill" in line]
        print(f"ptxas {name}: {'; '.join(used)}; {'; '.join(spills)}")
        if name == "s43":               # ptxas gives the kernel its cap: the pool setmaxnreg splits
            assert f"Used {cap} registers" in a.stderr
