"""Storage probe: 4 KiB random reads with fio (direct I/O, libaio, queue depth 32) in a user's folder.

fio lays out one file of a bounded size, reads it for a bounded time and reports JSON;
the file is removed afterwards. Without fio the record is ``skipped`` with the reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from hwbench.core.errors import UserError
from hwbench.core.records import failed, new_record
from hwbench.core.results_types import Record

BLOCK_BYTES = 4096
IODEPTH = 32
MIN_SIZE = 1 << 20
MAX_RUNTIME_S = 600
#: Seconds allowed beyond the run time for laying out the file and starting fio.
SLACK_S = 120.0


def filesystem(directory: Path) -> str:
    """``fstype source (mount point)`` of the file system holding ``directory``."""
    target = os.path.realpath(directory)
    best = ("", "unknown", "unknown")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            source, mount, fstype = line.split()[:3]
            mount = mount.replace("\\040", " ")
            inside = target == mount or target.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) >= len(best[0]):
                best = (mount, source, fstype)
    except OSError:
        pass
    return f"{best[2]} {best[1]} ({best[0] or '?'})"


def fio_command(path: Path, size_bytes: int, runtime_s: int) -> list[str]:
    """The fio command line of the probe."""
    return [
        "fio",
        "--name=hwbench-randread",
        f"--filename={path}",
        "--rw=randread",
        f"--bs={BLOCK_BYTES}",
        "--direct=1",
        "--ioengine=libaio",
        f"--iodepth={IODEPTH}",
        "--numjobs=1",
        f"--size={size_bytes}",
        f"--runtime={runtime_s}",
        "--time_based",
        "--percentile_list=25:50:75:99",
        "--output-format=json",
    ]


def check_arguments(directory: Path, size_bytes: int, runtime_s: int) -> None:
    """UserError (one line) for a folder that is not a writable directory, or bounds out of range."""
    if not directory.is_dir():
        raise UserError(f"--dir {directory} is not a directory: name a folder on the file system to probe")
    if not os.access(directory, os.W_OK):
        raise UserError(f"--dir {directory} is not writable: the probe writes a test file there")
    if not 1 <= runtime_s <= MAX_RUNTIME_S:
        raise UserError(f"--runtime must be between 1 and {MAX_RUNTIME_S} seconds, got {runtime_s}")
    if size_bytes < MIN_SIZE:
        raise UserError(f"--size must be at least 1MiB, got {size_bytes} bytes")
    free = shutil.disk_usage(directory).free
    if size_bytes > free // 2:
        raise UserError(
            f"--size {size_bytes >> 20} MiB is more than half the {free >> 20} MiB free in {directory}: "
            "choose a smaller --size"
        )


def parse_size(text: str) -> int:
    """``256MiB``, ``1GiB``, ``64M`` (binary units) or a byte count, as bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([kmg]?)(?:i?b)?\s*", text.lower())
    if not match:
        raise UserError(f"--size '{text}' is not a size such as 256MiB, 1GiB or a byte count")
    return int(match.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[match.group(2)]


def _fio_json(stdout: str) -> dict[str, Any]:
    start = stdout.find("{")  # fio may print notes before the document
    return json.loads(stdout[start:]) if start >= 0 else {}


def _fill(record: Record, report: dict[str, Any]) -> Record:
    job = report["jobs"][0]
    read = job["read"]
    clat = read["clat_ns"]
    pct = {float(k): v * 1e-9 for k, v in clat.get("percentile", {}).items()}
    mean, std = clat["mean"] * 1e-9, clat["stddev"] * 1e-9
    record["timing"] = {
        "median_s": pct.get(50.0),
        "iqr_s": pct[75.0] - pct[25.0] if 25.0 in pct and 75.0 in pct else None,
        "q1_s": pct.get(25.0),
        "q3_s": pct.get(75.0),
        "p99_s": pct.get(99.0),
        "mean_s": mean,
        "std_s": std,
        "cv": std / mean if mean > 0 else None,
        "min_s": clat["min"] * 1e-9,
        "max_s": clat["max"] * 1e-9,
        "n": int(read["total_ios"]),
        "timer": "fio completion latency (clat)",
        "flushed": None,
    }
    record["metrics"].update({"iops": float(read["iops"]), "gbps": read["bw_bytes"] / 1e9})
    record["config"].update(
        fio_version=report.get("fio version"),
        iops_min=read.get("iops_min"),
        iops_max=read.get("iops_max"),
        iops_stddev=read.get("iops_stddev"),
        runtime_ms=read.get("runtime"),
    )
    return record


def run_storage(directory: Path, size_bytes: int, runtime_s: int) -> Record:
    """The storage record: ok with IOPS and latency, skipped without fio, or the failure and why."""
    check_arguments(directory, size_bytes, runtime_s)
    shape = {"block_bytes": BLOCK_BYTES, "iodepth": IODEPTH, "size_bytes": size_bytes, "runtime_s": runtime_s}
    record = new_record("storage", "fio_randread", "fio", 0, None, shape, language="fio", device=filesystem(directory))
    path = Path(directory).resolve() / f".hwbench-fio-{os.getpid()}.dat"
    command = fio_command(path, size_bytes, runtime_s)
    record["config"] = {"dir": str(Path(directory).resolve()), "command": command}
    if shutil.which("fio") is None:
        return failed(
            record, "skipped", "fio is not installed (Debian/Ubuntu: apt-get install fio); install it to probe storage"
        )
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=runtime_s + SLACK_S)
    except subprocess.TimeoutExpired:
        return failed(record, "timeout", f"fio did not finish within {runtime_s + SLACK_S:g} s")
    finally:
        path.unlink(missing_ok=True)
    record["wall_s"] = time.perf_counter() - started
    try:
        report = _fio_json(done.stdout)
        error = report["jobs"][0]["error"] if report else None
    except (json.JSONDecodeError, KeyError, IndexError):
        report, error = {}, None
    if done.returncode != 0 or not report or error:
        lines = [ln for ln in (done.stderr + "\n" + done.stdout[:2000]).splitlines() if ln.strip().startswith("fio")]
        why = lines[-1].strip() if lines else (done.stderr.strip().splitlines() or ["no output"])[-1]
        return failed(record, "runtime_error", f"fio failed (exit {done.returncode}): {why[:400]}")
    return _fill(record, report)
