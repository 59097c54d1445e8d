"""``flashlesson.bench.check_and_time``: the GPU scripts' rule that only a checked result is
timed (scripts/gpu_wgmma.py, gpu_wgmma_bwd.py, gpu_defaults.py). Its refusals need no GPU: a
NaN, an error over the limit and a raising call each fail the row with the reason and leave it
untimed (a timed row needs the GPU: the scripts' own runs)."""

import math

from flashlesson.bench import check_and_time


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
