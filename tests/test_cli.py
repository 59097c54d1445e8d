"""The ``flashlesson`` command: info, methods, bench (GPU only: a clear error in the simulator)."""

import os
import pathlib
import subprocess
import sys

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


@pytest.mark.skipif(not SIM, reason="the simulator refuses benchmarks; on a GPU they run")
def test_bench_ladder_refuses_the_simulator(capsys):
    """``bench ladder`` times kernels: one line on stderr in the simulator, exit 2."""
    assert main(["bench", "ladder", "--only", "softmax"]) == 2
    err = capsys.readouterr().err
    assert "flashlesson bench ladder needs a CUDA GPU" in err and len(err.splitlines()) == 1


def test_bench_ladder_arguments_are_checked(capsys):
    assert main(["bench", "ladder", "--only", "nope"]) == 2
    assert "--only: expected some of softmax, attention" in capsys.readouterr().err
    assert main(["bench", "ladder", "--from", "x.json"]) == 2
    assert "--from: goes with --write" in capsys.readouterr().err


def test_bench_rejects_unknown_method(capsys):
    assert main(["bench", "softmax", "--method", "nope"]) == 2
    assert "--method: expected one of" in capsys.readouterr().err


def test_bench_headdims_are_checked(capsys):
    """``bench attention --tc --headdims``: head dims in 1 … 256, and only with --tc."""
    assert main(["bench", "attention", "--headdims", "80"]) == 2
    assert "--headdims: goes with --tc" in capsys.readouterr().err
    for bad in ("0,64", "257", "64,x"):
        with pytest.raises(SystemExit):
            main(["bench", "attention", "--tc", "--headdims", bad])
        assert "--headdims" in capsys.readouterr().err


def test_section_argument_must_be_a_number():
    with pytest.raises(SystemExit):
        main(["section", "eight"])


# ---------------------------------------------------------------------------------------------
# Failing politely (issue 12): a bad FLASHLESSON_DEVICE, or a GPU asked for and missing, is one
# line on stderr and exit status 2 — through the console script and through python -m.
# ---------------------------------------------------------------------------------------------
ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(argv, env_device, tmp_path, script):
    env = {**os.environ, "FLASHLESSON_DEVICE": env_device,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    if script:          # what pip's console script for `flashlesson` contains
        path = tmp_path / "flashlesson"
        path.write_text("import sys\nfrom flashlesson.cli import main\n"
                        "if __name__ == '__main__':\n    sys.exit(main())\n")
        cmd = [sys.executable, str(path), *argv]
    else:
        cmd = [sys.executable, "-m", "flashlesson", *argv]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)


@pytest.mark.parametrize("script", [True, False], ids=["console-script", "python-m"])
@pytest.mark.parametrize("env_device, says", [
    ("bogus", "FLASHLESSON_DEVICE='bogus': expected 'gpu', 'sim' or unset"),
    pytest.param("gpu", "FLASHLESSON_DEVICE=gpu but no CUDA GPU is usable",
                 marks=pytest.mark.skipif(not SIM, reason="this machine has a GPU")),
])
def test_device_errors_are_one_line_and_exit_2(tmp_path, script, env_device, says):
    run = _run(["info"], env_device, tmp_path, script)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flashlesson: ") and says in lines[0], lines
    assert "Traceback" not in run.stderr and run.stdout == ""


def test_python_m_flashlesson_runs_the_command(tmp_path):
    run = _run(["methods"], "sim", tmp_path, script=False)
    assert run.returncode == 0, run.stderr
    assert "Softmax methods" in run.stdout and "Attention methods" in run.stdout


def test_methods_titles_its_two_tables(capsys):
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    soft, att = out.index("Softmax methods"), out.index("Attention methods")
    assert soft < out.index("`warp_multi`") < att < out.index("`flash_fa1`")
