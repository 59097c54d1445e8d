"""One registry feeds the dispatcher, the CLI, the tests and the README: check they agree."""

import importlib.util
import re
from pathlib import Path

from flashlesson import SOFTMAX_METHODS
from flashlesson import softmax_methods as sm

ROOT = Path(__file__).resolve().parents[1]


def _update_readme_module():
    spec = importlib.util.spec_from_file_location("update_readme", ROOT / "scripts" /
                                                  "update_readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_tables_match_the_registry():
    mod = _update_readme_module()
    text = (ROOT / "README.md").read_text()
    assert mod.render(text, mod.generated()) == text, (
        "README.md is out of date with the registry: run scripts/update_readme.py")


def test_cli_choices_are_the_registry():
    assert sm.CHOICES == ("auto",) + tuple(SOFTMAX_METHODS)


def test_every_method_names_a_kernel_that_exists():
    from kernels_numba import softmax as K
    for m in SOFTMAX_METHODS.values():
        names = re.findall(r"(\w+)(?:\([^)]*\))?", m.kernel)   # "f(K, R), g" → f, g
        assert names, m.kernel
        for name in names:
            assert hasattr(K, name), (m.name, name)
