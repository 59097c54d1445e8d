"""The ``flashlesson`` command (console script, or ``python -m flashlesson``): ``build_parser``
holds every subcommand and its options, ``main`` runs one. Its ``--help`` texts are
``DESCRIPTION``, ``EPILOG`` and each subparser's ``help``/``description``, written as plain
text for a terminal.

A command that runs kernels (tour, section, bench, traffic's counter, resources on a GPU) says
first, on stderr, which device runs them (``flashlesson.device.announce``), once its arguments
are checked; ``--help``, ``--version``, ``info``, ``methods``, ``plot`` and argument errors say
nothing of it.
"""

import argparse
import json
import sys

from tabulate import tabulate

DESCRIPTION = """\
Lesson 22 ("why softmax is hard to make fast, and how FlashAttention cuts
memory traffic") as numba.cuda kernels, each checked against a float64 NumPy
oracle and timed against PyTorch. Kernels run on the CUDA GPU, or in Numba's
CUDA simulator on the CPU when there is none (FLASHLESSON_DEVICE=gpu or sim
chooses)."""

EPILOG = """\
examples:
  flashlesson tour                         every section's example and checks
  flashlesson section 8 30                 the examples of §8 and §30
  flashlesson methods                      the softmax and attention methods
  flashlesson bench attention --backward   GPU: the backward pass vs torch SDPA
  flashlesson traffic attention --shape 1 2 64 64 16 --causal
  flashlesson COMMAND --help               the options of one command"""

BENCH_DESCRIPTION = """\
GPU benchmarks (the simulator refuses them, except ladder --tiny). Each kernel
is checked against a float64 reference on the benchmark's data before it is
timed.

  softmax             every method x N x dtype: GB/s, % of a device copy, vs
                      torch (--n N ..., --dtype ..., --method M ..., --elements)
  attention           naive and flash: TFLOP/s vs torch SDPA math and efficient
                      (--quick: the three main shapes, no N sweep)
  attention --backward    the same for the backward pass (§30-31)
  attention --tc      tensor cores (§37), fp16, bf16, 3xTF32 vs torch SDPA
                      flash, cuDNN, efficient (--headdims D,D,...: d vs its
                      padded D)
  hierarchy           §26: GB/s of HBM, L2, shared memory and registers
  overhead            host microseconds per public call, beside torch's
  ladder              each fast kernel file's ladder (lesson kernel, then each
                      step) checked and timed (--only NAME ...; --write: the
                      numbers into the files' tables; --from F.json: a saved
                      run's numbers)

--json F writes the results, --plot F.png draws them (needs matplotlib)."""

TRAFFIC_DESCRIPTION = """\
Global-memory reads and writes per array: the model (flashlesson.traffic) beside
the count of the kernels' element accesses, run in Numba's CUDA simulator.

  softmax     --shape ROWS N [--method M] [--dtype ...] [--threads T]
  attention   --shape B H NQ NK D [--method M] [--causal] [--backward]
              [--key-padding L ...]
  sram        --shape N D [--sram KIB ...] [--plot F.png]: §48, HBM bytes vs
              on-chip SRAM size, flash vs naive vs the paper's bounds (a model)

--model-only prints the model alone (any size, no simulation)."""


def _announce():
    """Say which device runs the kernels (once a process: ``flashlesson.device.announce``); a
    command calls it when its arguments are checked and it is about to run kernels."""
    from . import device
    device.announce()


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


def _tour_can_start(sections):
    """Whether the examples are there, one for each of ``sections`` (None: all); where not,
    ``run_tour`` says why and the device is not announced."""
    from . import tour
    try:
        examples = tour.list_examples()
    except tour.TourError:
        return False
    available = {s for secs, _ in examples for s in secs}
    return bool(examples) and (sections is None or set(sections) <= available)


def _cmd_tour(args):
    from .tour import run_tour
    if _tour_can_start(None):
        _announce()
    return run_tour(sections=None, verbose=args.verbose)


def _cmd_section(args):
    from .tour import run_tour
    if _tour_can_start(args.numbers):
        _announce()
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
    _announce_gpu()
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


def _announce_gpu():
    """_announce where kernels will run: on a GPU (the simulator refuses benchmarks with an
    error of its own)."""
    from . import device
    if not device.SIMULATOR:
        _announce()


def _cmd_bench_hierarchy(args):
    """§26: GB/s of HBM, L2, shared memory and registers (flashlesson.hierarchy)."""
    from . import hierarchy
    _announce_gpu()
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
    """Host µs per public call on torch tensors, beside torch's (flashlesson.bench)."""
    from . import bench
    _announce_gpu()
    records = bench.bench_overhead()
    print()
    print(tabulate([[r["function"], r["host_us"], r["torch_host_us"] or ""] for r in records],
                   headers=["call", "flashlesson host µs", "torch host µs"], floatfmt=".1f"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return 0


def _cmd_bench_ladder(args):
    """The ladders: every fast kernel file's steps, checked and timed (flashlesson.ladder);
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
        if args.tiny:
            _announce()
        else:
            _announce_gpu()
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
    _announce_gpu()
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
    if not args.model_only:
        _announce()
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


class _TopFormatter(argparse.RawDescriptionHelpFormatter):
    """The top-level help: every command's line beside its name ("resources" included, which
    argparse's measure of the names would put on a line of its own)."""

    def __init__(self, prog):
        super().__init__(prog)
        self._action_max_length = 16


def build_parser():
    import flashlesson
    raw = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog="flashlesson", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=_TopFormatter)
    p.add_argument("--version", action="version", version=f"flashlesson {flashlesson.__version__}")
    sub = p.add_subparsers(dest="cmd", title="commands", metavar="COMMAND")

    def command(name, help, description=None):
        description = description or help          # (a block laid out by hand stays as it is)
        return sub.add_parser(name, help=help, description=description, formatter_class=(
            raw if "\n" in description else argparse.HelpFormatter))

    s = command("info", "the device (GPU or simulator, and why), the versions",
                "The device that runs the kernels (the GPU, or Numba's CUDA simulator, and why), "
                "its facts and the versions of the software.")
    s.set_defaults(fn=_cmd_info)
    s = command("methods", "the softmax and attention methods, their sections",
                "The softmax and attention methods of the registry: each method's sections, "
                "tiers and limits.")
    s.add_argument("--format", default="github", help="tabulate format (default: github)")
    s.set_defaults(fn=_cmd_methods)
    s = command("tour", "every section's example and checks, then a summary",
                "Run every section's example and its checks in § order, then a summary table.")
    s.add_argument("-v", "--verbose", action="store_true", help="show each example's output")
    s.set_defaults(fn=_cmd_tour)
    s = command("section", "the examples of the given sections (section 8 30)",
                "Run the examples of the sections given, with their output and checks.")
    s.add_argument("numbers", nargs="+", type=int, metavar="N", help="a section (§) number")
    s.set_defaults(fn=_cmd_section)
    s = command("bench", "GPU benchmarks: softmax, attention, hierarchy, ...",
                BENCH_DESCRIPTION)
    s.add_argument("what", choices=["softmax", "attention", "hierarchy", "overhead", "ladder"],
                   help="what to measure (above)")
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
    s = command("traffic", "global reads/writes per array: model vs count",
                TRAFFIC_DESCRIPTION)
    s.add_argument("what", choices=["softmax", "attention", "sram"], help="what to model (above)")
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
    s = command("plot", "a saved bench JSON as a PNG (needs matplotlib)",
                "Draw a saved bench JSON (flashlesson bench ... --json F) as a PNG (needs "
                "matplotlib).")
    s.add_argument("results", help="a JSON written by flashlesson bench … --json")
    s.add_argument("out", help="the PNG to write")
    s.set_defaults(fn=_cmd_plot)
    s = command("resources", "§47: registers, shared memory, occupancy (GPU)",
                "§47: registers, shared memory, spills and occupancy of each kernel, from "
                "launches on the GPU (the simulator has none: it lists each configuration's "
                "limits).")
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
    _announce_gpu()
    return resources_command(args)


def main(argv=None):
    """Run the command of ``argv`` (default: sys.argv[1:]); returns the exit status. No
    command: the help, status 0."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        return 0
    if args.cmd == "traffic" and not args.model_only and "numba.cuda" not in sys.modules:
        import os       # the counter needs the simulator: chosen before numba.cuda loads
        os.environ.setdefault("FLASHLESSON_DEVICE", "sim")
    try:
        import flashlesson  # noqa: F401 - chooses the device (silently)
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
