"""The repository speaks of the project, not of how it was made: no file that a reader sees
(code, docstrings, tests, examples, scripts, README, docs, data and log files, file names)
numbers the steps of the work (a work session or an issue with its number) or points at a
commit as history.
Measurements say instead what a reader needs to trust and repeat them: the device, the date,
the versions and the command. History lives in git."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A step of the work (the word session or issue, singular or plural, then a number, with or
# without a space, '_', '-' or '#' between), or a commit named as history ("commit" or "@",
# then seven or more hex digits). The cases below spell their examples in two halves.
WORK_LOG = re.compile(r"(?<![a-z])(sessions?|issues?)[\s_-]*#?\d|\bcommit [0-9a-f]{7,}\b"
                      r"|@ [0-9a-f]{7,}\b", re.IGNORECASE)
TEXT_SUFFIXES = {".py", ".md", ".txt", ".cfg", ".toml", ".sh", ".json", ".log", ".ini", ".yml",
                 ".yaml", ""}


def tracked_files():
    """The files of the checkout (``git ls-files``), or every file under the tests' parent
    folder when it is not a git checkout (the tests copied beside an installed wheel)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout
        return [ROOT / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        return [p for p in ROOT.rglob("*") if p.is_file() and "__pycache__" not in p.parts]


def offending_lines(text):
    return [(i, line.strip()) for i, line in enumerate(text.splitlines(), 1)
            if WORK_LOG.search(line)]


@pytest.mark.parametrize("line", ["Measured in sess" + "ion 15 on the H200",
                                  "see Iss" + "ue 13's two tiers", "sess" + "ions 3-5",
                                  "fixed in iss" + "ue #14", "gpu_sess" + "ion13.sh",
                                  "at com" + "mit c976f59a", "main @ " + "c976f59"])
def test_the_pattern_finds_a_work_log(line):
    assert offending_lines(line)


@pytest.mark.parametrize("line", ["def pytest_collection_modifyitems(session, config, items):",
                                  "H200, 2026-12-06, numba-cuda 0.30.4: 1.15x torch SDPA",
                                  "flash-attention's issue tracker", "FLASHLESSON_SEED=123"])
def test_the_pattern_leaves_project_words_alone(line):
    assert not offending_lines(line)


def test_no_file_reads_as_a_work_log():
    found = []
    for path in tracked_files():
        if not path.exists():           # (listed by an index older than the files: not here)
            continue
        rel = path.relative_to(ROOT)
        if WORK_LOG.search(str(rel)):
            found.append(f"{rel}: the file name")
        if path.suffix not in TEXT_SUFFIXES or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [f"{rel}:{i}: {line[:120]}" for i, line in offending_lines(text)]
    assert not found, ("say what the project does and how it was measured (device, date, "
                       "versions, command), not which step of the work it came from:\n"
                       + "\n".join(found[:60]) + (f"\n… and {len(found) - 60} more"
                                                  if len(found) > 60 else ""))
