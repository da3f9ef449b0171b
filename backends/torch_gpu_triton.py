"""Triton kernels on the torch GPU backends (cuda, rocm): their tuning space and one case prepared
in one configuration.

A kernel's ``triton.py`` gives the space (``tuning_space(arch, dtype, shape)``, the derived
configuration first) as its ``Config`` objects; here they become plain dicts (their ``as_dict``,
JSON as it stands) for ``hwbench tune`` and the tuning cache, and a dict is read back as the
point of the case's space it names (:func:`config_of`), so only configurations this case's
space holds ever run (a TMA tile tuned on rows of 16-byte multiples is no point of a shape
whose rows are not). :func:`prepare` runs the candidate it is given (the tuner's), else the
tuned entry of the case's key (:func:`hwbench.core.tuning.chosen`), else the derived one; it
compiles by running the kernel once, and never times: choosing the fastest per device is
``hwbench tune`` / ``run --tune``. Where the derived (or tuned) configuration does not compile
here (too much shared memory on a smaller GPU), the next point of the space runs, and the record
says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from hwbench.core.backend import DeviceInfo, Implementation
from hwbench.core.host import package_version
from hwbench.core.kernel import Shape
from hwbench.core.tuning import Space, TuningKey, key_for
from hwbench.core.tuning import chosen as tuning_choice

#: What the record of a case that ran its derived configuration says.
UNTUNED = "untuned: the derived configuration, the first of {of} for {arch} (hwbench tune or run --tune times them all)"
#: Keys of a configuration's plain form that describe it without choosing it (ignored when matching).
REMARKS = ("note",)


def tuning_key(impl: Implementation, shape: Shape, dtype: str, device: DeviceInfo) -> TuningKey:
    """A Triton case's key: the device (its libraries carry torch's and Triton's versions), Triton's
    version again, and the hashes of the kernel's folder and of ``hwbench.kernels`` (``triton_compat``)."""
    return key_for(device, impl, dtype, shape, {"triton": package_version("triton")}, ("hwbench.kernels",))


def plain(config: Any) -> dict[str, Any]:
    """A kernel's ``Config`` as the plain dict the tuner, the cache and the record hold."""
    return dict(config.as_dict())


def _choosing(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in REMARKS}


def config_of(points: list[Any], data: Mapping[str, Any]) -> Any | None:
    """The point of ``points`` (a space's ``Config`` objects) whose plain form is ``data``, its
    remarks (``note``) aside; None when the space holds none."""
    wanted = _choosing(data)
    return next((p for p in points if _choosing(plain(p)) == wanted), None)


def space(source: Any, impl: Implementation, shape: Shape, dtype: str, device: DeviceInfo) -> Space:
    """What ``hwbench tune`` tries for a Triton case on ``device`` (``source``: the kernel's
    ``triton.py``, imported only where Triton is installed; None where it is not)."""
    key = tuning_key(impl, shape, dtype, device)
    if source is None:
        return Space(key, [], "triton is not installed")
    if not hasattr(source, "tuning_space"):
        return Space(key, [], f"{impl.name} has no Triton tuning space")
    found = [plain(c) for c in source.tuning_space(device.arch, dtype, shape)]
    return Space(key, found, "" if found else f"no {impl.name} {dtype} Triton kernel for {device.arch}")


def compile_failures() -> tuple[type[BaseException], ...]:
    """What a configuration that cannot run here raises at its first launch: Triton's compiler,
    the device's resources (shared memory, registers), a TMA descriptor the tensors do not fit."""
    # Triton is optional: only a Triton case, where it is installed, gets here.
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    return (CompilationError, OutOfResources, ValueError)


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


def _describe(config: Any) -> str:
    return ",".join(f"{k}={v}" for k, v in _choosing(plain(config)).items())


def prepare(
    source: Any,
    impl: Implementation,
    tensors: Mapping[str, Any],
    out: Any,
    shape: Shape,
    dtype: str,
    device: DeviceInfo,
    config: Mapping[str, Any] | None = None,
) -> tuple[Callable[[], Any], dict[str, Any], float]:
    """The case in ``config`` (a candidate, which must be a point of its space), else its tuned
    entry, else the derived configuration, compiled by one launch: ``(call, record config,
    compile seconds)``. The record's ``config.tuning`` says which ran and, for a derived one, that
    it was not tuned. A candidate that fails raises; a tuned or derived one that does not compile
    here gives way to the next point of the space (said in ``tuning.note``)."""
    points = list(source.tuning_space(device.arch, dtype, shape))
    if not points:
        raise ValueError(f"{impl.name} has no {dtype} Triton configuration for {device.arch}")
    chosen, tuning = tuning_choice(tuning_key(impl, shape, dtype, device), config)
    start = time.perf_counter()
    first = None if chosen is None else config_of(points, chosen)
    if config is not None:
        if first is None:
            raise ValueError(f"not a configuration of this case's space on {device.arch}: {dict(config)}")
        call = _compiled(source, first, tensors, out, shape, dtype)
        return call, _record(first, device, tuning), time.perf_counter() - start
    notes = []
    if chosen is not None and first is None:
        notes.append(f"the tuned entry ({', '.join(f'{k}={v}' for k, v in chosen.items())}) is not in this space")
        tuning = {"source": "derived"}
    if tuning["source"] == "derived":
        notes.insert(0, UNTUNED.format(of=len(points), arch=device.arch))
    order = ([first] if first is not None else []) + [p for p in points if p is not first]
    call, ran = _first_that_compiles(source, order, tensors, out, shape, dtype, notes)
    if ran is not order[0]:
        tuning = {"source": "derived"}
    tuning = {"of": len(points), **tuning, **({"note": "; ".join(notes)} if notes else {})}
    return call, _record(ran, device, tuning), time.perf_counter() - start


def _first_that_compiles(
    source: Any, order: list[Any], tensors: Mapping[str, Any], out: Any, shape: Shape, dtype: str, notes: list[str]
) -> tuple[Callable[[], Any], Any]:
    """The call of the first of ``order`` that compiles and launches here, and that configuration;
    each that did not is noted; the last one's failure is raised."""
    failures = compile_failures()
    for number, cfg in enumerate(order):
        try:
            call = _compiled(source, cfg, tensors, out, shape, dtype)
        except failures as exc:
            if number == len(order) - 1:
                raise
            notes.append(f"{_describe(cfg)} failed here: {_first_line(exc)}")
            continue
        if number:
            notes.append(f"ran {_describe(cfg)} instead")
        return call, cfg
    raise ValueError("no configuration to run")


def _compiled(
    source: Any, cfg: Any, tensors: Mapping[str, Any], out: Any, shape: Shape, dtype: str
) -> Callable[[], Any]:
    """The case's call in ``cfg``, launched once (Triton compiles at the first launch)."""

    def call() -> Any:
        source.launch_case(tensors, out, shape, dtype, cfg)
        return out

    call()
    return call


def _record(cfg: Any, device: DeviceInfo, tuning: dict[str, Any]) -> dict[str, Any]:
    return {**plain(cfg), "arch": device.arch, "tuning": tuning}
