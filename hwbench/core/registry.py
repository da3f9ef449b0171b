"""Backends and kernels by name, loaded only when asked for.

Built-ins are listed here as ``module:attribute`` strings; third-party backends add
themselves through the ``hwbench.backends`` entry-point group, or for a quick trial
through ``HWBENCH_BACKENDS="name=module:attr,..."`` in the environment.
"""

from __future__ import annotations

import importlib
import os
from functools import cache
from importlib.metadata import entry_points

from hwbench.core.backend import Backend
from hwbench.core.errors import UserError
from hwbench.core.kernel import Kernel

BUILTIN_BACKENDS: dict[str, str] = {
    "cpu": "hwbench.backends.cpu:CPUBackend",
    "opencl": "hwbench.backends.opencl:OpenCLBackend",
    "cuda": "hwbench.backends.cuda:CUDABackend",
    "rocm": "hwbench.backends.rocm:ROCmBackend",
}

BUILTIN_KERNELS: dict[str, str] = {
    "gemm": "hwbench.kernels.gemm.spec:KERNEL",
    "attention": "hwbench.kernels.attention.spec:KERNEL",
    "allreduce": "hwbench.kernels.allreduce.spec:KERNEL",
}

BACKEND_GROUP = "hwbench.backends"
KERNEL_GROUP = "hwbench.kernels"
ENV_BACKENDS = "HWBENCH_BACKENDS"


def _from_env() -> dict[str, str]:
    found: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in os.environ.get(ENV_BACKENDS, "").split(","))):
        name, eq, target = item.partition("=")
        if not eq or ":" not in target:
            raise UserError(f"{ENV_BACKENDS} entry '{item}' is not NAME=module:attribute")
        found[name.strip()] = target.strip()
    return found


def _group(group: str) -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=group)}


def backend_targets() -> dict[str, str]:
    """Every known backend name and where it lives (built-ins first, in a stable order)."""
    return {**BUILTIN_BACKENDS, **_group(BACKEND_GROUP), **_from_env()}


def kernel_targets() -> dict[str, str]:
    """Every known kernel name and where its spec lives."""
    return {**BUILTIN_KERNELS, **_group(KERNEL_GROUP)}


def _load(target: str) -> object:
    module, _, attr = target.partition(":")
    obj: object = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@cache
def get_backend(name: str) -> Backend:
    """The backend called ``name``; UserError if no backend has that name."""
    targets = backend_targets()
    if name not in targets:
        raise UserError(f"unknown backend '{name}'; known backends: {', '.join(targets)}")
    factory = _load(targets[name])
    backend = factory() if callable(factory) else factory
    if not isinstance(backend, Backend):
        raise UserError(f"backend '{name}' ({targets[name]}) is not an hwbench Backend")
    backend.name = name
    return backend


@cache
def get_kernel(name: str) -> Kernel:
    """The kernel spec called ``name``; UserError if no kernel has that name."""
    targets = kernel_targets()
    if name not in targets:
        raise UserError(f"unknown kernel '{name}'; known kernels: {', '.join(targets)}")
    kernel = _load(targets[name])
    if not isinstance(kernel, Kernel):
        raise UserError(f"kernel '{name}' ({targets[name]}) is not an hwbench Kernel")
    return kernel


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
