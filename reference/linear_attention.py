"""§45 — linear attention: a different model, O(N·d²) instead of O(N²·d). Pure NumPy, float64.

Softmax attention weighs key j for query i by e^{q_i·k_j·scale} / Σ e^{…}; that exponential of
a dot product does not factor, so every (i, j) pair is formed: O(Nq·Nk·d). Linear attention
(Katharopoulos et al., 2020, "Transformers are RNNs") replaces it by a product of feature maps,
sim(q, k) = φ(q)·φ(k) with φ(x) = elu(x) + 1 (positive, so the weights are too), and then
associativity moves the parentheses::

    O = (φ(Q) φ(K)ᵀ) V / (φ(Q) φ(K)ᵀ 1)        O(Nq·Nk·d): the quadratic form
      = φ(Q) (φ(K)ᵀ V) / (φ(Q) (φ(K)ᵀ 1))      O((Nq + Nk)·d²): KV = φ(K)ᵀV is d × dv, z = φ(K)ᵀ1

The same numbers up to rounding — but not softmax attention's numbers: the model changed
(the lesson's point, against FlashAttention, which is exact and still O(N²d)).

Causal (query i sees key j iff j ≤ i + Nk − Nq, bottom-right as in :func:`causal_mask`): the
state becomes a prefix sum, KV_i = Σ_{j ≤ i+Nk−Nq} φ(k_j) v_jᵀ and z_i likewise, so a model can
run it as a recurrence (an RNN with a d × dv state). A query that sees no key gets O = 0.

Menu::

    elu_feature_map(x)                        φ(x) = x + 1 for x > 0, e^x otherwise
    linear_attention(q, k, v, causal=False)   the O(N·d²) form (KV and z; prefix sums if causal)
    linear_attention_quadratic(q, k, v, causal=False)
                                              the O(N²·d) form, the same model: the check that
                                              the parentheses were moved correctly
    linear_attention_flops(b, h, nq, nk, d, dv=None)
                                              2·(Nq + Nk)·d·(dv + 1) per head: KV' = φ(K)ᵀ[V | 1]
                                              and φ(Q)·KV' (numerators and the denominator)

Shapes as :mod:`reference.attention`: q [B, H, Nq, d] (or [Nq, d]), k [.., Nk, d],
v [.., Nk, dv]; no scale (φ has none). Inputs must be finite.
"""

import numpy as np

from .attention import causal_mask, check_count, check_qkv


def elu_feature_map(x):
    """φ(x) = elu(x) + 1: x + 1 where x > 0, e^x elsewhere (always > 0)."""
    x = np.asarray(x, np.float64)
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def _divide(num, den):
    """num / den, 0 where den = 0 (a query that saw no key)."""
    safe = np.where(den == 0.0, 1.0, den)
    return np.where(den == 0.0, 0.0, num / safe)


def linear_attention(q, k, v, causal=False):
    """§45: O = φ(Q)(φ(K)ᵀV) / (φ(Q)(φ(K)ᵀ1)), O((Nq + Nk)·d·dv); causal by prefix sums."""
    q, k, v = check_qkv(q, k, v)
    fq, fk = elu_feature_map(q), elu_feature_map(k)
    if not causal:
        kv = np.swapaxes(fk, -1, -2) @ v                # KV = φ(K)ᵀ V        [.., d, dv]
        z = fk.sum(axis=-2)                             # z = φ(K)ᵀ 1         [.., d]
        num = fq @ kv                                   # φ(Q) KV             [.., Nq, dv]
        den = np.einsum("...id,...d->...i", fq, z)      # φ(Q) z              [.., Nq]
        return _divide(num, den[..., None])
    nq, nk = q.shape[-2], k.shape[-2]
    # prefix sums over keys: KV_j = Σ_{j' ≤ j} φ(k_j') v_j'ᵀ, z_j = Σ_{j' ≤ j} φ(k_j')
    kv = np.cumsum(fk[..., :, :, None] * v[..., :, None, :], axis=-3)   # [.., Nk, d, dv]
    z = np.cumsum(fk, axis=-2)                                          # [.., Nk, d]
    last = np.arange(nq) + (nk - nq)                    # the last key query i sees
    sees = last >= 0
    idx = np.clip(last, 0, nk - 1)
    num = np.einsum("...id,...ide->...ie", fq, kv[..., idx, :, :])
    den = np.einsum("...id,...id->...i", fq, z[..., idx, :])
    den = np.where(sees, den, 0.0)
    return _divide(num, den[..., None])


def linear_attention_quadratic(q, k, v, causal=False):
    """§45: the same model written the quadratic way, A = φ(Q)φ(K)ᵀ (masked if causal),
    O = A V / A 1 — O(Nq·Nk·d), the form softmax attention is stuck with."""
    q, k, v = check_qkv(q, k, v)
    a = elu_feature_map(q) @ np.swapaxes(elu_feature_map(k), -1, -2)   # [.., Nq, Nk]
    if causal:
        a = np.where(causal_mask(q.shape[-2], k.shape[-2]), a, 0.0)
    return _divide(a @ v, a.sum(axis=-1, keepdims=True))


def linear_attention_flops(b, h, nq, nk, d, dv=None):
    """§45: multiply-adds ×2 of the O(N·d²) form per call: KV' = φ(K)ᵀ[V | 1] is
    2·Nk·d·(dv + 1), φ(Q)·KV' (numerators and denominator) 2·Nq·d·(dv + 1); the same with or
    without causal (the prefix sum adds each key once). Softmax attention: 4·Nq·Nk·d."""
    b, h, nq, nk, d = (check_count(x, n) for x, n in
                       ((b, "b"), (h, "h"), (nq, "nq"), (nk, "nk"), (d, "d")))
    dv = d if dv is None else check_count(dv, "dv")
    return 2 * b * h * (nq + nk) * d * (dv + 1)


__all__ = ["elu_feature_map", "linear_attention", "linear_attention_flops",
           "linear_attention_quadratic"]
