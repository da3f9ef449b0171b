"""GPU timing without a GPU: the event timer keeps the device busy ahead of its start event, the
flush covers the last-level cache, and SDPA's backend pin is entered once per prepared call
(Triton configurations are timed by ``hwbench tune``: tests/run/test_tune_triton.py).

The device is a fake stream: work runs in order, each item once it was enqueued and once the
item before it ended; events take the time the stream reaches them; the host clock advances by
what each call costs the host. So a plain pair of events around a call with 30 µs of host
overhead and a 5 µs kernel reads 36 µs, and the timer must read 5 µs.
"""

from __future__ import annotations

from types import SimpleNamespace

import needs
import pytest

from hwbench.backends.torch_gpu import (
    BUSY_CYCLES,
    BUSY_TRIES,
    MAX_BUSY_S,
    MIN_BUSY_S,
    EventTimer,
    flush_bytes,
)
from hwbench.core.backend import DeviceInfo
from hwbench.core.registry import get_backend
from hwbench.run.timing import TimingConfig, measure

CLOCK_HZ = 2e9  # the fake device's spin clock
US = 1e-6


class FakeStream:
    """One device queue and the host's clock."""

    def __init__(self) -> None:
        self.host = 0.0
        self.free = 0.0
        self.log: list[str] = []

    def run(self, what: str, seconds: float) -> float:
        """Enqueue ``what`` now; it starts when the device is free; returns its start."""
        start = max(self.free, self.host)
        self.free = start + seconds
        self.log.append(what)
        return start


class FakeEvent:
    def __init__(self, stream: FakeStream, name: str) -> None:
        self.stream, self.name, self.at = stream, name, None

    def record(self) -> None:
        self.at = self.stream.run(f"record {self.name}", 0.0)
        self.stream.host += 1 * US

    def synchronize(self) -> None:
        self.stream.log.append(f"sync {self.name}")
        self.stream.host = max(self.stream.host, self.at)

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.at - self.at) * 1e3  # milliseconds, as torch.cuda.Event


def fake_cuda(stream: FakeStream, sleep: bool = True) -> SimpleNamespace:
    """torch.cuda as the timer uses it: Event (named in creation order) and _sleep."""
    names = iter(["ahead", "start", "end"])
    cuda = SimpleNamespace(Event=lambda enable_timing: FakeEvent(stream, next(names)))
    if sleep:

        def _sleep(cycles: int) -> None:
            stream.run(f"spin {cycles}", cycles / CLOCK_HZ)
            stream.host += 2 * US

        cuda._sleep = _sleep
    return cuda


def small_call(stream: FakeStream, host_s: float = 30 * US, kernel_s: float = 5 * US):
    def call() -> None:
        stream.host += host_s  # Python, the launcher, the driver
        stream.run("kernel", kernel_s)

    return call


def test_plain_events_would_count_the_host_overhead() -> None:
    """The fake is honest: without work ahead of the start event the launch is timed too."""
    stream = FakeStream()
    timer = EventTimer("cuda_event", cuda=fake_cuda(stream, sleep=False), clock=lambda: stream.host)
    assert timer.name == "cuda_event"  # the record says the method
    assert timer.time(small_call(stream)) == pytest.approx(36 * US)


def test_the_start_event_is_recorded_after_the_device_was_given_work() -> None:
    stream = FakeStream()
    timer = EventTimer("cuda_event", cuda=fake_cuda(stream), clock=lambda: stream.host)
    seconds = timer.time(small_call(stream))
    assert stream.log == [
        "record ahead",
        f"spin {BUSY_CYCLES}",
        "record start",
        "kernel",
        "record end",
        "sync end",
    ]
    assert seconds == pytest.approx(5 * US)
    assert timer.name == "cuda_event+busy_ahead"


def test_a_host_slower_than_the_spin_lengthens_it_and_retimes() -> None:
    stream = FakeStream()
    timer = EventTimer("hip_event", cuda=fake_cuda(stream), clock=lambda: stream.host)
    seconds = timer.time(small_call(stream, host_s=300 * US))
    assert seconds == pytest.approx(5 * US)
    assert stream.log.count("kernel") == 2  # the first timing counted host time: timed again
    assert timer.cycles > 2 * 300 * US * CLOCK_HZ  # the next spin outlasts twice the host's time
    grown = timer.cycles
    assert timer.time(small_call(stream, host_s=300 * US)) == pytest.approx(5 * US)
    assert timer.cycles == pytest.approx(grown, rel=1e-3) and stream.log.count("kernel") == 3  # timed once
    assert timer.time(small_call(stream)) == pytest.approx(5 * US)
    assert timer.cycles < grown / 4 and stream.log.count("kernel") == 4  # a quick host: a short spin again


def test_the_spin_never_grows_past_its_bound() -> None:
    stream = FakeStream()
    timer = EventTimer("cuda_event", cuda=fake_cuda(stream), clock=lambda: stream.host)
    timer.time(small_call(stream, host_s=1.0))  # a call whose enqueue takes a second
    assert stream.log.count("kernel") <= BUSY_TRIES
    assert timer.cycles <= MAX_BUSY_S * CLOCK_HZ * 1.01


def test_the_spin_never_shrinks_below_its_bound() -> None:
    stream = FakeStream()
    timer = EventTimer("cuda_event", cuda=fake_cuda(stream), clock=lambda: stream.host)
    timer.time(small_call(stream, host_s=0.0))
    assert timer.cycles == pytest.approx(MIN_BUSY_S * CLOCK_HZ, rel=0.01)


def test_measure_records_the_method_and_kernel_time_alone() -> None:
    stream = FakeStream()
    timer = EventTimer("cuda_event", cuda=fake_cuda(stream), clock=lambda: stream.host)
    flushes: list[int] = []
    timing = measure(
        small_call(stream),
        timer,
        lambda: flushes.append(1) or stream.run("flush", 20 * US),
        TimingConfig(warmup_s=0.0, budget_s=1.0, min_samples=5),
    )
    assert timing.timer == "cuda_event+busy_ahead" and timing.flushed
    assert timing.samples == pytest.approx([5 * US] * len(timing.samples))
    assert len(flushes) == len(timing.samples)


@pytest.mark.parametrize(
    ("name", "l2", "flushed"),
    [
        ("AMD Instinct MI300X", 4 * 2**20, 2 * 256 * 2**20),  # the Infinity Cache, not one XCD's L2
        ("NVIDIA H200", 50 * 2**20, 2 * 60 * 2**20),  # the catalog's L2 where it is the larger
        ("NVIDIA H100 80GB HBM3", 50 * 2**20, 2 * 50 * 2**20),
        ("Some New GPU", 96 * 2**20, 2 * 96 * 2**20),  # unknown to the catalog: the reported L2
    ],
)
def test_the_flush_covers_the_last_level_cache(
    name: str, l2: int, flushed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = needs.module("torch")
    backend = get_backend("rocm" if "AMD" in name else "cuda")
    props = SimpleNamespace(name=name, L2_cache_size=l2, warp_size=32, shared_memory_per_block=0, major=9, minor=0)
    props.multi_processor_count = 132
    extra = backend.device_extra(0, props)
    assert flush_bytes(extra) == flushed
    if flushed > 2 * l2:
        assert extra["llc_source"].startswith("catalog ") and extra["llc_bytes"] == flushed // 2
    sizes: list[int] = []
    monkeypatch.setattr(torch, "empty", lambda count, dtype, device: sizes.append(count * 4) or torch.zeros(1))
    device = DeviceInfo(backend.name, 0, name, "test", "gpu", extra=extra)
    backend.flush(device)
    assert sizes == [flushed]
