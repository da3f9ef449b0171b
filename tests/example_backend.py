"""A worked example backend: a pretend device that computes with NumPy.

Registered without packaging through ``HWBENCH_BACKENDS=example=example_backend:ExampleBackend``
(with ``tests/`` on ``PYTHONPATH``); ``docs/extending.md`` walks through it. It runs whatever a
kernel's folder declares in its ``natives`` for the name ``example`` (the worked example kernel,
``tests/example_kernel/``, declares NumPy), calling each as ``fn(inputs, shape, dtype)`` on the
device's copies of the inputs, the cpu backend's convention. It compiles no language, so it
offers no portable source; a backend that compiles one names it in ``languages`` and builds and
launches what the source's bindings' :class:`~hwbench.core.launch.Launch` says in ``prepare``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from hwbench.backend import Availability, Backend, DeviceInfo, Implementation, Kernel, Prepared, Shape
from hwbench.core.loading import load_callable


class _OnDevice(Prepared):
    """A case ready to run: the inputs moved to the device, the native's call bound to them."""

    def __init__(self, call: Callable[[], Any], config: Mapping[str, Any]) -> None:
        self._call = call
        self._last: Any = None
        self.config = dict(config)  # what the record's ``config`` says of the case

    def run(self) -> None:
        # One call, timed by the backend's timer (here the default: the wall clock around it).
        self._last = self._call()

    def result(self) -> np.ndarray:
        # The output of the last run, on the host: the pipeline checks it against the reference.
        return np.asarray(self._last)


class ExampleBackend(Backend):
    """One pretend device whose memory is the host's and whose compute is NumPy."""

    name = "example"  # get_backend sets the name it was registered under
    description = "worked example: a pretend device computing with NumPy"

    def probe(self) -> Availability:
        # Whether the backend can run here, and why not; a real one imports its SDK here, never at
        # module level (listing backends must load no driver), and never raises.
        return Availability(True)

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(backend=self.name, index=0, name="Example Device", vendor="example", kind="accelerator")]

    def prepare(
        self,
        impl: Implementation,
        kernel: Kernel,
        inputs: Mapping[str, np.ndarray],
        shape: Shape,
        dtype: str,
        device: DeviceInfo,
    ) -> Prepared:
        """Move the inputs to the device (copies) and bind the native to them."""
        on_device = {name: np.array(array, copy=True) for name, array in inputs.items()}
        call, config = load_callable(impl.entry)(on_device, shape, dtype)
        return _OnDevice(call, config)
