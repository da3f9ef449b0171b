"""AllReduce on GPUs, as far as a machine without one allows: the listing and skip reasons, a run
that selects GPU cases (never crashes or hangs), the GPU sweep, device-side fill and check on
CPU tensors, and the one-launch Triton AllReduce under the interpreter (ranks as processes sharing
their buffers and signal pads, synchronised only by the kernel's own barriers), its bounded waits,
and how it sets up torch's symmetric memory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import needs
import numpy as np
import pytest
from conftest import hwbench_cmd

torch = needs.module("torch")

from hwbench.backends.cuda import CUDABackend  # noqa: E402
from hwbench.backends.rocm import ROCmBackend  # noqa: E402
from hwbench.collective import gpu, run  # noqa: E402
from hwbench.collective.dispatch import support  # noqa: E402
from hwbench.collective.pattern import row_pattern, sum_pattern  # noqa: E402
from hwbench.core.registry import implementations  # noqa: E402
from hwbench.run.case import CaseRequest  # noqa: E402


def test_gpu_backends_list_nccl_and_triton_symm() -> None:
    for backend, library in ((CUDABackend(), "NCCL"), (ROCmBackend(), "RCCL")):
        impls = {i.name: i for i in implementations(backend, "allreduce")}
        assert list(impls) == ["nccl", "triton_symm"]
        assert impls["nccl"].kind == "native" and library in impls["nccl"].description
        assert impls["triton_symm"].kind == "portable" and impls["triton_symm"].language == "triton"
        assert set(impls["nccl"].dtypes) == {"fp32", "bf16", "fp16"}


@pytest.mark.parametrize("count", [0, 1])
def test_fewer_than_two_gpus_is_a_skip_saying_so(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    backend = CUDABackend()
    for impl in implementations(backend, "allreduce"):
        if impl.language == "triton" and sys.modules.get("triton") is None:
            needs.module("triton")
        verdict = support(impl, "fp32", backend.name)
        assert not verdict.ok and verdict.reason == f"needs at least 2 GPUs, found {count}"


def test_selecting_gpu_allreduce_here_is_a_record_saying_why(tmp_path: Path) -> None:
    out = tmp_path / "g.json"
    proc = subprocess.run(
        hwbench_cmd(
            "run", "--backend", "cuda,rocm", "--kernel", "allreduce", "--ranks", "2", "--out", str(out), "--quiet"
        ),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 1 and "no case ran" in proc.stderr, proc.stdout + proc.stderr  # named, none ran
    import json

    records = json.loads(out.read_text())["records"]
    assert {r["backend"] for r in records} == {"cuda", "rocm"}
    for r in records:
        assert r["status"] == "skipped" and "unavailable" in r["reason"], r


def _cuda_cases(ranks: int, devices: int = 2, counts: tuple[int, ...] = (1, 256)) -> list[CaseRequest]:
    return [
        CaseRequest(
            "allreduce",
            impl,
            "cuda",
            index,
            "fp32",
            {"count": n, "ranks": ranks},
            0,
            {"budget_s": 0.01, "warmup_s": 0.0},
        )
        for index in range(devices)
        for n in counts
        for impl in ("nccl", "triton_symm")
    ]


def _described(devices: int) -> list[dict]:
    backend = CUDABackend()
    impls = [
        {"name": i.name, "kind": i.kind, "language": i.language, "dtypes": list(i.dtypes)}
        for i in implementations(backend, "allreduce")
    ]
    return [
        {
            "name": "cuda",
            "available": True,
            "reason": "",
            "implementations": {"allreduce": impls},
            "devices": [{"index": i, "name": "GPU", "vendor": "NVIDIA", "kind": "gpu"} for i in range(devices)],
        }
    ]


def test_gpu_cases_run_once_per_node_and_the_profile_sweep_reaches_256_mib() -> None:
    from hwbench.kernels.allreduce.spec import KERNEL

    quick = tuple(s["count"] for s in KERNEL.profiles["quick"])
    cases = run.gpu_cases(_cuda_cases(2, devices=4, counts=quick))
    assert {c.device_index for c in cases} == {0}
    counts = sorted({c.shape["count"] for c in cases})
    assert counts[0] * 4 == 4 and counts[-1] * 4 >= 256 * 2**20
    assert len(cases) == 2 * len(counts)
    chosen = run.gpu_cases(_cuda_cases(2, counts=(100,)))  # --shape sizes stay as asked
    assert {c.shape["count"] for c in chosen} == {100}


def test_gpu_cases_without_gpus_are_skipped_not_launched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    records, interrupted, info = run.run_collective(_cuda_cases(2), _described(2), 30.0, dtypes=["fp32"])
    assert not interrupted and info["launches"] == []
    assert len(records) == 2 * 2 * 2 and all(r["status"] == "skipped" for r in records)
    assert {r["reason"] for r in records} == {"needs at least 2 GPUs, found 0"}
    records, _, _ = run.run_collective(_cuda_cases(4), _described(2), 30.0, dtypes=["fp32"])
    assert all("4 ranks need one GPU each; cuda has 2" in r["reason"] for r in records)


def test_gpu_ranks_without_a_gpu_end_as_records_not_hangs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Even launched (the support check bypassed), ranks that find no GPU give one record per case."""
    monkeypatch.setattr(run, "_support", lambda case, backends: None)
    records, interrupted, info = run.run_collective(
        _cuda_cases(2, devices=1, counts=(64,)), _described(1), 20.0, dtypes=["fp32"]
    )
    assert not interrupted and len(info["launches"]) == 1
    assert len(records) == 2 * 2
    for r in records:
        assert r["status"] == "skipped" and re.search(
            r"local rank [01] needs GPU [01]; this node has 0", r["reason"]
        ), r


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_device_fill_and_check_are_exact(dtype: torch.dtype) -> None:
    impl = gpu.NcclAllReduce.__new__(gpu.NcclAllReduce)
    impl.device = torch.device("cpu")  # the same tensor code as on a GPU
    buf = torch.empty(1000, dtype=dtype)
    impl.fill(buf, row_pattern(3, 5))
    want = np.array([row_pattern(3, 5)[i % 17] for i in range(1000)])
    assert np.array_equal(buf.double().numpy(), want)
    impl.fill(buf, sum_pattern(8, 1))
    assert impl.check(buf, sum_pattern(8, 1)) == (0, 0.0)
    buf[[0, 999]] += 2
    buf[5] = float("nan")
    wrong, worst = impl.check(buf, sum_pattern(8, 1))
    assert wrong == 3 and worst == float("inf")
    impl.poison(buf)
    assert impl.check(buf, sum_pattern(8, 1))[0] == 1000


def test_two_shot_slices_cover_the_message_once() -> None:
    needs.module("triton")
    from hwbench.kernels.allreduce import triton as ar

    for count, ranks, size in [(1, 8, 4), (100_003, 3, 2), (65536, 8, 4), (7, 2, 2)]:
        covered = [i for lo, hi in ar.slices(count, ranks, size) for i in range(lo, hi)]
        assert covered == list(range(count))


def test_every_rank_gets_the_same_grid_within_the_signal_pad() -> None:
    needs.module("triton")
    from hwbench.kernels.allreduce import triton as ar

    programs = ar.max_programs(9216, 8)
    assert programs == 144 and ar.max_programs(2048, 8) == 32
    for count, ranks, size in [(1, 8, 4), (700, 3, 4), (100_003, 3, 2), (64 << 20, 8, 2)]:
        plans = [ar.plan(count, ranks, r, size, 256 * 1024, programs) for r in range(ranks)]
        assert len({p["grid"] for p in plans}) == 1 and {p["ONESHOT"] for p in plans} == {plans[0]["ONESHOT"]}
        assert 1 <= plans[0]["grid"][0] <= programs
        if plans[0]["ONESHOT"]:  # one element block per program: the whole message is covered
            assert plans[0]["grid"][0] * ar.BLOCK >= count
        else:
            assert [(p["lo"], p["hi"]) for p in plans] == ar.slices(count, ranks, size)
    big = ar.plan(200_000, 8, 0, 4, 256 * 1024, 4)  # 1 MB: more blocks than programs, so two-shot
    assert not big["ONESHOT"] and big["grid"] == (4,)


# Ranks as forked processes running the interpreter, every rank's buffers and signal pad in shared
# memory at the same address in each, as symmetric memory maps them on a node: the kernel's own
# barriers are the only synchronisation, as on GPUs.
SYMMETRIC = """
import mmap, multiprocessing as mp, sys
import numpy as np, torch
from hwbench.collective.pattern import fill_periodic, row_pattern, sum_pattern
from hwbench.kernels.allreduce import triton as k

RANKS, MAX, PROGRAMS, BLOCK, ONESHOT_MAX = 3, 40_003, 4, 256, 4096
maps = {name: [mmap.mmap(-1, MAX * 4 + 4096) for _ in range(RANKS)] for name in ("in", "out")}
maps["pad"] = [mmap.mmap(-1, 4 * k.PHASES * RANKS * PROGRAMS) for _ in range(RANKS)]
maps["err"] = [mmap.mmap(-1, 4096) for _ in range(RANKS)]

def view(name, r, dtype):
    return torch.frombuffer(maps[name][r], dtype=torch.uint8).view(dtype)

def table(name):
    return torch.tensor([view(name, r, torch.uint8).data_ptr() for r in range(RANKS)], dtype=torch.int64)

def rank(r, ranks, spins, cases, results):
    tabs = {n: table(n) for n in ("in", "out", "pad")}
    err = view("err", r, torch.int32)[:1]
    bad, seen = [], set()
    for seed, (dtype, count, in_place) in enumerate(cases):
        mine = view("in", r, dtype)[:count]
        out = mine if in_place else view("out", r, dtype)[:count]
        host = np.empty(count)
        fill_periodic(host, row_pattern(r, seed))
        mine.copy_(torch.from_numpy(host))  # peers read it only after this rank's first signal
        if not in_place:
            out.fill_(float("nan"))
        tables = {"inputs": tabs["in"].data_ptr(), "outputs": tabs["in" if in_place else "out"].data_ptr(),
                  "pads": tabs["pad"].data_ptr()}
        step = k.plan(count, ranks, r, mine.element_size(), ONESHOT_MAX, PROGRAMS, block=BLOCK)
        seen.add((step["ONESHOT"], step["grid"][0]))
        k.launch(tables, err, out, count, r, ranks, step, in_place, spins, k.CLOCKS["spins"], block=BLOCK)
        want = np.empty(count)
        fill_periodic(want, sum_pattern(ranks, seed))
        wrong = int((out.double() != torch.from_numpy(want)).sum())
        if wrong or int(err[0]):
            bad.append((str(dtype), count, in_place, step, wrong, int(err[0])))
    pads_clean = all(int(v) == 0 for v in view("pad", r, torch.int32))
    results.put((r, bad, sorted(seen), pads_clean, int(err[0])))

ctx = mp.get_context("fork")
results = ctx.Queue()
if sys.argv[1] == "exact":
    dtypes, counts = (torch.float32, torch.bfloat16), (1, 700, 5000, 40_003)
    cases = [(d, c, ip) for d in dtypes for c in counts for ip in (False, True)]
    procs = [ctx.Process(target=rank, args=(r, RANKS, 10**6, cases, results)) for r in range(RANKS)]
else:  # rank 1 never comes: rank 0's waits give up
    procs = [ctx.Process(target=rank, args=(0, 2, 50, [(torch.float32, 700, False)], results))]
for p in procs:
    p.start()
got = sorted(results.get(timeout=600) for _ in procs)
for p in procs:
    p.join()
print(repr(got), [p.exitcode for p in procs])
"""


def _symmetric(tmp_path: Path, mode: str) -> tuple[list, list[int]]:  # type: ignore[type-arg]
    needs.module("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", TRITON_CACHE_DIR=str(tmp_path / "triton"))
    proc = subprocess.run([sys.executable, "-c", SYMMETRIC, mode], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    got, codes = proc.stdout.strip().splitlines()[-1].rsplit(" [", 1)
    return eval(got), [int(c) for c in codes.rstrip("]").split(",")]  # noqa: S307  (our own script's repr)


def test_one_launch_allreduce_is_exact_across_ranks_under_the_interpreter(tmp_path: Path) -> None:
    got, codes = _symmetric(tmp_path, "exact")
    assert codes == [0, 0, 0]
    for rank, bad, seen, pads_clean, err in got:
        assert not bad and err == 0, (rank, bad)
        assert pads_clean, f"rank {rank}'s signal pad is not back to zero"
        assert {oneshot for oneshot, _ in seen} == {True, False}  # both paths ran
        assert (False, 4) in seen  # two-shot with more blocks than programs: the loop strides
        assert any(oneshot and programs > 1 for oneshot, programs in seen)


def test_a_missing_peer_ends_the_launch_with_the_timeout_flag_set(tmp_path: Path) -> None:
    (got, codes) = _symmetric(tmp_path, "timeout")
    ((rank, bad, _seen, _pads, err),) = got
    assert codes == [0] and rank == 0 and err == 1, got  # returned, flag set, no trap
    assert bad and bad[0][-1] == 1


class _Handle:
    buffer_ptrs_dev, signal_pad_ptrs_dev = 1000, 3000

    def __init__(self, base: int) -> None:
        self.buffer_ptrs_dev, self.signal_pad_ptrs_dev = base, base + 1

    def barrier(self, channel: int = 0, timeout_ms: int = 0) -> None:
        raise AssertionError("the host never synchronises ranks: the kernel does")


def _symm_impl(launches: list[dict[str, object]], err: int = 0) -> gpu.TritonSymmAllReduce:
    needs.module("triton")
    from types import SimpleNamespace

    from hwbench.kernels.allreduce import triton as ar

    impl = gpu.TritonSymmAllReduce.__new__(gpu.TritonSymmAllReduce)
    impl.world = SimpleNamespace(rank=1, local_rank=1, local_size=4, timeout_s=30.0)  # type: ignore[assignment]
    impl.handles = [_Handle(1000), _Handle(2000)]
    impl.err = torch.tensor([err], dtype=torch.int32)
    impl.programs, impl.clock, impl.timeout_ns, impl.config = 144, 1, 30 * 10**9, {}
    impl.kernel = SimpleNamespace(
        plan=ar.plan, launch=lambda *args: launches.append(dict(zip(("tables", "err", "out"), args[:3], strict=False)))
    )  # type: ignore[assignment]
    impl.device = torch.device("cpu")
    return impl


@pytest.mark.parametrize("count", [100, 10_000_000])
@pytest.mark.parametrize("in_place", [False, True])
def test_triton_symm_is_one_launch_per_call_with_no_host_barrier(count: int, in_place: bool) -> None:
    launches: list[dict[str, object]] = []
    impl = _symm_impl(launches)
    inp = torch.empty(count, dtype=torch.bfloat16)
    out = inp if in_place else torch.empty(count, dtype=torch.bfloat16)
    op = impl.operation(inp, out, "bf16")
    for _ in range(3):
        op()
    assert len(launches) == 3  # NCCL's count: one launch per AllReduce
    tables = launches[0]["tables"]
    assert tables == {"inputs": 1000, "outputs": 1000 if in_place else 2000, "pads": 1001}
    assert launches[0]["out"] is out


def test_a_device_barrier_timeout_is_a_timeout_error_not_a_trap(monkeypatch: pytest.MonkeyPatch) -> None:
    from hwbench.collective.shm import CollectiveError

    monkeypatch.setattr(gpu.GPUCollective, "time_loop", lambda self, op, iters: np.zeros(iters))
    assert _symm_impl([]).time_loop(lambda: None, 3).shape == (3,)
    impl = _symm_impl([], err=1)
    for step in (lambda: impl.check(torch.zeros(4), sum_pattern(4, 0)), lambda: impl.time_loop(lambda: None, 3)):
        with pytest.raises(CollectiveError) as caught:
            step()
        assert caught.value.status == "timeout" and "gave up" in str(caught.value)


def test_symmetric_memory_set_up_follows_torch_versions() -> None:
    from types import SimpleNamespace

    from typing_extensions import deprecated

    from hwbench.collective.shm import CollectiveError

    calls: list[str] = []

    @deprecated("not needed any more", category=FutureWarning)
    def new_enable(name: str) -> None:
        calls.append("deprecated " + name)

    gpu.enable_for_group(SimpleNamespace(enable_symm_mem_for_group=new_enable), "0")
    gpu.enable_for_group(SimpleNamespace(enable_symm_mem_for_group=lambda name: calls.append("old " + name)), "0")
    gpu.enable_for_group(SimpleNamespace(), "0")
    assert calls == ["old 0"]  # the deprecated one is never called, so no FutureWarning

    chosen: list[str] = []
    fresh = SimpleNamespace(set_backend=chosen.append, get_backend=lambda device: None)
    assert gpu.pin_backend(fresh, "cuda:0") == "CUDA" and chosen == ["CUDA"]
    assert gpu.pin_backend(SimpleNamespace(), "cuda:0") == "CUDA"  # torch before set_backend: CUDA is all it has
    other = SimpleNamespace(set_backend=chosen.append, get_backend=lambda device: "NVSHMEM")
    with pytest.raises(CollectiveError) as caught:
        gpu.pin_backend(other, "cuda:0")
    assert caught.value.status == "skipped" and "NVSHMEM" in str(caught.value)
    assert gpu.signal_pad_bytes(SimpleNamespace(get_signal_pad_size=lambda: 9216)) == 9216
    assert gpu.signal_pad_bytes(SimpleNamespace()) == 2048
