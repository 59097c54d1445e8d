"""The ``flashlesson`` command: tour, section N, methods, info, bench.

    flashlesson tour                  run every section's example and check, then a summary table
    flashlesson section 8             run one section's example
    flashlesson methods               the registries of softmax and attention methods
    flashlesson info                  device, versions, mode (GPU or simulator)
    flashlesson bench softmax [...]   GPU only: every method × N × dtype, GB/s, vs torch
    flashlesson bench attention       GPU only: naive and flash, TFLOP/s, vs torch SDPA
    flashlesson bench attention --backward   the same for the backward pass (§30–31)
    flashlesson bench attention --tc         tensor cores (§37) vs torch SDPA flash/cuDNN
                                      [--headdims 64,80,96,111,128]: d vs its padded D
    flashlesson bench hierarchy       GPU only: §26 GB/s of HBM, L2, shared memory, registers
    flashlesson bench overhead [--json F]   GPU + torch: host µs per public call vs torch
    flashlesson bench ladder [--only NAME …] [--json F] [--write]   GPU: each fast kernel file's
                                      ladder (lesson kernel → each step) checked and timed;
                                      --write puts the numbers into the files' tables
    flashlesson bench ladder --write --from F.json   (any machine) a saved run into the tables
    flashlesson traffic softmax --method M --shape ROWS N      global reads/writes per array:
    flashlesson traffic attention --method naive|flash --shape B H NQ NK D [--causal]
                                      [--backward] [--key-padding L]
                                      the model beside the count (simulator; see traffic.py)
    flashlesson traffic sram --shape N D [--sram KIB ...] [--plot F.png]   §48: HBM bytes vs
                                      on-chip SRAM size, flash vs naive vs the paper's bounds
    flashlesson resources             §47: registers, shared memory, occupancy per kernel (GPU)
    flashlesson plot RESULTS.json OUT.png     a saved bench JSON as a picture (matplotlib)
"""

import argparse
import json
import sys

from tabulate import tabulate


def _cmd_info(args):
    from . import device
    facts = device.describe()
    print(tabulate(list(facts.items()), tablefmt="plain"))
    return 0


def _cmd_methods(args):
    from .registry import attention_table, softmax_table
    print("Softmax methods — flashlesson.softmax(x, method=…, tier='fast' | 'lesson')")
    print()
    print(softmax_table(args.format))
    print()
    print("Attention methods — flashlesson.attention(q, k, v, method=…, tier='fast' | 'lesson')")
    print()
    print(attention_table(args.format))
    return 0


def _cmd_tour(args):
    from .tour import run_tour
    return run_tour(sections=None, verbose=args.verbose)


def _cmd_section(args):
    from .tour import run_tour
    return run_tour(sections=args.numbers, verbose=True)


def _headdims(text):
    """--headdims: comma-separated head dims, each 1 … 256."""
    try:
        dims = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not dims or any(not 1 <= x <= 256 for x in dims):
        raise argparse.ArgumentTypeError(f"head dims must be in 1 … 256, got {text!r}")
    return dims


def _cmd_bench_attention(args):
    from . import bench
    kernels = None
    if args.headdims and not args.tc:
        print("--headdims: goes with --tc (the tensor-core kernels' head-dim sweep)",
              file=sys.stderr)
        return 2
    tc_shapes = (bench.tc_headdim_shapes(args.headdims) if args.headdims else
                 bench.ATTENTION_SHAPES + (() if args.quick else bench.tc_headdim_shapes()))
    if args.tc and args.backward:
        results = bench.bench_attention_tc_backward(shapes=tc_shapes)
        kernels = bench.tc_kernel_report()
        cols = ["B", "H", "N", "d", "D", "causal", "tc bwd TFLOP/s", "tc bwd TFLOP/s at D",
                "sdpa flash bwd TFLOP/s",
                "sdpa cudnn bwd TFLOP/s", "tc bwd / flash", "tc bwd / cudnn", "tc bwd err",
                "sdpa flash bwd err", "tf32x3 bwd TFLOP/s", "sdpa efficient fp32 bwd TFLOP/s",
                "tf32x3 bwd / efficient", "tf32x3 bwd err", "sdpa efficient fp32 bwd err",
                "tc bwd MB held"]
    elif args.tc:
        results = bench.bench_attention_tc(shapes=tc_shapes)
        kernels = bench.tc_kernel_report()
        cols = ["B", "H", "N", "d", "D", "causal", "tc fp16 TFLOP/s", "tc fp16 TFLOP/s at D",
                "sdpa flash fp16 TFLOP/s",
                "sdpa cudnn fp16 TFLOP/s", "tc fp16 / flash", "tc fp16 / cudnn",
                "tc bf16 TFLOP/s", "sdpa flash bf16 TFLOP/s", "tc bf16 / flash",
                "tc fp32 TFLOP/s", "sdpa efficient fp32 TFLOP/s", "tc fp32 / efficient",
                "tc fp16 err", "sdpa flash fp16 err", "tc fp32 err", "sdpa efficient fp32 err"]
    elif args.backward:
        results = bench.bench_attention_backward()
        cols = ["B", "H", "N", "d", "causal", "flash bwd TFLOP/s", "naive bwd TFLOP/s",
                "sdpa math bwd TFLOP/s", "sdpa efficient bwd TFLOP/s", "flash / math",
                "flash / efficient", "flash rel err", "naive rel err", "flash bwd MB held",
                "naive bwd MB held"]
    else:
        shapes = bench.ATTENTION_SHAPES + (() if args.quick else bench.ATTENTION_SWEEP)
        results = bench.bench_attention(shapes=shapes, long_check=not args.quick)
        cols = ["B", "H", "N", "d", "causal", "flash TFLOP/s", "flash e2e TFLOP/s",
                "e2e/kernel", "naive TFLOP/s",
                "sdpa math TFLOP/s", "sdpa efficient TFLOP/s", "flash / math",
                "flash / efficient", "flash rel err", "flash MB held", "naive MB held",
                "flash host ms"]
    print()
    print(tabulate([[r.get(c, "") for c in cols] for r in results], headers=cols,
                   floatfmt=".3g"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, **({"kernels": kernels} if kernels else {})}, f,
                      indent=1, default=str)
    if args.plot:
        from .plots import plot_attention_bench
        plot_attention_bench({"results": results}, args.plot)
    bad = [r for r in results for m in ("flash", "naive")
           if r.get(f"{m} rel err") is not None and not r[f"{m} rel err"] < 1e-4]
    if bad:
        print(f"{len(bad)} measurement(s) failed the correctness check", file=sys.stderr)
        return 1
    return 0


def _cmd_bench_hierarchy(args):
    """§26: GB/s of HBM, L2, shared memory and registers (flashlesson.hierarchy)."""
    from . import hierarchy
    result = hierarchy.measure()
    print()
    print(f"{result['device']}, {result['SMs']} SMs, {result['date']}")
    print(hierarchy.table(result))
    print(" ".join(f"{k}: {'yes' if v else 'NO'};" for k, v in result["ok"].items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if not result["ok"]["checks"]:
        print("a kernel failed its correctness check", file=sys.stderr)
        return 1
    return 0


def _cmd_bench_overhead(args):
    """Host µs per public call on torch tensors, beside torch's (issue 14)."""
    from . import bench
    records = bench.bench_overhead()
    print()
    print(tabulate([[r["function"], r["host_us"], r["torch_host_us"] or ""] for r in records],
                   headers=["call", "flashlesson host µs", "torch host µs"], floatfmt=".1f"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return 0


def _cmd_bench_ladder(args):
    """Issue 13's ladders: every fast kernel file's steps, checked and timed (flashlesson.ladder);
    --write: their numbers into the files' tables; --from: a saved run instead of measuring."""
    from . import device, ladder
    names = ladder.ladder_names()
    bad = [n for n in args.only or () if n not in names]
    if bad:
        print(f"--only: expected some of {', '.join(names)}; got {', '.join(bad)}",
              file=sys.stderr)
        return 2
    if args.tiny and (args.write or args.load):
        print("--tiny: checks the command in the simulator; it measures nothing to write",
              file=sys.stderr)
        return 2
    if args.load and not args.write:
        print("--from: goes with --write (the saved numbers into the tables)", file=sys.stderr)
        return 2
    chosen = tuple(lad for lad in ladder.LADDERS if not args.only or lad.name in args.only)
    if args.load:
        try:
            results, dev, date = ladder.load(args.load)
        except (OSError, ValueError, KeyError) as exc:
            print(f"flashlesson bench ladder: {args.load}: {exc}", file=sys.stderr)
            return 2
    else:
        if args.tiny and not device.SIMULATOR:
            print("--tiny: runs in the simulator (FLASHLESSON_DEVICE=sim)", file=sys.stderr)
            return 2
        results = ladder.measure(chosen, tiny=args.tiny)
        dev = "simulator" if device.SIMULATOR else \
            ladder.short_device(device.describe()["device"])
        date = ladder.today()
        print()
        print(f"{dev}, {date}" + (" (tiny shapes: checks only)" if args.tiny else ""))
        print(tabulate(ladder.table_rows(results), headers=ladder.TABLE_HEADERS,
                       disable_numparse=True))
        if args.json:
            ladder.save(args.json, results, dev, date)
    if args.write:
        for path in ladder.write(results, dev, date, ladders=chosen):
            print(f"wrote {path}")
    failed = [r for r in results if not r["passed"]]
    if failed:
        print(f"{len(failed)} step(s) failed the correctness check: "
              + ", ".join(f"{r['ladder']} {r['step']}" for r in failed), file=sys.stderr)
        return 1
    return 0


def _cmd_bench(args):
    from . import bench, softmax_methods as softmax
    if args.what == "ladder":
        return _cmd_bench_ladder(args)
    if args.what == "attention":
        return _cmd_bench_attention(args)
    if args.what == "hierarchy":
        return _cmd_bench_hierarchy(args)
    if args.what == "overhead":
        return _cmd_bench_overhead(args)
    methods = args.method or None
    for m in methods or ():
        if m not in softmax.CHOICES:
            print(f"--method: expected one of {', '.join(softmax.CHOICES)}; got {m!r}",
                  file=sys.stderr)
            return 2
    results, copy_bw = bench.bench_softmax(ns=args.n or bench.DEFAULT_NS, dtypes=args.dtype,
                                           methods=methods, elements=args.elements)
    cols = ["dtype", "N", "method", "runs", "ms", "GB/s", "% copy", "torch GB/s", "vs torch",
            "e2e GB/s", "e2e/kernel",
            "max err"]
    table = [[r.get(c, "") for c in cols] for r in results]
    print()
    print(tabulate(table, headers=cols, floatfmt=".3g"))
    summary = bench.summarize(results)
    if summary:
        print()
        print(tabulate([[dt, mn, gm] for dt, (mn, gm) in summary.items()],
                       headers=["dtype", "auto/torch min", "auto/torch geomean"], floatfmt=".3f"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"copy GB/s": copy_bw, "results": results}, f, indent=1)
    if args.plot:
        bench.plot_softmax(results, copy_bw, args.plot)
    bad = [r for r in results if not r["max err"] < 1e-2]
    if bad:
        print(f"{len(bad)} measurement(s) failed the correctness check", file=sys.stderr)
        return 1
    return 0


def _cmd_traffic(args):
    """The model of each global array's element reads and writes beside the counted ones (the
    kernels run in the simulator, their device arrays instrumented: flashlesson.traffic)."""
    import numpy as np
    from . import device, traffic
    from .attention_methods import CHOICES as ATTENTION_CHOICES
    from .softmax_methods import CHOICES as SOFTMAX_CHOICES, choose
    if args.what == "sram":
        return traffic.sram_command(args)
    want = 2 if args.what == "softmax" else 5
    if len(args.shape) != want or min(args.shape) < 1:
        what = "ROWS N" if args.what == "softmax" else "B H NQ NK D"
        print(f"--shape: expected {want} positive integers ({what}); got {args.shape}",
              file=sys.stderr)
        return 2
    choices = SOFTMAX_CHOICES if args.what == "softmax" else ATTENTION_CHOICES
    method = args.method or ("auto" if args.what == "softmax" else "flash")
    if method not in choices:
        print(f"--method: expected one of {', '.join(choices)}; got {method!r}", file=sys.stderr)
        return 2
    if method == "flash_async" and not args.model_only:
        print("flashlesson traffic: the counter sees the element accesses of threads; "
              "flash_async's K and V are read by the copy engine (cp.async.bulk), which it "
              "cannot see: pass --model-only (the model is flash's: the same rows, copied)",
              file=sys.stderr)
        return 2
    if not args.model_only and not device.SIMULATOR:
        print("flashlesson traffic: the counter runs kernels in Numba's CUDA simulator and this "
              "process uses the GPU (FLASHLESSON_DEVICE=gpu?); unset it, or pass --model-only",
              file=sys.stderr)
        return 2
    where = "simulator" if device.SIMULATOR else "GPU"
    try:
        if args.what == "softmax":
            rows, n = args.shape
            dtype = np.dtype(args.dtype)
            name = choose(n, dtype) if method == "auto" else method
            model = traffic.softmax_traffic(rows, n, name, dtype, args.threads)
            title = f"softmax {name!r}, x [{rows}, {n}] {dtype.name}"
            counted = None if args.model_only else \
                traffic.count_softmax(rows, n, name, dtype, args.threads)[0].arrays
        else:
            B, H, nq, nk, d = args.shape
            mask = traffic.padding_mask(B, nk, args.key_padding)
            model_fn, count_fn = traffic.attention_functions(args.backward)
            if not args.backward:           # §41–42's methods: their model is in loop_order
                from .loop_order import attention_traffic as model_fn
            model = model_fn(B, H, nq, nk, d, method, args.causal, key_padding_mask=mask)
            title = (f"attention{' backward' if args.backward else ''} {method!r}, q [{B}, {H}, "
                     f"{nq}, {d}], k, v [{B}, {H}, {nk}, {d}] float32"
                     f"{', causal' if args.causal else ''}"
                     f"{', key padding' if mask is not None else ''}"
                     f"{'' if args.backward else ', return_lse'}")
            counted = None if args.model_only else count_fn(
                B, H, nq, nk, d, method, args.causal, key_padding_mask=mask)[0].arrays
    except ValueError as exc:
        print(f"flashlesson traffic: {exc}", file=sys.stderr)
        return 2
    print(f"{title}: element accesses by threads, with the launch parameters of the {where}")
    if counted is None:
        rows_ = [[k, a.elements, a.reads, a.writes, a.bytes] for k, a in model.items()]
        rows_.append(["total", "", sum(r[2] for r in rows_), sum(r[3] for r in rows_),
                      traffic.total_bytes(model)])
        print(tabulate(rows_, headers=["array", "elements", "reads (model)", "writes (model)",
                                       "bytes (model)"]))
    else:
        print("(counted: the kernels run in Numba's CUDA simulator, their arrays instrumented)")
        print(tabulate(traffic.compare(model, counted), headers=traffic.COMPARE_HEADERS))
    if args.what == "attention":
        B, H, nq, nk, d = args.shape
        model_fn, _ = traffic.attention_functions(args.backward)
        naive, flash = (traffic.total_bytes(model_fn(B, H, nq, nk, d, m, args.causal,
                                                     key_padding_mask=mask))
                        for m in ("naive", "flash"))
        flops = (traffic.backward_flops if args.backward else traffic.attention_flops)(
            B, H, nq, nk, d, args.causal)
        print(f"model bytes: naive {naive}, flash {flash}, naive / flash = {naive / flash:.2f}; "
              f"matmul FLOPs (§16) {flops}, FLOPs per byte: naive {flops / naive:.2f}, flash "
              f"{flops / flash:.2f}")
    if counted is not None and any(r[-1] != "yes" for r in traffic.compare(model, counted)):
        print("the model and the count disagree", file=sys.stderr)
        return 1
    return 0


def build_parser():
    p = argparse.ArgumentParser(prog="flashlesson", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("info", help="device, versions, mode")
    s.set_defaults(fn=_cmd_info)
    s = sub.add_parser("methods", help="the softmax methods of the registry")
    s.add_argument("--format", default="github", help="tabulate format (default: github)")
    s.set_defaults(fn=_cmd_methods)
    s = sub.add_parser("tour", help="run every section in order, then a summary table")
    s.add_argument("-v", "--verbose", action="store_true", help="show each example's output")
    s.set_defaults(fn=_cmd_tour)
    s = sub.add_parser("section", help="run the example of one or more sections")
    s.add_argument("numbers", nargs="+", type=int, metavar="N")
    s.set_defaults(fn=_cmd_section)
    s = sub.add_parser("bench", help="GPU benchmarks")
    s.add_argument("what", choices=["softmax", "attention", "hierarchy", "overhead", "ladder"])
    s.add_argument("--n", type=int, nargs="+", help="row lengths (default 32 … 32768)")
    s.add_argument("--dtype", nargs="+", default=["float32", "float16"],
                   choices=["float32", "float16"])
    s.add_argument("--method", nargs="+", help="methods (default: auto and every method)")
    s.add_argument("--elements", type=int, default=2 ** 26, help="elements per tensor")
    s.add_argument("--json", help="write the results as JSON to this file")
    s.add_argument("--plot", help="write a PNG (needs matplotlib): softmax GB/s vs N, "
                   "attention TFLOP/s vs N")
    s.add_argument("--quick", action="store_true",
                   help="attention: the three main shapes only, no N sweep (--tc: no head-dim "
                   "sweep)")
    s.add_argument("--backward", action="store_true",
                   help="attention: the backward pass (§30–31) vs torch SDPA's backward")
    s.add_argument("--tc", action="store_true",
                   help="attention: tensor cores (§37), fp16/bf16/3xTF32 vs torch SDPA "
                        "flash/cuDNN/efficient")
    s.add_argument("--headdims", type=_headdims, metavar="D,D,…",
                   help="attention --tc: only B2 H16 N4096 at these head dims (1 … 256; "
                        "default: the three main shapes, then d = 64, 80, 96, 111, 128 there)")
    s.add_argument("--only", nargs="+", metavar="NAME",
                   help="ladder: these files' ladders only (softmax, attention, "
                        "attention_backward, attention_tc, …; default: all)")
    s.add_argument("--write", action="store_true",
                   help="ladder: put the measured numbers into the kernel files' tables")
    s.add_argument("--from", dest="load", metavar="F.json",
                   help="ladder --write: the numbers of a saved run (--json) instead of "
                        "measuring (any machine)")
    s.add_argument("--tiny", action="store_true",
                   help="ladder: tiny shapes in the simulator, every step checked, nothing "
                        "timed (checks the command itself)")
    s.set_defaults(fn=_cmd_bench)
    s = sub.add_parser("traffic", help="global reads/writes per array: model vs counted "
                       "(simulator)")
    s.add_argument("what", choices=["softmax", "attention", "sram"])
    s.add_argument("--method", help="softmax: auto or a registry method (default auto); "
                   "attention: naive or flash (default flash)")
    s.add_argument("--shape", type=int, nargs="+", required=True,
                   help="softmax: ROWS N; attention: B H NQ NK D; sram: N D")
    s.add_argument("--dtype", default="float32", choices=["float32", "float16"],
                   help="softmax, sram")
    s.add_argument("--backward", action="store_true",
                   help="attention: the backward pass (§30 flash, §31 naive)")
    s.add_argument("--key-padding", type=int, nargs="+", metavar="L",
                   help="attention: a key padding mask (§35), the first L keys of each batch "
                   "row valid (one L for all rows, or one per row)")
    s.add_argument("--sram", type=float, nargs="+", metavar="KIB",
                   help="sram: on-chip SRAM sizes in KiB (default 1 … 16384)")
    s.add_argument("--plot", help="sram: write a bytes-vs-SRAM PNG (needs matplotlib)")
    s.add_argument("--threads", type=int, help="softmax: threads per block (default: the "
                   "launcher's)")
    s.add_argument("--causal", action="store_true", help="attention only")
    s.add_argument("--model-only", action="store_true",
                   help="print the model only (any size; no simulation)")
    s.set_defaults(fn=_cmd_traffic)
    s = sub.add_parser("plot", help="draw a saved bench JSON as a PNG (needs matplotlib)")
    s.add_argument("results", help="a JSON written by flashlesson bench … --json")
    s.add_argument("out", help="the PNG to write")
    s.set_defaults(fn=_cmd_plot)
    s = sub.add_parser("resources", help="§47: registers, shared memory, occupancy per kernel "
                       "(GPU; the simulator has none)")
    s.add_argument("--d", type=int, default=64, help="head dimension of the attention runs")
    s.add_argument("--n", type=int, default=1024, help="sequence length of the attention runs")
    s.add_argument("--json", help="also write the table as JSON to this file")
    s.set_defaults(fn=_cmd_resources)
    return p


def _cmd_plot(args):
    """A saved bench JSON (--json) as a PNG (flashlesson.plots)."""
    from .plots import plot_file
    try:
        ok = plot_file(args.results, args.out)
    except (OSError, ValueError, KeyError) as exc:
        print(f"flashlesson plot: {args.results}: {exc}", file=sys.stderr)
        return 2
    if ok:
        print(f"wrote {args.out}")
    return 0 if ok else 1


def _cmd_resources(args):
    """§47: registers, shared memory, spills and occupancy of each kernel (GPU only)."""
    from .resources import resources_command
    return resources_command(args)


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.cmd == "traffic" and not args.model_only and "numba.cuda" not in sys.modules:
        import os       # the counter needs the simulator: chosen before numba.cuda loads
        os.environ.setdefault("FLASHLESSON_DEVICE", "sim")
    try:
        import flashlesson  # noqa: F401 - chooses the device and announces it once
    except RuntimeError as exc:     # flashlesson.DeviceError (the class comes with the package)
        if type(exc).__name__ != "DeviceError":
            raise
        print(f"flashlesson: {exc}", file=sys.stderr)
        return 2
    try:
        return args.fn(args)
    except flashlesson.DeviceError as exc:
        print(f"flashlesson: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
