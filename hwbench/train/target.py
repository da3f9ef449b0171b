"""The backend and device a training runs on, described by hwbench's own backend (peaks, memory)."""

from __future__ import annotations

from typing import Any

from hwbench.core.errors import UserError
from hwbench.core.results_types import BackendEntry
from hwbench.run.runner import describe_all
from hwbench.run.worker import Worker
from hwbench.train.session import TORCH_DEVICE, Target

#: Seconds allowed for describing a backend (as ``hwbench list`` allows).
DESCRIBE_TIMEOUT_S = 120.0


def available_memory() -> int | None:
    """The host's MemAvailable in bytes (Linux), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def describe(name: str) -> dict[str, Any]:
    """Backend ``name`` as the worker describes it (peaks measured or looked up, devices)."""
    with Worker() as worker:
        return describe_all(worker, [name], DESCRIBE_TIMEOUT_S)[0]


def choose(backend: str) -> tuple[Target, BackendEntry]:
    """The target of ``--backend`` (``auto``: the first GPU backend with a device, else cpu) and
    the backend's entry for the results file; UserError when it cannot train."""
    if backend != "auto" and backend not in TORCH_DEVICE:
        raise UserError(f"backend '{backend}' cannot train; training runs on {', '.join(TORCH_DEVICE)} (or auto)")
    names = [backend] if backend != "auto" else ["cuda", "rocm", "cpu"]
    described = None
    for name in names:
        described = describe(name)
        if described["available"] and described["devices"]:
            break
    assert described is not None
    if not described["available"] or not described["devices"]:
        raise UserError(f"backend {described['name']} is unavailable here: {described.get('reason') or 'no device'}")
    device = described["devices"][0]
    peak = device.get("peak") or {}
    kind = described.get("kind") or ("cpu" if device["kind"] == "cpu" else "gpu")
    memory = available_memory() if kind == "cpu" else device.get("memory_bytes")
    target = Target(
        backend=described["name"],
        device=device["name"],
        kind=kind,
        peak_tflops=dict(peak.get("tflops") or {}),
        peak_source=str(peak.get("method") or "the backend's description"),
        devices=len(described["devices"]),
        memory_bytes=memory,
    )
    kept = ("name", "available", "reason", "devices", "environment")
    entry: Any = {**{k: described.get(k) for k in kept if k in described}, "kind": kind}
    return target, entry
