"""Tests of §38–40's sweeps (``flashlesson.sweeps``), the occupancy model
(``flashlesson.occupancy``) and ``scripts/bench_sweeps.py`` (its ``--tiny`` plumbing in the
simulator; on a GPU the same code measures).

The occupancy numbers are the H200's (sm_90) rules worked by hand; the crossover reader is fed
made-up timings whose answer is known.
"""

import json
import runpy
from pathlib import Path

import pytest

import flashlesson  # noqa: F401 - picks the device before numba.cuda loads
from conftest import SIM
from flashlesson import sweeps
from flashlesson.configs import GPU_CONFIGS, SMALL_GRID_CONFIGS, FlashConfig
from flashlesson.occupancy import H200, blocks_per_sm

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_sweeps.py"
KB = 1024


# ---------------------------------------------------------------------------------------------
# Occupancy
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("threads, smem, regs, blocks, limiter", [
    (128, 84992, 255, 2, "registers"),      # d=64 default: 255 regs → 8192 a warp → 8 warps
    (128, 84992, None, 2, "shared memory"),  # 228 KB // (83 KB + 1 KB reserved) = 2
    (256, 0, 33, 6, "registers"),           # 33·32 = 1056 → 1280 a warp → 51 warps → 6 blocks
    (1024, 0, 16, 2, "threads"),            # 2048 // 1024 (registers would allow 4)
    (32, 0, 16, 32, "blocks"),              # 64 would fit by threads; 32 blocks per SM at most
    (64, 50 * KB, None, 4, "shared memory"),  # 228 // 51
    (128, 228 * KB, None, 0, "shared memory"),  # over the 227 KB a block may have
    (128, 0, 256, 0, "registers"),          # over 255 registers a thread
])
def test_blocks_per_sm(threads, smem, regs, blocks, limiter):
    occ = blocks_per_sm(threads, smem, regs)
    assert (occ["blocks"], occ["limited by"]) == (blocks, limiter), occ
    assert occ["warps"] == blocks * (threads // 32)
    assert occ["occupancy"] == occ["warps"] / 64


def test_register_rounding_by_hand():
    # 168 registers: 5376 per warp, a multiple of 256 → 65536 // 5376 = 12 warps → 3 blocks
    # of 4 warps ("three blocks per SM" at 168 registers, docs/results.md)
    assert blocks_per_sm(128, 0, 168)["by registers"] == 3
    assert blocks_per_sm(128, 0, 169)["by registers"] == 2       # 5408 → 5632: 11 warps
    assert H200.smem == 233472 and H200.smem_per_block == 232448


def test_blocks_per_sm_refuses_nonsense():
    with pytest.raises(ValueError, match="threads"):
        blocks_per_sm(0, 0)


# ---------------------------------------------------------------------------------------------
# The models of the sweeps
# ---------------------------------------------------------------------------------------------
def test_config_model_matches_the_kernel_layout():
    cfg = FlashConfig(128, 64, 16, 8, 2, 2)
    m = sweeps.config_model(cfg, 64, n=4096)
    assert m["smem KB"] * 1024 == cfg.smem_bytes(64) == 84992
    assert (m["threads"], m["D"], m["values/thread"], m["K/V passes"]) == (128, 64, 128, 32)
    assert m["FMA/load"] == 16                          # 4·8·8 / (8 + 8)
    assert sweeps.config_model(cfg, 80)["D"] == 96      # d padded to a multiple of 4·TC


def test_tile_configs_span_runnable_and_refused():
    reasons = [sweeps.refusal(c, sweeps.TILE_D) for c in sweeps.TILE_CONFIGS]
    assert reasons[:8] == [None] * 8
    assert "shared memory" in reasons[8] and "registers" in reasons[9]
    assert dict(GPU_CONFIGS)[64] in sweeps.TILE_CONFIGS          # the default is measured
    assert sweeps.TILE_SHAPE == (2, 16, 4096) and sweeps.HEAD_DIMS == (64, 80, 96, 128, 256)


def test_h200_config_follows_default_config_rule():
    small, big = dict(SMALL_GRID_CONFIGS), dict(GPU_CONFIGS)
    assert sweeps.h200_config(64, 4096, 16) == big[64]
    assert sweeps.h200_config(64, 256, 16) == small[64]     # 4·2·16 = 128 ≤ 132 SMs
    assert sweeps.h200_config(64, 512, 16) == big[64]       # 4·4·16 = 256 > 132
    assert sweeps.h200_config(80) == sweeps.h200_config(96) == big[128]
    assert sweeps.h200_config(256) == big[256]


def test_overhead_model_terms():
    m = sweeps.overhead_model(16, h=1)
    assert m["flash blocks"] == 1 and m["useful share"] == 16 * 16 / (32 * 64)
    big = sweeps.overhead_model(1024, h=16)
    assert big["flash tiles"] == "128×64" and big["flash blocks"] == 8 * 16
    assert big["naive HBM µs"] > 5 * big["flash HBM µs"]   # S and P, written and read


# ---------------------------------------------------------------------------------------------
# Reading the crossover from measurements
# ---------------------------------------------------------------------------------------------
def _rows(h, times):
    return [{"H": h, "N": n, "flash ms": f, "naive ms": s} for n, (f, s) in times.items()]


def test_crossover_found_where_flash_starts_winning_for_good():
    rows = _rows(1, {16: (3, 2), 32: (2, 3), 64: (4, 3), 128: (2, 3), 256: (2, 5)}) + \
        _rows(16, {16: (1, 2), 32: (1, 2)}) + _rows(2, {16: (1, 2), 32: (3, 2)})
    got = sweeps.crossover(rows, "flash", "naive")
    assert got[1] == {"wins_from": 128, "wins": [32, 128, 256], "loses": [16, 64]}
    assert got[16]["wins_from"] == 16 and got[16]["loses"] == []
    assert got[2]["wins_from"] is None
    lines = sweeps.describe_crossover(got, "flash", "naive")
    assert "from N = 128 up; slower or equal at N = 16, 64" in lines[0]
    assert "no crossover in range" in lines[2]
    assert "not faster than naive at the largest N" in lines[1]


def test_table_shows_ms_as_microseconds_and_drops_empty_columns():
    text = sweeps.table([{"H": 1, "N": 16, "flash ms": 0.012}], sweeps.CROSSOVER_COLUMNS)
    assert "flash µs" in text and "12" in text and "naive µs" not in text


# ---------------------------------------------------------------------------------------------
# scripts/bench_sweeps.py
# ---------------------------------------------------------------------------------------------
def _script():
    return runpy.run_path(str(SCRIPT))["main"]


@pytest.mark.skipif(not SIM, reason="--tiny is the simulator's plumbing test")
def test_bench_sweeps_tiny_writes_every_table_and_json(tmp_path, capsys):
    assert _script()(["--tiny", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for what in ("tiles", "headdim", "crossover"):
        record = json.loads((tmp_path / f"bench_sweeps_{what}.json").read_text())
        assert record["tiny"] and record["sweep"] == what and record["rows"]
        assert f"\n{what} " in out
    tiles = json.loads((tmp_path / "bench_sweeps_tiles.json").read_text())["rows"]
    assert [bool(r.get("refused")) for r in tiles] == [False, False, True]
    assert all(r["rel err"] <= sweeps.REL_TOL and r["ms"] > 0 for r in tiles[:2])
    heads = json.loads((tmp_path / "bench_sweeps_headdim.json").read_text())["rows"]
    assert [r["d"] for r in heads] == list(sweeps.TINY["head dims"])
    cross = json.loads((tmp_path / "bench_sweeps_crossover.json").read_text())
    assert {(r["H"], r["N"]) for r in cross["rows"]} == {(1, 16), (1, 24)}
    assert "flash vs naive, GPU time" in cross["crossover"]
    assert "TINY: simulator plumbing" in out and "total" in out


@pytest.mark.skipif(not SIM, reason="simulator only")
def test_bench_sweeps_fails_on_a_wrong_answer_and_without_tiny(tmp_path, monkeypatch, capsys):
    main = _script()
    assert main([]) == 2 and "need a GPU" in capsys.readouterr().err
    monkeypatch.setitem(sweeps.TINY, "crossover ns", (16,))
    monkeypatch.setattr(sweeps, "rel_err", lambda o, want: 1.0)     # every answer "wrong"
    assert main(["crossover", "--tiny", "--out", str(tmp_path)]) == 1
    assert "FAILED check (crossover)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bogus", "--tiny"])


def test_resources_asks_the_dispatcher_that_ran(rng):
    """§39's registers column: ``sweeps.resources`` must ask the very dispatcher ``attention``
    launched. The kernel factory is cached per argument list as written, so building it with
    fewer (defaulted) arguments gave a second dispatcher that never compiled: registers None
    on the GPU. Both now come from ``attention_methods.forward_kernel``."""
    import numpy as np

    from flashlesson import launch
    from flashlesson.attention_methods import forward_kernel
    from flashlesson.configs import default_config
    d = 8
    q, k, v = (rng.standard_normal((1, 1, 16, d)).astype(np.float32) for _ in range(3))
    cfg = default_config(d)
    launch.clear_plans()
    flashlesson.attention(q, k, v, config=cfg)
    launched = {key[0] for key in launch._PLANS}
    assert forward_kernel(cfg, d, False, d % 4 == 0) in launched
