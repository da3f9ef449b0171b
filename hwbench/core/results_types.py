"""The shapes of a results document, its records and a backend's description, as TypedDicts.

They are plain dicts at run time (what ``json`` reads and writes), so nothing that reads or
writes a file changes; the type checker holds code to the keys and value types the results
schema (``hwbench/results/schema/results-v2.json``) gives. Each class with a schema object of
its own declares exactly that object's properties: required keys as the class's own, optional
ones (``NotRequired``) in a ``total=False`` subclass, as Python 3.10 has no ``NotRequired``.
Where the schema leaves an object open (a device, the host), a ``Described...`` subclass adds
the keys hwbench itself writes beyond the schema. ``tests/core/test_typed_results.py`` checks
every class against the schema and against a real run's document.

A figure (``float | None``) is a measured or derived number, never negative, None when not
measured; a JSON integer is one too. A status is one of :data:`hwbench.core.records.STATUSES`.
"""

from __future__ import annotations

from typing import Any, TypedDict

from hwbench.core.burn_types import BurnEntry, TuningEntry
from hwbench.core.train_types import DrillSection, TrainSection


class _ParityRequired(TypedDict):
    max_abs_err: float | None
    max_rel_err: float | None
    atol: float | None
    rtol: float | None
    #: None when parity was not checked.
    passed: bool | None


class Parity(_ParityRequired, total=False):
    """A record's ``parity``: the output against the float64 reference."""

    exact: bool
    mismatches: int | None
    nonfinite: int | None
    elements: int | None
    #: How the output was left for the timed calls, checked again after them.
    after_timing: str | None


class _TimingRequired(TypedDict):
    median_s: float | None
    iqr_s: float | None
    cv: float | None
    n: int
    timer: str | None


class TimingSection(_TimingRequired, total=False):
    """A record's ``timing``: the statistics of the timed calls, in seconds."""

    q1_s: float | None
    q3_s: float | None
    mean_s: float | None
    std_s: float | None
    min_s: float | None
    max_s: float | None
    p99_s: float | None
    resolution_s: float | None
    flushed: bool | None
    flush: str | None
    warmup: int | None
    stopped_by: str | None
    #: Collectives: each rank's median time per call (index = rank).
    rank_p50_s: list[float]
    samples_s: list[float]


class _MetricsRequired(TypedDict):
    tflops: float | None
    pct_peak: float | None
    porting_overhead: float | None
    tflops_per_usd_hour: float | None


class Metrics(_MetricsRequired, total=False):
    """A record's ``metrics``: the figures derived from its timing (``hwbench.results.derive``)."""

    gbps: float | None
    pct_achievable: float | None
    peak_tflops: float | None
    peak_source: str | None
    peak_check: str | None
    pct_bw_peak: float | None
    bw_peak_gbps: float | None
    pct_host_link: float | None
    host_link_gbps: float | None
    host_link_source: str | None
    bw_peak_source: str | None
    bw_peak_check: str | None
    native_impl: str | None
    speed_vs_native: float | None
    fastest_native_impl: str | None
    speed_vs_fastest_native: float | None
    usd_per_hour: float | None
    price_source: str | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    #: Collectives: per native measured.
    porting_overheads: dict[str, float]
    speeds_vs_natives: dict[str, float]
    host_native_impl: str | None
    host_native_overhead: float | None
    iops: float | None


class _EnergyRequired(TypedDict):
    joules_per_call: float | None
    watts: float | None
    tflops_per_watt: float | None
    gbps_per_watt: float | None
    source: str
    #: ``counter`` or ``sampled``.
    method: str
    window_s: float
    calls: int
    error_pct: float | None
    #: Empty when measured, else why not.
    reason: str


class Energy(_EnergyRequired, total=False):
    """A record's ``energy``: measured after its timing, in windows of its own."""

    energy_j: float | None
    resolution_j: float | None
    update_s: float | None
    sample_interval_s: float | None
    windows: int


class _RecordRequired(TypedDict):
    kernel: str
    #: ``*`` for a note about a whole backend.
    impl: str
    backend: str
    #: The device's name; None when the backend has no device here.
    device: str | None
    dtype: str | None
    shape: dict[str, int]
    status: str
    #: Empty only when the status is ok.
    reason: str
    parity: Parity
    timing: TimingSection
    metrics: Metrics


class Record(_RecordRequired, total=False):
    """One case (kernel x implementation x backend x device x dtype x shape) and what it measured.

    The schema's record is closed: a key not declared here is refused. Optional keys are those
    a file of an older hwbench (or a probe) may lack; :func:`hwbench.core.records.new_record`
    writes all but ``inputs_version``, ``wall_s`` and ``energy``."""

    #: ``portable`` or ``native`` (None: not known).
    impl_kind: str | None
    language: str | None
    #: -1 when the case has no device.
    device_index: int | None
    #: Version of the values the kernel's inputs draw; absent: 1.
    inputs_version: int
    compile_s: float | None
    wall_s: float | None
    energy: Energy
    #: The implementation's configuration (tile sizes, ...) and ``tuning``.
    config: dict[str, Any]
    warnings: list[str]
    #: Kernel ``train``: the training run's figures.
    train: TrainSection
    #: Kernel ``drill``: the kill-and-resume drill's figures.
    drill: DrillSection


class Peak(TypedDict, total=False):
    """A device's ``peak``: TFLOPS per dtype and how they were obtained."""

    tflops: dict[str, float | None]
    method: str


class DescribedPeak(Peak, total=False):
    """A peak as hwbench describes it: with the memory bandwidth (GB/s) where known."""

    mem_gbps: float | None


class _DeviceRequired(TypedDict):
    backend: str
    index: int
    name: str
    vendor: str
    #: ``cpu``, ``gpu`` or ``accelerator``.
    kind: str


class Device(_DeviceRequired, total=False):
    """A device of a backend, as the schema gives it."""

    peak: DescribedPeak | None


class DescribedDevice(Device, total=False):
    """A device as hwbench writes it (:class:`hwbench.core.backend.DeviceInfo`): the schema's
    keys and the description's own."""

    arch: str
    compute_units: int | None
    memory_bytes: int | None
    driver: str
    runtime: str
    libraries: dict[str, str]
    extra: dict[str, Any]


class _BackendEntryRequired(TypedDict):
    name: str
    available: bool
    reason: str
    devices: list[DescribedDevice]


class BackendEntry(_BackendEntryRequired, total=False):
    """A document's entry of one backend: availability (and why not), devices, software."""

    #: What kind of device runtime it is (``cpu``, ``gpu``, ``portable``); files written before
    #: backends said their kind lack it (:func:`hwbench.core.backend.described_kind`).
    kind: str
    environment: dict[str, Any]


class Implementation(TypedDict):
    """An implementation as a backend's description lists it (:class:`hwbench.core.backend.Implementation`)."""

    kernel: str
    name: str
    #: ``portable`` or ``native``.
    kind: str
    language: str
    description: str
    dtypes: list[str]
    entry: str
    requires: dict[str, str]
    #: Of ``dtypes``, those run only when ``--dtype`` names them.
    on_request: list[str]


class BackendDescription(BackendEntry, total=False):
    """A backend as the worker describes it (``hwbench.run.describe.describe_backend``): the
    document's entry, its description and its implementations of each kernel. One that could
    not be described at all has no ``description`` or ``environment``."""

    description: str
    implementations: dict[str, list[Implementation]]


class _HwbenchRequired(TypedDict):
    version: str


class HwbenchInfo(_HwbenchRequired, total=False):
    """The hwbench that wrote the file."""

    git_commit: str | None


class _RunRequired(TypedDict):
    id: str
    #: RFC 3339, UTC.
    started: str
    finished: str | None
    #: True when the run was interrupted: ``records`` holds the cases finished so far.
    incomplete: bool
    command: list[str]
    seed: int
    hwbench: HwbenchInfo


class Run(_RunRequired, total=False):
    """A document's ``run``: when, how and with what it was run."""

    profile: str | None
    timeout_s: float | None
    timing: dict[str, Any]
    price: dict[str, Any] | None
    catalog: str | None


class _CpuRequired(TypedDict):
    model: str
    cores: int


class Cpu(_CpuRequired, total=False):
    """The host's CPU."""

    features: list[str]


class DescribedCpu(Cpu, total=False):
    """The host's CPU as hwbench describes it (:func:`hwbench.core.host.cpu_info`)."""

    logical_cpus: int
    machine: str


class _HostRequired(TypedDict):
    hostname: str
    os: str
    cpu: DescribedCpu


class Host(_HostRequired, total=False):
    """A document's ``host``, as the schema gives it."""


class DescribedHost(Host, total=False):
    """The host as hwbench describes it (:func:`hwbench.core.host.host_info`)."""

    kernel: str
    memory_bytes: int | None


class _DocumentRequired(TypedDict):
    schema_version: int
    kind: str
    run: Run
    host: DescribedHost
    software: dict[str, Any]
    settings: dict[str, Any]
    backends: list[BackendEntry]
    records: list[Record]


class Document(_DocumentRequired, total=False):
    """A results document: one run of hwbench. The optional sections are written by the commands
    and options that measure them (``sensors``, ``health``: energy and health readings;
    ``collective``: AllReduce runs; ``burn``; ``compile``; ``roofs``; ``tuning``: ``--tune``;
    ``search``: ``--search``). ``burn`` and ``tuning`` are typed (:mod:`hwbench.core.burn_types`),
    the others free mappings."""

    warnings: list[str]
    sensors: list[dict[str, Any]]
    collective: dict[str, Any]
    burn: list[BurnEntry]
    compile: list[dict[str, Any]]
    roofs: list[dict[str, Any]]
    tuning: list[TuningEntry]
    search: list[dict[str, Any]]
    health: list[dict[str, Any]]
