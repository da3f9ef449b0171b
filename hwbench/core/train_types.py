"""The training workload's sections of a record: ``train`` (one training run) and ``drill`` (a
kill-and-resume drill), as the schema declares them (``hwbench/results/schema/results-v2.json``).

A record of kernel ``train`` carries :class:`TrainSection`; its ``timing`` holds the steady
optimizer steps, ``metrics.tflops`` the model FLOPs per second and ``metrics.pct_peak`` the MFU.
A record of kernel ``drill`` carries :class:`DrillSection`; its ``parity`` compares the resumed
run's losses with an uninterrupted run of the same seed.
"""

from __future__ import annotations

from typing import TypedDict


class TrainPhases(TypedDict, total=False):
    """Seconds of each phase from submit (or launch) to the end of the first optimizer step."""

    queue: float | None
    launch: float | None
    imports: float | None
    init: float | None
    data: float | None
    model: float | None
    first_step: float | None


class TrainData(TypedDict, total=False):
    """The token shards written to the storage under test and read back through a DataLoader."""

    dir: str
    shards: int
    bytes: int
    write_s: float | None
    write_gbps: float | None
    loader_workers: int


class TrainSection(TypedDict, total=False):
    """One training run: the model, the time to its first step, its speed, memory and losses."""

    preset: str
    params: int
    flops_per_token: float | None
    tokens_per_step: int
    compiled: bool
    deterministic: bool
    seed: int
    #: Seconds from the submit time (``submit_source``) to the end of the first optimizer step.
    submit_to_first_step_s: float | None
    #: ``process launch``, ``slurm submit time``, ``kubernetes manifest stamp`` or ``HWBENCH_SUBMIT_TIME``.
    submit_source: str
    phases_s: TrainPhases
    #: Steady tokens per second, all ranks together, and per rank.
    tokens_per_s: float | None
    tokens_per_s_per_rank: float | None
    #: Against the same preset on one rank (in the same file): tokens/s(N) / (N x tokens/s(1)).
    scaling_efficiency: float | None
    #: A dense GEMM of the model's largest linear layer, timed in the same process.
    gemm_roof_tflops: float | None
    pct_gemm_roof: float | None
    peak_memory_bytes: int | None
    memory_source: str
    memory_estimate_bytes: int
    losses: list[float]
    step_s: list[float]
    loss_first: float | None
    loss_last: float | None
    #: ``loss_last / loss_first``; the run trains when it is at most ``loss_margin``.
    loss_ratio: float | None
    loss_margin: float | None
    data: TrainData


class _DrillEventRequired(TypedDict):
    t_s: float
    event: str


class DrillEvent(_DrillEventRequired, total=False):
    """One moment of a drill: seconds since the launch, what happened, at which step and rank."""

    step: int | None
    rank: int | None


class DrillSection(TypedDict, total=False):
    """A kill-and-resume drill: where the kill fell, what was lost, and how long resuming took."""

    launcher: str
    preset: str
    seed: int
    steps: int
    checkpoint_every: int
    max_restarts: int
    kill_step: int
    killed_rank: int
    #: The last step completed before the kill and the checkpoint resumed from.
    last_step_before_kill: int | None
    resumed_from_step: int | None
    #: Steps computed twice: completed before the kill, not in the checkpoint resumed from.
    steps_lost: int | None
    restarts: int | None
    #: Seconds from the SIGKILL to the end of the first step completed after resuming.
    time_to_resume_s: float | None
    #: Seconds from the SIGKILL until the launcher had started the new workers.
    detect_s: float | None
    checkpoint_s: float | None
    losses: list[float]
    reference_losses: list[float]
    timeline: list[DrillEvent]
