"""The transfer kernel: its spec (bytes, shapes, peers per device), planning (left out of a default
run where no GPU backend is available, skipped with the reason when asked for), the host link's rate
(PCIe arithmetic, NVML and amdsmi through fakes, the catalog), and the copies' logic on CPU tensors
(the GPU runtime faked: this checks which buffers are copied where, not that memory is page-locked
or that copies overlap). The GPU tests run the cases on a GPU and skip without one."""

from __future__ import annotations

from dataclasses import asdict
from types import SimpleNamespace
from typing import Any

import needs
import numpy as np
import pytest

from hwbench.core.errors import UserError
from hwbench.decide.catalog import Catalog
from hwbench.kernels.transfer import link
from hwbench.kernels.transfer.spec import D2D, D2H, H2D, KERNEL, MIB, PEER, PEER_BIDIR
from hwbench.run import parity
from hwbench.run.runner import Plan, plan_cases, runnable_kernels

torch = needs.module("torch")
from hwbench.kernels.transfer import natives  # noqa: E402  (after the torch check: the copies are torch's)

# --- the spec --------------------------------------------------------------------------------


def test_bytes_and_shapes_count_one_direction_of_one_copy() -> None:
    shape = KERNEL.complete({"dir": PEER_BIDIR, "bytes": 1024})
    assert shape == {"dir": PEER_BIDIR, "bytes": 1024, "pinned": 1, "peer": 0}
    assert KERNEL.bytes_moved(shape, "fp32") == 1024.0 and KERNEL.flops(shape) == 0.0
    assert KERNEL.output_shape(shape) == (256,)
    standard = KERNEL.shapes("standard")
    big = [s for s in standard if s["bytes"] == 512 * MIB]  # nvbandwidth's default buffer
    assert {(s["dir"], s["pinned"]) for s in big if s["dir"] in (H2D, D2H)} == {
        (d, p) for d in (H2D, D2H) for p in (0, 1)
    }
    assert {s["dir"] for s in big} == {H2D, D2H, D2D, PEER, PEER_BIDIR}
    small = [s for s in standard if KERNEL.measures(s) == "latency"]
    assert small and all(s["bytes"] == 4 for s in small)
    assert all(s["bytes"] <= 64 * MIB for s in KERNEL.shapes("quick"))


@pytest.mark.parametrize(
    "given,fragment",
    [
        ({"dir": 5, "bytes": 8}, "not a direction"),
        ({"dir": 0, "bytes": 6}, "multiple of 4"),
        ({"dir": 0, "bytes": 8, "pinned": 2}, "pinned"),
    ],
)
def test_bad_shapes_are_refused_with_one_line(given: dict[str, int], fragment: str) -> None:
    with pytest.raises(UserError, match=fragment):
        KERNEL.complete(given)


def test_peer_copies_run_once_per_other_device() -> None:
    every = KERNEL.complete({"dir": PEER, "bytes": 64})
    shapes, why = KERNEL.device_shapes(every, 1, 3)
    assert [KERNEL.peer_of(s, 1, 3) for s in shapes] == [2, 0] and not why  # the next, then round to 0
    assert KERNEL.device_shapes(every, 0, 1) == ([], "peer copies need two devices or more; this backend has 1")
    assert "counts past the other devices" in KERNEL.device_shapes({**every, "peer": 3}, 1, 3)[1]
    assert all(v >= 0 for s in KERNEL.shapes("full") for v in s.values())  # what a record's shape may hold
    host = KERNEL.complete({"dir": H2D, "bytes": 64})
    assert KERNEL.device_shapes(host, 0, 1) == ([host], "")


# --- planning --------------------------------------------------------------------------------


def _backend(name: str, available: bool, kernels: tuple[str, ...], devices: int = 1) -> dict[str, Any]:
    impls = {k: [{"name": "torch_copy" if k == "transfer" else "numpy", "dtypes": ["fp32"]}] for k in kernels}
    return {
        "name": name,
        "available": available,
        "reason": "" if available else "torch sees no GPU",
        "devices": [{"index": i, "name": f"{name}{i}"} for i in range(devices)],
        "implementations": impls if available else {},
    }


def _plan(
    backends: list[dict[str, Any]], by_default: bool, profile: str = "quick"
) -> tuple[list[Any], list[dict[str, Any]]]:
    plan = Plan(backends=[b["name"] for b in backends], kernels=["gemm", "transfer"], kernels_by_default=by_default)
    shapes = {"gemm": [{"M": 8, "N": 8, "K": 8}], "transfer": KERNEL.shapes(profile)}
    return plan_cases(plan, backends, {"gemm": ("fp32",), "transfer": ("fp32",)}, shapes)


def test_a_default_run_without_a_gpu_leaves_transfer_out() -> None:
    here = [_backend("cpu", True, ("gemm",)), _backend("cuda", False, ())]
    assert runnable_kernels(["gemm", "transfer"], here) == ["gemm"]
    cases, skipped = _plan(here, by_default=True)
    assert {c.kernel for c in cases} == {"gemm"}
    assert all(r["kernel"] != "transfer" for r in skipped)


def test_asked_for_without_a_gpu_transfer_is_one_skipped_record_per_backend() -> None:
    cases, skipped = _plan([_backend("cpu", True, ("gemm",)), _backend("cuda", False, ())], by_default=False)
    mine = {r["backend"]: r for r in skipped if r["kernel"] == "transfer"}
    assert not [c for c in cases if c.kernel == "transfer"] and set(mine) == {"cpu", "cuda"}
    assert all(r["status"] == "skipped" for r in mine.values())
    assert mine["cpu"]["reason"] == "cpu has no implementation of transfer: it runs only on cuda, rocm"
    assert mine["cuda"]["reason"] == "backend cuda unavailable: torch sees no GPU"


def test_with_gpus_every_pair_is_planned_and_one_gpu_skips_peers_with_the_reason() -> None:
    cases, _ = _plan([_backend("cuda", True, ("transfer",), devices=3)], True, "standard")
    peers = {(c.device_index, KERNEL.peer_of(c.shape, c.device_index, 3)) for c in cases if c.shape["dir"] == PEER}
    assert peers == {(i, j) for i in range(3) for j in range(3) if i != j}
    cases, skipped = _plan([_backend("cuda", True, ("transfer",), devices=1)], True, "standard")
    assert not [c for c in cases if c.shape["dir"] == PEER]
    peer_skips = {r["reason"] for r in skipped if r["kernel"] == "transfer"}
    assert peer_skips == {"peer copies need two devices or more; this backend has 1"}


# --- the host link ---------------------------------------------------------------------------


def test_pcie_rates_come_from_generation_and_width() -> None:
    assert [round(link.pcie_lane_gbps(g) or 0, 3) for g in (3, 4, 5)] == [0.985, 1.969, 3.938]
    found = link.pcie_link(5, 16, "test")
    assert found is not None and round(found.gbps, 1) == 63.0 and found.kind == "PCIe 5.0 x16"
    assert "16 lanes x 32 GT/s x 128b/130b / 8" in found.source
    assert link.pcie_link(9, 16, "test") is None and link.pcie_link(4, 0, "test") is None


class FakeNVMLError(Exception):
    pass


def _nvml(c2c: tuple[int, int] | None = None, uuids: tuple[str, ...] = ("GPU-abc",)) -> Any:
    calls: list[str] = []

    def handle(uuid: str) -> str:
        if uuid not in uuids:
            raise FakeNVMLError(uuid)
        return uuid

    def fields(handle: str, ids: list[int]) -> list[Any]:
        values = c2c or (0, 0)
        return [SimpleNamespace(nvmlReturn=0, valueType=1, value=SimpleNamespace(uiVal=v)) for v in values]

    return SimpleNamespace(
        NVMLError=FakeNVMLError,
        NVML_FI_DEV_C2C_LINK_COUNT=170,
        NVML_FI_DEV_C2C_LINK_GET_MAX_BW=172,
        calls=calls,
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByUUID=handle,
        nvmlDeviceGetHandleByPciBusId=lambda bus: (_ for _ in ()).throw(FakeNVMLError(bus)),
        nvmlDeviceGetFieldValues=fields,
        nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 1,
        nvmlDeviceGetCurrPcieLinkWidth=lambda h: 16,
    )


def test_nvml_gives_the_link_maximum_not_the_idle_generation() -> None:
    fake = _nvml()
    found = link.nvml_link(SimpleNamespace(uuid="abc"), fake)
    assert found is not None and round(found.gbps, 1) == 63.0 and found.kind == "PCIe 5.0 x16"
    assert "at description: gen 1 x16" in found.source and fake.calls == ["init", "shutdown"]
    c2c = link.nvml_link(SimpleNamespace(uuid="abc"), _nvml(c2c=(10, 45000)))
    assert c2c is not None and c2c.kind == "NVLink-C2C" and c2c.gbps == 450.0
    assert link.nvml_link(SimpleNamespace(uuid="other", pci_domain_id=0, pci_bus_id=1, pci_device_id=0), fake) is None


def test_amdsmi_matches_the_device_by_pci_bus_id() -> None:
    class AmdSmiException(Exception):
        pass

    def info(handle: str) -> dict[str, Any]:
        return {"pcie_static": {"max_pcie_width": 16, "pcie_interface_version": 5, "max_pcie_speed": 32000}}

    fake = SimpleNamespace(
        AmdSmiException=AmdSmiException,
        amdsmi_init=lambda: None,
        amdsmi_shut_down=lambda: None,
        amdsmi_get_processor_handles=lambda: ["a", "b"],
        amdsmi_get_gpu_device_bdf=lambda h: {"a": "0000:05:00.0", "b": "0000:C1:00.0"}[h],
        amdsmi_get_pcie_info=info,
    )
    props = SimpleNamespace(pci_domain_id=0, pci_bus_id=0xC1, pci_device_id=0)
    found = link.amdsmi_link(props, fake)
    assert found is not None and found.kind == "PCIe 5.0 x16" and "amdsmi" in found.source
    assert link.amdsmi_link(SimpleNamespace(), fake) is None  # torch gave no bus id: no guess


def test_without_a_reading_the_catalog_says_with_its_source() -> None:
    catalog = Catalog.load()
    h200 = catalog.host_link("NVIDIA H200")
    assert h200 is not None and h200.gbps == 63.0 and h200.what == "PCIe 5.0 x16"
    facts = link.link_facts(None, h200)
    assert facts["host_link_gbps"] == 63.0 and facts["host_link_source"].startswith("catalog nvidia-h200-sxm (https://")
    read = link.pcie_link(4, 16, "NVML")
    assert link.link_facts(read, h200)["host_link"] == "PCIe 4.0 x16"  # what the device reports wins
    assert link.link_facts(None, None) == {}


# --- the copies, on CPU tensors --------------------------------------------------------------


class FakeStream:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def wait_stream(self, other: FakeStream) -> None:
        self.log.append(f"{self.name} waits {other.name}")


class FakeCuda:
    """torch.cuda's stream and peer calls, logged; the "devices" are the CPU."""

    def __init__(self, count: int = 2) -> None:
        self.log: list[str] = []
        self.count = count
        self.main = FakeStream(self.log, "main")
        self.made = 0

    def device_count(self) -> int:
        return self.count

    def can_device_access_peer(self, a: int, b: int) -> bool:
        return True

    def Stream(self, device: Any) -> FakeStream:  # noqa: N802  (torch's name)
        self.made += 1
        return FakeStream(self.log, f"side{self.made}")

    def current_stream(self, device: Any) -> FakeStream:
        return self.main

    def stream(self, stream: FakeStream) -> Any:
        log = self.log

        class Context:
            def __enter__(self) -> None:
                log.append(f"on {stream.name}")

            def __exit__(self, *exc: Any) -> None:
                return None

        return Context()

    def synchronize(self, device: Any) -> None:
        self.log.append("sync")


def _runtime(cuda: Any = None, pinned: list[Any] | None = None) -> natives.Runtime:
    def pin(t: Any) -> Any:
        if pinned is not None:
            pinned.append(t)
        return t

    return natives.Runtime(cuda or FakeCuda(), lambda index: "cpu", pin)


def _copy(direction: int, pinned: int = 1, peer: int = 0, cuda: Any = None, pins: list[Any] | None = None) -> Any:
    shape = KERNEL.complete({"dir": direction, "bytes": 4096 + 64, "pinned": pinned, "peer": peer})
    src = torch.from_numpy(KERNEL.make_inputs(shape, "fp32", 0)["src"])
    out = torch.zeros(KERNEL.output_shape(shape))
    call, config = natives.build(src, out, shape, _runtime(cuda, pins))
    return shape, src, out, call, config


@pytest.mark.parametrize("direction,pinned", [(H2D, 1), (H2D, 0), (D2H, 1), (D2H, 0), (D2D, 1)])
def test_each_copy_delivers_its_source_into_the_destination_it_names(direction: int, pinned: int) -> None:
    pins: list[Any] = []
    shape, src, out, call, config = _copy(direction, pinned, pins=pins)
    assert not bool((call.out == src).all())  # nothing arrived before the call
    assert call() is call.out and torch.equal(call.out, src)
    assert (call.out is out) == (direction != D2H)  # device to host: a host tensor, not the device's out
    assert config["nvbandwidth"] and config["measures"] == "bandwidth"
    if direction in (H2D, D2H):
        assert config["host_memory"] == ("pinned" if pinned else "pageable") and config["non_blocking"] == bool(pinned)
        assert len(pins) == pinned  # the pinned path page-locks one host tensor, the pageable none
        assert config["link"] == "host"


def test_peer_copies_go_to_the_other_device_and_both_ways_on_two_streams() -> None:
    shape, src, out, call, config = _copy(PEER, peer=1)
    assert torch.equal(call(), src) and config["peer"] == 1 and config["peer_access"] is True
    cuda = FakeCuda()
    shape, src, out, call, config = _copy(PEER_BIDIR, peer=1, cuda=cuda)
    assert cuda.log[:4] == ["side1 waits main", "on side1", "side2 waits main", "on side2"]
    assert cuda.log[4:6] == ["main waits side1", "main waits side2"]  # the end follows both copies
    assert "both copies" in config["timed"] and torch.equal(call(), src)
    with pytest.raises(RuntimeError, match="does not name another"):
        _copy(PEER, peer=2)


def test_verification_catches_a_wrong_copy() -> None:
    shape, src, out, call, _ = _copy(H2D)
    tolerance = KERNEL.tolerance("fp32", shape)
    reference = KERNEL.reference({"src": src.numpy()}, shape)
    assert parity.check(call().numpy(), reference, tolerance).passed
    wrong = call().numpy().copy()
    wrong[7] = np.nextafter(wrong[7], np.float32(2))  # one ulp off in one element
    result = parity.check(wrong, reference, tolerance)
    assert not result.passed and result.mismatches == 1


def test_a_small_copy_is_recorded_as_latency() -> None:
    shape = KERNEL.complete({"dir": H2D, "bytes": 4})
    src = torch.ones(1)
    call, config = natives.build(src, torch.zeros(1), shape, _runtime())
    assert config["measures"] == "latency" and "seconds of one copy" in config["figure"]


def test_the_host_destination_is_what_the_backend_clears_before_timing() -> None:
    from hwbench.backends.torch_gpu import TorchPrepared

    _, src, _, call, config = _copy(D2H, pinned=0)
    prepared = TorchPrepared(call, config, out=getattr(call, "out", None))
    prepared.run()
    assert prepared.clear_output() and bool(torch.isnan(call.out).all())


# --- on a GPU --------------------------------------------------------------------------------

GPU = torch.cuda.is_available()


@pytest.mark.skipif(not GPU, reason="no GPU: torch sees no CUDA or ROCm device")
@pytest.mark.parametrize(
    "shape",
    [
        {"dir": H2D, "bytes": 4 * MIB, "pinned": 1},
        {"dir": H2D, "bytes": 4 * MIB, "pinned": 0},
        {"dir": D2H, "bytes": 4 * MIB, "pinned": 1},
        {"dir": D2H, "bytes": 4 * MIB, "pinned": 0},
        {"dir": D2D, "bytes": 4 * MIB},
        {"dir": H2D, "bytes": 4},
    ],
)
def test_cases_run_and_check_on_a_gpu(shape: dict[str, int]) -> None:
    from hwbench.run.case import CaseRequest, CaseRunner
    from hwbench.run.timing import TimingConfig

    backend = "rocm" if torch.version.hip else "cuda"
    request = CaseRequest(
        "transfer", "torch_copy", backend, 0, "fp32", KERNEL.complete(shape), 0, asdict(TimingConfig(0.01, 0.05))
    )
    record = CaseRunner().run(request)
    assert record["status"] == "ok", record["reason"]
    assert record["parity"]["mismatches"] == 0 and record["timing"]["median_s"] > 0


@pytest.mark.skipif(not GPU or torch.cuda.device_count() < 2, reason="peer copies need two GPUs")
@pytest.mark.parametrize("direction", [PEER, PEER_BIDIR])
def test_peer_cases_run_and_check_on_two_gpus(direction: int) -> None:
    from hwbench.run.case import CaseRequest, CaseRunner
    from hwbench.run.timing import TimingConfig

    backend = "rocm" if torch.version.hip else "cuda"
    shape = KERNEL.complete({"dir": direction, "bytes": 4 * MIB, "peer": 1})
    record = CaseRunner().run(
        CaseRequest("transfer", "torch_copy", backend, 0, "fp32", shape, 0, asdict(TimingConfig(0.01, 0.05)))
    )
    assert record["status"] == "ok", record["reason"]
