"""``flashlesson.softmax_methods``: validation, the registry of softmax methods, launchers, dispatch.

The kernels are in ``kernels_numba/softmax.py`` (the fast tier) and
``kernels_numba/lesson/softmax.py`` (the lesson tier, ``tier="lesson"``); this module only
decides how to launch them.
``METHODS`` is the single list of methods: the dispatcher, the CLI's choices, the tests'
parameters and docs/methods.md's section map are all read from it.
"""

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from .kernels_numba import softmax as K
from .kernels_numba.lesson import softmax as L

from . import calls, checks, device
from .arrays import Operand, check_out, empty, result, using
from .launch import launch as _launch

DTYPES = (np.float32, np.float16)
WARP = 32
MAX_THREADS = 1024
# Static shared memory a block may use without opting in; the §9–11 shared-memory cache is
# dynamic shared memory beside the 32-float reduction scratch.
SMEM_BYTES = 48 * 1024
SMEM_MAX_N = (SMEM_BYTES - WARP * 4) // 4
MAX_K = 32                 # values per thread kept in registers (§8, §9) before spilling


def _pow2_at_least(n):
    p = 1
    while p < n:
        p *= 2
    return p


@dataclass(frozen=True)
class Method:
    """One softmax method of the lesson."""
    name: str
    sections: str            # lesson §, e.g. "6–7"
    idea: str
    kernel: str              # kernel name(s) in kernels_numba/softmax.py
    reads: int               # global-memory traffic per row, from the kernel's menu: reads of
    writes: int              # the row and writes of the output, in units of N elements
    max_n: Optional[int]     # largest row length it takes (None: any)
    launch: Callable         # launch(x2, y2, threads) on [rows, N] device arrays
    auto: bool = True        # may ``auto`` choose it?
    extra: str = ""          # traffic beyond the row, said in words (e.g. "+ m, l per row")
    lesson_kernel: str = ""  # its lesson-tier kernel(s) in kernels_numba/lesson/softmax.py
    lesson_launch: Optional[Callable] = None    # launch(x2, y2, threads), tier="lesson"

    @property
    def traffic(self):
        """E.g. "3 reads + 1 write (+ m, l per row)"."""
        text = (f"{self.reads} read{'s' * (self.reads != 1)} + "
                f"{self.writes} write{'s' * (self.writes != 1)}")
        return f"{text} ({self.extra})" if self.extra else text

    def check_n(self, n):
        if self.max_n is not None and n > self.max_n:
            raise ValueError(f"softmax method {self.name!r} takes rows of at most N = "
                             f"{self.max_n} elements (§{self.sections}); got N = {n}")


# ---------------------------------------------------------------------------------------------
# Launch geometry. On the GPU: sizes measured on the H200 (docs/results.md, "Softmax"). In the
# simulator every CUDA thread is a Python thread, so blocks are kept small there (but still
# two warps, so that the two-level reductions of §10 are exercised).
# ---------------------------------------------------------------------------------------------
def threads_for_block_methods(n, threads):
    if threads is not None:
        return threads
    if device.SIMULATOR:
        return 2 * WARP
    return min(MAX_THREADS, max(128, _pow2_at_least(-(-n // 8))))


def _warps_per_block(threads):
    return (threads or (2 * WARP if device.SIMULATOR else 128)) // WARP


def _launch_rowwise(kernel, shared=False, threads_for=None):
    """A launcher for the block-per-row kernels: grid = rows; ``threads_for(n, threads)`` picks
    the block size (the fast tier's ``threads_for_block_methods`` by default)."""
    def launch(x2, y2, threads):
        rows, n = x2.shape
        t = (threads_for or threads_for_block_methods)(n, threads)
        _launch(kernel, rows, t, (x2, y2), n * 4 if shared else 0)
    return launch


def _launch_three_pass(kernels=K, threads_for=None):
    """§3's three launches from ``kernels`` (the fast tier's module, or the lesson tier's)."""
    def launch(x2, y2, threads):
        rows, n = x2.shape
        t = (threads_for or threads_for_block_methods)(n, threads)
        m = empty(rows, np.float32)                 # §3: the row maxima go to global memory
        l = empty(rows, np.float32)                 # §3: and so do the sums
        _launch(kernels.row_max, rows, t, (x2, m))
        _launch(kernels.row_sum_exp, rows, t, (x2, m, l))
        _launch(kernels.normalize, rows, t, (x2, m, l, y2))
    return launch


def _launch_warp(x2, y2, threads):
    rows = x2.shape[0]
    wpb = _warps_per_block(threads)
    _launch(K.softmax_warp, -(-rows // wpb), wpb * WARP, (x2, y2))


def warp_multi_shape(n, dtype=np.float32):
    """(K, R, G) for the §8 kernel, from the H200 sweep (scripts/tune_softmax.py, docs/results.md).

    G lanes per row: pow2(N)/8 clamped to [8, 32], so a lane holds K = pow2(N)/G values (8 for
    N ≤ 256, up to 32 at N = 1024); the lesson's layout (G = 32) from N = 256 on. R = 2 rounds
    of rows for fp16 rows of K ≤ 4 (8 bytes per lane and row are too few in flight), else 1.
    In the simulator: the same K and G, R = 1.
    """
    p = _pow2_at_least(n)
    g = min(WARP, max(8, p // 8))
    k = max(1, p // g)
    r = 2 if (np.dtype(dtype).itemsize == 2 and k <= 4 and not device.SIMULATOR) else 1
    return k, r, g


def _launch_warp_multi(x2, y2, threads):
    rows, n = x2.shape
    k, r, g = warp_multi_shape(n, x2.dtype)
    wpb = _warps_per_block(threads)
    rows_per_block = wpb * (WARP // g) * r
    _launch(K.warp_multi_kernel(k, r, g), -(-rows // rows_per_block), wpb * WARP, (x2, y2))


def block_shape(n, dtype=np.float32, threads=None):
    """(K, T) for the §9 kernel: T threads per block, K = pow2(N)/T values per thread.

    From the H200 sweep: about V = 16 values per thread in fp32 and 32 in fp16, with
    128 ≤ T ≤ 512; T = 1024 only when K would exceed 32 (N = 32768). Simulator: the fewest
    threads that hold the row, at least 64 (two warps, so §10's second level runs).
    """
    p = _pow2_at_least(n)
    if threads is None:
        if device.SIMULATOR:
            threads = max(2 * WARP, p // MAX_K)
        else:
            v = 32 if np.dtype(dtype).itemsize == 2 else 16
            threads = min(512, max(128, p // v))
            if p // threads > MAX_K:
                threads = min(MAX_THREADS, p // MAX_K)
    if _pow2_at_least(threads) != threads:
        raise ValueError(f"threads: method 'block' needs a power of 2; got {threads}")
    k = max(1, p // threads)
    if k > MAX_K:
        raise ValueError(f"softmax method 'block' keeps at most {MAX_K} values per thread: "
                         f"N = {n} needs threads ≥ {_pow2_at_least(-(-n // MAX_K))} "
                         f"(got {threads})")
    return k, threads


def _launch_block(x2, y2, threads):
    rows, n = x2.shape
    k, t = block_shape(n, x2.dtype, threads)
    _launch(K.block_kernel(k, t), rows, t, (x2, y2))


# ---------------------------------------------------------------------------------------------
# The lesson tier's launchers (kernels_numba/lesson/softmax.py): the simplest geometry that
# runs the kernel — one warp or one block per row, K = ceil(N / threads) values per thread.
# ---------------------------------------------------------------------------------------------
def _lesson_threads(n, threads):
    """Threads per block of the lesson's block-per-row kernels: given, else enough for ≤ 16
    values a thread (64 … 1024; 64 in the simulator)."""
    if threads is not None:
        return threads
    if device.SIMULATOR:
        return 2 * WARP
    return min(MAX_THREADS, max(128, _pow2_at_least(-(-n // 16))))


def _lesson_warp(x2, y2, threads):
    rows, n = x2.shape
    wpb = _warps_per_block(threads)
    kernel = L.softmax_warp if n <= WARP else L.softmax_warp_multi(-(-n // WARP))
    _launch(kernel, -(-rows // wpb), wpb * WARP, (x2, y2))


def _lesson_block(x2, y2, threads):
    rows, n = x2.shape
    t = _lesson_threads(n, threads)
    k = -(-n // t)
    if k > MAX_K:
        raise ValueError(f"softmax method 'block' (tier 'lesson') keeps at most {MAX_K} values "
                         f"per thread: N = {n} needs threads ≥ {-(-n // MAX_K)} (got {t})")
    _launch(L.softmax_block(k), rows, t, (x2, y2))


METHODS = {m.name: m for m in [
    Method("naive", "1", "e^x / Σe^x with no max: overflows for x ≈ 100 on purpose",
           "softmax_naive", 2, 1, None, _launch_rowwise(K.softmax_naive),
           auto=False),
    Method("three_pass", "3", "max pass, exp+sum pass, normalize pass: three launches, "
           "m and l through global memory", "row_max, row_sum_exp, normalize",
           3, 1, None, _launch_three_pass(), extra="+ m and l per row, written and read back",
           lesson_kernel="row_max, row_sum_exp, normalize",
           lesson_launch=_launch_three_pass(L, _lesson_threads)),
    Method("warp", "6–7", "one warp per row, one element per lane, shuffles only",
           "softmax_warp", 1, 1, WARP, _launch_warp,
           lesson_kernel="softmax_warp", lesson_launch=_lesson_warp),
    Method("warp_multi", "8", "one warp per row, lane t holds t, t+32, … in registers (rows < 256: G < 32 lanes "
           "a row, 32/G rows per warp)",
           "warp_multi_kernel(K, R, G)", 1, 1, WARP * MAX_K, _launch_warp_multi,
           lesson_kernel="softmax_warp_multi(K)", lesson_launch=_lesson_warp),
    Method("block", "9–10", "one block per row, N/T values per thread in registers, "
           "two-level reduction", "block_kernel(K, T)", 1, 1, MAX_K * MAX_THREADS,
           _launch_block, lesson_kernel="softmax_block(K)", lesson_launch=_lesson_block),
    Method("block_smem", "9–11", "one block per row, row cached in shared memory",
           "softmax_block_smem", 1, 1, SMEM_MAX_N,
           _launch_rowwise(K.softmax_block_smem, shared=True),
           lesson_kernel="softmax_block_smem",
           lesson_launch=_launch_rowwise(L.softmax_block_smem, True, _lesson_threads)),
    Method("block_reread", "11", "one block per row, any N, re-reads global memory each pass",
           "softmax_block_reread", 3, 1, None,
           _launch_rowwise(K.softmax_block_reread), lesson_kernel="softmax_block_reread",
           lesson_launch=_launch_rowwise(L.softmax_block_reread, threads_for=_lesson_threads)),
    Method("online", "18–20", "single pass of (m, l) per thread, merged by §19, then normalize",
           "softmax_online", 2, 1, None, _launch_rowwise(K.softmax_online),
           lesson_kernel="softmax_online",
           lesson_launch=_launch_rowwise(L.softmax_online, threads_for=_lesson_threads)),
]}

AUTO = "auto"
CHOICES = (AUTO,) + tuple(METHODS)
LESSON_METHODS = tuple(name for name, m in METHODS.items() if m.lesson_launch is not None)
TIERS = checks.TIERS

# §5: the dispatcher. Thresholds from the H200 sweep (`flashlesson bench softmax`): a warp per
# row while the row fits in a warp's registers, a block per row while it fits in a block's
# registers, the online method beyond.
AUTO_RULES = (
    (WARP * MAX_K, "warp_multi"),
    (MAX_K * MAX_THREADS, "block"),
    (None, "online"),
)


def choose(n, dtype=np.float32):
    """§5: the method ``auto`` runs for rows of length ``n``."""
    for limit, name in AUTO_RULES:
        if limit is None or n <= limit:
            return name
    raise AssertionError("unreachable: the last rule takes any N")


def softmax(x, *, method=AUTO, out=None, threads=None, tier="fast"):
    """Softmax over the last axis of ``x``, computed by one of the lesson's kernels.

    x: float32 or float16 array of any rank ≥ 1 (NumPy → NumPy result; device array or
       ``__cuda_array_interface__`` object → device array, no host copy). float16 is
       computed in float32 and returned as float16. An empty x (no rows, or N = 0) gives an
       empty result of its shape, as torch.softmax does (no launch).
    method: "auto" (§5) or one of ``METHODS`` (see ``flashlesson methods``).
    out: optional output array, same shape and dtype as x, on the same side; ``x`` itself
       (in place) or memory disjoint from x — a partial overlap is refused.
    threads: threads per block (a multiple of 32, ≤ 1024); default: chosen per method and N.
    tier: "fast" (kernels_numba/softmax.py, tuned) or "lesson" (kernels_numba/lesson/softmax.py,
       the plain kernel of each idea; every method but "naive"; ``auto`` picks as for "fast").

    A torch tensor seen before with these options replays its first call's launches
    (``flashlesson.calls``: no check repeated, since none could answer otherwise).
    """
    if out is None:                     # the fast path: a torch tensor, a key seen before
        facts, ptrs = calls.tensor_facts((x,))
        if facts is not None:
            key = ("softmax", facts, method, threads, type(threads), tier)
            plan = calls.lookup(key)
            if plan is not None:
                return plan(ptrs, (x,))
            return calls.run(key, (x,), lambda: _softmax(x, method, out, threads, tier))
    return _softmax(x, method, out, threads, tier)


def _softmax(x, method, out, threads, tier):
    """``softmax``'s full path: every check, then the launches."""
    if method not in CHOICES:
        raise ValueError(f"method: expected one of {', '.join(CHOICES)}; got {method!r}")
    checks.tier(tier, method if method != AUTO else LESSON_METHODS[0], LESSON_METHODS,
                "softmax")
    xo = Operand(x, "x", DTYPES)
    shape = xo.shape
    n = shape[-1]
    if threads is not None and (isinstance(threads, (bool, np.bool_)) or
                                not isinstance(threads, (int, np.integer)) or threads % WARP
                                or not WARP <= threads <= MAX_THREADS):
        raise ValueError(f"threads: expected a multiple of 32 between 32 and 1024; got {threads!r}")
    name = choose(max(n, 1), xo.dtype) if method == AUTO else method
    m = METHODS[name]
    m.check_n(n)
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    out_user = out
    if out is not None:
        out = check_out(out, "out", shape, xo.dtype, xo.on_host)
        checks.no_partial_overlap(out, x if isinstance(x, np.ndarray) else xo.obj, "out", "x")
    if rows == 0 or n == 0:             # empty (as torch: shape (0, N) or (N, 0)): no launch
        return out_user if out is not None else \
            checks.empty_like_side(shape, xo.dtype, xo.on_host, like=xo)
    checks.grid(rows if name not in ("warp", "warp_multi") else 1, "x: one block per row")
    with using(xo):                     # torch in: torch's stream, torch.empty
        x2 = xo.device_view((rows, n))
        if out is not None and not xo.on_host:
            y2 = out.reshape((rows, n))
        else:
            y2 = empty((rows, n), dtype=xo.dtype)
        (m.lesson_launch if tier == "lesson" else m.launch)(x2, y2, threads)
    if xo.on_host:
        host = y2.copy_to_host().reshape(shape)
        if out is not None:
            out[...] = host
            return out
        return host
    return out_user if out is not None else result(y2, shape)
