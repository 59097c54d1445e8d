"""Variable-length (packed) attention oracles for lesson 22, §35 (with §30 backward, §36 dropout).

§35: sequences of different lengths padded to one length waste work on the padding (every
padded key is still loaded and masked to −inf, every padded query row still computed). The
packed layout stores only the real tokens, sequence after sequence, and says where each one
starts with cumulative offsets — flash-attn's ``*_varlen_func`` interface::

    lengths       n = [3, 1, 4]
    cu_seqlens    [0, 3, 4, 8]                  (B + 1 offsets, int32 as flash-attn)
    packed q      [total = 8, H, d]             rows cu[b] … cu[b+1] − 1 are sequence b

Menu::

    cu_seqlens(lengths)                  [n_0, n_1, …] → [0, n_0, n_0 + n_1, …]  (int32)
    check_cu_seqlens(cu, total, name)    the offsets as int64, or an error naming ``name``
    pack(seqs)                           list of [H, n_b, d] → (packed [total, H, d], cu)
    unpack(packed, cu)                   the inverse: list of [H, n_b, d]
    packed_to_padded(packed, cu, n=None) → (padded [B, H, n, d] with zeros, key_padding_mask
                                         [B, n]): the §35 padded layout of the same data
    padded_to_packed(padded, cu)         the first n_b positions of each sequence, packed
    varlen_dropout_masks(mask, cu_q, cu_k)
                                         §36: per-sequence keep-masks from one padded-layout
                                         mask [B, H, ≥max n_q, ≥max n_k]  (the rule below)
    varlen_attention(q, k, v, cu_q, cu_k, ...)
                                         O (and lse) of every sequence, each on its own
    varlen_attention_backward(do, q, k, v, cu_q, cu_k, ...)
                                         (dq, dk, dv), packed, each sequence on its own

Definitions and conventions:

* Shapes (flash-attn's): q [total_q, H, d], k [total_k, H, d], v [total_k, H, dv], o and do
  [total_q, H, dv], lse [total_q, H] (token-major like o, so lse[cu[b]:cu[b+1]] is sequence
  b's; flash-attn returns it transposed, [H, total_q]). Real arrays, converted to float64.
  The same H for q, k and v (no grouped-query attention here).
* ``cu_seqlens_q`` and ``cu_seqlens_k``: integer arrays of B + 1 offsets each (the same B),
  starting at 0, non-decreasing, the last one equal to the packed tensor's row count
  (total_q, resp. total_k): every row belongs to exactly one sequence. Sequence b has
  n_q,b = cu_q[b+1] − cu_q[b] queries and n_k,b keys; zero-length sequences are allowed (a
  query with no key gives o = 0, lse = −inf, as in the forward oracle).
* The oracle is *defined* as running each sequence alone through
  :func:`reference.attention.attention` (resp. the backward oracle): sequence b is the
  [1, H, n_q,b, d] problem q[cu_q[b]:cu_q[b+1]] against its own keys. Nothing is padded, so
  padding is never computed; keys of another sequence are never seen (so NaN or ±inf in
  another sequence's K/V rows changes nothing, the rule of :mod:`reference.attention`).
* ``causal`` is bottom-right *within each sequence*: query i of sequence b sees key j of the
  same sequence iff j ≤ i + n_k,b − n_q,b (flash-attn ≥ 2.1's varlen rule).
* Compared with the padded layout (right padding to n_q = max n_q,b and n_k = max n_k,b, with
  ``key_padding_mask`` hiding the padded keys, :func:`packed_to_padded`): the real query rows
  give the same o and lse when not causal; with ``causal`` only when n_k,b − n_q,b is the same
  n_k − n_q for every b (e.g. self-attention, n_q,b = n_k,b and n_q = n_k), because the padded
  layout aligns the diagonal to the padded corner.
* Dropout (§36), the rule: positions are those of the padded layout. Batch index b = the
  sequence index; i, j = positions *within* the sequence (0 for its first token), never the
  packed row. So the keep-mask of sequence b is ``mask[b, :, :n_q,b, :n_k,b]`` of the padded
  mask ``reference.philox.dropout_keep_mask(seed, B, H, max n_q,b, max n_k,b, p)`` — and a
  varlen kernel generates bit (b, h, i, j) from the same Philox counter as the padded kernel,
  so packed and padded runs with one seed drop the same probabilities. ``dropout_masks`` is
  either that padded mask (bool [B, H or 1, ≥ max n_q,b, ≥ max n_k,b], sliced here by
  :func:`varlen_dropout_masks`) or a list of B per-sequence bool masks, mask b broadcastable
  to [H, n_q,b, n_k,b]; ``dropout_p`` as in the forward oracle.

Imports: NumPy only.
"""

import numpy as np

from .attention import (
    as_real,
    attention,
    check_count,
    check_dropout_p,
    check_scale,
    dropout_scale,
)
from .attention_backward import attention_backward

__all__ = [
    "cu_seqlens",
    "check_cu_seqlens",
    "pack",
    "unpack",
    "packed_to_padded",
    "padded_to_packed",
    "varlen_dropout_masks",
    "varlen_attention",
    "varlen_attention_backward",
]


# ---------------------------------------------------------------------------------------------
# Offsets
# ---------------------------------------------------------------------------------------------

def cu_seqlens(lengths):
    """[n_0, n_1, …, n_{B−1}] → int32 [0, n_0, n_0 + n_1, …, Σ n_b] (B + 1 offsets).

    ``lengths``: a 1-D sequence of non-negative ints (an empty one gives [0]). int32 as
    flash-attn's ``cu_seqlens``; a total past 2^31 − 1 is a ValueError.
    """
    a = np.asarray(lengths)
    if a.size == 0 and a.ndim == 1:
        a = a.astype(np.int64)
    if a.dtype.kind not in "iu":
        raise TypeError(f"lengths must be integers; got dtype {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"lengths must be 1-D [B]; got shape {a.shape}")
    if np.any(a < 0):
        raise ValueError(f"lengths must be ≥ 0; got {a.tolist()}")
    cu = np.concatenate([[0], np.cumsum(a, dtype=np.int64)])
    if cu[-1] > np.iinfo(np.int32).max:
        raise ValueError(f"lengths sum to {cu[-1]}, past int32 offsets (2^31 − 1)")
    return cu.astype(np.int32)


def check_cu_seqlens(cu, total, name):
    """The offsets ``cu`` as int64 [B + 1], checked against a packed tensor of ``total`` rows.

    Errors (each naming ``name``): not integers (TypeError: bool and float are refused, an
    offset is an index); not 1-D or empty; not starting at 0; decreasing somewhere; the last
    offset past the end of the packed tensor (> total) or short of it (< total: rows that
    belong to no sequence). ``total=None`` skips the last two (offsets with no tensor yet).
    """
    total = None if total is None else check_count(total, "total")
    a = np.asarray(cu)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer offsets; got dtype {a.dtype}")
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be 1-D with B + 1 ≥ 1 offsets; got shape {a.shape}")
    a = a.astype(np.int64)
    if a[0] != 0:
        raise ValueError(f"{name} must start at 0; got {name}[0] = {a[0]}")
    step = np.diff(a)
    if np.any(step < 0):
        b = int(np.argmax(step < 0))
        raise ValueError(
            f"{name} must be non-decreasing (sequence lengths ≥ 0); got "
            f"{name}[{b + 1}] = {a[b + 1]} < {name}[{b}] = {a[b]}"
        )
    if total is not None and a[-1] > total:
        raise ValueError(
            f"{name}[-1] = {a[-1]} is past the end of the packed tensor ({total} rows)"
        )
    if total is not None and a[-1] < total:
        raise ValueError(
            f"{name}[-1] = {a[-1]} but the packed tensor has {total} rows: rows "
            f"{a[-1]}…{total - 1} would belong to no sequence"
        )
    return a


def _check_offsets(cu_q, cu_k, total_q, total_k):
    """Both offset arrays, checked (totals may be None), and of the same number B of sequences."""
    cu_q = check_cu_seqlens(cu_q, total_q, "cu_seqlens_q")
    cu_k = check_cu_seqlens(cu_k, total_k, "cu_seqlens_k")
    if cu_q.size != cu_k.size:
        raise ValueError(
            f"cu_seqlens_q and cu_seqlens_k must have the same length B + 1; got "
            f"{cu_q.size} offsets ({cu_q.size - 1} sequences) and {cu_k.size} "
            f"({cu_k.size - 1} sequences)"
        )
    return cu_q, cu_k


# ---------------------------------------------------------------------------------------------
# Packing and padding
# ---------------------------------------------------------------------------------------------

def _check_packed(x, name):
    """A packed tensor [total, H, d] as float64, or an error naming ``name``."""
    x = as_real(x, name)
    if x.ndim != 3:
        raise ValueError(f"{name} must be packed [total, H, d]; got shape {x.shape}")
    return x


def pack(seqs):
    """List of B arrays [H, n_b, d] → (packed [Σ n_b, H, d] float64, cu_seqlens int32 [B + 1]).

    Every array must have the same H and d (n_b ≥ 0 may differ); at least one array.
    """
    seqs = [as_real(s, f"seqs[{b}]") for b, s in enumerate(seqs)]
    if not seqs:
        raise ValueError("seqs must hold at least one [H, n, d] array (H and d come from it)")
    for b, s in enumerate(seqs):
        if s.ndim != 3 or (s.shape[0], s.shape[2]) != (seqs[0].shape[0], seqs[0].shape[2]):
            raise ValueError(
                f"seqs[{b}] must be [H, n, d] with H, d = {seqs[0].shape[0]}, "
                f"{seqs[0].shape[2] if seqs[0].ndim == 3 else '?'} (those of seqs[0]); "
                f"got shape {s.shape}"
            )
    packed = np.concatenate([np.swapaxes(s, 0, 1) for s in seqs], axis=0)  # [n, H, d] each
    return packed, cu_seqlens([s.shape[1] for s in seqs])


def unpack(packed, cu):
    """Packed [total, H, d] and offsets [B + 1] → list of B arrays [H, n_b, d] (copies)."""
    packed = _check_packed(packed, "packed")
    cu = check_cu_seqlens(cu, packed.shape[0], "cu_seqlens")
    return [np.swapaxes(packed[cu[b]:cu[b + 1]], 0, 1).copy() for b in range(cu.size - 1)]


def packed_to_padded(packed, cu, n=None):
    """§35: the padded layout of packed data: (padded [B, H, n, d], key_padding_mask [B, n]).

    Sequence b fills positions 0 … n_b − 1 of row b (right padding); the rest is 0 and
    masked False. ``n`` defaults to max n_b (at least 1, so that B sequences of length 0
    still give an array with a key axis); a smaller n is a ValueError.
    """
    seqs = unpack(packed, cu)
    lengths = [s.shape[1] for s in seqs]
    longest = max(lengths, default=0)
    n = max(longest, 1) if n is None else check_count(n, "n")
    if n < longest:
        raise ValueError(f"n = {n} is shorter than the longest sequence ({longest})")
    h, d = packed.shape[1], packed.shape[2]
    padded = np.zeros((len(seqs), h, n, d))
    mask = np.zeros((len(seqs), n), dtype=bool)
    for b, s in enumerate(seqs):
        padded[b, :, :lengths[b]] = s
        mask[b, :lengths[b]] = True
    return padded, mask


def padded_to_packed(padded, cu):
    """The inverse of :func:`packed_to_padded`: positions 0 … n_b − 1 of each row b, packed.

    ``padded`` is [B, H, n, d] (n ≥ max n_b), ``cu`` the offsets [B + 1] giving the n_b.
    Returns float64 [Σ n_b, H, d].
    """
    padded = as_real(padded, "padded")
    if padded.ndim != 4:
        raise ValueError(f"padded must be [B, H, n, d]; got shape {padded.shape}")
    lengths = np.diff(check_cu_seqlens(cu, None, "cu_seqlens"))
    if lengths.size != padded.shape[0] or (lengths.size and lengths.max() > padded.shape[2]):
        raise ValueError(
            f"padded {padded.shape} does not hold {lengths.size} sequences of lengths "
            f"{lengths.tolist()}"
        )
    parts = [np.swapaxes(padded[b, :, :n], 0, 1) for b, n in enumerate(lengths)]
    if not parts:
        return np.zeros((0, padded.shape[1], padded.shape[3]))
    return np.concatenate(parts, axis=0)


# ---------------------------------------------------------------------------------------------
# §36  dropout masks of packed sequences
# ---------------------------------------------------------------------------------------------

def varlen_dropout_masks(mask, cu_seqlens_q, cu_seqlens_k):
    """§36: the keep-mask of each sequence, ``mask[b, :, :n_q,b, :n_k,b]`` (see the module's rule).

    ``mask``: bool [B, H or 1, Nq, Nk] in the padded layout, with Nq ≥ max n_q,b and
    Nk ≥ max n_k,b — e.g. ``reference.philox.dropout_keep_mask(seed, B, H, max n_q,b,
    max n_k,b, p)``. The offsets are only read for the lengths (checked as by
    :func:`check_cu_seqlens`, with no packed tensor). Returns a list of B views.
    """
    cu_q, cu_k = _check_offsets(cu_seqlens_q, cu_seqlens_k, None, None)
    nq, nk = np.diff(cu_q), np.diff(cu_k)
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        raise TypeError(f"dropout_masks must be a bool array (True = keep); got dtype {m.dtype}")
    batch = nq.size
    need = (batch, int(nq.max(initial=0)), int(nk.max(initial=0)))
    if m.ndim != 4 or m.shape[0] != batch or m.shape[2] < need[1] or m.shape[3] < need[2]:
        raise ValueError(
            f"dropout_masks as one array must be the padded-layout mask [B, H, Nq, Nk] with "
            f"B = {need[0]}, Nq ≥ {need[1]}, Nk ≥ {need[2]} (max sequence lengths); "
            f"got shape {m.shape}"
        )
    return [m[b, :, :nq[b], :nk[b]] for b in range(batch)]


def _sequence_masks(dropout_masks, dropout_p, cu_q, cu_k, heads):
    """Per-sequence keep-masks, each checked against [H, n_q,b, n_k,b], or None."""
    p = check_dropout_p(dropout_p)
    if dropout_masks is None:
        if p != 0.0:
            raise ValueError(
                f"dropout_p = {p} needs dropout_masks (a list of per-sequence bool keep-masks or "
                "one padded-layout mask [B, H, Nq, Nk]): the oracle draws no random numbers"
            )
        return None
    batch = cu_q.size - 1
    if isinstance(dropout_masks, (list, tuple)):
        if len(dropout_masks) != batch:
            raise ValueError(
                f"dropout_masks as a list must hold one mask per sequence, B = {batch}; got "
                f"{len(dropout_masks)}"
            )
        masks = list(dropout_masks)
    else:
        masks = varlen_dropout_masks(dropout_masks, cu_q, cu_k)
    for b, m in enumerate(masks):
        shape = (heads, int(cu_q[b + 1] - cu_q[b]), int(cu_k[b + 1] - cu_k[b]))
        dropout_scale(m, p, shape, name=f"dropout_masks[{b}]")   # dtype and shape checks
    return [np.asarray(m)[None] for m in masks]                  # [1, …]: a batch of one


# ---------------------------------------------------------------------------------------------
# §35  the oracles: every sequence on its own
# ---------------------------------------------------------------------------------------------

def _check_varlen(q, k, v, cu_q, cu_k, scale):
    """Packed q, k, v (float64), their offsets (int64) and the scale, all checked."""
    q, k, v = _check_packed(q, "q"), _check_packed(k, "k"), _check_packed(v, "v")
    if not (q.shape[1] == k.shape[1] == v.shape[1]):
        raise ValueError(
            f"q, k, v must have the same number of heads H; got shapes q {q.shape}, "
            f"k {k.shape}, v {v.shape}"
        )
    if k.shape[0] != v.shape[0]:
        raise ValueError(f"k and v must have the same total_k; got k {k.shape}, v {v.shape}")
    if k.shape[2] != q.shape[2]:
        raise ValueError(f"q and k must have the same head dimension d; got q {q.shape}, "
                         f"k {k.shape}")
    cu_q, cu_k = _check_offsets(cu_q, cu_k, q.shape[0], k.shape[0])
    return q, k, v, cu_q, cu_k, check_scale(scale, q.shape[2])


def _sequence(x, cu, b):
    """Sequence b of a packed [total, H, d] as a batch of one, [1, H, n_b, d]."""
    return np.swapaxes(x[cu[b]:cu[b + 1]], 0, 1)[None]


def _unsequence(x):
    """[1, H, n, …] → [n, H, …]: one sequence's result back in packed order."""
    return np.moveaxis(x[0], 1, 0)


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=False, scale=None,
                     dropout_masks=None, dropout_p=0.0, return_lse=False):
    """§35: attention over packed sequences, each sequence computed alone (see the module).

    q [total_q, H, d], k [total_k, H, d], v [total_k, H, dv]; ``cu_seqlens_q``,
    ``cu_seqlens_k`` the B + 1 offsets. For each b, o[cu_q[b]:cu_q[b+1]] is
    :func:`reference.attention.attention` of the sequence's queries against its own keys,
    with ``causal`` bottom-right within the sequence, ``scale`` (default 1/√d) and the
    sequence's §36 keep-mask (``dropout_masks``: a list of B masks or the padded-layout mask,
    see the module's rule) with ``dropout_p``.

    Returns ``o`` [total_q, H, dv] float64, or ``(o, lse)`` with ``return_lse=True``, lse
    [total_q, H] (−inf for a query that sees no key).
    """
    q, k, v, cu_q, cu_k, scale = _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, scale)
    masks = _sequence_masks(dropout_masks, dropout_p, cu_q, cu_k, q.shape[1])
    o = np.zeros((q.shape[0], q.shape[1], v.shape[2]))
    lse = np.full(q.shape[:2], -np.inf)
    for b in range(cu_q.size - 1):
        rows = slice(cu_q[b], cu_q[b + 1])
        o_b, lse_b = attention(_sequence(q, cu_q, b), _sequence(k, cu_k, b),
                               _sequence(v, cu_k, b), causal=causal, scale=scale,
                               dropout_mask=None if masks is None else masks[b],
                               dropout_p=dropout_p)
        o[rows] = _unsequence(o_b)                      # [1, H, n, dv] → [n, H, dv]
        lse[rows] = _unsequence(lse_b)                  # [1, H, n] → [n, H]
    return (o, lse) if return_lse else o


def varlen_attention_backward(do, q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=False,
                              scale=None, dropout_masks=None, dropout_p=0.0):
    """§30 + §35: (dq, dk, dv) of :func:`varlen_attention`, packed, each sequence alone.

    ``do`` is ∂L/∂o, [total_q, H, dv]; the other arguments as :func:`varlen_attention`. For each
    b the slices of dq, dk, dv are :func:`reference.attention_backward.attention_backward` of
    that sequence (so a key of sequence b only gets gradient from queries of sequence b).
    Returns float64 ``(dq, dk, dv)`` of the shapes of ``q``, ``k``, ``v``.
    """
    q, k, v, cu_q, cu_k, scale = _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, scale)
    do = as_real(do, "do")
    want = (q.shape[0], q.shape[1], v.shape[2])
    if do.shape != want:
        raise ValueError(f"do must have o's shape [total_q, H, dv] = {want}; got {do.shape}")
    masks = _sequence_masks(dropout_masks, dropout_p, cu_q, cu_k, q.shape[1])
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for b in range(cu_q.size - 1):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        g = attention_backward(_sequence(do, cu_q, b), _sequence(q, cu_q, b),
                               _sequence(k, cu_k, b), _sequence(v, cu_k, b), causal=causal,
                               scale=scale, dropout_mask=None if masks is None else masks[b],
                               dropout_p=dropout_p)
        dq[rows], dk[keys], dv[keys] = (_unsequence(x) for x in g)
    return dq, dk, dv
