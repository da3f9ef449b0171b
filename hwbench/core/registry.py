"""Backends and kernels by name, loaded only when asked for.

Built-in backends are listed here as ``module:attribute`` strings (kernels in
:data:`hwbench.core.kernel.BUILTIN_KERNELS`, re-exported here); third-party backends add
themselves through the ``hwbench.backends`` entry-point group, or for a quick trial
through ``HWBENCH_BACKENDS="name=module:attr,..."`` in the environment.
"""

from __future__ import annotations

from functools import cache

from hwbench.core.backend import Backend, Implementation, rank_implementations
from hwbench.core.errors import UserError
from hwbench.core.kernel import BUILTIN_KERNELS, KERNEL_GROUP, get_kernel, kernel_targets
from hwbench.core.loading import from_environment, group, load

BUILTIN_BACKENDS: dict[str, str] = {
    "cpu": "hwbench.backends.cpu:CPUBackend",
    "opencl": "hwbench.backends.opencl:OpenCLBackend",
    "cuda": "hwbench.backends.cuda:CUDABackend",
    "rocm": "hwbench.backends.rocm:ROCmBackend",
}

BACKEND_GROUP = "hwbench.backends"
ENV_BACKENDS = "HWBENCH_BACKENDS"


def _from_env() -> dict[str, str]:
    return from_environment(ENV_BACKENDS, "backend", "mine=my_backend:MyBackend")


def backend_targets() -> dict[str, str]:
    """Every known backend name and where it lives (built-ins first, in a stable order)."""
    return {**BUILTIN_BACKENDS, **group(BACKEND_GROUP), **_from_env()}


def plugin_target(name: str) -> str | None:
    """Where a third-party backend lives (``module:attribute``); None for a built-in or unknown one."""
    target = backend_targets().get(name)
    return None if target is None or target == BUILTIN_BACKENDS.get(name) else target


@cache
def get_backend(name: str) -> Backend:
    """The backend called ``name``; UserError if no backend has that name."""
    targets = backend_targets()
    if name not in targets:
        raise UserError(f"unknown backend '{name}'; known backends: {', '.join(targets)}")
    factory = load(targets[name])
    backend = factory() if callable(factory) else factory
    if not isinstance(backend, Backend):
        raise UserError(f"backend '{name}' ({targets[name]}) is not an hwbench Backend")
    backend.name = name
    return backend


__all__ = [
    "BACKEND_GROUP",
    "BUILTIN_BACKENDS",
    "BUILTIN_KERNELS",
    "ENV_BACKENDS",
    "KERNEL_GROUP",
    "backend_targets",
    "get_backend",
    "get_kernel",
    "implementations",
    "kernel_targets",
    "parse_names",
    "plugin_target",
]


def implementations(backend: Backend, kernel: str) -> list[Implementation]:
    """What runs of ``kernel`` on ``backend``: what the backend prepares, or for a kernel that spans
    ranks what its folder declares for the backend (``hwbench.collective`` runs those)."""
    spec = get_kernel(kernel)
    if spec.spans_ranks:
        return rank_implementations(backend.name, spec)
    return backend.implementations(kernel)


def parse_names(text: str | None, known: list[str], what: str, known_label: str | None = None) -> list[str]:
    """Split a comma list of names (``all`` or empty means every known one); UserError on unknown.

    The error reads ``unknown WHAT 'x'; KNOWN_LABEL: a, b`` (KNOWN_LABEL defaults to ``known WHATs``).
    """
    if not text or text.strip() == "all":
        return list(known)
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UserError(f"unknown {what} '{unknown[0]}'; {known_label or f'known {what}s'}: {', '.join(known)}")
    return list(dict.fromkeys(names))
