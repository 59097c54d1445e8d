"""``flashlesson.torch``: the FlashAttention kernels (forward §32, backward §30) as a torch
autograd function over CUDA tensors, zero-copy, usable where a model calls
``torch.nn.functional.scaled_dot_product_attention``.

    from flashlesson.torch import scaled_dot_product_attention as sdpa
    out = sdpa(q, k, v, is_causal=True, dropout_p=0.1)        # q, k, v: float32 CUDA tensors
    out.sum().backward()                                      # dq, dk, dv from the §30 kernels

Tensors go to the kernels through ``__cuda_array_interface__`` (no copy) and the results come
back the same way; the forward saves O and LSE (never P) for the backward, which recomputes P
tile by tile. Kernels are launched on the default stream, as torch's own work is unless a
model switches streams.

What differs from ``F.scaled_dot_product_attention``: ``attn_mask`` is refused (an arbitrary
[Nq, Nk] mask is not what §35 covers; pass ``key_padding_mask`` [B, Nk], True = take part);
``is_causal`` with Nq ≠ Nk aligns bottom-right (flash-attn ≥ 2.1), torch aligns top-left;
dropout draws its Philox seed from torch's CUDA generator unless ``seed`` is given, and the same
seed regenerates the same keep-mask in the backward (``flashlesson.dropout_keep_mask`` shows it).
float32 runs the CUDA-core kernels (§32, §30); float16 and bfloat16 run the tensor-core kernels
(§37: ``flash_tc`` forward and backward; no dropout there). Grouped-query attention is not
supported.

Needs torch with CUDA (``pip install -e ".[torch]"``); importing this module without torch raises
ImportError.
"""

import torch

from .attention_methods import attention
from .backward_methods import attention_backward
from .tc_methods import BFloat16

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _tensor(arr, like):
    """A numba device array (or a BFloat16 over one) as a torch tensor on like's device,
    without a copy."""
    if isinstance(arr, BFloat16):               # bf16 travels as its 16-bit patterns
        return torch.as_tensor(arr.bits, device=like.device).view(torch.bfloat16)
    return torch.as_tensor(arr, device=like.device)


class FlashAttentionFunction(torch.autograd.Function):
    """autograd.Function: forward = ``flashlesson.attention(method="flash")``, backward =
    ``flashlesson.attention_backward(method="flash")``."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, key_padding_mask, dropout_p, seed):
        # (detached: torch refuses __cuda_array_interface__ on a tensor that requires grad)
        q, k, v = (t.detach().contiguous() for t in (q, k, v))
        o, lse = attention(q, k, v, causal=causal, scale=scale,
                           key_padding_mask=key_padding_mask, dropout_p=dropout_p, seed=seed,
                           return_lse=True)
        o, lse = _tensor(o, q), _tensor(lse, q)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.options = dict(causal=causal, scale=scale, key_padding_mask=key_padding_mask,
                           dropout_p=dropout_p, seed=seed)
        return o

    @staticmethod
    def backward(ctx, do):
        # (detached: autograd marks the saved output o as requiring grad)
        q, k, v, o, lse = (t.detach() for t in ctx.saved_tensors)
        dq, dk, dv = attention_backward(do.detach().contiguous(), q, k, v, o, lse,
                                        **ctx.options)
        return _tensor(dq, q), _tensor(dk, q), _tensor(dv, q), None, None, None, None, None


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, *, key_padding_mask=None,
                                 seed=None):
    """Drop-in for ``torch.nn.functional.scaled_dot_product_attention`` on float32, float16 or
    bfloat16 CUDA tensors [B, H, N, d] (see the module docstring for the differences)."""
    if attn_mask is not None:
        raise ValueError("attn_mask: not supported; pass key_padding_mask (bool [B, Nk], True = "
                         "the key takes part) and/or is_causal instead")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor) or not t.is_cuda or t.dtype not in DTYPES:
            raise TypeError(f"{name}: expected a float32, float16 or bfloat16 CUDA tensor, got "
                            f"{getattr(t, 'dtype', type(t).__name__)} on "
                            f"{getattr(t, 'device', '?')}")
    if not query.dtype == key.dtype == value.dtype:
        raise TypeError(f"query, key, value: expected one dtype, got {query.dtype}, {key.dtype}, "
                        f"{value.dtype}")
    if dropout_p > 0 and query.dtype != torch.float32:
        raise ValueError(f"dropout_p: the tensor-core kernels ({query.dtype}) have no dropout; "
                         "use float32 tensors for dropout")
    if dropout_p > 0 and seed is None:          # a fresh mask per call, from torch's generator
        seed = int(torch.randint(0, 2**62, (1,), device="cpu").item())
    if key_padding_mask is not None and isinstance(key_padding_mask, torch.Tensor):
        key_padding_mask = key_padding_mask.to(device=query.device, dtype=torch.bool)
        key_padding_mask = key_padding_mask.contiguous()
    return FlashAttentionFunction.apply(query, key, value, bool(is_causal), scale,
                                        key_padding_mask, float(dropout_p), seed or 0)
