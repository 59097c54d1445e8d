"""§46–47: the resource report (``flashlesson.resources``) and the Nsight Compute script
(``scripts/profile_io.py``).

In the simulator nothing is compiled: the report says so (a message, not a crash) and gives
the part that needs no compiler. The script's parsing of ncu's CSV and its matching of ncu's
kernels to the worker's launches are checked on a canned sample in ncu's format (units that
scale, thousands separators, ==PROF== lines, an ==ERROR== run). On a GPU, one more test asks
Numba for the registers of kernels that really ran.
"""

import importlib.util
import json
from pathlib import Path

import pytest
from conftest import SIM

from flashlesson import resources, traffic
from flashlesson.cli import main
from flashlesson.occupancy import blocks_per_sm

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("profile_io", ROOT / "scripts/profile_io.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not SIM, reason="the simulator's answer")
def test_simulator_says_why_and_gives_what_needs_no_compiler(capsys):
    with pytest.raises(resources.ResourcesUnavailable, match="only known on a GPU"):
        resources.resource_report()
    with pytest.raises(resources.ResourcesUnavailable, match="simulator"):
        with resources.record_launches():
            pass
    assert main(["resources", "--d", "128"]) == 0
    out = capsys.readouterr().out
    assert "only known on a GPU" in out and "get_regs_per_thread" in out
    assert "flash_forward" in out and "flash_bwd_dq" in out


def test_config_rows_are_the_occupancy_model_of_the_tiles():
    from flashlesson.configs import GPU_CONFIGS
    rows = resources.config_rows(64)
    fwd = GPU_CONFIGS[0][1]
    assert rows[0][2:4] == [fwd.threads, fwd.smem_bytes(64)]
    assert rows[0][4] == blocks_per_sm(fwd.threads, fwd.smem_bytes(64))["blocks"] == 2
    assert all(r[5] == "shared memory" for r in rows)        # the tiles, not threads, limit


# ---------------------------------------------------------------------------------------------
# scripts/profile_io.py: ncu's CSV, canned
# ---------------------------------------------------------------------------------------------
HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
          '"Metric Value"')
KERNELS = [  # id, mangled name, (read, unit), (write, unit), (time, unit), regs, smem dyn
    (0, "_ZN6cudapy13kernels_numba9attention20flash_forward_kernel12_3clocals_3e13flash_"
        "forward_241B98c8tJTC_2fABQHvD", ("139.52", "Mbyte"), ("34,080.77", "Kbyte"),
     ("8.21", "msecond"), "255", "84,992"),
    (1, "_ZN6cudapy13kernels_numba4gemm13matmul_kernel12_3clocals_3e6matmul_242B",
     ("70.25", "Mbyte"), ("2.15", "Gbyte"), ("41,000", "usecond"), "128", "0"),
]


def canned_csv(kernels=KERNELS):
    lines = ["==PROF== Connected to process 12345 (/usr/bin/python3.11)",
             "flashlesson: running kernels on the GPU",      # the program's own output
             "==PROF== Profiling \"flash_forward\" - 0: 0%....50%....100% - 3 passes", HEADER]
    for kid, name, rd, wr, tm, regs, dyn in kernels:
        for metric, (value, unit) in (("dram__bytes_read.sum", rd),
                                      ("dram__bytes_write.sum", wr),
                                      ("gpu__time_duration.sum", tm),
                                      ("launch__registers_per_thread", (regs, "register/thread")),
                                      ("launch__shared_mem_per_block_dynamic", (dyn, "byte/block")),
                                      ("sm__warps_active.avg.pct_of_peak_sustained_active",
                                       ("12.41", "%"))):
            lines.append(f'"{kid}","12345","python3.11","127.0.0.1","{name}","1","7",'
                         f'"(128, 1, 1)","(32, 32, 1)","0","9.0","Command line profiler metrics",'
                         f'"{metric}","{unit}","{value}"')
    lines.append("==PROF== Disconnected from process 12345")
    return "\n".join(lines) + "\n"


def test_parse_ncu_csv_units_and_separators():
    pio = _script()
    ks = pio.parse_ncu_csv(canned_csv())
    assert [k["id"] for k in ks] == [0, 1]
    a, b = ks
    assert a["dram__bytes_read.sum"] == pytest.approx(139.52e6)
    assert a["dram__bytes_write.sum"] == pytest.approx(34080.77e3)
    assert a["gpu__time_duration.sum"] == pytest.approx(8.21e-3)
    assert a["launch__registers_per_thread"] == 255
    assert a["launch__shared_mem_per_block_dynamic"] == 84992
    assert b["dram__bytes_write.sum"] == pytest.approx(2.15e9)
    assert b["gpu__time_duration.sum"] == pytest.approx(41e-3)
    assert pio.to_base("1", "KiB") == 1024 and pio.to_base("n/a", "byte") is None


def test_parse_ncu_failures_are_clear():
    pio = _script()
    with pytest.raises(pio.ParseError, match="ERR_NVGPUCTRPERM"):
        pio.parse_ncu_csv("==PROF== Connected\n==ERROR== ERR_NVGPUCTRPERM - The user does not "
                          "have permission to access NVIDIA GPU Performance Counters\n")
    with pytest.raises(pio.ParseError, match="lacks columns"):
        pio.parse_ncu_csv('"ID","Kernel Name"\n"0","k"\n')
    with pytest.raises(pio.ParseError, match="not a number"):
        pio.parse_ncu_csv(HEADER + '\n"0","1","p","h","k","1","7","(1,1,1)","(1,1,1)","0","9.0",'
                          '"s","dram__bytes_read.sum","byte","lots"\n')


def test_match_tables_and_report(tmp_path):
    """Two workloads, in the worker's manifest format, matched to the canned kernels in order;
    the tables carry DRAM / compulsory (from traffic.compulsory_traffic)."""
    pio = _script()
    fwd = traffic.attention_traffic(2, 16, 4096, 4096, 64, "flash")
    manifest = {"device": {"device": "NVIDIA H200"}, "date": "2026-12-01", "workloads": [
        {"label": "attention flash B2 H16 N4096 d64", "launches": [
            {"name": "flash_forward", "threads": 128, "dynamic smem": 84992, "registers": 255,
             "static smem": 0, "local bytes": 0, "max threads": 256, "occupancy": "12.5%"}],
         "model bytes": traffic.total_bytes(fwd),
         "compulsory": traffic.compulsory_traffic("attention", "flash", fwd)},
        {"label": "one matmul", "launches": [{"name": "matmul", "threads": 256,
                                               "dynamic smem": 0}],
         "model bytes": 1, "compulsory": [["matmul", 70_000_000, 2_150_000_000]]}]}
    kernels = pio.parse_ncu_csv(canned_csv())
    rc = pio.report(json.loads(json.dumps(manifest)), kernels, [], str(tmp_path), "note")
    assert rc == 0
    md = (tmp_path / "profile_io.md").read_text()
    comp = sum(r + w for _, r, w in manifest["workloads"][0]["compulsory"])
    assert comp == 4 * 2 * 16 * 4096 * 64 * 4 + 2 * 16 * 4096 * 4     # Q, K, V, O, LSE once
    want = (139.52e6 + 34080.77e3) / comp
    assert f"| {want:.2f} |" in md and "NVIDIA H200" in md and "flash_forward" in md
    data = json.loads((tmp_path / "profile_io.json").read_text())
    assert data["warnings"] == []
    # a kernel that does not match its launch's name, and a missing kernel: warned, rc 1
    manifest["workloads"][1]["launches"][0]["name"] = "row_lse"
    rc = pio.report(json.loads(json.dumps(manifest)), kernels[:1] + kernels[1:], [],
                    str(tmp_path), "note")
    assert rc == 1 and "'row_lse'" in (tmp_path / "profile_io.md").read_text()
    rc = pio.report(json.loads(json.dumps(manifest)), kernels[:1], [], str(tmp_path), "n")
    assert rc == 1 and "profiled 1 kernels" in (tmp_path / "profile_io.md").read_text()


def test_profile_plan_is_small_and_larger_than_l2():
    pio = _script()
    assert len(pio.FULL) <= 12 and set(pio.QUICK) <= set(pio.FULL)
    for kind, method, shape, causal in pio.FULL:
        w = resources.Workload(kind, method, shape, causal)
        comp = sum(r + wr for _, r, wr in traffic.compulsory_traffic(kind, method, w.model()))
        assert comp > 2 * 50e6, w.label                  # ≫ the H200's 50 MB L2


@pytest.mark.skipif(SIM, reason="Numba's resource queries need a GPU")
def test_resource_report_on_the_gpu():
    # B4 H16 N1024: a grid of many blocks, so the default tiles (over 48 KB of shared memory),
    # not the small-grid ones (configs.SMALL_GRID_CONFIGS, under 48 KB)
    rows = resources.resource_report(workloads=[
        resources.Workload("softmax", "auto", (64, 1024)),
        resources.Workload("attention", "flash", (4, 16, 1024, 64))])
    names = [r["kernel"] for r in rows]
    assert "softmax_warp_multi" in names and "flash_forward" in names
    flash = rows[names.index("flash_forward")]
    assert 0 < flash["registers"] <= 255 and flash["dynamic smem B"] > 48 * 1024
    assert flash["blocks / SM"] >= 1
