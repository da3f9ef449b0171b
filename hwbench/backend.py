"""The public contract of a backend, importable here whatever the layout of the package.

Third-party backends subclass :class:`Backend`; everything they need is re-exported from
:mod:`hwbench.core.backend` and :mod:`hwbench.core.kernel`.
"""

from hwbench.core.backend import (
    Availability,
    Backend,
    DeviceInfo,
    Flush,
    Implementation,
    Peak,
    Prepared,
    Timer,
    WallTimer,
)
from hwbench.core.kernel import Kernel, Shape, ShapeParam, Tolerance

__all__ = [
    "Availability",
    "Backend",
    "DeviceInfo",
    "Flush",
    "Implementation",
    "Kernel",
    "Peak",
    "Prepared",
    "Shape",
    "ShapeParam",
    "Timer",
    "Tolerance",
    "WallTimer",
]
