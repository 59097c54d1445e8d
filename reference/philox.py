"""Philox4x32-10 and the dropout keep-mask (lesson §36): the NumPy twin of kernels_numba/philox.py.

Dropout needs the *same* random mask in the forward and the backward pass, but FlashAttention
never stores P, let alone a mask of P's size. So the mask is not stored: it is recomputed from a
counter-based generator, a pure function of (seed, b, h, i, j). Any thread, in any tile, in any
kernel, gets the same bit for the same element — with no state carried between calls.

Menu::

    philox4x32_10(counter, key)   Random123's Philox4x32-10: 10 rounds of
                                    (c0, c1, c2, c3) → (hi(M1·c2) ^ c1 ^ k0, lo(M1·c2),
                                                        hi(M0·c0) ^ c3 ^ k1, lo(M0·c0)),
                                  the key bumped by the Weyl constants (W0, W1) between rounds.
                                  Vectorized: counter uint32 (..., 4), key uint32 (..., 2),
                                  broadcast against each other; returns uint32 (..., 4).
    seed_key(seed)                key = (seed mod 2^32, seed div 2^32), seed an int in [0, 2^64)
    dropout_threshold(p)          floor(p · 2^32), an int in [0, 2^32 − 1] for 0 ≤ p < 1
    dropout_keep_mask(seed, batch, heads, nq, nk, p)
                                  bool [batch, heads, nq, nk]: for element (b, h, i, j),
                                  counter = (j div 4, i, b·heads + h, 0), r = word (j mod 4) of
                                  Philox4x32-10(counter, seed_key(seed)); keep iff r ≥ threshold.
                                  So P(keep) = 1 − threshold / 2^32 = 1 − p up to 2^-32; kept
                                  probabilities are scaled by 1/(1 − p) (inverted dropout).

Limits: i < 2^32, j < 2^34, b·heads + h < 2^32 (the counter words). The 32×32 → 64-bit products
(mulhi/mullo) are done in uint64, which holds them exactly; everything is integer arithmetic, so
this twin and the kernel agree bit for bit.

Known-answer vectors (Random123's kat_vectors, checked in tests/test_philox.py):
  counter 0, key 0                → 6627e8d5 e169c58d bc57ac4c 9b00dbd8
  counter ffffffff ×4, key ×2     → 408f276d 41c83b0e a20bc7c6 6d5451fd
  counter 243f6a88 85a308d3 13198a2e 03707344, key a4093822 299f31d0 (π's digits)
                                  → d16cfe09 94fdcceb 5001e420 24126ea1

Imports: NumPy only.
"""

import operator

import numpy as np

__all__ = ["philox4x32_10", "seed_key", "dropout_threshold", "dropout_keep_mask", "KNOWN_ANSWERS"]

M0 = np.uint64(0xD2511F53)      # multipliers of the two S-boxes
M1 = np.uint64(0xCD9E8D57)
W0 = np.uint64(0x9E3779B9)      # Weyl key increments: golden ratio, √3 − 1 (as 32-bit fractions)
W1 = np.uint64(0xBB67AE85)
MASK32 = np.uint64(0xFFFFFFFF)
SHIFT32 = np.uint64(32)
ROUNDS = 10


# Random123's kat_vectors for philox4x32 with 10 rounds: (counter, key, expected output). The
# tests and the §36 example check both twins (NumPy here, kernels_numba's device function) on them.
KNOWN_ANSWERS = [
    ((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
     (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF),
     (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def _words(a, name, n):
    """``a`` as uint64 with last axis n, every entry an integer in [0, 2^32)."""
    a = np.asarray(a)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integers (uint32 words), got dtype {a.dtype}")
    if a.ndim == 0 or a.shape[-1] != n:
        raise ValueError(f"{name}: expected shape (..., {n}), got {a.shape}")
    if a.size and (a.min() < 0 or a.max() > 0xFFFFFFFF):
        raise ValueError(f"{name}: every word must be in [0, 2^32)")
    return a.astype(np.uint64)


def philox4x32_10(counter, key):
    """Philox4x32-10 of uint32 counter (..., 4) under uint32 key (..., 2); uint32 (..., 4)."""
    c = _words(counter, "counter", 4)
    k = _words(key, "key", 2)
    c0, c1, c2, c3, k0, k1 = np.broadcast_arrays(c[..., 0], c[..., 1], c[..., 2], c[..., 3],
                                                 k[..., 0], k[..., 1])
    k0 = k0.copy()
    k1 = k1.copy()
    for r in range(ROUNDS):
        if r:                                   # bump the key before rounds 2 … 10
            k0 = (k0 + W0) & MASK32
            k1 = (k1 + W1) & MASK32
        p0 = M0 * c0                            # 32 × 32 → 64 bits, exact in uint64
        p1 = M1 * c2
        c0, c1, c2, c3 = ((p1 >> SHIFT32) ^ c1 ^ k0, p1 & MASK32,
                          (p0 >> SHIFT32) ^ c3 ^ k1, p0 & MASK32)
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def _int(value, name, lo, hi):
    """An integer (not bool) in [lo, hi), else an error naming ``name``."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected an integer, got a bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__}") from None
    if not lo <= v < hi:
        raise ValueError(f"{name}: expected an integer in [{lo}, {hi}), got {v}")
    return v


def seed_key(seed):
    """The Philox key of a dropout seed in [0, 2^64): (seed mod 2^32, seed div 2^32)."""
    seed = _int(seed, "seed", 0, 2**64)
    return seed & 0xFFFFFFFF, seed >> 32


def dropout_threshold(p):
    """floor(p · 2^32) for a dropout probability 0 ≤ p < 1; a word r is kept iff r ≥ it."""
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, float, np.integer,
                                                            np.floating)):
        raise TypeError(f"p: expected a real number in [0, 1), got {type(p).__name__}")
    p = float(p)
    if not 0.0 <= p < 1.0:                      # NaN fails this too
        raise ValueError(f"p: expected a dropout probability in [0, 1), got {p!r}")
    return int(np.floor(p * 2.0**32))           # exact: p · 2^32 only shifts the exponent


def dropout_keep_mask(seed, batch, heads, nq, nk, p):
    """The keep-mask, bool [batch, heads, nq, nk] (see the menu for the formula)."""
    k0, k1 = seed_key(seed)
    batch = _int(batch, "batch", 1, 2**32)
    heads = _int(heads, "heads", 1, 2**32)
    nq = _int(nq, "nq", 1, 2**32)
    nk = _int(nk, "nk", 1, 2**34)
    t = dropout_threshold(p)
    quads = -(-nk // 4)
    bh = np.arange(batch * heads, dtype=np.uint64).reshape(batch, heads, 1, 1)
    i = np.arange(nq, dtype=np.uint64).reshape(1, 1, nq, 1)
    jq = np.arange(quads, dtype=np.uint64).reshape(1, 1, 1, quads)
    shape = (batch, heads, nq, quads)
    counter = np.stack(np.broadcast_arrays(jq, i, bh, np.zeros(1, np.uint64)), axis=-1)
    r = philox4x32_10(counter, np.array([k0, k1], np.uint64))    # (batch, heads, nq, quads, 4)
    r = r.reshape(shape[:3] + (4 * quads,))[..., :nk]            # word j mod 4 of quad j div 4
    return r >= t
