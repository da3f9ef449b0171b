"""AllReduce: the llvmlite shared-memory kernels across forked processes, the launcher end to end
(2, 4 and 8 ranks, native and portable, exact), dead and stuck ranks, Ctrl-C, torchrun, and the
Triton reduction under the interpreter."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import needs
import numpy as np
import pytest
from conftest import hwbench_cmd

needs.module("llvmlite")

from hwbench.collective import pattern as patterns  # noqa: E402
from hwbench.collective.shm import PREFIX, SHM_DIR, CollectiveError, Layout, Segment, ShmAllReduce, segment_name  # noqa: E402
from hwbench.kernels.allreduce.llvm import load as load_kernels  # noqa: E402
from hwbench.kernels.allreduce.llvm import slice_bounds  # noqa: E402
from hwbench.kernels.allreduce.spec import KERNEL  # noqa: E402
from hwbench.results.files import validate  # noqa: E402

try:
    import torch.distributed  # noqa: F401

    HAS_TORCH = True
except ImportError:
    HAS_TORCH = False

needs_torch = pytest.mark.skipif(
    not HAS_TORCH, reason="torch is not installed: AllReduce ranks meet through torch.distributed"
)


def _segments() -> set[str]:
    return {p.name for p in SHM_DIR.glob(f"{PREFIX}-*")}


def _rank_processes(marker: str) -> list[int]:
    """Pids of live processes whose environment carries ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


# ---------------------------------------------------------------- inputs and verification


@pytest.mark.parametrize("ranks,seed", [(1, 0), (3, 5), (8, 11)])
def test_per_rank_inputs_match_the_spec(ranks: int, seed: int) -> None:
    shape = {"count": 100, "ranks": ranks}
    x = KERNEL.make_inputs(shape, "fp32", seed)["x"]
    for rank in range(ranks):
        buf = np.empty(100, dtype=np.float32)
        patterns.fill_periodic(buf, patterns.row_pattern(rank, seed))
        np.testing.assert_array_equal(buf, x[rank])
    want = np.empty(100, dtype=np.float32)
    patterns.fill_periodic(want, patterns.sum_pattern(ranks, seed))
    np.testing.assert_array_equal(want, KERNEL.reference(KERNEL.make_inputs(shape, "fp32", seed), shape))


def test_count_wrong_counts_every_wrong_element() -> None:
    buf = np.empty(1000, dtype=np.float32)
    pattern = patterns.sum_pattern(4, 0)
    patterns.fill_periodic(buf, pattern)
    assert patterns.count_wrong(buf, pattern) == (0, 0.0)
    buf[[0, 500, 999]] += 2
    buf[3] = np.nan
    wrong, worst = patterns.count_wrong(buf, pattern)
    assert wrong == 4 and worst >= 2


def test_slices_cover_the_message_once_on_cache_lines() -> None:
    for count, ranks in [(1, 8), (15, 2), (1000, 3), (4097, 8), (7, 1)]:
        covered = []
        for rank in range(ranks):
            lo, hi = slice_bounds(count, ranks, rank, 4)
            assert lo % 16 == 0 or lo == count
            covered += range(lo, hi)
        assert covered == list(range(count))


# ---------------------------------------------------------------- kernels across forked processes


def _fork_allreduce(ranks: int, count: int, dtype: str, in_place: bool, rounds: int = 3) -> list[int]:
    """Run ``rounds`` AllReduces in ``ranks`` forked processes; each child exits with its wrong count."""
    np_dtype = np.float32 if dtype == "fp32" else np.float64
    layout = Layout(ranks, count * np.dtype(np_dtype).itemsize, slot_bytes=4096)
    name = segment_name("test", 0)
    seg = Segment(name, layout.size, create=True)
    other = Segment(name, layout.size, create=False)  # a second mapping, as another process makes
    load_kernels(dtype)  # compiled once here; the children inherit the code
    seg.unlink()
    pids = []
    try:
        for rank in range(ranks):
            pid = os.fork()
            if pid == 0:  # child: never returns into pytest; the mappings survive fork
                code = 100
                try:
                    comm = ShmAllReduce(seg if rank % 2 else other, layout, rank, timeout_s=30.0)
                    inp = comm.buffer("in", count, np_dtype)
                    out = inp if in_place else comm.buffer("out", count, np_dtype)
                    wrong = 0
                    for k in range(rounds):
                        patterns.fill_periodic(inp, patterns.row_pattern(rank, k))
                        comm.allreduce(inp, out, dtype)
                        wrong += patterns.count_wrong(out, patterns.sum_pattern(ranks, k))[0]
                    code = min(wrong, 99)
                except BaseException:
                    import traceback

                    traceback.print_exc()
                    code = 101
                finally:
                    os._exit(code)
            pids.append(pid)
    finally:
        codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
        seg.close()
        other.close()
    return codes


@pytest.mark.parametrize(
    "ranks,count,dtype,in_place",
    [
        (2, 1, "fp32", False),  # one element: one-shot
        (3, 1000, "fp32", True),  # one-shot, in place
        (8, 1024, "fp64", False),  # exactly the slot: one-shot
        (2, 4097, "fp32", True),  # past the slot: reduce-scatter + all-gather, odd tail
        (3, 50_001, "fp64", False),  # uneven slices
        (8, 5, "fp32", False),  # fewer elements than ranks
        (8, 100_003, "fp32", True),
    ],
)
def test_shared_memory_allreduce_is_exact(ranks: int, count: int, dtype: str, in_place: bool) -> None:
    before = _segments()
    assert _fork_allreduce(ranks, count, dtype, in_place) == [0] * ranks
    assert _segments() <= before  # unlinked as soon as everyone mapped it


def test_a_rank_that_never_arrives_is_a_timeout_naming_it() -> None:
    layout = Layout(2, 4096)
    seg = Segment(segment_name("test", 0), layout.size, create=True)
    seg.unlink()
    comm = ShmAllReduce(seg, layout, 0, timeout_s=0.3)
    buf = comm.buffer("in", 16, np.float32)
    start = time.monotonic()
    with pytest.raises(CollectiveError, match=r"local rank\(s\) 1 did not arrive within 0.3 s") as info:
        comm.allreduce(buf, buf, "fp32")
    assert info.value.status == "timeout"
    assert 0.25 < time.monotonic() - start < 5.0


# ---------------------------------------------------------------- the launcher, end to end


def _run(tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 240) -> tuple[int, dict, str]:
    out = tmp_path / f"r{time.monotonic_ns()}.json"
    proc = subprocess.run(
        hwbench_cmd(
            "run", "--backend", "cpu", "--kernel", "allreduce", "--budget", "0.02", "--out", str(out), "--quiet", *args
        ),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=tmp_path,
    )
    doc = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, doc, proc.stdout + proc.stderr


@needs_torch
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_native_and_portable_are_exact_on_local_ranks(tmp_path: Path, ranks: int) -> None:
    before = _segments()
    code, doc, text = _run(
        tmp_path,
        "--ranks",
        str(ranks),
        "--impl",
        "gloo,llvm_shm",
        "--shape",
        "allreduce:count=200",
        "--shape",
        "allreduce:count=70000",
    )
    assert code == 0, text
    assert validate(doc) == []
    records = [r for r in doc["records"] if r["impl"] != "*"]
    assert len(records) == 2 * 2 * 2  # impls x sizes x in/out of place
    for r in records:
        assert r["status"] == "ok", r
        assert r["shape"]["ranks"] == ranks and r["shape"]["in_place"] in (0, 1)
        assert r["parity"]["exact"] and r["parity"]["mismatches"] == 0
        assert r["parity"]["elements"] == r["shape"]["count"] * ranks
        t, m = r["timing"], r["metrics"]
        assert 0 < t["median_s"] <= t["p99_s"] and t["n"] >= 5
        assert m["busbw_gbps"] == pytest.approx(m["algbw_gbps"] * 2 * (ranks - 1) / ranks)
        if r["impl"] == "llvm_shm":
            assert m["native_impl"] == "gloo" and set(m["porting_overheads"]) == {"gloo"}
    summary = doc["collective"]
    assert summary["ranks"] == ranks and len(summary["participants"]) == ranks
    assert {p["rank"] for p in summary["participants"]} == set(range(ranks))
    assert summary["impls"]["llvm_shm"]["small_message_latency_s"] > 0
    assert summary["peak_busbw_gbps"] == max(r["metrics"]["busbw_gbps"] for r in records)
    assert _segments() <= before


@needs_torch
@pytest.mark.parametrize(
    "fault,status,words",
    [
        ("1:0:kill", "crashed", "rank 1 was killed by SIGKILL"),
        ("1:0:hang", "timeout", "still running without an error: rank 1 (in case 0)"),
    ],
)
def test_a_dead_or_stuck_rank_is_a_record_and_the_run_goes_on(
    tmp_path: Path, fault: str, status: str, words: str
) -> None:
    marker = f"HWBENCH_TEST_MARKER=fault{time.monotonic_ns()}"
    env = dict(os.environ, HWBENCH_AR_FAULT=fault, HWBENCH_TEST_MARKER=marker.split("=")[1])
    before = _segments()
    code, doc, text = _run(
        tmp_path, "--ranks", "2", "--impl", "llvm_shm", "--timeout", "4", "--shape", "allreduce:count=64", env=env
    )
    assert code == 1, text
    first, *rest = [r for r in doc["records"] if r["impl"] != "*"]
    assert first["status"] == status and words in first["reason"], first
    assert first["impl_kind"] == "portable" and first["device"]
    assert [r["status"] for r in rest] == ["ok"]  # fresh ranks ran the case after it
    assert validate(doc) == []
    assert _rank_processes(marker) == []
    assert _segments() <= before


@needs_torch
def test_ctrl_c_leaves_no_rank_and_no_segment(tmp_path: Path) -> None:
    marker = f"ctrlc{time.monotonic_ns()}"
    env = dict(os.environ, HWBENCH_AR_FAULT="1:1:hang", HWBENCH_TEST_MARKER=marker)
    before = _segments()
    out = tmp_path / "c.json"
    proc = subprocess.Popen(
        hwbench_cmd(
            "run",
            "--backend",
            "cpu",
            "--kernel",
            "allreduce",
            "--ranks",
            "2",
            "--impl",
            "llvm_shm",
            "--budget",
            "0.02",
            "--shape",
            "allreduce:count=64",
            "--out",
            str(out),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 120
    while len(_rank_processes(marker)) < 3 and time.monotonic() < deadline:  # the run, its worker, the ranks
        time.sleep(0.2)
    time.sleep(3)  # usually mid-run (rank 1 hangs at the second case); any moment must clean up
    proc.send_signal(signal.SIGINT)
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, text
    time.sleep(0.5)
    assert _rank_processes(marker) == []
    assert _segments() <= before
    doc = json.loads(out.read_text())
    assert doc["run"]["incomplete"] is True


def _torchrun(*commands: list[str], cwd: Path, timeout: float = 240) -> list[tuple[int, str]]:
    """Run torchrun agents side by side; on a timeout kill each agent's whole session (its ranks too)."""
    logs = [cwd / f"agent{n}.log" for n in range(len(commands))]
    scratch = cwd / "tmp"  # torchrun's torchelastic_* folders land here, not in /tmp
    scratch.mkdir(exist_ok=True)
    env = dict(os.environ, TMPDIR=str(scratch))
    agents = []
    for command, log in zip(commands, logs, strict=False):
        with open(log, "w") as sink:  # files, not pipes: a chatty agent never blocks on a full pipe
            agents.append(
                subprocess.Popen(
                    command, stdout=sink, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True, env=env
                )
            )
    results = []
    try:
        for agent, log in zip(agents, logs, strict=False):
            results.append((agent.wait(timeout=timeout), log.read_text()[-5000:]))
    finally:
        for agent in agents:
            try:
                os.killpg(agent.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            agent.wait()
    return results


@needs_torch
def test_torchrun_ranks_join_and_rank_0_writes_one_file(tmp_path: Path) -> None:
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed beside this interpreter")
    out = tmp_path / "tr.json"
    code, text = _torchrun(
        [
            str(torchrun),
            "--standalone",
            "--nproc-per-node=2",
            "-m",
            "hwbench",
            "run",
            "--backend",
            "cpu",
            "--kernel",
            "allreduce",
            "--impl",
            "gloo,llvm_shm",
            "--budget",
            "0.02",
            "--shape",
            "allreduce:count=5000",
            "--out",
            str(out),
            "--quiet",
        ],
        cwd=tmp_path,
    )[0]
    assert code == 0, text
    doc = json.loads(out.read_text())
    assert validate(doc) == []
    assert [p["rank"] for p in doc["collective"]["participants"]] == [0, 1]
    assert doc["collective"]["launches"][0]["mode"] == "torchrun"
    assert all(r["status"] == "ok" for r in doc["records"] if r["impl"] != "*")
    assert list(tmp_path.glob("*.json")) == [out]  # rank 1 wrote no file of its own


@needs_torch
def test_two_nodes_are_joined_hierarchically(tmp_path: Path) -> None:
    """Two torchrun agents on this host act as two nodes of two ranks each."""
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed beside this interpreter")
    from hwbench.collective.launch import free_port

    port, out = free_port(), tmp_path / "two.json"
    results = _torchrun(
        *[
            [
                str(torchrun),
                "--nnodes=2",
                f"--node-rank={node}",
                "--nproc-per-node=2",
                "--master-addr=127.0.0.1",
                f"--master-port={port}",
                "-m",
                "hwbench",
                "run",
                "--backend",
                "cpu",
                "--kernel",
                "allreduce",
                "--impl",
                "llvm_shm",
                "--budget",
                "0.02",
                "--shape",
                "allreduce:count=100",
                "--shape",
                "allreduce:count=40000",
                "--out",
                str(out),
                "--quiet",
            ]
            for node in (0, 1)
        ],
        cwd=tmp_path,
    )
    assert [code for code, _ in results] == [0, 0], results
    doc = json.loads(out.read_text())
    assert sorted((p["node"], p["local_rank"]) for p in doc["collective"]["participants"]) == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]
    records = [r for r in doc["records"] if r["impl"] != "*"]
    assert len(records) == 4 and all(r["status"] == "ok" and r["parity"]["mismatches"] == 0 for r in records)
    assert "across nodes" in records[-1]["config"]["algorithm"]


@needs_torch
def test_torchrun_ranks_whose_peers_never_come_stop_within_the_timeout_in_one_line(tmp_path: Path) -> None:
    """Rank 1 finds nothing at MASTER_ADDR:MASTER_PORT; rank 0 waits for a rank 1 that never comes."""
    from hwbench.collective.launch import free_port

    ports = [free_port()]
    while len(ports) < 2:
        ports += [p for p in [free_port()] if p not in ports]
    world = dict(os.environ, WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    args = ["run", "--backend", "cpu", "--kernel", "allreduce", "--impl", "gloo", "--timeout", "5", "--quiet"]
    started = time.monotonic()
    ranks = [
        subprocess.Popen(
            hwbench_cmd(*args, "--shape", "allreduce:count=64", "--out", str(tmp_path / f"rank{rank}.json")),
            env=dict(world, RANK=str(rank), LOCAL_RANK=str(rank), MASTER_PORT=str(ports[rank])),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        for rank in (1, 0)
    ]
    try:
        text = ranks[0].communicate(timeout=60)
        follower_s = time.monotonic() - started
        leader = ranks[1].communicate(timeout=90)
    finally:
        for proc in ranks:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    lines = [line for line in "".join(text).splitlines() if line.strip()]
    assert ranks[0].returncode == 1 and follower_s < 30, (follower_s, text)
    assert len(lines) == 1 and f"could not reach 127.0.0.1:{ports[1]} (MASTER_ADDR:MASTER_PORT)" in lines[0], lines
    assert ranks[1].returncode == 1 and "Traceback" not in "".join(leader), leader
    doc = json.loads((tmp_path / "rank0.json").read_text())
    assert validate(doc) == []
    for r in (r for r in doc["records"] if r["impl"] != "*"):
        assert r["status"] == "timeout" and f"at 127.0.0.1:{ports[0]} within 15 s" in r["reason"], r
    assert not (tmp_path / "rank1.json").exists()


def test_the_host_memory_estimate_counts_every_rank() -> None:
    two, four = ({"count": 2**24, "ranks": r} for r in (2, 4))
    assert KERNEL.memory_bytes(four, "fp32") == 2 * KERNEL.memory_bytes(two, "fp32")
    assert KERNEL.memory_bytes(four, "fp64") > KERNEL.memory_bytes(four, "fp32")
    # 4 ranks x 2**24 fp32 peaked at 1.5 GiB summed PSS: the estimate may not fall short of it
    assert KERNEL.memory_bytes(four, "fp32") >= 1.5 * 2**30
    small = KERNEL.memory_bytes({"count": 1, "ranks": 8}, "fp32")
    assert small >= 8 * 150 * 2**20  # each rank process is a Python with torch, whatever its buffers


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _pss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@needs_torch
def test_the_host_memory_estimate_covers_the_ranks_measured_memory(tmp_path: Path) -> None:
    if not Path(f"/proc/{os.getpid()}/smaps_rollup").exists():
        pytest.skip("no /proc/PID/smaps_rollup here to measure PSS with")
    marker = f"pss{time.monotonic_ns()}"
    shape = {"count": 2**22, "ranks": 2}
    run = subprocess.Popen(
        hwbench_cmd(
            "run", "--backend", "cpu", "--kernel", "allreduce", "--ranks", "2", "--impl", "gloo,llvm_shm",
            "--shape", "allreduce:count=4194304", "--budget", "0.05", "--quiet", "--out", str(tmp_path / "m.json"),
        ),
        env=dict(os.environ, HWBENCH_TEST_MARKER=marker),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )  # fmt: skip
    peak = 0
    try:
        while run.poll() is None:
            peak = max(peak, sum(_pss(p) for p in _rank_processes(marker) if b"collective.rank" in _cmdline(p)))
            time.sleep(0.02)
    finally:
        if run.poll() is None:
            run.kill()
        run.wait()
    assert run.returncode == 0 and peak > 0
    estimate = KERNEL.memory_bytes(shape, "fp32")
    assert 0.8 * peak <= estimate <= 2 * peak, (estimate / 2**20, peak / 2**20)


def test_ranks_must_be_positive_and_need_allreduce(tmp_path: Path) -> None:
    bad = subprocess.run(
        hwbench_cmd("run", "--kernel", "allreduce", "--ranks", "0"), capture_output=True, text=True, cwd=tmp_path
    )
    assert bad.returncode == 2 and "--ranks must be a positive" in bad.stderr
    bad = subprocess.run(
        hwbench_cmd("run", "--kernel", "gemm", "--ranks", "2"), capture_output=True, text=True, cwd=tmp_path
    )
    assert bad.returncode == 2 and "--ranks applies to AllReduce only" in bad.stderr


# ---------------------------------------------------------------- the Triton reduction (GPU path) on this CPU

TRITON_CROSS = """
import re, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from hwbench.kernels.allreduce import triton as k
for target, binary in ((GPUTarget("cuda", 90, 32), "cubin"), (GPUTarget("hip", "gfx942", 64), "hsaco")):
    for v in k.compile_variants(str(target.arch)):
        c = triton.compile(ASTSource(v["fn"], v["signature"], v["constexprs"]), target=target, options=v["options"])
        assert len(c.asm[binary]) > 0, (target, v["name"])
        where = (target.arch, v["name"])
        if binary == "cubin":
            text = c.asm["ptx"]
            assert "trap" not in text, where  # a wait that gives up never poisons the context
            assert "%globaltimer" in text, where  # waits are bounded in time
            assert re.search(r"ld\\.acquire\\.sys\\.global", text), where  # waits poll with acquire loads
            assert "atom.global.sys.release.exch" in text, where  # signals release their writes
            assert text.count("ld.global.v4") >= k.MAX_RANKS, where  # full blocks: 16-byte loads from every rank
        else:
            text = c.asm["amdgcn"]
            assert "s_trap" not in text and "s_memrealtime" in text and "global_atomic_swap" in text, where
            assert "global_load_dwordx4" in text or "buffer_load_dwordx4" in text, where
print("compiled")
"""


def _triton_env(tmp_path: Path, interpret: bool) -> dict[str, str]:
    env = dict(os.environ, TRITON_DEFAULT_FP_FUSION="1", TRITON_CACHE_DIR=str(tmp_path / "triton"))
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return env


def test_triton_allreduce_cross_compiles_for_nvidia_and_amd_without_a_trap(tmp_path: Path) -> None:
    needs.module("triton")
    proc = subprocess.run(
        [sys.executable, "-c", TRITON_CROSS],
        capture_output=True,
        text=True,
        timeout=300,
        env=_triton_env(tmp_path, False),
    )
    assert proc.returncode == 0 and "compiled" in proc.stdout, proc.stderr[-3000:]
