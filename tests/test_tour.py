"""Tests of the tour (``flashlesson tour``): every example runs and passes its checks, and
every section that has an example gets at least one check; an unknown section is a clear
error, and a failing check makes the tour fail.

The full tour takes about a minute in Numba's CUDA simulator (small sizes); on a GPU the
examples use bigger sizes and time some kernels.
"""

import textwrap

import pytest

import flashlesson  # noqa: F401 - picks the device before numba.cuda loads
from flashlesson import tour


def test_tour_passes_and_covers_every_section_with_an_example(capsys):
    checks = []
    code = tour.run_tour(checks=checks)
    out = capsys.readouterr().out
    failed = [c for c in checks if not c.passed]
    assert code == 0, f"failed checks: {failed}\n{out[-3000:]}"
    covered = set().union(*(tour.sections_of(c.section) for c in checks))
    examples = tour.list_examples()
    with_example = {s for secs, _ in examples for s in secs}
    assert set(range(1, 12)) <= with_example
    assert with_example <= covered, f"sections with an example but without a check: " \
        f"{sorted(with_example - covered)}"
    assert all(isinstance(c, tour.Check) for c in checks)
    # progress lines, in § order, then the summary table
    n = len(examples)
    first, last = tour._label(examples[0][0]), tour._label(examples[-1][0])
    assert f"[1/{n}] §{first} " in out and f"[{n}/{n}] §{last} " in out
    assert "max err vs oracle" in out and "FAIL" not in out


def test_examples_are_found_in_the_checkout():
    found = tour.list_examples()
    sections = [secs for secs, _ in found]
    assert sections == sorted(sections)
    assert {s for secs in sections for s in secs} >= set(range(1, 12))


def test_unknown_section_is_a_clear_error(capsys):
    with pytest.raises(tour.TourError, match=r"section 99: no example for it; available "
                                             r"sections: 1, 2, 3, .*11"):
        tour.collect(sections=[99])
    assert tour.run_tour(sections=[99]) == 2
    assert "available sections" in capsys.readouterr().err


def test_section_filter_runs_only_that_example(tmp_path, monkeypatch):
    _write(tmp_path, "s01_one.py", SECTIONS=(1,), passed=True)
    _write(tmp_path, "s02_s03_two.py", SECTIONS=(2, 3), passed=True)
    monkeypatch.setenv(tour.ENV_EXAMPLES, str(tmp_path))
    checks = tour.collect(sections=[3])
    assert [c.section for c in checks] == ["2–3"]


def test_a_failing_check_fails_the_tour(tmp_path, monkeypatch, capsys):
    _write(tmp_path, "s01_fine.py", SECTIONS=(1,), passed=True)
    _write(tmp_path, "s02_broken.py", SECTIONS=(2,), passed=False)
    monkeypatch.setenv(tour.ENV_EXAMPLES, str(tmp_path))
    checks = []
    assert tour.run_tour(checks=checks) == 1
    assert [c.passed for c in checks] == [True, False]
    assert "FAIL" in capsys.readouterr().out


def test_a_crashing_example_is_a_failed_check(tmp_path, monkeypatch):
    (tmp_path / "s01_crash.py").write_text(textwrap.dedent("""
        SECTIONS = (1,)
        TOPIC = "crash"
        def main(verbose=True):
            raise RuntimeError("boom")
    """))
    _write(tmp_path, "s02_fine.py", SECTIONS=(2,), passed=True)
    monkeypatch.setenv(tour.ENV_EXAMPLES, str(tmp_path))
    checks = []
    assert tour.run_tour(checks=checks) == 1
    assert not checks[0].passed and "RuntimeError: boom" in checks[0].note
    assert checks[1].passed                          # the tour went on after the crash


def test_missing_examples_folder_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv(tour.ENV_EXAMPLES, str(tmp_path / "nowhere"))
    with pytest.raises(tour.TourError, match="FLASHLESSON_EXAMPLES"):
        tour.find_examples()


def _write(folder, name, SECTIONS, passed):
    (folder / name).write_text(textwrap.dedent(f"""
        from flashlesson.tour import Check
        SECTIONS = {SECTIONS!r}
        TOPIC = "tiny"
        def main(verbose=True):
            label = "–".join(map(str, (SECTIONS[0], SECTIONS[-1]))) if len(SECTIONS) > 1 \\
                else str(SECTIONS[0])
            return [Check(label, TOPIC, "none", 0.0, {passed!r}, "deliberate")]
    """))
