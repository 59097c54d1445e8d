"""§37: FlashAttention on tensor cores (method "flash_tc") against the float64 oracle.

fp16 and bf16 inputs (fp32 accumulation), and float32 inputs through 3xTF32. The oracle gets
the inputs as the kernel sees them (rounded to fp16/bf16), so the error measured is the
kernel's own (P rounded to 16 bits for P·V, O rounded on the way out). Criterion on the GPU:
no more than 2× the error of torch SDPA in the same dtype (flash-attn's own test rule), when
torch is installed; always, elementwise, within the bound of flashlesson.tolerance's error
model (P and O rounded to 16 bits taken elementwise with the oracle's P: about 1.5× the error
seen, so a packing bug that doubles it fails; 3xTF32: the float32 model plus the split's and the
tensor core's terms, dtype "tf32"; the sharp checks: tests/test_tf32x3_accuracy.py).
Outputs poisoned (NaN) before the kernel runs.
"""

import numpy as np
import pytest
from conftest import GPU, SIM, by_device
from numba import cuda

import flashlesson
from flashlesson import BFloat16, TcConfig, WgmmaConfig, WgmmaTf32Config, attention
from flashlesson.attention_methods import TC_METHODS
from flashlesson.tolerance import attention_tol
from flashlesson.reference import attention as ref_attention

# (B, H, Nq, Nk, d): N = 1, N < tile, N not a multiple of 16 or of Bc, Nq ≠ Nk both ways.
# (Simulator: the second head at 37 × 9, d = 16, where it costs less than at d = 32.)
SHAPES = by_device(
    [(1, 1, 1, 1, 16), (1, 1, 21, 35, 32), (1, 2, 37, 9, 16)],
    [(1, 1, 1, 1, 64), (2, 3, 100, 100, 64), (1, 2, 257, 130, 80), (1, 2, 77, 300, 96),
     (2, 2, 129, 129, 128), (1, 2, 200, 65, 256), (1, 1, 1000, 1000, 64),
     (1, 2, 1031, 517, 128)])


def _inputs(rng, B, H, nq, nk, d, fmt):
    q, k, v = (rng.standard_normal((B, H, n, d)).astype(np.float32) for n in (nq, nk, nk))
    q[..., 0, :] *= 4                          # a row with large scores (a sharp softmax)
    if fmt == "f16":
        q, k, v = (x.astype(np.float16) for x in (q, k, v))
        return (q, k, v), [x.astype(np.float64) for x in (q, k, v)]
    if fmt == "bf16":
        b = [BFloat16.from_float32(x) for x in (q, k, v)]
        return b, [x.to_float32().astype(np.float64) for x in b]
    return (q, k, v), [x.astype(np.float64) for x in (q, k, v)]


def _as_float(o):
    return o.to_float32() if isinstance(o, BFloat16) else np.asarray(o, np.float32)


def _torch_error(q64, k64, v64, fmt, causal, o_ref):
    """max |O_torch − O_ref| of torch SDPA in the same dtype (None without torch or CUDA)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or fmt == "tf32":
        return None
    dt = torch.float16 if fmt == "f16" else torch.bfloat16
    t = [torch.tensor(x, device="cuda").to(dt) for x in (q64, k64, v64)]
    nq, nk = q64.shape[2], k64.shape[2]
    mask = None
    if causal:                                 # bottom-right, as flashlesson's causal
        i = torch.arange(nq, device="cuda")[:, None]
        j = torch.arange(nk, device="cuda")[None, :]
        mask = j <= i + nk - nq
        if not mask.any(dim=1).all():
            return None                        # torch gives NaN rows where we give zeros
    o = torch.nn.functional.scaled_dot_product_attention(*t, attn_mask=mask)
    return float(np.max(np.abs(o.float().cpu().numpy() - o_ref)))


def _ref(fmt, q64, k64, v64, **kw):
    """(O, LSE) of the float64 oracle on the inputs as rounded, and the error model's bound."""
    o_ref, lse_ref, p = ref_attention(q64, k64, v64, return_p=True, **kw)
    return o_ref, lse_ref, attention_tol(q64, k64, v64, dtype=fmt, p=p, o=o_ref)


def _check(o, lse, o_ref, lse_ref, tol, fmt, torch_err=None):
    o = _as_float(o)
    assert not np.isnan(o).any(), "unwritten (poisoned) output"
    diff = np.abs(o - o_ref)
    err = np.max(diff)
    worst = np.max(diff / np.maximum(tol.o, 1e-300))
    assert np.all(diff <= tol.o), f"{fmt}: error {err:.2e}, {worst:.2f}× the model's bound"
    if torch_err is not None:
        assert err <= 2 * torch_err + 1e-6, f"{fmt}: error {err:.2e} > 2 × torch's {torch_err:.2e}"
    if lse is None:
        return
    assert not np.isnan(lse).any(), "unwritten (poisoned) LSE"
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse_ref))
    fin = np.isfinite(lse_ref)
    bound = np.broadcast_to(tol.lse, lse_ref.shape)[fin]
    assert np.all(np.abs(lse[fin] - lse_ref[fin]) <= bound), f"{fmt}: LSE beyond the bound"


@pytest.mark.parametrize("fmt", ["f16", "bf16", "tf32"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_oracle(rng, shape, causal, fmt):
    (q, k, v), (q64, k64, v64) = _inputs(rng, *shape, fmt)
    o, lse = attention(q, k, v, causal=causal, return_lse=True, method="flash_tc")
    o_ref, lse_ref, tol = _ref(fmt, q64, k64, v64, causal=causal)
    _check(o, lse, o_ref, lse_ref, tol, fmt, _torch_error(q64, k64, v64, fmt, causal, o_ref))


@pytest.mark.parametrize("causal", [False, True])
def test_lesson_tier(rng, causal):
    """§37's lesson kernel (kernels_numba/lesson/tensor_core.py: one warp, plain loads, natural
    logs) against the oracle under the same fp16 error model; key padding with a fully padded
    sequence; the refusals name their argument."""
    from flashlesson.tc_methods import attention_tc
    B, H, nq, nk, d = by_device((2, 1, 21, 35, 32), (2, 3, 257, 300, 128))
    (q, k, v), (q64, k64, v64) = _inputs(rng, B, H, nq, nk, d, "f16")
    pad = rng.random((B, nk)) > 0.3
    pad[1] = False
    for kpm in (None, pad):
        o, lse = attention_tc(q, k, v, causal=causal, key_padding_mask=kpm, return_lse=True,
                              tier="lesson")
        o_ref, lse_ref, tol = _ref("f16", q64, k64, v64, causal=causal, key_padding_mask=kpm)
        _check(o, lse, o_ref, lse_ref, tol, "f16")
    with pytest.raises(TypeError, match="q: the lesson tier's tensor-core kernel takes float16"):
        attention_tc(q64.astype(np.float32), k64.astype(np.float32), v64.astype(np.float32),
                     tier="lesson")
    with pytest.raises(ValueError, match="config: the lesson tier"):
        attention_tc(q, k, v, config=TcConfig(), tier="lesson")
    with pytest.raises(ValueError, match="q: the lesson tier's tensor-core kernel takes a head "
                       "dimension that is a multiple of 16; got d = 24"):
        attention_tc(*(x[..., :24] for x in (q, k, v)), tier="lesson")
    with pytest.raises(ValueError, match="tier: expected one of"):
        attention_tc(q, k, v, tier="Lesson")


def test_fp16_goes_to_tensor_cores_by_itself(rng):
    (q, k, v), (q64, k64, v64) = _inputs(rng, 1, 1, 20, 20, 16, "f16")
    o, lse = attention(q, k, v, return_lse=True)    # method "flash" (the default)
    assert o.dtype == np.float16 and o.shape == q.shape
    o_ref, lse_ref, tol = _ref("f16", q64, k64, v64)
    _check(o, lse, o_ref, lse_ref, tol, "f16")              # the LSE too, not zeros vs zeros


def test_padding_and_fully_masked_rows(rng):
    B, H, nq, nk, d = by_device((2, 1, 19, 33, 16), (3, 4, 300, 257, 64))
    (q, k, v), (q64, k64, v64) = _inputs(rng, B, H, nq, nk, d, "f16")
    kpm = rng.random((B, nk)) > 0.4
    kpm[0] = False                             # batch row 0: no key at all → zeros, −inf
    o, lse = attention(q, k, v, key_padding_mask=kpm, return_lse=True)
    o_ref, lse_ref, tol = _ref("f16", q64, k64, v64, key_padding_mask=kpm)
    _check(o, lse, o_ref, lse_ref, tol, "f16")
    assert np.all(o[0] == 0) and np.all(np.isneginf(lse[0]))


def test_device_arrays_in_device_arrays_out(rng):
    (q, k, v), (q64, k64, v64) = _inputs(rng, 1, 2, 17, 17, 16, "f16")
    o, lse = attention(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v),
                       causal=True, return_lse=True)
    o, lse = o.copy_to_host(), lse.copy_to_host()
    assert o.dtype == np.float16
    _check(o, lse, *_ref("f16", q64, k64, v64, causal=True), "f16")


@pytest.mark.parametrize("Bc, warps, mt, pf, asy", by_device(
    [(32, 1, 1, False, False), (16, 1, 2, True, False), (32, 1, 1, False, True),
     (16, 2, 2, False, True)],
    [(32, 1, 1, False, False), (128, 2, 1, False, False), (64, 8, 1, False, False),
     (64, 4, 2, False, False), (64, 4, 1, True, False), (32, 4, 2, True, False),
     (64, 4, 2, False, True), (64, 8, 1, False, True), (128, 4, 1, False, True),
     (16, 8, 2, False, True)]))
@pytest.mark.parametrize("causal", [False, True])
def test_other_tiles(rng, Bc, warps, mt, pf, asy, causal):
    """Tiles, warps, two row blocks per warp (MT), the register prefetch (PF) and cp.async +
    ldmatrix (ASYNC)."""
    (q, k, v), (q64, k64, v64) = _inputs(rng, 1, 1, by_device(40, 333), by_device(50, 517),
                                         by_device(16, 64), "f16")
    o, lse = attention(q, k, v, causal=causal, return_lse=True,
                       config=TcConfig(Bc=Bc, WARPS=warps, MT=mt, PF=pf, ASYNC=asy))
    _check(o, lse, *_ref("f16", q64, k64, v64, causal=causal), "f16")


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
@pytest.mark.parametrize("d", by_device([48], [80, 96, 128, 256]))
def test_async_head_dims_and_padding(rng, d, fmt):
    """ASYNC (cp.async + ldmatrix) at head dims whose k16 steps are odd (48, 80), with key
    padding and a batch row that sees no key."""
    B, nq, nk = 2, by_device(19, 201), by_device(23, 187)
    (q, k, v), (q64, k64, v64) = _inputs(rng, B, 2, nq, nk, d, fmt)
    kpm = rng.random((B, nk)) > 0.3
    kpm[1] = False
    o, lse = attention(q, k, v, key_padding_mask=kpm, return_lse=True,
                       config=TcConfig(Bc=by_device(16, 32), WARPS=by_device(1, 4), ASYNC=True))
    _check(o, lse, *_ref(fmt, q64, k64, v64, key_padding_mask=kpm), fmt)


# Head dims that are not multiples of 16 (flash-attn takes any d ≤ 256): the kernels run D = d
# padded to 16, zeros loaded past d, nothing written there (attention_tc.head_io); d % 8 == 0
# (8, 40, 200) travels in 16-byte pieces (cp.async zero-fill past the row), the rest (1, 59,
# 111) half by half. Simulator: one case per d, each loader form once; GPU: flash-attn's
# sequence-length pairs, both dtypes, causal and not, default configs (ASYNC up to D = 128,
# register-staged above). (fmt, d, causal, (B, H, Nq, Nk), config)
ODD_HEAD_DIMS = by_device(
    [("f16", 1, True, (1, 2, 9, 13), None),
     ("f16", 40, False, (1, 1, 11, 20), TcConfig(Bc=16, WARPS=1, ASYNC=True)),
     ("f16", 59, True, (1, 1, 13, 7), TcConfig(Bc=16, WARPS=1, ASYNC=True)),
     ("bf16", 8, True, (2, 1, 21, 17), TcConfig(Bc=16, WARPS=1, ASYNC=True)),
     ("bf16", 111, False, (1, 1, 9, 18), TcConfig(Bc=16, WARPS=1, MT=2, PF=True)),
     ("f16", 200, True, (1, 1, 5, 7), TcConfig(Bc=16, WARPS=1))],
    [(fmt, d, causal, shape, None) for fmt in ("f16", "bf16") for d in (40, 59, 111, 200)
     for causal in (False, True) for shape in ((2, 3, 113, 203), (1, 2, 1024, 1024))])


@pytest.mark.parametrize("fmt, d, causal, shape, config", ODD_HEAD_DIMS,
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else
                         str(x) if not isinstance(x, TcConfig) else "cfg")
def test_head_dims_not_a_multiple_of_16(rng, fmt, d, causal, shape, config):
    """O and LSE against the oracle (and 2× torch's error on the GPU); O poisoned first, so a
    column ≤ d not written fails, and a write past d would land in the next row (or outside
    the array, an IndexError in the simulator)."""
    (q, k, v), (q64, k64, v64) = _inputs(rng, *shape, d, fmt)
    o, lse = attention(q, k, v, causal=causal, return_lse=True, config=config)
    assert o.shape == q.shape
    o_ref, lse_ref, tol = _ref(fmt, q64, k64, v64, causal=causal)
    _check(o, lse, o_ref, lse_ref, tol, fmt, _torch_error(q64, k64, v64, fmt, causal, o_ref))


def test_torch_dtypes_are_read_from_the_tensor():
    """np.dtype() cannot read torch.float16: a CUDA tensor's fp16-ness comes from its own dtype
    (not its __cuda_array_interface__, which costs ~10 µs and raises for a tensor that requires
    grad; stand-ins here: torch is optional and the CI has no GPU)."""
    from flashlesson.tc_methods import low_precision

    def tensor(dtype, is_cuda=True):
        cls = type("Tensor", (), {"__module__": "torch", "is_cuda": is_cuda, "dtype": dtype})
        return cls()

    assert low_precision(tensor("torch.float16")) and low_precision(tensor("torch.bfloat16"))
    assert not low_precision(tensor("torch.float32"))
    assert not low_precision(tensor("torch.float16", is_cuda=False))   # the ordinary checks
    assert low_precision(np.zeros(2, np.float16)) and not low_precision(np.zeros(2, np.float32))


def test_bad_inputs(rng):
    q = rng.standard_normal((1, 1, 8, 264)).astype(np.float16)
    with pytest.raises(ValueError, match=r"head dimension in 1 … 256 \(f16\); got d = 264"):
        attention(q, q, q)
    q = rng.standard_normal((1, 1, 8, 12)).astype(np.float32)
    with pytest.raises(ValueError, match="multiple of 8 up to 256 .3xTF32"):
        attention(q, q, q, method="flash_tc")
    q = rng.standard_normal((1, 1, 8, 16)).astype(np.float16)
    with pytest.raises(TypeError, match="same format"):
        attention(q, q, q.astype(np.float32), method="flash_tc")
    with pytest.raises(ValueError, match="no dropout"):
        attention(q, q, q, dropout_p=0.1)
    with pytest.raises(TypeError, match="takes float32"):
        attention(q, q, q, method="naive")
    with pytest.raises(TypeError, match="TcConfig"):
        attention(q, q, q, config=flashlesson.FlashConfig(Br=32, Bc=16, TR=8, TC=4))
    with pytest.raises(ValueError, match="Bc must be"):
        attention(q, q, q, config=TcConfig(Bc=24))
    with pytest.raises(ValueError, match="MT = 1"):
        attention(q.astype(np.float32), q.astype(np.float32), q.astype(np.float32),
                  method="flash_tc", config=TcConfig(MT=2))
    with pytest.raises(TypeError, match="uint16"):
        BFloat16(np.zeros(4, np.float32))


# --- method "flash_wgmma" (§42–43 on Hopper: kernels_numba/attention_wgmma.py) ----------------
# The same oracle, error model and (GPU) 2× torch rule as flash_tc. The last variant is the
# default's shape and runs every case; the others run the first case (simulator: one block
# each, Nq ≤ Br = 64, a few K/V tiles of 64) or every fp16 case (GPU: flash-attn's awkward
# lengths at both head dims; a kernel compiled per variant, causal mode and d — kept to ~20).
@pytest.mark.parametrize("method", ["flash_tc", "flash_wgmma"])
@pytest.mark.parametrize("scale", [-0.4, 0.0])
def test_scale_that_is_not_positive(rng, method, scale):
    """The kernels fold scale·log2e into the softmax (the row max of raw S times it, one FFMA
    an exponent: attention_tc.fold_scale), which holds for a positive scale only; a negative
    scale (the max of S·c is c times S's minimum) or 0 (a masked −inf times 0 is NaN) takes
    the unfolded kernel. Causal with Nq < Nk and a partial last tile, so masked entries meet
    the scale."""
    B, H, nq, nk, d = by_device((1, 1, 21, 35, 64), (2, 3, 200, 333, 128))
    (q, k, v), (q64, k64, v64) = _inputs(rng, B, H, nq, nk, d, "f16")
    o, lse = attention(q, k, v, causal=True, scale=scale, return_lse=True, method=method)
    o_ref, lse_ref, tol = _ref("f16", q64, k64, v64, causal=True, scale=scale)
    _check(o, lse, o_ref, lse_ref, tol, "f16")


@pytest.mark.parametrize("method", ["flash_tc", "flash_wgmma"])
def test_scores_that_overflow_float32_give_nan(method):
    """With the scale folded, S·scale·log2e is formed inside an FFMA, exactly: a row whose
    scaled scores overflow float32 would get P = 0 everywhere and a silent O = 0, LSE = −inf
    (a row with no key). It gives NaN, as the unfolded arithmetic does (S = 64 here, scale
    1e38: S·scale·log2e ≈ 9e39)."""
    q = np.ones((1, 1, 5, 64), np.float16)
    o, lse = attention(q, q, q, scale=1e38, return_lse=True, method=method)
    assert np.isnan(o).all() and np.isnan(lse).all()


# (OVERLAP, FA3's pipelining, has its own test below.)
WGMMA_VARIANTS = by_device(   # (Bc, CWG, STAGES, PRODUCER)
    [(64, 1, 1, False), (64, 1, 2, False), (64, 1, 2, True)],
    [(128, 2, 1, False), (128, 2, 2, False), (64, 1, 3, True), (128, 2, 2, True)])
WGMMA_CASES = by_device(      # (fmt, causal, (B, H, Nq, Nk, d))
    [("f16", False, (1, 1, 21, 70, 64)), ("bf16", True, (1, 1, 37, 100, 64))],
    [(fmt, causal, shape) for fmt in ("f16", "bf16") for causal in (False, True)
     for shape in ((2, 3, 100, 100, 64), (1, 2, 257, 130, 128), (1, 2, 77, 300, 64),
                   (1, 2, 1031, 517, 128), (1, 1, 1, 1, 64))])


@pytest.mark.parametrize("variant", WGMMA_VARIANTS, ids=lambda v: "Bc{}-cwg{}-st{}-p{}".format(
    v[0], v[1], v[2], int(v[3])))
@pytest.mark.parametrize("fmt, causal, shape", WGMMA_CASES,
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x))
def test_wgmma_matches_oracle(rng, fmt, causal, shape, variant):
    if variant != WGMMA_VARIANTS[-1] and (shape != WGMMA_CASES[0][2] if SIM else fmt != "f16"):
        pytest.skip("the default's variant on every case, the others on the first (simulator) "
                    "or on fp16 (GPU)")
    Bc, cwg, stages, producer = variant
    (q, k, v), (q64, k64, v64) = _inputs(rng, *shape, fmt)
    o, lse = attention(q, k, v, causal=causal, return_lse=True, method="flash_wgmma",
                       config=WgmmaConfig(Bc=Bc, CWG=cwg, STAGES=stages, PRODUCER=producer))
    o_ref, lse_ref, tol = _ref(fmt, q64, k64, v64, causal=causal)
    _check(o, lse, o_ref, lse_ref, tol, fmt, _torch_error(q64, k64, v64, fmt, causal, o_ref))


def test_wgmma_padding_and_fully_masked_rows(rng):
    """Key padding (padded keys zeros on chip by cp.async's zero-fill), a batch row with no
    valid key (O = 0, LSE = −inf), with the producer warpgroup; default config."""
    B, H, nq, nk, d = by_device((2, 1, 19, 70, 64), (3, 4, 300, 257, 128))
    (q, k, v), (q64, k64, v64) = _inputs(rng, B, H, nq, nk, d, "f16")
    kpm = rng.random((B, nk)) > 0.4
    kpm[0] = False
    o, lse = attention(q, k, v, key_padding_mask=kpm, return_lse=True, method="flash_wgmma",
                       config=WgmmaConfig(Bc=64, CWG=1, STAGES=2, PRODUCER=True))
    _check(o, lse, *_ref("f16", q64, k64, v64, key_padding_mask=kpm), "f16")
    assert np.all(o[0] == 0) and np.all(np.isneginf(lse[0]))


# (B, H, Nq, Nk, d): 3 key tiles of 64 (the last of 22 keys: N not a multiple of
# Bc), so the overlapped loop runs twice and the 2-stage ring wraps. GPU: Bc = 128, CWG = 2,
# two batch rows, two heads, several query tiles, d = 128 and 64; causal with Nq > Nk: blocks
# with no key tile at all.
OVERLAP_CASES = by_device(    # (fmt, causal, PAD, PRODUCER, STAGES, shape)
    [("f16", True, False, True, 2, (1, 1, 37, 150, 64)),
     ("bf16", False, True, False, 2, (1, 1, 37, 150, 64))],
    [("f16", True, False, True, 2, (2, 2, 200, 457, 128)),
     ("bf16", False, True, False, 2, (2, 2, 200, 457, 128)),
     ("f16", True, True, True, 3, (2, 2, 200, 457, 128)),
     ("f16", True, False, False, 3, (1, 2, 1031, 517, 64)),
     ("bf16", False, False, True, 3, (1, 2, 1031, 517, 64))])


def _nan_padded_keys(rng, fmt, shape, k, v):
    """A key padding mask for shape (B, H, Nq, Nk, d) — the last key padded everywhere and,
    with B > 1, every key of batch row 0 (O = 0, LSE = −inf there) — with NaN written into the
    padded keys' K and V (never read: cp.async zero-fills them)."""
    B, H, _, nk, _ = shape
    kpm = rng.random((B, nk)) > 0.3
    kpm[:, -1] = False
    if B > 1:
        kpm[0] = False                          # a batch row with no valid key: O = 0, −inf
    hidden = np.broadcast_to(~kpm[:, None, :], (B, H, nk))
    for x in (k, v):                            # padded keys: NaN (never read: zero-filled)
        if fmt in ("f16", "tf32"):
            x[hidden] = np.nan
        else:
            x.bits[hidden] = 0x7FC0             # a bf16 NaN
    return kpm


def _wgmma_matches(fmt, causal, kpm, cfg, ins, ins64):
    """flash_wgmma with cfg against the oracle; a batch row with no valid key (kpm[0] all
    False) gives O = 0 and LSE = −inf exactly."""
    o, lse = attention(*ins, causal=causal, key_padding_mask=kpm, return_lse=True,
                       method="flash_wgmma", config=cfg)
    o_ref, lse_ref, tol = _ref(fmt, *ins64, causal=causal, key_padding_mask=kpm)
    _check(o, lse, o_ref, lse_ref, tol, fmt)
    if kpm is not None and not kpm[0].any():
        assert np.all(_as_float(o)[0] == 0) and np.all(np.isneginf(lse[0]))


@pytest.mark.parametrize("fmt, causal, pad, producer, stages, shape", OVERLAP_CASES,
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x))
def test_wgmma_overlap_matches_oracle(rng, fmt, causal, pad, producer, stages, shape):
    """OVERLAP (tile j's S = Q Kᵀ in flight with tile j − 1's P·V, the softmax of S while P·V
    runs, acc's rescale deferred until P·V is waited for): causal and not, a partial last key
    tile, with and without the producer (without: the copies of tile i + STAGES wait for tile
    i's P·V), PAD with NaN in the padded keys' K and V (never read: zero-filled) and, on the
    GPU, a batch row whose keys are all padded (O = 0, LSE = −inf)."""
    (q, k, v), (q64, k64, v64) = _inputs(rng, *shape, fmt)
    kpm = _nan_padded_keys(rng, fmt, shape, k, v) if pad else None
    cfg = WgmmaConfig(Bc=64 if SIM else 128, CWG=1 if SIM else 2, STAGES=stages,
                      PRODUCER=producer, OVERLAP=True)
    _wgmma_matches(fmt, causal, kpm, cfg, (q, k, v), (q64, k64, v64))


# CWG = 3: FA3's block at d = 64 (Br = 192; with the producer 512 threads, setmaxnreg 32 / 160).
# Simulator: one block each (Nq ≤ 192): the third warpgroup's rows partly past Nq, causal with
# Nq > Nk (rows that see no key: O = 0, LSE = −inf), PAD; without a producer the 384 copiers'
# pieces are 48 rows apart, so some copy one piece of a tile fewer (copy_tile's guard). GPU:
# N not a multiple of 192, several query tiles, causal and not, PAD, OVERLAP, d = 128 at Bc = 64,
# Bc = 176 (the widest at CWG = 3; the simulator runs wide tiles in test_wgmma_wide_…).
CWG3_CASES = by_device(       # (fmt, causal, PAD, Bc, STAGES, PRODUCER, OVERLAP, shape)
    [("bf16", True, True, 64, 2, True, False, (1, 1, 130, 70, 64)),
     ("f16", False, False, 64, 2, False, False, (1, 1, 37, 70, 64))],
    [("f16", False, False, 128, 3, True, False, (2, 3, 500, 500, 64)),
     ("bf16", True, False, 128, 2, True, False, (1, 2, 1031, 517, 64)),
     ("f16", True, True, 64, 3, True, False, (2, 2, 300, 457, 64)),
     ("f16", True, False, 128, 3, True, True, (1, 2, 700, 700, 64)),
     ("bf16", False, False, 128, 2, False, False, (1, 2, 385, 200, 64)),
     ("f16", True, False, 64, 3, True, False, (1, 2, 385, 300, 128)),
     ("bf16", True, True, 176, 3, True, False, (2, 2, 500, 700, 64))])


@pytest.mark.parametrize("fmt, causal, pad, Bc, stages, producer, overlap, shape", CWG3_CASES,
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x))
def test_wgmma_cwg3_matches_oracle(rng, fmt, causal, pad, Bc, stages, producer, overlap,
                                   shape):
    """Three consumer warpgroups (Br = 192) against the oracle, with a producer or not."""
    B, H, nq, nk, d = shape
    (q, k, v), (q64, k64, v64) = _inputs(rng, *shape, fmt)
    kpm = None
    if pad:
        kpm = rng.random((B, nk)) > 0.3
        if B > 1:
            kpm[0] = False                      # a batch row with no valid key: O = 0, −inf
    cfg = WgmmaConfig(Bc=Bc, CWG=3, STAGES=stages, PRODUCER=producer, OVERLAP=overlap)
    _wgmma_matches(fmt, causal, kpm, cfg, (q, k, v), (q64, k64, v64))


# Wide K/V tiles (Bc = 96 … 192, up to attention_wgmma.widest_bc; FA3's d = 128 forward takes
# Bc = 176 with 2 stages). Simulator: one query tile, keys in 2–3 tiles of 176 or 192 (the last
# partial), causal with several tiles, PAD with a batch row of padded keys only (O = 0,
# LSE = −inf); CWG = 2 without a producer copies 32 rows a step, which does not divide 176
# (copy_tile's guard). GPU: d = 128 at 176 and 192 with 2 stages (the shared memory allows no
# more), OVERLAP, d = 64 at 192 with CWG = 2, and the other widths, 160 and 96, once each.
WIDE_CASES = by_device(       # (fmt, causal, PAD, Bc, CWG, STAGES, PRODUCER, OVERLAP, shape)
    [("f16", False, True, 176, 2, 3, False, False, (2, 1, 100, 300, 64)),
     ("bf16", True, False, 192, 1, 2, True, True, (1, 1, 60, 450, 128))],
    [("f16", False, False, 176, 2, 2, True, False, (2, 3, 1000, 1000, 128)),
     ("bf16", True, True, 176, 2, 2, True, False, (2, 2, 1031, 517, 128)),
     ("f16", True, False, 192, 2, 2, True, False, (1, 2, 700, 900, 128)),
     ("f16", False, True, 176, 2, 2, True, True, (2, 2, 500, 457, 128)),
     ("bf16", True, False, 192, 2, 3, True, False, (1, 2, 1031, 517, 64)),
     ("f16", True, True, 160, 3, 3, True, False, (1, 2, 385, 300, 64)),
     ("bf16", False, False, 96, 2, 3, True, False, (1, 2, 385, 300, 128))])


@pytest.mark.parametrize("fmt, causal, pad, Bc, cwg, stages, producer, overlap, shape",
                         WIDE_CASES,
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x))
def test_wgmma_wide_matches_oracle(rng, fmt, causal, pad, Bc, cwg, stages, producer, overlap,
                                   shape):
    """K/V tiles wider than 128 keys (S = Q Kᵀ by m64n176k16 or m64n192k16) against the
    oracle."""
    B, H, nq, nk, d = shape
    (q, k, v), (q64, k64, v64) = _inputs(rng, *shape, fmt)
    kpm = None
    if pad:
        kpm = rng.random((B, nk)) > 0.3
        kpm[0] = False                          # a batch row with no valid key: O = 0, −inf
    cfg = WgmmaConfig(Bc=Bc, CWG=cwg, STAGES=stages, PRODUCER=producer, OVERLAP=overlap)
    _wgmma_matches(fmt, causal, kpm, cfg, (q, k, v), (q64, k64, v64))


# PINGPONG: FA3's inter-warpgroup ping-pong — the consumer warpgroups take turns, round-robin
# on named barriers, to issue their wgmmas. Simulator: one block each (Bc = 64), 3 or 4 key
# tiles so the turn goes round several times, CWG = 2 and 3, with and without OVERLAP (whose
# turns also hold tile 0's S and the last P·V) and the producer, causal and not, PAD with NaN
# in the padded keys; a turn never passed on fails there as an error (named barrier … never
# fills; on the GPU: a hang). GPU: FA3's blocks (d = 128: CWG = 2; d = 64: CWG = 3; Bc = 128),
# several query tiles, causal with Nq > Nk (blocks with no key tile take no turn), a batch row
# whose keys are all padded.
PINGPONG_CASES = by_device(   # (fmt, causal, PAD, CWG, PRODUCER, STAGES, OVERLAP, shape)
    [("f16", True, False, 2, True, 2, False, (1, 1, 100, 150, 64)),
     ("bf16", False, True, 2, False, 2, True, (1, 1, 70, 200, 64)),
     ("bf16", False, False, 3, False, 2, False, (1, 1, 150, 150, 64)),
     ("f16", True, False, 3, True, 3, True, (1, 1, 130, 170, 64))],
    [("f16", False, False, 2, True, 3, False, (2, 2, 500, 700, 128)),
     ("bf16", True, True, 2, True, 3, True, (2, 2, 700, 457, 128)),
     ("f16", True, False, 2, False, 2, True, (1, 2, 300, 500, 64)),
     ("f16", True, False, 3, True, 3, False, (1, 2, 1031, 517, 64)),
     ("bf16", False, True, 3, True, 3, True, (2, 2, 385, 700, 64))])


@pytest.mark.parametrize("fmt, causal, pad, cwg, producer, stages, overlap, shape",
                         PINGPONG_CASES,
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x))
def test_wgmma_pingpong_matches_oracle(rng, fmt, causal, pad, cwg, producer, stages, overlap,
                                       shape):
    """The consumer warpgroups' turns (PINGPONG) against the oracle: the same numbers as
    without turns, and every turn taken is passed on (no barrier waits for ever)."""
    (q, k, v), (q64, k64, v64) = _inputs(rng, *shape, fmt)
    kpm = _nan_padded_keys(rng, fmt, shape, k, v) if pad else None
    cfg = WgmmaConfig(Bc=64 if SIM else 128, CWG=cwg, STAGES=stages, PRODUCER=producer,
                      OVERLAP=overlap, PINGPONG=True)
    _wgmma_matches(fmt, causal, kpm, cfg, (q, k, v), (q64, k64, v64))


# SWIZZLE: the tiles in the 128-byte swizzle (hopper.sw128_index), Q and K read K-major, V
# MN-major. Simulator: d = 64 (one 64-column half, Bc = 64) and d = 128 (two halves: LBO, the
# k16 steps past the first half), causal and PAD with NaN in the padded keys, CWG = 3 (Q rows
# 64 and 128 into the tile) with OVERLAP. GPU: the default blocks with three stages (the
# default's two run in every default-config case), several tiles, Bc = 176.
SWIZZLE_CASES = by_device(    # (fmt, causal, PAD, CWG, Bc, STAGES, OVERLAP, shape)
    [("f16", False, False, 2, 64, 2, False, (1, 1, 100, 150, 64)),
     ("bf16", True, True, 2, 64, 2, False, (1, 1, 70, 130, 128)),
     ("f16", True, False, 3, 64, 3, True, (1, 1, 150, 140, 64))],
    [("f16", False, False, 2, 128, 3, False, (2, 2, 500, 700, 128)),
     ("bf16", True, True, 2, 128, 3, False, (2, 2, 700, 457, 128)),
     ("f16", True, False, 3, 128, 3, False, (1, 2, 1031, 517, 64)),
     ("f16", False, True, 3, 128, 3, True, (2, 2, 385, 700, 64)),
     ("bf16", True, False, 2, 176, 2, False, (1, 2, 600, 900, 128))])


@pytest.mark.parametrize("fmt, causal, pad, cwg, Bc, stages, overlap, shape", SWIZZLE_CASES,
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x))
def test_wgmma_swizzle_matches_oracle(rng, fmt, causal, pad, cwg, Bc, stages, overlap, shape):
    """The swizzled tiles (WgmmaConfig(SWIZZLE=True)) against the oracle: the copies' chunk
    positions, the 1024-byte alignment of the tiles and the K-major and MN-major descriptors
    (docs/hopper_sw128.md) all meet here; a wrong one reads the wrong elements."""
    (q, k, v), (q64, k64, v64) = _inputs(rng, *shape, fmt)
    kpm = _nan_padded_keys(rng, fmt, shape, k, v) if pad else None
    cfg = WgmmaConfig(Bc=Bc, CWG=cwg, STAGES=stages, OVERLAP=overlap, SWIZZLE=True)
    _wgmma_matches(fmt, causal, kpm, cfg, (q, k, v), (q64, k64, v64))


def test_wgmma_refusals():
    """Head dims other than 64 and 128, float32, dropout, a TcConfig, a Bc that is not one of
    the kernel's widths or too wide for the consumers' registers, other configurations the
    kernel does not build: refused, naming the argument and what is expected."""
    assert TC_METHODS == ("flash_tc", "flash_wgmma")
    q = np.zeros((1, 1, 8, 80), np.float16)
    with pytest.raises(ValueError, match="q: method 'flash_wgmma' takes a head dimension of 64 "
                       "or 128; got d = 80. Use method 'flash_tc'"):
        attention(q, q, q, method="flash_wgmma")
    q = np.zeros((1, 1, 8, 64), np.float16)
    with pytest.raises(TypeError, match="fp16, bf16 or float32, all three the same; got f16, "
                       "tf32, f16"):
        attention(q, q.astype(np.float32), q, method="flash_wgmma")
    with pytest.raises(ValueError, match="no dropout"):
        attention(q, q, q, method="flash_wgmma", dropout_p=0.1)
    with pytest.raises(TypeError, match="WgmmaConfig"):
        attention(q, q, q, method="flash_wgmma", config=TcConfig())
    for Bc in (32, 144, 256):
        with pytest.raises(ValueError, match="Bc must be 64, 96, 128, 160, 176 or 192"):
            attention(q, q, q, method="flash_wgmma", config=WgmmaConfig(Bc=Bc))
    with pytest.raises(ValueError, match="Bc = 192 is too wide at d = 64 with CWG = 3: .* 160 "
                       "registers .* wider than Bc = 176 its consumers spill"):
        attention(q, q, q, method="flash_wgmma", config=WgmmaConfig(Bc=192, CWG=3))
    with pytest.raises(ValueError, match="Bc = 160 is too wide at d = 64 with CWG = 3 and "
                       "OVERLAP"):
        attention(q, q, q, method="flash_wgmma", config=WgmmaConfig(Bc=160, CWG=3,
                                                                    OVERLAP=True))
    with pytest.raises(ValueError, match="OVERLAP needs STAGES ≥ 2"):
        attention(q, q, q, method="flash_wgmma", config=WgmmaConfig(STAGES=1, OVERLAP=True))
    with pytest.raises(ValueError, match="CWG must be 1, 2 or 3"):
        attention(q, q, q, method="flash_wgmma", config=WgmmaConfig(CWG=4))
    with pytest.raises(ValueError, match="config: PINGPONG needs CWG ≥ 2 .*got CWG = 1"):
        attention(q, q, q, method="flash_wgmma", config=WgmmaConfig(CWG=1, PINGPONG=True))
    q = np.zeros((1, 1, 8, 128), np.float16)
    with pytest.raises(ValueError, match="Bc = 128 is too wide at d = 128 with CWG = 3: .* "
                       "wider than Bc = 64"):
        attention(q, q, q, method="flash_wgmma", config=WgmmaConfig(CWG=3))
    with pytest.raises(ValueError, match="Bc = 192 is too wide at d = 128 with CWG = 2 and "
                       "OVERLAP: .* 224 registers"):
        attention(q, q, q, method="flash_wgmma", config=WgmmaConfig(Bc=192, STAGES=2,
                                                                    OVERLAP=True))
    if GPU:                             # (the simulator does not check shared memory)
        with pytest.raises(ValueError,
                           match=r"bytes of shared memory at d = 128 .*\(fewer STAGES"):
            attention(q, q, q, method="flash_wgmma", config=WgmmaConfig(Bc=176, STAGES=3))


# 3xTF32 on wgmma (float32 inputs, method "flash_wgmma": kernels_numba/attention_wgmma_tf32.py).
# Simulator: 3 key tiles of 32 (the last of 6 keys) with padded keys holding NaN, so the
# two-stage ring wraps (the producer waits on EMPTY); causal with Nq > Nk (rows that see no key:
# O = 0, LSE = −inf) at d = 128. GPU: the awkward shapes, causal and key padding (a batch row
# with no valid key where B > 1), then the other tiles and rings.
WGMMA_TF32_CASES = by_device(      # (causal, PAD, (B, H, Nq, Nk, d), config)
    [(False, True, (1, 1, 21, 70, 64), None), (True, False, (1, 1, 37, 20, 128), None)],
    [(c, p, s, None) for c in (False, True) for p in (False, True)
     for s in ((1, 1, 1, 1, 64), (2, 3, 100, 100, 64), (1, 2, 257, 130, 128),
               (1, 2, 77, 300, 64), (2, 2, 1031, 517, 128), (1, 1, 1000, 998, 64))]
    + [(c, p, (2, 2, 300, 257, d), cfg) for (c, p, d, cfg) in (
        (True, True, 64, WgmmaTf32Config(Bc=64, CWG=1)),
        (False, False, 64, WgmmaTf32Config(Bc=32, CWG=2)),
        (True, False, 128, WgmmaTf32Config(Bc=64, CWG=1, STAGES=1)),
        (False, True, 64, WgmmaTf32Config(CWG=2, STAGES=3)),
        (True, True, 128, WgmmaTf32Config(STAGES=1)))])


@pytest.mark.parametrize("causal, pad, shape, config", WGMMA_TF32_CASES,
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x))
def test_wgmma_tf32_matches_oracle(rng, causal, pad, shape, config):
    """float32 through 3xTF32 on wgmma against the float64 oracle under the error model (dtype
    "tf32"); NaN in the padded keys' K and V (zeros in the packed tiles: never read)."""
    (q, k, v), ins64 = _inputs(rng, *shape, "tf32")
    kpm = _nan_padded_keys(rng, "tf32", shape, k, v) if pad else None
    _wgmma_matches("tf32", causal, kpm, config, (q, k, v), ins64)


def test_wgmma_tf32_refusals():
    """The 3xTF32 wgmma forward's configurations: a tile, block or ring it does not build, and
    the fp16 kernels' config on float32 inputs, refused naming what is expected."""
    q = np.zeros((1, 1, 8, 64), np.float32)
    with pytest.raises(ValueError, match="Bc must be 32 or 64"):
        attention(q, q, q, method="flash_wgmma", config=WgmmaTf32Config(Bc=48))
    with pytest.raises(ValueError, match="CWG must be 1 or 2"):
        attention(q, q, q, method="flash_wgmma", config=WgmmaTf32Config(CWG=3))
    with pytest.raises(ValueError, match="STAGES must be 1, 2 or 3"):
        attention(q, q, q, method="flash_wgmma", config=WgmmaTf32Config(STAGES=4))
    with pytest.raises(ValueError, match="CWG = 2 takes Bc = 32 .* got Bc = 64"):
        attention(q, q, q, method="flash_wgmma", config=WgmmaTf32Config(Bc=64, CWG=2))
    with pytest.raises(TypeError, match="float32 inputs .3xTF32. takes a WgmmaTf32Config, got "
                       "WgmmaConfig"):
        attention(q, q, q, method="flash_wgmma", config=WgmmaConfig())
    with pytest.raises(TypeError, match="WgmmaTf32Config .float32., not a TcConfig"):
        attention(q, q, q, method="flash_wgmma", config=TcConfig())
    with pytest.raises(ValueError, match="takes a head dimension of 64 or 128; got d = 32"):
        attention(q[..., :32], q[..., :32], q[..., :32], method="flash_wgmma")
    if GPU:                             # (the simulator does not check shared memory)
        q = np.zeros((1, 1, 8, 128), np.float32)
        with pytest.raises(ValueError, match=r"bytes of shared memory at d = 128 .*\(fewer "
                           "STAGES"):
            attention(q, q, q, method="flash_wgmma", config=WgmmaTf32Config(Bc=64, STAGES=3))


def test_default_method_for_fp16_follows_the_measured_rule(rng):
    """fp16 with the default method: "flash_wgmma" where it measured faster — on Hopper at d =
    64 and 128, causal or not, any length — and "flash_tc" elsewhere (other head dims, dropout,
    the simulator, other GPUs); the default call equals the chosen method's call bitwise."""
    from flashlesson import tc_methods
    hopper = GPU and tuple(cuda.get_current_device().compute_capability) == (9, 0)
    cases = [(128, 256, False, hopper), (64, 256, True, hopper), (64, 256, False, hopper),
             (64, 2048, False, hopper), (96, 256, True, False)]
    for d, nk, causal, want in cases:
        q, k, v = (rng.standard_normal((1, 2, 130, d)).astype(np.float16),
                   *(rng.standard_normal((1, 2, nk, d)).astype(np.float16) for _ in range(2)))
        assert tc_methods.wgmma_is_default(q, 0.0) == want, (d, nk, causal)
        if d == 64 and nk == 256 and GPU:       # (in the simulator both calls are flash_tc)
            o = attention(q, k, v, causal=causal)
            chosen = attention(q, k, v, causal=causal,
                               method="flash_wgmma" if want else "flash_tc")
            np.testing.assert_array_equal(o, chosen)
    assert not tc_methods.wgmma_is_default(q, 0.1)      # dropout: never
