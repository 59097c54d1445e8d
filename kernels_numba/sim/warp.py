"""Warp-level operations for Numba's CUDA simulator, which has none of its own.

Numba's simulator (``NUMBA_ENABLE_CUDASIM=1``) runs every CUDA thread of a block as a Python
thread, but it lacks the warp intrinsics, so a kernel using ``cuda.shfl_down_sync`` cannot run
on a machine without a GPU. :func:`install` adds them to the simulator; the kernel source stays
plain ``cuda.shfl_down_sync(mask, value, delta)``, the same text for the GPU and the CPU.
``import kernels_numba`` calls :func:`install` (through ``kernels_numba.sim.install()``) when
the simulator is on.

Menu (signatures are numba-cuda 0.30's; numba-cuda's shuffles take no ``width``: it is 32)::

    shfl_sync(mask, value, src_lane)      value of lane  src_lane % 32
    shfl_up_sync(mask, value, delta)      value of lane  lane - delta; own value if that is < 0
    shfl_down_sync(mask, value, delta)    value of lane  lane + delta; own value if that is > 31
    shfl_xor_sync(mask, value, lane_mask) value of lane  lane ^ lane_mask  (never out of range)
    all_sync / any_sync / eq_sync(mask, predicate) -> bool   over the lanes that took part
    ballot_sync(mask, predicate) -> int   bit i set: lane i took part and its predicate is true
    match_any_sync(mask, value) -> int    lanes that took part with a bit-identical value
    match_all_sync(mask, value) -> (int, bool)   (lanes that took part, True) if all equal,
                                                 else (0, False)
    syncwarp(mask=0xFFFFFFFF)             the named lanes wait for one another
    activemask() -> int                   lanes of the caller's warp at this same call, once
                                          no lane of the warp is still running (see Limits)
    lanemask_lt() -> int                  (1 << lane) - 1

    install()      add all of the above to the simulator (idempotent)
    installed()    whether install() ran
    WarpOpError    the error raised when a warp operation is misused or can never complete

Semantics. A warp is 32 consecutive linear thread ids of a block (warp = id // 32, lane =
id % 32; the last warp is partial when the block size is not a multiple of 32). ``delta``,
``src_lane`` and ``lane_mask`` keep their low 5 bits, as PTX ``shfl.sync`` does (``bval =
b[4:0]``), so ``shfl_down_sync(m, v, 32)`` returns the caller's own value. Each operation is a
rendezvous: every lane named in ``mask`` that has not exited must call the same operation
with the same mask; the call returns once all of them have arrived. Lanes that exited (or do
not exist, past the end of a partial warp) are excused, as the CUDA Programming Guide says
("all non-exited threads named in mask must execute the same intrinsic with the same mask"),
so a vote, ballot, match or syncwarp simply leaves them out. A shuffle, though, raises
:class:`WarpOpError` when a lane *reads* from a lane that did not take part (exited, does
not exist, or not named in the mask): on a GPU that value is undefined (NVIDIA's CUDA C++
guidelines, rule 2.3: "the source thread must be active and included in the mask").
Shuffles return the source lane's value object itself, so its type is kept (numpy float32
stays float32); votes return ``bool``, masks return non-negative ``int`` (store them in
uint32 or int64 arrays: bit 31 does not fit an int32 array in NumPy).

Errors, never hangs. A waiting lane re-checks after ``POLL_S`` s, then less and less often
(up to every ``MAX_POLL_S`` s; no busy loop), and :class:`WarpOpError` names the block, the
warp, the operation, the lanes and why, when: the caller is not in its own mask; lanes of
one rendezvous called different operations; a lane reads from a lane that did not take
part; or a named lane can never arrive because it waits in ``cuda.syncthreads()`` (a
barrier the waiting lanes have not passed, so it cannot finish) or at another warp
operation that can never complete (lanes using different masks) — found by two checks at
least ``POLL_S`` apart that see the same lanes stuck in the same states. If the block aborts
(another thread raised), waiting lanes leave within ``MAX_POLL_S`` s; if a lane being
waited for raised, the lanes waiting for it raise the same exception type and message, so
the launch reports the real cause whichever thread it picks.

Limits.
- Lanes do not run in lockstep between warp operations, so ``activemask()`` models
  convergence: it waits until no lane of the warp is still running (each has exited, or
  waits at a warp operation, in syncthreads() or in activemask()), then returns the lanes
  waiting at the same call site (same line of the same function): all existing lanes at a
  kernel's start, lanes 0-15 after lanes 16-31 returned, one branch's lanes in divergent
  code. A lane still running after ``ACTIVEMASK_SETTLE_S`` s (spinning on a flag) counts as
  active. On a GPU the hardware may report fewer lanes (convergence is never guaranteed).
- Strict reads: a shuffle tree whose upper lanes read past the end of a partial warp or of
  the mask raises, even where a GPU would compute those undefined values and never use
  them. Set ``sim.warp.ON_UNDEFINED_READ = "poison"`` to get NaN (floats) or 0xDEADBEEF
  (ints) for such reads instead.
- Shuffled and matched values must be ``int``, ``float`` or NumPy int32/int64/float32/float64
  (numba-cuda's i4/i8/f4/f8), predicates integers or bools: anything else raises TypeError,
  as numba-cuda's typing would. Nothing else is type-checked (the simulator compiles nothing).
- Only ``cuda.<op>`` calls in kernels are covered (the simulator swaps the module named
  ``cuda``); ``from numba.cuda import shfl_sync`` works in the simulator after install().

Tests: ``NUMBA_ENABLE_CUDASIM=1 PYTHONPATH=.:src python3 -m pytest tests/test_simwarp.py -q``
(from the repository root; the non-error tests also run unchanged on a GPU).
"""

import operator
import sys
import threading
import time

import numpy as np

__all__ = [
    "WarpOpError",
    "install",
    "installed",
    "shfl_sync",
    "shfl_up_sync",
    "shfl_down_sync",
    "shfl_xor_sync",
    "all_sync",
    "any_sync",
    "eq_sync",
    "ballot_sync",
    "match_any_sync",
    "match_all_sync",
    "syncwarp",
    "activemask",
    "lanemask_lt",
    "warp_collective",
]

WARP_SIZE = 32
FULL_MASK = 0xFFFFFFFF
POLL_S = 0.05  # first re-check of a waiting lane (abort, dead lanes, deadlock) ...
MAX_POLL_S = 0.4  # ... then doubling up to this (fewer wake-ups: big blocks stay fast)
ON_UNDEFINED_READ = "raise"  # or "poison": NaN / 0xDEADBEEF instead of an error
ACTIVEMASK_SETTLE_S = 0.5
COLLECTIVE = "collective:"  # op-name prefix of warp_collective() rendezvous  # activemask() waits at most this long for running lanes

_STATE_ATTR = "_simwarp_state"
_install_lock = threading.Lock()
_state_lock = threading.Lock()
_installed = False


class WarpOpError(RuntimeError):
    """A warp operation was misused, or can never complete. One message argument."""


# --------------------------------------------------------------------------------------
# Per-block bookkeeping


class _BlockState:
    """What one simulated block knows of its threads, kept on its BlockManager."""

    def __init__(self, manager):
        self.threads = {}  # linear thread id -> BlockThread (registered at creation)
        self.nthreads = int(np.prod(manager._block_dim))
        self.warps = {}  # warp -> _WarpState


class _WarpState:
    """One warp's rendezvous. One lock per warp: a lock per block convoys big blocks."""

    def __init__(self, block):
        self.lock = threading.Lock()
        self.threads = block.threads
        self.nthreads = block.nthreads
        self.pending = {}  # (warp, mask) -> _Rendezvous not yet complete
        self.waiting = {}  # linear thread id -> the _Rendezvous it waits in
        self.am_groups = {}  # (warp, call site) -> _Rendezvous of lanes in activemask()


class _Rendezvous:
    """Lanes meeting at one warp operation (or, for activemask, at one call site)."""

    __slots__ = ("op", "warp", "mask", "key", "args", "event", "done", "results", "error",
                 "suspect")

    def __init__(self, op, warp, mask, key=None):
        self.op = op
        self.key = key
        self.warp = warp
        self.mask = mask
        self.args = {}  # lane -> argument tuple
        self.event = threading.Event()  # set once results (or error) are ready
        self.done = False
        self.results = None
        self.error = None
        self.suspect = None  # the last check's stuck lanes and their states (_check_progress)


def _block_state(manager):
    st = manager.__dict__.get(_STATE_ATTR)
    if st is None:
        with _state_lock:
            st = manager.__dict__.get(_STATE_ATTR)
            if st is None:
                st = _BlockState(manager)
                setattr(manager, _STATE_ATTR, st)
    return st


def _warp_state(manager, warp):
    block = _block_state(manager)
    ws = block.warps.get(warp)
    if ws is None:
        with _state_lock:
            ws = block.warps.get(warp)
            if ws is None:
                ws = block.warps[warp] = _WarpState(block)
    return ws


def _register_thread(thread):
    _block_state(thread._manager).threads[thread.thread_id] = thread


def current_thread(op, error=None):
    """The simulated CUDA thread calling ``op`` (a BlockThread); ``error`` (WarpOpError by
    default) if it is called outside a kernel running in the simulator. Shared with the Hopper
    twins (sim/hopper.py)."""
    from numba.cuda.simulator.kernel import BlockThread

    t = threading.current_thread()
    if not isinstance(t, BlockThread):
        raise (error or WarpOpError)(
            f"{op}() was called outside a kernel running in the simulator")
    if t.abort:
        raise RuntimeError(f"abort flag set on {op} call")
    return t


# --------------------------------------------------------------------------------------
# Formatting helpers


def _lanes_text(lanes):
    """[0,1,2,5,7,8] -> 'lanes 0-2, 5, 7-8'; [3] -> 'lane 3'."""
    lanes = sorted(lanes)
    parts = []
    i = 0
    while i < len(lanes):
        j = i
        while j + 1 < len(lanes) and lanes[j + 1] == lanes[j] + 1:
            j += 1
        parts.append(str(lanes[i]) if i == j else f"{lanes[i]}-{lanes[j]}")
        i = j + 1
    return ("lane " if len(lanes) == 1 else "lanes ") + ", ".join(parts)


def _where(thread, op, warp, mask=None):
    b = thread.blockIdx
    where = f"{op} in block ({b.x},{b.y},{b.z}) warp {warp}"
    return where if mask is None else f"{where} (mask {mask:#010x})"


def _bits(mask):
    return [i for i in range(WARP_SIZE) if (mask >> i) & 1]


def _as_mask(mask, op):
    try:
        return operator.index(mask) & FULL_MASK
    except TypeError:
        raise TypeError(f"{op}: mask must be an integer, got {type(mask).__name__}") from None


def _as_int(x, op, name):
    try:
        return operator.index(x)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an integer, got {type(x).__name__}") from None


_SHFL_OK = (np.int32, np.int64, np.float32, np.float64)


def _check_value(value, op):
    """numba-cuda types shuffled/matched values as i4, i8, f4 or f8 only."""
    if isinstance(value, (bool, np.bool_)) or not (
        isinstance(value, (int, float)) or isinstance(value, _SHFL_OK)
    ):
        raise TypeError(
            f"{op} only supports 32- and 64-bit signed ints and floats "
            f"(as numba-cuda does), got {type(value).__name__}"
        )


def _check_predicate(pred, op):
    if not isinstance(pred, (bool, int, np.bool_, np.integer)):
        raise TypeError(f"{op}: predicate must be an integer or boolean, got {type(pred).__name__}")


# --------------------------------------------------------------------------------------
# Lane states and deadlock analysis (all under the warp's lock)

_NONEXISTENT, _STARTING, _FAILED, _EXITED, _WAITING, _SYNCTHREADS, _RUNNING = range(7)


def _lane_state(st, tid):
    if tid >= st.nthreads:
        return _NONEXISTENT, None
    th = st.threads.get(tid)
    if th is None:
        return _STARTING, None  # not created yet: the launcher is still starting threads
    started = getattr(th, "_started", None)
    if started is not None and not started.is_set():
        return _STARTING, th
    if th.exception is not None:
        return _FAILED, th
    if not th.is_alive():
        return _EXITED, th
    rv = st.waiting.get(tid)
    if rv is not None:
        return _WAITING, rv
    if th.syncthreads_blocked:
        # The flag stays set for a while after the barrier is released (the simulator clears
        # it thread by thread): if the caller has passed more barriers than th, th's
        # barrier is released already and th is about to run.
        me = threading.current_thread()
        if getattr(th, "_simwarp_barriers", 0) < getattr(me, "_simwarp_barriers", 0):
            return _RUNNING, th
        return _SYNCTHREADS, th
    return _RUNNING, th


def _gone(kind):
    return kind in (_NONEXISTENT, _EXITED)


def _missing(rv):
    return [lane for lane in _bits(rv.mask) if lane not in rv.args]


def _analyse(st, warp):
    """States of the warp's lanes and the set of lanes that may still move on.

    A lane may move on if it runs (or is starting), or if it waits in a rendezvous whose
    missing lanes all may move on or are gone (least fixpoint: lanes in a cycle of
    rendezvous waiting for each other never get in, nor lanes behind syncthreads()).
    """
    base = warp * WARP_SIZE
    states = {lane: _lane_state(st, base + lane) for lane in range(WARP_SIZE)}
    free = {
        lane
        for lane, (k, info) in states.items()
        if k in (_RUNNING, _STARTING, _FAILED) or (k == _WAITING and info.op == "activemask")
    }
    changed = True
    while changed:
        changed = False
        for lane, (k, rv) in states.items():
            if k == _WAITING and lane not in free:
                if all(m in free or _gone(states[m][0]) for m in _missing(rv)):
                    free.add(lane)
                    changed = True
    return states, free


def _reason(kind, info, st, warp):
    """Why lanes did not arrive, as a verb phrase: (singular, plural)."""
    if kind == _NONEXISTENT:
        n = max(0, min(WARP_SIZE, st.nthreads - warp * WARP_SIZE))
        why = f"(the block has {st.nthreads} threads, so warp {warp} has lanes 0-{n - 1} only)"
        return f"does not exist {why}", f"do not exist {why}"
    if kind == _EXITED:
        return "has exited (returned from the kernel)", "have exited (returned from the kernel)"
    if kind == _SYNCTHREADS:
        why = "cuda.syncthreads(), which cannot finish while this warp waits here"
        return f"waits in {why}", f"wait in {why}"
    if kind == _WAITING:
        why = (
            f"at {info.op} with mask {info.mask:#010x}, which can never complete (lanes that "
            f"meet at a warp operation must call the same one with the same mask)"
        )
        return f"waits {why}", f"wait {why}"
    if kind == "not in mask":
        return "is not named in the mask", "are not named in the mask"
    return "is blocked", "are blocked"


def _clause(subject_lanes, phrase, pronoun=False):
    singular, plural = phrase
    one = len(subject_lanes) == 1
    subject = ("it" if one else "they") if pronoun else _lanes_text(subject_lanes)
    return f"{subject} {singular if one else plural}"


def _finish(st, rv, error=None):
    """Complete rv: compute each lane's result (or the error), wake its lanes."""
    if error is None:
        error, rv.results = _compute(st, rv)
    rv.error = error
    rv.done = True
    if st.pending.get((rv.warp, rv.mask)) is rv:
        del st.pending[(rv.warp, rv.mask)]
    base = rv.warp * WARP_SIZE
    for lane in rv.args:
        if st.waiting.get(base + lane) is rv:
            del st.waiting[base + lane]
    rv.event.set()


# --------------------------------------------------------------------------------------
# What each operation computes, once every named lane arrived or is gone


def _source_lane(op, lane, b):
    b &= 31  # PTX shfl.sync: bval = b[4:0]
    if op == "shfl_sync":
        return b  # j = b[4:0]; always within 0..31
    if op == "shfl_up_sync":
        j = lane - b
        return j if j >= 0 else lane
    if op == "shfl_down_sync":
        j = lane + b
        return j if j <= 31 else lane
    return lane ^ b  # shfl_xor_sync: always within 0..31


def _poison(value):
    if isinstance(value, (float, np.floating)):
        return type(value)("nan")
    return type(value)(-0x21524111)  # 0xDEADBEEF as a signed 32-bit int


def _match_key(value):
    return np.asarray(value).tobytes()  # bit pattern, as PTX match.sync compares


def _compute(st, rv):
    op, args = rv.op, rv.args
    took_part = sorted(args)
    if op.startswith(COLLECTIVE):
        # A whole-warp instruction (mma.sync): every lane of the warp must take part.
        if len(took_part) != WARP_SIZE:
            return (f"{_where(threading.current_thread(), op, rv.warp, rv.mask)}: only "
                    f"{_lanes_text(took_part)} took part; this instruction needs all 32 lanes "
                    "of the warp (a partial warp, or lanes that returned early)"), None
        fn = args[took_part[0]][0]
        return None, fn([args[lane][1] for lane in took_part])
    part_mask = sum(1 << lane for lane in took_part)
    if op.startswith("shfl"):
        results, bad = {}, {}
        for lane in took_part:
            value, b = args[lane]
            j = _source_lane(op, lane, b)
            if j in args:
                results[lane] = args[j][0]
            else:
                bad.setdefault(j, []).append(lane)
                results[lane] = _poison(value)
        if bad and ON_UNDEFINED_READ == "raise":
            return _read_error(st, rv, bad), None
        return None, results
    if op in ("all_sync", "any_sync", "eq_sync", "ballot_sync"):
        preds = [bool(args[lane][0]) for lane in took_part]
        if op == "all_sync":
            r = all(preds)
        elif op == "any_sync":
            r = any(preds)
        elif op == "eq_sync":
            r = all(preds) or not any(preds)
        else:
            r = sum(1 << lane for lane, p in zip(took_part, preds) if p)
        return None, dict.fromkeys(took_part, r)
    if op == "match_any_sync":
        keys = {lane: _match_key(args[lane][0]) for lane in took_part}
        return None, {
            lane: sum(1 << o for o in took_part if keys[o] == keys[lane]) for lane in took_part
        }
    if op == "match_all_sync":
        keys = {_match_key(args[lane][0]) for lane in took_part}
        r = (part_mask, True) if len(keys) == 1 else (0, False)
        return None, dict.fromkeys(took_part, r)
    return None, dict.fromkeys(took_part)  # syncwarp


def _read_error(st, rv, bad):
    """Message for lanes that read from lanes which did not take part."""
    thread = threading.current_thread()
    groups = {}
    for j, readers in sorted(bad.items()):
        if not (rv.mask >> j) & 1:
            phrase = _reason("not in mask", None, st, rv.warp)
        else:
            kind, info = _lane_state(st, rv.warp * WARP_SIZE + j)
            phrase = _reason(kind, info, st, rv.warp)
        readers_of, sources = groups.setdefault(phrase, ([], []))
        readers_of.extend(readers)
        sources.append(j)
    parts = [
        f"{_lanes_text(readers)} read from {_lanes_text(sources)}, which did not take part: "
        + _clause(sources, phrase, pronoun=True)
        for phrase, (readers, sources) in groups.items()
    ]
    return (
        f"{_where(thread, rv.op, rv.warp, rv.mask)}: " + "; ".join(parts) + ". On a GPU the "
        "values read would be undefined: every lane read from must be named in the mask and "
        "call the same shuffle (did some lanes return early?)"
    )


# --------------------------------------------------------------------------------------
# The rendezvous


def _warp_op(op, mask, arg):
    t = current_thread(f"cuda.{op}")
    mask = _as_mask(mask, op)
    tid = t.thread_id
    warp, lane = divmod(tid, WARP_SIZE)
    if not (mask >> lane) & 1:
        raise WarpOpError(
            f"{_where(t, op, warp, mask)}: lane {lane} called it with a mask that does not "
            f"name the calling lane (its bit {1 << lane:#010x} must be set)"
        )
    st = _warp_state(t._manager, warp)
    key = (warp, mask)
    with st.lock:
        st.threads.setdefault(tid, t)
        rv = st.pending.get(key)
        if rv is None:
            rv = st.pending[key] = _Rendezvous(op, warp, mask)
        elif rv.op != op:
            msg = (
                f"{_where(t, op, warp, mask)}: lanes of one warp operation called different "
                f"operations: {_lanes_text(rv.args)} called {rv.op} but lane {lane} called "
                f"{op}, with the same mask"
            )
            _finish(st, rv, error=msg)
            raise WarpOpError(msg)
        rv.args[lane] = arg
        st.waiting[tid] = rv
        base = warp * WARP_SIZE
        if all(m in rv.args or base + m >= st.nthreads for m in _bits(mask)):
            _finish(st, rv)
    # Wait outside the lock (waking 32 lanes that all want the lock again is slow).
    timeout = POLL_S
    while not rv.event.wait(timeout):
        if t.abort:
            raise RuntimeError(f"abort flag set while waiting at {op}")
        if _worth_checking(st, rv):
            with st.lock:
                if not rv.done:
                    _check_progress(st, rv, t)
        timeout = min(2 * timeout, MAX_POLL_S)
    if rv.error is not None:
        raise WarpOpError(rv.error)
    return rv.results[lane]


def _worth_checking(st, rv):
    """Cheap test without the lock: is some missing lane anything but running?"""
    base = rv.warp * WARP_SIZE
    for m in _bits(rv.mask):
        if m not in rv.args and _lane_state(st, base + m)[0] not in (_RUNNING, _STARTING):
            return True
    return False


def _check_progress(st, rv, t):
    """Called by a waiting lane: complete rv if its missing lanes are gone, raise if stuck."""
    states, free = _analyse(st, rv.warp)
    missing = _missing(rv)
    kinds = {m: states[m] for m in missing}
    for m, (k, th) in kinds.items():
        if k == _FAILED:
            # That thread raised; the block is failing. Re-raise its error here too, so that
            # whichever thread the simulator reports first, the cause is the same.
            exc = th.exception[0]
            raise type(exc)(str(exc))
    if all(_gone(k) for k, _ in kinds.values()):
        _finish(st, rv)
        return
    stuck = [m for m, (k, _) in kinds.items() if not _gone(k) and m not in free]
    if not stuck:
        rv.suspect = None
        return
    # A deadlock is declared on a check that finds the same lanes stuck in the same states (the
    # rendezvous, or the barriers passed) as one at least POLL_S before it, as the Hopper twins
    # do (twice in a row, nothing changed in between): one reading of the threads' states,
    # taken without the simulator's own barrier lock, was once seen to name a lane stuck that
    # was not (CI, 2026-12-01: a shfl_xor_sync of the fp32 flash kernel at d = 256 under load;
    # its replay passed).
    seen = (frozenset(rv.args), tuple(
        (m, kinds[m][0], id(kinds[m][1]) if kinds[m][0] == _WAITING
         else getattr(kinds[m][1], "_simwarp_barriers", None)) for m in sorted(stuck)))
    now = time.monotonic()
    if rv.suspect is None or rv.suspect[0] != seen:
        rv.suspect = (seen, now)
        return
    if now - rv.suspect[1] < POLL_S:    # (another lane's check, just now: look again later)
        return
    groups = {}
    for m in stuck:
        k, info = kinds[m]
        groups.setdefault(_reason(k, info, st, rv.warp), []).append(m)
    detail = "; ".join(_clause(lanes, phrase) for phrase, lanes in groups.items())
    msg = (
        f"{_where(t, rv.op, rv.warp, rv.mask)}: {_lanes_text(rv.args)} "
        f"{'waits' if len(rv.args) == 1 else 'wait'} for "
        f"{_lanes_text(stuck)}, named in the mask, which can never arrive (deadlock): {detail}"
    )
    _finish(st, rv, error=msg)


# --------------------------------------------------------------------------------------
# The operations, as the kernel sees them (cuda.<name>)


def shfl_sync(mask, value, src_lane):
    """Value of lane ``src_lane % 32`` (PTX shfl.sync.idx with c = 0x1f)."""
    _check_value(value, "shfl_sync")
    return _warp_op("shfl_sync", mask, (value, _as_int(src_lane, "shfl_sync", "src_lane")))


def shfl_up_sync(mask, value, delta):
    """Value of lane ``lane - delta``; the caller's own value if that is below lane 0."""
    _check_value(value, "shfl_up_sync")
    return _warp_op("shfl_up_sync", mask, (value, _as_int(delta, "shfl_up_sync", "delta")))


def shfl_down_sync(mask, value, delta):
    """Value of lane ``lane + delta``; the caller's own value if that is above lane 31."""
    _check_value(value, "shfl_down_sync")
    return _warp_op("shfl_down_sync", mask, (value, _as_int(delta, "shfl_down_sync", "delta")))


def shfl_xor_sync(mask, value, lane_mask):
    """Value of lane ``lane ^ lane_mask`` (low 5 bits of lane_mask: always a lane 0..31)."""
    _check_value(value, "shfl_xor_sync")
    return _warp_op(
        "shfl_xor_sync", mask, (value, _as_int(lane_mask, "shfl_xor_sync", "lane_mask"))
    )


def all_sync(mask, predicate):
    """True iff the predicate is true in every lane that took part."""
    _check_predicate(predicate, "all_sync")
    return _warp_op("all_sync", mask, (predicate,))


def any_sync(mask, predicate):
    """True iff the predicate is true in some lane that took part."""
    _check_predicate(predicate, "any_sync")
    return _warp_op("any_sync", mask, (predicate,))


def eq_sync(mask, predicate):
    """True iff the predicate (as a bool) is the same in every lane that took part."""
    _check_predicate(predicate, "eq_sync")
    return _warp_op("eq_sync", mask, (predicate,))


def ballot_sync(mask, predicate):
    """Bit i set iff lane i took part and its predicate is true (an int, 0 <= r < 2**32)."""
    _check_predicate(predicate, "ballot_sync")
    return _warp_op("ballot_sync", mask, (predicate,))


def match_any_sync(mask, value):
    """Mask of the lanes that took part whose value has the caller's bit pattern."""
    _check_value(value, "match_any_sync")
    return _warp_op("match_any_sync", mask, (value,))


def match_all_sync(mask, value):
    """(mask of lanes that took part, True) if all their values are equal, else (0, False)."""
    _check_value(value, "match_all_sync")
    return _warp_op("match_all_sync", mask, (value,))


def warp_collective(name, fn, payload):
    """A whole-warp instruction for kernels_numba's own helpers (the twins in ``sim/mma.py``):
    every lane of the warp calls it with its ``payload``; once all 32 have arrived,
    ``fn(payloads)`` (a list indexed by lane) returns the list of results, and each lane gets
    its own. Same rendezvous, errors and deadlock reports as the shuffles."""
    return _warp_op(COLLECTIVE + name, FULL_MASK, (fn, payload))


def syncwarp(mask=FULL_MASK):
    """The named lanes (those that have not exited) wait for one another."""
    _warp_op("syncwarp", mask, ())


def activemask():
    """Lanes of the caller's warp that reach this same activemask() call together.

    Lanes run freely between warp operations in the simulator, so "converged" is modelled
    as: the call returns once no lane of the warp is still running (each has exited, or
    waits at a warp operation, in syncthreads(), or in an activemask() call); the result
    is the set of lanes then waiting at this call site. A lane still running after
    ACTIVEMASK_SETTLE_S s (e.g. spinning on a flag) is counted as active.
    """
    t = current_thread("cuda.activemask")
    frame = sys._getframe(1)
    site = (id(frame.f_code), frame.f_lasti)
    del frame
    warp, lane = divmod(t.thread_id, WARP_SIZE)
    st = _warp_state(t._manager, warp)
    with st.lock:
        st.threads.setdefault(t.thread_id, t)
        key = (warp, site)
        g = st.am_groups.get(key)
        if g is None:
            g = st.am_groups[key] = _Rendezvous("activemask", warp, 0, key)
        g.args[lane] = ()
        st.waiting[t.thread_id] = g
        start = time.monotonic()
        _settle_activemask(st, g, False)
    timeout = POLL_S
    while not g.event.wait(timeout):
        if t.abort:
            raise RuntimeError("abort flag set while waiting at activemask")
        with st.lock:
            if not g.done:
                _settle_activemask(st, g, time.monotonic() - start >= ACTIVEMASK_SETTLE_S)
        timeout = min(2 * timeout, MAX_POLL_S)
    return g.results


def _settle_activemask(st, g, give_up):
    base = g.warp * WARP_SIZE
    running = []
    for lane in range(WARP_SIZE):
        kind, _ = _lane_state(st, base + lane)
        if kind in (_RUNNING, _STARTING):
            running.append(lane)
    if running and not give_up:
        return
    g.results = sum(1 << lane for lane in list(g.args) + running)
    g.done = True
    if st.am_groups.get(g.key) is g:
        del st.am_groups[g.key]
    for lane in g.args:
        if st.waiting.get(base + lane) is g:
            del st.waiting[base + lane]
    g.event.set()


def block_threads(manager):
    """(the block's thread count, {linear thread id: BlockThread} of the threads created so
    far, exited ones included) of the block run by ``manager``: for the deadlock reports of
    the Hopper twins (``sim/hopper.py``), which wait across warps."""
    st = _block_state(manager)
    return st.nthreads, st.threads


def waits_in_warp_op(thread):
    """Whether ``thread`` waits in a warp operation (or activemask) that has not completed."""
    st = _warp_state(thread._manager, thread.thread_id // WARP_SIZE)
    rv = st.waiting.get(thread.thread_id)
    return rv is not None and not rv.done


def lanemask_lt():
    """Bits of the lanes below the caller's: (1 << lane) - 1."""
    t = current_thread("cuda.lanemask_lt")
    return (1 << (t.thread_id % WARP_SIZE)) - 1


_OPS = {
    name: globals()[name]
    for name in __all__
    if name not in ("WarpOpError", "install", "installed")
}


# --------------------------------------------------------------------------------------
# Installation


def install():
    """Add the warp operations to Numba's CUDA simulator. Safe to call more than once."""
    global _installed
    with _install_lock:
        from numba import cuda
        from numba.cuda.simulator import kernel, kernelapi

        for name, fn in _OPS.items():
            setattr(kernelapi.FakeCUDAModule, name, staticmethod(fn))

        bt = kernel.BlockThread
        orig = bt.__dict__.get("_simwarp_orig_init") or bt.__init__

        def __init__(self, *args, **kwargs):
            orig(self, *args, **kwargs)
            _register_thread(self)

        bt._simwarp_orig_init = orig
        bt.__init__ = __init__

        orig_sync = bt.__dict__.get("_simwarp_orig_syncthreads") or bt.syncthreads

        def syncthreads(self):
            orig_sync(self)
            # barriers this thread has passed: tells a stale syncthreads_blocked flag apart
            self._simwarp_barriers = getattr(self, "_simwarp_barriers", 0) + 1

        bt._simwarp_orig_syncthreads = orig_sync
        bt.syncthreads = syncthreads

        if cuda.config.ENABLE_CUDASIM:
            # Host-side references (e.g. `from numba.cuda import shfl_sync`) in the simulator.
            for name, fn in _OPS.items():
                current = getattr(cuda, name, None)
                if current is None or getattr(current, "__module__", None) == __name__:
                    setattr(cuda, name, fn)
        _installed = True


def installed():
    """Whether install() ran."""
    return _installed
