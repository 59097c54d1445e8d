"""§37: float32 attention through 3xTF32 on the tensor cores, as accurate as torch's
fp32 "efficient" SDPA backend.

The tensor core does not add as IEEE float32 does: a tf32 mma cuts its 8 products and c to the
grid of the largest and rounds the sum toward zero (Hopper's model, Khattak & Mikaitis 2025:
``kernels_numba/sim/mma.tf32_block_fma``, the simulator's twin). Three mmas a k8 step put
straight into the accumulators would give 3·N/8 roundings toward zero over N keys — 3–94×
(forward) and 12–100× (backward) torch's error on the H200 (docs/results.md) — so the 3xTF32
kernels sum each k8 step from zero and add it on the CUDA cores (``attention_tc.mma3``), as
torch's CUTLASS kernels stage theirs. ``scripts/tf32x3_error.py`` emulates each step's share.

- ``test_tensor_core_rounds_toward_zero`` (simulator and GPU): one mma whose result differs
  between IEEE addition, rounding toward zero, and the model — in the simulator a check of the
  twin, on a GPU a check that the hardware is what the twin models.
- ``test_3xtf32_product_is_staged`` (simulator and GPU): a 256-long product of positive terms
  through ``mma3``, within ``tolerance.tf32x3_dot_tol``; three mmas a k8 step straight into the
  accumulator (the old ``mma3``) are ~50u off here, 1.7× that bound.
- ``test_as_accurate_as_torch_efficient`` (GPU with torch): O and dq, dk, dv against float64,
  each at most 2× the error of torch's efficient backend on the same inputs; the wgmma
  forward's O and the wgmma backward's gradients the same.

Tiny shapes against float64 under the error model (dtype "tf32"): tests/test_attention_tc.py,
tests/test_attention_tc_backward.py.
"""

import numpy as np
import pytest
from conftest import GPU, SIM
from numba import cuda, float32

from flashlesson import attention, attention_backward
from flashlesson.tolerance import UNIT_ROUNDOFF, tf32x3_dot_tol
from flashlesson.kernels_numba import mma
from flashlesson.kernels_numba.attention_tc import mma3, split
from flashlesson.kernels_numba.sim.mma import tf32_block_fma

U = UNIT_ROUNDOFF["float32"]


def test_tensor_core_rounds_toward_zero():
    """c = ±1 plus tf32 products below its last bit. Rows 0–7: one product of 0.75 ulp(1)
    (IEEE: 1 + ulp; toward zero: 1). Rows 8–15: seven of 0.1875 ulp each, 1.3125 ulp together
    (IEEE and an exact sum rounded toward zero: 1 + ulp; the model cuts each to the grid
    ulp/4 first: 1). Columns 4–7 the same, negative."""
    a = np.zeros((16, 8), np.float32)
    a[:8, 0] = 1.5 * 2.0 ** -13
    a[8:, 1:] = 1.5 * 2.0 ** -13
    b = np.zeros((8, 8), np.float32)
    b[0] = 2.0 ** -11
    b[1:] = 2.0 ** -13
    b[:, 4:] *= -1
    c = np.ones((16, 8), np.float32)
    c[:, 4:] = -1
    d = np.full((16, 8), np.nan, np.float32)
    mma.mma_tf32_kernel[1, 32](a, b, c, d)
    want = tf32_block_fma(a, b, c)
    np.testing.assert_array_equal(want, c)              # the model: ±1 everywhere
    ieee = (a.astype(np.float64) @ b + c).astype(np.float32)
    assert not np.any(ieee == c)                        # (IEEE would not be)
    np.testing.assert_array_equal(
        d, want, err_msg="the tensor core does not add as kernels_numba/sim/mma.tf32_block_fma "
                         "models it (rows 0–7: its final rounding; rows 8–15: the alignment)")


K = 256                         # 32 k8 steps: 96 mmas, ~3 s in the simulator


@cuda.jit
def product_kernel(a, b, c):
    """c[16, 8] = a[16, K] · b[K, 8] by mma3, one k8 step at a time (one warp)."""
    lane = cuda.threadIdx.x
    g, t = lane // 4, lane % 4
    pa = cuda.local.array(4, float32)           # a k8 step of A, split: big …
    ps = cuda.local.array(4, float32)           # … and small
    c0 = c1 = c2 = c3 = float32(0)
    for kc in range(a.shape[1] // 8):
        split(a[g, 8 * kc + t], pa, ps, 0)
        split(a[g + 8, 8 * kc + t], pa, ps, 1)
        split(a[g, 8 * kc + t + 4], pa, ps, 2)
        split(a[g + 8, 8 * kc + t + 4], pa, ps, 3)
        c0, c1, c2, c3 = mma3(pa[0], pa[1], pa[2], pa[3], ps[0], ps[1], ps[2], ps[3],
                              b[8 * kc + t, g], b[8 * kc + t + 4, g], c0, c1, c2, c3)
    c[g, 2 * t] = c0
    c[g, 2 * t + 1] = c1
    c[g + 8, 2 * t] = c2
    c[g + 8, 2 * t + 1] = c3


def test_3xtf32_product_is_staged(rng):
    """Positive terms, so that every rounding toward zero pulls the same way: the product within
    tolerance.tf32x3_dot_tol (≈ 30u here; seen ≈ 5u), which three mmas a k8 step into one
    running accumulator exceed (≈ 50u at K = 256, growing as K)."""
    a = rng.uniform(0.5, 1.0, (16, K)).astype(np.float32)
    b = rng.uniform(0.5, 1.0, (K, 8)).astype(np.float32)
    c = np.full((16, 8), np.nan, np.float32)
    product_kernel[1, 32](a, b, c)
    terms = a.astype(np.float64)[:, None, :] * b.T.astype(np.float64)[None, :, :]  # [16, 8, K]
    want = terms.sum(axis=-1)
    bound = tf32x3_dot_tol(terms)
    worst = np.max(np.abs(c - want) / bound)
    assert worst <= 1, (f"3xTF32 product {np.max(np.abs(c - want) / want) / U:.0f}u off, "
                        f"{worst:.2f}× the bound")


# --- the GPU: against torch's efficient backend, same inputs --------------------------------------
TORCH_SHAPES = [(1, 2, 1024, 64), (1, 1, 4096, 64), (1, 1, 2048, 128)]


def _host(x):
    return np.asarray(x.copy_to_host() if hasattr(x, "copy_to_host") else x, np.float64)


def _torch_runs(rng, shape, causal):
    """(q, k, v, dO, torch's float64 O and grads, torch efficient's float32 ones)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    q, k, v, do = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))

    def torch_run(dtype):
        xs = [torch.tensor(x, device="cuda", dtype=dtype, requires_grad=True) for x in (q, k, v)]
        o = sdpa(*xs, is_causal=causal)          # (Nq = Nk: top-left causal = bottom-right)
        grads = torch.autograd.grad(o, xs, torch.tensor(do, device="cuda", dtype=dtype))
        return [t.detach().double().cpu().numpy() for t in (o, *grads)]

    ref = torch_run(torch.float64)
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        theirs = torch_run(torch.float32)
    return q, k, v, do, ref, theirs


def _within_2x(names, ours, theirs, ref):
    report = []
    for name, x, y, r in zip(names, ours, theirs, ref):
        e_ours, e_theirs = np.max(np.abs(x - r)), np.max(np.abs(y - r))
        report.append(f"{name}: {e_ours:.2e} vs torch {e_theirs:.2e}")
        assert e_ours <= 2 * e_theirs, "; ".join(report)
    print("; ".join(report))


@pytest.mark.skipif(not GPU, reason="torch's efficient backend runs on a GPU")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", TORCH_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_as_accurate_as_torch_efficient(rng, shape, causal):
    """O, dq, dk, dv of method "flash_tc" on float32 inputs (3xTF32; the backward from our own
    O and LSE) and of torch SDPA's EFFICIENT_ATTENTION backend (3xTF32 too, CUTLASS) against
    torch's float64 math backend: each max |error| ≤ 2× torch's. With the three mmas summed
    straight into the accumulators, on the H200: O 3–94×, the gradients 12–100× torch's
    (docs/results.md)."""
    q, k, v, do, ref, theirs = _torch_runs(rng, shape, causal)
    o, lse = attention(q, k, v, causal=causal, return_lse=True, method="flash_tc")
    grads = attention_backward(do, q, k, v, o, lse, causal=causal, method="flash_tc")
    _within_2x(("O", "dq", "dk", "dv"), [_host(x) for x in (o, *grads)], theirs, ref)


@pytest.mark.skipif(not GPU, reason="torch's efficient backend runs on a GPU")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", TORCH_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_wgmma_forward_as_accurate_as_torch_efficient(rng, shape, causal):
    """O of method "flash_wgmma" on float32 inputs (3xTF32 on wgmma, staged every 32 of k as
    torch's kernels: attention_wgmma_tf32) within 2× torch efficient's error."""
    q, k, v, do, ref, theirs = _torch_runs(rng, shape, causal)
    o = attention(q, k, v, causal=causal, method="flash_wgmma")
    _within_2x(("O",), [_host(o)], theirs, ref)


@pytest.mark.skipif(not GPU, reason="torch's efficient backend runs on a GPU")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", TORCH_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_wgmma_backward_as_accurate_as_torch_efficient(rng, shape, causal):
    """dq, dk, dv of method "flash_wgmma" on float32 inputs (3xTF32 on wgmma: every 32 of k
    summed from zero, Q tiles last to first: attention_wgmma_tf32_backward), from the
    wgmma forward's O and LSE, within 2× torch efficient's error."""
    q, k, v, do, ref, theirs = _torch_runs(rng, shape, causal)
    o, lse = attention(q, k, v, causal=causal, return_lse=True, method="flash_wgmma")
    grads = attention_backward(do, q, k, v, o, lse, causal=causal, method="flash_wgmma")
    _within_2x(("dq", "dk", "dv"), [_host(x) for x in grads], theirs[1:], ref[1:])


@pytest.mark.skipif(not SIM, reason="the simulator's twin; on a GPU the first test checks the "
                                    "hardware itself")
def test_the_twin_is_the_model(rng):
    """The tf32 mma twin is tf32_block_fma on the fragments (random inputs, outliers)."""
    a = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    c = (rng.standard_normal((16, 8)) * 100).astype(np.float32)
    a[3, 5], b[7, 2] = 1000.0, -999.0
    d = np.full((16, 8), np.nan, np.float32)
    mma.mma_tf32_kernel[1, 32](a, b, c, d)
    from flashlesson.kernels_numba.sim.mma import tf32
    a32 = np.vectorize(tf32)(a).astype(np.float32)
    b32 = np.vectorize(tf32)(b).astype(np.float32)
    np.testing.assert_array_equal(d, tf32_block_fma(a32, b32, c))
