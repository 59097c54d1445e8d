"""``flashlesson.dropout``: the dropout keep-mask of lesson §36, from a seed, by Philox4x32-10.

The mask is a pure function of (seed, b, h, i, j) — see ``kernels_numba/philox.py`` for the
formula and the device functions, ``reference/philox.py`` for its NumPy twin. The helpers here
turn the user's (seed, p) into what the kernels take, and are shared with the attention code:

- ``seed_key(seed)`` → (k0, k1) = (seed mod 2^32, seed div 2^32), Python ints;
- ``threshold(p)`` → floor(p · 2^32), a Python int in [0, 2^32 − 1]; r is kept iff r ≥ it;
- ``kernel_args(seed, p)`` → (np.uint32 k0, np.uint32 k1, np.uint32 threshold), the three
  kernel arguments, typed once here so every launch compiles the same specialization;
  ``attention_args(seed, p)`` adds inv_keep = np.float32(1/(1 − p)) for the attention kernels;
- ``dropout_args(dropout_p, seed)`` → (p checked, attention_args): what the operations call.

(The arithmetic of ``seed_key`` and ``threshold`` is the reference's, ``reference/philox.py``,
called once the arguments pass this package's checks: one owner, no copy.)
"""

import numpy as np

from .kernels_numba import philox as KP
from .reference import philox as RP

from . import device
from .arrays import empty
from .checks import integer, probability

# Launch shape of dropout_mask_kernel: block (TX quads of j, TY rows); smaller in the simulator,
# where every simulated thread is a Python thread.
BLOCK = (8, 4) if device.SIMULATOR else (32, 8)
MAX_GRID_YZ = 65535


def seed_key(seed):
    """The Philox key of a dropout seed in [0, 2^64): (seed mod 2^32, seed div 2^32)."""
    return RP.seed_key(integer(seed, "seed", 0, 2**64))


def threshold(p):
    """floor(p · 2^32) for a dropout probability 0 ≤ p < 1; a word r is kept iff r ≥ it."""
    return RP.dropout_threshold(probability(p, "p", "dropout probability"))


def kernel_args(seed, p):
    """(k0, k1, threshold) as np.uint32, ready to pass to a kernel calling ``dropout_keep``."""
    k0, k1 = seed_key(seed)
    return np.uint32(k0), np.uint32(k1), np.uint32(threshold(p))


def attention_args(seed, p):
    """(k0, k1, threshold, inv_keep = 1/(1 − p)): what the attention kernels take for dropout
    with probability p (already checked by the caller) and ``seed`` (checked here)."""
    return (*kernel_args(seed, p), np.float32(1.0 / (1.0 - p)))


def dropout_args(dropout_p, seed, noun="probability"):
    """(p, (seed_lo, seed_hi, threshold, inv_keep)) for the kernels; p = 0 means no dropout.
    ``noun`` words the range error (the backward says "drop probability")."""
    p = probability(dropout_p, "dropout_p", noun)
    return p, attention_args(seed, p)           # (checks seed: an int in [0, 2^64))


def dropout_keep_mask(seed, batch, heads, nq, nk, p):
    """§36: the dropout keep-mask, bool [batch, heads, nq, nk], computed on the device.

    Element (b, h, i, j) is kept iff word (j mod 4) of Philox4x32-10(counter = (j div 4, i,
    b·heads + h, 0), key = (seed mod 2^32, seed div 2^32)) is ≥ floor(p · 2^32). It depends on
    nothing else: a block of a bigger mask with the same seed is the smaller mask. Kept
    probabilities are to be scaled by 1/(1 − p).

    seed: int in [0, 2^64); batch, heads, nq, nk: positive ints; p: float in [0, 1).
    """
    k0, k1, t = kernel_args(seed, p)
    batch = integer(batch, "batch", 1, 2**32)
    heads = integer(heads, "heads", 1, 2**32)
    nq = integer(nq, "nq", 1, 2**32)
    nk = integer(nk, "nk", 1, 2**34)
    if batch * heads >= 2**32:
        raise ValueError(f"batch, heads: batch·heads = {batch * heads} must be < 2^32 (a "
                         "Philox counter word)")
    out = empty((batch, heads, nq, nk), np.uint8)
    tx, ty = BLOCK
    quads = -(-nk // 4)                         # one thread per 4 adjacent j (one Philox call)
    grid = (-(-quads // tx), min(-(-nq // ty), MAX_GRID_YZ), min(batch * heads, MAX_GRID_YZ))
    KP.dropout_mask_kernel[grid, (tx, ty)](k0, k1, t, np.int64(heads), out)
    return out.copy_to_host().view(np.bool_)
