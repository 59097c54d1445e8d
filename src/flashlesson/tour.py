"""The tour: run every section's example (``examples/s*.py``) in lesson order, then a summary.

    flashlesson tour            all sections, one progress line each, then the summary table
    flashlesson section 8       one section (or several), with the example's own tables

Each example is a plain script with ``SECTIONS = (6, 7)``, ``TOPIC = "..."`` and
``main(verbose=True) -> list[Check]``: one :class:`Check` per claim of the lesson it checked.
The tour loads the scripts by path (``runpy.run_path``), never as a package, so ``flashlesson``
does not depend on ``examples/``; the scripts are found by :func:`find_examples` (a source
checkout, or ``FLASHLESSON_EXAMPLES``). A script that crashes becomes a failed Check carrying
the exception, and the tour goes on with the next one.

Also here, for the examples: :func:`check_close` (kernel vs oracle → Check) and
:func:`example_rng` / :func:`lesson_rows` (fresh random rows, replayable by seed), and
:func:`tier_timing`, :func:`softmax_tiers`, :func:`attention_tiers` (the lesson tier first,
then the fast one, both checked, and timed against each other on a GPU).
"""

import math
import os
import re
import runpy
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
from tabulate import tabulate

from .tolerance import attention_tol, softmax_tol

ENV_EXAMPLES = "FLASHLESSON_EXAMPLES"
ENV_SEED = "FLASHLESSON_SEED"

# Kernel vs float64 oracle, when the caller gives no bound: |got − want| ≤ ATOL + RTOL·|want|
# elementwise, float32 softmax-like values of rows up to 2^15 (flashlesson.tolerance.softmax_tol
# derives these; attention outputs take theirs from tolerance.attention_tol, see
# attention_check).
RTOL, ATOL = softmax_tol(1024)

CHECK, MEASURED, NOT_PERFORMED = "check", "measured", "not performed"
KINDS = (CHECK, MEASURED, NOT_PERFORMED)


class TourError(ValueError):
    """The tour cannot start: no examples folder, or a section with no example."""


@dataclass
class Check:
    """One claim of the lesson, checked by an example.

    section: the § it belongs to ("6", or "6–7" for a claim spanning two).
    kernel: what produced the value checked (a softmax method, "numpy", "formula", …).
    max_err: largest |kernel − oracle|, or None when the check is not a numeric comparison.
    kind: "check" (passed is True or False), or — neither a pass nor a failure, shown in the
    summary and counted apart — "measured" (a timing or other measurement, printed as such:
    a shared GPU's timings are not pass/fail) or "not performed" (the note says why; e.g. no
    GPU for a SASS check). Make those with :meth:`measured` and :meth:`not_performed`.
    """
    section: str
    topic: str
    kernel: str
    max_err: Optional[float]
    passed: Optional[bool]
    note: str = ""
    kind: str = CHECK

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS}; got {self.kind!r}")
        if self.kind == CHECK and not isinstance(self.passed, (bool, np.bool_)):
            raise TypeError(f"passed: a check passes or fails (a bool); got {self.passed!r}")
        if self.kind == CHECK:
            self.passed = bool(self.passed)
        elif self.passed is not None:
            raise ValueError(f"passed: a {self.kind!r} entry neither passes nor fails "
                             f"(None); got {self.passed!r}")

    @classmethod
    def measured(cls, section, topic, kernel, note):
        """A measurement (a timing, a ratio) shown in the summary, neither pass nor fail."""
        return cls(section, topic, kernel, None, None, note, MEASURED)

    @classmethod
    def not_performed(cls, section, topic, kernel, reason):
        """A check this run could not make (the reason in the note): not a pass."""
        return cls(section, topic, kernel, None, None, reason, NOT_PERFORMED)

    @property
    def failed(self):
        """A check that failed (measurements and checks not performed never fail)."""
        return self.kind == CHECK and not self.passed

    @property
    def result(self):
        """'pass', 'FAIL', 'measured' or 'not performed'."""
        if self.kind != CHECK:
            return self.kind
        return "pass" if self.passed else "FAIL"


# ---------------------------------------------------------------------------------------------
# Helpers for the examples
# ---------------------------------------------------------------------------------------------
def example_rng():
    """(rng, seed): fresh random data each run; ``FLASHLESSON_SEED=<seed>`` replays a run."""
    seed = int(os.environ.get(ENV_SEED, np.random.SeedSequence().entropy))
    return np.random.default_rng(seed), seed


def lesson_rows(rng, rows, n, dtype=np.float32):
    """[rows, n] test rows chosen so a check means something (STYLE: outliers injected).

    N(0, 3²) values; row 0 shifted by +1000 (the §1 input that overflows a naive kernel);
    one element per row raised by 20, so one probability dominates and a wrong max shows.
    """
    x = rng.standard_normal((rows, n)) * 3.0
    x[0] += 1000.0
    x[np.arange(rows), rng.integers(0, n, rows)] += 20.0
    return x.astype(dtype)


def attention_inputs(rng, b, h, nq, nk, d):
    """Random float32 q [b, h, nq, d], k and v [b, h, nk, d] (standard normal) for the
    attention examples."""
    return tuple(rng.standard_normal((b, h, n, d)).astype(np.float32) for n in (nq, nk, nk))


def max_abs_err(got, want):
    """max |got − want| in float64; NaN if either side has a NaN where the other has not."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return math.nan
    both = ~np.isnan(want)
    return float(np.max(np.abs(got[both] - want[both]), initial=0.0))


def check_close(section, topic, kernel, got, want, note="", rtol=None, atol=None):
    """A Check of ``got`` (a kernel's output) against ``want`` (the float64 oracle).

    Passes when every element satisfies |got − want| ≤ atol + rtol·|want| (NaN only where
    the oracle has NaN); ``max_err`` is the largest absolute difference. ``atol`` may be an
    array broadcastable to ``want`` (a bound per row or per element). Without rtol/atol, the
    float32 softmax bound of :func:`flashlesson.tolerance.softmax_tol` for rows of the
    compared array's last length (a probability-sized value of float32 arithmetic).
    """
    if rtol is None or atol is None:
        n = max(int(np.shape(want)[-1]) if np.ndim(want) else 1, 1)
        rtol0, atol0 = softmax_tol(n)
        rtol = rtol0 if rtol is None else rtol
        atol = atol0 if atol is None else atol
    got64 = np.asarray(got, np.float64)
    want64 = np.asarray(want, np.float64)
    if got64.shape != want64.shape:
        return Check(section, topic, kernel, None, False,
                     f"shape {got64.shape} != oracle's {want64.shape}. {note}".strip())
    err = max_abs_err(got64, want64)
    bound = np.asarray(atol, np.float64) + np.asarray(rtol, np.float64) * np.abs(want64)
    nan_ok = np.array_equal(np.isnan(got64), np.isnan(want64))
    both = ~np.isnan(want64)
    passed = nan_ok and bool(np.all(np.abs(got64 - want64)[both] <=
                                    np.broadcast_to(bound, want64.shape)[both]))
    return Check(section, topic, kernel, err, passed, note)


def attention_check(section, topic, kernel, o, lse, q, k, v, *, causal=False, scale=None,
                    dtype=None, note="", key_padding_mask=None):
    """[Check of O, Check of LSE (None: only O)] of an attention kernel against the float64
    oracle on the same inputs, with the bounds of :func:`flashlesson.tolerance.attention_tol`
    (from d, Nk, the inputs' magnitudes and the dtype). Returns (checks, o_ref, lse_ref)."""
    from .reference import attention as ref_attention
    q64, k64, v64 = (np.asarray(x, np.float64) for x in (q, k, v))
    want, want_lse, p = ref_attention(q64, k64, v64, causal=causal, scale=scale,
                                      key_padding_mask=key_padding_mask, return_p=True)
    tol = attention_tol(q64, k64, v64, scale=scale, dtype=dtype, p=p, o=want)
    checks = [check_close(section, topic, kernel, o, want, f"{note}: O vs the oracle".lstrip(": "),
                          rtol=0.0, atol=tol.o)]
    if lse is not None:
        fin = np.isfinite(want_lse)
        lse = np.asarray(lse, np.float64)
        ok_inf = np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
        c = check_close(section, topic, kernel, lse[fin], want_lse[fin],
                        f"{note}: LSE vs the oracle".lstrip(": "), rtol=0.0,
                        atol=np.broadcast_to(tol.lse, want_lse.shape)[fin])
        c.passed = c.passed and ok_inf
        checks.append(c)
    return checks, want, want_lse


def tier_timing(section, topic, kernel, launch):
    """The "measured difference" between the two tiers: ``launch(tier)`` runs the
    kernel(s) once on device arrays for tier "lesson" or "fast". On a GPU: CUDA-event medians
    (``flashlesson.bench.time_gpu``) of both, as a "measured" Check (lesson ms, fast ms, the
    ratio); in the simulator a "not performed" one (timing is GPU-only)."""
    from . import device
    if device.SIMULATOR:
        return Check.not_performed(section, topic, kernel, "lesson vs fast tier: timing is "
                                   "GPU-only (the simulator's times measure Python)")
    from .bench import time_gpu
    ms = {tier: time_gpu(lambda: launch(tier)) for tier in ("lesson", "fast")}
    return Check.measured(section, topic, kernel,
                          f"lesson tier {ms['lesson']:.4g} ms, fast tier {ms['fast']:.4g} ms: "
                          f"fast is {ms['lesson'] / ms['fast']:.2f}× faster (CUDA-event medians)")


def softmax_tiers(section, topic, method, x, verbose=True):
    """An example's two tiers for one softmax method on rows ``x``: the lesson kernel first
    (kernels_numba/lesson/softmax.py), then the fast one, each checked against the float64
    oracle, then the measured difference (:func:`tier_timing`). Returns the Checks."""
    from numba import cuda

    from .reference import softmax_stable

    from .softmax_methods import softmax
    want = softmax_stable(np.asarray(x, np.float64))
    checks = []
    for tier in ("lesson", "fast"):
        y = softmax(x, method=method, tier=tier)
        checks.append(check_close(section, topic, f"{method} ({tier})", y, want,
                                  f"{tier} tier, rows {list(np.shape(x))} vs softmax_stable"))
    x_dev = cuda.to_device(np.ascontiguousarray(x))
    y_dev = cuda.device_array_like(x_dev)
    checks.append(tier_timing(section, topic, method, lambda tier: softmax(
        x_dev, method=method, out=y_dev, tier=tier)))
    if verbose:
        for c in checks:
            print(f"  {c.kernel:>22}: {c.result}"
                  + (f", max |kernel − oracle| = {c.max_err:.2e}" if c.max_err is not None
                     else "") + (f" — {c.note}" if c.kind != CHECK else ""))
    return checks


def attention_tiers(section, topic, q, k, v, verbose=True, **kw):
    """An example's two tiers of flash attention on q, k, v (``kw``: causal, key_padding_mask,
    scale, method: "flash" by default, or another with a lesson kernel, e.g. "flash_fa1"): the
    lesson kernel first (kernels_numba/lesson/), then the fast one, each checked against the
    float64 oracle (:func:`attention_check`), then the measured difference
    (:func:`tier_timing`). Returns the Checks."""
    from numba import cuda

    from .attention_methods import attention
    method = kw.get("method", "flash")
    checks = []
    for tier in ("lesson", "fast"):
        o, lse = attention(q, k, v, return_lse=True, tier=tier, **kw)
        cs, _, _ = attention_check(section, topic, f"{method} ({tier})", o, lse, q, k, v,
                                   causal=kw.get("causal", False), scale=kw.get("scale"),
                                   key_padding_mask=kw.get("key_padding_mask"),
                                   note=f"{tier} tier")
        checks += cs
    dev = [cuda.to_device(a) for a in (q, k, v)]
    checks.append(tier_timing(section, topic, method,
                              lambda tier: attention(*dev, tier=tier, **kw)))
    if verbose:
        for c in checks:
            print(f"  {c.kernel:>15}: {c.result}"
                  + (f", max err {c.max_err:.2e}" if c.max_err is not None else "")
                  + f" — {c.note}")
    return checks


_MARK = "--- flashlesson checks (json) ---"


def in_simulator(path, function, *args):
    """``function(*args)`` of the example file ``path``, run here if this process uses the
    simulator, else in a new Python process on Numba's CUDA simulator
    (``FLASHLESSON_DEVICE=sim``, the same ``sys.path`` and ``FLASHLESSON_SEED``): for the parts
    of an example that need the simulator on a GPU run (the traffic counter). Returns
    (its Checks, "this process" or "a simulator subprocess"); what it printed is printed here.
    The function's arguments must be JSON values; it must return a list of Checks.
    """
    import json
    import subprocess
    from . import device
    if device.SIMULATOR:
        return runpy.run_path(str(path))[function](*args), "this process"
    code = ("import json, runpy, sys\n"
            "import flashlesson\n"
            "checks = runpy.run_path(sys.argv[1])[sys.argv[2]](*json.loads(sys.argv[3]))\n"
            f"print({_MARK!r})\n"
            "print(json.dumps([vars(c) for c in checks]))\n")
    env = dict(os.environ, FLASHLESSON_DEVICE="sim",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    env.pop("NUMBA_ENABLE_CUDASIM", None)          # flashlesson sets it from FLASHLESSON_DEVICE
    proc = subprocess.run([sys.executable, "-c", code, str(path), function, json.dumps(args)],
                          env=env, capture_output=True, text=True, timeout=900)
    out, mark, payload = proc.stdout.rpartition(_MARK + "\n")
    if proc.returncode != 0 or not mark:
        raise RuntimeError(f"{Path(path).name}: {function}() in a simulator subprocess failed "
                           f"(exit code {proc.returncode}):\n{proc.stderr[-2000:]}")
    print(out, end="", flush=True)
    return [Check(**d) for d in json.loads(payload)], "a simulator subprocess"


# ---------------------------------------------------------------------------------------------
# Finding and loading the examples
# ---------------------------------------------------------------------------------------------
_NAME = re.compile(r"^s(\d+)((?:_s\d+)*)_\w+\.py$")


def find_examples():
    """The folder holding ``s*.py`` examples.

    ``$FLASHLESSON_EXAMPLES`` if set (it must exist), else the scripts that come with the
    package (``flashlesson.examples``: the installed copy, or ``examples/`` of a checkout).
    """
    env = os.environ.get(ENV_EXAMPLES)
    if env:
        path = Path(env)
        if not path.is_dir():
            raise TourError(f"{ENV_EXAMPLES}={env!r} is not a folder; point it at the "
                            "examples/ folder of a flashlesson source checkout")
        return path
    import importlib.util
    spec = importlib.util.find_spec("flashlesson.examples")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if any(Path(location).glob("s[0-9]*.py")):
            return Path(location)
    raise TourError("no examples found: flashlesson.examples holds no s*.py script (an incomplete "
                    f"install?); set {ENV_EXAMPLES}=/path/to/examples")


def sections_of(label):
    """The § numbers in a label: "6" → {6}, "6–7" or "6-7" → {6, 7}, "9, 11" → {9, 11}."""
    nums = [int(s) for s in re.findall(r"\d+", str(label))]
    if len(nums) == 2 and re.search(r"\d\s*[–-]\s*\d", str(label)):
        return set(range(nums[0], nums[1] + 1))
    return set(nums)


def _label(sections):
    s = sorted(sections)
    return str(s[0]) if len(s) == 1 else f"{s[0]}–{s[-1]}" if s == list(
        range(s[0], s[-1] + 1)) else ", ".join(map(str, s))


def list_examples(folder=None):
    """[(sections tuple, path)] of the examples, in § order (sections read from the file name)."""
    folder = Path(folder) if folder is not None else find_examples()
    found = []
    for path in sorted(folder.glob("s*.py")):
        m = _NAME.match(path.name)
        if not m:
            continue
        secs = (int(m.group(1)),) + tuple(int(s) for s in re.findall(r"\d+", m.group(2)))
        found.append((secs, path))
    found.sort(key=lambda item: (item[0], item[1].name))
    return found


LESSON_SECTIONS = range(1, 51)          # the lesson's §1 … §50


def declared_sections(folder=None):
    """{§: [file names]}: the sections each example declares in ``SECTIONS = (…)``, read from
    the source (``ast``: nothing is run), for every ``s*.py`` of the examples folder. A file
    whose SECTIONS is missing or not a literal tuple of ints declares nothing."""
    import ast
    folder = Path(folder) if folder is not None else find_examples()
    found = {}
    for path in sorted(folder.glob("s*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "SECTIONS" for t in node.targets):
                try:
                    secs = ast.literal_eval(node.value)
                except ValueError:
                    continue
                for s in secs if isinstance(secs, tuple) else ():
                    if isinstance(s, int):
                        found.setdefault(s, []).append(path.name)
    return found


def missing_sections(folder=None):
    """The § of the lesson (1 … 50) that no example declares, in order."""
    declared = declared_sections(folder)
    return [s for s in LESSON_SECTIONS if s not in declared]


def _select(examples, sections):
    if sections is None:
        return examples
    available = sorted({s for secs, _ in examples for s in secs})
    wanted = []
    for s in sections:
        if not isinstance(s, (int, np.integer)) or isinstance(s, bool):
            raise TourError(f"sections: expected § numbers (ints); got {s!r}")
        if s not in available:
            raise TourError(f"section {s}: no example for it; available sections: "
                            f"{', '.join(map(str, available))}")
        wanted.append(int(s))
    return [(secs, path) for secs, path in examples if set(secs) & set(wanted)]


def _load(secs, path):
    """The example's globals (``runpy.run_path``: by path, never imported as a package)."""
    ns = runpy.run_path(str(path))
    declared = tuple(ns.get("SECTIONS", ()))
    if declared != tuple(secs):
        raise TourError(f"{path.name}: SECTIONS = {declared} does not match the file "
                        f"name's {tuple(secs)}")
    if not callable(ns.get("main")):
        raise TourError(f"{path.name}: no main(verbose) function")
    return ns


def _run(path, ns, verbose):
    checks = ns["main"](verbose=verbose)
    if not checks:
        raise TourError(f"{path.name}: main() returned no checks")
    for c in checks:
        if not all(hasattr(c, f) for f in ("section", "topic", "kernel", "max_err", "passed")):
            raise TourError(f"{path.name}: main() returned {c!r}, not a Check")
    return list(checks)


def _crashed(secs, topic, path, exc):
    """A crashed example: its traceback on stderr, and a failed Check carrying the exception."""
    print(f"  {path.name} crashed:", file=sys.stderr)
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    return [Check(_label(secs), topic, "?", None, False,
                  f"crashed: {type(exc).__name__}: {exc}")]


_LAST_SEED = [None]          # the seed of the last collect(), for run_tour's closing line


def collect(sections=None, verbose=False, folder=None):
    """Run the examples of ``sections`` (all if None) in § order; return every Check.

    Each example runs on fresh random data; one seed serves the whole tour (``$FLASHLESSON_SEED``
    if set, else a new one, printed first), so that ``FLASHLESSON_SEED=<seed>`` replays it.
    A crashed example becomes a failed Check and the tour goes on. Raises
    :class:`TourError` for an unknown section or a missing examples folder.
    """
    examples = _select(list_examples(folder), sections)
    seed = os.environ.get(ENV_SEED) or str(np.random.SeedSequence().entropy)
    _LAST_SEED[0] = seed
    print(f"random inputs: {ENV_SEED}={seed} (set it to replay this run)", flush=True)
    saved = os.environ.get(ENV_SEED)
    os.environ[ENV_SEED] = seed
    checks = []
    try:
        with warnings.catch_warnings():
            # the examples launch tiny grids on purpose; Numba's low-occupancy warning is noise
            warnings.filterwarnings("ignore", message=r".*Grid size \d+ will likely result in "
                                    "GPU under-utilization")
            _run_all(examples, verbose, checks)
    finally:
        if saved is None:
            del os.environ[ENV_SEED]
        else:
            os.environ[ENV_SEED] = saved
    return checks


def _run_all(examples, verbose, checks):
    """Run each example in turn, printing progress; append its Checks to ``checks``."""
    for i, (secs, path) in enumerate(examples, 1):
        t0 = time.perf_counter()
        topic, ns, failure = path.stem, None, None
        try:
            ns = _load(secs, path)
            topic = ns.get("TOPIC", topic)
        except Exception as exc:  # noqa: BLE001 - reported as a failed check below
            failure = exc
        print(f"[{i}/{len(examples)}] §{_label(secs)} {topic} ...", flush=True)
        if failure is None:
            try:
                got = _run(path, ns, verbose)
            except Exception as exc:  # noqa: BLE001 - reported as a failed check
                failure = exc
        if failure is not None:
            got = _crashed(secs, topic, path, failure)
        print(f"      {_counts(got)} ({time.perf_counter() - t0:.1f} s)", flush=True)
        checks.extend(got)


def _counts(checks):
    """'5/6 checks passed' (+ ', 2 measured, 1 not performed' when there are some)."""
    real = [c for c in checks if c.kind == CHECK]
    text = f"{sum(c.passed for c in real)}/{len(real)} checks passed"
    for kind in (MEASURED, NOT_PERFORMED):
        n = sum(c.kind == kind for c in checks)
        if n:
            text += f", {n} {kind}"
    return text


def _fmt_err(e):
    if e is None:
        return "—"
    return "NaN" if isinstance(e, float) and math.isnan(e) else f"{e:.2e}"


def summary_table(checks, fmt="simple"):
    rows = [[f"§{c.section}", c.topic, c.kernel, _fmt_err(c.max_err),
             c.result, c.note] for c in checks]
    return tabulate(rows, headers=["§", "topic", "kernel", "max err vs oracle", "result",
                                   "note"], tablefmt=fmt, disable_numparse=True)


def run_tour(sections=None, verbose=False, *, checks=None):
    """Run the tour and print the summary table. Returns 0 if every check passed, 1 if one
    failed, 2 if the tour could not start (the reason is printed on stderr).

    checks: optional list; every Check is appended to it (tests read the results from it).
    """
    from . import device
    t0 = time.perf_counter()
    try:
        got = collect(sections, verbose)
    except TourError as exc:
        print(f"flashlesson: {exc}", file=sys.stderr)
        return 2
    if checks is not None:
        checks.extend(got)
    failed = [c for c in got if c.failed]
    real = [c for c in got if c.kind == CHECK]
    print()
    print(summary_table(got))
    print()
    where = "Numba's CUDA simulator (small sizes)" if device.SIMULATOR else "the GPU"
    extra = "".join(f", {sum(c.kind == kind for c in got)} {kind}" for kind in
                    (MEASURED, NOT_PERFORMED) if any(c.kind == kind for c in got))
    print(f"{len(real)} checks, {len(failed)} failed{extra}, on {where}, "
          f"in {time.perf_counter() - t0:.1f} s; replay with "
          f"{ENV_SEED}={os.environ.get(ENV_SEED) or _LAST_SEED[0]}")
    return 1 if failed else 0


__all__ = ["CHECK", "Check", "KINDS", "LESSON_SECTIONS", "MEASURED", "NOT_PERFORMED",
           "attention_check", "in_simulator", "TourError", "check_close", "collect",
           "declared_sections", "example_rng", "find_examples", "lesson_rows", "list_examples",
           "max_abs_err", "missing_sections", "run_tour", "sections_of", "summary_table"]
