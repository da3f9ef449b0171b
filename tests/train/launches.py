"""Launches as the training's ranks would have written their events: what the record tests build on."""

from __future__ import annotations

from typing import Any

from hwbench.train.launch import Launch

T0 = 1_800_000_000.0


def launch_of(losses: list[float], step_s: float = 0.1, ranks: int = 1, returncode: int = 0) -> Launch:
    """A launch whose ``ranks`` each started, imported, initialised, built the model and data,
    stepped through ``losses`` (``step_s`` each, the first three times longer) and finished."""
    events: list[dict[str, Any]] = []
    for rank in range(ranks):
        t = T0 + 0.5
        events.append({"event": "start", "t": t, "t_start": t, "pid": 100 + rank, "rank": rank, "attempt": 0})
        for i, name in enumerate(("imported", "init", "model", "data")):
            events.append({"event": name, "t": t + 1 + i, "rank": rank, "attempt": 0})
        t += 5
        for step, loss in enumerate(losses, 1):
            t += step_s * (3 if step == 1 else 1)
            events.append(
                {"event": "step", "t": t, "step": step, "loss": loss, "step_s": step_s, "rank": rank, "attempt": 0}
            )
        events.append(
            {
                "event": "done",
                "t": t,
                "rank": rank,
                "attempt": 0,
                "peak_memory_bytes": 2**28,
                "memory_source": "peak RSS",
                "gemm_roof_tflops": 0.1,
            }
        )
    return Launch(events=sorted(events, key=lambda e: e["t"]), returncode=returncode, launched_t=T0, ended_t=T0 + 20)
