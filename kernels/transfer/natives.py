"""The copies a user makes with torch, on ``cuda`` and ``rocm`` (``fn(tensors, out, shape, dtype)``).

Host to device copies from a host tensor (``pin_memory()``'d, copied with ``non_blocking=True``, or
pageable with a plain ``copy_``) into ``out``; device to host into a host tensor of the same kind;
on one device ``out.copy_(src)``; to a peer, ``copy_`` into a tensor on the other device (torch
copies on the source device's current stream, through peer access where the devices have it).
Both ways at once is nvbandwidth's pattern: the two copies on two streams, one per device, each
ordered after the start of the call, the call ending when both have arrived.

The call returned carries its destination (``out``): that is the tensor cleared before the timed
calls and read after them. What the copies need of the runtime (``torch.cuda``, device names,
pinning) comes in a :class:`Runtime`, so that the copy logic also runs on CPU tensors in tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hwbench.core.kernel import Shape
from hwbench.kernels.transfer.spec import (
    D2D,
    D2H,
    DIRECTIONS,
    H2D,
    HOST_DIRECTIONS,
    KERNEL,
    NVBANDWIDTH,
    PEER,
    PEER_BIDIR,
    PEER_DIRECTIONS,
)


@dataclass(frozen=True)
class Runtime:
    """What the copies need of the GPU runtime: ``cuda`` (``torch.cuda``: streams, device count, peer
    access), ``device`` (index to torch device) and ``pin`` (a host tensor to a page-locked copy)."""

    cuda: Any
    device: Callable[[int], Any]
    pin: Callable[[Any], Any]


class Copy:
    """The timed call: runs the copies and returns their destination, ``out``."""

    def __init__(self, run: Callable[[], None], out: Any) -> None:
        self._run = run
        self.out = out

    def __call__(self) -> Any:
        self._run()
        return self.out


def torch_runtime() -> Runtime:
    """The runtime of torch's GPU build (CUDA or HIP)."""
    import torch

    return Runtime(torch.cuda, lambda index: torch.device("cuda", index), lambda t: t.pin_memory())


def torch_copy(tensors: Mapping[str, Any], out: Any, shape: Shape, dtype: str) -> tuple[Copy, dict[str, Any]]:
    """cuda, rocm: the copy the shape names, with ``tensors["src"]`` the source on the case's device."""
    import torch

    call, config = build(tensors["src"], out, shape, torch_runtime())
    config["library"] = f"torch {torch.__version__} Tensor.copy_"
    return call, config


def host_tensor(like: Any, pinned: bool, runtime: Runtime, values: bool = True) -> Any:
    """A host tensor of ``like``'s shape holding its values (zeros unless ``values``): page-locked
    where ``pinned``, pageable (ordinary memory) otherwise."""
    host = like.detach().to("cpu", copy=True).contiguous() if values else like.new_zeros(like.shape, device="cpu")
    return runtime.pin(host) if pinned else host


def build(src: Any, out: Any, shape: Shape, runtime: Runtime) -> tuple[Copy, dict[str, Any]]:
    """The call copying as ``shape`` says, from ``src`` (on the case's device) and into ``out`` there
    where the destination is on that device, and what the record's ``config`` says of it."""
    direction, pinned = shape["dir"], bool(shape["pinned"])
    config: dict[str, Any] = {
        "direction": DIRECTIONS[direction],
        "nvbandwidth": NVBANDWIDTH[direction],
        "measures": KERNEL.measures(shape),
        "link": "host" if direction in HOST_DIRECTIONS else "peer" if direction in PEER_DIRECTIONS else "device",
        "bytes_per_copy": shape["bytes"],
    }
    if KERNEL.measures(shape) == "latency":
        config["figure"] = "seconds of one copy (the timing's median_s); GB/s means nothing at this size"
    if direction in HOST_DIRECTIONS:
        config.update(host_memory="pinned" if pinned else "pageable", non_blocking=pinned)
    if direction == H2D:
        host = host_tensor(src, pinned, runtime)
        return Copy(lambda: out.copy_(host, non_blocking=pinned), out), config
    if direction == D2H:
        host = host_tensor(src, pinned, runtime, values=False)
        return Copy(lambda: host.copy_(src, non_blocking=pinned), host), config
    if direction == D2D:
        return Copy(lambda: out.copy_(src, non_blocking=True), out), config
    return _peer(src, shape, runtime, config)


def _peer(src: Any, shape: Shape, runtime: Runtime, config: dict[str, Any]) -> tuple[Copy, dict[str, Any]]:
    """A copy to the peer device (and, both ways, one back from it at the same time)."""
    here, count = src.device.index or 0, runtime.cuda.device_count()
    if not 1 <= shape["peer"] < count:
        raise RuntimeError(f"peer={shape['peer']} does not name another of the {count} device(s) (1 to {count - 1})")
    there = KERNEL.peer_of(shape, here, count)
    access = bool(runtime.cuda.can_device_access_peer(here, there))
    config.update(peer=there, peer_access=access)
    if not access:
        config["note"] = "no peer access between these devices: the driver stages the copy through the host"
    dst = src.new_zeros(src.shape, device=runtime.device(there))
    if shape["dir"] == PEER:
        return Copy(lambda: dst.copy_(src, non_blocking=True), dst), config
    if shape["dir"] != PEER_BIDIR:
        raise RuntimeError(f"transfer dir={shape['dir']} is not a peer copy")
    back_src, back_dst = src.to(runtime.device(there), copy=True), src.new_zeros(src.shape)
    streams = (runtime.cuda.Stream(device=runtime.device(here)), runtime.cuda.Stream(device=runtime.device(there)))
    pairs = ((streams[0], dst, src), (streams[1], back_dst, back_src))

    def both() -> None:
        start = runtime.cuda.current_stream(runtime.device(here))
        for stream, into, source in pairs:
            stream.wait_stream(start)  # after the timer's start event
            with runtime.cuda.stream(stream):
                into.copy_(source, non_blocking=True)
        for stream, _, _ in pairs:
            start.wait_stream(stream)  # the end event follows both copies

    both()
    runtime.cuda.synchronize(runtime.device(here))
    runtime.cuda.synchronize(runtime.device(there))
    if not bool((back_dst == src).all()):
        raise RuntimeError(f"the copy from device {there} back to device {here} did not arrive intact")
    config["timed"] = "from the start event to both copies' end; GB/s counts one direction's bytes"
    config["checked"] = "the copy back (peer to device) once before timing; the measured direction after too"
    return Copy(both, dst), config
