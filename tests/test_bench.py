"""``flashlesson.bench.check_and_time``: the kernel-only GPU script's rule that only a checked
result is timed (scripts/bench_hopper.py); its options. Its refusals need no GPU: a NaN, an
error over the limit and a raising call each fail the row with the reason and leave it untimed
(a timed row needs the GPU: the script's own runs)."""

import math

from flashlesson.bench import check_and_time, picked_shapes, script_parser


def _refused(make, measure, limit=None):
    row = {}
    err = check_and_time(row, make, measure, 1e9, limit)
    assert row["ok"] is False and "ms" not in row and "TFLOP/s" not in row
    return row, err


def test_refused_rows_are_not_timed():
    row, err = _refused(lambda: (lambda: math.nan), lambda r: (0.0, math.isnan(r)))
    assert (row["why"], err) == ("NaN in the result", 0.0)
    row, err = _refused(lambda: (lambda: 0.5), lambda r: (r, False), limit=0.25)
    assert (row["why"], err) == ("error 5.00e-01 > 2.50e-01", 0.5)
    row, err = _refused(lambda: (lambda: 1 / 0), lambda r: (0.0, False))
    assert row["why"].startswith("ZeroDivisionError") and err is None


def test_script_options_pick_shapes():
    """The scripts' --shapes: indices in the order given, all shapes without it; --budget-s
    only where the script asks for it."""
    shapes = ((4, 16, 1024, 64), (2, 16, 4096, 64), (1, 16, 8192, 128))
    assert picked_shapes(shapes, "2,0") == [shapes[2], shapes[0]]
    assert picked_shapes(shapes, None) == list(shapes)
    args = script_parser().parse_args(["--shapes", "1", "--budget-s", "30"])
    assert (args.shapes, args.budget_s, args.json) == ("1", 30.0, None)
    assert not hasattr(script_parser(budget=False).parse_args([]), "budget_s")
