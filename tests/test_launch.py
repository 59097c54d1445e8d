"""The launch layer: plans cached per key and reused, the fast launch path past
Numba's dispatcher and its fallback, DevArray views, torch in → torch out on torch's stream,
two kernels side by side on a forked stream, CUDA-graph capture of a flashlesson.torch training
step.

Plan builds are counted in the simulator too (it launches through the same plan objects, with
Numba's simulated call); the fast path, torch tensors and graphs need the GPU.
"""

import threading

import numpy as np
import pytest
from numba import cuda

import flashlesson as fl
from flashlesson import launch
from flashlesson.arrays import DevArray
from flashlesson.device import SIMULATOR as SIM
from flashlesson.reference import softmax_stable

from conftest import by_device

gpu = pytest.mark.skipif(SIM, reason="GPU: the fast launch path, torch tensors, CUDA graphs")


def test_plan_is_built_once_per_key_and_reused(rng):
    rows, n = by_device((2, 32), (64, 1000))
    x = cuda.to_device(rng.standard_normal((rows, n)).astype(np.float32))
    launch.clear_plans()
    built = launch.STATS["plans"]
    y1 = fl.softmax(x).copy_to_host()
    after_first = launch.STATS["plans"]
    assert after_first > built                          # the first call builds its plan(s)
    y2 = fl.softmax(x).copy_to_host()
    assert launch.STATS["plans"] == after_first         # the same call: reused, none built
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_allclose(y1, softmax_stable(x.copy_to_host().astype(np.float64)),
                               rtol=1e-5, atol=1e-7)
    x2 = cuda.to_device(rng.standard_normal((rows + 1, n)).astype(np.float32))
    fl.softmax(x2)
    assert launch.STATS["plans"] == after_first + 1     # a new shape: a new plan
    key_plans = [p for p in launch._PLANS.values() if p.calls]
    assert max(p.calls for p in key_plans) >= 2


def test_refused_launch_leaves_no_plan():
    before = dict(launch._PLANS)
    with pytest.raises(ValueError, match="grid's y axis"):
        launch.plan_for(launch._probe_kernel(), (1, 70000), 32, ())
    assert launch._PLANS == before


def test_devarray_views_follow_numpy():
    a = DevArray(0x1000, (2, 3, 8), np.float16, owner=None)
    assert a.strides == np.empty((2, 3, 8), np.float16).strides
    assert a.reshape(-1).shape == (48,) and a.reshape((6, -1)).shape == (6, 8)
    w = a.view(np.uint32)
    assert w.shape == (2, 3, 4) and w.ptr == a.ptr and w.nbytes == a.nbytes
    assert a.__cuda_array_interface__["typestr"] == np.dtype(np.float16).str
    with pytest.raises(ValueError):
        a.reshape(5, 5)
    with pytest.raises(ValueError):
        DevArray(0, (3,), np.uint8, None).view(np.uint16)


@gpu
def test_both_launch_paths_agree(monkeypatch, rng):
    """Fast path and Numba's call (FLASHLESSON_FAST_LAUNCH=0): bitwise the same results (the
    same compiled kernels), each path counted."""
    B, H, N, d = 2, 2, 100, 64
    q, k, v, do = (cuda.to_device(rng.standard_normal((B, H, N, d)).astype(np.float32))
                   for _ in range(4))
    results = {}
    for fast in (True, False):
        monkeypatch.setattr(launch, "FAST", fast)
        launch.clear_plans()
        before = dict(launch.STATS)
        o, lse = fl.attention(q, k, v, causal=True, return_lse=True)
        grads = fl.attention_backward(do, q, k, v, o, lse, causal=True)
        y = fl.softmax(q)
        results[fast] = [a.copy_to_host() for a in (o, lse, y, *grads)]
        path = "fast" if fast else "numba"
        assert launch.STATS[path] >= before[path] + 4
        if not fast:
            assert launch.STATS["fast"] == before["fast"]
    launch.clear_plans()
    for a, b in zip(results[True], results[False]):
        np.testing.assert_array_equal(a, b)


@gpu
def test_fast_path_failure_falls_back_once(monkeypatch, capsys, rng):
    """A fast path that breaks at plan build: said once on stderr, then Numba's call, right
    results."""
    def broken(self, args):
        raise RuntimeError("simulated: a private Numba attribute moved")
    monkeypatch.setattr(launch.Plan, "_build_fast", broken)
    monkeypatch.setitem(launch._STATE, "broken", None)
    monkeypatch.setitem(launch._STATE, "warned", False)
    launch.clear_plans()
    x = rng.standard_normal((8, 300)).astype(np.float32)
    try:
        y1 = fl.softmax(cuda.to_device(x)).copy_to_host()
        y2 = fl.softmax(cuda.to_device(x[:4])).copy_to_host()
    finally:
        launch.clear_plans()
    err = capsys.readouterr().err
    assert err.count("flashlesson: warning:") == 1 and "Numba's call" in err
    np.testing.assert_allclose(y1, softmax_stable(x.astype(np.float64)), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(y2, y1[:4])


@gpu
@pytest.mark.parametrize("plans", [True, False], ids=["replayed", "full path"])
def test_a_fresh_thread_launches(monkeypatch, plans):
    """A call made first on this thread, then on a thread that never used CUDA through Numba
    (as torch's autograd runs a backward): the same result. The launch layer makes the context
    current on each thread it launches from; without that the second call raises
    CUDA_ERROR_INVALID_CONTEXT (seen on the H200 in ``flashlesson bench overhead``'s
    flashlesson.torch step)."""
    torch = pytest.importorskip("torch")
    from flashlesson import calls
    monkeypatch.setattr(calls, "ENABLED", plans)
    x = torch.randn(4, 300, device="cuda")
    want = fl.softmax(x)
    fl.softmax(x)                               # (plans: recorded, then replayed)
    got = {}

    def other():
        try:
            got["y"] = fl.softmax(x)
            torch.cuda.synchronize()
        except Exception as exc:                # noqa: BLE001 - reported below
            got["error"] = exc
    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert "error" not in got, got.get("error")
    assert torch.equal(got["y"], want)


@gpu
def test_a_launch_error_keeps_the_fast_path(rng):
    """A kernel whose first launch fails both ways (too many threads a block): the launch's
    error raised, and the fast path still on for the next call."""
    @cuda.jit
    def fill(out):
        out[cuda.grid(1)] = 1.0
    out = DevArray.from_interface(cuda.device_array(4096, np.float32))
    with pytest.raises(Exception):
        launch.launch(fill, 1, 2048, (out,))
    assert launch.fast_state() is None
    launch.launch(fill, 4, 1024, (out,))
    assert launch.fast_state() is None


@gpu
def test_torch_in_torch_out_dtypes_and_stream():
    torch = pytest.importorskip("torch")
    x = torch.randn(4, 300, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):                  # the kernels go to s, the result lives there
        y = fl.softmax(x)
    s.synchronize()
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == x.shape
    torch.testing.assert_close(y, torch.softmax(x, -1), rtol=2e-5, atol=1e-7)
    for dt in (torch.float16, torch.bfloat16):
        q, k, v = (torch.randn(1, 2, 64, 64, device="cuda", dtype=dt) for _ in range(3))
        o, lse = fl.attention(q, k, v, return_lse=True)
        assert isinstance(o, torch.Tensor) and o.dtype == dt and lse.dtype == torch.float32
        want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
        assert (o.float() - want).abs().max().item() < (2e-2 if dt == torch.bfloat16 else 4e-3)
        grads = fl.attention_backward(torch.ones_like(o), q, k, v, o, lse)
        assert all(isinstance(g, torch.Tensor) and g.dtype == dt for g in grads)


@gpu
@pytest.mark.parametrize("plans", [True, False], ids=["replayed", "full path"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_side_by_side_kernels_match_one_stream(monkeypatch, plans, dtype):
    """The wgmma backwards launch their dK/dV and dQ kernels side by side
    (launch.launch_beside): on torch's default stream and on a stream of the caller's, full
    path and replayed, the gradients bitwise equal to the one-stream launch (SIDE off), and
    ready once the caller's stream is."""
    torch = pytest.importorskip("torch")
    from flashlesson import calls
    monkeypatch.setattr(calls, "ENABLED", plans)
    dt = getattr(torch, dtype)
    q, k, v, do = (torch.randn(2, 3, 300, 64, device="cuda", dtype=dt) for _ in range(4))
    o, lse = fl.attention(q, k, v, causal=True, return_lse=True)

    def grads():
        return fl.attention_backward(do, q, k, v, o, lse, causal=True, method="flash_wgmma")
    monkeypatch.setattr(launch, "SIDE", False)
    want = grads()
    monkeypatch.setattr(launch, "SIDE", True)
    for _ in range(2):                          # (plans: recorded, then replayed)
        assert all(torch.equal(g, w) for g, w in zip(grads(), want))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = grads()
        got = [g.clone() for g in got]          # (on s: after both kernels, or wrong)
    s.synchronize()
    assert all(torch.equal(g, w) for g, w in zip(got, want))


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cuda_graph_captures_a_flashlesson_torch_step(dtype):
    """forward + backward of flashlesson.torch captured with torch.cuda.graph and replayed on
    new inputs copied in: the same results as the eager step on those inputs (float16: the
    wgmma backward, its two kernels side by side on a forked stream inside the capture)."""
    torch = pytest.importorskip("torch")
    from flashlesson.torch import scaled_dot_product_attention as sdpa
    B, H, N, d = 1, 2, 128, 64
    gen = torch.Generator(device="cuda").manual_seed(0)
    dt = getattr(torch, dtype)
    static = [torch.randn(B, H, N, d, device="cuda", generator=gen, dtype=dt).requires_grad_()
              for _ in range(3)]
    static_do = torch.randn(B, H, N, d, device="cuda", generator=gen, dtype=dt)

    def step():
        for t in static:
            t.grad = None
        out = sdpa(*static, is_causal=True)
        out.backward(static_do)
        return out

    s = torch.cuda.Stream()                     # warm-up on a side stream (compiles, plans)
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = step()
    grads_after = [t.grad for t in static]
    new = [torch.randn(B, H, N, d, device="cuda", generator=gen, dtype=dt) for _ in range(3)]
    new_do = torch.randn(B, H, N, d, device="cuda", generator=gen, dtype=dt)
    with torch.no_grad():
        for t, n in zip(static, new):
            t.copy_(n)
        static_do.copy_(new_do)
    graph.replay()
    torch.cuda.synchronize()
    eager = [n.clone().requires_grad_() for n in new]
    out = sdpa(*eager, is_causal=True)
    out.backward(new_do)
    torch.testing.assert_close(static_out, out, rtol=0, atol=0)
    for g, e in zip(grads_after, eager):
        torch.testing.assert_close(g, e.grad, rtol=0, atol=0)
