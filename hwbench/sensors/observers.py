"""What observes a backend's device, asked of the backend: its kind and its
:meth:`~hwbench.core.backend.Backend.observers`, never its name.

Sensors, health readings and energy are asked for by backend name and device description (as a
results file has them); this module finds the backend behind the name where this process may
load it, and falls back on the description alone (:func:`~hwbench.core.backend.default_observers`)
where it may not.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from hwbench.core.backend import Backend, Observers, default_observers
from hwbench.core.registry import get_backend, plugin_target


def loaded_backend(name: str) -> Backend | None:
    """The backend called ``name`` where this process may ask it: a built-in one (its module loads
    no SDK), or a third-party one whose module this process imported already (a worker, which
    imports it under a time limit); None otherwise, and for a name no backend has. The process
    that starts the workers never imports a third-party backend's module for its sensors."""
    try:
        target = plugin_target(name)
        if target is not None and target.partition(":")[0] not in sys.modules:
            return None
        return get_backend(name)
    except Exception:  # an unknown or broken backend: its devices are read by their description alone
        return None


def kind_of(backend: str) -> str:
    """The kind of the backend called ``backend`` (:attr:`~hwbench.core.backend.Backend.kind`), or
    empty where this process does not know it (see :func:`loaded_backend`)."""
    found = loaded_backend(backend)
    return found.kind if found is not None else ""


def observers_of(backend: str, device: Mapping[str, Any] | None) -> Observers:
    """What observes device ``device`` (its description) of ``backend``: the backend's answer
    (:meth:`~hwbench.core.backend.Backend.observers`), else the default for its description alone."""
    found = loaded_backend(backend)
    if found is None:
        return default_observers("", device)
    try:
        return found.observers(device)
    except Exception:  # a backend's broken answer: its devices are read as its kind's default
        return default_observers(found.kind, device)
