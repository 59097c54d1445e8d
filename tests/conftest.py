"""Shared test setup: the device is chosen by ``import flashlesson`` (GPU if usable, else the
CUDA simulator); the same test files run in both, with sizes picked by ``SIM``.

Random inputs are fresh each run; the seed is printed and ``FLASHLESSON_SEED=<seed>`` replays it.
"""

import os
import sys

import numpy as np
import pytest

import flashlesson  # noqa: F401 - must come before numba.cuda: it picks the device
import flashlesson.arrays
from flashlesson import reference
from flashlesson.tolerance import (AttentionTol, attention_tol, backward_errors, backward_tol,
                                  rounded_o_tol)
from flashlesson.tc_methods import BFloat16

# Every result array the library allocates starts full of NaN (or 0xAB bytes): an element a
# kernel does not write fails the comparison with the oracle.
flashlesson.arrays.POISON = True

SIM = flashlesson.SIMULATOR
GPU = not SIM
# flashlesson.traffic's counter runs kernels in the simulator; on a GPU it refuses
# (test_traffic.py::test_counter_refuses_the_gpu)
needs_sim = pytest.mark.skipif(not SIM, reason="the traffic counter runs kernels in the "
                               "simulator")


def _simulator_scheduling():
    """Numba's simulator runs each CUDA thread as a Python thread, and its block manager waits
    for them in a loop that never sleeps: a simulated thread that is ready often waits for the
    GIL while the manager holds it. Two settings shorten those waits; neither changes what a
    kernel computes or what a test checks:

    - a GIL switch interval of 0.5 ms (Python's default is 5 ms);
    - each pytest-xdist worker on a CPU of its own (``-n auto``: one worker a CPU), so that a
      worker's threads hand the GIL over on one core instead of across two.

    Measured on 2 cores (``taskset -c 0,1 pytest -q -n 2 -p no:cacheprovider``, 2026-12-01):
    the suite in 275.5 s with both settings, 627.8 s without (2237 passed, 24 skipped, both).
    ``FLASHLESSON_SIM_PIN=0`` leaves the CPU affinity alone."""
    sys.setswitchinterval(5e-4)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")            # "gw0", "gw1", …
    if (worker.startswith("gw") and hasattr(os, "sched_setaffinity")
            and os.environ.get("FLASHLESSON_SIM_PIN", "1") != "0"):
        cpus = sorted(os.sched_getaffinity(0))
        try:
            os.sched_setaffinity(0, {cpus[int(worker[2:]) % len(cpus)]})
        except (OSError, ValueError):         # not allowed here: scheduling only, go on
            pass


if SIM:
    _simulator_scheduling()


def by_device(sim, gpu):
    """The simulator's value or the GPU's: tiny shapes on the CPU, bigger ones on the GPU."""
    return sim if SIM else gpu


@pytest.fixture
def rng():
    seed = int(os.environ.get("FLASHLESSON_SEED", np.random.SeedSequence().entropy))
    print(f"FLASHLESSON_SEED={seed}")
    return np.random.default_rng(seed)


def check_attention(o, lse, o_ref, lse_ref, q, k, v, *, scale=None, dropout_p=0.0,
                    dtype=None, packed=False):
    """O and LSE against the float64 oracle, within the bound of flashlesson.tolerance's error
    model for these inputs (q, k, v [..., N, d] as the oracle got them; dtype: the kernel's
    arithmetic, float32 by default): no NaN (an unwritten, poisoned element), |O − O_ref| ≤
    the row's bound, −inf in the same places, finite LSEs within theirs. Returns the largest
    error / bound of O. packed: varlen's [total, H, d] layout (LSE [total, H]); the bound
    then takes every packed key as a key of every sequence (an upper bound)."""
    tol = packed_tol(q, k, v, scale=scale, dropout_p=dropout_p) if packed else \
        attention_tol(q, k, v, scale=scale, dtype=dtype, dropout_p=dropout_p)
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    diff = np.abs(np.asarray(o, np.float64) - o_ref)
    worst = float(np.max(diff / np.broadcast_to(tol.o, diff.shape), initial=0.0))
    assert worst <= 1, (f"O: error {np.max(diff):.2e}, {worst:.2f}× the model's bound "
                        f"({float(np.max(tol.o)):.1e})")
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse_ref))
    fin = np.isfinite(lse_ref)
    lse_err = np.abs(np.asarray(lse, np.float64)[fin] - lse_ref[fin])
    bound = np.broadcast_to(tol.lse, np.shape(lse_ref))[fin]
    assert np.all(lse_err <= bound), (f"LSE: error {np.max(lse_err):.2e}, beyond the "
                                      f"model's bound {np.max(bound):.1e}")
    return worst


def packed_tol(q, k, v, **kw):
    """flashlesson.tolerance.attention_tol for varlen's packed [total, H, d] inputs, as an
    AttentionTol in that layout (o [total, H, 1], lse [total, H]): every packed key counted
    as a key of every sequence (more keys, the largest ‖k‖: an upper bound)."""
    t = attention_tol(*(np.swapaxes(np.asarray(x), 0, 1) for x in (q, k, v)), **kw)
    return AttentionTol(np.swapaxes(t.o, 0, 1), np.swapaxes(t.lse, 0, 1))


def grad_floors(refs, q, k, v=None, do=None, scale=None):
    """What each of (dq, dk, dv) is measured against when its own largest |value| is smaller:
    a gradient that vanishes analytically (one visible key: dS = P∘(dP − D) = 0) is not
    measured against ~0. Without v and dO: 1e-3 of the problem's largest gradient. With them:
    also the size of the terms that cancel in dS, since dP and D are two sums rounded apart
    (D in float64, dP in float32) and their difference is rounding, ~u of
    them: |dP_ij|, |D_i| ≤ Σ_c |dO_ic| · max|V| =: T and Σ_j P_ij = 1, so dq_i's cancelling
    terms sum to ≤ 2 · scale · T · max|K|, and dk_j's (Σ_i P_ij ≤ Nq) to Nq times that with
    max|Q|. A gradient that is wrong, not rounded, is of that size: the bound still bites."""
    floor = 1e-3 * max(np.max(np.abs(r), initial=0.0) for r in refs)
    floors = [floor, floor, floor]
    if v is not None and do is not None:
        q, k, v, do = (np.asarray(x, np.float64) for x in (q, k, v, do))
        if q.size and k.size:
            scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
            t = np.max(np.sum(np.abs(do), axis=-1), initial=0.0) * np.max(np.abs(v))
            floors[0] = max(floor, 2 * scale * t * np.max(np.abs(k)))
            floors[1] = max(floor, 2 * scale * t * np.max(np.abs(q)) * q.shape[-2])
    return floors


def check_grads(grads, refs, q, k, *, v=None, do=None, scale=None, dtype="float32", rel=None):
    """(dq, dk, dv) against the oracle's, each relative to its largest |value| (or, for a
    gradient that vanishes analytically, to ``grad_floors``; pass v and dO where one can),
    within flashlesson.tolerance.backward_tol for these q, k (as the oracle got them) and
    dtype — or ``rel`` where a test says why. Returns the three relative errors."""
    if rel is None:
        rel = backward_tol(q, k, scale=scale, dtype=dtype)
    floors = grad_floors(refs, q, k, v, do, scale)
    for name, g, ref in zip(("dq", "dk", "dv"), grads, refs):
        assert g.shape == ref.shape and g.dtype == np.float32
        assert not np.isnan(g).any(), f"{name}: NaN (unwritten or 0·inf)"
    errs = backward_errors(grads, refs, rel, floors=floors)
    for name, err in zip(("dq", "dk", "dv"), errs):
        assert err <= rel, f"{name}: relative error {err:.2e} > {rel:.1e} (the model's bound)"
    print("relative errors dq, dk, dv:", " ".join(f"{e:.1e}" for e in errs), f"bound {rel:.1e}")
    return errs


# --- the fp16/bf16 backwards (tests/test_attention_tc_backward.py, test_attention_wgmma_backward.py)
def tc_inputs(rng, B, H, nq, nk, d, fmt):
    """(q, k, v, do) as fp16 arrays or BFloat16s from standard normals, and the same values
    as float64 (the oracle's inputs)."""
    x = [rng.standard_normal((B, H, n, d)).astype(np.float32) for n in (nq, nk, nk, nq)]
    if fmt == "f16":
        q, k, v, do = (a.astype(np.float16) for a in x)
        return (q, k, v, do), [a.astype(np.float64) for a in (q, k, v, do)]
    b = [BFloat16.from_float32(a) for a in x]
    return b, [a.to_float32().astype(np.float64) for a in b]


def as_f64(g):
    return (g.to_float32() if isinstance(g, BFloat16) else np.asarray(g)).astype(np.float64)


def torch_grad_errors(q64, k64, v64, do64, causal, refs, fmt):
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    nq, nk = q64.shape[2], k64.shape[2]
    mask = None
    if causal and nq != nk:                    # bottom-right, as flashlesson's causal (torch's
        i = torch.arange(nq, device="cuda")[:, None]        # is_causal aligns top-left)
        mask = torch.arange(nk, device="cuda")[None, :] <= i + nk - nq
        if not mask.any(dim=1).all():
            return None                        # torch gives NaN rows where we give zeros
    dt = torch.float16 if fmt == "f16" else torch.bfloat16
    t = [torch.tensor(a, device="cuda").to(dt).requires_grad_(True) for a in (q64, k64, v64)]
    o = torch.nn.functional.scaled_dot_product_attention(
        *t, attn_mask=mask, is_causal=causal and mask is None)
    grads = torch.autograd.grad(o, t, torch.tensor(do64, device="cuda").to(dt))
    errs = [float(np.max(np.abs(g.double().cpu().numpy() - r))) for g, r in zip(grads, refs)]
    # flash-attn's slack for the final rounding (its hopper/test_flash_attn.py): twice the
    # rounding error of r + 0.3 − 0.3 done in the 16-bit dtype, about one 16-bit ulp of
    # max|r| + 0.3. Both results are rounded to fp16/bf16 once at the end, and the maxima of
    # such roundings can land an ulp or two apart between two correct kernels (H200,
    # 2026-12-01: dv 5.6e-4 vs torch's 2.4e-4, fp16 d = 111; dq 4.1e-3 vs 1.9e-3, bf16 d = 59;
    # both 113×203 causal, one case of 64 each, the bare 2× rule failing)
    slack = []
    for r in refs:
        r16 = torch.tensor(r, device="cuda").to(dt)
        slack.append(2 * float(((r16 + 0.3) - 0.3 - r16).abs().max()))
    return errs, slack


def check_tc_grads(grads, refs, fmt, q64, k64, torch_errs=None, *, v64, do64, causal=False,
                   key_padding_mask=None):
    """The tensor-core backward's bar (tests/test_attention_tc_backward.py's menu): relative to
    each gradient's largest value, flashlesson.tolerance.backward_tol of fmt, plus, element by
    element, rounded_o_tol (D read from an O rounded to 16 bits: from the oracle's P and O for
    these inputs, causal and key_padding_mask); no NaN; on the GPU also 2× torch SDPA's own
    error plus its rounding slack (torch_errs)."""
    bound = backward_tol(q64, k64, dtype=fmt)
    floors = grad_floors(refs, q64, k64)      # a gradient that vanishes: not measured against ~0
    clean = [np.where(np.isfinite(x), x, 0.0) for x in (k64, v64)]    # NaN in padded keys
    ref = reference.attention_backward_intermediates(do64, q64, *clean, causal=causal,
                                                     key_padding_mask=key_padding_mask)
    extra = rounded_o_tol(ref["P"], ref["O"], q64, clean[0], do64, dtype=fmt)
    grads = [as_f64(g) for g in grads]
    for name, g, r in zip(("dq", "dk", "dv"), grads, refs):
        assert g.shape == r.shape and not np.isnan(g).any(), f"{name}: NaN (unwritten?)"
    rels = backward_errors(grads, refs, bound, extra, floors)
    for i, (name, g, r, rel) in enumerate(zip(("dq", "dk", "dv"), grads, refs, rels)):
        err = np.max(np.abs(g - r))
        assert rel <= bound, f"{name}: relative error {rel:.2e} > the model's {bound:.1e}"
        if torch_errs is not None:
            # flash-attn's rule: 2× torch's own error in the same dtype, plus its rounding slack
            errs, slack = torch_errs
            assert err <= 2 * errs[i] + slack[i], \
                f"{name}: error {err:.2e} > 2 × torch's {errs[i]:.2e} + {slack[i]:.1e}"


def pytest_report_header(config):
    """The device in pytest's header; said there, no kernel launch of the run says it again."""
    flashlesson.device.announced_elsewhere()
    return f"flashlesson device: {flashlesson.MODE} ({flashlesson.device.REASON})"


# The tour's parts (tests/test_tour.py: each runs every CHUNKS-th example), spread evenly
# through the run. pytest-xdist's load scheduling hands each worker runs of consecutive tests;
# the parts, consecutive, all went to one worker, which ran them one after another (~4–5 min in
# the simulator on 2 cores) while the other worker, done with everything else, waited.
TOUR_PART = "test_tour_passes_and_covers_every_section_with_an_example"


def pytest_collection_modifyitems(session, config, items):
    parts = [item for item in items if getattr(item, "originalname", None) == TOUR_PART]
    rest = [item for item in items if getattr(item, "originalname", None) != TOUR_PART]
    if len(parts) < 2 or len(rest) < len(parts):
        return
    at = {round(k * len(rest) / len(parts)): part for k, part in enumerate(parts)}
    spread = []
    for i, item in enumerate(rest):
        if i in at:                            # part k before the (k/CHUNKS)-th of the others
            spread.append(at[i])
        spread.append(item)
    items[:] = spread
