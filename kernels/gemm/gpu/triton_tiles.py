"""What GEMM's two Triton modules share (``triton.py``: fp16, bf16, fp32, tf32; ``triton_lowp.py``: fp8
and int8): one point of a tuning space (:class:`Config`), the grouped tile order (:func:`tile_of`) and
an architecture's major version (:func:`arch_major`), the SMs a persistent grid spans (:func:`device_sms`).

Importing this module imports Triton: only backends and ``hwbench compile`` do."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import triton
import triton.language as tl


@triton.jit
def tile_of(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(row, column) of tile number ``tile`` in groups of ``GROUP_M`` tile rows (L2 reuse)."""
    per_group = GROUP_M * tiles_n
    first_m = (tile // per_group) * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (tile % per_group) % group_rows
    pid_n = (tile % per_group) // group_rows
    return pid_m, pid_n


@dataclass(frozen=True)
class Config:
    """One point of the tuning space: the kernel (classic, or persistent with TMA), tile sizes,
    grouping, warps and pipeline stages; ``note`` says why a TMA kernel was not used."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3
    extra: dict[str, Any] = field(default_factory=dict)  # backend options, e.g. AMD's waves_per_eu
    tma: bool = False
    note: str = ""

    def constexprs(self) -> dict[str, int]:
        """The kernel's tile constexprs."""
        return {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_K": self.block_k, "GROUP_M": self.group_m}

    def options(self) -> dict[str, Any]:
        """Launch/compile options (``num_warps``, ``num_stages`` and backend extras)."""
        return {"num_warps": self.num_warps, "num_stages": self.num_stages, **self.extra}

    def as_dict(self) -> dict[str, Any]:
        """Plain form for results records."""
        kind = {"kernel": "tma_persistent" if self.tma else "classic"}
        return {**kind, **self.constexprs(), **self.options(), **({"note": self.note} if self.note else {})}


def device_sms(tensor: Any) -> int:
    """Streaming multiprocessors of the GPU holding ``tensor`` (the persistent kernels' grid)."""
    import torch  # optional SDK: only a device launch of a persistent kernel gets here

    return int(torch.cuda.get_device_properties(tensor.device).multi_processor_count)


def arch_major(arch: str) -> int:
    """The major version of an NVIDIA architecture name (``sm_90`` -> 9, ``sm_100a`` -> 10; 0 for others)."""
    if not arch.startswith("sm_"):
        return 0
    digits = "".join(ch for ch in arch.split("_")[-1] if ch.isdigit())
    return int(digits[:-1] or 0)
