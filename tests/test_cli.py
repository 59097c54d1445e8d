"""The ``flashlesson`` command: its help (plain text, every command named, also with no command),
--version, info, methods, bench (GPU only: a clear error in the simulator), the device said once
by a command that runs kernels and by nothing else, and device errors as one line."""

import argparse
import os
import pathlib
import subprocess
import sys

import pytest
from conftest import SIM

import flashlesson
from flashlesson import SOFTMAX_METHODS
from flashlesson.cli import build_parser, main


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
# Failing politely: a bad FLASHLESSON_DEVICE, or a GPU asked for and missing, is one line on
# stderr and exit status 2 — through the console script and through python -m.
# ---------------------------------------------------------------------------------------------
ROOT = pathlib.Path(__file__).resolve().parents[1]
BANNER = "flashlesson: running kernels"


def _run(argv, env_device, tmp_path, script=False):
    env = {**os.environ, "FLASHLESSON_DEVICE": env_device, "PYTHONPATH": str(ROOT / "src")}
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


# ---------------------------------------------------------------------------------------------
# Help, version, no command
# ---------------------------------------------------------------------------------------------
def _commands():
    """{name: one-line help} of every subcommand the parser has."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {c.dest: c.help for c in sub._choices_actions}


def test_help_is_plain_text_naming_every_command(tmp_path):
    run = _run(["--help"], "sim", tmp_path)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    out = run.stdout
    assert out.startswith("usage: flashlesson") and "``" not in out and ":func:" not in out
    commands = _commands()
    assert {"info", "methods", "tour", "section", "bench", "traffic", "plot",
            "resources"} <= set(commands)
    lines = out.splitlines()
    for name, help in commands.items():     # one line each: the name, then its help
        line = next((x for x in lines if x.split()[:1] == [name]), None)
        assert line is not None and help and help in line, (name, help, out)
    methods = next(x for x in lines if x.split()[:1] == ["methods"])
    assert "softmax" in methods and "attention" in methods


def test_command_help_is_plain_text(capsys):
    for name in _commands():
        with pytest.raises(SystemExit) as exc:
            main([name, "--help"])
        assert exc.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: flashlesson {name}") and "``" not in out, out


def test_no_command_prints_the_help(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: flashlesson") and all(n in out for n in _commands())


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"flashlesson {flashlesson.__version__}\n"
    assert flashlesson.__version__ == "1.0.0"


# ---------------------------------------------------------------------------------------------
# The device is said once, by what runs kernels only
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["--help"], ["--version"], [], ["methods"], ["info"],
                                  ["section", "eight"], ["section", "99"], ["nope"]],
                         ids=lambda a: " ".join(a) or "bare")
def test_no_banner_without_kernels(tmp_path, argv):
    """Help, the version, the listings (info prints the device itself) and errors: no banner."""
    run = _run(argv, "sim", tmp_path)
    assert BANNER not in run.stderr and BANNER not in run.stdout, run.stderr


def test_a_kernel_command_says_the_device_once_first(tmp_path):
    run = _run(["traffic", "softmax", "--shape", "2", "32"], "sim", tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stderr.startswith(BANNER) and run.stderr.count(BANNER) == 1, run.stderr


def test_import_is_silent_and_the_first_launch_says_the_device(tmp_path):
    code = ("import sys, numpy as np, flashlesson as fl; print('imported', file=sys.stderr); "
            "x = np.ones((2, 32), np.float32); fl.softmax(x); fl.softmax(x)")
    env = {**os.environ, "FLASHLESSON_DEVICE": "sim", "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert lines[0] == "imported" and lines[1].startswith(BANNER) and len(lines) == 2, lines
