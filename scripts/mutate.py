"""Mutation testing in the simulator: do the tests fail when a kernel is wrong?

Each mutant is a one-line deliberate bug (an off-by-one in a bound, a wrong index in a loop's
second iteration, a missing barrier, a wrong correction factor, a swapped max/sum, a dropped
scale, a Philox constant, an IO-model term …) in a kernel file of ``kernels_numba/`` or in the
IO model (``src/flashlesson/io_model.py``, ``loop_order.py``). For each mutant the script

1. copies the working tree (tracked and untracked-not-ignored files) once to a temporary
   folder — the real files are never edited;
2. applies the mutant to the copy (an exact text replacement: the text must be there,
   ``nth`` occurrence), runs the mutant's test subset with pytest in the simulator
   (``-x -p no:xdist``, one mutant at a time; the race-mode tests of
   ``tests/test_kernel_crossings.py`` where a barrier is removed), restores the file;
3. records *caught* (pytest failed, or an error / timeout: the kernel is broken) or
   *survived* (every selected test passed, or the selection itself is wrong: no test
   collected, or a test id pytest cannot find), prints a table and the score.

    python3 scripts/mutate.py                      # every mutant (≈ 15–25 min on 2 cores)
    python3 scripts/mutate.py --only fwd-,red-     # ids starting with these prefixes
    python3 scripts/mutate.py --list               # the mutants, nothing run
    python3 scripts/mutate.py --check              # each mutant's text is found (no tests)
    python3 scripts/mutate.py --baseline           # the subsets pass unmutated first
    python3 scripts/mutate.py --log docs/logs/2026-12-02_mutants_simulator.log

Exit status: 0 when the score reaches ``--target`` (default 0.95) and no mutant is stale
(its text not found: the kernel changed; update the table), 1 otherwise.

Limits: a mutant in code the simulator does not run (the inline-PTX helpers of ``vector.py`` /
``mma.py``) cannot be caught here; their simulator twins (``kernels_numba/sim/vector.py``,
``sim/mma.py``) are mutated instead and said so. compute-sanitizer covers the GPU side (scripts/gpu_sanitize.sh).
"""

import argparse
import dataclasses
import datetime
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KN = "kernels_numba/"
FL = "src/flashlesson/"

# --- test subsets (pytest arguments); the cheapest, likeliest to fail first (-x stops there)
CROSS = "tests/test_kernel_crossings.py::"
FWD = [CROSS + "test_forward_causal_last_key_on_a_tile_edge",
       CROSS + "test_forward_options_crossed_on_two_iteration_tiles",
       CROSS + "test_loop_orders_options_crossed_on_two_iteration_tiles",
       "tests/test_attention.py::test_matches_oracle",
       "tests/test_attention.py::test_flash_configs",
       "tests/test_attention_masks.py::test_key_padding_mask",
       "tests/test_attention_masks.py::test_dropout_matches_oracle_with_the_philox_mask"]
FWD_FLASH = FWD + ["-k", "not naive and not fa1 and not db"]
FWD_FA1 = FWD + ["-k", "fa1"]
FWD_DB = FWD + ["-k", "_db"]
FWD_FA1_DB = FWD + ["-k", "fa1 or _db"]
FWD_NAIVE = ["tests/test_attention.py::test_matches_oracle",
             "tests/test_attention_masks.py::test_dropout_matches_oracle_with_the_philox_mask",
             "tests/test_attention_masks.py::test_key_padding_mask",
             "tests/test_attention_masks.py::test_dropout_with_padding_and_the_same_mask_for_every"
             "_method", "-k", "naive or every_method"]
MERGE = ["tests/test_attention.py::test_merge_matches_oracle",
         "tests/test_attention.py::test_merge_of_disjoint_key_sets_equals_full_attention",
         "tests/test_attention.py::test_merge_ignores_empty_parts"]
RACE_FWD = [CROSS + "test_forward_kernels_race_free"]
BWD = [CROSS + "test_backward_causal_last_key_on_a_tile_edge",
       CROSS + "test_backward_options_crossed_on_two_iteration_tiles",
       "tests/test_attention_backward.py::test_matches_oracle",
       "tests/test_attention_backward.py::test_dropout",
       "tests/test_attention_backward.py::test_key_padding",
       "tests/test_attention_backward.py::test_flash_configs", "-k", "not naive"]
BWD_NAIVE = ["tests/test_attention_backward.py::test_matches_oracle",
             "tests/test_attention_backward.py::test_dropout", "-k", "naive"]
RACE_BWD = [CROSS + "test_backward_kernels_race_free"]
TC = [CROSS + "test_tensor_cores_causal_last_key_on_a_tile_edge",
      "tests/test_attention_tc.py", "tests/test_attention_tc_backward.py"]
TC_FWD = [CROSS + "test_tensor_cores_causal_last_key_on_a_tile_edge",
          "tests/test_attention_tc.py"]
TC_BWD = [CROSS + "test_tensor_cores_causal_last_key_on_a_tile_edge",
          "tests/test_attention_tc_backward.py"]
WGMMA_BWD = ["tests/test_attention_wgmma_backward.py"]
WGMMA_FWD = ["tests/test_attention_tc.py", "-k", "wgmma"]
WGMMA_TF32 = ["tests/test_attention_tc.py", "-k", "wgmma_tf32_matches"]
WGMMA_TF32_BWD = ["tests/test_attention_wgmma_tf32_backward.py::test_matches_oracle"]
WGMMA_TF32_ROLES = ["tests/test_attention_wgmma_tf32_backward.py::test_matches_oracle"
                    "[False-True-1x1x20x9x128-None]"]
TF32_PACK = ["tests/test_attention_wgmma_tf32_backward.py::test_packing_follows_the_menu"]
RACE_TC = [CROSS + "test_tensor_core_kernels_race_free"]
SOFTMAX = ["tests/test_softmax.py::test_method_matches_oracle_fp32",
           "tests/test_softmax.py::test_special_rows", "tests/test_softmax.py"]
REDUCTIONS = ["tests/test_reductions.py", "tests/test_softmax.py::test_method_matches_oracle_fp32"]
RACE_SOFTMAX = [CROSS + "test_softmax_kernels_race_free", "tests/test_simraces.py"]
PHILOX = ["tests/test_philox.py",
          "tests/test_attention_masks.py::test_dropout_matches_oracle_with_the_philox_mask"]
GEMM = ["tests/test_attention.py::test_matches_oracle", "-k", "naive"]
LINEAR = ["tests/test_linear_attention.py"]
HIERARCHY = ["tests/test_hierarchy.py"]
MMA = ["tests/test_mma.py"] + TC_FWD
IO = ["tests/test_io_model_derived.py", "tests/test_traffic.py", "tests/test_loop_order.py"]


@dataclasses.dataclass
class Mutant:
    id: str
    path: str            # relative to the repository root
    old: str             # exact text in the file …
    new: str             # … and what replaces it
    tests: list          # pytest arguments
    why: str
    nth: int = 1         # which occurrence of ``old`` (1-based)


def M(id, path, old, new, tests, why, nth=1):
    return Mutant(id, path, old, new, list(tests), why, nth)


BARRIER = "cuda.syncthreads()"
MUTANTS = [
    # ---- kernels_numba/attention.py: flash forward, §34 tile rules, merge, naive helpers ----
    M("fwd-kv-tiles", KN + "attention.py", "min(n_tiles, last_key // Bc + 1)",
      "min(n_tiles, last_key // Bc)", FWD_FLASH, "causal: one K/V tile too few"),
    M("fwd-first-q-tile", KN + "attention.py", "max(k0 - (n_k - n_q), 0) // Br",
      "max(k0 - (n_k - n_q) + 1, 0) // Br", FWD_FA1 + BWD[:2],
      "§34 seen from a K tile: off by one in the first query"),
    M("fwd-causal-mask", KN + "attention.py", "(CAUSAL and key > row + offset)",
      "(CAUSAL and key >= row + offset)", FWD_FLASH, "causal mask hides the diagonal key"),
    M("fwd-mask-skip", KN + "attention.py",
      "if PAD or k0 + Bc > n_k or (CAUSAL and k0 + Bc - 1 > q0 + offset):",
      "if PAD or k0 + Bc > n_k or (CAUSAL and k0 > q0 + offset):", FWD_FLASH,
      "diagonal tiles starting before the diagonal left unmasked"),
    M("fwd-nk-mask", KN + "attention.py", "if key >= n_k or (CAUSAL",
      "if key > n_k or (CAUSAL", FWD_FLASH, "key Nk (zeros past the tile edge) not masked"),
    M("fwd-pad-index", KN + "attention.py", "elif PAD and kpm[b_idx, key] == 0:",
      "elif PAD and kpm[b_idx, key - k0] == 0:", FWD_FLASH, "padding mask read per tile"),
    M("fwd-correction", KN + "attention.py", "correction = fast_exp(m[i] - m_safe)",
      "correction = fast_exp(m_safe - m[i])", FWD_FLASH, "e^{m_new − m_old}: sign swapped"),
    M("fwd-l-update", KN + "attention.py",
      "l[i] = correction * l[i] + lanes_sum(row_sum, TC)", "l[i] = l[i] + lanes_sum(row_sum, TC)",
      FWD_FLASH, "l not rescaled"),
    M("fwd-max-sum", KN + "attention.py", "new_m = max(m[i], lanes_max(row_max, TC))",
      "new_m = max(m[i], lanes_sum(row_max, TC))", FWD_FLASH, "row max by a sum (swapped)"),
    M("fwd-dropout-col", KN + "attention.py", "jq = (k0 + W * h + 4 * tc) >> 2",
      "jq = (k0 + 4 * h + 4 * tc) >> 2", FWD_FLASH,
      "dropout words of the 2nd column group (h ≥ 1) wrong"),
    M("fwd-dropout-scale", KN + "attention.py",
      "p_ij = p_ij * inv_keep if (zbits[i] >> jj) & 1 else ZERO",
      "p_ij = p_ij if (zbits[i] >> jj) & 1 else ZERO", FWD_FLASH, "kept P not scaled 1/(1−p)"),
    M("fwd-pt-store", KN + "attention.py",
      "Pt[(W * (jj // 4) + 4 * tc + (jj & 3)) * QS + r0 + i] = p_ij",
      "Pt[(4 * (jj // 4) + 4 * tc + (jj & 3)) * QS + r0 + i] = p_ij", FWD_FLASH,
      "Pᵀ column of the 2nd group (jj ≥ 4) wrong"),
    M("fwd-barrier-kj", KN + "attention.py",
      BARRIER + "                      # wait: every thread is done with Kj",
      "pass                                    # wait: every thread is done with Kj",
      RACE_FWD + FWD_FLASH, "barrier before V overwrites Kᵀ removed"),
    M("fwd-lse", KN + "attention.py", "lse[at] = NEG_INF if l[i] == ZERO else m[i] + math.log(l[i])",
      "lse[at] = NEG_INF if l[i] == ZERO else m[i] - math.log(l[i])", FWD_FLASH, "LSE sign"),
    M("merge-weight", KN + "attention.py",
      "w = fast_exp(lse_parts[p, row] - m_safe) * inv_total",
      "w = fast_exp(lse_parts[p, row] - m_safe)", MERGE, "§22 weights not normalized"),
    M("naive-dropout-w1", KN + "attention.py",
      "p[bh, i, j + 1] = p[bh, i, j + 1] * inv_keep if w1 >= threshold else ZERO",
      "p[bh, i, j + 1] = p[bh, i, j + 1] * inv_keep if w0 >= threshold else ZERO", FWD_NAIVE,
      "naive dropout: word 0 reused for key 4jq + 1"),
    M("naive-row-lse", KN + "attention.py",
      "l = l * fast_exp(m - new_m) + fast_exp(x - new_m)", "l = l + fast_exp(x - new_m)",
      FWD_NAIVE + BWD_NAIVE[:2], "row_lse: §20 correction missing"),
    # ---- kernels_numba/flash_steps.py (FA1 order, double buffering) ----
    M("steps-correction", KN + "flash_steps.py", "correction = fast_exp(m[i] - m_safe)",
      "correction = fast_exp(m[i] - new_m)", FWD_DB,
      "correction against the unsafe max (NaN for rows that saw no key yet)"),
    M("steps-keep-bits", KN + "flash_steps.py", "jq = (k0 + W * h + 4 * tc) >> 2",
      "jq = (k0 + 4 * h + 4 * tc) >> 2", FWD_FA1_DB, "dropout words of the 2nd group"),
    M("steps-p-store", KN + "flash_steps.py",
      "Pt[(W * (jj // 4) + 4 * tc + (jj & 3)) * QS + r0 + i] = p_ij",
      "Pt[(W * (jj // 4) + 4 * tc + (jj & 2)) * QS + r0 + i] = p_ij", FWD_FA1_DB,
      "Pᵀ store: wrong key inside a quad"),
    M("steps-nk-mask", KN + "flash_steps.py", "if key >= n_k or (CAUSAL and key > row + offset):",
      "if key >= n_k or (CAUSAL and key > row + offset + 1):", FWD_FA1_DB,
      "causal offset off by one"),
    M("steps-pv-product", KN + "flash_steps.py",
      "return tile_product(RM, DN, Bc, QS, D, W, KU, GUARD)",
      "return tile_product(RM, DN, Bc - 4, QS, D, W, KU, GUARD)", FWD_FA1_DB,
      "P V skips the tile's last 4 keys"),
    # ---- kernels_numba/attention_fa1.py ----
    M("fa1-alpha", KN + "attention_fa1.py", "alpha = fast_exp(m_old - mn_safe)",
      "alpha = fast_exp(mn_safe - m_old)", FWD_FA1, "FA1 merge: e^{m_new − m_old}"),
    M("fa1-beta", KN + "attention_fa1.py", "beta = fast_exp(m_t - mn_safe)",
      "beta = fast_exp(m_t - m_old)", FWD_FA1, "FA1 merge: tile weight against the old max"),
    M("fa1-barrier-p", KN + "attention_fa1.py",
      BARRIER + "                  # wait: P̃ is in shared memory",
      "pass                                # wait: P̃ is in shared memory",
      RACE_FWD + FWD_FA1, "barrier between P̃'s store and P̃ V removed"),
    # ---- kernels_numba/attention_db.py ----
    M("db-prefetch", KN + "attention_db.py", "more = j + 1 < n_tiles", "more = j + 2 < n_tiles",
      FWD_DB, "the last tile is never prefetched"),
    M("db-barrier", KN + "attention_db.py", BARRIER + "                      # the tile's one "
      "barrier", "pass                                    # the tile's one barrier",
      RACE_FWD + FWD_DB, "the double buffer's one barrier removed"),
    M("db-lse", KN + "flash_steps.py", "else m[i] + math.log(l[i])",
      "else m[i] + math.log(l[i] + l[i])", FWD_DB,
      "LSE of 2l (flash_steps.o_lse_store: flash_db's and flash_async's)"),
    # ---- kernels_numba/tiles.py ----
    M("tiles-row-bound", KN + "tiles.py", "and g + it < ITERS and row < n:",
      "and g + it < ITERS and row <= n:", FWD_FLASH, "loads row n (past the tile edge)"),
    M("tiles-scale", KN + "tiles.py", "dst[(c + u) * STRIDE + r] = buf[it, u] * scale",
      "dst[(c + u) * STRIDE + r] = buf[it, u]", FWD_FLASH, "Qᵀ not scaled"),
    M("tiles-group", KN + "tiles.py", "                e = (g + it) * T + tid\n                r, c = split(e)\n                row = row0 + r",
      "                e = g * T + tid\n                r, c = split(e)\n                row = row0 + r",
      FWD_FLASH, "GROUP > 1: every load of a group reads the first piece"),
    # ---- kernels_numba/attention_backward.py ----
    M("bwd-preprocess", KN + "attention_backward.py",
      "total += float64(do[row, c]) * float64(o[row, c])",
      "total += float64(do[row, c]) * float64(do[row, c])", BWD, "D = rowsum(dO∘dO) (d_row)"),
    M("bwd-d-row4", KN + "attention_backward.py",
      "total += float64(g3) * float64(o3)", "total += float64(g3) * float64(o2)",
      ["tests/test_attention_wgmma_tf32_backward.py::test_stats_sixteen_bytes_a_load"],
      "d_row4 (the 3xTF32 wgmma backward's D, 16 bytes a load): the fourth float's O is "
      "the third's"),
    M("bwd-ds-dropout", KN + "attention_backward.py",
      "dp[i, jj] = p * (dp[i, jj] * z[e] - dc[jj])", "dp[i, jj] = p * (dp[i, jj] - dc[jj])",
      BWD, "dS without Z (dropout)"),
    M("bwd-causal", KN + "attention_backward.py", "if key > query + offset:",
      "if key >= query + offset:", BWD, "backward causal mask hides the diagonal"),
    M("bwd-dq-scale", KN + "attention_backward.py",
      "write(q_base, row_stride, q0 + r0, n_q, d, tc, scale, dq, acc)",
      "write(q_base, row_stride, q0 + r0, n_q, d, tc, ONE, dq, acc)", BWD, "dQ not scaled"),
    M("bwd-n-rows", KN + "attention_backward.py", "n_rows = min(Br, n_q - q0)",
      "n_rows = min(Br, n_q - q0 - 1)", BWD, "dK/dV skip the last query of a Q tile"),
    M("bwd-pad", KN + "attention_backward.py", "if key >= n_k or kpm[b_idx, key] == 0:",
      "if key >= n_k or kpm[b_idx, k0] == 0:", BWD, "dK/dV: the tile's first key's mask"),
    M("bwd-barrier-ds", KN + "attention_backward.py",
      BARRIER + "                      # wait: the tile's P∘Z and dS are stored",
      "pass                                    # wait: the tile's P∘Z and dS are stored",
      RACE_BWD + BWD, "barrier after dS's store removed"),
    # ---- kernels_numba/attention_tc.py, attention_tc_backward.py, attention_tf32x3_backward.py
    M("tc-correction", KN + "attention_tc.py", "correction = ex2(ml[r] - m_safe)",
      "correction = ex2(m_safe - ml[r])", TC_FWD, "tensor-core correction sign"),
    M("tc-kv-tiles", KN + "attention_tc.py", "n_tiles = kv_tiles(CAUSAL, q0, Br, Bc, n_q, n_k)",
      "n_tiles = kv_tiles(CAUSAL, q0, Br - 1, Bc, n_q, n_k)", TC_FWD,
      "tensor-core Q tile one row short for §34"),
    M("tc-lse", KN + "attention_tc.py", "ml[r] * LN2 + math.log(l_row)",
      "ml[r] + math.log(l_row)", TC_FWD, "LSE left in base 2"),
    M("tc-barrier", KN + "attention_tc.py",
      BARRIER + "                      # wait: tile j is in stage j % 2, and every",
      "pass                                    # wait: tile j is in stage j % 2, and every",
      RACE_TC + TC_FWD, "the stage barrier of the fp16 kernel removed"),
    M("tcb-first", KN + "attention_tc_backward.py",
      "first = first_q_tile(CAUSAL, k0, Bq, n_q, n_k)",
      "first = first_q_tile(CAUSAL, k0 + 16, Bq, n_q, n_k)", TC_BWD,
      "tensor-core dK/dV: causal first Q tile too late"),
    M("tcb-lse-live", KN + "attention_tc_backward.py", "x = load1(fsm, at + 8 * nb + u)",
      "x = load1(fsm, at + 8 * nb)", TC_BWD, "LSE of the odd column wrong (ds_transposed)"),
    M("tcb-barrier", KN + "attention_tc_backward.py",
      BARRIER + "              # wait: the tiles are in shared memory",
      "pass                            # wait: the tiles are in shared memory",
      RACE_TC + TC_BWD, "tensor-core dK/dV: the load barrier removed"),
    M("tf32x3-kv-tiles", KN + "attention_tf32x3_backward.py",
      "for j in range(kv_tiles(CAUSAL, q0, Bq, Bk, n_q, n_k)):",
      "for j in range(kv_tiles(CAUSAL, q0, Bq, Bk, n_q, n_k) - 1):", TC_BWD + ["-k", "tf32"],
      "3xTF32 dQ: last K/V tile dropped"),
    M("tf32x3-unstaged", KN + "attention_tc.py",
      "B0, B1, ZERO, ZERO, ZERO, ZERO)    # small·big\n"
      "    d0, d1, d2, d3 = mma_tf32(A0, A1, A2, A3, tf32(b0 - B0), tf32(b1 - B1),\n"
      "                              d0, d1, d2, d3)                                    # big·small\n"
      "    d0, d1, d2, d3 = mma_tf32(A0, A1, A2, A3, B0, B1, d0, d1, d2, d3)            # big·big\n"
      "    return c0 + d0, c1 + d1, c2 + d2, c3 + d3",
      "B0, B1, c0, c1, c2, c3)\n"
      "    d0, d1, d2, d3 = mma_tf32(A0, A1, A2, A3, tf32(b0 - B0), tf32(b1 - B1),\n"
      "                              d0, d1, d2, d3)\n"
      "    return mma_tf32(A0, A1, A2, A3, B0, B1, d0, d1, d2, d3)",
      ["tests/test_tf32x3_accuracy.py::test_3xtf32_product_is_staged"],
      "3xTF32: a k8 step's three mmas straight into the accumulator (unstaged)"),
    # ---- kernels_numba/attention_wgmma_backward.py, attention_wgmma.py (Hopper) ----
    M("wgb-d-vec", KN + "attention_tc_backward.py",
      "total = add_word(add_word(add_word(add_word(total, o0, g0), o1, g1),",
      "total = add_word(add_word(add_word(add_word(total, o0, g0), o1, g0),",
      ["tests/test_attention_tc_backward.py::test_d_rows_sixteen_bytes_a_load"],
      "the preprocess's 16-byte form: word 1 of four with dO's word 0 (VEC)"),
    M("tc-vec-halves", FL + "tc_methods.py",
      'VEC=word is np.uint32 and rows16(w, o3, do3))', 'VEC=rows16(w, o3, do3))',
      ["tests/test_attention_tc_backward.py::test_head_dims_not_a_multiple_of_16"],
      "the D launch's 16-byte loads chosen for rows of halves (d % 8 = 4, d = 20)"),
    M("wgb-lse2", KN + "attention_tc_backward.py", "lse2[row] = lse2_of(lse[row], True)",
      "lse2[row] = lse[row]", WGMMA_BWD, "the preprocess's LSE without the log2e"),
    M("wgb-wait-dp", KN + "attention_wgmma_backward.py",
      "wgmma_wait_group(1)             # wait: dPᵀ is in dpt",
      "wgmma_wait_group(2)             # wait: dPᵀ is in dpt", WGMMA_BWD,
      "dSᵀ taken while dPᵀ may still be in flight (the loop without AHEAD)"),
    M("wgb-ahead-wait", KN + "attention_wgmma_backward.py",
      "wgmma_wait_group(0)             # ptxas does not follow",
      "wgmma_wait_group(1)             # ptxas does not follow", WGMMA_BWD,
      "AHEAD: dSᵀ taken while dPᵀ (issued over the back edge) may still be in flight"),
    M("wgb-ahead-dp", KN + "attention_wgmma_backward.py",
      "dp_ahead(dpt, v_addr, ring, i + 1)", "dp_ahead(dpt, v_addr, ring, i)", WGMMA_BWD,
      "AHEAD: the next tile's dPᵀ from this tile's stage"),
    M("wgq-ahead-next", KN + "attention_wgmma_backward.py",
      "next_products(s_acc, dp, q_addr, do_addr, ring, bars, j + 1,",
      "next_products(s_acc, dp, q_addr, do_addr, ring, bars, j,", WGMMA_BWD,
      "AHEAD, dQ kernel: the next tile's S, dP from this tile's stage"),
    M("wgq-mask-apart", KN + "attention_tc_backward.py",
      "            if edge:                    # one branch around every test",
      "            if not CAUSAL and edge:     # one branch around every test",
      WGMMA_BWD + ["-k", "matches_oracle and True-1x1x81x81"],
      "dQ kernel (ds_rows_steps' APART): dS above the causal diagonal not masked"),
    M("wgb-stage", KN + "attention_wgmma_backward.py",
      "return uint32(ring + uint32(4 * STAGE) * s)", "return uint32(ring)", WGMMA_BWD,
      "both kernels: every tile read from stage 0 (stage_products' stage_addr)"),
    M("wgb-parity", KN + "attention_wgmma.py", "return u % uint32(STAGES), (u // uint32(STAGES)) & uint32(1)",
      "return u % uint32(STAGES), uint32(0)", WGMMA_BWD,
      "ring_slot: every lap waits for parity 0"),
    M("wgf-stage", KN + "attention_wgmma.py", "k_addr = uint32(ring + uint32(8 * KVW) * s)",
      "k_addr = uint32(ring)", WGMMA_FWD, "forward: every tile's K read from stage 0"),
    # ---- kernels_numba/attention_wgmma_tf32.py: 3xTF32 on wgmma ----
    M("wgt-perm", KN + "attention_wgmma_tf32.py", "PERM = (0, 2, 4, 6, 1, 3, 5, 7)     #",
      "PERM = (0, 1, 2, 3, 4, 5, 6, 7)     #", WGMMA_TF32,
      "Vᵀ packed in key order, not in P's (k = t ↔ key 2t)"),
    M("wgt-pack-small", KN + "attention_wgmma_tf32.py", "out[at + TW] = tf32(val - big)",
      "out[at + TW] = ZERO", WGMMA_TF32, "packing: no small parts (plain tf32, not 3xTF32)"),
    M("wgt-k-small", KN + "attention_wgmma_tf32.py", "ksm = kb + uint64(KW // 4)", "ksm = kb",
      WGMMA_TF32, "S: Qb·Kb twice instead of Qb·Ks"),
    M("wgt-stage", KN + "attention_wgmma_tf32.py",
      "k_addr = uint32(ring + uint32(4 * SW) * s)", "k_addr = uint32(ring)", WGMMA_TF32,
      "every tile read from stage 0"),
    M("wgt-parts", KN + "attention_wgmma_tf32.py", "a0[i] = a0[i] + a1[i]", "a0[i] = a0[i]",
      WGMMA_TF32, "summed: S's second 32 of d dropped (d = 64)"),
    M("wgt-o-zero", KN + "attention_wgmma_tf32.py", "tb + uint64(2 * D * kc), kk > 0)",
      "tb + uint64(2 * D * kc), True)", WGMMA_TF32,
      "key_part not started from zero: O's part of the tile before added again"),
    M("wgt-empty", KN + "attention_wgmma_tf32.py",
      "mbar_try_wait_parity(bars, EMPTY + s, ph ^ uint32(1))",
      "mbar_try_wait_parity(bars, EMPTY + s, ph)", WGMMA_TF32,
      "producer: waits for the EMPTY phase of the wrong lap"),
    # ---- kernels_numba/attention_wgmma_tf32_backward.py: the float32 backward ----
    M("wtb-perm", KN + "attention_wgmma_tf32_backward.py",
      "tok = 8 * (kw // 8) + (kw % 8) // 4", "tok = 8 * (kw // 8) + (kw % 8)",
      TF32_PACK,
      "Qᵀ, dOᵀ, Kᵀ packed in token order, not in the fragments' (k = t ↔ token 2t)"),
    M("wtb-pad", KN + "attention_wgmma_tf32_backward.py",
      "return tok < n and (not PAD or not kside_job or kpm[b_idx, tok] != 0)",
      "return tok < n", TF32_PACK, "packing: padded keys' K, V rows (NaN) packed, not zeros"),
    M("wtb-pad-row", KN + "attention_wgmma_tf32_backward.py",
      "kpm[b_idx, tok] != 0)", "kpm[0, tok] != 0)", TF32_PACK,
      "packing: every batch row packed with the first row's key mask"),
    M("wtb-small", KN + "attention_wgmma_tf32_backward.py",
      "store4(out, dst + part, tf32(x0 - b0),", "store4(out, dst + part, ZERO * (x0 - b0),",
      TF32_PACK,
      "packing: no small parts (plain tf32)"),
    M("wtb-small-round", KN + "attention_wgmma_tf32_backward.py",
      "store4(out, dst + part, tf32(x0 - b0),", "store4(out, dst + part, (x0 - b0),", TF32_PACK,
      "packing: small parts not rounded to tf32"),
    M("wtb-order", KN + "attention_wgmma_tf32_backward.py",
      "row = bh * nq_pad + (last - 1 - i) * Bq     # tiles last to first",
      "row = bh * nq_pad + i * Bq     # tiles last to first", WGMMA_TF32_BWD,
      "dK/dV producer: tiles first to last while the consumers take them last to first"),
    M("wtb-stats", KN + "attention_wgmma_tf32_backward.py",
      "fl = RING + STAGE * s + FL", "fl = RING + FL", WGMMA_TF32_BWD,
      "dK/dV: LSE_i, D_i always read from stage 0"),
    M("wtb-key-zero", KN + "attention_wgmma_tf32.py",
      "tb + uint64(2 * D * kc), kk > 0)", "tb + uint64(2 * D * kc), True)", WGMMA_TF32_BWD,
      "attention_wgmma_tf32.key_part not started from zero: dV, dK, dQ's part of the tile "
      "before added again"),
    M("wtb-scale", KN + "attention_wgmma_tf32_backward.py",
      "write(dq, bh, r_lo, n_q, t, acc, scale)", "write(dq, bh, r_lo, n_q, t, acc, "
      "float32(1.0))", WGMMA_TF32_BWD, "dQ without its scale"),
    M("wtb-roles-dot", KN + "attention_wgmma_tf32_backward.py",
      "tile(smem, at + 4 * TW, qside, PQ, 6 * PQ + row * D, 2, bars, s)",
      "tile(smem, at + 4 * TW, qside, PQ, 4 * PQ + row * D, 2, bars, s)", WGMMA_TF32_ROLES,
      "d = 128: a dV block's B is Qiᵀ instead of dOiᵀ"),
    M("wtb-roles-own", KN + "attention_wgmma_tf32_backward.py",
      "bars, 2 if dv_role else 4)", "bars, 2)", WGMMA_TF32_ROLES,
      "d = 128: a dK block without its V rows (dPᵀ from whatever shared memory holds)"),
    # ---- kernels_numba/reductions.py ----
    M("red-barrier-after", KN + "reductions.py",
      BARRIER + "                               # wait: all reads of scratch are done before",
      "pass                                             # wait: all reads of scratch are done before",
      RACE_SOFTMAX + REDUCTIONS, "block_max: the barrier after the reduction removed"),
    M("red-warp-sum", KN + "reductions.py",
      "    offset = 16\n    while offset > 0:\n        # lanes whose partner",
      "    offset = 8\n    while offset > 0:\n        # lanes whose partner", REDUCTIONS,
      "warp_sum's tree starts at 8: half the warp"),
    M("red-merge", KN + "reductions.py",
      "l = fast_exp(m_a - m) * l_a + fast_exp(m_b - m) * l_b",
      "l = fast_exp(m_a - m) * l_a + fast_exp(m_b - m) * l_a", REDUCTIONS, "§19 merge: l_a twice"),
    # (``ONE if l == ZERO`` would be an equivalent mutant: an empty row's accumulator is 0, so
    # 0·1 = 0·0; the boundary below is not: a row whose only term is e^0 has l = 1 exactly)
    M("red-reciprocal", KN + "reductions.py", "return ZERO if l == ZERO else ONE / l",
      "return ZERO if l <= ONE else ONE / l", SOFTMAX + ["tests/test_attention.py::test_rows"
                                                         "_that_see_no_key"],
      "1/l zeroed at the boundary l = 1 (one key, or every other term underflows)"),
    M("red-lanes-max", KN + "reductions.py",
      "    offset = G // 2\n    while offset > 0:\n        v = max(",
      "    offset = G // 4\n    while offset > 0:\n        v = max(", REDUCTIONS,
      "lanes_max skips the widest exchange"),
    M("red-block-sum-lanes", KN + "reductions.py", "v = scratch[lane] if lane < n_warps else ZERO",
      "v = scratch[lane] if lane < n_warps - 1 else ZERO", REDUCTIONS,
      "block_sum drops the last warp's partial"),
    # ---- kernels_numba/softmax.py ----
    M("sm-smem-sum", KN + "softmax.py", "        l += cache[j]\n",
      "        l += cache[tid]\n", SOFTMAX + ["-k", "block_smem"],
      "block_smem: the sum's 2nd iteration (j ≥ T) re-adds the first element"),
    M("sm-multi-group", KN + "softmax.py", "j = t + k * G                       # coalesced",
      "j = t * K + k                       # coalesced", SOFTMAX + ["-k", "warp_multi"],
      "warp_multi: loads a strided column order, writes another"),
    M("sm-online", KN + "softmax.py",
      "l = l * correction + fast_exp(xj - new_m)  # §20",
      "l = l + fast_exp(xj - new_m)  # §20", SOFTMAX + ["-k", "online"],
      "§20 online update without the correction"),
    M("sm-three-pass", KN + "softmax.py",
      "    for j in range(tid, N, T):                      # read 2: Σ e^{x_j − m}\n"
      "        l += fast_exp(float32(x[row, j]) - m)",
      "    for j in range(tid, N, T):                      # read 2: Σ e^{x_j − m}\n"
      "        l += fast_exp(float32(x[row, j]) - m) if j > 0 else ZERO",
      SOFTMAX, "a block method's sum skips element 0"),
    # ---- kernels_numba/philox.py ----
    M("philox-m0", KN + "philox.py", "M0 = np.uint64(0xD2511F53)", "M0 = np.uint64(0xD2511F55)",
      PHILOX, "Philox multiplier"),
    M("philox-weyl", KN + "philox.py", "k1 = np.uint32((np.uint64(k1) + W1) & MASK32)",
      "k1 = np.uint32((np.uint64(k1) + W0) & MASK32)", PHILOX, "Philox key bump"),
    M("philox-word", KN + "philox.py", "return philox4x32_10(jq, i, bh, ZERO64, k0, k1)",
      "return philox4x32_10(jq, bh, i, ZERO64, k0, k1)", PHILOX,
      "counter layout (row and head swapped)"),
    # ---- kernels_numba/gemm.py, linear_attention.py, membw.py ----
    M("gemm-bound", KN + "gemm.py", "ok = m0 + r < M and k0 + kk < K\n                    "
      "As[r * KS + kk] = a[z, m0 + r, k0 + kk]",
      "ok = m0 + r < M and k0 + kk <= K\n                    As[r * KS + kk] = a[z, m0 + r, k0 + kk]",
      GEMM, "GEMM A tile reads column K"),
    M("gemm-barrier", KN + "gemm.py",
      BARRIER + "                      # wait: everyone is done with these tiles",
      "pass                                    # wait: everyone is done with these tiles",
      RACE_FWD + ["-k", "naive"], "GEMM: barrier before the next tiles removed"),
    M("linear-phi", KN + "linear_attention.py", "return x + ONE if x > ZERO else fast_exp(x)",
      "return x + ONE if x >= ONE else fast_exp(x)", LINEAR, "φ = elu + 1 breaks on (0, 1)"),
    M("linear-den", KN + "linear_attention.py",
      "den += red[(gg * ROWS + r) * C + d]", "den += red[(gg * ROWS + r) * C + d - 1]",
      LINEAR, "denominator from the last value column"),
    M("membw-copy", KN + "membw.py", "store4(dst, i, a0, a1, a2, a3)",
      "store4(dst, i, a0, a1, a3, a2)", HIERARCHY, "copy swaps two floats"),
    # ---- kernels_numba/mma.py, vector.py: their simulator twins in kernels_numba/sim/ (the GPU
    # side is inline PTX)
    M("mma-ldsm-trans", KN + "sim/mma.py",
      "out.append(tuple(_u32(int(M[2 * t, g]) | (int(M[2 * t + 1, g]) << 16))",
      "out.append(tuple(_u32(int(M[2 * t + 1, g]) | (int(M[2 * t, g]) << 16))", MMA,
      "ldmatrix.trans twin: halves swapped"),
    M("vector-cp-async-zero", KN + "sim/vector.py",
      "flat[di:di + n] = 0 if words is None else words",
      "flat[di:di + n] = flat[di:di + n] if words is None else words", RACE_TC + TC,
      "cp.async twin: out-of-range source leaves stale data instead of zeros"),
    # ---- the IO model: src/flashlesson/io_model.py, loop_order.py ----
    M("io-tiles-visited", FL + "io_model.py", "t = min(n_tiles, last_key // Bc + 1) if last_key",
      "t = min(n_tiles, (last_key + 1) // Bc + 1) if last_key", IO,
      "visited tiles: one too many on tile edges"),
    M("io-bwd-first", FL + "io_model.py",
      "first = max(k0 - offset, 0) // cfg.Br if causal else 0",
      "first = max(k0 - offset - 1, 0) // cfg.Br if causal else 0", IO,
      "backward: first Q tile one early on tile edges"),
    M("io-bwd-rows", FL + "io_model.py", "rows = max(nq - first * cfg.Br, 0)",
      "rows = max(nq - first * cfg.Br, 1)", IO, "backward: a K tile no query sees reads a row"),
    M("io-fwd-kv", FL + "io_model.py", "kv_rows = sum(min(t * cfg.Bc, nk) for",
      "kv_rows = sum(t * cfg.Bc for", IO, "forward: the last tile's rows past Nk counted"),
    M("io-fa1-first", FL + "loop_order.py",
      "first = max(j * Bc - offset, 0) // Br if causal else 0",
      "first = max(j * Bc - offset - 1, 0) // Br if causal else 0", IO,
      "FA1 order: first Q tile one early on tile edges"),
    # (``last_key // Bc + 2`` in fa1_steps' causal clamp would be equivalent: bottom-right, the
    # last query always sees the last key, so the clamp only matters for Nk = 0)
    M("io-fa1-deal", FL + "loop_order.py", "start = first + (qb - first) % q_blocks",
      "start = first + qb % q_blocks", IO, "FA1 order: Q tiles dealt to the wrong blocks"),
]


def copy_tree(dst):
    """The working tree's files (tracked + untracked, not ignored) into dst."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, check=True).stdout.split(b"\0")
    for f in files:
        if not f:
            continue
        rel = f.decode()
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src):
            continue
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dst, rel))


def find(text, old, nth):
    """Index of the nth occurrence of old in text, or -1."""
    at = -1
    for _ in range(nth):
        at = text.find(old, at + 1)
        if at < 0:
            return -1
    return at


def run_pytest(tree, args, timeout):
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:xdist", "-p",
           "no:cacheprovider", "--no-header", "-o", "console_output_style=classic"] + args
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("FLASHLESSON_SIM_RACES", None)
    t0 = time.time()
    try:
        p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.time() - t0, ""
    tail = (p.stdout + p.stderr).strip().splitlines()
    return p.returncode, time.time() - t0, tail[-1] if tail else ""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated id prefixes")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--check", action="store_true", help="only check each mutant's text")
    ap.add_argument("--baseline", action="store_true", help="run each subset unmutated first")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per mutant")
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--log", help="also write the table to this file")
    args = ap.parse_args(argv)

    mutants = MUTANTS
    if args.only:
        prefixes = [p for p in args.only.split(",") if p]
        mutants = [m for m in MUTANTS if any(m.id.startswith(p) for p in prefixes)]
        if not mutants:
            ap.error(f"--only {args.only!r}: no mutant id starts with that")
    ids = [m.id for m in MUTANTS]
    assert len(ids) == len(set(ids)), "duplicate mutant ids"
    if args.list:
        for m in mutants:
            print(f"{m.id:22s} {m.path:38s} {m.why}")
        print(f"{len(mutants)} mutants over {len({m.path for m in mutants})} files")
        return 0

    stale = []
    for m in mutants:
        with open(os.path.join(ROOT, m.path), encoding="utf-8") as f:
            if find(f.read(), m.old, m.nth) < 0:
                stale.append(m.id)
    if stale:
        print("stale mutants (text not found; update the table):", ", ".join(stale))
    if args.check:
        print(f"{len(mutants) - len(stale)}/{len(mutants)} mutants found in their files")
        return 1 if stale else 0

    # a SIGTERM unwinds like Ctrl-C, so the temporary tree is removed and pytest stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    lines = []

    def out(s=""):
        print(s, flush=True)
        lines.append(s)

    with tempfile.TemporaryDirectory(prefix="flashlesson-mutate-") as tmp:
        tree = os.path.join(tmp, "tree")
        copy_tree(tree)
        out(f"mutation testing, simulator, {datetime.datetime.now():%Y-%m-%d %H:%M} "
            f"({len(mutants)} mutants; tree copied to {tree})")
        if args.baseline:
            for sel in {tuple(m.tests) for m in mutants}:
                rc, dt, tail = run_pytest(tree, list(sel), args.timeout)
                if rc != 0:
                    out(f"BASELINE FAILS ({rc}, {tail}): {' '.join(sel)}")
                    return 1
            out("baseline: every subset passes unmutated")
        out(f"{'id':22s} {'file':38s} {'result':9s} {'s':>6s}  pytest")
        results = {}
        for m in mutants:
            if m.id in stale:
                results[m.id] = "stale"
                out(f"{m.id:22s} {m.path:38s} {'STALE':9s}")
                continue
            path = os.path.join(tree, m.path)
            with open(path, encoding="utf-8") as f:
                original = f.read()
            at = find(original, m.old, m.nth)
            with open(path, "w", encoding="utf-8") as f:
                f.write(original[:at] + m.new + original[at + len(m.old):])
            try:
                rc, dt, tail = run_pytest(tree, m.tests, args.timeout)
            finally:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(original)
            if rc == 0:
                verdict = "SURVIVED"
            elif rc == 5:
                verdict = "NO TESTS"      # the selection is wrong: counted as survived
            elif rc == 4:
                verdict = "BAD TESTS"     # pytest's usage error (a test id not found): survived
            else:
                verdict = "caught" if rc in (1, "timeout") else "caught*"
            results[m.id] = verdict
            out(f"{m.id:22s} {m.path:38s} {verdict:9s} {dt:6.1f}  {tail[:70]}")
        caught = sum(v.startswith("caught") for v in results.values())
        counted = sum(v != "stale" for v in results.values())
        score = caught / counted if counted else 0.0
        out()
        out("caught* = pytest stopped on an error (import, collection) or a timeout")
        survivors = [k for k, v in results.items() if not v.startswith("caught") and v != "stale"]
        out(f"survivors: {', '.join(survivors) if survivors else 'none'}")
        if stale:
            out(f"stale (not run): {', '.join(stale)}")
        out(f"score: {caught}/{counted} caught = {100 * score:.1f}% "
            f"(target {100 * args.target:.0f}%; {len(MUTANTS)} mutants in the table, "
            f"{len(mutants)} selected)")
    if args.log:
        with open(args.log, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return 0 if score >= args.target and not stale else 1


if __name__ == "__main__":
    sys.exit(main())
