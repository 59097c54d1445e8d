"""One registry feeds the dispatcher, the CLI, the tests and docs/methods.md: check they agree."""

import importlib.util
import re
from pathlib import Path

from flashlesson import SOFTMAX_METHODS
from flashlesson import softmax_methods as sm

ROOT = Path(__file__).resolve().parents[1]


def _update_docs_module():
    spec = importlib.util.spec_from_file_location("update_docs", ROOT / "scripts" /
                                                  "update_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_methods_md_tables_match_the_registry():
    mod = _update_docs_module()
    text = (ROOT / "docs" / "methods.md").read_text(encoding="utf-8")
    assert mod.render(text, mod.generated()) == text, (
        "docs/methods.md is out of date with the registry: run scripts/update_docs.py")


def test_cli_choices_are_the_registry():
    assert sm.CHOICES == ("auto",) + tuple(SOFTMAX_METHODS)


def test_every_method_names_a_kernel_that_exists():
    from flashlesson.kernels_numba import softmax as K
    for m in SOFTMAX_METHODS.values():
        names = re.findall(r"(\w+)(?:\([^)]*\))?", m.kernel)   # "f(K, R), g" → f, g
        assert names, m.kernel
        for name in names:
            assert hasattr(K, name), (m.name, name)


def test_every_lesson_kernel_exists_and_tier_lesson_reaches_it():
    """The registries' lesson column names kernels of kernels_numba/lesson/, and exactly the
    methods with one are accepted by tier="lesson" (the others refused, naming the method)."""
    import pytest

    from flashlesson import attention_methods as am
    from flashlesson.kernels_numba.lesson import attention as LA
    from flashlesson.kernels_numba.lesson import softmax as LS
    for m in SOFTMAX_METHODS.values():
        names = re.findall(r"(\w+)(?:\([^)]*\))?", m.lesson_kernel)
        assert bool(names) == (m.lesson_launch is not None), m.name
        for name in names:
            assert hasattr(LS, name), (m.name, name)
    assert am.METHODS["flash"].lesson_kernels == "lesson.attention.flash_forward"
    assert hasattr(LA, "flash_forward")
    assert set(sm.LESSON_METHODS) == set(SOFTMAX_METHODS) - {"naive"}
    assert set(am.LESSON_METHODS) == {"naive", "flash", "flash_fa1", "flash_db", "flash_tc"}
    import importlib
    for m in am.METHODS.values():      # every "lesson.<file>.<kernel>" names a kernel there
        for file, name in re.findall(r"lesson\.(\w+)\.(\w+)", m.lesson_kernels):
            assert hasattr(importlib.import_module(f"flashlesson.kernels_numba.lesson.{file}"), name), \
                (m.name, file, name)
    from flashlesson.kernels_numba.lesson import tensor_core as LT
    assert hasattr(LT, "flash_tc_kernel")
    import numpy as np
    import flashlesson
    x = np.zeros((1, 4), np.float32)
    with pytest.raises(ValueError, match="tier: softmax method 'naive' has no lesson kernel"):
        flashlesson.softmax(x, method="naive", tier="lesson")
    with pytest.raises(ValueError, match="tier: expected one of fast, lesson"):
        flashlesson.softmax(x, tier="Lesson")
    q = np.zeros((1, 1, 2, 4), np.float32)
    with pytest.raises(ValueError, match="tier: expected one of fast, lesson"):
        flashlesson.attention(q, q, q, method="flash_db", tier="slow")
    h = np.zeros((1, 1, 2, 16), np.float16)    # fp16: method flash_tc's lesson kernel only
    assert flashlesson.attention(h, h, h, method="flash_tc", tier="lesson").shape == h.shape
    with pytest.raises(TypeError, match="q: tier 'lesson' of method 'flash' takes float32"):
        flashlesson.attention(h, h, h, tier="lesson")
    with pytest.raises(TypeError, match="config: expected a LessonConfig"):
        flashlesson.attention(q, q, q, tier="lesson", config=am.default_config(4))
