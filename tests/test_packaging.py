"""The wheel holds the whole project under one name: setup.cfg installs the repository's
``kernels_numba/``, ``reference/`` and ``examples/`` as ``flashlesson.kernels_numba``,
``flashlesson.reference`` and ``flashlesson.examples``, and lists every subpackage, so that a
non-editable install imports everything a checkout does (CI builds the wheel, installs it into a
fresh environment and runs from there: ``.ci/run``)."""

import configparser
import importlib
from pathlib import Path

import pytest

import flashlesson

ROOT = Path(__file__).resolve().parents[1]
CFG = ROOT / "setup.cfg"
IN_CHECKOUT = CFG.is_file() and (ROOT / "src" / "flashlesson").is_dir()
needs_checkout = pytest.mark.skipif(not IN_CHECKOUT, reason="reads setup.cfg of a checkout")


def _options():
    cfg = configparser.ConfigParser()
    cfg.read(CFG)
    package_dir = dict(line.split("=", 1) for line in
                       cfg["options"]["package_dir"].strip().splitlines())
    package_dir = {k.strip(): v.strip() for k, v in package_dir.items()}
    packages = {p.strip() for p in cfg["options"]["packages"].replace(",", "\n").splitlines()
                if p.strip()}
    return package_dir, packages


def _folders(package_dir):
    """Every package that the mapped folders hold: a folder with an ``__init__.py``."""
    out = set()
    for name, folder in package_dir.items():
        root = ROOT / folder
        for init in root.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            rel = init.parent.relative_to(root).parts
            out.add(".".join((name,) + rel))
    return out


@needs_checkout
def test_every_subpackage_is_listed():
    package_dir, packages = _options()
    found = _folders(package_dir)
    assert packages == found, (f"missing from setup.cfg: {sorted(found - packages)}; "
                               f"listed without a folder: {sorted(packages - found)}")


@needs_checkout
def test_no_generic_top_level_name_is_installed():
    package_dir, packages = _options()
    assert {p.split(".")[0] for p in packages} == {"flashlesson"}
    assert set(package_dir) == {"flashlesson", "flashlesson.kernels_numba",
                                "flashlesson.reference", "flashlesson.examples"}


def test_subpackages_import_under_the_package_name():
    for name in ("flashlesson.kernels_numba", "flashlesson.kernels_numba.lesson",
                 "flashlesson.kernels_numba.sim", "flashlesson.reference",
                 "flashlesson.examples"):
        module = importlib.import_module(name)
        assert module.__name__ == name
        home = ROOT if IN_CHECKOUT else Path(flashlesson.__file__).resolve().parent
        assert Path(module.__file__).resolve().is_relative_to(home), (name, module.__file__)


def test_the_examples_come_with_the_package():
    from flashlesson import tour
    folder = tour.find_examples()
    assert len(list(folder.glob("s[0-9]*.py"))) >= 38
    spec = importlib.util.find_spec("flashlesson.examples")
    assert str(folder) in [str(Path(p)) for p in spec.submodule_search_locations]


def test_version_is_one_value():
    assert flashlesson.__version__ == "1.0.0"
    if IN_CHECKOUT:
        assert "version = attr: flashlesson.__version__" in CFG.read_text()
