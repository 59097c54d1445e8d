"""Philox4x32-10 and the dropout keep-mask (§36): Random123's known answers for the NumPy twin and
the device function; the kernel's mask equal to the twin's bit for bit; keep fractions within
binomial bounds; the mask a pure function of (seed, b, h, i, j); bad arguments named.

Tiny shapes in the simulator, bigger ones on the GPU.
"""

import math

import numpy as np
import pytest
from conftest import by_device
from numba import cuda

import flashlesson
from flashlesson import dropout as D
from flashlesson.kernels_numba import philox as KP
from flashlesson.reference import philox as RP

KAT = RP.KNOWN_ANSWERS      # Random123 kat_vectors: (counter, key, result)
KAT_C = np.array([c for c, _, _ in KAT], np.uint32)
KAT_K = np.array([k for _, k, _ in KAT], np.uint32)
KAT_R = np.array([r for _, _, r in KAT], np.uint32)

# (batch, heads, nq, nk): nk not a multiple of 4, nk = 1, nq = 1, more than one block in x and y
SHAPES = by_device(
    [(1, 1, 1, 1), (1, 1, 1, 7), (2, 3, 5, 13), (1, 2, 9, 1), (2, 1, 3, 66)],
    [(1, 1, 1, 1), (1, 1, 1, 7), (2, 3, 5, 13), (1, 2, 9, 1), (2, 3, 77, 1001),
     (4, 16, 513, 515), (1, 1, 70000, 5)])
SEEDS = [0, 1, 2**32 - 1, 2**32, 2**32 + 12345, 2**64 - 1]


# ---------------------------------------------------------------------------------------------
# Known answers
# ---------------------------------------------------------------------------------------------
def test_twin_known_answers():
    np.testing.assert_array_equal(RP.philox4x32_10(KAT_C, KAT_K), KAT_R)
    for c, k, r in KAT:                                   # one at a time, too
        assert tuple(int(w) for w in RP.philox4x32_10(np.array(c, np.uint32),
                                                      np.array(k, np.uint32))) == r


def test_twin_broadcasts_key():
    counters = np.arange(24, dtype=np.uint32).reshape(2, 3, 4)
    key = np.array([7, 9], np.uint32)
    out = RP.philox4x32_10(counters, key)
    assert out.shape == (2, 3, 4) and out.dtype == np.uint32
    for a in range(2):
        for b in range(3):
            np.testing.assert_array_equal(out[a, b], RP.philox4x32_10(counters[a, b], key))


def test_device_known_answers():
    out = cuda.to_device(np.zeros_like(KAT_R))
    KP.philox_rows_kernel[1, 32](cuda.to_device(KAT_C), cuda.to_device(KAT_K), out)
    np.testing.assert_array_equal(out.copy_to_host(), KAT_R)


def test_device_matches_twin_on_random_counters(rng):
    n = by_device(64, 4096)
    c = rng.integers(0, 2**32, (n, 4), dtype=np.uint64).astype(np.uint32)
    k = rng.integers(0, 2**32, (n, 2), dtype=np.uint64).astype(np.uint32)
    out = cuda.to_device(np.zeros((n, 4), np.uint32))
    KP.philox_rows_kernel[-(-n // 32), 32](cuda.to_device(c), cuda.to_device(k), out)
    np.testing.assert_array_equal(out.copy_to_host(), RP.philox4x32_10(c, k))


# ---------------------------------------------------------------------------------------------
# dropout_word / dropout_keep, the per-element functions the attention kernels call
# ---------------------------------------------------------------------------------------------
@cuda.jit
def _word_kernel(k0, k1, threshold, bh, i, j, words, keep):
    t = cuda.grid(1)
    if t < bh.shape[0]:
        words[t] = KP.dropout_word(k0, k1, bh[t], i[t], j[t])
        keep[t] = KP.dropout_keep(k0, k1, bh[t], i[t], j[t], threshold)


@pytest.mark.parametrize("typed", ["uint32", "python int"])
def test_dropout_word_and_keep_match_twin(typed, rng):
    """Large indices too (i near 2^32, j near 2^34); the arguments typed as kernel_args makes
    them (uint32) or as plain Python ints (int64 on the device): the same words either way."""
    n = 64
    seed = int(rng.integers(0, 2**63)) * 2 + 1
    p = 0.3
    bh = rng.integers(0, 2**31, n, dtype=np.int64)
    i = rng.integers(0, 2**32, n, dtype=np.int64)
    j = rng.integers(0, 2**34, n, dtype=np.int64)
    bh[:4], i[:4], j[:4] = 0, 0, [0, 1, 2, 3]           # the first quad, word by word
    args = D.kernel_args(seed, p)
    if typed == "python int":
        args = tuple(int(a) for a in args)
    words = cuda.to_device(np.zeros(n, np.uint32))
    keep = cuda.to_device(np.zeros(n, np.uint8))
    _word_kernel[2, 32](*args, cuda.to_device(bh), cuda.to_device(i), cuda.to_device(j),
                        words, keep)
    k0, k1 = RP.seed_key(seed)
    counter = np.stack([j // 4, i, bh, np.zeros(n, np.int64)], axis=-1)
    expect = RP.philox4x32_10(counter, np.array([k0, k1]))[np.arange(n), j % 4]
    np.testing.assert_array_equal(words.copy_to_host(), expect)
    np.testing.assert_array_equal(keep.copy_to_host(), expect >= RP.dropout_threshold(p))


# ---------------------------------------------------------------------------------------------
# The mask: kernel == twin, statistics, purity
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_kernel_mask_equals_twin(shape, rng):
    seeds = SEEDS if shape == SHAPES[2] else [int(rng.integers(0, 2**63)) * 2 + 1]
    for seed in seeds:
        for p in (0.0, 0.37):
            got = flashlesson.dropout_keep_mask(seed, *shape, p)
            assert got.shape == shape and got.dtype == np.bool_
            np.testing.assert_array_equal(got, RP.dropout_keep_mask(seed, *shape, p),
                                          err_msg=f"seed={seed}, p={p}")


def _within_5_sigma(mask, p):
    n = mask.size
    keep = mask.mean()
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(keep - (1 - p)) <= 5 * sigma, f"kept {keep:.5f}, expected {1 - p} ± {5 * sigma:.5f}"


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_fraction_is_binomial(p, rng):
    seed = int(rng.integers(0, 2**63))
    shape = by_device((2, 2, 16, 66), (4, 8, 256, 1000))
    mask = flashlesson.dropout_keep_mask(seed, *shape, p)
    _within_5_sigma(mask, p)
    # the twin is bit-exact with the kernel, so the bigger statistics can be taken there:
    # the whole mask, each of the 4 words of a Philox call, and each head on its own
    big = RP.dropout_keep_mask(seed, 2, 4, 128, 1024, p)
    _within_5_sigma(big, p)
    for e in range(4):
        _within_5_sigma(big[..., e::4], p)
    for b in range(2):
        for h in range(4):
            _within_5_sigma(big[b, h], p)


def test_p_zero_keeps_everything_and_threshold_edges():
    assert flashlesson.dropout_keep_mask(2**40 + 1, 2, 2, 5, 13, 0.0).all()
    assert flashlesson.dropout_keep_mask(3, 2, 2, 5, 13, 0).all()          # an int 0 is fine
    assert D.threshold(0.0) == RP.dropout_threshold(0.0) == 0
    assert D.threshold(0.5) == 2**31 and D.threshold(0.25) == 2**30
    largest = 1.0 - 2.0**-53                                              # the largest p < 1
    assert D.threshold(largest) == RP.dropout_threshold(largest) == 2**32 - 1
    assert D.threshold(np.float32(0.5)) == 2**31


def test_helpers_agree_with_twin(rng):
    for _ in range(20):
        seed = int(rng.integers(0, 2**63)) * 2 + int(rng.integers(0, 2))
        p = float(rng.random())
        assert D.seed_key(seed) == RP.seed_key(seed)
        assert D.threshold(p) == RP.dropout_threshold(p)
    assert D.seed_key(2**64 - 1) == (2**32 - 1, 2**32 - 1)
    assert D.seed_key(2**32 + 5) == (5, 1)
    k0, k1, t = D.kernel_args(2**32 + 5, 0.5)
    assert (k0, k1, t) == (5, 1, 2**31)
    assert all(type(a) is np.uint32 for a in (k0, k1, t))


def test_mask_is_independent_of_the_call_shape(rng):
    """Element (b, h, i, j) depends only on the seed: a block of a bigger mask (same heads, or
    batch 1) is the smaller mask."""
    seed = int(rng.integers(0, 2**63)) + 2**40
    p = 0.5
    big = flashlesson.dropout_keep_mask(seed, 3, 2, 11, 23, p)
    np.testing.assert_array_equal(big[:2, :, :7, :9],
                                  flashlesson.dropout_keep_mask(seed, 2, 2, 7, 9, p))
    np.testing.assert_array_equal(big[:1, :, :1, :1],
                                  flashlesson.dropout_keep_mask(seed, 1, 2, 1, 1, p))
    # bh = b·H + h: with batch 1, fewer heads is a block too
    wide = flashlesson.dropout_keep_mask(seed, 1, 5, 4, 6, p)
    np.testing.assert_array_equal(wide[:, :3], flashlesson.dropout_keep_mask(seed, 1, 3, 4, 6, p))


def test_kernel_launch_shape_does_not_matter(rng):
    """The kernel's grid-stride loops over rows and heads: a grid of 1 × 1 in y and z, or odd
    block shapes, writes the same mask."""
    seed = int(rng.integers(0, 2**63))
    shape = (2, 3, 9, 14)
    args = D.kernel_args(seed, 0.4)
    expect = RP.dropout_keep_mask(seed, *shape, 0.4)
    quads = -(-shape[3] // 4)
    for block, gyz in [((1, 1), (1, 1)), ((4, 2), (2, 5)), ((2, 8), (1, 6))]:
        out = cuda.to_device(np.full(shape, 7, np.uint8))                 # poisoned
        grid = (-(-quads // block[0]), gyz[0], gyz[1])
        KP.dropout_mask_kernel[grid, block](*args, np.int64(shape[1]), out)
        np.testing.assert_array_equal(out.copy_to_host(), expect, err_msg=f"block {block}")


def test_masks_differ_where_they_should():
    """No aliasing: another seed (in either key word), another head, batch, row or quad gives
    an unrelated mask (each pair agrees on about half the elements at p = 0.5)."""
    p = 0.5
    m = RP.dropout_keep_mask(12345, 2, 3, 16, 64, p)
    others = [RP.dropout_keep_mask(12346, 2, 3, 16, 64, p)[0, 0],
              RP.dropout_keep_mask(12345 + 2**32, 2, 3, 16, 64, p)[0, 0],
              m[0, 1], m[1, 0], np.roll(m[0, 0], 1, axis=0), np.roll(m[0, 0], 4, axis=1)]
    for other in others:
        agree = (other == m[0, 0]).mean()
        assert 0.4 < agree < 0.6, agree


# ---------------------------------------------------------------------------------------------
# Bad arguments
# ---------------------------------------------------------------------------------------------
GOOD = dict(seed=1, batch=1, heads=1, nq=2, nk=3, p=0.1)
BAD = [("seed", -1), ("seed", 2**64), ("seed", 1.5), ("seed", True), ("seed", "7"),
       ("batch", 0), ("batch", 2.0), ("heads", -3), ("heads", None), ("nq", 0), ("nk", 0),
       ("nk", np.float64(4)), ("p", -0.1), ("p", 1.0), ("p", 1), ("p", float("nan")),
       ("p", "0.5"), ("p", None), ("p", True)]


@pytest.mark.parametrize("name, value", BAD, ids=lambda v: repr(v))
@pytest.mark.parametrize("impl", ["flashlesson", "reference"])
def test_bad_arguments_are_named(impl, name, value):
    fn = flashlesson.dropout_keep_mask if impl == "flashlesson" else RP.dropout_keep_mask
    with pytest.raises((TypeError, ValueError), match=f"^{name}:"):
        fn(**{**GOOD, name: value})


def test_numpy_integers_are_accepted():
    got = flashlesson.dropout_keep_mask(np.uint64(2**63 + 5), np.int32(1), np.int64(2),
                                        np.uint8(3), np.int16(5), np.float32(0.25))
    np.testing.assert_array_equal(got, RP.dropout_keep_mask(2**63 + 5, 1, 2, 3, 5, 0.25))


@pytest.mark.parametrize("counter, key, match", [
    (np.zeros(3, np.uint32), np.zeros(2, np.uint32), "counter"),
    (np.zeros(4, np.uint32), np.zeros(3, np.uint32), "key"),
    (np.zeros(4, np.float32), np.zeros(2, np.uint32), "counter"),
    (np.array([0, 0, 0, 2**32]), np.zeros(2, np.uint32), "counter"),
    (np.zeros(4, np.uint32), np.array([-1, 0]), "key"),
])
def test_twin_rejects_bad_words(counter, key, match):
    with pytest.raises((TypeError, ValueError), match=f"^{match}:"):
        RP.philox4x32_10(counter, key)
