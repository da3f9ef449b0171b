"""Transfers on GPUs, as nvbandwidth measures them: host to device and device to host (pinned and
pageable host memory), a copy within one device, peer copies between every pair of devices (one
way, and both ways at once), and the latency of a small copy.

A case's shape says the direction (``dir``), the bytes of one copy (``bytes``), the host memory
(``pinned``) and, for peer copies, the other device (``peer``, counted on from the case's device,
wrapping round: 1 is the next; 0, the profiles' value, is every other device, one case each).
GB/s is ``bytes`` (one direction) over the time of one call; a bidirectional case counts the bytes
of the direction it is named for, both copies running (nvbandwidth's ``*_bidirectional_*`` figures
are the same kind: one direction, the other interfering). A case of at most
:data:`LATENCY_MAX_BYTES` measures latency: its figure is the seconds of one copy, not GB/s. Only
GPU backends implement it: natives, no portable source.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from hwbench.core.errors import UserError
from hwbench.core.kernel import Kernel, Native, Shape, ShapeParam, Tolerance, seeded_uniform

#: ``dir`` values: what is copied where.
H2D, D2H, D2D, PEER, PEER_BIDIR = range(5)
DIRECTIONS = {
    H2D: "host to device",
    D2H: "device to host",
    D2D: "device to device (one device)",
    PEER: "device to peer device",
    PEER_BIDIR: "device to peer and peer to device at once",
}
#: The nvbandwidth test each direction corresponds to (copy-engine copies; host memory pinned there).
NVBANDWIDTH = {
    H2D: "host_to_device_memcpy_ce",
    D2H: "device_to_host_memcpy_ce",
    D2D: "device_local_copy",
    PEER: "device_to_device_memcpy_write_ce",
    PEER_BIDIR: "device_to_device_bidirectional_memcpy_write_ce",
}
HOST_DIRECTIONS = (H2D, D2H)
PEER_DIRECTIONS = (PEER, PEER_BIDIR)
#: ``peer`` of the profiles' peer copies: every other device, one case each.
EVERY_PEER = 0
#: Copies of at most this many bytes measure latency (seconds per copy), not bandwidth.
LATENCY_MAX_BYTES = 4096
MIB = 2**20
#: nvbandwidth's default buffer size (``--bufferSize 512``, MiB).
NVBANDWIDTH_BYTES = 512 * MIB
#: The small copy whose latency is measured: one fp32 element.
LATENCY_BYTES = 4
ELEMENT = 4  # bytes of the one dtype, fp32


def _torch_copy(vendor_call: str) -> Native:
    """``Tensor.copy_``, which the vendor's runtime does with ``vendor_call``."""
    return Native(
        "torch_copy",
        "torch",
        f"Tensor.copy_ ({vendor_call} on the copy engines; pin_memory for pinned host memory)",
        ("fp32",),
        "natives:torch_copy",
    )


def _t(direction: int, nbytes: int, pinned: int = 1) -> dict[str, int]:
    return {"dir": direction, "bytes": nbytes, "pinned": pinned, "peer": EVERY_PEER}


def _bandwidth(nbytes: int) -> tuple[dict[str, int], ...]:
    """Every direction at ``nbytes``, host copies from pinned and from pageable memory."""
    return (
        _t(H2D, nbytes),
        _t(D2H, nbytes),
        _t(H2D, nbytes, pinned=0),
        _t(D2H, nbytes, pinned=0),
        _t(D2D, nbytes),
        _t(PEER, nbytes),
        _t(PEER_BIDIR, nbytes),
    )


def _latency() -> tuple[dict[str, int], ...]:
    return (_t(H2D, LATENCY_BYTES), _t(D2H, LATENCY_BYTES), _t(D2D, LATENCY_BYTES), _t(PEER, LATENCY_BYTES))


class Transfer(Kernel):
    """One copy of ``bytes`` in one direction; the output is the destination, checked exactly."""

    name = "transfer"
    description = "GPU copies: host<->device (pinned, pageable), within a device, between peers; small-copy latency"
    params = (
        ShapeParam("dir", "0 host->device, 1 device->host, 2 device->device, 3 peer, 4 peer both ways", minimum=0),
        ShapeParam("bytes", "bytes of one copy, a multiple of 4", aliases=("size",), minimum=ELEMENT),
        ShapeParam("pinned", "host copies: 1 page-locked host memory, 0 pageable", default=1, minimum=0),
        ShapeParam(
            "peer", "peer copies: the other device, counted on from this one (0: every other)", default=0, minimum=0
        ),
    )
    dtypes = ("fp32",)
    profiles = {
        # No peer copies in quick: on an 8-GPU node they are 56 cases (standard and full have them).
        "quick": (_t(H2D, 64 * MIB), _t(D2H, 64 * MIB), _t(D2D, 64 * MIB), _t(H2D, LATENCY_BYTES)),
        "standard": (*_bandwidth(NVBANDWIDTH_BYTES), *_latency()),
        "full": (*_bandwidth(NVBANDWIDTH_BYTES), *_bandwidth(64 * MIB), _t(H2D, 2048 * MIB), *_latency()),
    }
    natives = {"cuda": (_torch_copy("cudaMemcpyAsync"),), "rocm": (_torch_copy("hipMemcpyAsync"),)}

    def complete(self, given: Mapping[str, int]) -> dict[str, int]:
        """Fill defaults and check a user's shape; the direction, size and flags are checked too."""
        shape = super().complete(given)
        if shape["dir"] not in DIRECTIONS:
            known = ", ".join(f"{k} {v}" for k, v in DIRECTIONS.items())
            raise UserError(f"transfer dir={shape['dir']} is not a direction; directions: {known}")
        if shape["bytes"] % ELEMENT:
            raise UserError(f"transfer bytes={shape['bytes']} is not a multiple of {ELEMENT} (fp32 elements)")
        if shape["pinned"] not in (0, 1):
            raise UserError(f"transfer pinned={shape['pinned']} must be 0 (pageable) or 1 (pinned)")
        return shape

    def device_shapes(self, shape: Shape, index: int, count: int) -> tuple[list[dict[str, int]], str]:
        """Peer copies from device ``index`` of ``count``: one shape per other device where ``peer`` is
        0 (``peer`` 1 to ``count - 1``: the next device, and so on), none and why where there is
        no other device or ``peer`` counts past the last."""
        if shape["dir"] not in PEER_DIRECTIONS:
            return [dict(shape)], ""
        if count < 2:
            return [], f"peer copies need two devices or more; this backend has {count}"
        if shape["peer"] == EVERY_PEER:
            return [{**shape, "peer": step} for step in range(1, count)], ""
        if shape["peer"] >= count:
            return (
                [],
                f"peer={shape['peer']} counts past the other devices: this backend has {count} (peer 1 to {count - 1})",
            )
        return [dict(shape)], ""

    def peer_of(self, shape: Shape, index: int, count: int) -> int:
        """The device a peer copy from device ``index`` of ``count`` goes to."""
        return (index + shape["peer"]) % count

    def measures(self, shape: Shape) -> str:
        """``latency`` for a small copy (its figure is seconds per copy), else ``bandwidth``."""
        return "latency" if shape["bytes"] <= LATENCY_MAX_BYTES else "bandwidth"

    def output_shape(self, shape: Shape) -> tuple[int, ...]:
        return (shape["bytes"] // ELEMENT,)

    def flops(self, shape: Shape) -> float:
        return 0.0

    def bytes_moved(self, shape: Shape, dtype: str) -> float:
        """The bytes of one copy: one direction, as nvbandwidth counts them (bidirectional too)."""
        return float(shape["bytes"])

    def make_inputs(self, shape: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
        return {"src": seeded_uniform(self.output_shape(shape), "fp32", seed, 1)}

    def reference(self, inputs: Mapping[str, np.ndarray], shape: Shape) -> np.ndarray:
        return inputs["src"].astype(np.float64)

    def tolerance(self, dtype: str, shape: Shape) -> Tolerance:
        # A copy is right bit for bit: every element of the destination equals its source.
        return Tolerance(atol=0.0, rtol=0.0, exact=True)


KERNEL = Transfer()
