"""Attention backward (§30–31, with §34 causal, §35 key padding, §36 dropout): dq, dk, dv of both
methods against the float64 oracle ``reference.attention_backward``, on shapes that break tiling;
gradients NaN-poisoned before the kernels run; run-to-run bitwise identical; bad input named.

o and lse come from the float64 forward oracle cast to float32 (it takes padding and dropout), and
also, without them, from ``flashlesson.attention(..., return_lse=True)``. Relative error per
gradient, max|g − g_ref| / max|g_ref|, ≤ 1e-4 (the issue's bar; ~5e-7 is typical in the
simulator). Tiny shapes in the simulator, bigger ones on the GPU.
"""

import numpy as np
import pytest
from conftest import GPU, SIM, by_device, check_grads
from numba import cuda

import flashlesson
from flashlesson import BwdConfig, attention, attention_backward
from flashlesson import backward_methods as bwd_module
from flashlesson.configs import BWD_SIM_CONFIG
from flashlesson.tolerance import backward_tol
from flashlesson import reference as R

METHODS = list(bwd_module.FP32_METHODS)      # (flash_tc: tests/test_attention_tc_backward.py)
# (method, tier): every fast method, then each lesson kernel (the same oracles)
TIERED = [(m, "fast") for m in METHODS] + [(m, "lesson") for m in bwd_module.LESSON_METHODS]

# (B, H, Nq, Nk, d): N = 1 (d = 1), N not a multiple of any tile, Nq ≠ Nk both ways, odd d.
# (Simulator: 20 × 20 with one head; B = 2 at 17 × 5 gives the kernels more than one (batch,
# head) — they see B·H flattened, so two batch rows or two heads take the same path.)
SHAPES = by_device(
    [(1, 1, 1, 1, 1), (1, 1, 20, 20, 16), (2, 1, 17, 5, 80), (1, 1, 5, 33, 3)],
    [(1, 1, 1, 1, 1), (2, 3, 100, 100, 64), (1, 2, 257, 130, 80), (1, 2, 77, 300, 96),
     (2, 2, 129, 129, 128), (1, 2, 200, 65, 256), (1, 1, 1000, 1000, 64), (1, 2, 33, 17, 3)])


def _inputs(rng, B, H, nq, nk, d, outliers=0):
    q = rng.standard_normal((B, H, nq, d)).astype(np.float32)
    k = rng.standard_normal((B, H, nk, d)).astype(np.float32)
    v = rng.standard_normal((B, H, nk, d)).astype(np.float32)
    do = rng.standard_normal((B, H, nq, d)).astype(np.float32)
    if outliers:                       # a few scores far above the rest: e^{S} would overflow
        q[..., 0, :] *= outliers
        k[..., -1, :] *= outliers
    return q, k, v, do


def _forward(q, k, v, *, causal=False, scale=None, pad=None, mask=None, p=0.0):
    """o, lse of the float64 oracle, as float32 (the forward a backward kernel is given)."""
    o, lse = R.attention(q, k, v, causal=causal, scale=scale, key_padding_mask=pad,
                         dropout_mask=mask, dropout_p=p)
    return o.astype(np.float32), lse.astype(np.float32)


def _run(do, q, k, v, o, lse, **kw):
    """Device in → device out, back to NumPy. (conftest sets ``flashlesson.arrays.POISON``: the
    gradients start full of NaN, so an element no kernel writes fails the comparison.)"""
    pad = kw.pop("key_padding_mask", None)
    if pad is not None:
        kw["key_padding_mask"] = cuda.to_device(pad)
    grads = attention_backward(*(cuda.to_device(a) for a in (do, q, k, v, o, lse)), **kw)
    return tuple(g.copy_to_host() for g in grads)


def _check(grads, do, q, k, v, *, causal=False, scale=None, pad=None, mask=None, p=0.0):
    refs = R.attention_backward(do, q, k, v, causal=causal, scale=scale, key_padding_mask=pad,
                                dropout_mask=mask, dropout_p=p)
    return check_grads(grads, refs, q, k, scale=scale)   # (N = 1: dq = dk = 0 analytically)


@pytest.mark.parametrize("method, tier", TIERED)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_oracle(method, tier, causal, shape, rng):
    q, k, v, do = _inputs(rng, *shape)
    o, lse = _forward(q, k, v, causal=causal)
    grads = _run(do, q, k, v, o, lse, causal=causal, method=method, tier=tier)
    _check(grads, do, q, k, v, causal=causal)


@pytest.mark.parametrize("causal", [False, True])
def test_with_the_flash_forward(causal, rng):
    """o and lse from the forward kernel (§30: the LSE it saves is what rebuilds P)."""
    q, k, v, do = _inputs(rng, *by_device((1, 2, 19, 27, 8), (2, 4, 300, 257, 64)))
    o, lse = attention(q, k, v, causal=causal, return_lse=True)
    for method in METHODS:
        grads = _run(do, q, k, v, o, lse, causal=causal, method=method)
        _check(grads, do, q, k, v, causal=causal)


@pytest.mark.parametrize("method, tier", TIERED)
@pytest.mark.parametrize("causal", [False, True])
def test_key_padding(method, tier, causal, rng):
    """§35: padded keys get dk = dv = 0 exactly; batch row 1 has no valid key at all (its rows
    see no key: dq = 0, never NaN)."""
    B, H, nq, nk, d = by_device((3, 1, 21, 37, 8), (3, 4, 200, 333, 64))
    q, k, v, do = _inputs(rng, B, H, nq, nk, d)
    pad = rng.random((B, nk)) > 0.3
    pad[1] = False
    pad[2, -5:] = False
    o, lse = _forward(q, k, v, causal=causal, pad=pad)
    grads = _run(do, q, k, v, o, lse, causal=causal, key_padding_mask=pad, method=method,
                 tier=tier)
    _check(grads, do, q, k, v, causal=causal, pad=pad)
    dq, dk, dv = grads
    assert np.all(dq[1] == 0)                               # [B, H, N, d] → [B, N, H, d]
    assert np.all(dk.swapaxes(1, 2)[~pad] == 0) and np.all(dv.swapaxes(1, 2)[~pad] == 0)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("causal", [False, True])
def test_dropout(method, causal, rng):
    """§36: the kernels regenerate the Philox keep-mask; the oracle is given it."""
    B, H, nq, nk, d = by_device((1, 2, 23, 18, 12), (2, 3, 250, 300, 64))
    seed, p = 2**40 + 12345, 0.3
    q, k, v, do = _inputs(rng, B, H, nq, nk, d)
    mask = R.dropout_keep_mask(seed, B, H, nq, nk, p)
    o, lse = _forward(q, k, v, causal=causal, mask=mask, p=p)
    grads = _run(do, q, k, v, o, lse, causal=causal, dropout_p=p, seed=seed, method=method)
    _check(grads, do, q, k, v, causal=causal, mask=mask, p=p)


def test_dropout_padding_causal_together(rng):
    """Every flag of the flash kernels at once, Nq > Nk (rows that see no key, too)."""
    B, H, nq, nk, d = by_device((2, 1, 37, 29, 5), (2, 4, 301, 190, 80))
    seed, p = 7, 0.5
    q, k, v, do = _inputs(rng, B, H, nq, nk, d)
    pad = rng.random((B, nk)) > 0.2
    mask = R.dropout_keep_mask(seed, B, H, nq, nk, p)
    o, lse = _forward(q, k, v, causal=True, pad=pad, mask=mask, p=p)
    grads = _run(do, q, k, v, o, lse, causal=True, key_padding_mask=pad, dropout_p=p,
                 seed=seed)
    _check(grads, do, q, k, v, causal=True, pad=pad, mask=mask, p=p)


@pytest.mark.parametrize("method, tier", TIERED)
@pytest.mark.parametrize("factor", [5, 30])
def test_outliers_and_scale(method, tier, factor, rng):
    """One query and one key scaled up: scores far above the rest, e^S overflows float32 for
    both factors (never computed: P = e^{S − LSE} ≤ 1). ×30 (|S| ~ 2000): float32 holds S only
    to a few ulps of |S|, ~1e-4, and P and dS = P(dP − D) inherit it whatever the kernel does
    (seen up to 2.7e-4 with the oracle's LSE): the error model's A_i = scale·‖q_i‖·max‖k_j‖
    term (flashlesson.tolerance.backward_tol) sets the bar."""
    q, k, v, do = _inputs(rng, 1, 2, 24, 19, 8, outliers=factor)
    o, lse = _forward(q, k, v, scale=0.7)
    grads = _run(do, q, k, v, o, lse, scale=0.7, method=method, tier=tier)
    _check(grads, do, q, k, v, scale=0.7)


@pytest.mark.parametrize("method, tier", TIERED)
def test_rows_that_see_no_key(method, tier, rng):
    """Causal with Nq > Nk: the first Nq − Nk queries see no key (LSE = −inf): dq = 0 there and
    nothing flows from them into dk, dv — never NaN."""
    q, k, v, do = _inputs(rng, 1, 1, 21, 4, 5)
    o, lse = _forward(q, k, v, causal=True)
    assert np.all(np.isneginf(lse[0, 0, :17]))
    grads = _run(do, q, k, v, o, lse, causal=True, method=method, tier=tier)
    assert np.all(grads[0][0, 0, :17] == 0)
    _check(grads, do, q, k, v, causal=True)


@pytest.mark.parametrize("method", METHODS)
def test_bitwise_identical_runs(method, rng):
    """No atomics: every gradient element is summed by one thread in a fixed order."""
    runs = by_device(2, 10)         # (simulator: one run against another)
    B, H, nq, nk, d = by_device((1, 1, 33, 40, 8), (2, 8, 1024, 1024, 64))
    q, k, v, do = _inputs(rng, B, H, nq, nk, d)
    o, lse = _forward(q, k, v, causal=True, mask=R.dropout_keep_mask(5, B, H, nq, nk, 0.2),
                      p=0.2)
    first = _run(do, q, k, v, o, lse, causal=True, dropout_p=0.2, seed=5, method=method)
    for _ in range(runs - 1):
        again = _run(do, q, k, v, o, lse, causal=True, dropout_p=0.2, seed=5, method=method)
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("config", by_device(
    [BwdConfig(Bc=16, Br=32, TR=4, TC=8, dq_Br=16, dq_Bc=32, dq_TR=4, dq_TC=8),
     BwdConfig(Bc=64, Br=16, TR=16, TC=4, dq_Br=16, dq_Bc=64, dq_TR=2, dq_TC=16)],
    [BwdConfig(Bc=64, Br=64, TR=16, TC=8, dq_Br=64, dq_Bc=64, dq_TR=16, dq_TC=8),
     BwdConfig(Bc=64, Br=32, TR=16, TC=8, dq_Br=128, dq_Bc=32, dq_TR=32, dq_TC=8),
     BwdConfig(Bc=128, Br=32, TR=32, TC=8, dq_Br=64, dq_Bc=64, dq_TR=16, dq_TC=16),
     BwdConfig(Bc=32, Br=64, TR=8, TC=16, dq_Br=32, dq_Bc=64, dq_TR=8, dq_TC=16)]),
    ids=str)
def test_flash_configs(config, rng):
    """Tile sizes and thread layouts other than the default give the same answer. (45 × 45,
    causal: the dK/dV kernel skips Q tiles before the diagonal, the dQ kernel K/V tiles past it.)"""
    q, k, v, do = _inputs(rng, 1, 1, 45, 45, 24)
    for causal in (False, True):
        o, lse = _forward(q, k, v, causal=causal)
        grads = _run(do, q, k, v, o, lse, causal=causal, config=config)
        _check(grads, do, q, k, v, causal=causal)


def test_host_arrays_in_host_arrays_out(rng):
    q, k, v, do = _inputs(rng, 1, 2, 9, 11, 4)
    o, lse = _forward(q, k, v)
    grads = attention_backward(do, q, k, v, o, lse)
    for g, like in zip(grads, (q, k, v)):
        assert isinstance(g, np.ndarray) and g.shape == like.shape and g.dtype == np.float32
    naive = attention_backward(do, q, k, v, o, lse, method="naive")
    rel = backward_tol(q, k)                   # each within its bound of the oracle
    for a, b in zip(grads, naive):
        assert np.max(np.abs(a - b)) <= 2 * rel * np.max(np.abs(b))


@pytest.mark.skipif(SIM, reason="GPU: the opt-in above 48 KB of shared memory, d up to 256")
def test_default_configs_launch(rng):
    for d in (64, 128, 256):
        q, k, v, do = _inputs(rng, 1, 2, 130, 130, d)
        o, lse = _forward(q, k, v, causal=True)
        _check(_run(do, q, k, v, o, lse, causal=True), do, q, k, v, causal=True)


@pytest.mark.skipif(not GPU, reason="GPU: torch autograd of SDPA's math backend, float64")
def test_matches_torch_autograd():
    torch = pytest.importorskip("torch")
    q, k, v, do = (torch.randn(2, 4, 300, 64, device="cuda") for _ in range(4))
    o, lse = attention(q, k, v, causal=True, return_lse=True)
    dq, dk, dv = attention_backward(do, q, k, v, o, lse, causal=True)
    q64, k64, v64 = (x.double().requires_grad_() for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, is_causal=True)
    out.backward(do.double())
    for g, want in zip((dq, dk, dv), (q64.grad, k64.grad, v64.grad)):
        want = want.cpu().numpy()
        assert isinstance(g, torch.Tensor) and g.dtype == torch.float32     # torch in, torch out
        err = np.max(np.abs(g.cpu().numpy() - want)) / np.max(np.abs(want))
        assert err <= backward_tol(q.cpu().numpy(), k.cpu().numpy()), f"relative error {err:.2e}"


# --- bad input ------------------------------------------------------------------------------
def test_bad_inputs():
    z = np.zeros((1, 1, 4, 8), np.float32)
    lse = np.zeros((1, 1, 4), np.float32)

    def call(**kw):
        args = dict(do=z, q=z, k=z, v=z, o=z, lse=lse)
        args.update(kw)
        return attention_backward(args.pop("do"), args.pop("q"), args.pop("k"), args.pop("v"),
                                  args.pop("o"), args.pop("lse"), **args)

    with pytest.raises(ValueError, match="method: expected one of"):
        call(method="fast")
    with pytest.raises(TypeError, match="q: dtype float64"):
        call(q=z.astype(np.float64))
    with pytest.raises(ValueError, match="head dimension must be q's d = 8"):
        call(k=np.zeros((1, 1, 4, 7), np.float32))
    with pytest.raises(ValueError, match="do: expected q's shape"):
        call(do=np.zeros((1, 1, 5, 8), np.float32))
    with pytest.raises(TypeError, match="do, q, k, v, o must share one dtype; got do float16"):
        call(do=z.astype(np.float16))
    with pytest.raises(ValueError, match="o: expected q's shape"):
        call(o=np.zeros((1, 1, 4, 9), np.float32))
    with pytest.raises(ValueError, match="o: expected a 4-D array"):
        call(o=z[0])
    with pytest.raises(ValueError, match=r"lse: expected shape \(1, 1, 4\)"):
        call(lse=np.zeros((1, 1, 5), np.float32))
    with pytest.raises(TypeError, match="lse: dtype float64"):
        call(lse=lse.astype(np.float64))
    with pytest.raises(TypeError, match="lse: must be a NumPy array, like q"):
        call(lse=cuda.to_device(lse))
    with pytest.raises(ValueError, match=r"key_padding_mask: expected shape \(B, Nk\) = \(1, 4\)"):
        call(key_padding_mask=np.ones((1, 5), bool))
    with pytest.raises(TypeError, match="key_padding_mask: dtype float32"):
        call(key_padding_mask=np.ones((1, 4), np.float32))
    with pytest.raises(ValueError, match="dropout_p: expected a drop probability"):
        call(dropout_p=1.0)
    with pytest.raises(ValueError, match="dropout_p: expected a drop probability"):
        call(dropout_p=float("nan"))
    with pytest.raises(TypeError, match="dropout_p: expected a real number"):
        call(dropout_p="0.1")
    with pytest.raises(ValueError, match="seed: expected an integer in"):
        call(seed=2**64)
    with pytest.raises(ValueError, match="seed: expected an integer in"):
        call(seed=-1)
    with pytest.raises(TypeError, match="seed: expected an integer, got float"):
        call(seed=1.5)
    with pytest.raises(ValueError, match="scale: expected a finite"):
        call(scale=float("nan"))
    with pytest.raises(ValueError, match="only method 'flash' takes a configuration"):
        call(method="naive", config=BWD_SIM_CONFIG)
    with pytest.raises(TypeError, match="config: expected a BwdConfig"):
        call(config=flashlesson.FlashConfig(32, 16, 8, 4))
    with pytest.raises(ValueError, match="Br = 10 must be a multiple of 4·TC"):
        call(config=BwdConfig(Bc=32, Br=10, TR=8, TC=4, dq_Br=32, dq_Bc=16, dq_TR=8, dq_TC=4))
    with pytest.raises(ValueError, match="dq_TC = 3 must be a power of 2"):
        call(config=BwdConfig(Bc=32, Br=16, TR=8, TC=4, dq_Br=32, dq_Bc=12, dq_TR=8, dq_TC=3))


def test_lesson_tier_refusals_and_tiles(rng):
    """tier="lesson": method "flash" only, float32, no dropout, no config — each refusal names
    its argument; any tiles, §33's Bc = 2 too, against the tiled NumPy twin."""
    z = np.zeros((1, 1, 4, 8), np.float32)
    lse = np.zeros((1, 1, 4), np.float32)
    with pytest.raises(ValueError, match="tier: expected one of fast, lesson"):
        attention_backward(z, z, z, z, z, lse, tier="slow")
    with pytest.raises(ValueError, match="tier: attention_backward method 'naive' has no lesson"):
        attention_backward(z, z, z, z, z, lse, method="naive", tier="lesson")
    with pytest.raises(ValueError, match="dropout_p: the lesson tier"):
        attention_backward(z, z, z, z, z, lse, dropout_p=0.1, tier="lesson")
    with pytest.raises(ValueError, match="config: the lesson tier"):
        attention_backward(z, z, z, z, z, lse, config=BWD_SIM_CONFIG, tier="lesson")
    h = z.astype(np.float16)
    with pytest.raises(TypeError, match="q: the lesson tier's backward takes float32"):
        attention_backward(h, h, h, h, h, lse, tier="lesson")
    assert bwd_module.METHODS["flash"].lesson_kernels != "—"           # the registry records it

    B, H, nq, nk, d = 2, 1, 7, 5, 3
    q, k, v, do = _inputs(rng, B, H, nq, nk, d)
    pad = np.ones((B, nk), bool)
    pad[0, 2] = False
    o, lse = _forward(q, k, v, causal=True, pad=pad)
    dev = [cuda.to_device(a.reshape((B * H,) + a.shape[2:])) for a in (q, k, v, do, o, lse)]
    grads = [cuda.device_array((B * H, n, d), np.float32) for n in (nq, nk, nk)]
    bwd_module.lesson_backward(*dev, *grads, scale=d ** -0.5, causal=True,
                               kpm=cuda.to_device(pad.astype(np.uint8)), heads=H, tiles=(3, 2))
    grads = tuple(g.copy_to_host().reshape(x.shape) for g, x in zip(grads, (q, k, v)))
    _check(grads, do, q, k, v, causal=True, pad=pad)
    with pytest.raises(ValueError, match="Bc = 2048: the lesson kernels take tiles"):
        bwd_module.lesson_backward(*dev, *grads, scale=1.0, causal=False, kpm=None, heads=H,
                                   tiles=(2, 2048))


def test_config_too_big():
    cfg = BwdConfig(Bc=256, Br=256, TR=32, TC=32, dq_Br=32, dq_Bc=16, dq_TR=8, dq_TC=4)
    with pytest.raises(ValueError, match="dK/dV kernel's tiles need .* bytes of shared memory"):
        cfg.check(256)
    cfg = BwdConfig(Bc=64, Br=64, TR=8, TC=4, dq_Br=32, dq_Bc=16, dq_TR=8, dq_TC=4)
    assert cfg.registers_floats(64) == (8 * (2 * 16 + 2 * 16), 4 * (16 + 2 * 4))
    if GPU:                            # (the simulator has no registers to spill)
        with pytest.raises(ValueError, match="dK/dV kernel would hold .* in registers"):
            cfg.check(64)
