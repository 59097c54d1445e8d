"""Attention oracles for lesson 22, §12–§16, §21–§25, §32–§34, §49: pure NumPy, float64.

Every attention kernel in ``kernels_numba/`` is checked against one of these. Readable before
fast: the tiled oracle is §32's pseudocode, line for line.

Menu (§ = section of the lesson, see ``shared/lesson/OUTLINE.md``)::

    attention(q, k, v, ...)               §12  S = QKᵀ·scale, P = softmax(S), O = PV; plus
                                               lse = log Σ_j e^{S_ij}  (the oracle);
                                               §36 dropout: O = (P∘Z) V, Z = M / (1 − p)
    attention_per_query(q, k, v, ...)     §13  o_i = Σ_j p_ij v_j, one query i at a time
    attention_state(q, k, v, ...)         §21  the un-normalized state (m, l, acc), o = acc / l
    merge_states(m_a, l_a, acc_a, m_b, l_b, acc_b)
                                          §22  m = max(m_a, m_b); l = e^{m_a-m} l_a + e^{m_b-m} l_b;
                                               acc = e^{m_a-m} acc_a + e^{m_b-m} acc_b
    merge_attention(o_parts, lse_parts)   §22  combine normalized outputs over disjoint key sets
                                               by their LSE (split-KV / flash-decoding combine)
    flash_attention_tiled(q, k, v, Br, Bc, ...)
                                          §23–24, §32, §34  the pseudocode: Q tiles of Br rows,
                                               K/V tiles of Bc keys, online (m, l, acc); causal
                                               tiles above the diagonal skipped and counted
    causal_mask(nq, nk)                   §34  bool [Nq, Nk]: query i sees key j iff j ≤ i + Nk − Nq
    attention_flops(b, h, nq, nk, d, causal)   §16, §28  4·B·H·Nq·Nk·d (halved if causal)
    naive_attention_bytes(...)            §14–15, §25  HBM bytes of the three-kernel baseline
    flash_attention_bytes(...)            §25  HBM bytes of the fused kernel
    attention_state_sizes(n, d, dtype_bytes)   §49  per-row state: m, l, acc vs a row of P

Conventions shared by every function that takes q, k, v:

* Shapes: ``q`` is [B, H, Nq, d], ``k`` is [B, H, Nk, d], ``v`` is [B, H, Nk, dv]; outputs
  ``o`` [B, H, Nq, dv] and ``lse`` [B, H, Nq]. For convenience a single head may be passed as
  2-D arrays, q [Nq, d], k [Nk, d], v [Nk, dv]; the outputs are then o [Nq, dv], lse [Nq].
  The lesson has dv = d; a different dv is allowed (v = identity makes o equal a row of P,
  which §33's example uses). Any other rank, or mismatched B, H, Nk or d, is a ValueError.
  Nq = 0 and Nk = 0 are allowed (Nk = 0: every row sees no key, see below); d, dv ≥ 1.
* dtypes: any real array (bool, int, float16/32/64) is converted to float64; results are
  always float64. q must be finite (NaN or inf is a ValueError: masking is done with
  ``causal`` and ``key_padding_mask``, not with special values in the inputs). k and v may
  hold NaN or ±inf (e.g. uninitialised padding rows), under one rule:
* **A masked key contributes exactly nothing**, whatever its K and V rows hold: a key hidden
  from query i (causal, ``key_padding_mask``, another sequence in varlen) adds no term to row
  i's max, sum, O or gradients — not 0·NaN = NaN, not 0·inf = NaN. So the products P V (and,
  in the backward, dS K) sum over the visible pairs only (:func:`visible_product`), and the
  scores are masked by select (S = −inf where hidden), never by adding −inf to S. A *visible*
  non-finite key propagates as IEEE arithmetic does (its row's O is NaN or ±inf).
* ``scale`` defaults to 1/√d (d = q's last axis); any finite real number may be given.
* Natural logarithms throughout: lse = m + ln l, with m = max_j S_ij and l = Σ_j e^{S_ij − m}.
  (Kernels often work in base 2 with scale·log2(e) folded in; convert before comparing.)
* Causal (§34) is aligned to the bottom-right corner, as in flash-attn ≥ 2.1: query i may see
  key j iff j ≤ i + Nk − Nq, so the last query sees every key (decoding with a KV cache).
  torch's ``scaled_dot_product_attention(is_causal=True)`` aligns to the top-left instead
  (j ≤ i); the two agree when Nq = Nk, and only then.
* ``key_padding_mask``: bool, True = the key takes part. Shape [B, Nk] for 4-D inputs (one
  mask per sequence, shared by all heads and queries), or [Nk] (2-D inputs; for 4-D inputs one
  mask for every sequence). Combined with ``causal`` by AND.
* A row that sees no key at all (causal with Nq > Nk, an all-False padding row, Nk = 0) has
  the empty state (m, l, acc) = (−inf, 0, 0) and gives o = 0 and lse = −inf — never NaN, and
  no RuntimeWarning. The trick is the *safe max* of ``reference.softmax``: where m = −inf,
  subtract 0 instead of m, so every e^{S − m} is e^{−inf} = 0 rather than e^{−inf − (−inf)}.
* Dropout (§36, :func:`attention` and :func:`flash_attention_tiled`): ``dropout_mask`` is a bool keep-mask M (True = keep)
  broadcastable to S's shape, ``dropout_p`` the drop probability p, 0 ≤ p < 1. The output is
  O = (P ∘ Z) V with Z = M / (1 − p) (inverted dropout); P and lse are those of the un-dropped
  softmax (what the backward pass rebuilds, §30). The oracle draws no random numbers: M comes
  from the caller, e.g. ``reference.philox.dropout_keep_mask(seed, B, H, Nq, Nk, p)``.
* Each (batch, head) is independent; all of them are computed at once (vectorised), so the
  loops below are over tiles or queries only.

Imports: NumPy only. Nothing here may import numba, so the oracles run where no GPU is.
"""

import math
import operator

import numpy as np

from .softmax import softmax_stable

__all__ = [
    "causal_mask",
    "attention",
    "attention_per_query",
    "attention_state",
    "merge_states",
    "merge_attention",
    "flash_attention_tiled",
    "attention_flops",
    "naive_attention_bytes",
    "flash_attention_bytes",
    "attention_state_sizes",
]


# ---------------------------------------------------------------------------------------------
# Input checks
# ---------------------------------------------------------------------------------------------

def as_real(x, name):
    """``x`` as a float64 array, or TypeError naming ``name`` for non-real data."""
    a = np.asarray(x)
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers (bool, int or float); got dtype {a.dtype}")
    return a.astype(np.float64, copy=False)


def check_qkv(q, k, v):
    """q, k, v as float64 arrays of matching shapes (see the module), or a ValueError."""
    q, k, v = as_real(q, "q"), as_real(k, "k"), as_real(v, "v")
    if q.ndim not in (2, 4) or k.ndim != q.ndim or v.ndim != q.ndim:
        raise ValueError(
            "q, k, v must all be 4-D [B, H, N, d] or all 2-D [N, d]; "
            f"got shapes q {q.shape}, k {k.shape}, v {v.shape}"
        )
    if k.shape[:-2] != q.shape[:-2] or v.shape[:-2] != q.shape[:-2]:
        raise ValueError(
            f"q, k, v must have the same batch and head sizes [B, H]; got shapes "
            f"q {q.shape}, k {k.shape}, v {v.shape}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of keys Nk; got k {k.shape}, v {v.shape}"
        )
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"q and k must have the same head dimension d; got q {q.shape}, k {k.shape}"
        )
    if q.shape[-1] < 1 or v.shape[-1] < 1:
        raise ValueError(f"head dimensions must be ≥ 1; got q {q.shape}, v {v.shape}")
    if not np.all(np.isfinite(q)):
        raise ValueError(
            "q holds NaN or inf; queries must be finite (mask keys with causal= or "
            "key_padding_mask=, not with -inf; k and v may hold NaN/inf in masked keys)"
        )
    return q, k, v


def check_scale(scale, d):
    """The softmax scale: 1/√d by default, else a finite real number."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (int, float, np.number)):
        raise TypeError(f"scale must be a real number or None; got {scale!r}")
    s = float(scale)
    if not math.isfinite(s):
        raise ValueError(f"scale must be finite; got {scale!r}")
    return s


def check_count(value, name, minimum=0):
    """``value`` as an int ≥ minimum (0: a size in the cost models; 1: a tile, a byte width),
    or an error naming ``name``."""
    what = "a positive int" if minimum == 1 else f"an int ≥ {minimum}" if minimum else \
        "a non-negative int"
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be {what}; got {value!r}")
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be {what}; got {value!r}") from None
    if n < minimum:
        raise ValueError(f"{name} must be {what}; got {n}")
    return n


def _check_positive_int(value, name):
    """``value`` as a positive int, or an error naming ``name``."""
    return check_count(value, name, 1)


def _key_mask(key_padding_mask, q, k):
    """The padding mask shaped to broadcast against S ([B, H, Nq, Nk] or [Nq, Nk]), or None."""
    if key_padding_mask is None:
        return None
    mask = np.asarray(key_padding_mask)
    if mask.dtype != np.bool_:
        raise TypeError(
            f"key_padding_mask must be a bool array (True = key takes part); got dtype {mask.dtype}"
        )
    nk = k.shape[-2]
    if q.ndim == 4:
        b = q.shape[0]
        if mask.shape == (b, nk):
            return mask[:, None, None, :]           # [B, 1, 1, Nk]: same for heads and queries
        if mask.shape == (nk,):
            return mask[None, None, None, :]
        want = f"[B, Nk] = {(b, nk)} or [Nk] = {(nk,)}"
    else:
        if mask.shape == (nk,):
            return mask[None, :]                    # [1, Nk]: same for every query
        want = f"[Nk] = {(nk,)}"
    raise ValueError(f"key_padding_mask must have shape {want}; got {mask.shape}")


def check_dropout_p(dropout_p, name="dropout_p"):
    """§36: the drop probability as a float in [0, 1), or an error naming ``name``."""
    if isinstance(dropout_p, (bool, np.bool_)) or not isinstance(
            dropout_p, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number in [0, 1); got {dropout_p!r}")
    p = float(dropout_p)
    if not 0.0 <= p < 1.0:                              # NaN fails this too
        raise ValueError(f"{name} must be a drop probability in [0, 1); got {dropout_p!r}")
    return p


def dropout_scale(dropout_mask, dropout_p, shape, name="dropout_mask", p_name="dropout_p"):
    """§36: Z = M / (1 − p), broadcastable to the scores' ``shape``; None when there is no dropout.

    ``dropout_mask`` is a bool keep-mask (True = keep) whose shape broadcasts to ``shape``
    exactly. p > 0 without a mask is an error (the oracle draws no random numbers); a mask with
    p = 0 is allowed (Z = M).
    """
    p = check_dropout_p(dropout_p, p_name)
    if dropout_mask is None:
        if p != 0.0:
            raise ValueError(
                f"{p_name} = {p} needs a {name} (bool keep-mask, True = keep): the oracle draws "
                "no random numbers (see reference.philox.dropout_keep_mask)"
            )
        return None
    mask = np.asarray(dropout_mask)
    if mask.dtype != np.bool_:
        raise TypeError(f"{name} must be a bool array (True = keep); got dtype {mask.dtype}")
    try:
        fits = np.broadcast_shapes(mask.shape, tuple(shape)) == tuple(shape)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"{name} must broadcast to the scores' shape {tuple(shape)}; got {mask.shape}"
        )
    return mask / (1.0 - p)                             # Z = M / (1 − p): 0 or 1/(1 − p)


def _check_m(m, name):
    """A state's running max: finite or −inf (the empty state). NaN or +inf is a ValueError."""
    m = np.asarray(m, dtype=np.float64)
    if np.any(np.isnan(m) | (m == np.inf)):
        raise ValueError(f"{name} must be finite or -inf (the empty state); it holds NaN or +inf")
    return m


def safe_max(m):
    """m where it is finite, 0 where it is −inf (see the module: the empty row's safe max)."""
    return np.where(m == -np.inf, 0.0, m)


def _lse(m, l):
    """lse = m + ln l, and −inf for the empty state (m, l) = (−inf, 0) without computing ln 0.

    Where m is finite, l ≥ 1 (the max's own term is e^0 = 1), so ln l is only ever needed
    for l > 0. A kernel can simply compute m + log(l) = −inf + −inf = −inf there.
    """
    return np.where(l == 0.0, -np.inf, m + np.log(np.where(l == 0.0, 1.0, l)))


def _divide_by_l(acc, l):
    """acc / l per row (l broadcast over the last axis), with 0 / 0 = 0 for the empty state."""
    return acc / np.where(l == 0.0, 1.0, l)[..., None]


# ---------------------------------------------------------------------------------------------
# §34  which keys a query may see
# ---------------------------------------------------------------------------------------------

def causal_mask(nq, nk):
    """§34: bool [Nq, Nk], True where query i may see key j: j ≤ i + Nk − Nq (bottom-right).

    The lesson writes s_ij = −∞ for j > i, for Nq = Nk. With Nq ≠ Nk the queries are taken to
    be the *last* Nq positions of the key sequence, as in flash-attn ≥ 2.1: the last query sees
    all Nk keys. So Nq = 3, Nk = 5: query 0 sees keys 0..2; Nq = 5, Nk = 3: queries 0 and 1 see
    no key at all. (torch SDPA's ``is_causal`` is top-left, j ≤ i; same mask when Nq = Nk.)
    """
    nq, nk = check_count(nq, "nq"), check_count(nk, "nk")
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    return j <= i + (nk - nq)


def visible_mask(q, k, causal, key_padding_mask):
    """Bool mask broadcastable to S: which (query, key) pairs take part; None if all do."""
    allowed = causal_mask(q.shape[-2], k.shape[-2]) if causal else None
    pad = _key_mask(key_padding_mask, q, k)
    if pad is None:
        return allowed
    return pad if allowed is None else (allowed & pad)


def visible_product(P, V, visible):
    """Σ_j P_ij V_jc over the visible pairs (i, j) only: P V where a hidden key contributes
    nothing even if its V row holds NaN or ±inf (P_ij = 0 there, but 0·NaN = NaN).

    ``P`` [.., Nq, Nk], ``V`` [.., Nk, c], ``visible`` a bool mask broadcastable to P (None: all
    visible, plain IEEE P V). The finite parts go through one matmul; each key whose V row holds
    a non-finite value adds its non-finite parts P_ij V_jc to the rows that see it only.
    """
    bad = ~np.isfinite(V)
    if visible is None or not bad.any():
        return P @ V
    out = P @ np.where(bad, 0.0, V)                     # every finite term
    vis = np.broadcast_to(visible, P.shape)
    lead = tuple(range(bad.ndim - 2))
    for j in np.nonzero(bad.any(axis=lead + (bad.ndim - 1,)))[0]:   # keys with a bad V row
        with np.errstate(invalid="ignore"):             # (0·inf = NaN here is dropped below)
            part = P[..., :, j:j + 1] * np.where(bad[..., j:j + 1, :], V[..., j:j + 1, :], 0.0)
        out = out + np.where(vis[..., :, j:j + 1], part, 0.0)       # rows that see key j only
    return out


def masked_scores(q, k, scale, visible):
    """§12: S = Q Kᵀ · scale, with −inf where a key is not visible (§34–35)."""
    with np.errstate(invalid="ignore"):                 # (NaN/inf keys: NaN scores, masked below)
        S = (q @ np.swapaxes(k, -1, -2)) * scale
    if visible is not None:
        S = np.where(visible, S, -np.inf)
    return S


# ---------------------------------------------------------------------------------------------
# §12  the whole-matrix oracle
# ---------------------------------------------------------------------------------------------

def attention(q, k, v, causal=False, scale=None, key_padding_mask=None, return_p=False, *,
              dropout_mask=None, dropout_p=0.0):
    """§12: S = QKᵀ·scale, P = softmax(S) row-wise, O = PV; with lse = ln Σ_j e^{S_ij}.

    The oracle every attention kernel is checked against: the full [Nq, Nk] matrices S and P
    are formed (exactly what §14's naive attention writes to HBM and FlashAttention avoids).
    The softmax is §2's stable one, per row i::

        m_i = max_j S_ij,   l_i = Σ_j e^{S_ij − m_i},   P_ij = e^{S_ij − m_i} / l_i,
        O = P V,            lse_i = m_i + ln l_i        (= ln Σ_j e^{S_ij}, §29's saved row stat)

    ``scale`` defaults to 1/√d. ``causal`` (bottom-right, see :func:`causal_mask`) and
    ``key_padding_mask`` ([B, Nk] or [Nk] bool, True = key takes part) set masked scores to
    −inf; a row with no visible key gives O = 0, lse = −inf (and a P row of zeros).

    §36 dropout: with ``dropout_mask`` M (bool, True = keep, broadcastable to [B, H, Nq, Nk] —
    or [Nq, Nk] for 2-D inputs) and ``dropout_p`` p (0 ≤ p < 1), O = (P ∘ Z) V with
    Z = M / (1 − p). lse and the returned p are those of the un-dropped softmax: dropout acts
    after the softmax, so the row statistics do not change. ``dropout_p > 0`` without a mask
    is a ValueError; a mask with p = 0 gives Z = M.

    Returns ``(o, lse)``, or ``(o, lse, p)`` with ``return_p=True`` (p [B, H, Nq, Nk], for
    §14–15's naive attention; before dropout). Shapes and dtypes: see the module.
    """
    q, k, v = check_qkv(q, k, v)
    scale = check_scale(scale, q.shape[-1])
    visible = visible_mask(q, k, causal, key_padding_mask)
    S = masked_scores(q, k, scale, visible)            # S = QKᵀ·scale, −inf where hidden
    Z = dropout_scale(dropout_mask, dropout_p, S.shape)    # §36: M / (1 − p), or None
    m = np.max(S, axis=-1, initial=-np.inf)             # m_i = max_j S_ij (−inf: no key seen)
    E = np.exp(S - safe_max(m)[..., None])             # e^{S_ij − m_i}, 0 for masked keys
    l = np.sum(E, axis=-1)                              # l_i = Σ_j e^{S_ij − m_i}
    P = _divide_by_l(E, l)                              # P = softmax(S), zero rows stay zero
    o = visible_product(P if Z is None else P * Z, v, visible)  # O = P V;  §36: (P ∘ Z) V
    lse = _lse(m, l)                                    # lse_i = m_i + ln l_i
    return (o, lse, P) if return_p else (o, lse)


# ---------------------------------------------------------------------------------------------
# §13  the same, one query at a time
# ---------------------------------------------------------------------------------------------

def attention_per_query(q, k, v, causal=False, scale=None, key_padding_mask=None):
    """§13: per query i, s_ij = q_i·k_j·scale, p_ij = e^{s_ij} / Σ_t e^{s_it}, o_i = Σ_j p_ij v_j.

    An explicit loop over the queries i (each one sees all keys j — vectorised over j, and
    over batch and heads); the softmax of each score row is
    :func:`reference.softmax.softmax_stable` (the max subtracted, §2). Only for small inputs.
    Masks as in :func:`attention`; a query with no visible key gets o_i = 0. Returns ``o``.
    """
    q, k, v = check_qkv(q, k, v)
    scale = check_scale(scale, q.shape[-1])
    nq, nk = q.shape[-2], k.shape[-2]
    o = np.zeros(q.shape[:-1] + v.shape[-1:])
    if nk == 0:                                         # no keys: every o_i is the empty sum
        return o
    pad = _key_mask(key_padding_mask, q, k)
    for i in range(nq):
        q_i = q[..., i, :]                                          # [.., d]
        s_i = np.einsum("...jd,...d->...j", k, q_i) * scale         # s_ij = q_i · k_j · scale
        if causal:
            s_i = np.where(np.arange(nk) <= i + nk - nq, s_i, -np.inf)  # §34: j ≤ i + Nk − Nq
        if pad is not None:
            s_i = np.where(pad[..., 0, :], s_i, -np.inf)            # §35: padded keys
        p_i = softmax_stable(s_i)                                   # p_ij; all −inf → zeros
        terms = np.where((s_i != -np.inf)[..., None], p_i[..., None] * v, 0.0)  # hidden: none
        o[..., i, :] = np.sum(terms, axis=-2)                       # o_i = Σ_j p_ij v_j
    return o


# ---------------------------------------------------------------------------------------------
# §21–22  the un-normalized state (m, l, acc) and how two states merge
# ---------------------------------------------------------------------------------------------

def attention_state(q, k, v, causal=False, scale=None, key_padding_mask=None):
    """§21: the state a kernel carries per query row, over the visible keys::

        m = max_j s_j,   l = Σ_j e^{s_j − m},   acc = Σ_j e^{s_j − m} v_j   (un-normalized)

    so that o = acc / l and lse = m + ln l. Returns ``(m, l, acc)`` with shapes [B, H, Nq],
    [B, H, Nq], [B, H, Nq, dv] (or [Nq], [Nq], [Nq, dv] for 2-D inputs). A row with no visible
    key has the empty state (−inf, 0, 0), the identity of :func:`merge_states`. To get the
    state of a subset of the keys (split-KV, §22), pass it as ``key_padding_mask``: positions,
    and so the causal mask, stay those of the whole sequence.
    """
    q, k, v = check_qkv(q, k, v)
    scale = check_scale(scale, q.shape[-1])
    visible = visible_mask(q, k, causal, key_padding_mask)
    S = masked_scores(q, k, scale, visible)
    m = np.max(S, axis=-1, initial=-np.inf)             # m = max_j s_j
    E = np.exp(S - safe_max(m)[..., None])             # e^{s_j − m}
    l = np.sum(E, axis=-1)                              # l = Σ_j e^{s_j − m}
    acc = visible_product(E, v, visible)               # acc = Σ_j e^{s_j − m} v_j
    return m, l, acc


def merge_states(m_a, l_a, acc_a, m_b, l_b, acc_b):
    """§22: merge the states of two disjoint key sets A and B of the same query rows::

        m   = max(m_a, m_b)
        l   = e^{m_a − m} l_a   + e^{m_b − m} l_b          (§19, as reference.merge_ml)
        acc = e^{m_a − m} acc_a + e^{m_b − m} acc_b        (§22)

    m and l have shape [...] and acc [..., dv] (m, l broadcast over acc's last axis). Each m
    must be finite or −inf; the empty state (−inf, 0, 0) is the identity, and two empty states
    give (−inf, 0, 0) with no NaN (safe max: where m = −inf both factors are e^{−inf} = 0).
    Returns float64 ``(m, l, acc)``; o = acc / l and lse = m + ln l as in :func:`attention_state`.
    """
    m_a, m_b = _check_m(m_a, "m_a"), _check_m(m_b, "m_b")
    l_a, l_b = np.asarray(l_a, dtype=np.float64), np.asarray(l_b, dtype=np.float64)
    acc_a, acc_b = np.asarray(acc_a, dtype=np.float64), np.asarray(acc_b, dtype=np.float64)
    m = np.maximum(m_a, m_b)                            # m = max(m_a, m_b)
    m_safe = safe_max(m)                               # 0 where both states are empty
    alpha = np.exp(m_a - m_safe)                        # e^{m_a − m}
    beta = np.exp(m_b - m_safe)                         # e^{m_b − m}
    l = alpha * l_a + beta * l_b                        # l = e^{m_a−m} l_a + e^{m_b−m} l_b
    acc = alpha[..., None] * acc_a + beta[..., None] * acc_b    # a = e^{m_a−m} a_A + e^{m_b−m} a_B
    return m, l, acc


def merge_attention(o_parts, lse_parts):
    """§22 in normalized form: combine P outputs computed over disjoint key sets (split-KV).

    Part p was computed over its own keys: o_p = acc_p / l_p and lse_p = m_p + ln l_p. Then
    over the union of the keys::

        lse = ln Σ_p e^{lse_p}            (computed as M + ln Σ_p e^{lse_p − M}, M = max_p lse_p)
        o   = Σ_p e^{lse_p − lse} o_p     (weights e^{lse_p − lse} = l_p e^{m_p} / Σ l e^m, sum 1)

    ``o_parts`` is [P, ..., Nq, dv] (or a sequence of P arrays), ``lse_parts`` [P, ..., Nq].
    A part with lse_p = −inf (no visible key) has weight 0 and contributes nothing; if every
    part is −inf (or P = 0) the result is o = 0, lse = −inf. Each lse_p must be finite or
    −inf. Returns float64 ``(o, lse)`` of shapes [..., Nq, dv] and [..., Nq].
    """
    o_parts = as_real(o_parts, "o_parts")
    lse_parts = _check_m(as_real(lse_parts, "lse_parts"), "lse_parts")
    if o_parts.ndim < 2 or lse_parts.shape != o_parts.shape[:-1]:
        raise ValueError(
            "o_parts must be [P, ..., dv] and lse_parts [P, ...] with the same leading axes; "
            f"got o_parts {o_parts.shape}, lse_parts {lse_parts.shape}"
        )
    M = np.max(lse_parts, axis=0, initial=-np.inf)      # M = max_p lse_p
    w = np.exp(lse_parts - safe_max(M))                # e^{lse_p − M}: 0 for −inf parts
    total = np.sum(w, axis=0)                           # Σ_p e^{lse_p − M} (≥ 1 unless all −inf)
    lse = _lse(M, total)                                # lse = M + ln Σ_p e^{lse_p − M}
    o = _divide_by_l(np.sum(w[..., None] * o_parts, axis=0), total)  # Σ_p e^{lse_p − lse} o_p
    return o, lse


# ---------------------------------------------------------------------------------------------
# §32  FlashAttention: the pseudocode, line for line
# ---------------------------------------------------------------------------------------------

def flash_attention_tiled(q, k, v, Br, Bc, causal=False, scale=None, key_padding_mask=None,
                          stats=None, trace=None, *, dropout_mask=None, dropout_p=0.0):
    """§23–24, §32, §34: FlashAttention's forward pass as NumPy, written like §32's pseudocode::

        for each Q tile Qi:                           (Br query rows; the last tile may be shorter)
            m = -inf;  l = 0;  acc = 0                (per row of the tile)
            for each K/V tile Kj, Vj:                 (Bc keys; the last tile may be shorter)
                [causal: skip the tile if it is entirely above the diagonal]
                S = Qi Kjᵀ · scale                    [causal: −inf above the diagonal, only in
                                                       tiles that straddle it; padding: −inf]
                block_max = row_max(S)
                new_m = max(m, block_max)
                new_m_safe = 0 where new_m = -inf, else new_m   (row saw no key yet)
                P_local = exp(S − new_m_safe)
                correction = exp(m − new_m_safe)
                l = correction · l + row_sum(P_local)        (the whole P: dropout comes after)
                acc = correction · acc + (P_local ∘ Z) Vj     (§36; Z = 1 without dropout)
                m = new_m
            Oi = acc / l                              (0 where l = 0: the row saw no key)
            lse_i = m + log l                         (−inf where l = 0)

    The full [Nq, Nk] S and P never exist, only one [Br, Bc] tile at a time, and O is written
    once per Q tile. Equal to :func:`attention` up to rounding (§27: exact, not approximate).

    What the pseudocode leaves open, resolved here as the kernels will do it:

    * ``scale`` (default 1/√d) is applied to S before the max, so m and lse are in units of the
      scaled scores, natural log (§32 writes ``/ sqrt(d)``).
    * The safe max: at the first visible key of a row m is −inf, and if a whole tile row is
      masked new_m is −inf too; exp(−inf − (−inf)) would be NaN. Subtracting ``new_m_safe``
      (0 where new_m = −inf) gives P_local = 0 and correction = 0 there instead; l = 0 and
      acc = 0 stay the empty state. (Where new_m is finite nothing changes.)
    * Boundaries (§32 ignores them): the last Q tile and the last K/V tile are simply shorter;
      any Br, Bc ≥ 1 works, including tiles larger than Nq or Nk (one tile).
    * The pseudocode stores only Oi; lse = m + log l per row is also returned (§29–30: the
      row statistic the backward pass keeps).
    * Causal (§34), bottom-right as in :func:`causal_mask`: query i sees key j iff
      j ≤ i + Nk − Nq. For a tile of rows [r0, r1) and keys [c0, c1): skipped if
      c0 > (r1 − 1) + Nk − Nq (no row sees any of its keys); computed without a mask if
      c1 − 1 ≤ r0 + Nk − Nq (every row sees every key); otherwise computed with the mask
      ("masked"). With Br = Bc and Nq = Nk: Q tile 0 visits K tile 0, Q tile 1 K tiles 0–1, …
    * ``key_padding_mask`` ([B, Nk] or [Nk], as in :func:`attention`) is applied element-wise
      in every computed tile; it does not skip tiles (it may differ between sequences).
    * Dropout (§36; ``dropout_mask``, ``dropout_p`` as in :func:`attention`): l sums the
      *un-dropped* P_local — the softmax is of all the scores — while acc takes P_local ∘ Z,
      Z = M / (1 − p), the tile's slice of the keep-mask. So O = (P∘Z) V / … with P the full
      softmax, and lse is that of the scores before dropout (what the backward rebuilds).

    Every (batch, head) is tiled the same way and computed at once (vectorised): the loops are
    over tiles only. Br and Bc are positive ints.

    ``stats``: if a dict is given, it is filled with tile counts for one (batch, head) (multiply
    by B·H for the whole call): ``q_tiles`` = ceil(Nq/Br), ``kv_tiles`` = ceil(Nk/Bc),
    ``total`` = q_tiles·kv_tiles, ``computed`` (S formed), ``skipped`` (causal, above the
    diagonal), ``masked`` (computed with the causal mask: the diagonal tiles). computed +
    skipped = total; for causal Nq = Nk = N with Br = Bc = T dividing N, computed =
    n(n+1)/2 of n² (n = N/T), about half, and masked = n.

    ``trace``: if a list is given, one dict is appended per computed tile, in loop order:
    ``i``, ``j`` (tile indices), ``rows`` (r0, r1), ``cols`` (c0, c1), ``masked`` (bool),
    ``m``, ``l`` (copies of the running state after this tile, shape [B, H, rows] or [rows]).
    §33's example reads its numbers from it.

    Returns ``(o, lse)`` as :func:`attention`.
    """
    q, k, v = check_qkv(q, k, v)
    Br, Bc = _check_positive_int(Br, "Br"), _check_positive_int(Bc, "Bc")
    scale = check_scale(scale, q.shape[-1])
    pad = _key_mask(key_padding_mask, q, k)
    nq, nk = q.shape[-2], k.shape[-2]
    Z = dropout_scale(dropout_mask, dropout_p, q.shape[:-1] + (nk,))   # None: no dropout
    if Z is not None:
        Z = np.broadcast_to(Z, q.shape[:-1] + (nk,))
    if stats is not None and not isinstance(stats, dict):
        raise TypeError(f"stats must be a dict or None; got {type(stats).__name__}")
    if trace is not None and not isinstance(trace, list):
        raise TypeError(f"trace must be a list or None; got {type(trace).__name__}")
    offset = nk - nq                                    # §34 bottom-right: j ≤ i + offset
    o = np.zeros(q.shape[:-1] + v.shape[-1:])
    lse = np.empty(q.shape[:-1])
    counts = {"q_tiles": -(-nq // Br), "kv_tiles": -(-nk // Bc),
              "computed": 0, "skipped": 0, "masked": 0}

    for i, r0 in enumerate(range(0, nq, Br)):           # for each Q tile Qi:
        r1 = min(r0 + Br, nq)
        Qi = q[..., r0:r1, :]                           #     load Qi            [.., Br, d]
        m = np.full(Qi.shape[:-1], -np.inf)             #     m = -inf           [.., Br]
        l = np.zeros(Qi.shape[:-1])                     #     l = 0              [.., Br]
        acc = np.zeros(Qi.shape[:-1] + v.shape[-1:])    #     acc = 0            [.., Br, dv]

        for j, c0 in enumerate(range(0, nk, Bc)):       #     for each K/V tile Kj, Vj:
            c1 = min(c0 + Bc, nk)
            if causal and c0 > (r1 - 1) + offset:       #         §34: above the diagonal,
                counts["skipped"] += 1                  #         no row sees any key: skip
                continue
            Kj = k[..., c0:c1, :]                       #         load Kj, Vj    [.., Bc, d]
            Vj = v[..., c0:c1, :]                       #                        [.., Bc, dv]

            S = (Qi @ np.swapaxes(Kj, -1, -2)) * scale  #         S = Qi Kjᵀ / sqrt(d)  [.., Br, Bc]
            masked = causal and (c1 - 1) > r0 + offset  #         §34: a diagonal tile
            vis = None                                  #         (masks by select, not by +(−inf))
            if masked:
                rows = np.arange(r0, r1)[:, None]
                cols = np.arange(c0, c1)[None, :]
                vis = cols <= rows + offset                         # s_ij = -inf, j > i + offset
            if pad is not None:
                vis = pad[..., c0:c1] if vis is None else (vis & pad[..., c0:c1])  # §35: padding
            if vis is not None:
                S = np.where(vis, S, -np.inf)

            block_max = np.max(S, axis=-1)              #         block_max = row_max(S)
            new_m = np.maximum(m, block_max)            #         new_m = max(m, block_max)
            new_m_safe = np.where(new_m == -np.inf, 0.0, new_m)    # no key seen yet: use 0

            P_local = np.exp(S - new_m_safe[..., None])  #        P_local = exp(S - new_m)

            correction = np.exp(m - new_m_safe)         #         correction = exp(m - new_m)

            # l = correction × l + row_sum(P_local)      (old sum rescaled to new_m, tile added)
            l = correction * l + np.sum(P_local, axis=-1)
            # acc = correction × acc + (P_local ∘ Z) × Vj  (the same for the un-normalized output;
            # §36: only what reaches V is dropped, l above kept the whole P_local)
            # (a hidden key adds nothing to acc, even with NaN/inf in its V row)
            PZ = P_local if Z is None else P_local * Z[..., r0:r1, c0:c1]
            acc = correction[..., None] * acc + visible_product(PZ, Vj, vis)
            m = new_m                                   #         m = new_m

            counts["computed"] += 1
            counts["masked"] += int(masked)
            if trace is not None:
                trace.append({"i": i, "j": j, "rows": (r0, r1), "cols": (c0, c1),
                              "masked": masked, "m": m.copy(), "l": l.copy()})

        l_safe = np.where(l == 0.0, 1.0, l)             #     l = 0: the row saw no key, acc = 0
        o[..., r0:r1, :] = acc / l_safe[..., None]      #     Oi = acc / l;  store Oi
        lse[..., r0:r1] = np.where(l == 0.0, -np.inf, m + np.log(l_safe))  # lse = m + log l

    if stats is not None:
        counts["total"] = counts["q_tiles"] * counts["kv_tiles"]
        stats.update(counts)
    return o, lse


# ---------------------------------------------------------------------------------------------
# §15–16, §25, §28, §49  cost models: FLOPs, HBM bytes, per-row state
# ---------------------------------------------------------------------------------------------

def attention_flops(b, h, nq, nk, d, causal=False):
    """§16, §28: matmul FLOPs of one forward pass, 4·B·H·Nq·Nk·d (halved when causal).

    QKᵀ is Nq·Nk dot products of length d (2d FLOPs each: multiply + add), and PV the same
    count again: 2·Nq·Nk·d + 2·Nq·Nk·d. The softmax's exp/max/sum (O(Nq·Nk)) is not counted.
    Causal: divided by 2, the convention of flash-attn's and Triton's benchmarks (the exact
    visible fraction is slightly more than half, (N+1)/(2N) for Nq = Nk = N), so
    2·B·H·Nq·Nk·d. Always an int.
    """
    b, h = check_count(b, "b"), check_count(h, "h")
    nq, nk, d = check_count(nq, "nq"), check_count(nk, "nk"), check_count(d, "d")
    flops = 4 * b * h * nq * nk * d
    return flops // 2 if causal else flops   # 4x / 2 is exact: still an int


def naive_attention_bytes(b, h, nq, nk, d, dtype_bytes=2):
    """§14–15, §25: HBM bytes of the naive three-kernel attention, as a dict of terms + ``total``.

    Model (one forward pass, every tensor ``dtype_bytes`` per element, each matrix moved
    exactly once per kernel that uses it — ideal GEMMs with perfect on-chip reuse, no L2
    hits, no LSE)::

        kernel 1  S = QKᵀ      read Q (Nq·d) and K (Nk·d), write S (Nq·Nk)
        kernel 2  P = softmax  read S (Nq·Nk), write P (Nq·Nk)      (one pass: §11's best case)
        kernel 3  O = PV       read P (Nq·Nk) and V (Nk·d), write O (Nq·d)

    total = B·H·(2·Nq·d + 2·Nk·d + 4·Nq·Nk)·dtype_bytes. The 4·Nq·Nk term (S and P written and
    read once each) is what §25 says FlashAttention removes; ``S_bytes`` is one head's S alone
    (§15: N = 4096 in FP16 is 32 MiB per head, B·H times that per batch).
    """
    b, h = check_count(b, "b"), check_count(h, "h")
    nq, nk, d = check_count(nq, "nq"), check_count(nk, "nk"), check_count(d, "d")
    nb = _check_positive_int(dtype_bytes, "dtype_bytes")
    e = b * h * nb                                      # bytes per element, over all heads
    terms = {
        "read_Q": nq * d * e, "read_K": nk * d * e,
        "write_S": nq * nk * e, "read_S": nq * nk * e,
        "write_P": nq * nk * e, "read_P": nq * nk * e,
        "read_V": nk * d * e, "write_O": nq * d * e,
    }
    terms["total"] = sum(terms.values())
    terms["S_bytes"] = nq * nk * nb                     # §15: one head's S (not in total)
    return terms


def flash_attention_bytes(b, h, nq, nk, d, dtype_bytes=2, Br=None, lse_bytes=4):
    """§25: HBM bytes of the fused FlashAttention forward, as a dict of terms + ``total``.

    Model: Q read once and O written once (Nq·d each); K and V read once per Q tile, i.e.
    ceil(Nq/Br) times each (Nk·d) — or exactly once if ``Br`` is None (the compulsory traffic,
    the lower bound); the LSE row statistic written once, Nq values of ``lse_bytes`` (FP32 in
    the kernels; pass 0 to leave it out). No S or P ever goes to HBM::

        total = B·H·[(2·Nq·d + 2·passes·Nk·d)·dtype_bytes + Nq·lse_bytes],
        passes = ceil(Nq / Br) or 1

    Causal tile skipping (which also skips K/V loads) is not modelled.
    """
    b, h = check_count(b, "b"), check_count(h, "h")
    nq, nk, d = check_count(nq, "nq"), check_count(nk, "nk"), check_count(d, "d")
    e = b * h * _check_positive_int(dtype_bytes, "dtype_bytes")
    passes = 1 if Br is None else -(-nq // _check_positive_int(Br, "Br"))
    terms = {
        "read_Q": nq * d * e,
        "read_K": passes * nk * d * e, "read_V": passes * nk * d * e,
        "write_O": nq * d * e,
        "write_LSE": b * h * nq * check_count(lse_bytes, "lse_bytes"),
    }
    terms["total"] = sum(terms.values())
    return terms


def attention_state_sizes(n, d, dtype_bytes=4):
    """§49: what one query row keeps — FlashAttention's state vs a full row of P.

    Flash keeps m_i (a scalar max), l_i (a scalar denominator) and acc_i (a d-vector,
    un-normalized output): d + 2 values, whatever N is. The naive path keeps the whole
    probability row P_i: N values. Returns a dict::

        flash_row_values = d + 2          p_row_values = n
        flash_row_bytes  = (d+2)·bytes    p_row_bytes  = n·bytes
        flash_head_bytes = n·(d+2)·bytes  p_head_bytes = n·n·bytes   (all N rows of one head)
        ratio            = n / (d + 2)    (how many times smaller the flash state is)

    with ``n``, ``d`` and ``dtype_bytes`` echoed. E.g. N = 4096, d = 64: 66 values instead of
    4096, 62× less; the saving grows with N (d ≪ N).
    """
    n, d = _check_positive_int(n, "n"), _check_positive_int(d, "d")
    nb = _check_positive_int(dtype_bytes, "dtype_bytes")
    return {
        "n": n, "d": d, "dtype_bytes": nb,
        "flash_row_values": d + 2, "p_row_values": n,
        "flash_row_bytes": (d + 2) * nb, "p_row_bytes": n * nb,
        "flash_head_bytes": n * (d + 2) * nb, "p_head_bytes": n * n * nb,
        "ratio": n / (d + 2),
    }
