"""The ``flashlesson`` command: info, methods, bench (GPU only: a clear error in the simulator)."""

import pytest
from conftest import SIM

from flashlesson import SOFTMAX_METHODS
from flashlesson.cli import main


def test_info(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "mode" in out and "numba" in out and "device" in out


def test_methods_lists_the_registry(capsys):
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    for name, m in SOFTMAX_METHODS.items():
        assert f"`{name}`" in out and f"§{m.sections}" in out


@pytest.mark.skipif(not SIM, reason="the simulator refuses benchmarks; on a GPU they run")
def test_bench_refuses_the_simulator(capsys):
    assert main(["bench", "softmax", "--n", "32"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_bench_rejects_unknown_method(capsys):
    assert main(["bench", "softmax", "--method", "nope"]) == 2
    assert "--method: expected one of" in capsys.readouterr().err


def test_section_argument_must_be_a_number():
    with pytest.raises(SystemExit):
        main(["section", "eight"])
