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


# The tour in CHUNKS parts (every CHUNKS-th example), so that pytest-xdist's workers share it;
# together they run every example once.
CHUNKS = 6


@pytest.mark.parametrize("part", range(CHUNKS))
def test_tour_passes_and_covers_every_section_with_an_example(part, capsys):
    examples = tour.list_examples()
    mine = examples[part::CHUNKS]
    checks = []
    code = tour.run_tour(sections=[min(secs) for secs, _ in mine], checks=checks)
    out = capsys.readouterr().out
    failed = [c for c in checks if c.failed]
    assert code == 0 and not failed, f"failed checks: {failed}\n{out[-3000:]}"
    # measurements and checks not performed are allowed (shown, counted apart), never passes
    assert all(c.passed is None for c in checks if c.kind != tour.CHECK)
    covered = set().union(*(tour.sections_of(c.section) for c in checks))
    with_example = {s for secs, _ in mine for s in secs}
    assert with_example <= covered, f"sections with an example but without a check: " \
        f"{sorted(with_example - covered)}"
    assert all(isinstance(c, tour.Check) for c in checks)
    # progress lines, in § order, then the summary table
    n = len(mine)
    first, last = tour._label(mine[0][0]), tour._label(mine[-1][0])
    assert f"[1/{n}] §{first} " in out and f"[{n}/{n}] §{last} " in out
    assert "max err vs oracle" in out and "FAIL" not in out


def test_the_examples_cover_the_first_sections():
    assert set(range(1, 12)) <= {s for secs, _ in tour.list_examples() for s in secs}


def test_check_kinds_measured_and_not_performed_are_neither_pass_nor_fail(tmp_path,
                                                                          monkeypatch, capsys):
    (tmp_path / "s01_kinds.py").write_text(textwrap.dedent("""
        from flashlesson.tour import Check
        SECTIONS = (1,)
        TOPIC = "kinds"
        def main(verbose=True):
            return [Check("1", TOPIC, "k", 0.0, True, "a check"),
                    Check.measured("1", TOPIC, "k", "1.0 ms"),
                    Check.not_performed("1", TOPIC, "k", "no GPU")]
    """))
    monkeypatch.setenv(tour.ENV_EXAMPLES, str(tmp_path))
    checks = []
    assert tour.run_tour(checks=checks) == 0
    out = capsys.readouterr().out
    assert [c.result for c in checks] == ["pass", "measured", "not performed"]
    assert not any(c.failed for c in checks)
    assert "1/1 checks passed, 1 measured, 1 not performed" in out
    assert "1 checks, 0 failed, 1 measured, 1 not performed" in out
    assert "replay with FLASHLESSON_SEED=" in out
    with pytest.raises(TypeError, match="passed"):
        tour.Check("1", "t", "k", None, None)           # a check must pass or fail
    with pytest.raises(ValueError, match="kind"):
        tour.Check("1", "t", "k", None, None, kind="timing")


def test_in_simulator_runs_a_function_of_an_example(tmp_path):
    path = tmp_path / "s01_sim.py"
    path.write_text(textwrap.dedent("""
        from flashlesson.tour import Check
        def part(x):
            return [Check("1", "t", "k", None, x == 3, "ran")]
    """))
    checks, where = tour.in_simulator(path, "part", 3)
    assert [c.passed for c in checks] == [True] and where in ("this process",
                                                               "a simulator subprocess")


def test_examples_are_found_in_the_checkout():
    found = tour.list_examples()
    sections = [secs for secs, _ in found]
    assert sections == sorted(sections)
    assert {s for secs in sections for s in secs} >= set(range(1, 12))


def test_every_lesson_section_1_to_50_has_an_example():
    # Every § of the lesson has an example; the message names exactly the sections missing.
    missing = tour.missing_sections()
    declared = tour.declared_sections()
    assert not missing, (f"§{', §'.join(map(str, missing))} of the lesson's 50 sections have no "
                         f"example in {tour.find_examples()} ({len(declared)} of 50 covered); "
                         "add examples/sNN_*.py with SECTIONS = (NN,)")


def test_section_50_is_the_tours_last_stop():
    examples = tour.list_examples()
    assert examples[-1][0] == (50,) and examples[-1][1].name == "s50_summary.py"
    assert [p.name for _, p in tour._select(examples, [50])] == ["s50_summary.py"]
    assert tour.declared_sections()[50] == ["s50_summary.py"]


def test_declared_sections_reads_the_files_without_running_them(tmp_path):
    (tmp_path / "s01_s02_pair.py").write_text("raise RuntimeError('not run')\nSECTIONS = (1, 2)\n")
    (tmp_path / "s04_other.py").write_text("SECTIONS = compute()\n")      # not a literal
    (tmp_path / "s50_last.py").write_text("TOPIC = 'x'\nSECTIONS = (50,)\n")
    assert tour.declared_sections(tmp_path) == {1: ["s01_s02_pair.py"], 2: ["s01_s02_pair.py"],
                                                50: ["s50_last.py"]}
    assert tour.missing_sections(tmp_path) == list(range(3, 50))


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
