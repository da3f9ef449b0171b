"""What CuPy calls need the same way on CuPy 12 to 14: torch's current stream as a CuPy stream.

CuPy 14 deprecates ``cupy.cuda.ExternalStream`` in favour of ``cupy.cuda.Stream.from_external``,
which takes any object with ``__cuda_stream__`` (torch's streams have it); older CuPy has only
the former. :class:`Streams` makes each CuPy stream once, not once per launch. The caller
passes the ``cupy`` module, so importing this module imports nothing optional.
"""

from __future__ import annotations

from typing import Any


def cupy_stream(cupy: Any, torch_stream: Any) -> Any:
    """A CuPy stream over ``torch_stream`` (the same CUDA stream, not a new one)."""
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None and hasattr(torch_stream, "__cuda_stream__"):
        return from_external(torch_stream)
    return cupy.cuda.ExternalStream(torch_stream.cuda_stream, torch_stream.device.index)


class Streams:
    """CuPy streams over torch streams, one per CUDA stream, made on first use (per loaded kernel)."""

    def __init__(self, cupy: Any) -> None:
        self.cupy = cupy
        self.made: dict[int, Any] = {}

    def get(self, torch_stream: Any) -> Any:
        """The CuPy stream over ``torch_stream``."""
        key = int(torch_stream.cuda_stream)
        if key not in self.made:
            self.made[key] = cupy_stream(self.cupy, torch_stream)
        return self.made[key]
