"""The one-launch Triton AllReduce (``triton_symm``) as it compiles for an H100/H200 (sm_90) and for
gfx942, read without a GPU: its waits poll with loads (``ld.acquire.sys`` on NVIDIA, system-coherent
loads on AMD), never with read-modify-writes; one release exchange signals every peer, from one lane
a peer; and a grid that an SM count cannot hold at once is re-planned or refused, from the device's
properties as torch reports them and the compiled kernel's registers (``ptxas -v``)."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import needs
import pytest

needs.module("triton")
torch = needs.module("torch")

from hwbench.collective import gpu  # noqa: E402
from hwbench.collective.shm import CollectiveError  # noqa: E402
from hwbench.compile.stats import compile_variant, find_ptxas, ptxas_stats, triton_target  # noqa: E402
from hwbench.kernels.allreduce import triton as kernel  # noqa: E402

VARIANTS = ("allreduce_oneshot_fp32_r8", "allreduce_twoshot_bf16_r8")

#: torch 2.11 on CUDA 13, an H200, as ``torch.cuda.get_device_properties`` reports it.
H200 = SimpleNamespace(
    name="NVIDIA H200",
    gcnArchName="NVIDIA H200",
    major=9,
    minor=0,
    multi_processor_count=132,
    max_threads_per_multi_processor=2048,
    regs_per_multiprocessor=65536,
    shared_memory_per_block=48 * 1024,
    shared_memory_per_multiprocessor=228 * 1024,
    warp_size=32,
)

_CACHE: dict[tuple[str, str], Any] = {}


def _compiled(arch: str, name: str) -> Any:
    if (arch, name) not in _CACHE:
        (variant,) = [v for v in kernel.compile_variants(arch) if v["name"] == name]
        _CACHE[arch, name] = compile_variant(variant, triton_target(arch))
    return _CACHE[arch, name]


def _loops(lines: list[str], label: str, branch: str) -> list[list[str]]:
    """The innermost loops of an assembly listing: the lines from a label to a later branch back to it
    (the last branch back to each label) that hold no such range of their own."""
    where: dict[str, int] = {}
    last: dict[int, int] = {}  # a label's line -> the last branch back to it
    for i, line in enumerate(lines):
        m = re.match(label, line)
        if m:
            where[m.group(1)] = i
        b = re.search(branch, line)
        if b and b.group(1) in where:
            last[where[b.group(1)]] = i
    spans = list(last.items())
    inner = [(a, b) for a, b in spans if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in spans)]
    return [lines[a : b + 1] for a, b in inner]


def _ptx_waits(ptx: str) -> list[list[str]]:
    """The PTX loops that read the global timer: the bounded waits for a peer's signal."""
    loops = _loops(ptx.splitlines(), r"^(\$L__BB\d+_\d+):", r"\bbra(?:\.uni)?\s+(\$L__BB\d+_\d+);")
    return [body for body in loops if any("%globaltimer" in line for line in body)]


@pytest.mark.parametrize("name", VARIANTS)
def test_sm90_waits_poll_with_acquire_loads_not_read_modify_writes(name: str) -> None:
    ptx = _compiled("sm_90", name).asm["ptx"]
    waits = _ptx_waits(ptx)
    assert len(waits) >= 2, "a one-launch AllReduce waits at least twice (before reading, after writing)"
    for body in waits:
        text = "\n".join(body)
        assert re.search(r"\bld\.acquire\.sys\.global\.b32\b", text), text
        assert not re.search(r"\batom\.", text), f"a read-modify-write in the spin loop:\n{text}"


@pytest.mark.parametrize("name", VARIANTS)
def test_sm90_one_release_exchange_signals_every_peer_from_parallel_lanes(name: str) -> None:
    ptx = _compiled("sm_90", name).asm["ptx"]
    waits = len(_ptx_waits(ptx))
    signals = re.findall(r"^\s*@(%p\d+) atom\.global\.sys\.release\.exch\.b32 .*$", ptx, re.M)
    # One instruction a barrier for all 8 peers, predicated to the lanes that hold a peer each (a loop
    # of scalar atomics would issue 8 a barrier, one after another).
    assert len(signals) == waits, (signals, waits)
    atomics = re.findall(r"\batom\.", ptx)
    assert len(atomics) <= 2 * waits, f"{len(atomics)} atomics for {waits} barriers of 8 ranks"
    lane = re.search(r"and\.b32\s+(%r\d+), %r\d+, 7;", ptx)  # the peer a thread signals: tid & 7
    assert lane, "no lane index from the thread index"


def test_gfx942_waits_poll_with_system_coherent_loads() -> None:
    asm = _compiled("gfx942", "allreduce_oneshot_fp32_r8").asm["amdgcn"]
    loops = _loops(asm.splitlines(), r"^(\.LBB\d+_\d+):", r"\bs_(?:c?branch\w*)\s+(\.LBB\d+_\d+)")
    waits = ["\n".join(body) for body in loops if any("s_memrealtime" in line for line in body)]
    assert waits
    for text in waits:
        assert not re.search(r"\b(?:global|buffer|flat)_atomic", text), text
        assert re.search(r"_load_dword\b.*\bsc0 sc1\b", text), text  # past the caches, to memory
    assert re.search(r"global_atomic_swap .*\n(?:.*\n){0,2}\s*buffer_inv sc0 sc1", asm)  # the acquire


def _footprint(name: str) -> dict[str, int]:
    compiled = _compiled("sm_90", name)
    ptxas = find_ptxas(True, "sm_90")
    if ptxas is None:
        pytest.skip("no ptxas in Triton's wheel or on PATH")
    stats = ptxas_stats(compiled.asm["ptx"], ptxas)
    return {"registers": stats["registers"], "shared": compiled.metadata.shared, "threads": kernel.NUM_WARPS * 32}


@pytest.mark.parametrize("name", VARIANTS)
def test_the_largest_resident_grid_comes_from_registers_shared_memory_and_threads(name: str) -> None:
    used = _footprint(name)
    assert 0 < used["registers"] <= 255 and used["threads"] == 256
    warps = 65536 // (-(-used["registers"] * 32 // 256) * 256)  # registers go a warp at a time, 256 at once
    want = min(8, warps // 8)  # 2048 threads an SM, 8 warps a block
    per_sm, limit = kernel.resident_per_sm(H200, **used)
    assert (per_sm, limit) == (want, "registers" if want < 8 else "threads")
    assert kernel.co_resident(132 * want, H200, used) == ""
    reason = kernel.co_resident(132 * want + 1, H200, used)
    assert f"{132 * want + 1} programs cannot be resident at once on NVIDIA H200" in reason
    assert f"132 SMs x {want} blocks each (limited by {limit}: {used['registers']} registers a thread" in reason
    roomy = SimpleNamespace(**{**vars(H200), "regs_per_multiprocessor": 1 << 20})
    assert kernel.resident_per_sm(roomy, **used) == (8, "threads")
    tight = SimpleNamespace(**{**vars(roomy), "shared_memory_per_multiprocessor": 5 * 1024})
    assert kernel.resident_per_sm(tight, used["registers"], 1024, 256) == (2, "shared memory")  # 1 KB reserved


def _impl(monkeypatch: pytest.MonkeyPatch, props: SimpleNamespace, registers: int, programs: int) -> Any:
    impl = gpu.TritonSymmAllReduce.__new__(gpu.TritonSymmAllReduce)
    impl.world = SimpleNamespace(rank=0, local_rank=0, local_size=2, timeout_s=30.0)  # type: ignore[assignment]
    impl.handles = [SimpleNamespace(buffer_ptrs_dev=1000, signal_pad_ptrs_dev=3000)] * 2  # type: ignore[list-item]
    impl.err = torch.zeros(1, dtype=torch.int32)
    impl.programs, impl.clock, impl.timeout_ns, impl.config = programs, 1, 30 * 10**9, {}
    impl.kernel = kernel
    impl.device = torch.device("cuda", 0)
    built: list[dict[str, Any]] = []

    def compiled(*args: Any) -> Any:
        built.append(args[6])
        meta = SimpleNamespace(shared=64, num_warps=kernel.NUM_WARPS, warp_size=32)
        return SimpleNamespace(n_regs=registers, metadata=meta)

    monkeypatch.setattr(kernel, "compiled", compiled)
    monkeypatch.setattr(kernel, "launch", lambda *args: pytest.fail("launched"))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    impl.built = built  # type: ignore[attr-defined]
    return impl


def test_a_grid_past_what_the_sms_hold_is_planned_again_within_it(monkeypatch: pytest.MonkeyPatch) -> None:
    impl = _impl(monkeypatch, H200, registers=32, programs=4096)  # a 64 KB signal pad at 2 ranks
    inp = torch.empty(64 << 20, dtype=torch.bfloat16)  # 128 MB: two-shot over 4096 programs
    impl.operation(inp, inp, "bf16")
    assert impl.built[0]["grid"] == (4096,) and impl.config["resident_programs"] == 132 * 8
    assert impl.config["programs"] == 132 * 8 and impl.built[-1]["grid"] == (132 * 8,)


def test_a_grid_no_sm_can_hold_is_a_skip_with_the_reason_not_a_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    props = SimpleNamespace(**{**vars(H200), "regs_per_multiprocessor": 8192})  # 256 threads x 40 > 8192
    impl = _impl(monkeypatch, props, registers=40, programs=16)
    inp = torch.empty(1000, dtype=torch.float32)
    with pytest.raises(CollectiveError) as caught:
        impl.operation(inp, torch.empty_like(inp), "fp32")
    assert caught.value.status == "skipped"
    assert "cannot be resident at once on NVIDIA H200: 132 SMs x 0 blocks each (limited by registers" in str(
        caught.value
    )
