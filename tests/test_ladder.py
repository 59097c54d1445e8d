"""The ladders at the top of the fast kernel files (``flashlesson.ladder``): each
file's table is exactly what ``LADDERS`` renders (every row a step the command runs, or a
historical one that says so), every runnable step is a call the public API takes, and
``bench ladder --write`` puts measured numbers into the tables and nothing else. (The
measurement itself needs a GPU: ``flashlesson bench ladder``; ``--tiny`` runs every step in the
simulator, not here: it takes minutes.)"""

import shutil

import pytest

from flashlesson import ladder
from flashlesson.attention_methods import CHOICES as ATTENTION_CHOICES
from flashlesson.backward_methods import CHOICES as BACKWARD_CHOICES
from flashlesson.softmax_methods import CHOICES as SOFTMAX_CHOICES

LADDERS = {lad.name: lad for lad in ladder.LADDERS}


@pytest.mark.parametrize("name", list(LADDERS))
def test_the_file_holds_the_registry_s_table(name):
    """The block from "Ladder (" to the table's end is the rendering of its ``Ladder`` with
    the file's own measured cells: no row, step, text or call drifts from what the command
    runs (to change a table, change ``flashlesson/ladder.py`` and re-render)."""
    lad = LADDERS[name]
    lines = ladder.kernel_path(lad).read_text(encoding="utf-8").split("\n")
    first, last = ladder.find_block(lines)
    cells = ladder.parse_measured(lines)
    assert [s.step for s in lad.steps] == list(cells), "the table's steps are the registry's"
    runnable = {s.step for s in lad.steps if s.runs}
    assert lines[first:last + 1] == ladder.render(
        lad, {k: v for k, v in cells.items() if k in runnable})


@pytest.mark.parametrize("name", list(LADDERS))
def test_every_step_runs_or_says_it_is_historical(name):
    lad = LADDERS[name]
    methods = {ladder.SOFTMAX: SOFTMAX_CHOICES, ladder.FORWARD: ATTENTION_CHOICES,
               ladder.BACKWARD: BACKWARD_CHOICES}[lad.op]
    labels = [s.step for s in lad.steps]
    assert len(set(labels)) == len(labels) and labels[0] == "0"
    assert lad.steps[0].kw.get("tier") == "lesson", "step 0 is the lesson kernel"
    for s in lad.steps:
        if not s.runs:
            assert s.recorded and s.call, f"{s.step}: a historical step keeps its number"
            continue
        assert set(s.kw) <= {"method", "tier", "config", "q_blocks", "producers"}
        assert s.kw.get("method", "flash" if lad.op != ladder.SOFTMAX else "auto") in methods
        if s.versus is not None:
            base = lad.step(s.versus)
            assert base.runs and base.kw.get("tier") == "lesson", \
                f"{s.step}: measured against a lesson step"


def test_write_puts_passed_measurements_into_the_tables(tmp_path):
    """``write`` (``bench ladder --write [--from F.json]``) replaces the measured cell of each
    step that ran and passed, keeps every other cell, and leaves the rest of the file alone."""
    lad = LADDERS["attention"]
    src = ladder.kernel_path(lad)
    (tmp_path / "kernels_numba").mkdir()
    shutil.copy(src, tmp_path / lad.file)
    before = (tmp_path / lad.file).read_text(encoding="utf-8").split("\n")
    results = [
        {"ladder": "attention", "step": "0", "passed": True, "ms": 4.0, "rate": 8.5,
         "unit": "TFLOP/s"},
        {"ladder": "attention", "step": "4", "passed": True, "ms": 1.0, "rate": 34.4,
         "unit": "TFLOP/s", "vs lesson": 4.0, "versus": "0"},
        {"ladder": "attention", "step": "3", "passed": False, "ms": None, "rate": None,
         "unit": "TFLOP/s"},
    ]
    path = tmp_path / "results.json"
    ladder.save(path, results, "H200", "2026-12-02")
    written = ladder.write(*ladder.load(path), root=tmp_path, ladders=(lad,))
    assert written == [str(tmp_path / lad.file)]
    after = (tmp_path / lad.file).read_text(encoding="utf-8").split("\n")
    cells = ladder.parse_measured(after)
    assert cells["0"] == "H200, 2026-12-02: 4 ms, 8.5 TFLOP/s"
    assert cells["4"] == "H200, 2026-12-02: 1 ms, 34.4 TFLOP/s, 4.00× lesson"
    assert cells["3"] == ladder.parse_measured(before)["3"]         # failed: not written
    assert cells["6"].startswith("historical: ")
    first, last = ladder.find_block(after)
    assert after[:first] == before[:first] and after[last + 1:] == before[
        ladder.find_block(before)[1] + 1:]
