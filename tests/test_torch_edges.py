"""Tensors at the edges of what torch can hand over (GPU, torch installed): every input at a
storage offset of every size its dtype allows (2…14 bytes for fp16/bf16, 4…12 for float32 —
rows that do not start on a 16-byte boundary, which the kernels' 16-byte loads cannot read),
each of q, k, v (forward), do, q, k, v, o, lse (backward) and the key padding mask (1…15
bytes). Each call must give what the same call on aligned copies gives, never crash the
process (a misaligned 16-byte load ends the CUDA context) and never be silently wrong."""

import pytest
from conftest import SIM

pytestmark = pytest.mark.skipif(SIM, reason="GPU: torch CUDA tensors")
torch = pytest.importorskip("torch")

import flashlesson as fl  # noqa: E402

SHAPE = (1, 2, 70, 64)
# (dtype, method, head dim): the defaults, and the paths that once read rows 16 bytes at a
# time without asking where they start
CASES = [("float16", None, 64), ("bfloat16", None, 64), ("float32", None, 64),
         ("float16", "flash_tc", 32), ("bfloat16", "flash_tc", 40),
         ("float32", "flash_wgmma", 64), ("float16", "flash_wgmma", 128)]


def _at_offset(x, nbytes):
    """x's values in a view whose data starts ``nbytes`` past a 512-byte aligned allocation."""
    item = x.element_size()
    assert nbytes % item == 0
    n = x.numel()
    buf = torch.empty(n + 64 // item, dtype=x.dtype, device=x.device)
    view = buf[nbytes // item: nbytes // item + n].view(x.shape)
    view.copy_(x)
    assert view.data_ptr() % 16 == nbytes % 16
    return view


def _offsets(dtype):
    item = torch.empty((), dtype=dtype).element_size()
    return [b for b in range(item, 16, item)]


def _supported(method, d):
    cc = torch.cuda.get_device_capability()
    return method != "flash_wgmma" or cc[0] == 9


def _inputs(dtype, d, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(SHAPE[:3] + (d,), device="cuda", generator=g).to(getattr(torch, dtype))
            for _ in range(4)]


@pytest.mark.parametrize("dtype,method,d", CASES)
def test_forward_inputs_at_every_offset(dtype, method, d):
    if not _supported(method, d):
        pytest.skip("flash_wgmma needs Hopper")
    q, k, v, _ = _inputs(dtype, d)
    kw = {} if method is None else {"method": method}
    want_o, want_lse = fl.attention(q, k, v, return_lse=True, **kw)
    for name in ("q", "k", "v"):
        for nbytes in _offsets(q.dtype):
            args = dict(q=q, k=k, v=v)
            args[name] = _at_offset(args[name], nbytes)
            for _ in range(2):                  # the second call: the call plan's path
                o, lse = fl.attention(args["q"], args["k"], args["v"], return_lse=True, **kw)
                torch.testing.assert_close(o, want_o, rtol=1e-6, atol=1e-6,
                                           msg=f"{name} +{nbytes} B: O")
                torch.testing.assert_close(lse, want_lse, rtol=1e-6, atol=1e-6,
                                           msg=f"{name} +{nbytes} B: LSE")
    torch.cuda.synchronize()


@pytest.mark.parametrize("dtype,method,d", CASES)
def test_backward_inputs_at_every_offset(dtype, method, d):
    if not _supported(method, d):
        pytest.skip("flash_wgmma needs Hopper")
    q, k, v, do = _inputs(dtype, d, seed=1)
    kw = {} if method is None else {"method": method}
    o, lse = fl.attention(q, k, v, return_lse=True, **kw)
    want = fl.attention_backward(do, q, k, v, o, lse, **kw)
    for name in ("do", "q", "k", "v", "o", "lse"):
        for nbytes in _offsets(lse.dtype if name == "lse" else q.dtype):
            args = dict(do=do, q=q, k=k, v=v, o=o, lse=lse)
            args[name] = _at_offset(args[name], nbytes)
            for _ in range(2):
                got = fl.attention_backward(args["do"], args["q"], args["k"], args["v"],
                                            args["o"], args["lse"], **kw)
                for g, w, gname in zip(got, want, ("dq", "dk", "dv")):
                    torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6,
                                               msg=f"{name} +{nbytes} B: {gname}")
    torch.cuda.synchronize()


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_key_padding_mask_at_every_byte_offset(dtype):
    q, k, v, do = _inputs(dtype, 64, seed=2)
    mask = torch.rand(SHAPE[0], SHAPE[2], device="cuda") > 0.3
    want = fl.attention(q, k, v, key_padding_mask=mask)
    for nbytes in range(1, 16):
        got = fl.attention(q, k, v, key_padding_mask=_at_offset(mask, nbytes))
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=f"mask +{nbytes} B")
    torch.cuda.synchronize()


def test_a_cpu_mask_with_cuda_inputs_is_named():
    q, k, v, _ = _inputs("float32", 64, seed=3)
    mask = torch.ones(SHAPE[0], SHAPE[2], dtype=torch.bool)          # on the CPU
    with pytest.raises((TypeError, ValueError), match="key_padding_mask"):
        fl.attention(q, k, v, key_padding_mask=mask)
