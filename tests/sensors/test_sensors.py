"""The sensor layer's readers on fake trees and fake SDKs: RAPL (sums, wrap-around, root-only
files, no powercap), the CPU's clock and temperature, NVML (energy counter, power only) and amdsmi."""

from __future__ import annotations

import errno
import time
from pathlib import Path
from typing import Any

import pytest
from fakes.nvml import FakeGpu, FakeNvml, NVMLError, device

from hwbench.sensors import open_sensors
from hwbench.sensors.amd import open_amdsmi
from hwbench.sensors.cpu import CpuSensors, open_cpu
from hwbench.sensors.devices import DeviceSensors, reader_of
from hwbench.sensors.nvml import open_nvml
from hwbench.sensors.rapl import STATUS_STEPS, open_rapl

POWERCAP = "sys/class/powercap"
#: A real Skylake-SP package's range: 2**32 - 1 steps of 2**-14 J.
SKX_RANGE_UJ = 262143328850


def rapl_zone(root: Path, name: str, zone: str, energy_uj: int, max_uj: int = SKX_RANGE_UJ) -> Path:
    """One powercap zone under ``root``."""
    path = root / POWERCAP / zone
    path.mkdir(parents=True, exist_ok=True)
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return path


def set_energy(zone: Path, energy_uj: int) -> None:
    (zone / "energy_uj").write_text(f"{energy_uj}\n")


def two_sockets(root: Path, max_uj: int = SKX_RANGE_UJ) -> tuple[Path, Path]:
    """Two packages, with a core subdomain and a psys zone that must not be added."""
    first = rapl_zone(root, "package-0", "intel-rapl:0", 1_000, max_uj)
    rapl_zone(root, "core", "intel-rapl:0:0", 999_999)
    rapl_zone(root, "psys", "intel-rapl:1", 5_000_000)
    second = rapl_zone(root, "package-1", "intel-rapl:2", 7_000, max_uj)
    return first, second


def test_rapl_sums_the_packages_and_leaves_subdomains_and_psys_out(tmp_path: Path) -> None:
    first, second = two_sockets(tmp_path)
    counter = open_rapl(tmp_path)
    assert not isinstance(counter, str), counter
    assert counter.names == ["package-0", "package-1"]
    assert counter.read_j() == 0.0
    set_energy(first, 1_000 + 2_500_000)  # 2.5 J on socket 0
    set_energy(second, 7_000 + 500_000)  # 0.5 J on socket 1
    assert counter.read_j() == pytest.approx(3.0)
    # The range is 2**32 - 1 steps of RAPL's energy unit (2**-14 J here): that is the counter's step.
    assert counter.resolution_j == pytest.approx(SKX_RANGE_UJ / STATUS_STEPS * 1e-6)
    assert counter.resolution_j == pytest.approx(2**-14, rel=1e-5)


def test_rapl_unwraps_the_counter_passing_its_range(tmp_path: Path) -> None:
    first, second = two_sockets(tmp_path, max_uj=10_000_000)
    set_energy(first, 9_000_000)
    set_energy(second, 7_000)
    counter = open_rapl(tmp_path)
    assert not isinstance(counter, str)
    set_energy(first, 500_000)  # wrapped: 9.0 -> 10.0 (the range), then 0 -> 0.5: 1.5 J
    assert counter.read_j() == pytest.approx(1.5)
    set_energy(first, 2_500_000)  # +2.0 J, no wrap
    set_energy(second, 3_007_000)  # +3.0 J
    assert counter.read_j() == pytest.approx(6.5)


def test_root_only_energy_uj_is_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, _ = two_sockets(tmp_path)
    real = Path.read_text

    def refuse(self: Path, *args: Any, **kwargs: Any) -> str:
        if self.name == "energy_uj":  # as Linux >= 5.10 has it (mode 0400) for a user that is not root
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refuse)
    reason = open_rapl(tmp_path)
    assert isinstance(reason, str)
    assert str(first / "energy_uj") in reason and "root only" in reason and "CVE-2020-8694" in reason
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("processor\t: 0\ncpu MHz\t\t: 2400.000\n")
    cpu = open_cpu(tmp_path)  # the clock is still read; energy is not, and the reason says why
    assert isinstance(cpu, CpuSensors) and not cpu.energy_readable and "root only" in cpu.reason


def test_no_powercap_at_all_fails_fast_with_the_reason(tmp_path: Path) -> None:
    reason = open_rapl(tmp_path)
    assert isinstance(reason, str) and "no " + str(tmp_path / POWERCAP) in reason
    nothing = open_sensors("cpu", 0, {"kind": "cpu"}, root=tmp_path)  # no clock, no temperature either
    assert isinstance(nothing, str) and "powercap" in nothing
    started = time.perf_counter()
    for _ in range(100):
        open_cpu(tmp_path)
    assert time.perf_counter() - started < 1.0  # a missing tree costs a few stat calls, not a wait


def test_powercap_without_a_package_zone(tmp_path: Path) -> None:
    rapl_zone(tmp_path, "psys", "intel-rapl:0", 10)
    reason = open_rapl(tmp_path)
    assert isinstance(reason, str) and "no intel-rapl package zone" in reason and "intel-rapl:0" in reason


def test_cpu_clock_from_cpufreq_and_temperature_from_hwmon(tmp_path: Path) -> None:
    for cpu, khz in ((0, 2_000_000), (1, 3_000_000)):
        folder = tmp_path / f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
        folder.mkdir(parents=True)
        (folder / "scaling_cur_freq").write_text(f"{khz}\n")
    hwmon = tmp_path / "sys/class/hwmon/hwmon3"
    hwmon.mkdir(parents=True)
    (hwmon / "name").write_text("coretemp\n")
    (hwmon / "temp1_input").write_text("48000\n")
    (hwmon / "temp2_input").write_text("55000\n")
    other = tmp_path / "sys/class/hwmon/hwmon0"  # a NIC's sensor is not the CPU's
    other.mkdir(parents=True)
    (other / "name").write_text("nvme\n")
    (other / "temp1_input").write_text("90000\n")
    rapl_zone(tmp_path, "package-0", "intel-rapl:0", 0)
    sensors = open_cpu(tmp_path)
    assert isinstance(sensors, CpuSensors) and sensors.source == "rapl" and sensors.energy_readable
    sample = sensors.sample()
    assert sample.clock_mhz == pytest.approx(2500.0) and sample.temp_c == pytest.approx(55.0)
    assert sample.energy_j == 0.0 and sample.power_w is None


def test_cpu_clock_from_cpuinfo_and_temperature_from_a_thermal_zone(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("cpu MHz\t\t: 1000.0\nflags\t: fpu\ncpu MHz\t\t: 3000.0\n")
    zone = tmp_path / "sys/class/thermal/thermal_zone1"
    zone.mkdir(parents=True)
    (zone / "type").write_text("x86_pkg_temp\n")
    (zone / "temp").write_text("61500\n")
    sensors = open_cpu(tmp_path)
    assert isinstance(sensors, CpuSensors) and sensors.source == "cpu" and "powercap" in sensors.reason
    sample = sensors.sample()
    assert sample.clock_mhz == pytest.approx(2000.0) and sample.temp_c == pytest.approx(61.5)
    assert sample.energy_j is None


def test_nvml_with_an_energy_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    gpus = [FakeGpu(uuid="GPU-aaaa", pci_bus_id="0000:17:00.0"), FakeGpu(power_w=450.0)]
    nvml = FakeNvml(gpus, clock=lambda: now[0])
    sensors = open_nvml("cuda", 1, device(gpus[1], uuid=gpus[1].uuid), nvml=nvml)  # matched by UUID
    assert not isinstance(sensors, str), sensors
    assert sensors.source == "nvml" and sensors.energy_resolution_j == 1e-3 and sensors.reason == ""
    first = sensors.sample()
    assert first.energy_j == 0.0 and first.power_w == 450.0 and first.temp_c == 41.0 and first.clock_mhz == 1980.0
    now[0] += 2.0
    assert sensors.sample().energy_j == pytest.approx(900.0)  # 450 W for 2 s, counted in mJ
    sensors.close()
    sensors.close()
    assert nvml.inits == 1 and nvml.shutdowns == 1
    with pytest.raises(RuntimeError):
        sensors.sample()


def test_nvml_matches_by_pci_bus_id_then_by_a_unique_name() -> None:
    gpus = [FakeGpu(name="NVIDIA A100", pci_bus_id="0000:17:00.0"), FakeGpu(name="NVIDIA H200")]
    by_bus = open_nvml("cuda", 0, device(gpus[1], pci_bus_id="0000:3B:00.0"), nvml=FakeNvml(gpus))
    assert not isinstance(by_bus, str) and by_bus.sample().power_w == 300.0
    by_name = open_nvml("opencl", 3, device(gpus[0]), nvml=FakeNvml(gpus))
    assert not isinstance(by_name, str)
    twins = [FakeGpu(), FakeGpu()]
    nvml = FakeNvml(twins)
    reason = open_nvml("cuda", 1, device(twins[1]), nvml=nvml)
    assert isinstance(reason, str) and "cannot tell which of its 2 devices cuda:1 is" in reason
    assert nvml.shutdowns == nvml.inits == 1


def test_nvml_power_only_is_sampled_with_the_reason_said() -> None:
    gpu = FakeGpu(energy_counter=False, power_w=250.0)
    sensors = open_nvml("cuda", 0, device(gpu), nvml=FakeNvml([gpu]))
    assert not isinstance(sensors, str)
    assert sensors.energy_resolution_j is None and sensors.reads_power and sensors.energy_readable
    assert "total energy counter not readable (Not Supported)" in sensors.reason and "sampled" in sensors.reason
    sample = sensors.sample()
    assert sample.energy_j is None and sample.power_w == 250.0


def test_nvml_without_the_driver_or_any_reading() -> None:
    stopped = open_nvml("cuda", 0, device(), nvml=FakeNvml([FakeGpu()], driver=False))
    assert isinstance(stopped, str) and "Driver Not Loaded" in stopped
    mute = FakeGpu(energy_counter=False, power_reading=False)
    nvml = FakeNvml([mute])
    nvml.nvmlDeviceGetTemperature = _unsupported  # type: ignore[method-assign]
    nvml.nvmlDeviceGetClockInfo = _unsupported  # type: ignore[method-assign]
    reason = open_nvml("cuda", 0, device(mute), nvml=nvml)
    assert isinstance(reason, str) and "answers no reading" in reason and nvml.shutdowns == 1


def _unsupported(*args: Any) -> Any:
    raise NVMLError(3)


def test_nvml_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    import hwbench.sensors.nvml as nvml_module

    monkeypatch.setattr(nvml_module, "load_nvml", lambda: None)
    reason = open_sensors("cuda", 0, device())
    assert isinstance(reason, str) and "nvidia-ml-py is not installed" in reason


class AmdSmiError(Exception):
    """amdsmi's exception type."""


class FakeAmdSmi:
    """The amdsmi calls hwbench makes; ``legacy`` answers with the older releases' keys."""

    AmdSmiException = AmdSmiError

    class AmdSmiTemperatureType:
        EDGE, HOTSPOT = 0, 1

    class AmdSmiTemperatureMetric:
        CURRENT = 0

    class AmdSmiClkType:
        GFX = 1

    def __init__(self, energy: bool = True, legacy: bool = False) -> None:
        self.energy, self.legacy = energy, legacy
        self.ticks = 1_000
        self.shut = 0

    def amdsmi_init(self) -> None:
        pass

    def amdsmi_shut_down(self) -> None:
        self.shut += 1

    def amdsmi_get_processor_handles(self) -> list[str]:
        return ["gpu0", "gpu1"]

    def amdsmi_get_gpu_device_bdf(self, handle: str) -> str:
        return {"gpu0": "0000:c1:00.0", "gpu1": "0000:c2:00.0"}[handle]

    def amdsmi_get_gpu_asic_info(self, handle: str) -> dict[str, str]:
        return {"market_name": "AMD Instinct MI300X"}

    def amdsmi_get_energy_count(self, handle: str) -> dict[str, Any]:
        if not self.energy:
            raise AmdSmiError("AMDSMI_STATUS_NOT_SUPPORTED")
        key = "power" if self.legacy else "energy_accumulator"
        return {key: self.ticks, "counter_resolution": 15.3, "timestamp": 0}

    def amdsmi_get_power_info(self, handle: str) -> dict[str, Any]:
        return {"socket_power": "N/A", "current_socket_power": 512, "average_socket_power": "N/A"}

    def amdsmi_get_temp_metric(self, handle: str, kind: int, metric: int) -> int:
        if kind == self.AmdSmiTemperatureType.HOTSPOT:
            raise AmdSmiError("AMDSMI_STATUS_NOT_SUPPORTED")
        return 57

    def amdsmi_get_clock_info(self, handle: str, kind: int) -> dict[str, Any]:
        return {"cur_clk": 1500} if self.legacy else {"clk": 2100, "min_clk": 500, "max_clk": 2100}


@pytest.mark.parametrize("legacy", [False, True])
def test_amdsmi_energy_counter_power_temperature_clock(legacy: bool) -> None:
    amdsmi = FakeAmdSmi(legacy=legacy)
    described = {"name": "AMD Instinct MI300X", "kind": "gpu", "vendor": "AMD", "extra": {"pci_bus_id": "0000:c2:00.0"}}
    sensors = open_amdsmi("rocm", 1, described, amdsmi=amdsmi)
    assert not isinstance(sensors, str), sensors
    assert sensors.source == "amdsmi" and sensors.energy_resolution_j == pytest.approx(15.3e-6)
    amdsmi.ticks += 100_000  # 100,000 steps of 15.3 µJ: 1.53 J
    sample = sensors.sample()
    assert sample.energy_j == pytest.approx(1.53) and sample.power_w == 512.0 and sample.temp_c == 57.0
    assert sample.clock_mhz == (1500.0 if legacy else 2100.0)
    sensors.close()
    assert amdsmi.shut == 1


def test_amdsmi_without_a_counter_samples_power_and_an_ambiguous_gpu_is_said() -> None:
    amdsmi = FakeAmdSmi(energy=False)
    sensors = open_amdsmi("rocm", 0, {"name": "x", "extra": {"pci_bus_id": "0000:c1:00.0"}}, amdsmi=amdsmi)
    assert not isinstance(sensors, str)
    assert sensors.energy_resolution_j is None and sensors.reads_power and "sampled" in sensors.reason
    reason = open_amdsmi("rocm", 1, {"name": "AMD Instinct MI300X"}, amdsmi=FakeAmdSmi())  # two of that name
    assert isinstance(reason, str) and "cannot tell which of its 2 GPUs rocm:1 is" in reason


def test_devices_are_read_by_the_right_readers(tmp_path: Path) -> None:
    assert reader_of("cpu", None) == "cpu"
    assert reader_of("opencl", {"kind": "cpu", "extra": {"host_cpu": True}}) == "cpu"
    assert reader_of("opencl", {"kind": "gpu", "vendor": "NVIDIA Corporation"}) == "nvml"
    assert reader_of("rocm", None) == "amdsmi"
    assert reader_of("opencl", {"kind": "gpu", "vendor": "Advanced Micro Devices, Inc."}) == "amdsmi"
    reason = open_sensors("faulty", 2, {"kind": "accelerator", "vendor": "test"}, root=tmp_path)
    assert isinstance(reason, str) and "no sensor readers for faulty:2" in reason


def test_the_host_cpu_is_opened_once_and_said_once_per_device(tmp_path: Path) -> None:
    rapl_zone(tmp_path, "package-0", "intel-rapl:0", 0)
    opened = DeviceSensors(root=tmp_path)
    cpu = opened.get("cpu", 0, {"kind": "cpu"})
    assert opened.get("opencl", 1, {"kind": "cpu", "extra": {"host_cpu": True}}) is cpu
    entry = opened.entry("cpu", 0, {"name": "Test CPU", "kind": "cpu"})
    assert entry == {
        "backend": "cpu",
        "device_index": 0,
        "device": "Test CPU",
        "source": "rapl",
        "energy": True,
        "reason": "",
        "reads": ["energy_j"],
    }
    missing = DeviceSensors(root=tmp_path / "nothing").entry("cpu", 0, {"name": "Test CPU", "kind": "cpu"})
    assert missing["source"] is None and missing["energy"] is False and "powercap" in missing["reason"]
    opened.close()
