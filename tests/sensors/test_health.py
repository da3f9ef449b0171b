"""Health readings: the host CPU on fake sysfs trees (clean, with errors, throttling that rose,
missing trees), NVIDIA GPUs through a fake NVML, AMD GPUs through a fake amdsmi, the results
file's ``health`` section and how ``show`` prints its problems."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import hwbench_cmd
from fakes.nvml import LIBRARY_NOT_FOUND, FakeGpu, FakeNvml

from hwbench.results.files import validate
from hwbench.results.tables import summary
from hwbench.sensors.health import HealthWatch, health_lines, health_section, read_health, run_devices
from hwbench.sensors.health_cpu import EDAC_CE_LIMIT, EDAC_CE_RUN_LIMIT, read_counters
from hwbench.sensors.health_nvml import reason_names

CPU = ("cpu", 0, {"kind": "cpu", "name": "Test CPU", "vendor": "Intel", "extra": {}})
H100 = {"kind": "gpu", "vendor": "NVIDIA", "name": "NVIDIA H100 80GB HBM3"}


def FakeNVML(gpus: list[FakeGpu], init_error: int | None = None) -> FakeNvml:  # noqa: N802 - stands for the module
    """The fake NVML answering names as bytes, as older nvidia-ml-py releases do."""
    return FakeNvml(gpus, init_error=init_error, byte_names=True)


INTERRUPTS = """\
           CPU0       CPU1
  0:         30          0   IO-APIC    2-edge      timer
NMI:          0          0   Non-maskable interrupts
TRM:          0          0   Thermal event interrupts
THR:          0          0   Threshold APIC interrupts
MCE:          {mce}          0   Machine check exceptions
MCP:         44         44   Machine check polls
"""


def write(path: Path, text: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{text}\n")


def host_tree(root: Path, *, ce: int = 0, ue: int = 0, mce: int = 0, throttle: tuple[int, int] = (3, 1)) -> Path:
    """A host with one EDAC memory controller (two DIMMs), machine checks in /proc/interrupts and
    Intel's thermal-throttle counters on two CPUs of one package."""
    mc = root / "sys/devices/system/edac/mc/mc0"
    write(mc / "ce_count", ce)
    write(mc / "ue_count", ue)
    for n, (d_ce, d_ue) in enumerate(((ce, ue), (0, 0))):
        write(mc / f"dimm{n}/dimm_ce_count", d_ce)
        write(mc / f"dimm{n}/dimm_ue_count", d_ue)
        write(mc / f"dimm{n}/dimm_label", f"CPU_SrcID#0_Ha#0_Chan#{n}_DIMM#0")
    write(root / "proc/interrupts", INTERRUPTS.format(mce=mce))
    for cpu in (0, 1):
        base = root / f"sys/devices/system/cpu/cpu{cpu}"
        write(base / "thermal_throttle/core_throttle_count", throttle[0])
        write(base / "thermal_throttle/package_throttle_count", throttle[1])
        write(base / "topology/physical_package_id", 0)
    return root


def cpufreq_tree(root: Path, khz: int = 3_400_000) -> None:
    """cpufreq for every CPU this process may run on (the loaded read pins one of them)."""
    for cpu in os.sched_getaffinity(0) | {0}:
        base = root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
        write(base / "scaling_cur_freq", khz)
        write(base / "cpuinfo_max_freq", 3_800_000)
        write(base / "scaling_driver", "intel_pstate")
        write(base / "scaling_governor", "performance")


def watch_cpu(root: Path, change: Any = None, **kw: Any) -> dict[str, Any]:
    """The CPU entry of a watch over ``change(root)`` (a window in which the tree changes)."""
    watch = HealthWatch(["cpu"], root=root, load_s=0.01, **kw).start()
    if change is not None:
        change(root)
    return watch.finish([CPU])[0]


# -- the host CPU -------------------------------------------------------------------------------


def test_a_clean_host_is_clean(tmp_path: Path) -> None:
    got = watch_cpu(host_tree(tmp_path))
    assert got["clean"] is True and got["problems"] == []
    assert got["readings"]["edac_ce_count"] == 0 and got["readings"]["edac_ue_count"] == 0
    assert got["readings"]["mce_count"] == 0  # the MCE line; machine check *polls* are no errors
    assert got["readings"]["core_throttle_count"] == 6 and got["readings"]["package_throttle_count"] == 1
    assert got["readings"]["core_throttle_during_run"] == 0
    assert not {"edac", "mce", "thermal_throttle"} & got["skipped"].keys()
    assert got["window_s"] is not None and got["window_s"] >= 0
    assert validate({"health": [got]} | minimal_doc()) == []


def test_edac_uncorrected_and_many_corrected_errors_are_problems(tmp_path: Path) -> None:
    got = read_health(*CPU, root=host_tree(tmp_path, ce=EDAC_CE_LIMIT + 50, ue=2), load_s=0.01)
    assert got["clean"] is False
    assert any("2 uncorrected memory error" in p and "DIMM" in p for p in got["problems"]), got["problems"]
    assert any(f"{EDAC_CE_LIMIT + 50} corrected" in p and str(EDAC_CE_LIMIT) in p for p in got["problems"])
    where = {p["where"] for p in got["readings"]["edac_errors_where"]}
    assert "mc0" in where and any("dimm0" in w for w in where)


def test_corrected_errors_rising_within_the_window(tmp_path: Path) -> None:
    host_tree(tmp_path, ce=5)
    got = watch_cpu(
        tmp_path, lambda root: write(root / "sys/devices/system/edac/mc/mc0/ce_count", 5 + EDAC_CE_RUN_LIMIT + 1)
    )
    assert got["readings"]["edac_ce_during_run"] == EDAC_CE_RUN_LIMIT + 1
    assert any("during the run" in p for p in got["problems"])
    few = watch_cpu(tmp_path, lambda root: write(root / "sys/devices/system/edac/mc/mc0/ce_count", 20))
    assert few["clean"] is True, few["problems"]  # below both limits


def test_thermal_throttle_counts_that_rose_are_problems(tmp_path: Path) -> None:
    host_tree(tmp_path)

    def throttle(root: Path) -> None:
        write(root / "sys/devices/system/cpu/cpu1/thermal_throttle/core_throttle_count", 10)

    got = watch_cpu(tmp_path, throttle)
    assert got["clean"] is False and got["readings"]["core_throttle_during_run"] == 7
    assert any("thermal throttling during the run" in p and "core +7" in p for p in got["problems"])
    once = read_health(*CPU, root=tmp_path, load_s=0.01)  # counts from before: readings, never problems
    assert once["readings"]["core_throttle_count"] == 13 and once["problems"] == []
    assert "thermal_throttle_during_run" in once["skipped"]


def test_machine_check_exceptions_are_problems(tmp_path: Path) -> None:
    got = read_health(*CPU, root=host_tree(tmp_path, mce=1), load_s=0.01)
    assert got["readings"]["mce_count"] == 1
    assert any("machine-check exception" in p for p in got["problems"])


def test_missing_trees_are_skipped_with_reasons(tmp_path: Path) -> None:
    got = read_health(*CPU, root=tmp_path, load_s=0.01)
    assert got["clean"] is None and got["problems"] == [] and got["readings"] == {}
    for name in ("edac", "mce", "thermal_throttle", "cpufreq", "clock_under_load"):
        assert got["skipped"][name], name
    assert "VM" in got["skipped"]["cpufreq"]


def test_the_clock_under_load_alone_judges_nothing(tmp_path: Path) -> None:
    cpu = ("cpu", 0, {"kind": "cpu", "name": "Test CPU", "extra": {"clock_ghz": 3.25}})
    got = read_health(*cpu, root=tmp_path, load_s=0.01)
    assert (
        got["readings"]["clock_under_load_mhz"] == 3250.0 and "dependent" in got["readings"]["clock_under_load_source"]
    )
    assert got["clean"] is None  # nothing that could show a problem was readable


def test_cpufreq_is_read_after_a_short_load_and_at_polls(tmp_path: Path) -> None:
    host_tree(tmp_path)
    cpufreq_tree(tmp_path)
    affinity = os.sched_getaffinity(0)
    watch = HealthWatch(["cpu"], root=tmp_path, load_s=0.01).start()
    watch.poll()
    cpufreq_tree(tmp_path, 2_100_000)
    got = watch.finish([CPU])[0]
    assert os.sched_getaffinity(0) == affinity  # the spinning thread is set free again
    assert got["readings"]["cpufreq_mhz"] == 2100.0 and got["readings"]["cpufreq_run_max_mhz"] == 3400.0
    assert got["readings"]["cpufreq_max_mhz"] == 3800.0 and got["readings"]["cpufreq_driver"] == "intel_pstate"
    assert got["polls"] == 1 and "cpufreq" not in got["skipped"]


def test_every_cpu_device_shares_one_reading_of_the_host(tmp_path: Path) -> None:
    host_tree(tmp_path, ue=1)
    opencl_cpu = ("opencl", 1, {"kind": "cpu", "name": "pthread-Test CPU", "vendor": "PoCL"})
    entries = health_section([CPU, opencl_cpu], root=tmp_path, load_s=0.01)
    assert [(e["backend"], e["device_index"]) for e in entries] == [("cpu", 0), ("opencl", 1)]
    assert entries[0]["readings"] == entries[1]["readings"] and entries[1]["clean"] is False
    lines = health_lines({"health": entries})
    assert len(lines) == 1 and lines[0].startswith("health cpu:0, opencl:1: EDAC: 1 uncorrected")


def test_counters_read_from_the_real_host_quickly() -> None:
    started = time.perf_counter()
    got = HealthWatch(["cpu"]).start().finish([CPU])[0]
    spent = time.perf_counter() - started
    assert got["backend"] == "cpu" and (got["readings"] or got["skipped"])
    assert spent < 1.5, f"health took {spent:.2f} s"  # 0.2 s of it is the loaded cpufreq read, where cpufreq exists
    counters = read_counters()
    assert (counters.edac_ce is None) == ("edac" in counters.missing)  # a count, or the reason there is none


# -- NVIDIA GPUs through a fake NVML ---------------------------------------------------------------


def degraded_gpu() -> FakeGpu:
    ecc = {(0, 0): 12, (0, 1): 40, (1, 0): 2, (1, 1): 3}
    return FakeGpu(
        name="NVIDIA A100-SXM4-80GB",
        ecc=ecc,
        retired={0: [], 1: [0x7F3000]},
        link=(3, 8),
        max_link=(5, 16),
        reasons=0x4 | 0x40,  # power cap (fine) and hardware thermal slowdown (not)
        util=97,
    )


def test_nvml_problems_are_named() -> None:
    nvml = FakeNVML([degraded_gpu()])
    got = read_health("cuda", 0, {**H100, "name": "NVIDIA A100-SXM4-80GB"}, nvml=nvml)
    problems = " | ".join(got["problems"])
    assert got["clean"] is False and got["sources"] == ["nvml"]
    assert "ECC: 2 uncorrected error(s)" in problems and "3 over the GPU's life" in problems
    assert "1 retired memory page(s) (1 for double-bit errors" in problems
    assert "gen 3 of gen 5" in problems and "x8 of x16" in problems
    assert "hw_thermal_slowdown" in problems and "sw_power_cap" not in problems
    assert got["readings"]["throttle_reasons"] == ["sw_power_cap", "hw_thermal_slowdown"]
    assert got["readings"]["ecc_corrected_aggregate"] == 40 and got["readings"]["retired_pages_dbe"] == 1
    assert "xid_events" in got["skipped"]  # one reading: no window to watch
    assert nvml.users == 0  # NVML shut down again
    assert validate({"health": [got]} | minimal_doc()) == []


def test_an_idle_gpu_link_is_recorded_never_judged() -> None:
    idle = FakeGpu(link=(1, 16), reasons=0x1, util=0)
    got = read_health("cuda", 0, H100, nvml=FakeNVML([idle]))
    assert got["clean"] is True and got["problems"] == []
    assert got["readings"]["pcie_gen_current"] == 1 and got["readings"]["pcie_gen_max"] == 5
    assert "idle" in got["skipped"]["pcie_under_load"] and "pcie_gen_under_load" not in got["readings"]
    assert "remapped_rows_correctable" in got["readings"] and "Ampere" in got["skipped"]["retired_pages"]
    assert got["readings"]["nvlink_up"] == 18 and got["readings"]["nvlink_down"] == []


def test_a_busy_reading_during_the_window_judges_the_link() -> None:
    gpu = FakeGpu(link=(1, 16), reasons=0x1, util=0)
    nvml = FakeNVML([gpu])
    watch = HealthWatch(["cuda"], nvml=nvml).start()
    gpu.link, gpu.reasons, gpu.util = (4, 16), 0x0, 88  # under load, one generation short
    watch.poll()
    gpu.link, gpu.reasons, gpu.util = (1, 16), 0x1, 0
    got = watch.finish([("cuda", 0, H100)])[0]
    assert got["readings"]["pcie_gen_under_load"] == 4
    assert any("gen 4 of gen 5" in p for p in got["problems"]) and got["polls"] == 1


def test_xid_events_during_the_window_are_problems() -> None:
    nvml = FakeNVML([FakeGpu(), FakeGpu(uuid="GPU-1")])
    watch = HealthWatch(["cuda"], nvml=nvml).start()
    nvml.inject_xid(1, 79)
    nvml.inject_xid(1, 79)
    watch.poll()
    nvml.inject_xid(1, 48)
    first, second = watch.finish([("cuda", 0, H100), ("cuda", 1, H100)])
    assert first["clean"] is True and first["readings"]["xid_events"] == []
    assert second["clean"] is False and [e["xid"] for e in second["readings"]["xid_events"]] == [79, 79, 48]
    assert any("XID 79 x2, XID 48" in p for p in second["problems"])
    assert nvml.sets_freed == 1 and nvml.users == 0


def test_xid_events_a_gpu_cannot_report_are_skipped() -> None:
    nvml = FakeNVML([FakeGpu(xid_supported=False)])
    got = HealthWatch(["cuda"], nvml=nvml).start().finish([("cuda", 0, H100)])[0]
    assert "XID" in got["skipped"]["xid_events"] and got["clean"] is True


def test_row_remapping_pending_or_failed_and_ecc_rising() -> None:
    gpu = FakeGpu(remapped=(0, 1, 1, 1))
    nvml = FakeNVML([gpu])
    watch = HealthWatch(["cuda"], nvml=nvml).start()
    gpu.ecc[(1, 0)] = 1  # an uncorrected error while watched
    got = watch.finish([("cuda", 0, H100)])[0]
    problems = " | ".join(got["problems"])
    assert "row remapping failed" in problems and "row remapping is pending" in problems
    assert got["readings"]["ecc_uncorrected_during_run"] == 1 and "1 during the run" in problems


def test_nvlink_down_beside_links_up_is_a_problem_all_down_is_not_judged() -> None:
    partly = read_health("cuda", 0, H100, nvml=FakeNVML([FakeGpu(nvlinks=[1] * 16 + [0, 0])]))
    assert any("NVLink: 2 of 18 links down (links 16, 17)" in p for p in partly["problems"])
    none_up = read_health("cuda", 0, H100, nvml=FakeNVML([FakeGpu(nvlinks=[0] * 18)]))
    assert none_up["problems"] == [] and "bridges" in none_up["skipped"]["nvlink_judged"]
    no_nvlink = read_health("cuda", 0, H100, nvml=FakeNVML([FakeGpu(nvlinks=None, ecc_mode=None)]))
    assert "nvlink" in no_nvlink["skipped"] and "no ECC" in no_nvlink["skipped"]["ecc"]


def test_which_nvml_device_a_cuda_device_is(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNVML([FakeGpu(), degraded_gpu()])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    got = read_health("cuda", 0, {**H100, "name": "NVIDIA A100-SXM4-80GB"}, nvml=nvml)
    assert got["readings"]["nvml_index"] == 1 and got["clean"] is False
    wrong = read_health("cuda", 0, H100, nvml=nvml)  # NVML's 1 is not an H100: not guessed
    assert "cannot tell which GPU" in wrong["skipped"]["nvml"] and wrong["clean"] is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-00000000-0000-0000-0000-000000000000")
    assert read_health("cuda", 0, H100, nvml=nvml)["readings"]["nvml_index"] == 0
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    by_name = read_health("opencl", 2, {**H100, "name": "NVIDIA A100-SXM4-80GB"}, nvml=nvml)
    assert by_name["readings"]["nvml_index"] == 1


def test_without_nvml_everything_is_skipped_with_the_reason() -> None:
    got = read_health("cuda", 0, H100, nvml=FakeNVML([], init_error=LIBRARY_NOT_FOUND))
    assert got["clean"] is None and "NVML did not start" in got["skipped"]["nvml"]
    real = read_health("cuda", 0, H100)  # this machine: pynvml absent, or no driver
    assert real["clean"] is None and real["skipped"]["nvml"]


def test_reason_bits_are_named() -> None:
    assert reason_names(0x1 | 0x8 | 0x80) == ["gpu_idle", "hw_slowdown", "hw_power_brake_slowdown"]
    assert reason_names(0x10000) == ["bit 0x10000"]


def test_the_polling_thread_reads_while_the_work_runs() -> None:
    gpu = FakeGpu()
    with HealthWatch(["cuda"], nvml=FakeNVML([gpu]), poll_s=0.01) as watch:
        deadline = time.monotonic() + 5
        while watch.polls < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        got = watch.finish([("cuda", 0, H100)])[0]
    assert got["polls"] >= 2 and got["readings"]["pcie_gen_under_load"] == 5 and got["clean"] is True


# -- AMD GPUs through a fake amdsmi ------------------------------------------------------------------


class AmdSmiException(Exception):
    """amdsmi's error."""


def fake_amdsmi(
    *,
    ecc: int = 0,
    pages: list[dict[str, Any]] | None = None,
    hot: bool = False,
    link: tuple[int, int] = (32000, 16),
    gfx: int = 95,
) -> SimpleNamespace:
    gpu = object()
    return SimpleNamespace(
        AmdSmiException=AmdSmiException,
        amdsmi_init=lambda: None,
        amdsmi_shut_down=lambda: None,
        amdsmi_get_processor_handles=lambda: [gpu],
        amdsmi_get_gpu_total_ecc_count=lambda h: {
            "correctable_count": 4,
            "uncorrectable_count": ecc,
            "deferred_count": 0,
        },
        amdsmi_get_gpu_bad_page_info=lambda h: list(pages or []),
        amdsmi_get_gpu_metrics_info=lambda h: {"throttle_status": hot},
        amdsmi_get_violation_status=lambda h: {
            "active_prochot_thrm": hot,
            "active_ppt_pwr": True,
            "acc_prochot_thrm": 0,
        },
        amdsmi_get_gpu_activity=lambda h: {"gfx_activity": gfx},
        amdsmi_get_pcie_info=lambda h: {
            "pcie_static": {"max_pcie_width": 16, "max_pcie_speed": 32000, "pcie_interface_version": 5},
            "pcie_metric": {"pcie_width": link[1], "pcie_speed": link[0]},
        },
        amdsmi_get_gpu_xgmi_link_status=lambda h: {"status": ["U"] * 7 + ["X"], "total_links": 8},
    )


MI300X = {"kind": "gpu", "vendor": "AMD", "name": "AMD Instinct MI300X"}


def test_a_healthy_amd_gpu_is_clean() -> None:
    got = read_health("rocm", 0, MI300X, amdsmi=fake_amdsmi())
    assert got["clean"] is True and got["sources"] == ["amdsmi"], got
    assert got["readings"]["pcie_gen_under_load"] == 5 and got["readings"]["xgmi_up"] == 7
    assert got["readings"]["thermal_violations"] == []  # a power cap is how GPUs run: not a problem


def test_amd_problems_are_named() -> None:
    pages = [{"value": 0, "page_address": 0x1000, "page_size": 4096, "status": 1}]
    got = read_health("rocm", 0, MI300X, amdsmi=fake_amdsmi(ecc=3, pages=pages, hot=True, link=(8000, 8)))
    problems = " | ".join(got["problems"])
    assert "ECC: 3 uncorrectable" in problems and "1 retired (bad) memory page(s), 1 pending" in problems
    assert "prochot_thrm" in problems and "gen 3 of gen 5" in problems and "x8 of x16" in problems
    idle = read_health("rocm", 0, MI300X, amdsmi=fake_amdsmi(link=(2500, 16), gfx=0))
    assert idle["problems"] == [] and "idle" in idle["skipped"]["pcie_under_load"]


# -- the results file -----------------------------------------------------------------------------------


def minimal_doc() -> dict[str, Any]:
    return json.loads((Path(__file__).parents[2] / "results/cpu-epyc-2core-standard.json").read_text())


def test_run_devices_are_those_records_ran_on() -> None:
    doc = minimal_doc()
    chosen = run_devices(doc)
    assert chosen and all(b == "cpu" for b, _, _ in chosen) and chosen[0][2]["extra"]["clock_ghz"]


def test_show_prints_health_problems(tmp_path: Path) -> None:
    doc = minimal_doc()
    doc["health"] = health_section([CPU], root=host_tree(tmp_path, ue=1), load_s=0.01)
    assert validate(doc) == []
    assert "health cpu:0: EDAC: 1 uncorrected memory error(s)" in summary(doc)
    doc["health"] = health_section([CPU], root=host_tree(tmp_path), load_s=0.01)
    assert "health " not in summary(doc)


def test_hwbench_run_writes_the_health_section(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    result = subprocess.run(
        hwbench_cmd(
            "run",
            "--backend",
            "cpu",
            "--kernel",
            "gemm",
            "--impl",
            "numpy",
            "--shape",
            "gemm:M=8,N=8,K=8",
            "--budget",
            "0.01",
            "-q",
            "--out",
            str(out),
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    (entry,) = doc["health"]
    assert (entry["backend"], entry["device_index"]) == ("cpu", 0) and entry["window_s"] > 0
    assert entry["readings"] or entry["skipped"]
    assert validate(doc) == []
