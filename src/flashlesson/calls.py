"""``flashlesson.calls``: the fast path of a public call on torch tensors — a call
seen before replays what its first call launched.

A public call (``softmax``, ``attention``, ``attention_backward``) spends most of its host time
on work that is the same from one call to the next with the same inputs' shapes and options:
checking every argument, choosing the method, the tiles and the kernel, building views,
finding the launch plans. All of it is decided by the call's *key*:

    the function; per tensor argument its shape, dtype, device index and contiguity;
    each option's value and type (``causal=1`` is not ``causal=True``: the first is refused);
    each input's address modulo 16 (16-byte loads need aligned rows, and which tensor is
    off its boundary decides which launch keeps them: the backward's D launch reads o and dO
    16 bytes at a time even where q is misaligned; an OR of all of them, the key until
    2026-12-02, let a call with only o misaligned replay the plan of one with only LSE so)

The first call with a key takes the full path — every check — while a recorder notes each
``torch.empty`` result allocated through ``arrays.empty`` and each launch made through
``launch.launch`` (its plan and arguments). When every array argument of every launch is an
input, a noted allocation or one of the fixed placeholders (``launch.dummy``), every launch
took the fast path, and every result is a whole noted allocation, the call becomes a
:class:`CallPlan`:

    outputs   (shape, torch dtype, input of that shape and dtype or None) of each allocation,
              the results among them
    steps     (launch plan, parameter list, pointer slots: which input or output, byte offset);
              a pair launched side by side (``launch.launch_beside``) replays as a pair

A later call with the key replays it: ``torch.empty`` per output (poisoned when
``arrays.POISON``), each step's data pointers written into its parameters, launched on torch's
current stream (``launch.Packed``: parameters packed once, only the pointers written), the
results returned. Nothing is checked again, because nothing that a check reads can differ
between two calls with one key; a call with anything new (a shape, a dtype, an option, an
unaligned view, a non-contiguous tensor, a tensor subclass) misses and takes the full path,
which checks it. A call that raises records nothing. Calls on NumPy or Numba arrays, calls with
``out=`` or dropout (a new seed each call) always take the full path, and so does a key whose
path does more than allocate and launch (the naive methods' and the lesson forward's Numba
scratch arrays): it is stored as not replayable. Only ``softmax``, ``attention`` and
``attention_backward`` (and ``flashlesson.torch`` through them) have the fast path; the varlen
and merge functions read offsets or LSEs on the host, which a key cannot hold.

Switches: call plans are on by default (``FLASHLESSON_CALL_PLANS=0``, or ``calls.ENABLED =
False``, sends every call through the full path). They were written against a fake driver
(``scripts/profile_host.py --check``, in the tests) and then checked on the H200 on 2026-12-01
by ``scripts/gpu_overhead_check.py``: every replay equal bitwise to its first call and to
Numba's own launch, a ``flashlesson.torch`` step captured in a CUDA graph and replayed, 743
replays of 23 recorded keys (docs/logs/2026-12-01_host_time_h200.log). Call plans follow the launch
layer's switch too (``FLASHLESSON_FAST_LAUNCH=0``
or a fast path that turned itself off: no replay). ``launch.clear_plans()`` forgets them.
"""

import os
import sys

from . import arrays, device, launch
from .arrays import DevArray

ENABLED = os.environ.get("FLASHLESSON_CALL_PLANS", "1").strip() != "0"
STATS = {"recorded": 0, "replayed": 0, "not replayable": 0}
MAX_CALLS = 1024                # the table is cleared past this many keys
PLANS = {}                      # key → CallPlan, or None: that key takes the full path


def forget():
    """Forget every call plan (``launch.clear_plans`` calls it)."""
    PLANS.clear()


launch.on_clear(forget)


def no_dropout(p):
    """True if a ``dropout_p`` is a plain 0 (an int or a float: bools and strings take the
    full path, which refuses them)."""
    return (type(p) is float or type(p) is int) and p == 0


def tensor_facts(tensors):
    """(facts, pointers) of torch CUDA tensors for a call key — per tensor (shape, dtype,
    device index, address modulo 16) — or (None, None) when one is not
    exactly a contiguous CUDA ``torch.Tensor`` (a subclass, a CPU, sparse or strided one, or one
    carrying torch's lazy negation or conjugation bit: those calls take the full path, which
    accepts, resolves or names them)."""
    torch = sys.modules.get("torch")
    if torch is None or not ENABLED or device.SIMULATOR:
        return None, None
    tensor = torch.Tensor
    facts, ptrs = [], []
    try:
        for t in tensors:
            if type(t) is not tensor or not t.is_cuda or not t.is_contiguous() or \
                    t.is_neg() or t.is_conj():
                return None, None           # (a lazy negation: the full path resolves it)
            p = t.data_ptr()
            ptrs.append(p)
            facts += (t.shape, t.dtype, t.get_device(), p & 15)
    except (RuntimeError, NotImplementedError):     # (is_contiguous of a sparse tensor)
        return None, None
    return tuple(facts), ptrs


def lookup(key):
    """The call plan of ``key`` if it can be replayed now, else None (then the caller takes
    the full path, through ``run``)."""
    try:
        plan = PLANS.get(key)
    except TypeError:                   # (an unhashable option: the full path names it)
        return None
    if plan is None or not launch.FAST or launch.fast_state() is not None or \
            arrays.recording():
        return None                     # (inside another call's recording: its full path)
    return plan


def run(key, tensors, call):
    """The full path ``call()`` of a call that missed: its result, and the key's call plan
    recorded from it (None stored when the call cannot be replayed: the key then always takes
    the full path). A call that passes one tensor twice (``q is k``) records nothing: its
    slots would be shared, and the next call with distinct tensors records the key."""
    try:
        seen = key in PLANS
    except TypeError:
        return call()
    if seen or arrays.recording() or not launch.FAST or launch.fast_state() is not None or \
            len(set(map(id, tensors))) != len(tensors):
        return call()
    events = []
    with arrays.recording_into(events):
        result = call()                 # (raises: nothing recorded)
    if len(PLANS) >= MAX_CALLS:
        PLANS.clear()
    plan = PLANS[key] = CallPlan.record(tensors, result, events)
    STATS["recorded" if plan is not None else "not replayable"] += 1
    return result


class _Step:
    """One launch of a call plan: its plan, the parameters with their fixed values, the slots
    where a data pointer goes — (parameter index, pointer index, byte offset) — and, where the
    launch layer has them, the parameters packed once (``launch.Packed``)."""

    __slots__ = ("plan", "params", "slots", "packed")

    def __init__(self, plan, params, slots):
        self.plan, self.params, self.slots = plan, params, slots
        self.packed = launch.packed(plan, params)

    def __call__(self, ptrs, stream):
        if self.packed is not None:
            if not self.packed(self.slots, ptrs, stream):
                return
            self.packed = None          # (the driver refused it: cuda.core's launch from now
            #                             on, which raises if the launch itself is wrong)
        params = self.params.copy()
        for j, k, offset in self.slots:
            params[j] = ptrs[k] + offset
        self.plan.launch_params(params, stream)


def _step(event, owners, bases):
    """The _Step of a recorded launch (plan, args), its pointers found among ``owners`` (the
    call's tensors, then its allocations; ``bases`` their data pointers); None if it cannot be
    replayed (a slow plan, an array that is not an input, an allocation or a placeholder)."""
    plan, args = event
    if not plan.fast:
        return None
    params = plan.params(args)
    slots = []
    for i, j in plan.arrays:
        a = args[i]
        if type(a) is not DevArray:
            return None
        if launch.is_placeholder(a):
            continue                    # (a fixed array: its pointer stays in params)
        k = next((n for n, o in enumerate(owners) if a.owner is o), None)
        if k is None:
            return None
        slots.append((j, k, a.ptr - bases[k]))
    return _Step(plan, params, tuple(slots))


class _Beside:
    """Two steps recorded by ``launch.launch_beside``: the first on the call's stream, the
    second on the side stream between a fork and a join, as the full path launched them."""

    __slots__ = ("first", "second")

    def __init__(self, first, second):
        self.first, self.second = first, second

    def __call__(self, ptrs, stream):
        launch.pair_on(stream, self.first, ptrs, self.second, ptrs)


class CallPlan:
    """A recorded call (see the module docstring). ``plan(ptrs, tensors)`` replays it on the
    key's tensors (``ptrs``: their data pointers); returns the call's result."""

    __slots__ = ("device", "index", "outputs", "steps", "results", "single")

    def __call__(self, ptrs, tensors):
        """The call's results on ``tensors`` (the key's, in its order; ``ptrs`` their data
        pointers). An output of an input's shape and dtype is ``torch.empty_like`` of that
        input (contiguous, as every key's tensor is): on the H200's host 3.2 µs against 5.0
        for ``torch.empty(shape, dtype=, device=)`` (scripts/host_micro.py)."""
        STATS["replayed"] += 1
        torch = sys.modules["torch"]
        empty, device = torch.empty, self.device
        outs = [empty(*shape or ((),), dtype=dtype, device=device) if like is None else
                torch.empty_like(tensors[like]) for shape, dtype, like in self.outputs]
        if arrays.POISON:
            for t in outs:
                arrays.poison(t)
        ptrs = ptrs + [t.data_ptr() for t in outs]
        stream = arrays.torch_stream(self.index)
        for step in self.steps:
            step(ptrs, stream)
        if self.single:
            return outs[self.results[0]]
        return tuple(outs[i] for i in self.results)

    @classmethod
    def record(cls, tensors, result, events):
        """The call plan of a full-path call, from its recorded events; None if the call did
        something a replay would not reproduce."""
        torch = sys.modules["torch"]
        allocs = [t for kind, t in events if kind == "alloc"]
        owners = list(tensors) + allocs
        bases = [t.data_ptr() for t in owners]
        single = not isinstance(result, tuple)
        results = []
        for r in ((result,) if single else result):
            if type(r) is not torch.Tensor or not r.is_contiguous():
                return None
            where = [i for i, a in enumerate(allocs) if a.data_ptr() == r.data_ptr() and
                     a.numel() * a.element_size() == r.numel() * r.element_size()]
            if len(where) != 1 or where[0] in results:
                return None
            results.append(where[0])
        steps = []
        for kind, event in events:
            if kind == "launch":
                step = _step(event, owners, bases)
            elif kind == "beside":      # (launch.launch_beside: two steps, forked and joined)
                pair = [_step(e, owners, bases) for e in event]
                step = None if None in pair else _Beside(*pair)
            else:
                continue
            if step is None:
                return None
            steps.append(step)
        first = tensors[0]
        self = cls()
        self.device, self.index = first.device, first.get_device()
        outputs = [(tuple(a.shape), a.dtype) for a in allocs]
        for i, r in zip(results, (result,) if single else result):
            outputs[i] = (tuple(r.shape), r.dtype)          # (allocated as returned)
        like = {}                       # (shape, dtype) → the first input that has them
        for n, t in enumerate(tensors):
            like.setdefault((tuple(t.shape), t.dtype), n)
        self.outputs = [(shape, dtype, like.get((shape, dtype)))
                        for shape, dtype in outputs]
        self.steps, self.results, self.single = tuple(steps), tuple(results), single
        return self
