"""§37: FlashAttention on tensor cores (method "flash_tc") against the float64 oracle.

fp16 and bf16 inputs (fp32 accumulation), and float32 inputs through 3xTF32. The oracle gets
the inputs as the kernel sees them (rounded to fp16/bf16), so the error measured is the
kernel's own (P rounded to 16 bits for P·V, O rounded on the way out). Criterion on the GPU:
no more than 2× the error of torch SDPA in the same dtype (flash-attn's own test rule), when
torch is installed; always relative error ≤ 1e-2 (fp16/bf16) or 1e-5 (3xTF32). Outputs
poisoned (NaN) before the kernel runs.
"""

import numpy as np
import pytest
from conftest import GPU, SIM, by_device
from numba import cuda

import flashlesson
from flashlesson import BFloat16, TcConfig, attention
from reference import attention as ref_attention

# (B, H, Nq, Nk, d): N = 1, N < tile, N not a multiple of 16 or of Bc, Nq ≠ Nk both ways
SHAPES = by_device(
    [(1, 1, 1, 1, 16), (1, 2, 21, 35, 32), (1, 1, 37, 9, 16)],
    [(1, 1, 1, 1, 64), (2, 3, 100, 100, 64), (1, 2, 257, 130, 80), (1, 2, 77, 300, 96),
     (2, 2, 129, 129, 128), (1, 2, 200, 65, 256), (1, 1, 1000, 1000, 64),
     (1, 2, 1031, 517, 128)])
REL = {"f16": 1e-2, "bf16": 1e-2, "tf32": 1e-5}


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


def _check(o, lse, o_ref, lse_ref, fmt, torch_err=None):
    o = _as_float(o)
    assert not np.isnan(o).any() and not np.isnan(lse).any(), "unwritten (poisoned) output"
    err = np.max(np.abs(o - o_ref))
    rel = err / max(np.max(np.abs(o_ref)), 1e-30)
    assert rel <= REL[fmt], f"{fmt}: relative error {rel:.2e}"
    if torch_err is not None:
        assert err <= 2 * torch_err + 1e-6, f"{fmt}: error {err:.2e} > 2 × torch's {torch_err:.2e}"
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse_ref))
    fin = np.isfinite(lse_ref)
    np.testing.assert_allclose(lse[fin], lse_ref[fin], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fmt", ["f16", "bf16", "tf32"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_oracle(rng, shape, causal, fmt):
    (q, k, v), (q64, k64, v64) = _inputs(rng, *shape, fmt)
    o, lse = attention(q, k, v, causal=causal, return_lse=True, method="flash_tc")
    o_ref, lse_ref = ref_attention(q64, k64, v64, causal=causal)
    _check(o, lse, o_ref, lse_ref, fmt, _torch_error(q64, k64, v64, fmt, causal, o_ref))


def test_fp16_goes_to_tensor_cores_by_itself(rng):
    (q, k, v), (q64, k64, v64) = _inputs(rng, 1, 1, 20, 20, 16, "f16")
    o, lse = attention(q, k, v, return_lse=True)    # method "flash" (the default)
    assert o.dtype == np.float16 and o.shape == q.shape
    _check(o, lse, *ref_attention(q64, k64, v64), "f16")


def test_padding_and_fully_masked_rows(rng):
    B, H, nq, nk, d = by_device((2, 1, 19, 33, 16), (3, 4, 300, 257, 64))
    (q, k, v), (q64, k64, v64) = _inputs(rng, B, H, nq, nk, d, "f16")
    kpm = rng.random((B, nk)) > 0.4
    kpm[0] = False                             # batch row 0: no key at all → zeros, −inf
    o, lse = attention(q, k, v, key_padding_mask=kpm, return_lse=True)
    o_ref, lse_ref = ref_attention(q64, k64, v64, key_padding_mask=kpm)
    _check(o, lse, o_ref, lse_ref, "f16")
    assert np.all(o[0] == 0) and np.all(np.isneginf(lse[0]))


def test_device_arrays_in_device_arrays_out(rng):
    (q, k, v), (q64, k64, v64) = _inputs(rng, 1, 2, 17, 17, 16, "f16")
    o, lse = attention(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v),
                       causal=True, return_lse=True)
    o, lse = o.copy_to_host(), lse.copy_to_host()
    assert o.dtype == np.float16
    _check(o, lse, *ref_attention(q64, k64, v64, causal=True), "f16")


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
    _check(o, lse, *ref_attention(q64, k64, v64, causal=causal), "f16")


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
    _check(o, lse, *ref_attention(q64, k64, v64, key_padding_mask=kpm), fmt)


def test_torch_dtypes_are_read_from_their_cuda_interface():
    """np.dtype() cannot read torch.float16: a torch tensor's fp16-ness comes from the typestr
    of its __cuda_array_interface__ (stand-ins here: torch is optional and the CI has no GPU)."""
    from flashlesson.tc_methods import low_precision

    def tensor(typestr, dtype):
        cls = type("Tensor", (), {"__module__": "torch",
                                  "__cuda_array_interface__": {"typestr": typestr},
                                  "dtype": dtype})
        return cls()

    assert low_precision(tensor("<f2", "torch.float16"))
    assert low_precision(tensor("<f2", "torch.bfloat16"))     # (torch calls bf16 '<f2' too)
    assert not low_precision(tensor("<f4", "torch.float32"))
    cpu = type("Tensor", (), {"__module__": "torch", "dtype": "torch.float16"})()
    assert not low_precision(cpu)              # no CUDA interface: the ordinary checks refuse it
    assert low_precision(np.zeros(2, np.float16)) and not low_precision(np.zeros(2, np.float32))


def test_bad_inputs(rng):
    q = rng.standard_normal((1, 1, 8, 24)).astype(np.float16)
    with pytest.raises(ValueError, match="multiple of 16"):
        attention(q, q, q)
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
