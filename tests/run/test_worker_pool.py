"""The CPU kernels' worker pool and the native spin-wait its workers keep between launches."""

from __future__ import annotations

import ctypes
import threading
import time

import needs
import pytest

needs.module("llvmlite")

from hwbench.kernels.llvmir import spin  # noqa: E402
from hwbench.kernels.llvmir.cpu_launch import WorkerPool  # noqa: E402


def test_the_wait_returns_the_new_value_or_gives_up() -> None:
    wait = spin.waiter()
    counter = ctypes.c_int64(5)
    assert wait(ctypes.addressof(counter), 4, 10) == 5  # already changed: at once
    assert wait(ctypes.addressof(counter), 5, 1000) == 5  # unchanged: after its iterations
    threading.Timer(0.02, lambda: setattr(counter, "value", 6)).start()
    start = time.perf_counter()
    assert wait(ctypes.addressof(counter), 5, 10**12) == 6  # a change by another thread ends it
    assert time.perf_counter() - start < 5


def test_iterations_are_calibrated_to_about_the_spin_time() -> None:
    wait, iterations = spin.waiter(), spin.iterations_for()
    counter = ctypes.c_int64(0)
    start = time.perf_counter()
    wait(ctypes.addressof(counter), 0, iterations)
    assert 0.2 * spin.SPIN_S < time.perf_counter() - start < 50 * spin.SPIN_S


def test_every_worker_runs_every_launch_soon_after_and_long_after_the_last() -> None:
    pool = WorkerPool(3)
    for pause in (0.0, 0.0, 3 * spin.SPIN_S, 0.0, 3 * spin.SPIN_S):  # spinning, then asleep
        seen: list[int] = []
        lock = threading.Lock()

        def job(w: int, seen: list[int] = seen, lock: threading.Lock = lock) -> None:
            with lock:
                seen.append(w)

        time.sleep(pause)
        pool.launch(job)
        assert sorted(seen) == [0, 1, 2]


def test_an_error_in_a_worker_reaches_the_caller() -> None:
    pool = WorkerPool(2)

    def job(w: int) -> None:
        if w == 1:
            raise ValueError("worker 1 failed")

    with pytest.raises(ValueError, match="worker 1 failed"):
        pool.launch(job)
    pool.launch(lambda w: None)  # and the pool goes on
