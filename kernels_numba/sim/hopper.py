"""Simulator twins of ``kernels_numba/hopper.py``'s Hopper helpers (mbarrier, named barriers,
setmaxnreg, wgmma, the bulk copy), as one model of a block's shared memory and barriers.

What is modelled, per simulated block (state kept on the simulator's BlockManager):

- **A shared window.** Every shared array a helper touches gets a base address in a modelled
  shared window (first-come, each on a 1024-byte boundary, below 2^18 as the descriptor's
  18-bit address field needs): ``shared_addr(smem, i)`` returns that address, and the wgmma
  twin reads its operands back *from the descriptor's bits* — start address, leading and
  stride byte offsets, swizzle mode — so a wrong descriptor reads the wrong elements here as
  it would on the GPU.
- **mbarriers**, keyed by their window address: expected arrival count, pending arrivals,
  transaction count (tx-count, bytes) and phase. A phase completes when no arrival and no byte
  is pending; then the phase number goes up by one and the pending count is reset.
  ``mbar_try_wait_parity(bars, i, p)`` returns once the phase of parity p has completed (the
  current phase's parity differs from p). A bulk copy is delivered (its bytes land in shared
  memory, complete_tx counts them) when a thread next waits on its mbarrier — the latest
  moment the GPU allows — so a kernel that reads before it waits sees the old contents.
- **cp.async on an mbarrier**: ``cp_async_mbar_arrive`` takes the thread's cp.async copies
  not yet landed (sim/vector.py holds them back) to the mbarrier; they land, and count one
  arrival (noinc), when a thread next waits on it.
- **Named barriers** 1-15 (0 is ``cuda.syncthreads()``'s): arrivals counted per id; a
  ``bar_sync`` returns once its id has counted ``nthreads`` arrivals (``bar_arrive`` counts
  without waiting).
- **wgmma** as a warpgroup rendezvous: the 128 threads of a warpgroup (4 consecutive warps,
  the first a multiple of 4) hand in their accumulator fragments and the two descriptors;
  the 64×N×16 product is computed in NumPy (float64, one rounding to float32) and each thread
  gets its fragment back, in the layout drawn in ``kernels_numba/hopper.py``. The product is
  computed at once, but its accumulator is held back: the array reads as NaN from the mma
  until a ``wgmma_wait_group`` retires its group (then it holds the product), so a kernel that
  reads an accumulator too early gets NaN, and one that writes it while its group is in flight
  raises there. (Shared-memory operands and the RS form's A registers are read when the mma
  is issued: releasing a stage, or changing A, before the wait is not caught.) The RS form
  takes A from the 128 threads' four registers each (decoded in the A-fragment layout), the
  _tb forms read B N-major through the descriptor; the protocol is checked per thread:
  a ``wgmma_fence()`` must come before the first mma and again after every ``wait_group``.

- **A semaphore in global memory** (``sem_wait_geq``, ``sem_release_add``): the simulator runs
  a grid's blocks one after another, each to its end, so a turn an earlier block gave is
  there already and one that is not can never come — an error at the wait, not a spin.

Errors, never hangs. A thread that waits (mbarrier, named barrier, warpgroup rendezvous)
re-checks the block every ``POLL_S`` s (doubling up to ``MAX_POLL_S``). When no thread of the
block can move any more — each has exited, or waits here for something not yet there, or in
``cuda.syncthreads()``, or in a warp operation — twice in a row with nothing changed in
between, the waiting threads raise :class:`HopperSimError` naming the barrier, its counts
(arrivals pending of expected, transaction bytes pending, phase) and what the other threads
are doing. Misuse raises at the call: an mbarrier used before ``mbar_init``, a bulk copy that
is not 16-byte aligned, a named barrier id outside 1-15 or a count that is not a multiple of
32, a register count for setmaxnreg outside 24-256 or not a multiple of 8, threads of one
warpgroup passing different descriptors.

Limits. Race mode (``races.py``) orders threads by ``cuda.syncthreads()`` only, so a kernel
ordered by mbarriers or named barriers is reported there as racy: run such kernels without
race mode. Only the no-swizzle and 128-byte swizzle descriptor modes, with base offset 0, are
modelled (others raise). Performance effects (setmaxnreg, fences) are not modelled.

Chosen by ``kernels_numba/sim/__init__.py`` (``helper_chooser("hopper")``): each name here
replaces the GPU helper of the same name when the simulator is on.
"""

import threading

import numpy as np

from .mma import tf32_block_fma
from .vector import land, take_pending
from .warp import block_threads, current_thread, waits_in_warp_op

POLL_S = 0.02           # first re-check of a waiting thread ...
MAX_POLL_S = 0.2        # ... then doubling up to this
WINDOW_ALIGN = 1024     # each shared array's base in the modelled window
WINDOW_BYTES = 1 << 18  # the descriptor's address field: (x & 0x3FFFF) >> 4
MAX_TX = (1 << 20) - 1  # the tx-count's range (PTX: ±(2^20 − 1))
WARPGROUP = 128

_state_lock = threading.Lock()


class HopperSimError(RuntimeError):
    """A Hopper helper was misused in the simulator, or waits for what can never come."""


# ---------------------------------------------------------------------------------------------
# The block's state
# ---------------------------------------------------------------------------------------------
class _MBarrier:
    def __init__(self, addr, count):
        self.addr, self.count = addr, count
        self.pending = count        # arrivals still missing in the current phase
        self.tx = 0                 # transaction bytes still missing (expect_tx − complete_tx)
        self.phase = 0              # phases completed so far; current parity = phase & 1
        self.in_flight = []         # bulk copies not yet delivered: (dst bytes, offset, data)
        self.cp_arrivals = []       # cp_async_mbar_arrive's: each a thread's cp.async copies,
                                    # landing (then one arrival) when a thread waits here

    def counts(self):
        return (f"phase {self.phase} (parity {self.phase & 1}), {self.pending} of "
                f"{self.count} arrivals pending, tx-count {self.tx} bytes")


class _Named:
    def __init__(self):
        self.arrived = 0            # arrivals in the current generation
        self.nthreads = None        # the count the current generation was opened with
        self.generation = 0         # generations completed


class _Collective:
    def __init__(self, op, wg):
        self.op, self.wg = op, wg
        self.payloads = {}          # thread index in the warpgroup -> payload
        self.done = False
        self.results = None
        self.error = None


class _Wait:
    """What a waiting thread waits for: a description and a test."""

    def __init__(self, what, ready):
        self.what, self.ready = what, ready


class _Block:
    def __init__(self, manager):
        self.manager = manager
        self.cond = threading.Condition()
        self.window = []            # (base, nbytes, host pointer, plain uint8 view of the root)
        self.next_base = WINDOW_ALIGN
        self.mbarriers = {}         # window address -> _MBarrier
        self.named = {}             # id -> _Named
        self.collectives = {}       # warpgroup -> _Collective being gathered
        self.waiting = {}           # thread id -> _Wait
        self.progress = 0           # bumped by every change of the state above


def _thread(op):
    return current_thread(op, HopperSimError)


def _block(t):
    blk = t._manager.__dict__.get("_hopper_state")
    if blk is None:
        with _state_lock:
            blk = t._manager.__dict__.get("_hopper_state")
            if blk is None:
                blk = t._manager._hopper_state = _Block(t._manager)
    return blk


def _where(t, op):
    b = t.blockIdx
    return f"{op} in block ({b.x},{b.y},{b.z}) thread {t.thread_id}"


def _ids_text(ids):
    """[0, 1, 2, 5] -> 'threads 0-2, 5'; [3] -> 'thread 3'."""
    ids = sorted(ids)
    parts, i = [], 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ("thread " if len(ids) == 1 else "threads ") + ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# Waiting, and telling a wait that can never end
# ---------------------------------------------------------------------------------------------
def _stuck(blk):
    """None while some thread of the block may still move; the exception of a thread that
    raised; else {what it does: [thread ids]} for every thread (all exited, or waiting for
    something that is not there)."""
    nthreads, threads = block_threads(blk.manager)
    groups = {}
    for tid in range(nthreads):
        th = threads.get(tid)
        if th is None:
            return None                     # not created yet: the launcher is still starting
        started = getattr(th, "_started", None)
        if started is not None and not started.is_set():
            return None
        if th.exception is not None:
            return th.exception[0]
        if not th.is_alive():
            what = "have exited"
        elif tid in blk.waiting:
            w = blk.waiting[tid]
            if w.ready():
                return None
            what = f"wait at {w.what}"
        elif th.syncthreads_blocked:
            what = "wait in cuda.syncthreads()"
        elif waits_in_warp_op(th):
            what = "wait in a warp operation"
        else:
            return None                     # running
        groups.setdefault(what, []).append(tid)
    return groups


def _wait(blk, t, wait, report):
    """Block the calling thread (blk.cond held) until wait.ready(); raise HopperSimError with
    report(stuck) when no thread of the block can make it ready any more."""
    blk.waiting[t.thread_id] = wait
    try:
        timeout, seen = POLL_S, None
        while not wait.ready():
            blk.cond.wait(timeout)
            if t.abort:
                raise RuntimeError(f"abort flag set while waiting at {wait.what}")
            if wait.ready():
                break
            stuck = _stuck(blk)
            if isinstance(stuck, BaseException):
                # A thread raised: the block fails. Raise its error here too (the simulator
                # may miss a thread that died between two of its polls, and wait for ever).
                raise type(stuck)(str(stuck))
            if stuck is None:
                seen = None
            elif seen == blk.progress:      # stuck twice, nothing changed in between
                others = "; ".join(f"{_ids_text(ids)} {what}" for what, ids in stuck.items())
                raise HopperSimError(f"{report()}; no thread of the block can change that any "
                                     f"more (deadlock): {others}")
            else:
                seen = blk.progress
            timeout = min(2 * timeout, MAX_POLL_S)
    finally:
        del blk.waiting[t.thread_id]


def _changed(blk):
    blk.progress += 1
    blk.cond.notify_all()


# ---------------------------------------------------------------------------------------------
# The shared window
# ---------------------------------------------------------------------------------------------
def _host_array(a, op, name):
    """The NumPy array behind a simulated kernel argument or shared/local array."""
    if isinstance(a, np.ndarray):
        return a
    item = getattr(a, "__dict__", {}).get("_item")          # FakeWithinKernelCUDAArray
    ary = getattr(item if item is not None else a, "_ary", None)
    if isinstance(ary, np.ndarray):
        return ary
    raise TypeError(f"{op}: {name} must be an array, got {type(a).__name__}")


def _is_global(a):
    return not isinstance(a, np.ndarray)


def _element_host_address(a, i, op, name):
    a = _host_array(a, op, name)
    if not a.flags.c_contiguous:
        raise HopperSimError(f"{op}: {name} must be C-contiguous")
    i = int(i)
    if not 0 <= i < a.size:
        raise IndexError(f"{op}: {name} index {i} is outside the array ({a.size} elements)")
    return a.__array_interface__["data"][0] + i * a.itemsize, a


def _window_address(blk, smem, i, op, name="smem"):
    """The modelled shared-window address of element i (flat) of a shared array."""
    if _is_global(smem):
        raise HopperSimError(f"{op}: {name} must be a shared array (cuda.shared.array), got a "
                             "global array")
    host, a = _element_host_address(smem, i, op, name)
    with blk.cond:
        for base, nbytes, ptr, _ in blk.window:
            if ptr <= host < ptr + nbytes:
                return base + host - ptr
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        root = np.asarray(root)             # a plain view: race mode records nothing here
        ptr = root.__array_interface__["data"][0]
        base = blk.next_base
        if base + root.nbytes > WINDOW_BYTES:
            raise HopperSimError(f"{op}: the modelled shared window is full ({WINDOW_BYTES} "
                                 "bytes)")
        blk.window.append((base, root.nbytes, ptr, root.reshape(-1).view(np.uint8)))
        blk.next_base = -(-(base + root.nbytes) // WINDOW_ALIGN) * WINDOW_ALIGN
        return base + host - ptr


def _window_bytes(blk, addr, op, what):
    """(uint8 view of the shared array holding window address addr, offset in it)."""
    for base, nbytes, _, u8 in blk.window:
        if base <= addr < base + nbytes:
            return u8, addr - base
    raise HopperSimError(f"{op}: {what} address {addr:#x} is in no shared array this block "
                         "has given an address to (shared_addr)")


def shared_addr(smem, i):
    t = _thread("shared_addr")
    return _window_address(_block(t), smem, i, "shared_addr")


# ---------------------------------------------------------------------------------------------
# mbarrier
# ---------------------------------------------------------------------------------------------
def _mbar_address(blk, bars, i, op):
    a = _host_array(bars, op, "bars")
    if a.itemsize != 8:
        raise HopperSimError(f"{op}: bars must be a shared uint64 array (an mbarrier is 8 "
                             f"bytes), got {a.dtype}")
    return _window_address(blk, bars, i, op, "bars")


def _mbar(blk, bars, i, op):
    addr = _mbar_address(blk, bars, i, op)
    mb = blk.mbarriers.get(addr)
    if mb is None:
        raise HopperSimError(f"{op}: the mbarrier at shared address {addr:#x} (bars[{i}]) is "
                             "used before mbar_init in this block")
    return mb


def _maybe_complete(blk, mb):
    if mb.pending == 0 and mb.tx == 0:
        mb.phase += 1
        mb.pending = mb.count
    _changed(blk)


def _deliver(blk, mb):
    """The copy engine delivers the bulk copies in flight on mb: their bytes land, complete_tx.
    Done when a thread waits on mb (the latest moment the GPU allows), so that a thread which
    reads the destination without waiting sees the old contents."""
    if mb.in_flight:
        for u8, off, data in mb.in_flight:
            u8[off:off + data.size] = data
            mb.tx -= data.size                  # complete_tx::bytes
        mb.in_flight = []
        _maybe_complete(blk, mb)
    while mb.cp_arrivals:                       # each: its copies land, then one arrival
        land(mb.cp_arrivals.pop(0))
        mb.pending -= 1
        _maybe_complete(blk, mb)


def mbar_init(bars, i, count):
    t = _thread("mbar_init")
    blk = _block(t)
    count = int(count)
    if not 1 <= count <= MAX_TX:
        raise HopperSimError(f"{_where(t, 'mbar_init')}: count must be 1 … 2^20 − 1, got "
                             f"{count}")
    addr = _mbar_address(blk, bars, i, "mbar_init")
    with blk.cond:
        blk.mbarriers[addr] = _MBarrier(addr, count)
        _changed(blk)


def _arrive(t, bars, i, nbytes, op):
    blk = _block(t)
    with blk.cond:
        mb = _mbar(blk, bars, i, op)
        mb.tx += nbytes
        if abs(mb.tx) > MAX_TX:
            raise HopperSimError(f"{_where(t, op)}: tx-count {mb.tx} of the mbarrier at "
                                 f"{mb.addr:#x} is outside ±(2^20 − 1)")
        mb.pending -= 1
        _maybe_complete(blk, mb)


def mbar_arrive(bars, i):
    _arrive(_thread("mbar_arrive"), bars, i, 0, "mbar_arrive")


def mbar_arrive_expect_tx(bars, i, nbytes):
    nbytes = int(nbytes)
    if nbytes < 0:
        raise HopperSimError(f"mbar_arrive_expect_tx: nbytes must be ≥ 0, got {nbytes}")
    _arrive(_thread("mbar_arrive_expect_tx"), bars, i, nbytes, "mbar_arrive_expect_tx")


def mbar_try_wait_parity(bars, i, parity):
    op = "mbar_try_wait_parity"
    t = _thread(op)
    blk = _block(t)
    parity = int(parity)
    if parity not in (0, 1):
        raise HopperSimError(f"{_where(t, op)}: parity must be 0 or 1, got {parity}")
    with blk.cond:
        mb = _mbar(blk, bars, i, op)

        def ready():
            _deliver(blk, mb)
            return (mb.phase & 1) != parity      # the phase of this parity has completed

        def report():
            missing = []
            if mb.pending:
                missing.append(f"{mb.pending} arrival{'s' if mb.pending > 1 else ''}")
            if mb.tx > 0:
                missing.append(f"{mb.tx} transaction bytes (expect_tx more than the copies "
                               "delivered)")
            elif mb.tx < 0:
                missing.append(f"an expect_tx of {-mb.tx} bytes (copies delivered more than "
                               "was expected)")
            return (f"{_where(t, op)}: the mbarrier at shared address {mb.addr:#x} (bars[{i}])"
                    f" never completes the phase of parity {parity}: {mb.counts()}; missing "
                    + " and ".join(missing))

        _wait(blk, t, _Wait(f"the mbarrier at {mb.addr:#x} (parity {parity})", ready), report)


def fence_mbarrier_init():
    """No-op in the model (init is visible at once)."""


def fence_proxy_async():
    """No-op in the model (one proxy)."""


# ---------------------------------------------------------------------------------------------
# Bulk copy, global → shared, completing on an mbarrier
# ---------------------------------------------------------------------------------------------
def bulk_copy_g2s(dst, di, src, si, nbytes, bars, bi):
    op = "bulk_copy_g2s"
    t = _thread(op)
    blk = _block(t)
    nbytes = int(nbytes)
    if nbytes <= 0 or nbytes % 16:
        raise HopperSimError(f"{_where(t, op)}: nbytes must be a positive multiple of 16, got "
                             f"{nbytes}")
    if not _is_global(src):
        raise HopperSimError(f"{_where(t, op)}: src must be a global array (a kernel "
                             "argument)")
    s_host, s = _element_host_address(src, si, op, "src")
    s_off = s_host - s.__array_interface__["data"][0]
    if s_off % 16 or s_off + nbytes > s.nbytes:
        raise HopperSimError(f"{_where(t, op)}: src element {si} is byte {s_off} of the array: "
                             f"it must be a multiple of 16 with {nbytes} bytes inside the "
                             f"array ({s.nbytes} bytes)")
    daddr = _window_address(blk, dst, di, op, "dst")
    if daddr % 16:
        raise HopperSimError(f"{_where(t, op)}: dst element {di} is not 16-byte aligned")
    with blk.cond:
        u8, off = _window_bytes(blk, daddr, op, "dst")
        if off + nbytes > u8.size:
            raise HopperSimError(f"{_where(t, op)}: {nbytes} bytes from dst element {di} run "
                                 f"past the end of the shared array ({u8.size} bytes)")
        data = s.reshape(-1).view(np.uint8)[s_off:s_off + nbytes].copy()
        mb = _mbar(blk, bars, bi, op)
        mb.in_flight.append((u8, off, data))     # delivered when a thread waits on mb
        _changed(blk)


def cp_async_mbar_arrive(bars, i):
    """cp.async.mbarrier.arrive.noinc: the thread's cp.async copies issued so far (held back by
    sim/vector.py) go to the mbarrier; they land, and count one arrival, when a thread next
    waits on it — the latest moment the GPU allows."""
    op = "cp_async_mbar_arrive"
    t = _thread(op)
    blk = _block(t)
    with blk.cond:
        mb = _mbar(blk, bars, i, op)
        mb.cp_arrivals.append(take_pending())
        _changed(blk)


# ---------------------------------------------------------------------------------------------
# Named barriers
# ---------------------------------------------------------------------------------------------
def _named(t, op, bar_id, nthreads):
    bar_id, nthreads = int(bar_id), int(nthreads)
    if not 1 <= bar_id <= 15:
        raise HopperSimError(f"{_where(t, op)}: barrier id must be 1 … 15 (0 is "
                             f"cuda.syncthreads()'s), got {bar_id}")
    total, _ = block_threads(t._manager)
    if nthreads <= 0 or nthreads % 32 or nthreads > -(-total // 32) * 32:
        raise HopperSimError(f"{_where(t, op)}: nthreads must be a positive multiple of 32 "
                             f"(whole warps) no larger than the block, got {nthreads}")
    blk = _block(t)
    with blk.cond:
        nb = blk.named.setdefault(bar_id, _Named())
        if nb.nthreads is not None and nb.nthreads != nthreads:
            raise HopperSimError(f"{_where(t, op)}: barrier {bar_id} was entered with "
                                 f"nthreads {nb.nthreads} by other threads, {nthreads} here")
        nb.nthreads = nthreads
        nb.arrived += 1
        gen = nb.generation
        if nb.arrived == nthreads:
            nb.generation += 1
            nb.arrived, nb.nthreads = 0, None
        _changed(blk)
        return blk, nb, gen, bar_id, nthreads


def bar_arrive(bar_id, nthreads):
    _named(_thread("bar_arrive"), "bar_arrive", bar_id, nthreads)


def bar_sync(bar_id, nthreads):
    op = "bar_sync"
    t = _thread(op)
    blk, nb, gen, bar_id, nthreads = _named(t, op, bar_id, nthreads)
    with blk.cond:
        def report():
            return (f"{_where(t, op)}: named barrier {bar_id} never fills: {nb.arrived} of "
                    f"{nthreads} arrivals")
        _wait(blk, t, _Wait(f"named barrier {bar_id}", lambda: nb.generation > gen), report)


# ---------------------------------------------------------------------------------------------
# A semaphore in global memory
# ---------------------------------------------------------------------------------------------
def sem_wait_geq(sem, i, target):
    """The simulator runs the blocks of a grid one after another, each to its end: a turn an
    earlier block gave is there already, and one that is not can never come — an error, not
    a spin."""
    op = "sem_wait_geq"
    t = _thread(op)
    with _state_lock:
        value = int(sem[i])
    if value < int(target):
        raise HopperSimError(f"{_where(t, op)}: sem[{i}] is {value}, this thread waits for "
                             f"≥ {int(target)}: no block before this one gave that turn (the "
                             "simulator runs blocks in launch order; on the GPU this waits "
                             "forever)")


def sem_release_add(sem, i, n):
    _thread("sem_release_add")
    with _state_lock:
        sem[i] += n


# ---------------------------------------------------------------------------------------------
# setmaxnreg
# ---------------------------------------------------------------------------------------------
def _setmaxnreg(op, n):
    t = _thread(op)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 24 <= n <= 256 \
            or n % 8:
        raise HopperSimError(f"{_where(t, op)}: the register count must be a multiple of 8 in "
                             f"24 … 256, got {n!r}")


def setmaxnreg_inc(n):
    _setmaxnreg("setmaxnreg_inc", n)


def setmaxnreg_dec(n):
    _setmaxnreg("setmaxnreg_dec", n)


# ---------------------------------------------------------------------------------------------
# wgmma
# ---------------------------------------------------------------------------------------------
def _protocol(t):
    st = t.__dict__.get("_hopper_wgmma")
    if st is None:
        st = t._hopper_wgmma = {"fenced": False, "uncommitted": 0, "groups": 0,
                                "committed": 0, "inflight": []}
    return st


def _key(a):
    return a.__array_interface__["data"][0], a.size


def wgmma_fence():
    _protocol(_thread("wgmma_fence"))["fenced"] = True


def wgmma_commit_group():
    st = _protocol(_thread("wgmma_commit_group"))
    st["groups"] += 1
    st["uncommitted"] = 0
    for e in st["inflight"]:
        if e["group"] is None:
            e["group"] = st["committed"]
    st["committed"] += 1


def wgmma_wait_group(n):
    t = _thread("wgmma_wait_group")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n <= 7:
        raise HopperSimError(f"{_where(t, 'wgmma_wait_group')}: N must be an integer constant "
                             f"0 … 7, got {n!r}")
    st = _protocol(t)
    st["groups"] = min(st["groups"], int(n))
    st["fenced"] = False        # the accumulators may be touched now: fence again before mma
    done = st["committed"] - int(n)     # groups 0 … done − 1 have completed
    keep = []
    for i, e in enumerate(st["inflight"]):
        if e["group"] is None or e["group"] >= done:
            keep.append(e)
            continue
        a = e["acc"]
        if not np.isnan(a).all():
            raise HopperSimError(f"{_where(t, 'wgmma_wait_group')}: an accumulator was written "
                                 "while a wgmma writing it was in flight (before the "
                                 "wgmma_wait_group that retires its group)")
        if not any(_key(later["acc"]) == _key(a) for later in st["inflight"][i + 1:]):
            a[:] = e["value"]           # (a later mma on it still in flight: it stays NaN)
    st["inflight"] = keep


def wgmma_fence_operand(acc, count):
    """Identity in the model (on the GPU: keeps the compiler from moving accumulator accesses
    across the wgmma instructions)."""


def _fragment_index(n):
    """rows[tid, i], cols[tid, i]: the (row, col) of the 64 × n accumulator that thread tid of
    the warpgroup holds in its register i (the layout drawn in kernels_numba/hopper.py)."""
    tid = np.arange(WARPGROUP)[:, None]
    i = np.arange(n // 2)[None, :]
    warp, lane = tid // 32, tid % 32
    rows = 16 * warp + lane // 4 + 8 * ((i % 4) // 2)
    cols = 8 * (i // 4) + 2 * (lane % 4) + i % 2
    return rows, cols


def _decode(desc):
    desc = int(desc)
    return {"start": (desc & 0x3FFF) << 4, "lbo": ((desc >> 16) & 0x3FFF) << 4,
            "sbo": ((desc >> 32) & 0x3FFF) << 4, "base_offset": (desc >> 49) & 7,
            "swizzle": (desc >> 62) & 3}


def _operand(blk, desc, rows, kind, op, name, n_major=False):
    """The rows × 16 operand (row r: the 16 k-values of row r of A, or of column r of B) a
    descriptor describes, read from the shared window, as float64 (the element bits decoded
    as fp16 or bf16; kind "tf32": rows × 8 float32, K-major only, the same 32 bytes a row, the
    low 13 mantissa bits dropped as the tensor core reads them). K-major, or n_major (imm-trans-b 1: B's rows r in 16-byte runs of 8 for
    one k, PTX ISA canonical layout ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)); or with the 128-byte
    swizzle, ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)), LBO and SBO swapping roles)."""
    d = _decode(desc)
    es = 4 if kind == "tf32" else 2     # bytes an element: a row's k step is 32 bytes either
    per16 = 16 // es                    # way (16 halves, or 8 tf32: no N-major form for tf32)
    r = np.arange(rows)[:, None]
    k = np.arange(32 // es)[None, :]
    if n_major and d["swizzle"] == 1:   # 128B, MN-major: 64 n a 128-byte row, 8 k an atom
        if d["base_offset"]:            # (LBO: the next 64 n; SBO: the next 8 k; then the
            raise HopperSimError(f"{op}: {name}: base offset {d['base_offset']} is not "
                                 "modelled (put the swizzle atoms on 1024-byte boundaries)")
        addr = d["start"] + (r // 64) * d["lbo"] + (k // 8) * d["sbo"] + (k % 8) * 128 \
            + (r % 64) * 2              # XOR of the address's chunk bits with its row bits;
        addr = addr ^ (((addr >> 7) & 7) << 4)      # docs/hopper_sw128.md)
    elif n_major:
        if d["swizzle"] != 0:
            raise HopperSimError(f"{op}: {name}: an N-major operand with swizzle mode "
                                 f"{d['swizzle']} is not modelled (none or 128B only)")
        addr = d["start"] + (r // 8) * d["sbo"] + (r % 8) * 2 + (k % 8) * 16 + (k // 8) * d["lbo"]
    elif d["swizzle"] == 0:             # core matrices: 8 rows × 16 bytes, rows 16 bytes apart
        addr = d["start"] + (r // 8) * d["sbo"] + (r % 8) * 16 + (k // per16) * d["lbo"] \
            + (k % per16) * es
    elif d["swizzle"] == 1:             # 128B: rows 128 bytes apart, 16-byte chunks XOR row % 8
        if d["base_offset"]:
            raise HopperSimError(f"{op}: {name}: base offset {d['base_offset']} is not modelled "
                                 "(put the swizzle atoms on 1024-byte boundaries)")
        addr = d["start"] + (r // 8) * d["sbo"] + (r % 8) * 128 + k * es
        addr = addr ^ (((addr >> 7) & 7) << 4)
    else:
        raise HopperSimError(f"{op}: {name}: swizzle mode {d['swizzle']} (64B/32B) is not "
                             "modelled (0: none, 1: 128B)")
    u8, off = _window_bytes(blk, int(addr.min()), op, f"{name} descriptor's")
    off = off + addr - addr.min()
    if off.max() + es > u8.size:
        raise HopperSimError(f"{op}: {name}: the descriptor (start {d['start']:#x}, LBO "
                             f"{d['lbo']}, SBO {d['sbo']}) reaches past the end of its shared "
                             f"array ({u8.size} bytes)")
    bits = np.zeros(off.shape, np.uint32)
    for byte in range(es):              # little-endian
        bits |= u8[off + byte].astype(np.uint32) << np.uint32(8 * byte)
    if kind == "tf32":                  # (the tensor core drops the low 13 mantissa bits)
        return (bits & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    if kind == "f16":
        return bits.astype(np.uint16).view(np.float16).astype(np.float64)
    return (bits << 16).view(np.float32).astype(np.float64)


def _register_a(regs, kind):
    """The 64 × 16 A of the RS form from the warpgroup's registers regs[tid] = (a0, a1, a2, a3),
    per warp mma.sync's m16n8k16 A fragment (mma.py) on its 16 rows: a0 = A[16w + g, 2t : 2t+2],
    a1 = A[16w + g + 8, 2t : 2t+2], a2 = A[16w + g, 2t+8 : 2t+10], a3 = A[16w + g + 8, …].
    kind "tf32": the 64 × 8 A, per warp the m16n8k8 tf32 A fragment, a0 = A[16w + g, t], a1 =
    A[16w + g + 8, t], a2 = A[16w + g, t + 4], a3 = A[16w + g + 8, t + 4] (regs: the four
    floats' bits), the low 13 mantissa bits dropped as the tensor core reads them."""
    tid = np.arange(WARPGROUP)
    w, g, t = tid // 32, (tid % 32) // 4, tid % 4
    regs = np.asarray(regs, np.uint64)
    if kind == "tf32":
        bits = np.zeros((64, 8), np.uint32)
        for j, (dr, dk) in enumerate(((0, 0), (8, 0), (0, 4), (8, 4))):
            bits[16 * w + g + dr, t + dk] = regs[:, j]
        return (bits & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    halves = np.zeros((64, 16), np.uint16)
    for j, (dr, dk) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
        halves[16 * w + g + dr, 2 * t + dk] = regs[:, j] & 0xFFFF
        halves[16 * w + g + dr, 2 * t + dk + 1] = regs[:, j] >> 16
    if kind == "f16":
        return halves.view(np.float16).astype(np.float64)
    return (halves.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _make_wgmma(kind, n, rs=False, trans_b=0):
    name = f"wgmma_{kind}_n{n}" + ("_rs" if rs else "") + ("_tb" if trans_b else "")
    rows, cols = _fragment_index(n)
    same = 6 if rs else 3               # the payload's fields all threads share: (a…, b, scale_d)

    def compute(blk, payloads):
        first = payloads[0]
        key = (lambda p: p[4:6]) if rs else (lambda p: p[:3])
        odd = [i for i, p in enumerate(payloads) if key(p) != key(first)]
        if odd:
            return (f"{name}: the 128 threads of a warpgroup must pass the same descriptors and "
                    f"scale_d; {_ids_text(odd)} (of the warpgroup) passed "
                    f"{key(payloads[odd[0]])}, thread 0 {key(first)}"), None
        if rs:
            A = _register_a([p[:4] for p in payloads], kind)
            desc_b, scale_d = first[4:6]
        else:
            desc_a, desc_b, scale_d = first[:3]
            A = _operand(blk, desc_a, 64, kind, name, "A")
        Bt = _operand(blk, desc_b, n, kind, name, "B", bool(trans_b))   # row j holds B[:, j]
        C = np.zeros((64, n))
        if scale_d:
            C[rows, cols] = np.array([p[same] for p in payloads], np.float64)
        if kind == "tf32":              # summed as Hopper's tensor core sums (toward zero)
            return None, tf32_block_fma(A, Bt.T, C)[rows, cols]
        return None, (A @ Bt.T + C)[rows, cols].astype(np.float32)

    def run(acc, head):
        t = _thread(name)
        st = _protocol(t)
        if not st["fenced"]:
            raise HopperSimError(f"{_where(t, name)}: no wgmma_fence() before this "
                                 "wgmma.mma_async (PTX: one is required before the first, and "
                                 "between accumulator accesses — after a wait_group — and the "
                                 "next)")
        a = _host_array(acc, name, "acc")
        if a.dtype != np.float32 or a.size != n // 2:
            raise HopperSimError(f"{_where(t, name)}: acc must be a float32 local array of "
                                 f"{n // 2} elements (N/2), got {a.dtype} × {a.size}")
        prior = next((e for e in reversed(st["inflight"]) if _key(e["acc"]) == _key(a)), None)
        c = prior["value"] if prior is not None else a.copy()   # chained on an in-flight acc
        value = _warpgroup_collective(t, name, head + (c,), compute)
        if prior is not None and prior["group"] is None:
            prior["value"] = value          # the same (uncommitted) group
        else:
            st["inflight"].append({"acc": a, "value": value, "group": None})
        a[:] = np.nan                       # (until a wait_group retires the group)
        st["uncommitted"] += 1

    if rs and kind == "tf32":           # (A: four float32 registers, passed as their bits)
        def twin(acc, a0, a1, a2, a3, desc_b, scale_d):
            run(acc, tuple(int(np.float32(a).view(np.uint32)) for a in (a0, a1, a2, a3))
                + (int(desc_b), bool(scale_d)))
    elif rs:
        def twin(acc, a0, a1, a2, a3, desc_b, scale_d):
            run(acc, (int(a0) & 0xFFFFFFFF, int(a1) & 0xFFFFFFFF, int(a2) & 0xFFFFFFFF,
                      int(a3) & 0xFFFFFFFF, int(desc_b), bool(scale_d)))
    else:
        def twin(acc, desc_a, desc_b, scale_d):
            run(acc, (int(desc_a), int(desc_b), bool(scale_d)))

    twin.__name__ = name
    return twin


def _warpgroup_collective(t, op, payload, compute):
    """All 128 threads of the caller's warpgroup hand in a payload; compute(blk, payloads by
    thread index in the warpgroup) -> (error or None, results indexed the same way)."""
    blk = _block(t)
    wg, idx = divmod(t.thread_id, WARPGROUP)
    total, _ = block_threads(t._manager)
    if (wg + 1) * WARPGROUP > total:
        raise HopperSimError(f"{_where(t, op)}: warpgroup {wg} needs threads {wg * WARPGROUP}-"
                             f"{wg * WARPGROUP + 127}; the block has {total} threads (a "
                             "warpgroup is 4 whole warps)")
    with blk.cond:
        c = blk.collectives.get(wg)
        if c is None:
            c = blk.collectives[wg] = _Collective(op, wg)
        elif c.op != op:
            c.error = (f"{_where(t, op)}: threads of warpgroup {wg} called different "
                       f"instructions: {_ids_text(c.payloads)} (of the warpgroup) called "
                       f"{c.op}, thread {idx} {op}")
            c.done = True
            del blk.collectives[wg]
            _changed(blk)
            raise HopperSimError(c.error)
        c.payloads[idx] = payload
        if len(c.payloads) == WARPGROUP:
            c.error, c.results = compute(blk, [c.payloads[i] for i in range(WARPGROUP)])
            c.done = True
            del blk.collectives[wg]
            _changed(blk)

        def report():
            return (f"{_where(t, op)}: {_ids_text(c.payloads)} of warpgroup {wg} wait for the "
                    f"others of its 128 threads, which never arrive")
        _wait(blk, t, _Wait(f"{op} (warpgroup {wg})", lambda: c.done), report)
    if c.error is not None:
        raise HopperSimError(c.error)
    return c.results[idx]


for _n in (16, 32, 64, 128):
    globals()[f"wgmma_tf32_n{_n}"] = _make_wgmma("tf32", _n)
for _n in (64, 128):
    globals()[f"wgmma_tf32_n{_n}_rs"] = _make_wgmma("tf32", _n, True)
for _kind in ("f16", "bf16"):
    for _n in (64, 96, 128, 160, 176, 192, 256):
        globals()[f"wgmma_{_kind}_n{_n}"] = _make_wgmma(_kind, _n)
    for _n in (32, 64, 128):
        globals()[f"wgmma_{_kind}_n{_n}_tb"] = _make_wgmma(_kind, _n, False, 1)
    for _n in (64, 128):
        globals()[f"wgmma_{_kind}_n{_n}_rs"] = _make_wgmma(_kind, _n, True, 0)
        globals()[f"wgmma_{_kind}_n{_n}_rs_tb"] = _make_wgmma(_kind, _n, True, 1)
