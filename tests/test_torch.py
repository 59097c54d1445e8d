"""``flashlesson.torch`` (GPU, torch installed): the autograd function against torch autograd of
the math formula, zero-copy, dropout's mask reproducible from its seed."""

import numpy as np
import pytest
from conftest import SIM

pytestmark = pytest.mark.skipif(SIM, reason="GPU: needs CUDA tensors")
torch = pytest.importorskip("torch")


def _grads(fn, q, k, v, do):
    xs = [t.clone().requires_grad_() for t in (q, k, v)]
    out = fn(*xs)
    return (out, *torch.autograd.grad(out, xs, do))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 3, 100, 64), (1, 2, 257, 80), (1, 1, 33, 128)])
def test_autograd_matches_torch_math(causal, shape):
    from flashlesson.torch import scaled_dot_product_attention as fl_sdpa
    F = torch.nn.functional
    q, k, v, do = (torch.randn(shape, device="cuda") for _ in range(4))
    got = _grads(lambda a, b, c: fl_sdpa(a, b, c, is_causal=causal), q, k, v, do)
    want = _grads(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal),
                  *(t.double() for t in (q, k, v, do)))
    for g, w, name in zip(got, want, ("o", "dq", "dk", "dv")):
        err = float((g.double() - w).abs().max() / w.abs().max())
        assert err < 1e-4, f"{name}: relative error {err:.2e}"


@pytest.mark.parametrize("d", [64, 59, 40])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_half_precision_on_tensor_cores(dtype, causal, d):
    """fp16 / bf16 tensors take the tensor-core kernels (§37) forward and backward: output and
    gradients in the input dtype, errors against float64 no more than 2× those of torch's own
    SDPA in the same dtype (+ a small floor). Any head dim: 59 (rows of halves), 40 (16-byte
    pieces, padded to 48 inside the kernels)."""
    from flashlesson.torch import scaled_dot_product_attention as fl_sdpa
    F = torch.nn.functional
    dt = getattr(torch, dtype)
    q, k, v, do = (torch.randn(2, 3, 150, d, device="cuda").to(dt) for _ in range(4))
    got = _grads(lambda a, b, c: fl_sdpa(a, b, c, is_causal=causal), q, k, v, do)
    theirs = _grads(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal),
                    q, k, v, do)
    want = _grads(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal),
                  *(t.double() for t in (q, k, v, do)))
    for g, t, w, name in zip(got, theirs, want, ("o", "dq", "dk", "dv")):
        assert g.dtype == dt, f"{name}: dtype {g.dtype}"
        err, err_t = (float((x.double() - w).abs().max()) for x in (g, t))
        assert err <= 2 * err_t + 1e-3 * float(w.abs().max()), \
            f"{name}: error {err:.2e} > 2 × torch's {err_t:.2e}"


def test_zero_copy_and_dropout_mask_from_seed():
    import flashlesson
    from flashlesson import reference
    from flashlesson.torch import scaled_dot_product_attention as fl_sdpa
    B, H, N, d, p = 2, 2, 70, 32, 0.2
    q, k, v = (torch.randn(B, H, N, d, device="cuda", requires_grad=True) for _ in range(3))
    out = fl_sdpa(q, k, v, dropout_p=p, seed=42)
    assert out.is_cuda and out.dtype == torch.float32
    mask = flashlesson.dropout_keep_mask(42, B, H, N, N, p)
    o_ref, _ = reference.attention(*(t.detach().cpu().numpy() for t in (q, k, v)),
                                   dropout_mask=mask, dropout_p=p)
    np.testing.assert_allclose(out.detach().cpu().numpy(), o_ref, rtol=1e-5, atol=1e-5)
    out.sum().backward()                          # the backward regenerates the same mask
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_refuses_what_it_does_not_do():
    from flashlesson.torch import scaled_dot_product_attention as fl_sdpa
    q = torch.randn(1, 1, 8, 16, device="cuda")
    with pytest.raises(ValueError, match="attn_mask: only a key padding mask is taken"):
        fl_sdpa(q, q, q, attn_mask=torch.ones(8, 8, dtype=torch.bool, device="cuda"))
    with pytest.raises(TypeError, match="query: expected a float32, float16 or bfloat16 CUDA"):
        fl_sdpa(q.double(), q, q)
    with pytest.raises(TypeError, match="query, key, value: expected one dtype"):
        fl_sdpa(q.half(), q, q)
    with pytest.raises(ValueError, match="dropout_p: the tensor-core kernels"):
        fl_sdpa(q.half(), q.half(), q.half(), dropout_p=0.1)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_double_backward_raises_instead_of_a_gradient_without_its_graph(dtype):
    """A gradient penalty, d/dq [f + |∂f/∂q|²], needs the backward's own derivative, which the
    kernels do not have: the second backward raises (as torch's flash backend does). The same
    penalty through SDPA's math backend is computed (the control: the test's penalty is a real
    second derivative)."""
    from flashlesson.torch import scaled_dot_product_attention as fl_sdpa
    F = torch.nn.functional
    dt = getattr(torch, dtype)
    q, k, v = (torch.randn(1, 2, 40, 32, device="cuda", dtype=dt, requires_grad=True)
               for _ in range(3))

    def penalty(sdpa):
        out = sdpa(q, k, v)
        (gq,) = torch.autograd.grad(out.float().square().sum(), q, create_graph=True)
        return out.float().sum() + gq.float().square().sum()

    with pytest.raises(RuntimeError, match="once_differentiable|differentiate twice"):
        penalty(fl_sdpa).backward()
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        math = penalty(F.scaled_dot_product_attention)
    (g2,) = torch.autograd.grad(math, q)
    assert torch.isfinite(g2).all() and float(g2.abs().max()) > 0


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_a_negated_view_is_read_as_negated(dtype):
    """torch's lazy negation (``torch._neg_view``, also made inside autograd) leaves the memory
    holding x while the tensor means −x: attention(−q) must differ from attention(q), through
    the public call (twice: the second call with the same key would replay a call plan) and
    through flashlesson.torch."""
    import flashlesson as fl
    from flashlesson.torch import scaled_dot_product_attention as fl_sdpa
    dt = getattr(torch, dtype)
    q, k, v = (torch.randn(1, 2, 64, 64, device="cuda", dtype=dt) for _ in range(3))
    neg = torch._neg_view(q)
    assert neg.is_neg()
    want = fl.attention(-q, k, v)                          # a plain tensor holding −q
    plain = [fl.attention(q, k, v) for _ in range(2)]      # the key's call plan, recorded
    for got in (fl.attention(neg, k, v), fl.attention(neg, k, v), fl_sdpa(neg, k, v)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert not torch.equal(plain[1], want)
