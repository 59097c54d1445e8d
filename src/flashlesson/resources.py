"""``flashlesson.resources``: §47's table — what each kernel costs the SM, from Numba's own queries.

§47's trade-off: FlashAttention moves fewer bytes (§25, ``flashlesson.traffic``) by holding
more on chip — registers for S, m, l and acc, shared memory for the tiles — and so fits fewer
blocks on an SM (lower occupancy). This module makes the resources a table: it runs each
method of the project once on a GPU with every kernel launch recorded, then asks Numba's
dispatcher about the compiled kernel that ran:

    get_regs_per_thread        registers per thread (≤ 255; more live values spill)
    get_shared_mem_per_block   static shared memory (the tiles are dynamic: the launch's size)
    get_local_mem_per_thread   local memory per thread: spills and stack, in DRAM (cached)
    get_max_threads_per_block  the most threads a block of this kernel may have

and turns them, with the launch's threads and dynamic shared memory, into resident blocks per
SM and occupancy with the H200's limits (``flashlesson.occupancy.blocks_per_sm``: 65536
registers, 228 KB of shared memory per SM and 227 KB per block, 2048 threads, 32 blocks).

In Numba's CUDA simulator nothing is compiled, so there are no registers or local memory to
ask for: ``resource_report`` raises ``ResourcesUnavailable`` saying so, and ``flashlesson
resources`` prints that message and the part of the table that needs no compiler (threads and
shared memory of the flash kernels' H200 tiles, occupancy from those alone).

How to run: ``flashlesson resources [--d 64] [--n 1024] [--json FILE]`` (GPU);
``python examples/s46_s47_profile_and_resources.py``.

``record_launches()`` (also used by ``scripts/profile_io.py`` to name the kernels Nsight Compute
profiles) wraps ``CUDADispatcher.call``, the one path every ``kernel[grid, block, stream,
smem](*args)`` takes in numba-cuda 0.30, and restores it on exit.
"""

import sys
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from . import device
from .occupancy import H200, blocks_per_sm

SIMULATOR_MESSAGE = (
    "registers, local memory and static shared memory per kernel are only known on a GPU: "
    "Numba's CUDA simulator runs the kernels as Python and compiles nothing, so the "
    "dispatcher queries (get_regs_per_thread, get_shared_mem_per_block, "
    "get_local_mem_per_thread, get_max_threads_per_block) do not exist there. Run "
    "`flashlesson resources` on a GPU; threads, tile shared memory and the occupancy they "
    "allow need no GPU (below).")


class ResourcesUnavailable(device.DeviceError):
    """The resource queries need compiled kernels (a GPU)."""


# ---------------------------------------------------------------------------------------------
# Recording launches
# ---------------------------------------------------------------------------------------------
@dataclass
class Launch:
    """One kernel launch: its dispatcher, argument types and launch configuration."""
    name: str
    dispatcher: object = field(repr=False)
    argtypes: tuple = field(repr=False)
    grid: tuple
    block: tuple
    dynamic_smem: int
    label: str = ""                  # the workload that launched it

    @property
    def threads(self):
        return int(np.prod(self.block))

    @property
    def blocks(self):
        return int(np.prod(self.grid))


class Recorder:
    def __init__(self):
        self.launches = []
        self.label = ""


@contextmanager
def record_launches():
    """Record every kernel launch made inside the block (GPU only): yields a ``Recorder``
    whose ``launches`` fill in launch order; set ``recorder.label`` to tag them."""
    if device.SIMULATOR:
        raise ResourcesUnavailable(SIMULATOR_MESSAGE)
    from numba.cuda.dispatcher import CUDADispatcher
    rec = Recorder()
    original = CUDADispatcher.call

    def call(self, args, launch_config):
        before = len(rec.launches)
        out = original(self, args, launch_config)
        if len(rec.launches) == before:      # (a dispatcher that handed the launch to a
            #                                   specialization of itself was recorded there)
            rec.launches.append(Launch(
                self.py_func.__name__, self, tuple(self.typeof_pyval(a) for a in args),
                tuple(launch_config.griddim), tuple(launch_config.blockdim),
                int(launch_config.sharedmem or 0), rec.label))
        return out

    from . import launch
    saved = launch.FAST                 # Numba's call, which is what is recorded, for every
    launch.FAST = False                 # launch inside (plans rebuilt on that path)
    launch.clear_plans()
    CUDADispatcher.call = call
    try:
        yield rec
    finally:
        CUDADispatcher.call = original
        launch.FAST = saved
        launch.clear_plans()


@dataclass(frozen=True)
class _Signature:
    """What the dispatcher's queries read of a signature: its argument types (the key of
    ``dispatcher.overloads``)."""
    args: tuple


def query(launch):
    """Numba's answers for the compiled kernel of ``launch``: a dict of registers, static
    shared memory, local memory per thread and max threads per block (None where the
    dispatcher does not know the overload)."""
    disp = launch.dispatcher
    sig = None
    if not disp.specialized:
        if launch.argtypes in disp.overloads:
            sig = _Signature(launch.argtypes)
        elif len(disp.overloads) == 1:
            sig = _Signature(next(iter(disp.overloads)))
        else:
            return dict.fromkeys(("registers", "static smem", "local bytes", "max threads"))
    return {"registers": disp.get_regs_per_thread(sig),
            "static smem": disp.get_shared_mem_per_block(sig),
            "local bytes": disp.get_local_mem_per_thread(sig),
            "max threads": disp.get_max_threads_per_block(sig)}


# ---------------------------------------------------------------------------------------------
# The workloads: one call of each method (shared with scripts/profile_io.py)
# ---------------------------------------------------------------------------------------------
@dataclass
class Workload:
    """One call of a library function on device-resident inputs: what §46 profiles and §47
    tabulates. kind: "softmax" (shape ROWS, N), "attention" or "backward" (B, H, N, d)."""
    kind: str
    method: str
    shape: tuple
    causal: bool = False

    @property
    def label(self):
        if self.kind == "softmax":
            return f"softmax {self.method} [{self.shape[0]}, {self.shape[1]}]"
        B, H, n, d = self.shape
        return (f"{self.kind} {self.method} B{B} H{H} N{n} d{d}"
                f"{' causal' if self.causal else ''}")

    def prepare(self, seed=0):
        """Inputs on the device (copied now, outside any measurement) → a function that runs
        the call once and waits for it. Outputs stay on the device."""
        from numba import cuda
        from .attention_methods import attention
        from .backward_methods import attention_backward
        from .softmax_methods import softmax
        rng = np.random.default_rng(seed)
        if self.kind == "softmax":
            x = cuda.to_device(rng.standard_normal(self.shape, dtype=np.float32))
            y = cuda.device_array(self.shape, np.float32)

            def run():
                softmax(x, method=self.method, out=y)
                cuda.synchronize()
            return run
        B, H, n, d = self.shape
        q, k, v, do = (cuda.to_device(rng.standard_normal((B, H, n, d), dtype=np.float32))
                       for _ in range(4))
        if self.kind == "attention":
            def run():
                attention(q, k, v, causal=self.causal, method=self.method, return_lse=True)
                cuda.synchronize()
            return run
        o, lse = attention(q, k, v, causal=self.causal, return_lse=True)

        def run():
            attention_backward(do, q, k, v, o, lse, causal=self.causal, method=self.method)
            cuda.synchronize()
        return run

    def model(self):
        """The traffic model of this call (``flashlesson.traffic``): name → Access."""
        from . import traffic
        if self.kind == "softmax":
            rows, n = self.shape
            return traffic.softmax_traffic(rows, n, self.method)
        fn = traffic.backward_traffic if self.kind == "backward" else traffic.attention_traffic
        B, H, n, d = self.shape
        return fn(B, H, n, n, d, self.method, self.causal)


def resource_workloads(n=1024, d=64, softmax_rows=64):
    """Small calls that compile and launch every kernel the methods use (resources do not
    depend on the size, only on the variant: N picks the softmax kernel, d the tiles)."""
    from .softmax_methods import METHODS
    out = [Workload("softmax", "auto", (softmax_rows, 1024)),
           Workload("softmax", "auto", (softmax_rows, 4096))]
    out += [Workload("softmax", m, (softmax_rows, 32 if m == "warp" else 4096))
            for m in METHODS if m not in ("naive", "warp_multi")]
    for kind in ("attention", "backward"):
        for method in ("naive", "flash"):
            out.append(Workload(kind, method, (1, 16, n, d)))
        out.append(Workload(kind, "flash", (1, 16, n, d), causal=True))
    return out


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------
RESOURCE_HEADERS = ["workload", "kernel", "grid", "threads", "registers", "local B (spills)",
                    "static smem B", "dynamic smem B", "max threads", "blocks / SM",
                    "limited by", "occupancy"]


def resource_report(n=1024, d=64, limits=H200, workloads=None):
    """Run each workload once (GPU) with its launches recorded; one row (a dict keyed by
    ``RESOURCE_HEADERS``) per distinct kernel launch of each workload."""
    if device.SIMULATOR:
        raise ResourcesUnavailable(SIMULATOR_MESSAGE)
    rows, seen = [], set()
    for w in workloads or resource_workloads(n, d):
        run = w.prepare()
        with record_launches() as rec:
            rec.label = w.label
            run()
        for launch in rec.launches:
            q = query(launch)
            key = (w.label, launch.name, launch.threads, launch.dynamic_smem, q["registers"])
            if key in seen:
                continue
            seen.add(key)
            smem = (q["static smem"] or 0) + launch.dynamic_smem
            occ = blocks_per_sm(launch.threads, smem, q["registers"], limits)
            rows.append({"workload": w.label, "kernel": launch.name,
                         "grid": "×".join(map(str, launch.grid)), "threads": launch.threads,
                         "registers": q["registers"], "local B (spills)": q["local bytes"],
                         "static smem B": q["static smem"],
                         "dynamic smem B": launch.dynamic_smem,
                         "max threads": q["max threads"], "blocks / SM": occ["blocks"],
                         "limited by": occ["limited by"],
                         "occupancy": f"{100 * occ['occupancy']:.1f}%"})
    return rows


def config_rows(d=64, limits=H200):
    """What needs no compiler: the flash kernels' H200 tiles for head dim d — threads and
    dynamic shared memory — and the blocks per SM those two allow (registers unknown)."""
    from .configs import BWD_GPU_CONFIGS, GPU_CONFIGS
    fwd = next(c for lim, c in GPU_CONFIGS if d <= lim)
    bwd = next(c for lim, c in BWD_GPU_CONFIGS if d <= lim)
    kv, qs = bwd.smem_bytes(d)
    t1, t2 = bwd.threads
    rows = []
    for kernel, tiles, threads, smem in (
            ("flash_forward", f"Br={fwd.Br} Bc={fwd.Bc} TR={fwd.TR} TC={fwd.TC}",
             fwd.threads, fwd.smem_bytes(d)),
            ("flash_bwd_dkdv", f"Bc={bwd.Bc} Br={bwd.Br} TR={bwd.TR} TC={bwd.TC}", t1, kv),
            ("flash_bwd_dq", f"Br={bwd.dq_Br} Bc={bwd.dq_Bc} TR={bwd.dq_TR} TC={bwd.dq_TC}",
             t2, qs)):
        occ = blocks_per_sm(threads, smem, None, limits)
        rows.append([kernel, tiles, threads, smem, occ["blocks"], occ["limited by"],
                     f"{100 * occ['occupancy']:.1f}%"])
    return rows


CONFIG_HEADERS = ["kernel", "H200 tiles", "threads", "dynamic smem B",
                  "blocks / SM (no registers)", "limited by", "occupancy at most"]


def resources_command(args):
    """``flashlesson resources``: the §47 table (GPU), or the message and the compiler-free
    part (simulator)."""
    import json
    from tabulate import tabulate
    d, n = getattr(args, "d", 64), getattr(args, "n", 1024)
    if device.SIMULATOR:
        print(f"flashlesson resources: {SIMULATOR_MESSAGE}")
        print(f"\nflash kernels, d = {d}, H200 limits ({H200.name}):")
        print(tabulate(config_rows(d), headers=CONFIG_HEADERS))
        return 0
    rows = resource_report(n, d)
    print(f"§47: kernel resources (Numba's queries), launches of B1 H16 N{n} d{d} and softmax "
          f"rows; occupancy with {H200.name} limits")
    print(tabulate([[r[h] for h in RESOURCE_HEADERS] for r in rows],
                   headers=RESOURCE_HEADERS))
    spills = [r for r in rows if r["local B (spills)"]]
    if spills:
        print("local memory (spills or stack) in: " + ", ".join(
            sorted({r["kernel"] for r in spills})), file=sys.stderr)
    if getattr(args, "json", None):
        with open(args.json, "w") as f:
            json.dump({"device": device.describe().get("device", ""), "rows": rows}, f,
                      indent=1, default=str)
    return 0


__all__ = ["CONFIG_HEADERS", "Launch", "RESOURCE_HEADERS", "ResourcesUnavailable",
           "SIMULATOR_MESSAGE", "Workload", "config_rows", "query", "record_launches",
           "resource_report", "resource_workloads", "resources_command"]
