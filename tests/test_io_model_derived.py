"""The IO model's causal tile counts (``flashlesson.traffic``, ``flashlesson.loop_order``) derived
here by brute force over every (query i, key j) pair, instead of restating the kernels' rule:
a K/V tile is visited by a Q tile when some query of that tile (i < Nq) sees some key of it
(j < Nk, j ≤ i + Nk − Nq). Shapes sweep tile edges: Nq = Nk, Nq < Nk, Nq > Nk, offsets that
are and are not multiples of the tiles, Q tiles that see no key. Pure Python: no kernel runs.
"""

import itertools

import numpy as np
import pytest

from flashlesson import BwdConfig, FlashConfig, loop_order, traffic

CONFIGS = [FlashConfig(Br=32, Bc=16, TR=8, TC=4), FlashConfig(Br=16, Bc=32, TR=4, TC=8),
           FlashConfig(Br=32, Bc=32, TR=8, TC=4)]
SIZES = [1, 15, 16, 17, 31, 32, 33, 48, 64, 80]
SHAPES = list(itertools.product(SIZES, SIZES))


def visible(nq, nk, causal):
    """[Nq, Nk] bool: query i sees key j (bottom-right causal)."""
    i, j = np.arange(nq)[:, None], np.arange(nk)[None, :]
    return (j <= i + nk - nq) if causal else np.ones((nq, nk), bool)


def pairs_by_tile(nq, nk, Br, Bc, causal):
    """[Q tiles, K tiles] bool: the tile pair holds a visible (i, j)."""
    vis = visible(nq, nk, causal)
    nqt, nkt = -(-nq // Br), -(-nk // Bc)
    out = np.zeros((nqt, nkt), bool)
    for a in range(nqt):
        for b in range(nkt):
            out[a, b] = vis[a * Br:(a + 1) * Br, b * Bc:(b + 1) * Bc].any()
    return out


@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_forward_tiles_visited_by_brute_force(config, causal):
    for nq, nk in SHAPES:
        tiles = pairs_by_tile(nq, nk, config.Br, config.Bc, causal)
        got = traffic.flash_tiles_visited(nq, nk, causal, config)
        assert [q0 for q0, _ in got] == list(range(0, nq, config.Br))
        for (q0, t), row in zip(got, tiles):
            # the tiles a Q tile needs are a prefix 0 … t−1: exactly the ones holding a pair
            want = int(np.flatnonzero(row)[-1]) + 1 if row.any() else 0
            assert row[:want].all()
            assert t == want, f"Nq={nq} Nk={nk} q0={q0}: model {t} tiles, pairs need {want}"


@pytest.mark.parametrize("causal", [False, True])
def test_forward_model_kv_reads_by_brute_force(causal):
    cfg, d, B, H = CONFIGS[0], 5, 2, 3
    for nq, nk in SHAPES:
        tiles = pairs_by_tile(nq, nk, cfg.Br, cfg.Bc, causal)
        # rows of K loaded: each visited tile's keys < Nk, once per Q tile
        rows = sum(min((b + 1) * cfg.Bc, nk) - b * cfg.Bc
                   for a in range(tiles.shape[0]) for b in range(tiles.shape[1]) if tiles[a, b])
        model = traffic.flash_attention_traffic(B, H, nq, nk, d, causal, cfg)
        assert model["k"].reads == model["v"].reads == B * H * rows * d, (nq, nk)
        assert model["q"].reads == B * H * nq * d and model["o"].writes == B * H * nq * d


@pytest.mark.parametrize("causal", [False, True])
def test_backward_model_q_reads_by_brute_force(causal):
    """dK/dV kernel: a K tile streams the Q tiles from the first one holding a query that sees
    one of its keys; the dQ kernel reads each Q row once more."""
    cfg = BwdConfig(Bc=32, Br=16, TR=8, TC=4, dq_Br=32, dq_Bc=16, dq_TR=8, dq_TC=4)
    d = 3
    for nq, nk in SHAPES:
        tiles = pairs_by_tile(nq, nk, cfg.Br, cfg.Bc, causal)     # [Q tiles of Br, K tiles]
        rows = 0
        for b in range(tiles.shape[1]):
            col = tiles[:, b]
            first = int(np.flatnonzero(col)[0]) if col.any() else tiles.shape[0]
            assert col[first:].all()           # from the first Q tile on, every one is needed
            rows += max(nq - first * cfg.Br, 0)
        model = traffic.backward_traffic(1, 1, nq, nk, d, "flash", causal, config=cfg)
        assert model["q"].reads == (rows + nq) * d, (nq, nk)
        # dQ kernel: K rows read = the forward's rule with the dQ tiles, by brute force too
        dq_tiles = pairs_by_tile(nq, nk, cfg.dq_Br, cfg.dq_Bc, causal)
        dq_rows = sum(min((b + 1) * cfg.dq_Bc, nk) - b * cfg.dq_Bc
                      for a in range(dq_tiles.shape[0]) for b in range(dq_tiles.shape[1])
                      if dq_tiles[a, b])
        k_tiles_rows = sum(min(cfg.Bc, nk - k0) for k0 in range(0, nk, cfg.Bc))
        assert model["k"].reads == (k_tiles_rows + dq_rows) * d, (nq, nk)


@pytest.mark.parametrize("q_blocks", [1, 2])
@pytest.mark.parametrize("causal", [False, True])
def test_fa1_steps_by_brute_force(causal, q_blocks):
    """§41 (K/V tiles outside, Q tiles inside): the K/V tiles taken are those holding a visible
    pair; for each, the Q tiles taken are those from the first holding a pair, dealt to blocks
    round-robin (Q tile t to block t mod q_blocks)."""
    cfg = CONFIGS[0]
    for nq, nk in SHAPES:
        tiles = pairs_by_tile(nq, nk, cfg.Br, cfg.Bc, causal)
        blocks = loop_order.fa1_steps(nq, nk, causal, cfg, q_blocks)
        assert len(blocks) == q_blocks
        for qb, steps in enumerate(blocks):
            want = []
            for b in range(tiles.shape[1]):
                qs = [a * cfg.Br for a in range(tiles.shape[0]) if tiles[a, b] and
                      a % q_blocks == qb]
                if qs:
                    want.append((b * cfg.Bc, qs))
            assert steps == want, f"Nq={nq} Nk={nk} block {qb}"
