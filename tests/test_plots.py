"""§4, §28, §48 pictures (``flashlesson.plots``): a PNG is written from given numbers — the
softmax and attention bench JSON shapes (as ``flashlesson bench … --json`` writes them, and as
``docs/bench_*_h200.json`` hold them) and the §48 SRAM sweep — through the functions and the
commands. Skipped only where matplotlib is not installed (an optional extra: ``.[plot]``).
"""

import json

import pytest

from flashlesson import plots, traffic
from flashlesson.cli import main

pytest.importorskip("matplotlib")

PNG = b"\x89PNG\r\n\x1a\n"


def _png(path):
    data = path.read_bytes()
    assert data[:8] == PNG and len(data) > 5000, path
    return data


def softmax_json(rng):
    ns = [32, 1024, 32768]
    results = []
    for dt in ("float32", "float16"):
        for method in ("auto", "block", "online"):
            for n in ns:
                results.append({"dtype": dt, "N": n, "method": method,
                                "GB/s": float(rng.uniform(500, 4000)),
                                "torch GB/s": float(rng.uniform(500, 4000))})
    return {"copy GB/s": {"float32": 4199.4, "float16": 4107.0}, "results": results}


def attention_json(rng, backward=False):
    sfx = " bwd TFLOP/s" if backward else " TFLOP/s"
    rows = []
    for shape in [(1, 16, n, 64) for n in (256, 1024, 4096)] + [(2, 16, 4096, 64)]:
        for causal in (False, True):
            row = dict(zip("BHNd", shape), causal=causal)
            for m in ("flash", "naive", "sdpa math", "sdpa efficient"):
                row[m + sfx] = float(rng.uniform(1, 40))
            rows.append(row)
    return {"results": rows}


def test_bench_plots_from_numbers_and_from_saved_json(tmp_path, rng, capsys):
    data = softmax_json(rng)
    assert plots.plot_softmax_bench(data, tmp_path / "sm.png") is True
    _png(tmp_path / "sm.png")
    for backward in (False, True):
        assert plots.plot_attention_bench(attention_json(rng, backward), tmp_path / "a.png")
        _png(tmp_path / "a.png")
    # a saved file, through the command: the kind is read from the keys
    for name, payload in (("sm.json", data), ("att.json", attention_json(rng, True))):
        (tmp_path / name).write_text(json.dumps(payload))
        out = tmp_path / (name + ".png")
        assert main(["plot", str(tmp_path / name), str(out)]) == 0
        _png(out)
    assert "wrote" in capsys.readouterr().out


def test_sram_plot_and_command(tmp_path, capsys):
    rows = traffic.sram_sweep(2048, 64, [1, 4, 16, 64, 256, 1024, 4096])
    assert plots.plot_sram(rows, tmp_path / "s.png", n=2048, d=64)
    _png(tmp_path / "s.png")
    out = tmp_path / "cli.png"
    assert main(["traffic", "sram", "--shape", "2048", "64", "--plot", str(out)]) == 0
    _png(out)


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"results": [{"x": 1}]}))
    assert main(["plot", str(bad), str(tmp_path / "x.png")]) == 2
    assert "unknown results" in capsys.readouterr().err
    with pytest.raises(ValueError, match="nothing to plot"):
        plots.plot_attention_bench({"results": []}, tmp_path / "y.png")
    assert not (tmp_path / "x.png").exists()


def test_no_matplotlib_is_a_message_not_a_crash(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(plots, "_pyplot", lambda: print(plots.PLOT_HINT) or None)
    assert plots.plot_sram(traffic.sram_sweep(64, 8, [1, 2]), tmp_path / "z.png") is False
    assert "matplotlib" in capsys.readouterr().out and not (tmp_path / "z.png").exists()
