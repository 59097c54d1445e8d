"""§46–47 on the hardware: DRAM bytes measured by Nsight Compute next to the IO model, and each
kernel's registers, shared memory and occupancy.

What you will learn: whether the bytes the lesson counts (§4, §14, §25, ``flashlesson.traffic``)
are the bytes the H200's DRAM moves. Naive attention should show three-plus kernels and the
N × N matrices S and P going through DRAM (GBs); flash one kernel moving about Q, K, V and O
once (MBs). Two model columns: *accesses* (every element read or written by a thread, what
the tests count in the simulator) and *compulsory* (each array a kernel touches, once:
``traffic.compulsory_traffic``). At sizes ≫ the 50 MB L2 the DRAM bytes should sit within ~10%
of the compulsory column; the accesses column is larger wherever re-reads hit L1/L2 (K/V tiles
re-read by every Q tile of a head, block_reread's three passes over a 16 KB row, GEMM operands
re-read per tile) — the ratio says how much the caches saved.

Run (GPU; Nsight Compute's ``ncu`` on PATH; about 2–3 minutes, most of it compiling):

    python3 scripts/profile_io.py --out $OUT            # tables → stdout and $OUT/profile_io.md
    python3 scripts/profile_io.py --out $OUT --quick    # three workloads only (a smoke test)

How: one profiled process (``ncu --clock-control none --profile-from-start off --csv
--log-file $OUT/ncu.csv --metrics dram__bytes_read.sum,… python3 scripts/profile_io.py
--worker …``). The worker runs each workload once to compile and warm up, then once more between
``cuda.profile_start()`` and ``profile_stop()``, so exactly one call per workload is profiled
(ncu replays each kernel several times: the launches are kept few, 25 in all). It records
those launches (``flashlesson.resources.record_launches``: kernel names in order, Numba's
register / shared / local memory queries) and each workload's model into
``$OUT/manifest.json``; this script then parses ncu's CSV, matches its kernels to the
manifest in order and writes ``$OUT/profile_io.md`` and ``$OUT/profile_io.json``. Without ncu
(or with ``--no-ncu``) the worker still runs, giving the model and resource tables.
Outputs: ``$OUT/profile_io.md``, ``profile_io.json``, ``manifest.json``, ``ncu.csv``,
``ncu_stdout.txt`` (the worker's output under ncu).
"""

import argparse
import csv
import datetime
import io
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum",
           "launch__registers_per_thread", "launch__shared_mem_per_block_static",
           "launch__shared_mem_per_block_dynamic",
           "sm__warps_active.avg.pct_of_peak_sustained_active")

# (kind, method, shape, causal): tensors ≫ the H200's 50 MB L2. Softmax: 2^26 float32 = 256 MB
# in, 256 MB out. Attention B2 H16 N4096 d64: Q, K, V, O 32 MB each; naive S, P 2 GB each.
SOFTMAX_ELEMENTS = 2 ** 26
ATTN = (2, 16, 4096, 64)
FULL = ([("softmax", "auto", (SOFTMAX_ELEMENTS // 1024, 1024), False)]
        + [("softmax", m, (SOFTMAX_ELEMENTS // 4096, 4096), False)
           for m in ("auto", "block_smem", "block_reread", "online", "three_pass")]
        + [("attention", "naive", ATTN, False), ("attention", "flash", ATTN, False),
           ("attention", "flash", ATTN, True),
           ("backward", "flash", ATTN, False), ("backward", "naive", ATTN, False)])
QUICK = [FULL[1], FULL[6], FULL[7]]


# ---------------------------------------------------------------------------------------------
# Parsing Nsight Compute's CSV (tested with a canned sample: tests/test_resources.py)
# ---------------------------------------------------------------------------------------------
class ParseError(ValueError):
    """ncu's output could not be read: the message says what was found instead."""


_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "Ki": 2.0 ** 10, "Mi": 2.0 ** 20, "Gi": 2.0 ** 30}
_TIME = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3,
         "ms": 1e-3, "second": 1.0, "s": 1.0}


def to_base(value, unit):
    """A metric value in base units: bytes (from byte, Kbyte, Mbyte, …, KB, MiB), seconds (from
    nsecond, usecond, …), else as given (%, register/thread). None for 'n/a' or empty."""
    text = str(value).strip().replace(",", "")
    if text in ("", "n/a", "N/A", "nan"):
        return None
    try:
        x = float(text)
    except ValueError:
        raise ParseError(f"metric value {value!r} ({unit}) is not a number")
    u = (unit or "").split("/")[0].strip()
    if u in _TIME:
        return x * _TIME[u]
    for suffix in ("byte", "B"):
        if u.endswith(suffix) and u[:-len(suffix)] in _PREFIX:
            return x * _PREFIX[u[:-len(suffix)]]
    return x


def parse_ncu_csv(text):
    """Kernels profiled, in order: a list of {"id", "name", "block", "grid", metric: value in
    base units}. Lines before ncu's header (its ==PROF== messages, the program's output) are
    skipped; an ==ERROR== line or a missing header raises ``ParseError`` quoting it."""
    lines = text.splitlines()
    errors = [ln for ln in lines if ln.startswith("==ERROR==")]
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        why = "; ".join(errors[:3]) or (lines[-1] if lines else "empty output")
        raise ParseError(f"no CSV header (a line starting with \"ID\") in ncu's output: {why}")
    body = [ln for ln in lines[start:] if ln.startswith('"')]
    reader = csv.DictReader(io.StringIO("\n".join(body)))
    need = {"ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"}
    if not need <= set(reader.fieldnames or ()):
        raise ParseError(f"ncu's CSV lacks columns {sorted(need - set(reader.fieldnames))}; "
                         f"header: {reader.fieldnames}")
    kernels = {}
    for row in reader:
        k = kernels.setdefault(row["ID"], {"id": int(row["ID"]), "name": row["Kernel Name"],
                                           "block": row.get("Block Size", ""),
                                           "grid": row.get("Grid Size", "")})
        k[row["Metric Name"]] = to_base(row["Metric Value"], row["Metric Unit"])
    if errors and not kernels:
        raise ParseError("; ".join(errors[:3]))
    return sorted(kernels.values(), key=lambda k: k["id"])


# ---------------------------------------------------------------------------------------------
# Matching ncu's kernels to the worker's manifest, and the tables
# ---------------------------------------------------------------------------------------------
def match(manifest, kernels):
    """Attach ncu's kernels, in order, to the manifest's launches. Returns (workloads with a
    "measured" list per launch, warnings). A count mismatch or a name that does not contain
    the launch's Python name is reported, never silently accepted."""
    warnings = []
    launches = [(w, i) for w in manifest["workloads"] for i in range(len(w["launches"]))]
    if len(launches) != len(kernels):
        warnings.append(f"ncu profiled {len(kernels)} kernels, the worker launched "
                        f"{len(launches)} in its profiled ranges: matched in order as far as "
                        "both go")
    for w in manifest["workloads"]:
        w["measured"] = [None] * len(w["launches"])
    for (w, i), k in zip(launches, kernels):
        name = w["launches"][i]["name"]
        if name not in k["name"]:
            warnings.append(f"{w['label']}: launch {i} is {name!r} but ncu's kernel {k['id']} "
                            f"is {k['name'][:80]!r}")
        w["measured"][i] = k
    return manifest["workloads"], warnings


def _mb(x):
    return "" if x is None else f"{x / 1e6:,.1f}"


def _ratio(a, b):
    return "" if a is None or not b else f"{a / b:.2f}"


def tables(workloads):
    """(per-workload rows, per-kernel rows) as lists of lists, with their headers."""
    wrows, krows = [], []
    for w in workloads:
        meas = w.get("measured") or [None] * len(w["launches"])
        have = all(m is not None for m in meas) and meas
        dram_r = sum(m.get("dram__bytes_read.sum") or 0 for m in meas if m) if have else None
        dram_w = sum(m.get("dram__bytes_write.sum") or 0 for m in meas if m) if have else None
        dram = None if dram_r is None else dram_r + dram_w
        secs = sum(m.get("gpu__time_duration.sum") or 0 for m in meas if m) if have else None
        comp = sum(r + wr for _, r, wr in w["compulsory"])
        wrows.append([w["label"], len(w["launches"]), _mb(dram_r), _mb(dram_w), _mb(dram),
                      _mb(comp), _ratio(dram, comp), _mb(w["model bytes"]),
                      _ratio(w["model bytes"], dram),
                      "" if secs is None else f"{secs * 1e3:.3f}",
                      "" if not secs else f"{dram / secs / 1e9:,.0f}"])
        for i, launch in enumerate(w["launches"]):
            m = meas[i] or {}
            c = w["compulsory"][i] if i < len(w["compulsory"]) else (launch["name"], 0, 0)
            d_k = None if not m else (m.get("dram__bytes_read.sum") or 0) + \
                (m.get("dram__bytes_write.sum") or 0)
            krows.append([w["label"], launch["name"], launch["threads"],
                          launch.get("registers", ""), m.get("launch__registers_per_thread", ""),
                          launch.get("local bytes", ""),
                          launch.get("static smem", ""), launch["dynamic smem"],
                          launch.get("occupancy", ""),
                          "" if m.get("sm__warps_active.avg.pct_of_peak_sustained_active") is None
                          else f"{m['sm__warps_active.avg.pct_of_peak_sustained_active']:.1f}%",
                          _mb(m.get("dram__bytes_read.sum")), _mb(m.get("dram__bytes_write.sum")),
                          _mb(c[1] + c[2]), _ratio(d_k, c[1] + c[2]),
                          "" if m.get("gpu__time_duration.sum") is None
                          else f"{m['gpu__time_duration.sum'] * 1e3:.3f}"])
    return (WORKLOAD_HEADERS, wrows), (KERNEL_HEADERS, krows)


WORKLOAD_HEADERS = ["workload", "kernels", "DRAM read MB", "DRAM write MB", "DRAM MB",
                    "compulsory MB (model)", "DRAM / compulsory", "accesses MB (model)",
                    "accesses / DRAM", "time ms", "DRAM GB/s"]
KERNEL_HEADERS = ["workload", "kernel", "threads", "registers (numba)", "registers (ncu)",
                  "local B (numba)", "static smem B", "dynamic smem B", "occupancy (model)",
                  "achieved warps (ncu)", "DRAM read MB", "DRAM write MB", "compulsory MB",
                  "DRAM / compulsory", "time ms"]


def markdown(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# The worker: runs under ncu (or alone)
# ---------------------------------------------------------------------------------------------
def worker(plan, manifest_path):
    sys.path.insert(0, os.path.join(ROOT, "src"))
    os.environ.setdefault("FLASHLESSON_DEVICE", "gpu")
    import flashlesson  # noqa: F401 - picks the device (FLASHLESSON_DEVICE=gpu above)
    from numba import cuda
    from flashlesson import device, traffic
    from flashlesson.occupancy import blocks_per_sm
    from flashlesson.resources import Workload, query, record_launches
    out = {"device": device.describe(), "date": datetime.date.today().isoformat(),
           "workloads": []}
    for kind, method, shape, causal in plan:
        w = Workload(kind, method, tuple(shape), causal)
        t0 = time.time()
        run = w.prepare()
        run()                                           # compile, warm up: not profiled
        with record_launches() as rec:
            cuda.profile_start()
            run()                                       # the one profiled call
            cuda.profile_stop()
        model = w.model()
        launches = []
        for launch in rec.launches:
            q = query(launch)
            occ = blocks_per_sm(launch.threads, (q["static smem"] or 0) + launch.dynamic_smem,
                                q["registers"])
            launches.append({"name": launch.name, "grid": list(launch.grid),
                             "threads": launch.threads, "dynamic smem": launch.dynamic_smem,
                             **q, "occupancy": f"{100 * occ['occupancy']:.1f}%"})
        out["workloads"].append({
            "label": w.label, "kind": kind, "method": method, "shape": list(shape),
            "causal": causal, "launches": launches,
            "model bytes": traffic.total_bytes(model),
            "compulsory": traffic.compulsory_traffic(kind, method, model)})
        print(f"{w.label}: {len(launches)} launch(es) {[x['name'] for x in launches]}, "
              f"{time.time() - t0:.1f} s", flush=True)
    with open(manifest_path, "w") as f:
        json.dump(out, f, indent=1, default=str)
    return 0


# ---------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------
def report(manifest, kernels, warnings, out_dir, ncu_note):
    workloads, more = match(manifest, kernels) if kernels else (manifest["workloads"], [])
    warnings = warnings + more
    (wh, wr), (kh, kr) = tables(workloads)
    dev = manifest.get("device", {}).get("device", "?")
    lines = [f"# §46–47: DRAM bytes (Nsight Compute) vs the IO model — {dev}, "
             f"{manifest.get('date', '')}", "", ncu_note, "", markdown(wh, wr), "",
             "Per kernel (registers and local memory: Numba's queries; achieved warps: "
             "ncu's sm__warps_active, % of the SM's peak):", "", markdown(kh, kr)]
    if warnings:
        lines += ["", "Warnings:", ""] + [f"- {x}" for x in warnings]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(out_dir, "profile_io.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out_dir, "profile_io.json"), "w") as f:
        json.dump({"workloads": workloads, "warnings": warnings}, f, indent=1, default=str)
    return 0 if not warnings else 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT", "."), help="output folder ($OUT)")
    p.add_argument("--quick", action="store_true", help="three workloads only")
    p.add_argument("--no-ncu", action="store_true", help="run the worker without profiling")
    p.add_argument("--ncu", default="ncu", help="the ncu executable (default: ncu on PATH)")
    p.add_argument("--timeout", type=float, default=500, help="seconds for the profiled run")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--manifest", help=argparse.SUPPRESS)
    p.add_argument("--plan", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(json.loads(args.plan), args.manifest)

    os.makedirs(args.out, exist_ok=True)
    manifest_path = os.path.join(args.out, "manifest.json")
    csv_path = os.path.join(args.out, "ncu.csv")
    plan = QUICK if args.quick else FULL
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--manifest", manifest_path,
           "--plan", json.dumps(plan)]
    ncu = None if args.no_ncu else shutil.which(args.ncu)
    if ncu is None and not args.no_ncu:
        print(f"profile_io: {args.ncu!r} is not on PATH (Nsight Compute: install the CUDA "
              "toolkit's nsight-compute, or pass --ncu /path/to/ncu); running the worker "
              "alone: model and resource tables, no DRAM columns", file=sys.stderr)
    if ncu:
        cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--csv",
               "--log-file", csv_path, "--metrics", ",".join(METRICS)] + cmd
    print("running: " + " ".join(cmd[:12]) + " …", flush=True)
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired as exc:
        print(f"profile_io: the profiled run took more than {args.timeout:.0f} s; its output "
              f"so far:\n{(exc.stdout or '')[-3000:]}", file=sys.stderr)
        return 2
    with open(os.path.join(args.out, "ncu_stdout.txt"), "w") as f:
        f.write(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    print(f"worker finished in {time.time() - t0:.0f} s (rc {proc.returncode})")
    if proc.returncode != 0 or not os.path.exists(manifest_path):
        print(f"profile_io: the worker failed (rc {proc.returncode}):\n{proc.stdout[-2000:]}\n"
              f"{proc.stderr[-4000:]}", file=sys.stderr)
        return 2
    with open(manifest_path) as f:
        manifest = json.load(f)
    kernels, warnings, note = [], [], "ncu: not run (DRAM columns empty)."
    if ncu:
        try:
            with open(csv_path) as f:
                kernels = parse_ncu_csv(f.read())
            note = (f"ncu {' '.join(['--clock-control none', '--metrics'] + list(METRICS))}: "
                    f"{len(kernels)} kernels profiled, one call per workload, caches flushed "
                    "before each kernel (ncu's default --cache-control all).")
        except (OSError, ParseError) as exc:
            warnings.append(f"could not read ncu's CSV {csv_path}: {exc}")
            note = "ncu: its CSV could not be read (see the warnings)."
    return report(manifest, kernels, warnings, args.out, note)


if __name__ == "__main__":
    sys.exit(main())
