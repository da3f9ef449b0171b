"""AllReduce on GPUs, as far as a machine without one allows: the listing and skip reasons, a run
that selects GPU cases (never crashes or hangs), the GPU sweep, device-side fill and check on
CPU tensors, and the symmetric-memory algorithm with the Triton reduction under the interpreter
(ranks as threads, peers' buffers shared, the signal-pad barrier played by a thread barrier)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import hwbench_cmd

torch = pytest.importorskip("torch")

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
            pytest.importorskip("triton")
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
    for count, ranks, size in [(1, 8, 4), (100_003, 3, 2), (65536, 8, 4), (7, 2, 2)]:
        covered = [i for lo, hi in gpu.slices(count, ranks, size) for i in range(lo, hi)]
        assert covered == list(range(count))


SYMMETRIC = """
import threading, torch
from hwbench.collective.gpu import symmetric_operation
from hwbench.collective.pattern import fill_periodic, row_pattern, sum_pattern
from hwbench.kernels.allreduce import triton as k

RANKS, MAX = 3, 200_000
lock = threading.Lock()

class Handle:  # torch's _SymmetricMemory as the algorithm uses it, over host tensors
    def __init__(self, gate):
        self.buffers = [torch.zeros(MAX * 4, dtype=torch.uint8) for _ in range(RANKS)]
        self.gate = gate
    def get_remote_tensor(self, peer, sizes, dtype):
        return self.buffers[peer].view(dtype)[:sizes[0]]
    def barrier(self, channel=0, timeout_ms=0):
        self.gate.wait(timeout_ms / 1000)

def reduce(out, bufs, lo, hi):
    with lock:  # the interpreter is not re-entrant across threads; ranks still interleave between steps
        k.reduce(out, bufs, lo, hi, block=4096)

def rank(r, gate, inputs, outputs, count, dtype, in_place, errors):
    try:
        scratch = torch.empty(MAX, dtype=dtype)
        op = symmetric_operation(inputs, outputs, scratch, r, RANKS, count, dtype, in_place, reduce, 20000,
                                 oneshot_max_bytes=4096)
        mine = inputs.get_remote_tensor(r, (count,), dtype)
        out = mine if in_place else outputs.get_remote_tensor(r, (count,), dtype)
        for seed in range(2):
            host = torch.empty(count, dtype=torch.float64).numpy()
            fill_periodic(host, row_pattern(r, seed))
            mine.copy_(torch.from_numpy(host))
            if not in_place:
                out.fill_(float("nan"))
            gate.wait(20)  # the test's own step: every rank has written its input
            op()
            want = torch.empty(count, dtype=torch.float64).numpy()
            fill_periodic(want, sum_pattern(RANKS, seed))
            bad = int((out.double() != torch.from_numpy(want)).sum())
            if bad:
                errors.append((r, count, str(dtype), in_place, bad))
            gate.wait(20)
    except BaseException as exc:
        errors.append((r, repr(exc)))
        gate.abort()

errors = []
for dtype in (torch.float32, torch.bfloat16):
    for count in (1, 700, 5000, 100_003):          # one-shot up to 4 KiB here, then reduce-scatter + all-gather
        for in_place in (False, True):
            gate = threading.Barrier(RANKS)
            inputs, outputs = Handle(gate), Handle(gate)
            threads = [threading.Thread(target=rank, args=(r, gate, inputs, outputs, count, dtype, in_place, errors))
                       for r in range(RANKS)]
            for t in threads: t.start()
            for t in threads: t.join()
assert not errors, errors
print("exact")
"""


def test_symmetric_allreduce_with_the_triton_reduction_is_exact_under_the_interpreter(tmp_path: Path) -> None:
    pytest.importorskip("triton", reason="triton is not installed (pip install 'hwbench[cuda]')")
    env = dict(os.environ, TRITON_INTERPRET="1", TRITON_CACHE_DIR=str(tmp_path / "triton"))
    proc = subprocess.run([sys.executable, "-c", SYMMETRIC], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and "exact" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]
