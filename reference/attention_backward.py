"""Attention backward oracle for lesson 22, §30–31 (with §34–36 masks): pure NumPy, float64.

The backward kernels in ``kernels_numba/`` are checked against these; the oracle itself is
checked against finite differences in ``tests/test_reference_backward.py``.

Menu (§ = section of the lesson, see ``shared/lesson/OUTLINE.md``)::

    attention_backward(do, q, k, v, ...)  §30  (dq, dk, dv) of O = attention(q, k, v, ...) for
                                               an upstream gradient dO = ∂L/∂O
    attention_backward_intermediates(do, q, k, v, ...)
                                          §30  the same, with every matrix on the way in a dict:
                                               S, P (rebuilt from lse), Z, P̃, O, lse, D, dP̃,
                                               dP, dS, dq, dk, dv (for teaching and tests)
    flash_attention_backward_tiled(do, q, k, v, Br, Bc, ...)
                                          §30  the same gradients tile by tile, line for line
                                               with kernels_numba/lesson/backward.py: K/V tiles
                                               outside and Q tiles inside for dK, dV; Q tiles
                                               outside for dQ (S, P, dP, dS, D, LSE named alike)
    attention_backward_flops(b, h, nq, nk, d, causal)
                                          §31  5 matmuls instead of the forward's 2: 2.5 × the
                                               forward FLOPs, 10·B·H·Nq·Nk·d (halved if causal)

The formulas. Forward, per (batch, head), as :func:`reference.attention.attention`::

    S = Q Kᵀ · scale             [Nq, Nk]   (−inf where masked: causal, key padding)
    P = softmax(S)  row-wise     [Nq, Nk]   lse_i = ln Σ_j e^{S_ij}   (saved, §29–30)
    P̃ = P ∘ Z,  Z = M / (1 − p)             (§36 dropout; Z = 1 without dropout)
    O = P̃ V                      [Nq, dv]

Backward, given dO = ∂L/∂O [Nq, dv]::

    P_ij = e^{S_ij − lse_i}                 §30: P is rebuilt from S and the saved lse,
                                            never stored (a kernel recomputes S tile by tile)
    dV  = P̃ᵀ dO                  [Nk, dv]
    dP̃  = dO Vᵀ                  [Nq, Nk]
    dP  = dP̃ ∘ Z                            (the same mask and scale as the forward, §36)
    D_i = Σ_c dO_ic O_ic                    (= Σ_j P_ij dP_ij: one dot product per row
                                             instead of a row of P times a row of dP)
    dS  = P ∘ (dP − D)                      (the softmax Jacobian, row by row:
                                             ∂P_ij/∂S_ik = P_ij (δ_jk − P_ik))
    dQ  = dS K · scale           [Nq, d]
    dK  = dSᵀ Q · scale          [Nk, d]

Why D = rowsum(dO ∘ O): Σ_j P_ij dP_ij = Σ_j P_ij Z_ij Σ_c dO_ic V_jc = Σ_c dO_ic (P̃ V)_ic
= Σ_c dO_ic O_ic — with the dropped O, so it holds with dropout too. (flash-attn computes D
in a small pre-processing kernel before the main backward loop, one row of O·dO at a time.)

Conventions (as :mod:`reference.attention`, whose checks these functions share):

* Shapes: q [B, H, Nq, d], k [B, H, Nk, d], v [B, H, Nk, dv], do [B, H, Nq, dv] (O's shape);
  or a single head as 2-D arrays. Returns dq, dk, dv of q's, k's and v's shapes, float64.
  Nq = 0 and Nk = 0 are allowed.
* ``causal`` (bottom-right, :func:`reference.attention.causal_mask`), ``key_padding_mask``
  ([B, Nk] or [Nk] bool), ``scale`` (default 1/√d), ``dropout_mask`` (bool keep-mask
  broadcastable to [B, H, Nq, Nk]) and ``dropout_p`` mean what they mean in the forward oracle;
  the backward is that of the forward called with the same arguments. With dropout, the mask
  is held fixed: the gradient is that of the differentiable function q, k, v ↦ O for this M.
* Masked entries have P_ij = 0 exactly, hence dS_ij = 0 exactly (selected to 0, so also when
  a NaN/inf V row makes dP_ij NaN; dQ sums dS_ij K_j over visible pairs only, so a NaN/inf K
  row of a hidden key adds nothing — the forward's rule, :mod:`reference.attention`): a padded
  key gets dk = 0 and dv = 0 exactly, and a row that sees no key (O = 0, lse = −inf) gets dq = 0 and contributes
  nothing to dk, dv — never NaN, no RuntimeWarning. The safe trick is the forward's: where
  lse = −inf (every S_ij of the row is −inf) subtract 0, so P_ij = e^{−inf} = 0 rather than
  e^{−inf − (−inf)}.
* ``do`` must be finite; a real array of O's shape (converted to float64), else an error
  naming it.

Imports: NumPy only.
"""

import numpy as np

from .attention import (
    as_real,
    attention,
    attention_flops,
    check_qkv,
    check_scale,
    dropout_scale,
    masked_scores,
    safe_max,
    visible_mask,
    visible_product,
)

__all__ = [
    "attention_backward",
    "attention_backward_intermediates",
    "flash_attention_backward_tiled",
    "attention_backward_flops",
]


def _check_do(do, shape):
    """The upstream gradient dO as float64 of O's ``shape``, finite, or an error naming ``do``."""
    do = as_real(do, "do")
    if do.shape != tuple(shape):
        raise ValueError(
            f"do must have the output's shape [B, H, Nq, dv] (or [Nq, dv]) = {tuple(shape)}; "
            f"got {do.shape}"
        )
    if not np.all(np.isfinite(do)):
        raise ValueError("do holds NaN or inf; the upstream gradient must be finite")
    return do


def attention_backward_intermediates(do, q, k, v, *, causal=False, scale=None,
                                     key_padding_mask=None, dropout_mask=None, dropout_p=0.0):
    """§30: the backward pass step by step; returns a dict of every intermediate.

    Keys (shapes per (batch, head), with the leading [B, H] of 4-D inputs)::

        S    [Nq, Nk]  Q Kᵀ · scale, −inf where masked        (recomputed, §30)
        lse  [Nq]      ln Σ_j e^{S_ij}, −inf for a row with no visible key (the forward's)
        O    [Nq, dv]  the forward output (P ∘ Z) V
        P    [Nq, Nk]  e^{S − lse}: rebuilt from S and lse, equal to softmax(S)
        Z    [Nq, Nk]  M / (1 − p), ones without dropout (broadcast to S's shape)
        Pd   [Nq, Nk]  P̃ = P ∘ Z, the probabilities O was made from
        D    [Nq]      Σ_c dO_ic O_ic
        dPd  [Nq, Nk]  dP̃ = dO Vᵀ
        dP   [Nq, Nk]  dP̃ ∘ Z
        dS   [Nq, Nk]  P ∘ (dP − D)
        dq, dk, dv     the gradients, as :func:`attention_backward` returns them

    Arguments and conventions: see the module and :func:`attention_backward`.
    """
    q, k, v = check_qkv(q, k, v)
    scale = check_scale(scale, q.shape[-1])
    visible = visible_mask(q, k, causal, key_padding_mask)
    S = masked_scores(q, k, scale, visible)            # S = Q Kᵀ · scale, −inf where masked
    Z = dropout_scale(dropout_mask, dropout_p, S.shape)    # §36: M / (1 − p), or None
    # The forward pass: what a kernel keeps for the backward is O and lse (§29–30), not P.
    o, lse = attention(q, k, v, causal=causal, scale=scale, key_padding_mask=key_padding_mask,
                       dropout_mask=dropout_mask, dropout_p=dropout_p)
    do = _check_do(do, o.shape)

    P = np.exp(S - safe_max(lse)[..., None])           # §30: P_ij = e^{S_ij − lse_i}, rebuilt
    Z = np.ones_like(S) if Z is None else np.broadcast_to(Z, S.shape)
    Pd = P * Z                                          # P̃ = P ∘ Z
    sw = np.swapaxes
    dv = sw(Pd, -1, -2) @ do                            # dV = P̃ᵀ dO
    with np.errstate(invalid="ignore"):                 # (NaN/inf V rows: NaN dP, see dS)
        dPd = do @ sw(v, -1, -2)                        # dP̃ = dO Vᵀ
    dP = dPd * Z                                        # dP = dP̃ ∘ Z
    D = np.sum(do * o, axis=-1)                         # D_i = Σ_c dO_ic O_ic  (= Σ_j P_ij dP_ij)
    dS = P * (dP - D[..., None])                        # dS = P ∘ (dP − D): 0 where P = 0
    if visible is not None:                             # … and exactly 0 where hidden, even
        dS = np.where(visible, dS, 0.0)                 # with dP = NaN (a NaN V row: 0·NaN)
    dq = visible_product(dS, k, visible) * scale       # dQ = dS K · scale (hidden keys: none)
    dk = (sw(dS, -1, -2) @ q) * scale                   # dK = dSᵀ Q · scale
    return {"S": S, "lse": lse, "O": o, "P": P, "Z": Z, "Pd": Pd, "D": D,
            "dPd": dPd, "dP": dP, "dS": dS, "dq": dq, "dk": dk, "dv": dv}


def attention_backward(do, q, k, v, *, causal=False, scale=None, key_padding_mask=None,
                       dropout_mask=None, dropout_p=0.0):
    """§30: (dq, dk, dv) of O = attention(q, k, v, ...) for the upstream gradient ``do`` = ∂L/∂O.

    D = rowsum(dO ∘ O), dV = (P∘Z)ᵀ dO, dP = (dO Vᵀ) ∘ Z, dS = P ∘ (dP − D), dQ = dS K · scale,
    dK = dSᵀ Q · scale, with P rebuilt from the saved lse (see the module for the derivation
    and the conventions). The keyword arguments are the forward's,
    :func:`reference.attention.attention`: the gradient is that of the forward called with the
    same ones (dropout with the mask held fixed). Every mask gives exact zeros: a padded key
    has dk = dv = 0, a row with no visible key has dq = 0; never NaN.

    Returns float64 ``(dq, dk, dv)`` with the shapes of ``q``, ``k``, ``v``.
    """
    r = attention_backward_intermediates(do, q, k, v, causal=causal, scale=scale,
                                         key_padding_mask=key_padding_mask,
                                         dropout_mask=dropout_mask, dropout_p=dropout_p)
    return r["dq"], r["dk"], r["dv"]


def _tile_size(value, name):
    """A tile size: a positive int (bool refused), else an error naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a positive int; got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be a positive int; got {value}")
    return int(value)


def flash_attention_backward_tiled(do, q, k, v, Br, Bc, *, causal=False, scale=None,
                                   key_padding_mask=None):
    """§30 as the lesson kernels compute it (``kernels_numba/lesson/backward.py``), in NumPy::

        O, LSE = forward(Q, K, V)                     (the forward keeps O and LSE, not P)
        D = rowsum(dO ∘ O)                            ← the D kernel, one row per thread
        for each K/V tile Kj, Vj:                     ← the dK/dV kernel, one block per tile
            dKj = dVj = 0
            for each Q tile Qi, dOi, LSE_i, D_i:      (causal: from the first Q tile that
                                                       sees key c0 on)
                Sᵀ  = Kj Qiᵀ · scale                  [Bc, Br]  recomputed (−inf where hidden)
                Pᵀ  = exp(Sᵀ − LSE_i)                 the forward's P, from its saved LSE
                dVj += Pᵀ dOi
                dPᵀ = Vj dOiᵀ
                dSᵀ = Pᵀ ∘ (dPᵀ − D_i)                (0 where hidden, even if dPᵀ is NaN)
                dKj += dSᵀ Qi · scale
        for each Q tile Qi:                           ← the dQ kernel, one block per tile
            dQi = 0
            for each K/V tile Kj, Vj:                 (causal: up to the diagonal)
                S, P, dP, dS as above, untransposed   [Br, Bc]
                dQi += dS Kj · scale                  (hidden keys add nothing)

    The dK/dV loop works on the transposes (a key per row) because that is how its kernel
    holds them: one thread per key of Kj, its row of Sᵀ is that key's scores against every
    query of Qi. FlashAttention-2 adds dS Kj into dQ inside the first loop with atomics; the
    lesson kernels (and the fast ones) spend a second loop instead and stay deterministic.

    Arguments as :func:`attention_backward` (no dropout: the lesson tier has none in its
    backward), plus the tile sizes Br (queries) and Bc (keys), positive ints; any size works,
    the last tiles are simply shorter. Equal to :func:`attention_backward` up to rounding
    (tests/test_reference_backward.py). Returns float64 ``(dq, dk, dv)``.
    """
    q, k, v = check_qkv(q, k, v)
    Br, Bc = _tile_size(Br, "Br"), _tile_size(Bc, "Bc")
    scale = check_scale(scale, q.shape[-1])
    visible = visible_mask(q, k, causal, key_padding_mask)  # bool [.., Nq, Nk] or None: all
    o, lse = attention(q, k, v, causal=causal, scale=scale, key_padding_mask=key_padding_mask)
    do = _check_do(do, o.shape)
    nq, nk = q.shape[-2], k.shape[-2]
    offset = nk - nq                                    # §34: query i sees key j iff j ≤ i + offset
    LSE = safe_max(lse)                                # −inf (no key seen) → 0: P = e^{−inf} = 0
    D = np.sum(do * o, axis=-1)                         # D_i = Σ_c dO_ic O_ic
    sw = np.swapaxes
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)

    def tile_visible(r0, r1, c0, c1):
        """Which (query, key) pairs of the tile take part: bool [.., rows, keys], or None."""
        if visible is None:
            return None
        return np.broadcast_to(visible, q.shape[:-2] + (nq, nk))[..., r0:r1, c0:c1]

    for c0 in range(0, nk, Bc):                         # for each K/V tile (a block):
        c1 = min(c0 + Bc, nk)
        Kj, Vj = k[..., c0:c1, :], v[..., c0:c1, :]     #     load Kj, Vj        [.., Bc, d]
        dKj, dVj = np.zeros(Kj.shape), np.zeros(Vj.shape)   # dKj = dVj = 0
        first = max(c0 - offset, 0) // Br if causal else 0  # §34: Q tiles above: no query sees
        for r0 in range(first * Br, nq, Br):            #     for each Q tile Qi:
            r1 = min(r0 + Br, nq)
            Qi, dOi = q[..., r0:r1, :], do[..., r0:r1, :]   # load Qi, dOi, LSE_i, D_i
            LSE_i, D_i = LSE[..., r0:r1], D[..., r0:r1]
            vis = tile_visible(r0, r1, c0, c1)
            visT = None if vis is None else sw(vis, -1, -2)
            with np.errstate(invalid="ignore"):         # (NaN/inf K or V rows: masked below)
                ST = (Kj @ sw(Qi, -1, -2)) * scale      #         Sᵀ = Kj Qiᵀ · scale  [.., Bc, Br]
                dPT = Vj @ sw(dOi, -1, -2)              #         dPᵀ = Vj dOiᵀ        [.., Bc, Br]
            if visT is not None:
                ST = np.where(visT, ST, -np.inf)        #         hidden: Sᵀ = −inf (a select)
            PT = np.exp(ST - LSE_i[..., None, :])       #         Pᵀ = exp(Sᵀ − LSE_i)
            dVj += PT @ dOi                             #         dVj += Pᵀ dOi
            with np.errstate(invalid="ignore"):         #         (0·NaN: selected away below)
                dST = PT * (dPT - D_i[..., None, :])    #         dSᵀ = Pᵀ ∘ (dPᵀ − D_i)
            if visT is not None:
                dST = np.where(visT, dST, 0.0)          #         hidden: dSᵀ = 0 (dPᵀ may be NaN)
            dKj += (dST @ Qi) * scale                   #         dKj += dSᵀ Qi · scale
        dk[..., c0:c1, :], dv[..., c0:c1, :] = dKj, dVj     # write dKj, dVj

    for r0 in range(0, nq, Br):                         # for each Q tile (a block):
        r1 = min(r0 + Br, nq)
        Qi, dOi = q[..., r0:r1, :], do[..., r0:r1, :]   #     load Qi, dOi, LSE_i, D_i
        LSE_i, D_i = LSE[..., r0:r1], D[..., r0:r1]
        dQi = np.zeros(Qi.shape)                        #     dQi = 0
        last = min(nk, r1 + offset) if causal else nk   #     §34: keys ≤ (r1 − 1) + offset
        for c0 in range(0, max(last, 0), Bc):           #     for each K/V tile Kj, Vj:
            c1 = min(c0 + Bc, nk)
            Kj, Vj = k[..., c0:c1, :], v[..., c0:c1, :]
            vis = tile_visible(r0, r1, c0, c1)
            with np.errstate(invalid="ignore"):
                S = (Qi @ sw(Kj, -1, -2)) * scale       #         S = Qi Kjᵀ · scale  [.., Br, Bc]
                dP = dOi @ sw(Vj, -1, -2)               #         dP = dOi Vjᵀ
            if vis is not None:
                S = np.where(vis, S, -np.inf)
            P = np.exp(S - LSE_i[..., None])            #         P = exp(S − LSE_i)
            with np.errstate(invalid="ignore"):         #         (0·NaN: selected away below)
                dS = P * (dP - D_i[..., None])          #         dS = P ∘ (dP − D_i)
            if vis is not None:
                dS = np.where(vis, dS, 0.0)
            dQi += visible_product(dS, Kj, vis) * scale    # dQi += dS Kj · scale
        dq[..., r0:r1, :] = dQi                         #     write dQi
    return dq, dk, dv


def attention_backward_flops(b, h, nq, nk, d, causal=False):
    """§31: matmul FLOPs of one backward pass, 2.5 × the forward's: 10·B·H·Nq·Nk·d (5· if causal).

    The forward does two [Nq × Nk × d] matmuls (QKᵀ, PV: 2·Nq·Nk·d FLOPs each, see
    :func:`reference.attention.attention_flops`). The backward does five: S = QKᵀ again (the
    §30 recomputation), dV = P̃ᵀ dO, dP̃ = dO Vᵀ, dQ = dS K, dK = dSᵀ Q — so 5/2 = 2.5 × the
    forward, the convention of flash-attn's benchmarks (forward + backward = 3.5 ×). The
    element-wise work (exp, D, dS) is not counted, and neither is the causal exact fraction
    (halved, as in the forward). Always an int.
    """
    fwd = attention_flops(b, h, nq, nk, d, causal=causal)   # even: 4·… or 2·…
    return 5 * fwd // 2
