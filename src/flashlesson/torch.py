"""``flashlesson.torch``: the FlashAttention kernels (forward §32, backward §30) as a torch
autograd function over CUDA tensors, zero-copy, usable where a model calls
``torch.nn.functional.scaled_dot_product_attention``.

    from flashlesson.torch import scaled_dot_product_attention as sdpa
    out = sdpa(q, k, v, is_causal=True, dropout_p=0.1)        # q, k, v: float32 CUDA tensors
    out.sum().backward()                                      # dq, dk, dv from the §30 kernels

Tensors go to the kernels by their data pointers (no copy, no Numba wrapper); the results are
``torch.empty`` tensors of the inputs' dtype (bf16 stays torch.bfloat16); kernels run on torch's
current stream, so ``torch.cuda.stream(s)`` blocks and CUDA-graph capture (``torch.cuda.graph``,
after a warm-up call that compiles the kernels) work. The forward saves O and LSE (never P) for
the backward, which recomputes P tile by tile.

What differs from ``F.scaled_dot_product_attention``: ``attn_mask`` is taken only as torch
means a bool mask (True = take part) and only when it is a key padding mask, shape [B, 1, 1, Nk]
(§35); any other shape, and every float (additive) mask, is refused — never reinterpreted.
``key_padding_mask`` [B, Nk] is a bool (or uint8) tensor, True / nonzero = the key takes part;
a float one is refused (it would read as an additive mask, the opposite convention);
``is_causal`` with Nq ≠ Nk aligns bottom-right (flash-attn ≥ 2.1), torch aligns top-left;
dropout draws its Philox seed from torch's CUDA generator unless ``seed`` is given, and the same
seed regenerates the same keep-mask in the backward (``flashlesson.dropout_keep_mask`` shows it).
float32 runs the CUDA-core kernels (§32, §30); float16 and bfloat16 run the tensor-core kernels
(§37: ``flash_wgmma`` on Hopper, ``flash_tc`` elsewhere, forward and backward; no dropout there).
Grouped-query attention is not supported. The backward is differentiable once: a gradient taken
with ``create_graph=True`` and differentiated again (a gradient penalty) raises, as torch's own
flash backend does, instead of returning a gradient without its graph.

Needs torch with CUDA (``pip install -e ".[torch]"``); importing this module without torch raises
ImportError.
"""

import torch

from . import checks
from .attention_methods import attention
from .backward_methods import attention_backward
from .tc_methods import BFloat16

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _tensor(arr, like):
    """A result as a torch tensor on like's device. On the GPU the library already returns
    torch tensors for torch inputs (allocated by ``torch.empty`` on the current stream): they
    pass through untouched. (A Numba device array or a BFloat16 over one, as the simulator
    gives, is viewed without a copy.)"""
    if isinstance(arr, torch.Tensor):
        return arr
    if isinstance(arr, BFloat16):               # bf16 travels as its 16-bit patterns
        return torch.as_tensor(arr.bits, device=like.device).view(torch.bfloat16)
    return torch.as_tensor(arr, device=like.device)


class FlashAttentionFunction(torch.autograd.Function):
    """autograd.Function: forward = ``flashlesson.attention(method="flash")``, backward =
    ``flashlesson.attention_backward(method="flash")``, both on torch tensors directly (torch's
    current stream, outputs from ``torch.empty``: usable inside ``torch.cuda.graph``). From
    the second step with the same shapes both replay their recorded launches
    (``flashlesson.calls``). The tensors are passed as they are, not detached: the kernels
    read their memory by pointer, and autograd is this Function's business."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, key_padding_mask, dropout_p, seed):
        if not q.is_contiguous():
            q = q.contiguous()
        if not k.is_contiguous():
            k = k.contiguous()
        if not v.is_contiguous():
            v = v.contiguous()
        o, lse = attention(q, k, v, causal=causal, scale=scale,
                           key_padding_mask=key_padding_mask, dropout_p=dropout_p, seed=seed,
                           return_lse=True)
        o, lse = _tensor(o, q), _tensor(lse, q)
        if key_padding_mask is None:
            ctx.save_for_backward(q, k, v, o, lse)
        else:
            ctx.save_for_backward(q, k, v, o, lse, key_padding_mask)
        ctx.options = (causal, scale, dropout_p, seed)
        return o

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do):
        # once_differentiable: the kernels are not themselves differentiable, so a second
        # derivative through them raises rather than coming back as the first-order term only.
        q, k, v, o, lse, *mask = ctx.saved_tensors
        key_padding_mask = mask[0] if mask else None
        causal, scale, dropout_p, seed = ctx.options
        dq, dk, dv = attention_backward(do if do.is_contiguous() else do.contiguous(), q, k, v,
                                        o, lse, causal=causal, scale=scale,
                                        key_padding_mask=key_padding_mask,
                                        dropout_p=dropout_p, seed=seed)
        return _tensor(dq, q), _tensor(dk, q), _tensor(dv, q), None, None, None, None, None


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, *, key_padding_mask=None,
                                 seed=None):
    """Drop-in for ``torch.nn.functional.scaled_dot_product_attention`` on float32, float16 or
    bfloat16 CUDA tensors [B, H, N, d] (see the module docstring for the differences)."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor) or not t.is_cuda or t.dtype not in DTYPES:
            raise TypeError(f"{name}: expected a float32, float16 or bfloat16 CUDA tensor, got "
                            f"{getattr(t, 'dtype', type(t).__name__)} on "
                            f"{getattr(t, 'device', '?')}")
    if not query.dtype == key.dtype == value.dtype:
        raise TypeError(f"query, key, value: expected one dtype, got {query.dtype}, {key.dtype}, "
                        f"{value.dtype}")
    is_causal = checks.flag(is_causal, "is_causal")
    dropout_p = checks.probability(dropout_p, "dropout_p")
    if dropout_p > 0 and query.dtype != torch.float32:
        raise ValueError(f"dropout_p: the tensor-core kernels ({query.dtype}) have no dropout; "
                         "use float32 tensors for dropout")
    if attn_mask is not None:
        if key_padding_mask is not None:
            raise ValueError("attn_mask: give attn_mask or key_padding_mask, not both")
        key_padding_mask = _padding_from_attn_mask(attn_mask, query, key)
    if key_padding_mask is not None:
        key_padding_mask = _bool_mask(key_padding_mask, "key_padding_mask", query)
    if dropout_p > 0 and seed is None:          # a fresh mask per call, from torch's generator
        seed = int(torch.randint(0, 2**62, (1,), device="cpu").item())
    return FlashAttentionFunction.apply(query, key, value, is_causal, scale,
                                        key_padding_mask, dropout_p, 0 if seed is None else seed)


def _bool_mask(mask, name, query):
    """A bool or uint8 tensor (True / nonzero = take part), as a contiguous bool CUDA tensor on
    query's device; a float mask is refused: torch reads float masks as added to the scores
    (0 = take part, −inf = masked), the opposite of a bool mask, so converting it would invert
    it."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name}: expected a bool torch tensor (True = the key takes part), got "
                        f"{type(mask).__name__}")
    if mask.dtype not in (torch.bool, torch.uint8):
        raise TypeError(f"{name}: expected a bool tensor (True = the key takes part), got "
                        f"{mask.dtype}; float (additive) masks are not taken")
    return mask.to(device=query.device, dtype=torch.bool).contiguous()


def _padding_from_attn_mask(attn_mask, query, key):
    """torch's attn_mask, when it is a key padding mask: bool [B, 1, 1, Nk] → bool [B, Nk]."""
    mask = _bool_mask(attn_mask, "attn_mask", query)
    B, nk = query.shape[0], key.shape[-2]
    if mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[2] != 1 or \
            mask.shape[3] != nk or mask.shape[0] not in (1, B):
        raise ValueError(f"attn_mask: only a key padding mask is taken, bool of shape [B, 1, 1, "
                         f"Nk] = [{B}, 1, 1, {nk}]; got {tuple(mask.shape)} (pass "
                         "key_padding_mask [B, Nk], or is_causal)")
    return mask[:, 0, 0, :].expand(B, nk).contiguous()
