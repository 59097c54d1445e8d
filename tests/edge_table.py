"""The table behind tests/test_edge_cases.py and tests/test_edge_documented.py.

Every case is one of two classes, and its test id says which:

- ``refuse-<Error>-<argument>-<label>``: the call raises that error, and the message starts with
  the argument's name (``scale: …``, ``FlashConfig.Br: …``, ``k, v: …``) — checked by
  ``check_refusal``. These refuse before any kernel runs, so they cost almost nothing.
- ``documented-<function>-<label>``: the call returns the result docs/api.md and the docstrings
  promise (empty shapes, zeros and −inf for rows that see no key, …), compared with the float64
  oracle of ``reference/`` or with the stated values. Tiny shapes: each one runs a few simulated
  blocks at most.

``COUNTS`` (filled as the tables are built) is the number of cases per class and function;
``test_edge_cases.py::test_counts_per_class`` prints it.
"""

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import pytest

COUNTS = Counter()


@dataclass(frozen=True)
class Refuse:
    """A call that must raise ``error`` with a message naming ``arg`` first."""
    function: str
    arg: str
    label: str
    error: type
    call: Callable[[], Any]

    @property
    def id(self):
        return f"refuse-{self.error.__name__}-{self.arg}-{self.function}-{self.label}"


@dataclass(frozen=True)
class Documented:
    """A call whose result ``check`` compares with the oracle or the documented values."""
    function: str
    label: str
    check: Callable[[], Any]

    @property
    def id(self):
        return f"documented-{self.function}-{self.label}"


def refusal_pattern(arg):
    """The message starts with ``arg`` (alone or in a list such as ``k, v:``), then ':', ',',
    '.' or a space."""
    return rf"^([\w.]+, )*{re.escape(arg)}[:,. ]"


def check_refusal(case):
    with pytest.raises(case.error, match=refusal_pattern(case.arg)):
        case.call()


def params(cases):
    """pytest parameters with the cases' ids; each case counted once in ``COUNTS``."""
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids), [i for i, n in Counter(ids).items() if n > 1]
    for c in cases:
        kind = "refuse" if isinstance(c, Refuse) else "documented"
        COUNTS[(kind, c.error.__name__ if kind == "refuse" else "oracle", c.function)] += 1
    return [pytest.param(c, id=c.id) for c in cases]


def label(value):
    """A short readable id for a bad value."""
    if isinstance(value, str):
        return f"str-{value}" if value else "str-empty"
    if isinstance(value, bool):
        return f"bool-{value}"
    if value is None:
        return "None"
    if isinstance(value, float):
        return f"float-{value!r}".replace("inf", "inf")
    if isinstance(value, int):
        return f"int-{value}"
    return type(value).__name__
